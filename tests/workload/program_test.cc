// SPDX-License-Identifier: Apache-2.0
// The executor's program (workload/program.h) against the planner's own model of the same
// workload: the same kernels, partition types and collectives in the same order, each
// collective moving the tensor the occurrence before it produced (on the other nanobatch), every
// type's launch slots present in every occurrence that launches a collective, layers in the
// order the pipeline runs them; and a plan's recorded workload loads back to the same workload.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/program.h"
#include "kareus/workload/workload.h"

namespace kareus::workload {
namespace {

using schedule::Direction;

std::filesystem::path Source(const std::string& relative) {
  return std::filesystem::path(KAREUS_TEST_SOURCE_DIR) / relative;
}

std::vector<std::string> Names(const std::vector<ProgramOp>& ops) {
  std::vector<std::string> out;
  for (const ProgramOp& op : ops) out.push_back(op.op.name);
  return out;
}

std::vector<std::string> Names(const std::vector<Op>& ops) {
  std::vector<std::string> out;
  for (const Op& op : ops) out.push_back(op.name);
  return out;
}

// The slots an occurrence's own kernels would be named by (the published runtime's rule:
// consecutive memory-bound kernels of one group share a slot, numbered per group).
std::vector<Slot> OwnSlots(const ProgramPartition& p) {
  std::vector<Slot> slots;
  std::map<SlotGroup, int> counters;
  for (size_t i = 0; i < p.compute.size(); ++i) {
    const Op& op = p.compute[i].op;
    const bool memory = op.group == SlotGroup::kNorm || op.group == SlotGroup::kRope ||
                        op.group == SlotGroup::kActivation;
    if (i > 0 && op.module == p.compute[i - 1].op.module) continue;
    if (i > 0 && memory && op.group == p.compute[i - 1].op.group) continue;
    slots.push_back(
        {.name = std::string(ToString(op.group)) + "_" + std::to_string(counters[op.group]++),
         .op_index = static_cast<int>(i)});
  }
  return slots;
}

// `published`: the workload's partitions follow the published layout (TP, or CP with TP), so
// slot names are portable between occurrences.
void ExpectProgramMatchesModel(const WorkloadModel& model, bool published = true) {
  const std::vector<UnitProgram> program = BuildProgram(model);
  ASSERT_EQ(program.size(), model.stages.size());
  int layers_before = 0;
  for (size_t u = 0; u < program.size(); ++u) {
    const UnitProgram& unit = program[u];
    const StageModel& planned = model.stages[u];
    SCOPED_TRACE(model.workload.name + " unit " + std::to_string(u));
    EXPECT_EQ(unit.stage, planned.stage);
    EXPECT_EQ(unit.layers, planned.layers);
    if (model.num_chunks == 1) {
      EXPECT_EQ(unit.first_layer, layers_before);
    }
    layers_before += unit.layers;
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      const InstructionProgram& ins = d == Direction::kForward ? unit.forward : unit.backward;
      const InstructionModel& model_ins =
          d == Direction::kForward ? planned.forward : planned.backward;
      // The sequential kernels are the planner's, in its order.
      EXPECT_EQ(Names(ins.sequential), Names(model_ins.sequential_ops));
      // The work outside the block is the planner's, split where it runs.
      std::vector<Op> outside;
      for (const auto& op : ins.before_block) outside.push_back(op.op);
      for (const auto& op : ins.after_block) outside.push_back(op.op);
      std::multiset<std::string> a, b;
      for (const Op& op : outside) a.insert(op.name);
      for (const Op& op : model_ins.non_partition_ops) b.insert(op.name);
      EXPECT_EQ(a, b);
      for (const auto& op : ins.before_block) EXPECT_TRUE(RunsBeforeBlock(op.op, d)) << op.op.name;
      for (const auto& op : ins.after_block) EXPECT_FALSE(RunsBeforeBlock(op.op, d)) << op.op.name;
      // Sequential layers: ascending in the forward kernels, descending in the backward ones.
      int previous = -1;
      Direction part = Direction::kForward;
      for (size_t i = 0; i < ins.sequential.size(); ++i) {
        const ProgramOp& op = ins.sequential[i];
        const bool backward_kernel = op.op.name.find(".bwd") != std::string::npos ||
                                     op.op.name.find(".dgrad") != std::string::npos ||
                                     op.op.name.find(".wgrad") != std::string::npos;
        if (backward_kernel && part == Direction::kForward) {
          part = Direction::kBackward;
          previous = unit.layers;
        }
        ASSERT_GE(op.layer, 0);
        ASSERT_LT(op.layer, unit.layers);
        if (part == Direction::kForward) {
          EXPECT_GE(op.layer, previous) << op.op.name;
        } else {
          EXPECT_LE(op.layer, previous) << op.op.name;
        }
        previous = op.layer;
        if (op.op.kind == OpKind::kCollective) {
          ASSERT_GT(i, 0u);
          EXPECT_EQ(op.after, ins.sequential[i - 1].op.name);
        }
      }
      // The partitions are the planner's occurrence sequence.
      ASSERT_EQ(ins.partitions.size(), model_ins.sequence.size());
      for (size_t i = 0; i < ins.partitions.size(); ++i) {
        const ProgramPartition& p = ins.partitions[i];
        const PartitionType& type = model.partition_types[model_ins.sequence[i].type];
        SCOPED_TRACE("partition " + std::to_string(i) + " " + p.type);
        EXPECT_EQ(p.type, type.name);
        EXPECT_EQ(p.collective.has_value(), model_ins.sequence[i].has_collective);
        // Two nanobatches take turns.
        EXPECT_EQ(p.nanobatch, static_cast<int>(i % 2));
        if (!p.collective) continue;
        EXPECT_EQ(p.collective->op.name, type.collective.name);
        // The collective moves the other nanobatch's tensor made by the occurrence before.
        ASSERT_GT(i, 0u);
        const ProgramPartition& before = ins.partitions[i - 1];
        EXPECT_EQ(before.nanobatch, 1 - p.nanobatch);
        EXPECT_EQ(p.collective->after, before.compute.back().op.name);
        EXPECT_EQ(p.collective->layer, before.compute.back().layer);
        // The occurrence's kernels are the type's, but for the previous layer's residual add
        // and norm that the block's first layer does not have.
        ASSERT_LE(p.compute.size(), type.compute_ops.size());
        const size_t offset = type.compute_ops.size() - p.compute.size();
        for (size_t k = 0; k < p.compute.size(); ++k) {
          EXPECT_EQ(p.compute[k].op.name, type.compute_ops[offset + k].name);
        }
        // Every slot of the type is there, on the same kernel as in the type (or the first
        // kernel when the type's is one the occurrence lacks); on the published layouts that
        // is also the slot the occurrence's own kernels give the name (kareus-official.md
        // §2.1: "norm_0 is still op 0").
        ASSERT_EQ(p.slots.size(), type.slots.size());
        const std::vector<Slot> own = OwnSlots(p);
        for (size_t k = 0; k < p.slots.size(); ++k) {
          const Slot& slot = p.slots[k];
          EXPECT_EQ(slot.name, type.slots[k].name);
          const int in_type = type.slots[k].op_index - static_cast<int>(offset);
          EXPECT_EQ(slot.op_index, std::max(0, in_type));
          if (in_type >= 0) {
            EXPECT_EQ(p.compute[slot.op_index].op.name,
                      type.compute_ops[type.slots[k].op_index].name);
          }
          if (published) {
            bool named = false;
            for (const Slot& s : own)
              named = named || (s.name == slot.name && s.op_index == slot.op_index);
            EXPECT_TRUE(named) << slot.name;
          }
        }
      }
    }
  }
}

TEST(Program, MatchesThePlannersModelOnEveryPaperConfiguration) {
  for (const auto& entry : std::filesystem::directory_iterator(Source("examples/paper"))) {
    ExpectProgramMatchesModel(BuildWorkloadModel(LoadWorkloadFile(entry.path())));
  }
  ExpectProgramMatchesModel(
      BuildWorkloadModel(LoadWorkloadFile(Source("examples/pytorch/workload.yaml"))));
}

TEST(Program, RecomputeNoneInterleavedAndPipelinedWorkloads) {
  const std::string base =
      "name: t\nmodel: qwen3-1.7b\ngpu: A100-SXM4-40GB\nmicrobatch_size: 4\n"
      "sequence_length: 2048\nmicrobatches: 8\n";
  for (const std::string& extra :
       {std::string("parallelism: {tp: 2, cp: 2, pp: 4}\nrecompute: none\n"),
        std::string("parallelism: {tp: 4, pp: 2, virtual_stages: 2}\nrecompute: full\n"),
        std::string(
            "parallelism: {tp: 2, pp: 3, layers_per_stage: [10, 10, 8]}\nrecompute: none\n")}) {
    const WorkloadModel model = BuildWorkloadModel(WorkloadFromYaml(base + extra, "t.yaml"));
    ExpectProgramMatchesModel(model);
  }
  // Context parallelism without TP: generic partition names, segments that span two layers.
  ExpectProgramMatchesModel(
      BuildWorkloadModel(WorkloadFromYaml(base + "parallelism: {tp: 1, cp: 2, pp: 2}\n", "t.yaml")),
      /*published=*/false);
  // Megatron-LM's interleaved layer order: chunk 0 of every stage, then chunk 1.
  const auto program = BuildProgram(BuildWorkloadModel(
      WorkloadFromYaml(base + "parallelism: {tp: 4, pp: 2, virtual_stages: 2}\n", "t.yaml")));
  ASSERT_EQ(program.size(), 4u);  // (stage 0, chunk 0), (0, 1), (1, 0), (1, 1)
  EXPECT_EQ(program[0].first_layer, 0);
  EXPECT_EQ(program[2].first_layer, 7);
  EXPECT_EQ(program[1].first_layer, 14);
  EXPECT_EQ(program[3].first_layer, 21);
}

TEST(Program, TheEmbeddingAllReduceRunsBeforeTheBlock) {
  const WorkloadModel model =
      BuildWorkloadModel(LoadWorkloadFile(Source("examples/pytorch/workload.yaml")));
  const UnitProgram first = BuildProgram(model).front();
  EXPECT_EQ(Names(first.forward.before_block),
            (std::vector<std::string>{"embedding", "embedding_all_reduce"}));
  EXPECT_EQ(first.forward.before_block[1].after, "embedding");
  EXPECT_TRUE(first.forward.after_block.empty());
  const UnitProgram last = BuildProgram(model).back();
  EXPECT_EQ(Names(last.backward.before_block),
            (std::vector<std::string>{"loss.bwd", "output_layer.dgrad", "output_layer.wgrad",
                                      "output_all_reduce", "final_layernorm.bwd"}));
  EXPECT_EQ(last.backward.before_block[3].after, "output_layer.wgrad");
  EXPECT_EQ(last.forward.after_block.back().op.name, "loss_all_reduce");
  EXPECT_EQ(last.forward.after_block.back().after, "loss");
}

TEST(Program, APlansRecordedWorkloadLoadsBack) {
  for (const char* file :
       {"examples/paper/02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml",
        "examples/llama3.3-70b-at-scale.yaml", "examples/pytorch/workload.yaml"}) {
    const Workload w = LoadWorkloadFile(Source(file));
    const Workload back = WorkloadFromRecord(w.ToJson(), w.parallelism.virtual_stages, "plan.json");
    EXPECT_EQ(back.Signature(), w.Signature()) << file;
    EXPECT_EQ(back.ToJson(), w.ToJson()) << file;
    EXPECT_EQ(back.parallelism.virtual_stages, w.parallelism.virtual_stages);
  }
  try {
    WorkloadFromRecord(Json::object(), 1, "p.json: workload");
    FAIL() << "an empty record loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kareus solve"), std::string::npos) << e.what();
  }
  Json bad = LoadWorkloadFile(Source("examples/pytorch/workload.yaml")).ToJson();
  bad["parallelism"]["tp"] = 3;
  try {
    WorkloadFromRecord(bad, 1, "p.json: workload");
    FAIL() << "tp 3 of 4 heads loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kareus::workload
