// SPDX-License-Identifier: Apache-2.0
// `kareus simulate WORKLOAD`: one emulation of a partition or of a whole instruction, or a sweep
// over clocks x comm SMs x launch slots (the tradeoffs of the paper's Figure 3).
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "flags.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/emulator/emulator.h"
#include "kareus/hw/gpu_overlay.h"
#include "kareus/workload/ops.h"

namespace kareus::cli {
namespace {

// The overlay of refitted constants the emulated GPU runs with, in the JSON (absent: the preset).
void RecordOverlay(Json& j, const workload::WorkloadModel& model) {
  if (model.workload.gpu_overlay) j["gpu_overlay"] = hw::ToJson(*model.workload.gpu_overlay);
}

struct SimulateArgs {
  std::string workload;
  std::string partition;
  std::optional<int> stage;
  std::string instruction;
  std::optional<int> freq_mhz;
  std::optional<int> sms;
  std::string slot;
  std::vector<std::string> comm;  // TYPE=SMS@SLOT, instruction mode
  bool sequential = false;
  bool sweep = false;
  std::optional<double> power_limit_w;  // board power limit; the clock defaults to the maximum
  std::string csv;
  std::string gpu_overlay;
  bool json = false;
};

template <typename T>
std::string Join(const std::vector<T>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out.str();
}

std::vector<std::string> SlotNames(const workload::PartitionType& type) {
  std::vector<std::string> names;
  for (const workload::Slot& slot : type.slots) names.push_back(slot.name);
  return names;
}

std::string Fixed(double value, int decimals) { return FormatFixed(value, decimals); }

std::vector<std::string> ResultCells(const emulator::SimResult& r) {
  return {Fixed(r.time_s * 1e3, 4),         Fixed(r.energy_j, 4),
          Fixed(r.static_energy_j, 4),      Fixed(r.dynamic_energy_j, 4),
          Fixed(r.avg_power_w, 1),          Fixed(r.effective_freq_mhz, 0),
          Fixed(r.compute_busy_s * 1e3, 4), Fixed(r.comm_busy_s * 1e3, 4),
          Fixed(r.overlap_s * 1e3, 4)};
}

const std::vector<std::string> kResultHeader = {"time_ms",    "energy_j", "static_j",
                                                "dynamic_j",  "power_w",  "eff_mhz",
                                                "compute_ms", "comm_ms",  "overlap_ms"};

std::string SweepCsv(const std::vector<emulator::SweepPoint>& points) {
  std::ostringstream out;
  out.precision(9);
  out << "freq_mhz,sms,slot,time_s,energy_j,static_energy_j,dynamic_energy_j,avg_power_w,"
         "effective_freq_mhz,compute_busy_s,comm_busy_s,overlap_s\n";
  for (const emulator::SweepPoint& p : points) {
    const emulator::SimResult& r = p.result;
    out << p.knobs.freq_mhz << ',' << p.knobs.sms << ',' << p.knobs.slot << ',' << r.time_s << ','
        << r.energy_j << ',' << r.static_energy_j << ',' << r.dynamic_energy_j << ','
        << r.avg_power_w << ',' << r.effective_freq_mhz << ',' << r.compute_busy_s << ','
        << r.comm_busy_s << ',' << r.overlap_s << '\n';
  }
  return out.str();
}

void RunPartition(const SimulateArgs& a, const workload::WorkloadModel& model) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  const workload::PartitionType& type = emulator::FindPartitionType(model, a.partition);
  if (a.sweep) {
    emulator::SweepOptions options;
    if (a.freq_mhz) options.freqs_mhz = {*a.freq_mhz};
    if (a.sms) options.sms = {*a.sms};
    if (!a.slot.empty()) options.slots = {a.slot};
    const std::vector<emulator::SweepPoint> points = emulator::SweepPartition(gpu, type, options);
    if (!a.csv.empty()) WriteFileAtomic(a.csv, SweepCsv(points));
    if (a.json) {
      Json rows = Json::array();
      for (const emulator::SweepPoint& p : points) {
        Json row{{"freq_mhz", p.knobs.freq_mhz}, {"sms", p.knobs.sms}, {"slot", p.knobs.slot}};
        row.update(emulator::ToJson(p.result));
        rows.push_back(row);
      }
      Json j{{"workload", model.workload.name},
             {"gpu", gpu.name},
             {"partition", type.name},
             {"points", rows}};
      RecordOverlay(j, model);
      std::fputs(DumpJson(j).c_str(), stdout);
      return;
    }
    if (!a.csv.empty()) {
      std::printf("wrote %zu points to %s\n", points.size(), a.csv.c_str());
    } else {
      std::vector<std::string> header = {"freq_mhz", "sms", "slot"};
      header.insert(header.end(), kResultHeader.begin(), kResultHeader.end());
      Table table(header);
      for (const emulator::SweepPoint& p : points) {
        std::vector<std::string> row = {std::to_string(p.knobs.freq_mhz),
                                        std::to_string(p.knobs.sms), p.knobs.slot};
        const std::vector<std::string> cells = ResultCells(p.result);
        row.insert(row.end(), cells.begin(), cells.end());
        table.AddRow(row);
      }
      std::fputs(table.ToString().c_str(), stdout);
      std::printf("\n");
    }
    // The energy-optimal and the fastest schedule at every clock: where the tradeoff moves.
    std::map<int, std::pair<const emulator::SweepPoint*, const emulator::SweepPoint*>> best;
    for (const emulator::SweepPoint& p : points) {
      auto& [min_e, min_t] = best[p.knobs.freq_mhz];
      if (min_e == nullptr || p.result.energy_j < min_e->result.energy_j) min_e = &p;
      if (min_t == nullptr || p.result.time_s < min_t->result.time_s) min_t = &p;
    }
    Table summary({"freq_mhz", "min-energy sms", "slot", "time_ms", "energy_j", "fastest sms",
                   "slot", "time_ms", "energy_j"});
    for (auto it = best.rbegin(); it != best.rend(); ++it) {
      const auto* e = it->second.first;
      const auto* t = it->second.second;
      summary.AddRow({std::to_string(it->first), std::to_string(e->knobs.sms), e->knobs.slot,
                      Fixed(e->result.time_s * 1e3, 4), Fixed(e->result.energy_j, 4),
                      std::to_string(t->knobs.sms), t->knobs.slot, Fixed(t->result.time_s * 1e3, 4),
                      Fixed(t->result.energy_j, 4)});
    }
    std::printf("%s %s on %s: best schedule per clock\n", model.workload.name.c_str(),
                type.name.c_str(), gpu.name.c_str());
    std::fputs(summary.ToString().c_str(), stdout);
    return;
  }
  if (!a.freq_mhz && !a.power_limit_w) {
    ThrowInput("--freq", "(missing)",
               "required (or --power-limit W); profile grid of " + gpu.name + ": " +
                   Join(gpu.clock.ProfileGrid()));
  }
  if (!a.sms) {
    ThrowInput("--sms", "(missing)",
               "required; choices of " + type.name + ": " + Join(type.sm_choices));
  }
  if (a.slot.empty()) {
    ThrowInput("--slot", "(missing)",
               "required; slots of " + type.name + ": " + Join(SlotNames(type)));
  }
  const emulator::PartitionKnobs knobs{
      .freq_mhz = a.freq_mhz ? *a.freq_mhz : gpu.clock.default_mhz, .sms = *a.sms, .slot = a.slot};
  const emulator::SimResult r = emulator::SimulatePartition(gpu, type, knobs);
  if (a.json) {
    Json j{{"workload", model.workload.name}, {"gpu", gpu.name},  {"partition", type.name},
           {"freq_mhz", knobs.freq_mhz},      {"sms", knobs.sms}, {"slot", knobs.slot},
           {"power_limit_w", gpu.power.cap_w}};
    j.update(emulator::ToJson(r));
    RecordOverlay(j, model);
    std::fputs(DumpJson(j).c_str(), stdout);
    return;
  }
  // Without --freq (power-limit mode) the clock is not locked: say so, not "at 1410 MHz".
  const std::string clock = a.freq_mhz ? fmt::format("at {} MHz", knobs.freq_mhz)
                                       : fmt::format("unlocked (up to {} MHz)", knobs.freq_mhz);
  std::printf("%s %s on %s %s (%.0f W limit), %d comm SMs launched at %s\n",
              model.workload.name.c_str(), type.name.c_str(), gpu.name.c_str(), clock.c_str(),
              gpu.power.cap_w, knobs.sms, knobs.slot.c_str());
  Table table(kResultHeader);
  table.AddRow(ResultCells(r));
  std::fputs(table.ToString().c_str(), stdout);
}

// TYPE=SMS@SLOT -> the knobs of one partition type.
void ParseComm(const std::string& text, emulator::InstructionKnobs& knobs) {
  const size_t eq = text.find('=');
  const size_t at = text.find('@');
  if (eq == std::string::npos || at == std::string::npos || at < eq) {
    ThrowInput("--comm", text, "expected TYPE=SMS@SLOT, e.g. fwd_attn=12@norm_0");
  }
  int sms = 0;
  try {
    sms = std::stoi(text.substr(eq + 1, at - eq - 1));
  } catch (const std::exception&) {
    ThrowInput("--comm", text, "SMS must be an integer (TYPE=SMS@SLOT)");
  }
  knobs.partitions[text.substr(0, eq)] = {.sms = sms, .slot = text.substr(at + 1)};
}

void RunInstruction(const SimulateArgs& a, const workload::WorkloadModel& model) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  schedule::Direction direction;
  if (a.instruction == "forward") {
    direction = schedule::Direction::kForward;
  } else if (a.instruction == "backward") {
    direction = schedule::Direction::kBackward;
  } else {
    ThrowInput("--instruction", a.instruction.empty() ? "(missing)" : a.instruction,
               "valid: forward, backward");
  }
  const emulator::ExecutionMode mode = a.sequential || !model.nanobatching
                                           ? emulator::ExecutionMode::kSequential
                                           : emulator::ExecutionMode::kNanobatched;
  std::vector<int> freqs;
  if (a.freq_mhz) {
    freqs = {*a.freq_mhz};
  } else if (a.sweep) {
    freqs = gpu.clock.ProfileGrid();
  } else if (a.power_limit_w) {
    // Power-limit mode: the clock is not locked; the GPU boosts to its maximum and the limit
    // lowers it wherever the power would exceed it.
    freqs = {gpu.clock.default_mhz};
  } else {
    ThrowInput("--freq", "(missing)",
               "required (or --power-limit W); profile grid of " + gpu.name + ": " +
                   Join(gpu.clock.ProfileGrid()));
  }
  std::vector<std::pair<int, emulator::SimResult>> results;
  for (int f : freqs) {
    emulator::InstructionKnobs knobs = emulator::DefaultInstructionKnobs(model, f, mode);
    for (const std::string& comm : a.comm) ParseComm(comm, knobs);
    results.emplace_back(f, emulator::SimulateInstruction(model, *a.stage, direction, knobs));
  }
  if (!a.csv.empty()) {
    std::ostringstream out;
    out.precision(9);
    out << "freq_mhz,mode,time_s,energy_j,static_energy_j,dynamic_energy_j,avg_power_w,"
           "effective_freq_mhz,compute_busy_s,comm_busy_s,overlap_s\n";
    for (const auto& [f, r] : results) {
      out << f << ',' << schedule::ToString(mode) << ',' << r.time_s << ',' << r.energy_j << ','
          << r.static_energy_j << ',' << r.dynamic_energy_j << ',' << r.avg_power_w << ','
          << r.effective_freq_mhz << ',' << r.compute_busy_s << ',' << r.comm_busy_s << ','
          << r.overlap_s << '\n';
    }
    WriteFileAtomic(a.csv, out.str());
  }
  if (a.json) {
    Json rows = Json::array();
    for (const auto& [f, r] : results) {
      Json j{{"workload", model.workload.name},
             {"gpu", gpu.name},
             {"stage", *a.stage},
             {"instruction", a.instruction},
             {"mode", schedule::ToString(mode)},
             {"freq_mhz", f},
             {"power_limit_w", gpu.power.cap_w}};
      j.update(emulator::ToJson(r));
      RecordOverlay(j, model);
      rows.push_back(j);
    }
    std::fputs(DumpJson(a.sweep ? rows : rows.front()).c_str(), stdout);
    return;
  }
  std::printf("%s stage %d %s, %s, on %s at a %.0f W limit (%d GPUs per stage)\n",
              model.workload.name.c_str(), *a.stage, a.instruction.c_str(),
              schedule::ToString(mode), gpu.name.c_str(), gpu.power.cap_w,
              model.workload.GpusPerStage());
  std::vector<std::string> header = {"freq_mhz"};
  header.insert(header.end(), kResultHeader.begin(), kResultHeader.end());
  Table table(header);
  for (const auto& [f, r] : results) {
    std::vector<std::string> row = {std::to_string(f)};
    const std::vector<std::string> cells = ResultCells(r);
    row.insert(row.end(), cells.begin(), cells.end());
    table.AddRow(row);
  }
  std::fputs(table.ToString().c_str(), stdout);
}

}  // namespace

void AddSimulateCommand(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Emulate one partition (--partition) or one instruction (--stage/--instruction) at a "
      "locked clock or under a power limit (--power-limit); --sweep for the grid of clocks x "
      "comm SMs x launch slots");
  cmd->add_option("WORKLOAD", args->workload, "Workload file (YAML)")->required();
  cmd->add_option("--partition", args->partition, "Partition type (see `kareus partitions`)");
  AddGpuOverlayOption(cmd, args->gpu_overlay);
  cmd->add_option("--stage", args->stage, "Pipeline stage (0-based) of the instruction");
  cmd->add_option("--instruction", args->instruction, "forward or backward");
  cmd->add_option("--freq", args->freq_mhz, "Locked SM clock, MHz (a clock of the GPU's grid)");
  cmd->add_option("--power-limit", args->power_limit_w,
                  "Board power limit, W (within the GPU's range); without --freq the clock is "
                  "not locked: the GPU runs at the highest clock whose power fits the limit");
  cmd->add_option("--sms", args->sms, "SMs of the partition's comm kernel");
  cmd->add_option("--slot", args->slot, "Launch slot of the comm kernel (norm_0, linear_0, ...)");
  cmd->add_option("--comm", args->comm,
                  "Instruction mode: knobs of one partition type, TYPE=SMS@SLOT (repeatable; "
                  "others use the library default)");
  cmd->add_flag("--sequential", args->sequential,
                "Instruction mode: sequential (Megatron-style) execution instead of nanobatched");
  cmd->add_flag("--sweep", args->sweep,
                "Sweep clocks x SMs x slots (partition) or clocks (instruction); --freq, --sms, "
                "--slot restrict the grid");
  cmd->add_option("--csv", args->csv, "With --sweep: write the grid to this CSV file (atomically)");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args]() {
    const bool partition_mode = !args->partition.empty();
    const bool instruction_mode = args->stage.has_value() || !args->instruction.empty();
    if (partition_mode == instruction_mode) {
      ThrowInput("--partition/--stage", partition_mode ? "both" : "neither",
                 "give either --partition TYPE (with --freq --sms --slot, or --sweep) or "
                 "--stage S --instruction forward|backward --freq MHZ");
    }
    if (!args->csv.empty() && !args->sweep) {
      ThrowInput("--csv", args->csv, "only with --sweep");
    }
    workload::Workload w = LoadWorkload(args->workload, args->gpu_overlay);
    if (args->power_limit_w) {
      hw::SetPowerLimit(w.gpu, *args->power_limit_w, "--power-limit");
      w.power_limit_w = *args->power_limit_w;
    }
    const workload::WorkloadModel model = workload::BuildWorkloadModel(w);
    if (partition_mode) {
      RunPartition(*args, model);
    } else {
      if (!args->stage) {
        ThrowInput("--stage", "(missing)",
                   "required; valid 0.." + std::to_string(model.stages.size() - 1));
      }
      RunInstruction(*args, model);
    }
  });
}

}  // namespace kareus::cli
