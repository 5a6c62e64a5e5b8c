// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the plan and frontier readers a training job runs (JSON text -> validated
// Plan / FrontierFile). A plan that is accepted must also survive a round trip. Any input must
// be accepted or give an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/plan/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kareus::Json json;
  try {
    json = kareus::ParseJson(text, "fuzz.json");
  } catch (const kareus::InputError&) {
    return 0;
  }
  try {
    const kareus::plan::Plan plan = kareus::plan::PlanFromJson(json);
    const kareus::Json again = kareus::plan::ToJson(plan);
    (void)kareus::plan::PlanFromJson(kareus::ParseJson(again.dump(), "round trip"));
  } catch (const kareus::InputError&) {
  }
  try {
    const kareus::plan::FrontierFile frontier = kareus::plan::FrontierFromJson(json);
    for (const auto& point : frontier.points) (void)kareus::plan::FrontierPlanPath(point);
  } catch (const kareus::InputError&) {
  }
  return 0;
}
