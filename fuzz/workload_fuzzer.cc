// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the workload loader (YAML -> validated Workload) and, for a workload it
// accepts with at most 16 layers, the workload model (kernel lists, partitions). Any input must end
// in a Workload or an InputError; a crash, a sanitizer report or an exception of another type is a
// bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kareus/common/error.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Presets (model: llama3.2-3b, gpu: A100-SXM4-40GB) come from the source tree.
  setenv("KAREUS_DATA_DIR", KAREUS_FUZZ_DATA_DIR, /*overwrite=*/0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const kareus::workload::Workload workload =
        kareus::workload::WorkloadFromYaml(text, "fuzz.yaml");
    (void)workload.ToJson().dump();  // every string in it must be valid for JSON
    // The model builder on every accepted shape; more layers only repeat the same per-layer
    // code (and would cost the fuzzer most of its speed), so at most 16 of them.
    if (workload.model.layers <= 16) (void)kareus::workload::BuildWorkloadModel(workload);
  } catch (const kareus::InputError&) {
  }
  return 0;
}
