// SPDX-License-Identifier: Apache-2.0
#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kareus::report::internal {

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Num(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  std::string text = buffer;
  // A tick at -1e-17 is 0, not "-0".
  if (text.front() == '-' && text.find_first_not_of("-0.") == std::string::npos) text.erase(0, 1);
  return text;
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) ticks.push_back(t);
  return ticks;
}

namespace {
constexpr double kLeft = 70, kRight = 20, kTop = 20, kBottom = 50;

int Decimals(const std::vector<double>& ticks) {
  if (ticks.size() < 2) return 2;
  const double step = ticks[1] - ticks[0];
  return std::max(0, static_cast<int>(std::ceil(-std::log10(step) + 1e-9)));
}
}  // namespace

Plot::Plot(int width, int height, double x_lo, double x_hi, double y_lo, double y_hi)
    : width_(width), height_(height) {
  const double xpad = (x_hi - x_lo) * 0.04 + 1e-12, ypad = (y_hi - y_lo) * 0.06 + 1e-12;
  x_ = {x_lo - xpad, x_hi + xpad, kLeft, width - kRight};
  y_ = {y_lo - ypad, y_hi + ypad, height - kBottom, kTop};
}

void Plot::Axes(const std::string& x_label, const std::string& y_label) {
  std::string s;
  s += "<rect x='" + Num(kLeft, 0) + "' y='" + Num(kTop, 0) + "' width='" +
       Num(width_ - kLeft - kRight, 0) + "' height='" + Num(height_ - kTop - kBottom, 0) +
       "' fill='#fcfcfd' stroke='#888'/>";
  const auto xt = NiceTicks(x_.lo, x_.hi), yt = NiceTicks(y_.lo, y_.hi);
  for (double t : xt) {
    const double px = x_.Map(t);
    s += "<line x1='" + Num(px, 1) + "' y1='" + Num(kTop, 0) + "' x2='" + Num(px, 1) + "' y2='" +
         Num(height_ - kBottom, 0) + "' stroke='#e4e4e8'/>";
    s += "<text x='" + Num(px, 1) + "' y='" + Num(height_ - kBottom + 16, 0) +
         "' font-size='11' text-anchor='middle'>" + Num(t, Decimals(xt)) + "</text>";
  }
  for (double t : yt) {
    const double py = y_.Map(t);
    s += "<line x1='" + Num(kLeft, 0) + "' y1='" + Num(py, 1) + "' x2='" + Num(width_ - kRight, 0) +
         "' y2='" + Num(py, 1) + "' stroke='#e4e4e8'/>";
    s += "<text x='" + Num(kLeft - 6, 0) + "' y='" + Num(py + 4, 1) +
         "' font-size='11' text-anchor='end'>" + Num(t, Decimals(yt)) + "</text>";
  }
  s += "<text x='" + Num((kLeft + width_ - kRight) / 2, 0) + "' y='" + Num(height_ - 10, 0) +
       "' font-size='12' text-anchor='middle'>" + Escape(x_label) + "</text>";
  s += "<text transform='translate(16," + Num((kTop + height_ - kBottom) / 2, 0) +
       ") rotate(-90)' font-size='12' text-anchor='middle'>" + Escape(y_label) + "</text>";
  body_ = s + body_;
}

void Plot::Polyline(const std::vector<std::pair<double, double>>& xy, const std::string& color,
                    double width, bool dashed) {
  if (xy.empty()) return;
  std::string points;
  for (const auto& [x, y] : xy) points += Num(x_.Map(x), 1) + "," + Num(y_.Map(y), 1) + " ";
  body_ += "<polyline fill='none' stroke='" + color + "' stroke-width='" + Num(width, 1) + "'" +
           (dashed ? " stroke-dasharray='5,4'" : "") + " points='" + points + "'/>";
}

void Plot::Marker(double x, double y, const std::string& color, double radius,
                  const std::string& title, bool hollow) {
  body_ +=
      "<circle cx='" + Num(x_.Map(x), 1) + "' cy='" + Num(y_.Map(y), 1) + "' r='" + Num(radius, 1) +
      "' " +
      (hollow ? "fill='white' stroke='" + color + "' stroke-width='2'" : "fill='" + color + "'") +
      ">" + (title.empty() ? "" : "<title>" + Escape(title) + "</title>") + "</circle>";
}

void Plot::VerticalLine(double x, const std::string& color, const std::string& label) {
  const double px = x_.Map(x);
  body_ += "<line x1='" + Num(px, 1) + "' y1='" + Num(kTop, 0) + "' x2='" + Num(px, 1) + "' y2='" +
           Num(height_ - kBottom, 0) + "' stroke='" + color + "' stroke-dasharray='3,3'/>";
  body_ += "<text x='" + Num(px + 3, 1) + "' y='" + Num(kTop + 12, 0) + "' font-size='10' fill='" +
           color + "'>" + Escape(label) + "</text>";
}

void Plot::HorizontalLine(double y, const std::string& color, const std::string& label) {
  const double py = y_.Map(y);
  body_ += "<line x1='" + Num(kLeft, 0) + "' y1='" + Num(py, 1) + "' x2='" +
           Num(width_ - kRight, 0) + "' y2='" + Num(py, 1) + "' stroke='" + color +
           "' stroke-dasharray='3,3'/>";
  body_ += "<text x='" + Num(width_ - kRight - 4, 0) + "' y='" + Num(py - 4, 1) +
           "' font-size='10' text-anchor='end' fill='" + color + "'>" + Escape(label) + "</text>";
}

void Plot::Legend(const std::vector<std::pair<std::string, std::string>>& entries) {
  double y = kTop + 14;
  for (const auto& [label, color] : entries) {
    const double x = width_ - kRight - 190;
    body_ += "<rect x='" + Num(x, 0) + "' y='" + Num(y - 9, 0) + "' width='12' height='12' fill='" +
             color + "'/><text x='" + Num(x + 18, 0) + "' y='" + Num(y + 1, 0) +
             "' font-size='12'>" + Escape(label) + "</text>";
    y += 17;
  }
}

void Plot::LegendBelow(const std::vector<std::pair<std::string, std::string>>& entries) {
  constexpr double kRow = 20, kEntryGap = 22, kCharWidth = 6.6;  // 12 px sans-serif, generous
  double x = kLeft;
  double y = height_ + legend_rows_height_ + 14;
  legend_rows_height_ += static_cast<int>(kRow);
  for (const auto& [label, color] : entries) {
    const double width = 18 + kCharWidth * static_cast<double>(label.size());
    if (x > kLeft && x + width > width_ - kRight) {  // next row
      x = kLeft;
      y += kRow;
      legend_rows_height_ += static_cast<int>(kRow);
    }
    body_ += "<rect x='" + Num(x, 0) + "' y='" + Num(y - 9, 0) + "' width='12' height='12' fill='" +
             color + "'/><text x='" + Num(x + 18, 0) + "' y='" + Num(y + 1, 0) +
             "' font-size='12'>" + Escape(label) + "</text>";
    x += width + kEntryGap;
  }
}

std::string Plot::Finish() const {
  const int height = height_ + legend_rows_height_;
  return "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width_) + "' height='" +
         std::to_string(height) + "' viewBox='0 0 " + std::to_string(width_) + " " +
         std::to_string(height) + "' font-family='sans-serif'>" + body_ + "</svg>";
}

std::string HeatColor(double t) {
  t = std::clamp(t, 0.0, 1.0);
  // Interpolate blue (#3b6fd6) -> yellow (#f2c94c) -> red (#d7301f).
  auto lerp = [](double a, double b, double u) { return a + (b - a) * u; };
  double r, g, b;
  if (t < 0.5) {
    const double u = t / 0.5;
    r = lerp(0x3b, 0xf2, u), g = lerp(0x6f, 0xc9, u), b = lerp(0xd6, 0x4c, u);
  } else {
    const double u = (t - 0.5) / 0.5;
    r = lerp(0xf2, 0xd7, u), g = lerp(0xc9, 0x30, u), b = lerp(0x4c, 0x1f, u);
  }
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "#%02x%02x%02x", int(r), int(g), int(b));
  return buffer;
}

std::string HtmlTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table><tr>";
  for (const auto& h : header) s += "<th>" + Escape(h) + "</th>";
  s += "</tr>";
  for (const auto& row : rows) {
    s += "<tr>";
    for (const auto& cell : row) s += "<td>" + Escape(cell) + "</td>";
    s += "</tr>";
  }
  return s + "</table>";
}

}  // namespace kareus::report::internal
