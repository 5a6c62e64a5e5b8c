// SPDX-License-Identifier: Apache-2.0
// End-to-end: the real-GPU backend's command-line surface on whatever machine runs the tests.
// Without a GPU (CI), `--backend cuda` and `kareus device-check` exit 2 with a clear message and
// nothing crashes; with one, they get past the backend check.
#include <gtest/gtest.h>

#include <filesystem>

#include "integration/cli_util.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

const std::string kExample =
    (SourceDir() / "examples" / "paper" / "01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string();

TEST(CliDevice, CudaBackendFailsCleanlyOrGetsPastTheCheck) {
  const auto out = std::filesystem::temp_directory_path() / "kareus_cli_device_store.sqlite";
  std::filesystem::remove(out);
  // An unknown partition stops the profile before anything is measured when a GPU is present;
  // without one the backend check fails first. Either way: exit 2, a message, no store.
  const auto r = RunKareus("profile " + kExample +
                           " --backend cuda --partition no_such_type --store " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("kareus: error: ", 0), 0u) << r.err;
  const bool no_gpu =
      r.err.find("driver") != std::string::npos || r.err.find("CUDA") != std::string::npos ||
      r.err.find("NVML") != std::string::npos || r.err.find("unknown backend") != std::string::npos;
  const bool got_past = r.err.find("no_such_type") != std::string::npos;
  EXPECT_TRUE(no_gpu || got_past) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CliDevice, CudaFlagsNeedTheCudaBackend) {
  const auto r = RunKareus("profile " + kExample + " --allow-clock-control");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--allow-clock-control"), std::string::npos) << r.err;
  const auto d = RunKareus("profile " + kExample + " --devices 0,1");
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_NE(d.err.find("--devices"), std::string::npos) << d.err;
}

TEST(CliDevice, DeviceCheckAlwaysReportsJson) {
  const auto file = std::filesystem::temp_directory_path() / "kareus_cli_device_check.json";
  std::filesystem::remove(file);
  const auto r = RunKareus(
      "device-check --json --window 0.2 --cooldown 0 --kernel-runs 3 --output " + file.string());
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.exit_code << "\n" << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_EQ(report["format"], "kareus-device-check");
  EXPECT_EQ(report["workload"]["status"], "ok");
  EXPECT_EQ(report["workload"]["gpu_preset"], "H200-SXM");
  EXPECT_EQ(Json::parse(testing::Slurp(file)), report);
  if (r.exit_code == 2) {
    EXPECT_NE(r.err.find("sections failed"), std::string::npos) << r.err;
    EXPECT_EQ(report["cuda"]["status"], "error");
  }
  const auto bad = RunKareus("device-check --window 0");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--window"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kareus
