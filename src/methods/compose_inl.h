// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "kareus/pareto/pareto.h"

namespace kareus::methods::internal {

template <typename Option>
std::vector<Option> FilterOptions(std::vector<Option> options, double p_static_w) {
  std::vector<pareto::Point> points;
  for (size_t i = 0; i < options.size(); ++i) {
    points.push_back({.time_s = options[i].time_s,
                      .energy_j = options[i].energy_j - p_static_w * options[i].time_s,
                      .payload = static_cast<int64_t>(i)});
  }
  std::vector<Option> out;
  for (const auto& p : pareto::Filter(std::move(points))) out.push_back(options[p.payload]);
  return out;
}

}  // namespace kareus::methods::internal
