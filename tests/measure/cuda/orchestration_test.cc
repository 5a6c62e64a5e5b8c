// SPDX-License-Identifier: Apache-2.0
// The real-GPU backend's orchestration on a fake device layer (no GPU): programs (slot -> event
// mapping), the communicator cache, the energy window and its repeat count, per-GPU aggregation,
// clock control and its reset on every exit path, rank threads and their failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "kareus/common/context.h"
#include "kareus/measure/cuda_backend.h"
#include "kareus/mobo/profiler.h"
#include "kareus/workload/workload.h"
#include "measure/cuda/fake_device.h"
#include "measure/cuda/gpu_backend.h"
#include "measure/cuda/program.h"

namespace kareus::measure {
namespace {

using internal::CommKey;
using internal::GpuBackend;
using internal::GroupKind;
using internal::KernelKind;
using internal::MemoryPattern;
using internal::Program;
using internal::Step;
using testing::FakeConfig;
using testing::FakeLog;
using testing::FakeSystem;

workload::WorkloadModel Model(int tp, int cp = 1, int microbatch = 4, int sequence = 2048) {
  const std::string yaml =
      "name: tiny\nmodel: llama3.2-3b\ngpu: H200-SXM\nparallelism: {tp: " + std::to_string(tp) +
      ", cp: " + std::to_string(cp) +
      ", pp: 2, dp: 1}\nmicrobatch_size: " + std::to_string(microbatch) +
      "\nsequence_length: " + std::to_string(sequence) + "\nmicrobatches: 4\nrecompute: full\n";
  return workload::BuildWorkloadModel(workload::WorkloadFromYaml(yaml, "tiny"));
}

// Fast protocol settings: virtual time makes the defaults cheap anyway, but keep them short.
CudaBackendOptions Fast(bool clock_control = false) {
  CudaBackendOptions o;
  o.allow_clock_control = clock_control;
  o.settle_s = 0.5;
  o.warmup_runs = 2;
  o.calibration_runs = 5;
  o.window_s = 1.0;
  o.min_counter_periods = 5;
  o.cooldown_s = 0.2;
  o.quiet = true;
  return o;
}

struct Rig {
  std::shared_ptr<FakeLog> log = std::make_shared<FakeLog>();
  FakeSystem* system = nullptr;
  std::unique_ptr<GpuBackend> backend;
};

Rig MakeRig(const workload::WorkloadModel& model, FakeConfig config,
            CudaBackendOptions options = Fast()) {
  Rig rig;
  auto system = std::make_unique<FakeSystem>(std::move(config), rig.log);
  rig.system = system.get();
  rig.backend = std::make_unique<GpuBackend>(model, options, std::move(system));
  return rig;
}

// --- Programs -------------------------------------------------------------------------------

TEST(CudaProgram, KernelsTakeTheWorkloadsShapes) {
  const auto model = Model(2);
  const auto& type = model.Type("fwd_attn");
  const auto kernels = internal::ResolveKernels(type.compute_ops, model.workload);
  ASSERT_EQ(kernels.size(), type.compute_ops.size());
  bool saw_attention = false;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& op = type.compute_ops[i];
    const auto& k = kernels[i];
    if (op.kind == workload::OpKind::kGemm) {
      EXPECT_EQ(k.kind, KernelKind::kGemm);
      EXPECT_EQ(std::tie(k.m, k.n, k.k), std::tie(op.m, op.n, op.k)) << op.name;
    } else if (op.kind == workload::OpKind::kAttention) {
      saw_attention = true;
      // Llama 3.2 3B: 24 heads, 8 KV groups, head 128; TP 2; a nanobatch of 4 / 2 sequences.
      EXPECT_EQ(k.attention.heads, 12);
      EXPECT_EQ(k.attention.kv_heads, 4);
      EXPECT_EQ(k.attention.head_dim, 128);
      EXPECT_EQ(k.attention.q_len, 2048);
      EXPECT_EQ(k.attention.kv_len, 2048);
      EXPECT_EQ(k.attention.batch, 2);
      EXPECT_FALSE(k.attention.backward);
    } else {
      EXPECT_EQ(k.kind, KernelKind::kMemory);
      // The kernel moves the op's bytes (to within the 8-element rounding of a row).
      const double moved = internal::BytesPerElement(k.pattern) * k.rows * k.cols;
      EXPECT_NEAR(moved, op.bytes, 8 * internal::BytesPerElement(k.pattern) * k.rows) << op.name;
    }
  }
  EXPECT_TRUE(saw_attention);
  for (const auto& op : type.compute_ops) {
    if (op.name == "input_layernorm") {
      EXPECT_EQ(internal::ResolveKernel(op, model.workload).pattern, MemoryPattern::kRmsNorm);
    }
    if (op.name == "mlp_bda") {
      EXPECT_EQ(internal::ResolveKernel(op, model.workload).pattern,
                MemoryPattern::kBiasDropoutAdd);
    }
  }
}

TEST(CudaProgram, BackwardAttentionAndContextParallelShapes) {
  const auto model = Model(2, 2);
  const auto& type = model.Type("bwd_a_ag");
  int attention = 0;
  for (const auto& op : type.compute_ops) {
    if (op.kind != workload::OpKind::kAttention) continue;
    const auto k = internal::ResolveKernel(op, model.workload);
    EXPECT_TRUE(k.attention.backward);
    EXPECT_EQ(k.attention.q_len, 1024);   // S / CP queries
    EXPECT_EQ(k.attention.kv_len, 2048);  // against all S keys
    ++attention;
  }
  EXPECT_EQ(attention, 1);
  EXPECT_EQ(internal::PartitionLayout(type).cp, 2);
  EXPECT_EQ(internal::PartitionLayout(type).tp, 1);
  EXPECT_EQ(internal::GroupOf(type.collective.collective), GroupKind::kContext);
}

// The collective is launched right after an event recorded just before the compute op at its
// slot, on the other stream, which waits for that event; the partition ends with a join.
TEST(CudaProgram, SlotBecomesAnEventBeforeThatOp) {
  const auto model = Model(2);
  const auto& type = model.Type("fwd_attn");
  for (const std::string& slot : type.launch_slots) {
    const int index = type.SlotIndex(slot);
    std::set<CommKey> asked;
    const Program p = internal::PartitionProgram(type, {.freq_mhz = 1980, .sms = 6, .slot = slot},
                                                 model.workload, [&](const CommKey& key) {
                                                   asked.insert(key);
                                                   return 7;
                                                 });
    EXPECT_EQ(asked, (std::set<CommKey>{{GroupKind::kTensor, 6}}));
    int compute_launches = 0;
    bool launched = false;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const Step& s = p.steps[i];
      if (s.kind == Step::Kind::kLaunch && s.stream == internal::kCommStream) {
        ASSERT_GE(i, 2u);
        // record(compute, e); wait(comm, e); launch(comm, collective); launch(compute, op index)
        EXPECT_EQ(p.steps[i - 2].kind, Step::Kind::kRecord);
        EXPECT_EQ(p.steps[i - 2].stream, internal::kComputeStream);
        EXPECT_EQ(p.steps[i - 1].kind, Step::Kind::kWait);
        EXPECT_EQ(p.steps[i - 1].stream, internal::kCommStream);
        EXPECT_EQ(p.steps[i - 1].event, p.steps[i - 2].event);
        EXPECT_EQ(compute_launches, index) << slot;
        EXPECT_EQ(p.items[s.item].comm, 7);
        ASSERT_TRUE(p.items[s.item].collective);
        EXPECT_EQ(p.items[s.item].collective->bytes, std::llround(type.collective.bytes));
        launched = true;
      }
      if (s.kind == Step::Kind::kLaunch && s.stream == internal::kComputeStream) ++compute_launches;
    }
    EXPECT_TRUE(launched) << slot;
    EXPECT_EQ(compute_launches, static_cast<int>(type.compute_ops.size()));
    ASSERT_GE(p.steps.size(), 2u);
    EXPECT_EQ(p.steps[p.steps.size() - 2].kind, Step::Kind::kRecord);
    EXPECT_EQ(p.steps[p.steps.size() - 2].stream, internal::kCommStream);
    EXPECT_EQ(p.steps.back().kind, Step::Kind::kWait);
    EXPECT_EQ(p.steps.back().stream, internal::kComputeStream);
  }
}

// Executed on two streams, the collective starts exactly when the op at its slot starts, and the
// partition lasts until both are done: the emulator's execution model.
TEST(CudaProgram, TwoStreamsStartTheCollectiveWithItsSlot) {
  const auto model = Model(2);
  const auto& type = model.Type("fwd_mlp");
  FakeConfig config;
  config.collective_time = [](const internal::CollectiveSpec&, int ctas) { return 1e-3 / ctas; };
  for (const std::string& slot : type.launch_slots) {
    for (int ctas : {3, 30}) {
      const Program p =
          internal::PartitionProgram(type, {.freq_mhz = 1980, .sms = ctas, .slot = slot},
                                     model.workload, [](const CommKey&) { return 0; });
      double run_s = 0.0;
      const auto launches = testing::SimulateProgram(p, config, {{0, ctas}}, 1.0, &run_s);
      double compute_end = 0.0, comm_start = -1.0, comm_end = 0.0, slot_start = -1.0;
      int compute_index = 0;
      for (const auto& l : launches) {
        if (l.stream == internal::kCommStream) {
          comm_start = l.start_s;
          comm_end = l.end_s;
        } else {
          if (compute_index++ == type.SlotIndex(slot)) slot_start = l.start_s;
          compute_end = std::max(compute_end, l.end_s);
        }
      }
      EXPECT_DOUBLE_EQ(comm_start, slot_start) << slot << " " << ctas;
      EXPECT_DOUBLE_EQ(run_s, std::max(compute_end, comm_end)) << slot << " " << ctas;
    }
  }
}

TEST(CudaProgram, InstructionsResolveKnobsAsTheEmulator) {
  const auto model = Model(2);
  InstructionRequest request;
  request.stage = 0;
  request.direction = schedule::Direction::kForward;
  request.knobs.freq_mhz = 1980;
  request.knobs.partitions["fwd_attn"] = {.sms = 9, .slot = "linear_0"};
  const auto plan = internal::ResolveInstruction(model, request);
  ASSERT_TRUE(plan.nanobatched);
  const auto& instr = model.Instruction(0, schedule::Direction::kForward);
  ASSERT_EQ(plan.occurrences.size(), instr.sequence.size());
  std::set<CommKey> expected;
  for (size_t i = 0; i < plan.occurrences.size(); ++i) {
    const auto& o = plan.occurrences[i];
    const auto& type = model.partition_types[o.type];
    EXPECT_EQ(o.with_collective, instr.sequence[i].has_collective);
    if (type.name == "fwd_attn") {
      EXPECT_EQ(o.ctas, 9);
      EXPECT_EQ(o.launch_index, type.SlotIndex("linear_0"));
    } else if (!type.tunable) {
      EXPECT_EQ(o.ctas, type.fixed_sms);
    } else {
      EXPECT_EQ(o.ctas, 0);  // the library default communicator
      EXPECT_EQ(o.launch_index, type.SlotIndex(type.launch_slots.front()));
    }
    if (o.with_collective) expected.insert({GroupKind::kTensor, o.ctas});
  }
  const auto comms = internal::InstructionComms(model, plan);
  EXPECT_EQ(std::set<CommKey>(comms.begin(), comms.end()), expected);

  request.knobs.mode = schedule::ExecutionMode::kSequential;
  const auto sequential = internal::ResolveInstruction(model, request);
  EXPECT_FALSE(sequential.nanobatched);
  EXPECT_EQ(sequential.sequential_ops.size(), instr.sequential_ops.size());
}

// --- Protocol arithmetic ------------------------------------------------------------------------

TEST(CudaProtocol, RepeatsFillTheWindowAndTheCounterPeriods) {
  EXPECT_EQ(internal::RepeatsForWindow(1e-3, 5.0, 0.1, 20, 1'000'000), 5000);
  EXPECT_EQ(internal::RepeatsForWindow(1e-3, 1.0, 0.1, 20, 1'000'000), 2000);  // 20 periods = 2 s
  EXPECT_EQ(internal::RepeatsForWindow(3e-3, 1.0, 0.0, 20, 1'000'000), 334);   // rounded up
  EXPECT_EQ(internal::RepeatsForWindow(10.0, 5.0, 0.1, 20, 1'000'000), 1);
  EXPECT_EQ(internal::RepeatsForWindow(1e-9, 5.0, 0.1, 20, 1000), 1000);
}

TEST(CudaProtocol, WindowEnergyRemovesTheIdleGaps) {
  // Counter updates at 10.0 s (1000 J) and 15.3 s (3120 J); work from 10.02 to 15.22 s; idle 100 W.
  const double e = internal::WindowEnergyJ({10.0, 1000.0}, 10.02, 15.22, {15.3, 3120.0}, 100.0);
  EXPECT_NEAR(e, 2120.0 - 100.0 * (0.02 + 0.08), 1e-9);
}

TEST(CudaProtocol, AggregationIsMaxTimeAndMeanEnergy) {
  std::vector<internal::RankReading> ranks(3);
  ranks[0] = {
      .ordinal = 0, .time_s = 1.0, .energy_j = 300.0, .realized_freq_mhz = 1700, .seconds = 10};
  ranks[1] = {
      .ordinal = 1, .time_s = 1.2, .energy_j = 360.0, .realized_freq_mhz = 1600, .seconds = 12};
  ranks[2] = {
      .ordinal = 2, .time_s = 1.1, .energy_j = 330.0, .realized_freq_mhz = 1800, .seconds = 11};
  const Sample s = internal::AggregateRanks(ranks, 100.0);
  EXPECT_DOUBLE_EQ(s.time_s, 1.2);
  EXPECT_DOUBLE_EQ(s.energy_j, 330.0);
  EXPECT_DOUBLE_EQ(s.static_energy_j, 120.0);
  EXPECT_DOUBLE_EQ(s.dynamic_energy_j, 210.0);
  EXPECT_DOUBLE_EQ(s.realized_freq_mhz, 1700.0);
  EXPECT_DOUBLE_EQ(s.seconds, 12.0);
  EXPECT_EQ(s.gpus, 3);
  EXPECT_DOUBLE_EQ(s.GpuSeconds(), 36.0);
}

TEST(CudaProtocol, BarrierAbortReleasesEveryWaiter) {
  internal::AbortableBarrier barrier(3);
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      try {
        barrier.Wait();
      } catch (const internal::AbortableBarrier::Aborted&) {
        ++released;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  barrier.Abort();
  for (auto& t : threads) t.join();
  EXPECT_EQ(released.load(), 2);
}

// --- The backend on the fake device -------------------------------------------------------------

TEST(CudaBackend, MeasuresEnergyAndTimeThroughTheCounterWindow) {
  FakeConfig config;
  config.counter_period_s = 0.1;  // a coarse counter against a 1 s window
  config.idle_power_w = 80.0;
  config.active_power_w = 450.0;
  const auto model2 = Model(2);
  workload::PartitionType type = model2.Type("fwd_attn");
  type.collective.group_size = 1;  // one GPU: a one-rank communicator
  Rig rig2 = MakeRig(model2, config);
  std::vector<Sample> samples =
      rig2.backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 6, .slot = "norm_0"}});
  ASSERT_EQ(samples.size(), 1u);
  const auto* rank = rig2.system->opened().front();
  const double truth_time = rank->last_run_s();
  EXPECT_NEAR(samples[0].time_s, truth_time, 1e-12);
  // The energy per run is the active power over the run, to well within the counter's
  // quantization (reads at the ends could be off by 0.1 s x 450 W over a 1 s window: 10 %).
  EXPECT_NEAR(samples[0].energy_j / (450.0 * truth_time), 1.0, 0.01);
  EXPECT_NEAR(samples[0].static_energy_j, model2.workload.gpu.power.static_w * samples[0].time_s,
              1e-9);
  EXPECT_DOUBLE_EQ(samples[0].realized_freq_mhz, 1755.0);
  EXPECT_EQ(samples[0].gpus, 1);
  EXPECT_GT(samples[0].seconds, 1.0);  // settle-free: cool-down + calibration + window
  EXPECT_NEAR(rig2.backend->GpuSeconds(), samples[0].GpuSeconds() + 0.0,
              samples[0].GpuSeconds() * 0.5);
  EXPECT_NEAR(rig2.backend->IdlePowerW(), 80.0, 1.0);  // measured at idle, not the preset's
  const auto& record = rig2.backend->Records().front();
  EXPECT_GE(record.ranks.front().repeats,
            internal::RepeatsForWindow(truth_time, 1.0, 0.1, 5, 1'000'000));
}

TEST(CudaBackend, CommunicatorsAreCreatedOncePerSmCountAndGroup) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config);
  const auto& type = model.Type("fwd_mlp");
  auto knobs = [](int sms) {
    return PartitionKnobs{.freq_mhz = 1980, .sms = sms, .slot = "norm_0"};
  };
  rig.backend->MeasureAll(type, {knobs(3), knobs(6), knobs(3), knobs(6)});
  ASSERT_EQ(rig.log->comms.size(), 4u);  // {3, 6} x 2 ranks
  rig.backend->MeasureAll(type, {knobs(6), knobs(9)});
  ASSERT_EQ(rig.log->comms.size(), 6u);  // + 9 x 2 ranks
  std::map<int, std::set<std::string>> ids;
  for (const auto& c : rig.log->comms) {
    EXPECT_EQ(c.nranks, 2);
    EXPECT_EQ(c.rank, c.ordinal);
    EXPECT_EQ(c.key.group, GroupKind::kTensor);
    ids[c.key.ctas].insert(c.id);
  }
  EXPECT_EQ(ids.size(), 3u);
  for (const auto& [ctas, id] : ids)
    EXPECT_EQ(id.size(), 1u) << "both ranks of " << ctas << " share one id";
}

TEST(CudaBackend, ContextAndTensorGroupsOfAnInstruction) {
  const auto model = Model(2, 2);  // 4 ranks: TP groups {0,1},{2,3}; CP groups {0,2},{1,3}
  FakeConfig config;
  config.devices = 4;
  Rig rig = MakeRig(model, config);
  InstructionRequest request;
  request.stage = 0;
  request.direction = schedule::Direction::kForward;
  request.knobs.freq_mhz = 1980;
  const auto samples = rig.backend->MeasureAll(model, std::vector<InstructionRequest>{request});
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].gpus, 4);
  std::map<std::pair<GroupKind, int>, std::set<int>> members;  // (group, id) -> ordinals
  for (const auto& c : rig.log->comms) {
    // Library-default knobs: the default communicator; trailing partitions: their fixed SMs.
    EXPECT_TRUE(c.key.ctas == 0 || c.key.ctas == model.Type("fwd_trail").fixed_sms) << c.key.ctas;
    EXPECT_EQ(c.nranks, 2);
    const int group = c.key.group == GroupKind::kTensor ? c.ordinal / 2 : c.ordinal % 2;
    const int in_group = c.key.group == GroupKind::kTensor ? c.ordinal % 2 : c.ordinal / 2;
    EXPECT_EQ(c.rank, in_group);
    members[std::pair(c.key.group, group)].insert(c.ordinal);
  }
  EXPECT_EQ(members[std::pair(GroupKind::kTensor, 0)], (std::set<int>{0, 1}));
  EXPECT_EQ(members[std::pair(GroupKind::kTensor, 1)], (std::set<int>{2, 3}));
  EXPECT_EQ(members[std::pair(GroupKind::kContext, 0)], (std::set<int>{0, 2}));
  EXPECT_EQ(members[std::pair(GroupKind::kContext, 1)], (std::set<int>{1, 3}));
}

TEST(CudaBackend, PerGpuAggregationOverRealRanks) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  config.rank_speed = {1.0, 0.8};  // rank 1 is slower
  config.rank_power_w = {300.0, 500.0};
  Rig rig = MakeRig(model, config);
  const auto samples = rig.backend->MeasureAll(model.Type("fwd_attn"),
                                               {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}});
  const auto& record = rig.backend->Records().front();
  ASSERT_EQ(record.ranks.size(), 2u);
  EXPECT_GT(record.ranks[1].time_s, record.ranks[0].time_s);
  EXPECT_DOUBLE_EQ(samples[0].time_s, record.ranks[1].time_s);
  EXPECT_DOUBLE_EQ(samples[0].energy_j,
                   0.5 * (record.ranks[0].energy_j + record.ranks[1].energy_j));
  EXPECT_EQ(record.ranks[0].repeats, record.ranks[1].repeats) << "collectives need equal repeats";
  EXPECT_EQ(samples[0].gpus, 2);
}

TEST(CudaBackend, WithoutClockControlOneClockLevelAndNoLocks) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  config.max_sm_clock_mhz = 1980;
  Rig rig = MakeRig(model, config);
  EXPECT_EQ(rig.backend->Gpu().clock.ProfileGrid(), std::vector<int>{1980});
  EXPECT_EQ(rig.backend->Gpu().clock.Supported(), std::vector<int>{1980});
  EXPECT_THAT(rig.backend->Description(), ::testing::HasSubstr("one clock level"));
  const auto& type = model.Type("fwd_attn");
  EXPECT_THROW(rig.backend->MeasureAll(type, {{.freq_mhz = 1500, .sms = 12, .slot = "norm_0"}}),
               InputError);
  rig.backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}});
  EXPECT_TRUE(rig.log->locks.empty());

  // The profiler then searches SMs and slots at that one clock.
  mobo::ProfileOptions options;
  options.partitions = {"fwd_attn"};
  options.budget = 8;
  options.initial_design = 6;
  const auto summary =
      mobo::ProfileWorkload(model, options, *rig.backend, Context{.seed = 3, .quiet = true});
  ASSERT_EQ(summary.partitions.size(), 1u);
  EXPECT_EQ(summary.partitions[0].space_size,
            static_cast<int64_t>(type.sm_choices.size() * type.launch_slots.size()));
  for (const auto& e : summary.partitions[0].evaluations) EXPECT_EQ(e.knobs.freq_mhz, 1980);
  EXPECT_TRUE(rig.log->locks.empty());
}

TEST(CudaBackend, ClockControlLocksPerClockAndResetsAfterwards) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config, Fast(/*clock_control=*/true));
  const auto& type = model.Type("fwd_attn");
  EXPECT_GT(rig.backend->Gpu().clock.ProfileGrid().size(), 1u);
  rig.backend->MeasureAll(type, {{.freq_mhz = 1500, .sms = 12, .slot = "norm_0"},
                                 {.freq_mhz = 1500, .sms = 6, .slot = "norm_0"},
                                 {.freq_mhz = 1800, .sms = 6, .slot = "norm_0"}});
  std::map<int, std::vector<int>> per_gpu;
  for (const auto& [ordinal, mhz] : rig.log->locks) per_gpu[ordinal].push_back(mhz);
  EXPECT_EQ(per_gpu[0], (std::vector<int>{1500, 1800, 0}));
  EXPECT_EQ(per_gpu[1], (std::vector<int>{1500, 1800, 0}));
}

TEST(CudaBackend, ClocksAreResetWhenTheCallerThrows) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config, Fast(true));
  const auto& type = model.Type("fwd_attn");
  EXPECT_THROW(rig.backend->MeasureBatch(
                   type,
                   {{.freq_mhz = 1500, .sms = 12, .slot = "norm_0"},
                    {.freq_mhz = 1500, .sms = 6, .slot = "norm_0"}},
                   [](size_t, const Sample&) { throw EnvironmentError("store full"); }),
               EnvironmentError);
  std::map<int, std::vector<int>> per_gpu;
  for (const auto& [ordinal, mhz] : rig.log->locks) per_gpu[ordinal].push_back(mhz);
  EXPECT_EQ(per_gpu[0], (std::vector<int>{1500, 0}));
  EXPECT_EQ(per_gpu[1], (std::vector<int>{1500, 0}));
}

TEST(CudaBackend, RefusedClockControlIsAnEnvironmentError) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  config.lock_result = internal::ClockResult::kNoPermission;
  Rig rig = MakeRig(model, config, Fast(true));
  try {
    rig.backend->MeasureAll(model.Type("fwd_attn"),
                            {{.freq_mhz = 1500, .sms = 12, .slot = "norm_0"}});
    FAIL() << "expected EnvironmentError";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--allow-clock-control"));
  }
}

TEST(CudaBackend, AFailingRankStopsAllRanksAndTheBackend) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  config.fail_enqueue_on_ordinal = 1;
  Rig rig = MakeRig(model, config);
  const auto& type = model.Type("fwd_attn");
  EXPECT_THROW(rig.backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}}),
               std::runtime_error);
  EXPECT_THROW(rig.backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}}),
               EnvironmentError);
}

TEST(CudaBackend, NotEnoughGpusAndNoEnergyCounterAreEnvironmentErrors) {
  const auto model = Model(2);
  FakeConfig one;
  Rig rig = MakeRig(model, one);
  EXPECT_THROW(rig.backend->MeasureAll(model.Type("fwd_attn"),
                                       {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}}),
               EnvironmentError);

  FakeConfig no_energy;
  no_energy.devices = 2;
  no_energy.energy_supported = false;
  Rig rig2 = MakeRig(model, no_energy);
  EXPECT_THROW(rig2.backend->MeasureAll(model.Type("fwd_attn"),
                                        {{.freq_mhz = 1980, .sms = 12, .slot = "norm_0"}}),
               EnvironmentError);
}

TEST(CudaBackend, InvalidKnobsAndOptionsAreInputErrors) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config);
  EXPECT_THROW(rig.backend->MeasureAll(model.Type("fwd_attn"),
                                       {{.freq_mhz = 1980, .sms = 7, .slot = "norm_0"}}),
               InputError);
  EXPECT_THROW(rig.backend->MeasureAll(model.Type("fwd_attn"),
                                       {{.freq_mhz = 1980, .sms = 12, .slot = "nope"}}),
               InputError);
  CudaBackendOptions bad = Fast();
  bad.window_s = 0.0;
  EXPECT_THAT(bad.Validate()->field, "window_s");
  bad = Fast();
  bad.devices = {0, 0};
  EXPECT_THAT(bad.Validate()->field, "devices");
}

TEST(CudaBackend, FixedWorkRunsSequentiallyOnTheStageReplica) {
  const auto model = Model(2);
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config);
  const std::vector<FixedWorkRequest> batch = {
      {.stage = 1, .direction = schedule::Direction::kForward, .freq_mhz = 1980}};
  const auto samples = rig.backend->MeasureAll(model, batch);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].gpus, 2);
  EXPECT_GT(samples[0].time_s, 0.0);
  // One program on the compute stream only: no communication-stream launch.
  const auto& launches = rig.system->opened().front()->last_launches();
  for (const auto& l : launches) EXPECT_EQ(l.stream, internal::kComputeStream);
}

// Interleaved 1F1B: a request for a model chunk runs that chunk's kernels (stage 0's chunk 0
// holds the embedding, chunk 1 does not), and the data-parallel gradient sync, which spans
// replicas this backend does not run, is refused naming parallelism.dp.
TEST(CudaBackend, ModelChunksAndTheGradientSyncRefusal) {
  const auto model = workload::BuildWorkloadModel(workload::WorkloadFromYaml(
      "name: chunks\nmodel: llama3.2-3b\ngpu: H200-SXM\nparallelism: {tp: 2, pp: 2, dp: 2, "
      "virtual_stages: 2}\n"
      "microbatch_size: 4\nsequence_length: 2048\nmicrobatches: 4\nrecompute: full\n",
      "chunks"));
  FakeConfig config;
  config.devices = 2;
  Rig rig = MakeRig(model, config);
  std::vector<std::size_t> launches;
  for (int chunk : {0, 1}) {
    const std::vector<FixedWorkRequest> batch = {
        {.stage = 0, .direction = schedule::Direction::kForward, .freq_mhz = 1980, .chunk = chunk}};
    ASSERT_EQ(rig.backend->MeasureAll(model, batch).size(), 1u);
    launches.push_back(rig.system->opened().front()->last_launches().size());
  }
  EXPECT_EQ(launches[0], workload::FixedWorkOps(model, 0, 0, schedule::Direction::kForward).size());
  EXPECT_EQ(launches[1], workload::FixedWorkOps(model, 0, 1, schedule::Direction::kForward).size());
  EXPECT_NE(launches[0], launches[1]);
  try {
    rig.backend->MeasureAll(
        model,
        std::vector<GradientSyncRequest>{
            {.stage = 0, .work = GradientSyncWork::kLastBuckets, .freq_mhz = 1980, .sms = 8}});
    FAIL() << "the gradient sync was measured";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parallelism.dp"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--backend emulator"));
  }
}

TEST(CudaBackend, UnavailableBackendsFailCleanly) {
  // Without CUDA the build says so; with CUDA, a machine without a driver or GPU gives an
  // EnvironmentError naming what is missing (and a machine with one passes the check).
  try {
    CheckCudaBackendAvailable({});
    EXPECT_TRUE(CudaBackendBuilt());
  } catch (const EnvironmentError& e) {
    if (!CudaBackendBuilt()) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("built without CUDA"));
    } else {
      EXPECT_THAT(e.what(),
                  ::testing::AnyOf(::testing::HasSubstr("libcuda"), ::testing::HasSubstr("CUDA"),
                                   ::testing::HasSubstr("NVML"), ::testing::HasSubstr("NCCL"),
                                   ::testing::HasSubstr("cuBLASLt")));
    }
  }
}

}  // namespace
}  // namespace kareus::measure
