// SPDX-License-Identifier: Apache-2.0
// One C++ entry point of the installed libraries: a workload file to its model (presets from
// the data folder), and the Pareto filter.
#include <cstdio>

#include "kareus/pareto/pareto.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_cxx WORKLOAD.yaml\n");
    return 2;
  }
  const kareus::workload::WorkloadModel model =
      kareus::workload::BuildWorkloadModel(kareus::workload::LoadWorkloadFile(argv[1]));
  const auto front = kareus::pareto::Filter({{.time_s = 1.0, .energy_j = 2.0},
                                             {.time_s = 2.0, .energy_j = 1.0},
                                             {.time_s = 2.0, .energy_j = 3.0}});
  std::printf("%s: %zu stages, %zu partition types, front of %zu\n", model.workload.name.c_str(),
              model.stages.size(), model.partition_types.size(), front.size());
  return model.stages.empty() || front.size() != 2 ? 1 : 0;
}
