// SPDX-License-Identifier: Apache-2.0
// The partition builder (reference/kareus-official.md §1.3-1.5, §2.1): split each direction's
// kernel list at every collective; with two nanobatches every segment yields two partitions,
// the segment's compute of one nanobatch overlapping the other nanobatch's collective.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "kareus/common/error.h"
#include "kareus/workload/ops.h"
#include "workload/segments.h"
#include "workload/shapes.h"

namespace kareus::workload {

using schedule::Direction;

namespace {

using internal::Collective;
using internal::Gemm;
using internal::Memory;
using internal::Occurrence;
using internal::Occurrences;
using internal::Shard;

const std::map<std::string, std::vector<std::string>>& PublishedLaunchSlots() {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"fwd_attn", {"norm_0", "linear_0", "rope_0", "attn_0"}},
      {"fwd_mlp", {"norm_0", "linear_0", "activation_0"}},
      {"bwd_attn", {"norm_0", "linear_0", "attn_0", "rope_0"}},
      {"bwd_mlp", {"norm_0", "linear_0", "activation_0"}},
      {"fwd_qkv_ar", {"norm_0", "linear_0"}},
      {"fwd_qkv_ag", {"norm_0", "linear_0", "rope_0"}},
      {"fwd_ao_ag", {"attn_0", "linear_0"}},
      {"fwd_ao_ar", {"attn_0"}},
      {"bwd_qkv_ar", {"rope_0", "linear_0"}},
      {"bwd_qkv_rs", {"rope_0", "linear_0"}},
      {"bwd_a_rs", {"attn_0"}},
      {"bwd_a_ag", {"attn_0"}},
      {"bwd_o_ag", {"norm_0", "linear_0"}},
      {"bwd_o_ar", {"norm_0"}},
  };
  return table;
}

std::vector<int> SmChoices(CollectiveType type) {
  // TP all-reduce partitions: {3, 6, ..., 30}; CP all-gather / reduce-scatter: {1, ..., 20}
  // (kareus-official.md §2.1).
  std::vector<int> out;
  if (type == CollectiveType::kAllReduce) {
    for (int s = 3; s <= 30; s += 3) out.push_back(s);
  } else {
    for (int s = 1; s <= 20; ++s) out.push_back(s);
  }
  return out;
}

PartitionType MakeType(const Occurrence& o, Direction direction) {
  PartitionType t;
  t.name = o.key;
  t.direction = direction;
  t.compute_ops = o.compute;
  KAREUS_CHECK(o.collective.has_value())
      << "type " << o.key << " built from an occurrence without collective";
  t.collective = *o.collective;
  t.slots = internal::BuildSlots(t.compute_ops);
  t.sm_choices = SmChoices(t.collective.collective);
  t.tunable = t.name.find("_trail") == std::string::npos;
  const auto& published = PublishedLaunchSlots();
  if (auto it = published.find(t.name); it != published.end()) {
    for (const auto& slot : it->second) {
      if (t.SlotIndex(slot) >= 0) t.launch_slots.push_back(slot);
    }
  }
  if (t.launch_slots.empty()) {
    for (const auto& slot : t.slots) t.launch_slots.push_back(slot.name);
  }
  if (!t.tunable) t.launch_slots = {t.fixed_slot};
  return t;
}

// `first`: the unit holding the embedding (stage 0, chunk 0); `last`: the one holding the final
// norm, output layer and loss (the last stage's last chunk).
std::vector<Op> NonPartitionOps(const Workload& w, bool first, bool last, Direction direction) {
  const Shard s(w, w.microbatch_size);
  const double th = double(s.tokens) * s.hidden;
  const double tv = double(s.tokens) * s.vocab;
  std::vector<Op> ops;
  const double bf16 = internal::kBf16Bytes;
  if (direction == Direction::kForward) {
    if (first) {
      ops.push_back(Memory("embedding", "embedding", SlotGroup::kNone, bf16 * 2 * th,
                           internal::kElementwiseFlopsPerByte));
      // VocabParallelEmbedding sums the TP shards' partial lookups.
      if (s.tp > 1) {
        ops.push_back(
            Collective("embedding_all_reduce", CollectiveType::kAllReduce, bf16 * th, s.tp, 1));
        ops.back().module = "embedding";  // part of the embedding: it runs before the block
      }
    }
    if (last) {
      ops.push_back(Memory("final_layernorm", "final_layernorm", SlotGroup::kNone, bf16 * 2 * th,
                           internal::kNormFlopsPerByte));
      ops.push_back(Gemm("output_layer", "output_layer", s.tokens, s.vocab, s.hidden));
      // Vocab-parallel cross entropy: max, sum of exponentials, target logit over the logits,
      // each reduced across TP (three small all-reduces of fp32 per token, merged here).
      ops.push_back(Memory("loss", "loss", SlotGroup::kNone, bf16 * 3 * tv,
                           internal::kElementwiseFlopsPerByte));
      if (s.tp > 1) {
        ops.push_back(Collective("loss_all_reduce", CollectiveType::kAllReduce,
                                 3.0 * 4.0 * s.tokens, s.tp, 1));
      }
    }
  } else {
    if (last) {
      ops.push_back(Memory("loss.bwd", "loss", SlotGroup::kNone, bf16 * 2 * tv,
                           internal::kElementwiseFlopsPerByte));
      ops.push_back(Gemm("output_layer.dgrad", "output_layer", s.tokens, s.hidden, s.vocab));
      ops.push_back(Gemm("output_layer.wgrad", "output_layer", s.hidden, s.vocab, s.tokens));
      // The column-parallel output layer's input gradient is summed across TP.
      if (s.tp > 1) {
        ops.push_back(
            Collective("output_all_reduce", CollectiveType::kAllReduce, bf16 * th, s.tp, 1));
      }
      ops.push_back(Memory("final_layernorm.bwd", "final_layernorm", SlotGroup::kNone,
                           bf16 * 3 * th, internal::kNormFlopsPerByte));
    }
    if (first) {
      ops.push_back(Memory("embedding.bwd", "embedding", SlotGroup::kNone, bf16 * 3 * th,
                           internal::kElementwiseFlopsPerByte));
    }
  }
  return ops;
}

double ComputeFlops(const std::vector<Op>& ops) {
  double flops = 0.0;
  for (const Op& op : ops) {
    if (op.kind != OpKind::kCollective) flops += op.flops;
  }
  return flops;
}

int TypeIndex(const std::vector<PartitionType>& types, const std::string& name) {
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

bool RunsBeforeBlock(const Op& op, Direction direction) {
  return (op.module == "embedding") == (direction == Direction::kForward);
}

int PartitionType::SlotIndex(const std::string& slot) const {
  for (const Slot& s : slots) {
    if (s.name == slot) return s.op_index;
  }
  return -1;
}

double PartitionType::ComputeFlops() const { return workload::ComputeFlops(compute_ops); }

Json PartitionType::ToJson() const {
  Json slot_names = Json::array();
  for (const auto& s : slots) slot_names.push_back(s.name);
  Json ops = Json::array();
  for (const auto& op : compute_ops) ops.push_back(op.ToJson());
  Json j{{"type", name},
         {"direction", schedule::ToString(direction)},
         {"tunable", tunable},
         {"collective",
          {{"type", workload::ToString(collective.collective)},
           {"bytes", collective.bytes},
           {"group_size", collective.group_size},
           {"tensors", collective.tensors}}},
         {"slots", launch_slots},
         {"all_slots", slot_names},
         {"sm_choices", tunable ? Json(sm_choices) : Json::array({fixed_sms})},
         {"compute_ops", ops},
         {"flops", ComputeFlops()}};
  return j;
}

const PartitionType& WorkloadModel::Type(const std::string& name) const {
  const int index = TypeIndex(partition_types, name);
  KAREUS_CHECK(index >= 0) << "unknown partition type " << name;
  return partition_types[index];
}

const StageModel& WorkloadModel::Unit(int stage, int chunk) const {
  KAREUS_CHECK(stage >= 0 && stage < num_stages && chunk >= 0 && chunk < num_chunks)
      << "stage " << stage << " chunk " << chunk;
  return stages[static_cast<std::size_t>(stage * num_chunks + chunk)];
}

const InstructionModel& WorkloadModel::Instruction(int stage, Direction direction) const {
  return Instruction(stage, 0, direction);
}

const InstructionModel& WorkloadModel::Instruction(int stage, int chunk,
                                                   Direction direction) const {
  const StageModel& s = Unit(stage, chunk);
  return direction == Direction::kForward ? s.forward : s.backward;
}

std::vector<Op> FixedWorkOps(const WorkloadModel& model, int stage, Direction direction) {
  return FixedWorkOps(model, stage, 0, direction);
}

std::vector<Op> FixedWorkOps(const WorkloadModel& model, int stage, int chunk,
                             Direction direction) {
  const InstructionModel& ins = model.Instruction(stage, chunk, direction);
  std::vector<Op> ops = ins.non_partition_ops;
  for (const PartitionUse& use : ins.uses) {
    const auto& compute = model.partition_types[use.type].compute_ops;
    for (int i = 0; i < use.without_collective; ++i)
      ops.insert(ops.end(), compute.begin(), compute.end());
  }
  return ops;
}

double WorkloadModel::IterationFlops() const {
  double flops = 0.0;
  for (const StageModel& stage : stages) {
    flops +=
        double(stage.gpus) * workload.microbatches * (stage.forward.flops + stage.backward.flops);
  }
  return flops;
}

namespace {

// Megatron-Core's bucket default (distributed_data_parallel.py): max(40M, 1M x DP) parameters.
double DefaultBucketParameters(const Workload& w) { return std::max(40e6, 1e6 * w.parallelism.dp); }

// The gradient buckets of every unit, in the order the backward completes them: the output
// layer and final norm (last unit), the layers from the last to the first, the embedding (first
// unit). Parameters are this GPU's TP shard (CP and DP replicate them). A bucket closes when it
// holds bucket_parameters (a layer larger than a bucket fills several, each complete when the
// layer's backward ends); the remainder is the last bucket. Without overlap Megatron-LM uses one
// bucket for everything (bucket_size None).
void BuildGradientSync(WorkloadModel& model) {
  const Workload& w = model.workload;
  GradientSyncModel& sync = model.gradient_sync;
  sync.enabled = w.HasGradientSync();
  if (!sync.enabled) return;
  sync.group_size = w.parallelism.dp * w.parallelism.cp;
  sync.inter_node = w.parallelism.tp * w.parallelism.cp * w.parallelism.dp > kGpusPerNode;
  sync.collective = w.gradient_sync.distributed_optimizer ? CollectiveType::kReduceScatter
                                                          : CollectiveType::kAllReduce;
  sync.overlap = w.gradient_sync.overlap;
  sync.bucket_parameters = w.gradient_sync.bucket_parameters > 0
                               ? static_cast<double>(w.gradient_sync.bucket_parameters)
                               : DefaultBucketParameters(w);
  sync.sm_choices = {1, 2, 4, 8, 16};
  const int library = w.gpu.interconnect.library_default_sms;
  if (std::find(sync.sm_choices.begin(), sync.sm_choices.end(), library) == sync.sm_choices.end()) {
    sync.sm_choices.push_back(library);
    std::sort(sync.sm_choices.begin(), sync.sm_choices.end());
  }
  const double bucket =
      sync.overlap ? sync.bucket_parameters : std::numeric_limits<double>::infinity();
  const Shard shard(w, 1);
  const double tp = w.parallelism.tp;
  const double layer_parameters = double(w.model.LayerParameters()) / double(w.model.layers) / tp;
  const double vocab_parameters = double(shard.vocab) * double(w.model.hidden);  // per TP rank
  for (StageModel& unit : model.stages) {
    const std::vector<Op> order = BackwardKernelOrder(model, unit.stage, unit.chunk);
    const int last_index = static_cast<int>(order.size()) - 1;
    // (parameters, index of the kernel after which their gradients are complete); the order
    // is head (non-embedding non-partition kernels), the layers, then the embedding.
    std::vector<std::pair<double, int>> items;
    const bool last_unit = unit.stage == model.num_stages - 1 && unit.chunk == model.num_chunks - 1;
    const bool first_unit = unit.stage == 0 && unit.chunk == 0;
    int head = 0;
    for (const Op& op : unit.backward.non_partition_ops)
      head += RunsBeforeBlock(op, Direction::kBackward) ? 1 : 0;
    if (last_unit) {
      const bool tied_single = w.model.tied_embeddings && first_unit;
      items.push_back({(tied_single ? 0.0 : vocab_parameters) + double(w.model.hidden), head - 1});
    }
    const int tail = static_cast<int>(unit.backward.non_partition_ops.size()) - head;
    const int per_layer = (last_index + 1 - head - tail) / std::max(unit.layers, 1);
    for (int l = 0; l < unit.layers; ++l)
      items.push_back({layer_parameters, head + (l + 1) * per_layer - 1});
    if (first_unit) items.push_back({vocab_parameters, last_index});
    double held = 0.0;
    int ready = 0;
    auto emit = [&](double parameters) {
      GradientBucket b;
      b.parameters = parameters;
      b.ready_after = ready;
      b.collective =
          Collective("grad_bucket_" + std::to_string(unit.gradient_buckets.size()), sync.collective,
                     parameters * w.gradient_sync.reduce_bytes, sync.group_size, 1);
      unit.gradient_buckets.push_back(std::move(b));
    };
    for (const auto& [parameters, after] : items) {
      held += parameters;
      ready = after;
      while (held >= bucket) {
        emit(bucket);
        held -= bucket;
      }
    }
    if (held > 0.0) emit(held);
  }
}

}  // namespace

std::vector<Op> BackwardKernelOrder(const WorkloadModel& model, int stage, int chunk) {
  const Workload& w = model.workload;
  const StageModel& unit = model.Unit(stage, chunk);
  const std::vector<Op> forward = LayerForwardOps(w, w.microbatch_size);
  const std::vector<Op> backward = LayerBackwardOps(w, w.microbatch_size);
  std::vector<Op> order;
  for (const Op& op : unit.backward.non_partition_ops) {
    if (RunsBeforeBlock(op, Direction::kBackward)) order.push_back(op);
  }
  for (int l = 0; l < unit.layers; ++l) {
    if (w.recompute == Recompute::kFull) order.insert(order.end(), forward.begin(), forward.end());
    order.insert(order.end(), backward.begin(), backward.end());
  }
  for (const Op& op : unit.backward.non_partition_ops) {
    if (!RunsBeforeBlock(op, Direction::kBackward)) order.push_back(op);
  }
  return order;
}

namespace {

int LastKernel(const WorkloadModel& model, int stage, int chunk) {
  return static_cast<int>(BackwardKernelOrder(model, stage, chunk).size()) - 1;
}

}  // namespace

std::vector<GradientBucket> LastBackwardBuckets(const WorkloadModel& model, int stage) {
  if (!model.gradient_sync.enabled || !model.gradient_sync.overlap) return {};
  const int last = LastKernel(model, stage, 0);
  std::vector<GradientBucket> out;
  for (const GradientBucket& b : model.Unit(stage, 0).gradient_buckets) {
    if (b.ready_after < last) out.push_back(b);
  }
  return out;
}

std::vector<GradientBucket> GradientSyncBuckets(const WorkloadModel& model, int stage, int chunk) {
  if (!model.gradient_sync.enabled) return {};
  if (!model.gradient_sync.overlap) {
    if (chunk != 0) return {};
    std::vector<GradientBucket> out;
    for (int c = model.num_chunks - 1; c >= 0; --c) {
      const auto& buckets = model.Unit(stage, c).gradient_buckets;
      out.insert(out.end(), buckets.begin(), buckets.end());
    }
    return out;
  }
  if (chunk > 0) return model.Unit(stage, chunk).gradient_buckets;
  const int last = LastKernel(model, stage, 0);
  std::vector<GradientBucket> out;
  for (const GradientBucket& b : model.Unit(stage, 0).gradient_buckets) {
    if (b.ready_after >= last) out.push_back(b);
  }
  return out;
}

WorkloadModel BuildWorkloadModel(const Workload& w) {
  WorkloadModel model;
  model.workload = w;
  const bool cp = w.parallelism.cp > 1;
  // With neither TP nor CP there is no collective inside a layer: nothing to overlap.
  const bool has_collectives = w.parallelism.tp > 1 || cp;
  model.nanobatching = w.CanNanobatch() && has_collectives;

  const std::vector<Op> fwd_full = LayerForwardOps(w, w.microbatch_size);
  const std::vector<Op> bwd_full = LayerBackwardOps(w, w.microbatch_size);

  std::vector<Op> fwd_nano, bwd_nano;
  if (model.nanobatching) {
    const int nano = w.microbatch_size / 2;  // the published split: [:b//2], [b//2:]
    fwd_nano = LayerForwardOps(w, nano);
    bwd_nano = LayerBackwardOps(w, nano);
    // Types from a two-layer block: the second layer's partitions are the steady-state shapes
    // (they start with the previous layer's residual add, as every layer but the first does).
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      const auto occurrences =
          Occurrences(d == Direction::kForward ? fwd_nano : bwd_nano, 2, d, cp);
      const size_t per_layer = (occurrences.size() - 2) / 2;
      for (size_t i = 0; i < occurrences.size(); ++i) {
        const bool second_layer_or_trail = i >= per_layer;
        const Occurrence& o = occurrences[i];
        if (!second_layer_or_trail || !o.collective) continue;
        if (TypeIndex(model.partition_types, o.key) < 0) {
          model.partition_types.push_back(MakeType(o, d));
        }
      }
    }
  }

  const int pp = w.parallelism.pp;
  const int chunks = w.parallelism.virtual_stages;
  model.num_stages = pp;
  model.num_chunks = chunks;
  for (int u = 0; u < pp * chunks; ++u) {
    const int s = u / chunks;
    const int chunk = u % chunks;
    const bool first = s == 0 && chunk == 0;
    const bool last = s == pp - 1 && chunk == chunks - 1;
    StageModel stage;
    stage.stage = s;
    stage.chunk = chunk;
    stage.layers = w.parallelism.layers_per_stage[s] / chunks;
    stage.gpus = w.GpusPerStage();
    const Shard full(w, w.microbatch_size);
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      InstructionModel& ins = d == Direction::kForward ? stage.forward : stage.backward;
      ins.direction = d;
      // Sequential kernels: backward with full recompute re-runs the block's forward first.
      if (d == Direction::kForward || w.recompute == Recompute::kFull) {
        for (int l = 0; l < stage.layers; ++l) {
          ins.sequential_ops.insert(ins.sequential_ops.end(), fwd_full.begin(), fwd_full.end());
        }
      }
      if (d == Direction::kBackward) {
        for (int l = 0; l < stage.layers; ++l) {
          ins.sequential_ops.insert(ins.sequential_ops.end(), bwd_full.begin(), bwd_full.end());
        }
      }
      ins.non_partition_ops = NonPartitionOps(w, first, last, d);
      ins.flops = ComputeFlops(ins.sequential_ops) + ComputeFlops(ins.non_partition_ops);
      const bool sends = d == Direction::kForward ? !last : !first;
      ins.p2p_send = Collective(
          d == Direction::kForward ? "p2p_activation" : "p2p_gradient", CollectiveType::kP2P,
          sends ? internal::kBf16Bytes * double(full.tokens) * full.hidden : 0.0, 2, 1);
      if (!model.nanobatching) continue;
      std::vector<std::pair<Direction, const std::vector<Op>*>> parts;
      if (d == Direction::kForward || w.recompute == Recompute::kFull) {
        parts.push_back({Direction::kForward, &fwd_nano});
      }
      if (d == Direction::kBackward) parts.push_back({Direction::kBackward, &bwd_nano});
      for (const auto& [part_direction, layer_ops] : parts) {
        for (const Occurrence& o : Occurrences(*layer_ops, stage.layers, part_direction, cp)) {
          const int type = TypeIndex(model.partition_types, o.key);
          KAREUS_CHECK(type >= 0) << "partition " << o.key << " has no type";
          ins.sequence.push_back({.type = type, .has_collective = o.collective.has_value()});
        }
      }
      for (const auto& step : ins.sequence) {
        auto it = std::find_if(ins.uses.begin(), ins.uses.end(),
                               [&](const PartitionUse& u) { return u.type == step.type; });
        if (it == ins.uses.end()) {
          ins.uses.push_back({.type = step.type, .count = 0, .without_collective = 0});
          it = ins.uses.end() - 1;
        }
        ++it->count;
        if (!step.has_collective) ++it->without_collective;
      }
    }
    model.stages.push_back(std::move(stage));
  }
  BuildGradientSync(model);
  return model;
}

Json WorkloadModel::ToJson() const {
  Json stages_json = Json::array();
  for (const StageModel& stage : stages) {
    Json instructions = Json::array();
    for (const InstructionModel* ins : {&stage.forward, &stage.backward}) {
      Json partitions = Json::array();
      for (const PartitionUse& use : ins->uses) {
        Json p = partition_types[use.type].ToJson();
        p["count"] = use.count;
        p["without_collective"] = use.without_collective;
        // Field order of the documented shape: type, count first.
        Json ordered{{"type", p["type"]}, {"count", use.count}};
        for (auto it = p.begin(); it != p.end(); ++it) {
          if (it.key() != "type" && it.key() != "count") ordered[it.key()] = it.value();
        }
        partitions.push_back(std::move(ordered));
      }
      Json non_partition = Json::array();
      for (const Op& op : ins->non_partition_ops) non_partition.push_back(op.ToJson());
      Json j{{"kind", ToString(ins->direction)},
             {"partitions", partitions},
             {"non_partition_ops", non_partition},
             {"flops", ins->flops},
             {"sequential_kernels", ins->sequential_ops.size()}};
      if (ins->p2p_send.bytes > 0) j["p2p_send"] = ins->p2p_send.ToJson();
      instructions.push_back(std::move(j));
    }
    Json unit{{"stage", stage.stage},
              {"chunk", stage.chunk},
              {"layers", stage.layers},
              {"gpus", stage.gpus},
              {"instructions", instructions}};
    if (!stage.gradient_buckets.empty()) {
      double parameters = 0.0, bytes = 0.0;
      for (const GradientBucket& b : stage.gradient_buckets) {
        parameters += b.parameters;
        bytes += b.collective.bytes;
      }
      unit["gradient_sync"] = {
          {"buckets", stage.gradient_buckets.size()}, {"parameters", parameters}, {"bytes", bytes}};
    }
    stages_json.push_back(std::move(unit));
  }
  Json out{{"workload", workload.ToJson()},
           {"schedule", schedule::ToString(workload.Schedule())},
           {"nanobatching", nanobatching},
           {"iteration_flops", IterationFlops()},
           {"stages", stages_json}};
  if (gradient_sync.enabled) {
    out["gradient_sync"] = {{"group_size", gradient_sync.group_size},
                            {"inter_node", gradient_sync.inter_node},
                            {"collective", ToString(gradient_sync.collective)},
                            {"overlap", gradient_sync.overlap},
                            {"bucket_parameters", gradient_sync.bucket_parameters},
                            {"sm_choices", gradient_sync.sm_choices}};
  }
  if (!nanobatching) {
    out["nanobatching_note"] =
        workload.CanNanobatch()
            ? "no collective inside a layer (tp = cp = 1): nothing to overlap; sequential only"
            : "microbatch_size < 2 cannot be split into two nanobatches; sequential only";
  }
  return out;
}

}  // namespace kareus::workload
