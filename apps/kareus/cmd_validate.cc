// SPDX-License-Identifier: Apache-2.0
// `kareus validate`: the emulator against the real GPU measurements in data/validation/.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "kareus/common/json.h"
#include "kareus/emulator/validate.h"
#include "kareus/hw/gpu_overlay.h"

namespace kareus::cli {

void AddValidateCommand(CLI::App& app) {
  auto data_dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto overlay_path = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Replay the real GPU measurements of data/validation/ on the emulator (equal-FLOPs "
      "stand-in workloads) and print the shape errors per dataset");
  cmd->add_option("--data", *data_dir,
                  "Folder holding datasets.yaml (default: the installed data/validation)");
  cmd->add_flag("--json", *json, "Print JSON (format kareus.validation/1)");
  cmd->add_option("--gpu-overlay", *overlay_path,
                  "Also replay with this overlay of refitted constants (kareus calibrate) on the "
                  "datasets of its GPU, and print the preset's and the overlay's errors side by "
                  "side");
  cmd->callback([data_dir, json, overlay_path]() {
    const emulator::ValidationReport report = emulator::ReplayDatasets(
        {.data_dir = *data_dir, .datasets = {}, .gpu = "", .overlays = {}});
    if (!overlay_path->empty()) {
      const hw::GpuOverlay overlay = hw::LoadGpuOverlayFile(*overlay_path);
      emulator::ValidationReport preset = report;  // the datasets of the overlay's GPU only
      std::erase_if(preset.datasets, [&](const emulator::DatasetResult& d) {
        return d.gpu_preset != overlay.preset;
      });
      const emulator::ValidationReport calibrated = emulator::ReplayDatasets(
          {.data_dir = *data_dir, .datasets = {}, .gpu = overlay.preset, .overlays = {overlay}});
      if (*json) {
        Json j = emulator::ToJson(report);
        j["overlay"] = {{"tag", overlay.Tag()},
                        {"file", *overlay_path},
                        {"datasets", emulator::ToJson(calibrated)["datasets"]}};
        std::fputs(DumpJson(j).c_str(), stdout);
      } else {
        std::fputs(emulator::RenderValidation(report).c_str(), stdout);
        std::printf("\n");
        std::fputs(emulator::RenderComparison(preset, calibrated).c_str(), stdout);
      }
      return;
    }
    if (*json) {
      std::fputs(DumpJson(emulator::ToJson(report)).c_str(), stdout);
    } else {
      std::fputs(emulator::RenderValidation(report).c_str(), stdout);
    }
  });
}

}  // namespace kareus::cli
