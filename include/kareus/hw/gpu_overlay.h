// SPDX-License-Identifier: Apache-2.0
// A GPU overlay: a preset's physical constants refitted to a user's own measurements
// (`kareus calibrate`, issue 32), kept apart from the preset it adjusts. A workload names it
// (`gpu: {name: PRESET, overlay: FILE}`), the emulator then runs the preset with the overlay's
// constants, and the overlay's tag joins GpuSpec::calibration so that the backend's description,
// every output that records it and the measurement store's check all tell the two apart.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/common/yaml.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::hw {

struct GpuOverlay {
  std::string preset;     // the preset it adjusts (GpuSpec::name)
  std::string fitted_on;  // provenance, free text ("" = not said)
  // The constants it sets; absent: the preset's. Values, not scales, so that the file reads as
  // the GPU it describes.
  std::optional<double> dynamic_max_w, idle_w, static_w, memory_w;
  std::optional<double> gemm_efficiency, attention_efficiency, hbm_efficiency;
  std::optional<double> bus_bandwidth_gbps, channel_bandwidth_gbps;
  // The SM activity of the work that is not a GEMM (ActivitySpec: CUDA-core math, an SM
  // streaming memory), as shares of dynamic_max_w.
  std::optional<double> activity_elementwise, activity_memory_stall;
  std::vector<VoltagePoint> voltage_curve;  // empty: the preset's

  bool Empty() const;
  // "overlay-<12 hex digits>": a hash of the preset's name and every constant set (not of the
  // provenance), so two overlays with the same constants share a tag.
  std::string Tag() const;
};

// Reads the mapping of an overlay file or of a workload's inline `overlay:` (format
// kareus.gpu_overlay/1; `format` may be left out inline). InputError naming the field.
GpuOverlay ParseGpuOverlay(const YamlMap& map);
GpuOverlay LoadGpuOverlayFile(const std::filesystem::path& path);

// The overlay file (YAML, with each constant's preset value in a comment when `preset` is given).
std::string GpuOverlayToYaml(const GpuOverlay& overlay, const GpuSpec* preset = nullptr);
// {"format", "preset", "tag", "fitted_on", "constants": {...}}: what outputs record, and what
// ParseGpuOverlay reads back (a record rebuilt as a workload file keeps its overlay).
Json ToJson(const GpuOverlay& overlay);

// `gpu` with the overlay's constants; the overlay's tag appended to gpu.calibration. InputError
// when the overlay is for another preset, or when a constant breaks a preset file's rule
// (efficiencies in (0, 1], powers positive, idle_w below min_limit_w, static_w below cap_w, the
// voltage curve ascending), naming `where` and the constant.
void ApplyGpuOverlay(GpuSpec& gpu, const GpuOverlay& overlay, const std::string& where = "overlay");

}  // namespace kareus::hw
