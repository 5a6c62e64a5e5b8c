// SPDX-License-Identifier: Apache-2.0
// `kareus partitions WORKLOAD`: the kernels, collectives and partitions of every instruction.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/program.h"

namespace kareus::cli {

void AddPartitionsCommand(CLI::App& app) {
  struct Args {
    std::string workload;
    bool json = false;
    bool program = false;
    std::string gpu_overlay;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "partitions", "Show the partition types, counts, slots, FLOPs and bytes of a workload");
  cmd->add_option("WORKLOAD", args->workload, "Workload file (YAML)")->required();
  auto* json = cmd->add_flag("--json", args->json, "Print JSON");
  AddGpuOverlayOption(cmd, args->gpu_overlay);
  cmd->add_flag("--program", args->program,
                "With --json: also every instruction's kernels and partition occurrences in "
                "execution order, with their layers (what the kareus.torch executor runs)")
      ->needs(json);
  cmd->callback([args]() {
    const workload::WorkloadModel model =
        workload::BuildWorkloadModel(LoadWorkload(args->workload, args->gpu_overlay));
    if (args->json) {
      std::fputs(DumpJson(workload::PartitionsJson(model, args->program)).c_str(), stdout);
      return;
    }
    const auto& w = model.workload;
    std::printf(
        "%s: %s on %s, TP %d CP %d PP %d DP %d, microbatch %d x %lld tokens, %d microbatches, "
        "recompute %s\n",
        w.name.c_str(), w.model.name.c_str(), w.gpu.name.c_str(), w.parallelism.tp,
        w.parallelism.cp, w.parallelism.pp, w.parallelism.dp, w.microbatch_size,
        static_cast<long long>(w.sequence_length), w.microbatches, ToString(w.recompute));
    std::printf("iteration: %.1f PFLOP over %d GPUs\n\n", model.IterationFlops() / 1e15,
                w.TotalGpus());
    if (!model.nanobatching) {
      std::printf("%s\n\n", model.ToJson()["nanobatching_note"].get<std::string>().c_str());
    }
    if (!model.partition_types.empty()) {
      Table types({"type", "collective", "MiB", "group", "launch slots", "SMs", "GFLOP"});
      for (const auto& t : model.partition_types) {
        std::string slots;
        for (const auto& s : t.launch_slots) slots += (slots.empty() ? "" : ",") + s;
        const std::string sms = t.tunable ? std::to_string(t.sm_choices.front()) + ".." +
                                                std::to_string(t.sm_choices.back())
                                          : std::to_string(t.fixed_sms) + " (fixed)";
        types.AddRow({t.name, ToString(t.collective.collective),
                      FormatFixed(t.collective.bytes / (1024.0 * 1024.0), 1),
                      std::to_string(t.collective.group_size), slots, sms,
                      FormatFixed(t.ComputeFlops() / 1e9, 1)});
      }
      std::fputs(types.ToString().c_str(), stdout);
      std::printf("\n");
    }
    Table stages({"stage", "layers", "GPUs", "instruction", "partitions (count)", "GFLOP"});
    for (const auto& stage : model.stages) {
      for (const auto* ins : {&stage.forward, &stage.backward}) {
        std::string parts;
        for (const auto& use : ins->uses) {
          parts += (parts.empty() ? "" : " ") + model.partition_types[use.type].name + ":" +
                   std::to_string(use.count);
        }
        stages.AddRow({std::to_string(stage.stage), std::to_string(stage.layers),
                       std::to_string(stage.gpus), ToString(ins->direction),
                       parts.empty() ? "(sequential)" : parts, FormatFixed(ins->flops / 1e9, 0)});
      }
    }
    std::fputs(stages.ToString().c_str(), stdout);
  });
}

}  // namespace kareus::cli
