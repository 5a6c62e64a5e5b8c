// SPDX-License-Identifier: Apache-2.0
// `kareus calibrate`: a GPU preset's constants fitted to measurements, written as an overlay.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/emulator/calibrate.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::cli {

namespace {
struct CalibrateArgs {
  std::vector<std::string> data;
  emulator::CalibrateOptions options;
  std::string out;
  bool json = false;
};
}  // namespace

void AddCalibrateCommand(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Fit a GPU preset's physical constants to measurements (the datasets of validation "
      "manifests: stage profiles, power-limit sweeps, device checks, power probes) and write "
      "them as an overlay that workloads (gpu: {name, overlay}) and --gpu-overlay name");
  cmd->add_option("DATA", args->data,
                  "Folders holding a datasets.yaml, or the manifests (default: the installed "
                  "data/validation)");
  cmd->add_option("--gpu", args->options.gpu, "The GPU preset to fit")->required();
  cmd->add_option("--out", args->out, "The overlay file to write (YAML)")->required();
  cmd->add_option("--dataset", args->options.datasets,
                  "Only this dataset (repeat for several; default: every dataset measured on "
                  "the GPU)");
  cmd->add_option("--hold-out", args->options.hold_out,
                  "Replay this dataset but do not fit it: the held-out part (repeat for "
                  "several; default: every 4th row of each dataset is held out)");
  cmd->add_option("--prior-width", args->options.prior_width,
                  "Scale of the prior's sigmas on the constants (larger: the data may move them "
                  "further from the preset)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON (format kareus.calibration/1)");
  cmd->callback([args]() {
    ThrowAsFlag(args->options.Validate(),
                {{"gpu", "--gpu"}, {"prior_width", "--prior-width"}, {"hold_out", "--hold-out"}});
    if (args->out.empty()) ThrowInput("--out", "\"\"", "an overlay file to write is required");
    // Checked before the fit (seconds to minutes), not after it.
    const std::filesystem::path out_dir = std::filesystem::path(args->out).parent_path();
    if (!out_dir.empty() && !std::filesystem::is_directory(out_dir)) {
      ThrowInput("--out", args->out, "its folder " + out_dir.string() + " does not exist");
    }
    if (std::filesystem::is_directory(args->out)) {
      ThrowInput("--out", args->out, "is a folder; name the overlay file to write");
    }
    args->options.data.assign(args->data.begin(), args->data.end());
    const emulator::GpuCalibration c = emulator::CalibrateGpu(args->options);
    const hw::GpuSpec preset = hw::GpuPreset(args->options.gpu);
    WriteFileAtomic(args->out, hw::GpuOverlayToYaml(c.overlay, &preset));
    if (args->json) {
      std::fputs(DumpJson(emulator::ToJson(c)).c_str(), stdout);
      return;
    }
    std::fputs(emulator::RenderCalibration(c).c_str(), stdout);
    std::printf("Wrote %s\n", args->out.c_str());
  });
}

}  // namespace kareus::cli
