// SPDX-License-Identifier: Apache-2.0
// `kareus gpus` and `kareus models`: the shipped presets.
#include <cstdio>

#include "commands.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/workload.h"

namespace kareus::cli {
namespace {

Json GpuJson(const hw::GpuSpec& g) {
  Json curve = Json::array();
  for (const auto& p : g.voltage_curve)
    curve.push_back({{"freq_mhz", p.freq_mhz}, {"volts", p.volts}});
  return Json{{"name", g.name},
              {"sm_count", g.sm_count},
              {"clock",
               {{"min_mhz", g.clock.min_mhz},
                {"max_mhz", g.clock.max_mhz},
                {"step_mhz", g.clock.step_mhz},
                {"default_mhz", g.clock.default_mhz},
                {"profile_grid_mhz", g.clock.ProfileGrid()}}},
              {"tensor_flops_per_clock_per_sm", g.tensor_flops_per_clock_per_sm},
              {"peak_tensor_tflops", g.PeakTensorFlops(g.clock.max_mhz) / 1e12},
              {"gemm_efficiency", g.gemm_efficiency},
              {"attention_efficiency", g.attention_efficiency},
              {"hbm_bandwidth_gbps", g.hbm_bandwidth_gbps},
              {"hbm_efficiency", g.hbm_efficiency},
              {"sm_memory_bandwidth_gbps", g.sm_memory_bandwidth_gbps},
              {"power",
               {{"cap_w", g.power.cap_w},
                {"idle_w", g.power.idle_w},
                {"static_w", g.power.static_w},
                {"dynamic_max_w", g.power.dynamic_max_w},
                {"memory_w", g.power.memory_w}}},
              {"voltage_curve", curve},
              {"activity",
               {{"gemm", g.activity.gemm},
                {"attention", g.activity.attention},
                {"elementwise", g.activity.elementwise},
                {"memory_stall", g.activity.memory_stall},
                {"comm", g.activity.comm}}},
              {"interconnect",
               {{"bus_bandwidth_gbps", g.interconnect.bus_bandwidth_gbps},
                {"channel_bandwidth_gbps", g.interconnect.channel_bandwidth_gbps},
                {"channel_clock_exponent", g.interconnect.channel_clock_exponent},
                {"latency_us", g.interconnect.latency_us},
                {"inter_node_bandwidth_gbps", g.interconnect.inter_node_bandwidth_gbps},
                {"inter_node_latency_us", g.interconnect.inter_node_latency_us},
                {"library_default_sms", g.interconnect.library_default_sms}}}};
}

}  // namespace

void AddGpusCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("gpus", "List the GPU presets (data/gpus/*.yaml)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json]() {
    Json out = Json::array();
    Table table({"gpu", "SMs", "clock MHz (min-max/step)", "default", "BF16 TF", "HBM GB/s",
                 "cap W", "static W", "bus GB/s"});
    for (const auto& name : hw::GpuPresetNames()) {
      const hw::GpuSpec g = hw::GpuPreset(name);
      out.push_back(GpuJson(g));
      table.AddRow({g.name, std::to_string(g.sm_count),
                    std::to_string(g.clock.min_mhz) + "-" + std::to_string(g.clock.max_mhz) + "/" +
                        std::to_string(g.clock.step_mhz),
                    std::to_string(g.clock.default_mhz),
                    FormatFixed(g.PeakTensorFlops(g.clock.max_mhz) / 1e12, 1),
                    FormatFixed(g.hbm_bandwidth_gbps, 0), FormatFixed(g.power.cap_w, 0),
                    FormatFixed(g.power.static_w, 0),
                    FormatFixed(g.interconnect.bus_bandwidth_gbps, 0)});
    }
    std::fputs(*json ? DumpJson(out).c_str() : table.ToString().c_str(), stdout);
  });
}

void AddModelsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the model presets (data/models/*.yaml)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json]() {
    Json out = Json::array();
    Table table({"model", "hidden", "heads", "kv groups", "head dim", "ffn", "layers", "vocab",
                 "qk-norm", "params (B)"});
    for (const auto& name : workload::ModelPresetNames()) {
      const workload::ModelConfig m = workload::ModelPreset(name);
      Json j = workload::ToJson(m);
      const double params =
          double(m.LayerParameters()) + double(m.vocab) * m.hidden * (m.tied_embeddings ? 1 : 2);
      j["parameters"] = params;
      out.push_back(j);
      table.AddRow({m.name, std::to_string(m.hidden), std::to_string(m.heads),
                    std::to_string(m.kv_groups), std::to_string(m.head_dim), std::to_string(m.ffn),
                    std::to_string(m.layers), std::to_string(m.vocab), m.qk_norm ? "yes" : "no",
                    FormatFixed(params / 1e9, 2)});
    }
    std::fputs(*json ? DumpJson(out).c_str() : table.ToString().c_str(), stdout);
  });
}

}  // namespace kareus::cli
