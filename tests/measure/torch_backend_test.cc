// SPDX-License-Identifier: Apache-2.0
// The torch backend's side of kareus.measure/1 against scripted workers (small Python programs
// that answer as the real worker does, or hang, die, answer garbage or an error): samples
// arrive in order with the static/dynamic split, knobs are checked before anything is sent,
// and every failure is an EnvironmentError naming the request and what the worker wrote on its
// standard error. The real worker (PyTorch) is tested in tests/torch/test_measure.py and end to
// end in tests/integration/pytorch/test_torch_backend.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "kareus/common/error.h"
#include "kareus/measure/torch_backend.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::measure {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const char* kPython = "/usr/bin/python3";

workload::WorkloadModel Model() {
  return workload::BuildWorkloadModel(workload::WorkloadFromYaml(
      "name: t\nmodel: {name: m, hidden: 64, heads: 4, kv_groups: 2, head_dim: 16, ffn: 96, "
      "layers: 2, vocab: 100}\ngpu: H100-SXM\nparallelism: {tp: 2}\nmicrobatch_size: 2\n"
      "sequence_length: 16\nmicrobatches: 2\n",
      "t.yaml"));
}

// A scripted worker: `behaviour` is Python run for each request line (`request` parsed, `send`
// writes a reply line). The hello is answered ready first.
fs::path Script(
    const std::string& name, const std::string& behaviour,
    const std::string& hello_reply =
        "send({'protocol': 'kareus.measure/1', 'ready': True, 'description': 'scripted'})") {
  const fs::path dir = fs::temp_directory_path() / "kareus_torch_backend_test";
  fs::create_directories(dir);
  const fs::path script = dir / (name + ".py");
  std::ofstream(script) << "import json, sys, time, os\n"
                           "if sys.argv[1:2] == ['-c']:\n"
                           "    print(json.dumps({'ok': True}), flush=True); sys.exit(0)\n"
                           "def send(o):\n"
                           "    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n"
                           "hello = json.loads(sys.stdin.readline())\n"
                        << hello_reply
                        << "\n"
                           "for line in sys.stdin:\n"
                           "    request = json.loads(line)\n"
                        << behaviour << "\n";
  // The backend runs `INTERPRETER -m kareus.torch.measure`: a wrapper that runs the script.
  const fs::path wrapper = dir / name;
  std::ofstream(wrapper) << "#!/bin/sh\nif [ \"$1\" = -c ]; then exec " << kPython << " "
                         << script.string() << " -c; fi\nexec " << kPython << " " << script.string()
                         << "\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  return wrapper;
}

const char* kAnswers =
    "    for i, c in enumerate(request['configurations']):\n"
    "        send({'id': request['id'], 'index': i, 'time_s': 0.5 + i, 'energy_j': 200.0 + i,\n"
    "              'seconds': 2.0, 'gpus': 2, 'realized_mhz': 1980, 'runs': 3})\n"
    "    send({'id': request['id'], 'done': True, 'overhead_s': 1.5})\n";

TorchBackendOptions Options(const fs::path& worker, double timeout_s = 10.0) {
  return {.python = worker.string(),
          .python_path = "/nonexistent",
          .device = "cpu",
          .allow_clock_control = false,
          .warmup_runs = 0,
          .min_runs = 1,
          .window_s = 0.0,
          .threads = 1,
          .timeout_s = timeout_s,
          .seed = 1};
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const EnvironmentError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no EnvironmentError";
  return "";
}

TEST(TorchBackend, SamplesArriveInOrderWithTheStaticSplit) {
  const auto model = Model();
  auto backend = MakeTorchBackend(model, Options(Script("answers", kAnswers)));
  EXPECT_THAT(backend->Description(),
              HasSubstr("torch(scripted; clock as found: one clock level (1980 MHz)"));
  // Without clock control the one clock level is the preset's default.
  EXPECT_EQ(backend->Gpu().clock.min_mhz, model.workload.gpu.clock.default_mhz);
  EXPECT_EQ(backend->Gpu().clock.max_mhz, model.workload.gpu.clock.default_mhz);
  const auto& type = model.Type("fwd_attn");
  const std::vector<Sample> samples =
      backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"},
                                 {.freq_mhz = 1980, .sms = 6, .slot = "attn_0"}});
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_DOUBLE_EQ(samples[1].time_s, 1.5);
  EXPECT_DOUBLE_EQ(samples[1].energy_j, 201.0);
  EXPECT_DOUBLE_EQ(samples[1].static_energy_j, backend->StaticPowerW() * 1.5);
  EXPECT_DOUBLE_EQ(samples[1].dynamic_energy_j, 201.0 - backend->StaticPowerW() * 1.5);
  EXPECT_EQ(samples[0].gpus, 2);
  EXPECT_FALSE(samples[0].noise_free);
  // Two samples of 2 s on 2 GPUs and the batch's 1.5 s warm-up on them.
  EXPECT_DOUBLE_EQ(backend->GpuSeconds(), 2 * 2.0 * 2 + 1.5 * 2);
  EXPECT_DOUBLE_EQ(backend->BatchOverheadSeconds(), 1.5);
  // Knobs are checked here, before the worker sees them.
  EXPECT_THROW(backend->MeasureAll(type, {{.freq_mhz = 1980, .sms = 3, .slot = "rope_9"}}),
               InputError);
  EXPECT_THROW(backend->MeasureAll(type, {{.freq_mhz = 1410, .sms = 3, .slot = "norm_0"}}),
               InputError);
  const std::vector<Sample> instructions = backend->MeasureAll(
      model,
      std::vector<InstructionRequest>{{.stage = 0,
                                       .direction = schedule::Direction::kBackward,
                                       .knobs = {.freq_mhz = 1980,
                                                 .mode = schedule::ExecutionMode::kNanobatched,
                                                 .partitions = {{"bwd_mlp", {6, "linear_0"}}}},
                                       .chunk = 0}});
  EXPECT_EQ(instructions.size(), 1u);
}

TEST(TorchBackend, AWorkerThatCannotMeasureTheWorkloadSaysWhy) {
  const fs::path worker =
      Script("refuses", kAnswers,
             "send({'protocol': 'kareus.measure/1', 'error': 'no energy source: NVML "
             "is missing'}); sys.exit(2)");
  const std::string error = ErrorOf([&] { MakeTorchBackend(Model(), Options(worker)); });
  EXPECT_THAT(
      error,
      HasSubstr("the torch backend cannot measure workload t: no energy source: NVML is missing"));
}

TEST(TorchBackend, ADyingWorkerIsNamedWithItsMessages) {
  const fs::path worker =
      Script("dies",
             "    send({'id': request['id'], 'index': 0, 'time_s': 1, 'energy_j': 1, "
             "'seconds': 1, 'gpus': 2})\n"
             "    sys.stderr.write('rank 1 lost its GPU\\n'); sys.stderr.flush(); os._exit(3)");
  const auto model = Model();
  auto backend = MakeTorchBackend(model, Options(worker));
  std::size_t delivered = 0;
  const std::string error = ErrorOf([&] {
    backend->MeasureBatch(model.Type("fwd_mlp"),
                          {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"},
                           {.freq_mhz = 1980, .sms = 6, .slot = "norm_0"}},
                          [&](std::size_t, const Sample&) { ++delivered; });
  });
  EXPECT_EQ(delivered, 1u);  // what was measured before the death was delivered
  EXPECT_THAT(
      error,
      HasSubstr("request 1 (partition fwd_mlp, 2 configuration(s)) after 1 of 2 measurements"));
  EXPECT_THAT(error, HasSubstr("it exited with code 3"));
  EXPECT_THAT(error, HasSubstr("rank 1 lost its GPU"));
  // Later requests fail at once, naming the earlier failure.
  EXPECT_THAT(ErrorOf([&] {
                backend->MeasureAll(model.Type("fwd_mlp"),
                                    {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"}});
              }),
              HasSubstr("stopped after an earlier failure"));
}

TEST(TorchBackend, AHangingWorkerIsStoppedAfterTheTimeout) {
  const fs::path worker = Script("hangs", "    time.sleep(3600)");
  const auto model = Model();
  auto backend = MakeTorchBackend(model, Options(worker, /*timeout_s=*/1.0));
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf([&] {
    backend->MeasureAll(model.Type("fwd_mlp"), {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"}});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_THAT(error, HasSubstr("it said nothing for 1 s and was stopped"));
}

TEST(TorchBackend, GarbageAndErrorRepliesAreNamed) {
  const auto model = Model();
  auto garbage = MakeTorchBackend(
      model,
      Options(Script("garbage", "    print('Traceback (most recent call last):', flush=True)")));
  EXPECT_THAT(ErrorOf([&] {
                garbage->MeasureAll(model.Type("fwd_mlp"),
                                    {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"}});
              }),
              HasSubstr("not a kareus.measure/1 line: Traceback (most recent call last):"));
  auto refusing = MakeTorchBackend(
      model, Options(Script("error",
                            "    send({'id': request['id'], 'error': 'rank 0: out of memory'})")));
  EXPECT_THAT(
      ErrorOf([&] {
        refusing->MeasureAll(model.Type("fwd_mlp"),
                             {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"}});
      }),
      HasSubstr("request 1 (partition fwd_mlp, 1 configuration(s)): rank 0: out of memory"));
  auto impossible =
      MakeTorchBackend(model, Options(Script("impossible",
                                             "    send({'id': request['id'], 'index': 0, 'time_s': "
                                             "-1, 'energy_j': 1, 'seconds': 1, 'gpus': 2})")));
  EXPECT_THAT(ErrorOf([&] {
                impossible->MeasureAll(model.Type("fwd_mlp"),
                                       {{.freq_mhz = 1980, .sms = 3, .slot = "norm_0"}});
              }),
              HasSubstr("impossible reading"));
}

TEST(TorchBackend, OptionsAreValidatedAndAMissingInterpreterIsNamed) {
  TorchBackendOptions bad = Options("/bin/true");
  bad.device = "tpu";
  EXPECT_THROW(MakeTorchBackend(Model(), bad), InputError);
  const std::string error =
      ErrorOf([&] { CheckTorchBackendAvailable(Options("/nonexistent/python3")); });
  EXPECT_THAT(error, HasSubstr("--backend torch needs PyTorch and the kareus Python package"));
  EXPECT_THAT(error, HasSubstr("interpreter /nonexistent/python3"));
}

}  // namespace
}  // namespace kareus::measure
