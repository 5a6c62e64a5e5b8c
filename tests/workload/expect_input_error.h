// SPDX-License-Identifier: Apache-2.0
// The workload tests' check that a YAML text is refused with a message naming the field, the
// value and the rule.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/workload/workload.h"

namespace kareus::workload::testing {

// Expects an InputError whose message mentions every fragment (the field and the rule).
inline void ExpectInputError(const std::string& yaml, const std::vector<std::string>& fragments) {
  try {
    WorkloadFromYaml(yaml, "w.yaml");
    FAIL() << "accepted:\n" << yaml;
  } catch (const InputError& e) {
    for (const auto& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message '" << e.what() << "' lacks '" << f << "'";
    }
  }
}

}  // namespace kareus::workload::testing
