// SPDX-License-Identifier: Apache-2.0
// A minimal SVG writer for the report's plots: linear axes with "nice" ticks, polylines,
// markers, rectangles and text. Output is plain SVG 1.1 with inline styles.
#pragma once

#include <string>
#include <vector>

namespace kareus::report::internal {

std::string Escape(const std::string& text);  // XML/HTML escaping
std::string Num(double value, int decimals = 2);

// An HTML table of escaped cells (the first column left-aligned by the page's style).
std::string HtmlTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows);

// Ticks at 1, 2 or 5 x 10^k covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target = 6);

struct Axis {
  double lo = 0.0, hi = 1.0;  // data range
  double pixel_lo = 0.0, pixel_hi = 1.0;
  double Map(double v) const {
    return hi == lo ? pixel_lo : pixel_lo + (v - lo) / (hi - lo) * (pixel_hi - pixel_lo);
  }
};

// A plot area with margins; Begin() writes the <svg> header, axes and labels.
class Plot {
 public:
  Plot(int width, int height, double x_lo, double x_hi, double y_lo, double y_hi);
  void Axes(const std::string& x_label, const std::string& y_label);
  void Polyline(const std::vector<std::pair<double, double>>& xy, const std::string& color,
                double width = 1.5, bool dashed = false);
  void Marker(double x, double y, const std::string& color, double radius = 3.0,
              const std::string& title = "", bool hollow = false);
  void VerticalLine(double x, const std::string& color, const std::string& label);
  void HorizontalLine(double y, const std::string& color, const std::string& label);
  void Legend(const std::vector<std::pair<std::string, std::string>>& entries);  // (label, color)
  // The same as one row under the plot, outside the data area (the figure grows by the row),
  // so no line label or point inside can be covered by it.
  void LegendBelow(const std::vector<std::pair<std::string, std::string>>& entries);
  void Raw(const std::string& svg) { body_ += svg; }
  std::string Finish() const;
  const Axis& X() const { return x_; }
  const Axis& Y() const { return y_; }

 private:
  int width_, height_;
  int legend_rows_height_ = 0;  // LegendBelow's rows, under height_
  Axis x_, y_;
  std::string body_;
};

// Blue (low) to red (high) for t in [0, 1]: the clock colour scale of the timeline (as the
// paper's Figure 1: redder = higher frequency and power).
std::string HeatColor(double t);

}  // namespace kareus::report::internal
