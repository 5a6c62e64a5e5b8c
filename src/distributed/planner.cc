// SPDX-License-Identifier: Apache-2.0
#include "kareus/distributed/planner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "distributed/coordinator.h"
#include "distributed/executor.h"
#include "distributed/link.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/common/table.h"
#include "kareus/workload/workload.h"

namespace kareus::distributed {

std::optional<OptionError> PlannerOptions::Validate() const {
  if (max_outstanding < 1) {
    return OptionError{"max_outstanding", Describe(max_outstanding), "must be >= 1"};
  }
  return std::nullopt;
}

double RankReport::LoadBalance() const {
  double sum = 0.0, max = 0.0;
  for (const RankStats& r : ranks) {
    sum += r.busy_gpu_seconds;
    max = std::max(max, r.busy_gpu_seconds);
  }
  if (ranks.empty() || sum <= 0.0) return 0.0;
  return max / (sum / static_cast<double>(ranks.size()));
}

Json RankReport::ToJson() const {
  Json out;
  out["format"] = "kareus.ranks/1";
  out["ranks"] = static_cast<int64_t>(ranks.size());
  out["busy_basis"] = "backend GPU-seconds of the profiling units each rank measured";
  out["load_balance"] = LoadBalance();
  Json rows = Json::array();
  for (const RankStats& r : ranks) {
    rows.push_back(Json{{"rank", r.rank},
                        {"host", r.host},
                        {"pid", r.pid},
                        {"units", r.units},
                        {"measurements", r.measurements},
                        {"busy_gpu_seconds", r.busy_gpu_seconds},
                        {"jobs", r.jobs},
                        {"job_gpu_seconds", r.job_gpu_seconds}});
  }
  out["per_rank"] = rows;
  return out;
}

std::string RankReport::ToText() const {
  Table table({"rank", "host", "units", "measured", "busy GPU-h", "workloads", "their GPU-h"});
  for (const RankStats& r : ranks) {
    table.AddRow({std::to_string(r.rank), r.host, std::to_string(r.units),
                  std::to_string(r.measurements), FormatFixed(r.busy_gpu_seconds / 3600.0, 2),
                  std::to_string(r.jobs), FormatFixed(r.job_gpu_seconds / 3600.0, 2)});
  }
  return table.ToString() +
         "load balance (max / mean busy GPU-seconds): " + FormatFixed(LoadBalance(), 3) + "\n";
}

namespace {

// When a rank dies, mpirun ends the others with SIGTERM: rank 0 then says what the store holds
// (a preformatted line, written with write(2): async-signal-safe) and dies by the signal.
constexpr char kStoppedMessage[] =
    "kareus: rank 0 stopped by the MPI launcher (did another rank die? mpirun names it): every "
    "measurement that reached rank 0 is committed to the store; rerun the same command to "
    "resume, only what is missing is measured\n";
struct sigaction g_previous_term;
bool g_term_installed = false;

extern "C" void OnTerminate(int signal) {
  [[maybe_unused]] const ssize_t n = write(2, kStoppedMessage, sizeof(kStoppedMessage) - 1);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  raise(signal);
}

void InstallTerminateMessage() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnTerminate;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGTERM, &action, &g_previous_term) == 0) g_term_installed = true;
  // Where SIGTERM is blocked and taken by the clean-up thread (the kareus CLI), that thread
  // writes the line instead.
  SetTerminationMessage(kStoppedMessage);
}

void RemoveTerminateMessage() {
  if (g_term_installed) sigaction(SIGTERM, &g_previous_term, nullptr);
  g_term_installed = false;
  SetTerminationMessage(nullptr);
}

}  // namespace

struct Planner::State {
  Session* session = nullptr;
  std::unique_ptr<internal::InMemoryHub> hub;
  std::unique_ptr<internal::Coordinator> coordinator;
  std::vector<std::thread> threads;

  ~State() {
    if (coordinator) {
      try {
        coordinator->Stop();
      } catch (...) {
      }
    }
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
    if (session != nullptr) {
      session->MarkWorkersStopped();
      RemoveTerminateMessage();
    }
  }

  void StartExecutor(int id, const std::function<WorkerSpec()>& make_spec,
                     const std::string& host) {
    std::shared_ptr<internal::ExecutorLink> link = hub->Executor(id);
    threads.emplace_back([link, make_spec, host]() {
      internal::ServeExecutor(*link, make_spec, host, static_cast<int64_t>(getpid()));
    });
  }
};

Planner::Planner(Session& session, const std::function<WorkerSpec()>& make_spec,
                 const PlannerOptions& options)
    : state_(std::make_unique<State>()) {
  KAREUS_CHECK(session.distributed() && session.planner())
      << "the planner runs on rank 0 of an MPI job";
  ThrowIfInvalid(options.Validate());
  state_->hub = std::make_unique<internal::InMemoryHub>(1);
  state_->coordinator = std::make_unique<internal::Coordinator>(
      internal::MpiPlannerLink(state_->hub->Planner()), options);
  // From here on the coordinator stops the other ranks (not the session).
  state_->session = &session;
  InstallTerminateMessage();
  state_->StartExecutor(0, make_spec, session.host());
  state_->coordinator->AwaitReady();
}

Planner::Planner(int executors, const std::function<WorkerSpec()>& make_spec,
                 const PlannerOptions& options)
    : state_(std::make_unique<State>()) {
  ThrowIfInvalid(options.Validate());
  KAREUS_CHECK(executors >= 1) << executors;
  state_->hub = std::make_unique<internal::InMemoryHub>(executors);
  state_->coordinator = std::make_unique<internal::Coordinator>(state_->hub->Planner(), options);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  for (int e = 0; e < executors; ++e) state_->StartExecutor(e, make_spec, host);
  state_->coordinator->AwaitReady();
}

Planner::~Planner() = default;

int Planner::executors() const { return state_->coordinator->executors(); }

RankReport Planner::Report() const { return state_->coordinator->Report(); }

mobo::ProfileResult Planner::Profile(int index, const workload::WorkloadModel& model,
                                     const mobo::ProfileOptions& options, measure::Backend& backend,
                                     const Context& context) {
  const auto& ids = state_->coordinator->identities();
  const bool same = index >= 0 && index < static_cast<int>(ids.size()) &&
                    ids[index].workload_signature == model.workload.Signature() &&
                    ids[index].backend == backend.Description() &&
                    ids[index].gpu == backend.Gpu().name;
  if (!same) return mobo::ProfileWorkload(model, options, backend, context);
  mobo::WorkloadProfiler profiler(model, options, backend, context);
  state_->coordinator->AddProfile(&profiler, index, backend, {});
  state_->coordinator->Run();
  return profiler.Finish();
}

namespace {

// Whether the flow of `model` profiles partition types through the profiler hook (a profiled,
// overlapping method on a workload that can nanobatch; methods measuring through the
// noise-free twin profile on their own).
bool ProfilesOnRanks(const methods::RunOptions& options, const workload::WorkloadModel& model) {
  if (!model.nanobatching) return false;
  return std::any_of(
      options.methods.begin(), options.methods.end(), [](const methods::MethodSpec& m) {
        return m.Profiles() && !m.noise_free && m.execution != methods::Execution::kSequential;
      });
}

}  // namespace

WorkerSpec EvaluateSpec(const std::vector<std::filesystem::path>& workloads,
                        const methods::RunOptions& options,
                        const measure::BackendFactory& make_backend, const Context& context,
                        const std::filesystem::path& out) {
  WorkerSpec spec;
  const std::vector<workload::Workload> loaded = methods::LoadEvaluationWorkloads(workloads);
  for (const auto& w : loaded) spec.models.push_back(workload::BuildWorkloadModel(w));
  spec.make_backend = make_backend;
  spec.seed = context.seed;
  spec.finish = [loaded, options, make_backend, context, out](
                    int index, const std::optional<mobo::ProfileResult>& profile) {
    const workload::Workload& w = loaded.at(index);
    methods::RunOptions per = options;
    per.profile.store = methods::EvaluationStore(options, w, out);
    per.quiet = true;
    per.profiler = [&profile](const workload::WorkloadModel& model,
                              const mobo::ProfileOptions& popts, measure::Backend& backend,
                              const Context& ctx) {
      if (profile && profile->workload_signature == model.workload.Signature() &&
          profile->backend == backend.Description() && profile->gpu == backend.Gpu().name) {
        return *profile;
      }
      mobo::ProfileOptions local = popts;
      local.store.clear();  // rank 0 is the store's only writer
      return mobo::ProfileWorkload(model, local, backend, ctx);
    };
    const methods::RunResult run =
        methods::RunWorkload(w, per, make_backend, Context{.seed = context.seed, .quiet = true});
    FinishedWorkload done;
    for (const methods::MethodResult& m : run.methods) {
      done.gpu_seconds += m.profiling_gpu_seconds + m.evaluation_gpu_seconds;
      if (m.profile) done.gpu_seconds -= m.profile->cost_gpu_seconds;
    }
    if (!out.empty()) {
      static std::atomic<int64_t> counter{0};
      const std::filesystem::path tmp =
          std::filesystem::temp_directory_path() /
          ("kareus-finish-" + std::to_string(static_cast<long long>(getpid())) + "-" +
           std::to_string(static_cast<long long>(counter++)));
      std::filesystem::remove_all(tmp);
      try {
        methods::WriteRunOutputs(run, tmp);
        std::vector<std::filesystem::path> files;
        for (const auto& entry : std::filesystem::recursive_directory_iterator(tmp)) {
          if (entry.is_regular_file()) files.push_back(entry.path());
        }
        std::sort(files.begin(), files.end());
        for (const auto& file : files) {
          done.files.emplace_back(std::filesystem::relative(file, tmp).generic_string(),
                                  ReadTextFile(file));
        }
      } catch (...) {
        std::filesystem::remove_all(tmp);
        throw;
      }
      std::filesystem::remove_all(tmp);
    }
    done.row = methods::EvaluationRow(run, w.name).dump();
    return done;
  };
  return spec;
}

methods::EvaluationResult Planner::Evaluate(const std::vector<std::filesystem::path>& workloads,
                                            const methods::RunOptions& options,
                                            const measure::BackendFactory& make_backend,
                                            const Context& context,
                                            const std::filesystem::path& out) {
  ThrowIfInvalid(options.Validate());
  // Validate every file (and every method's needs) before running anything.
  const std::vector<workload::Workload> loaded = methods::LoadEvaluationWorkloads(workloads);
  const auto& ids = state_->coordinator->identities();
  if (ids.size() != loaded.size()) {
    throw EnvironmentError("rank 0's executor set up " + std::to_string(ids.size()) +
                           " workloads for " + std::to_string(loaded.size()) + " files");
  }
  const std::size_t n = loaded.size();
  std::optional<OutputFolder> folder;  // OUT is replaced as a whole at the end, as one process does
  if (!out.empty()) {
    folder.emplace(out);
    for (const auto& w : loaded) folder->Keep(methods::EvaluationStore(options, w, out));
  }
  std::vector<workload::WorkloadModel> models;
  models.reserve(n);  // the profilers keep pointers to them
  std::vector<std::unique_ptr<measure::Backend>> backends;
  std::vector<std::unique_ptr<mobo::WorkloadProfiler>> profilers(n);
  const Context quiet{.seed = context.seed, .quiet = true};
  for (std::size_t w = 0; w < n; ++w) {
    models.push_back(workload::BuildWorkloadModel(loaded[w]));
    backends.push_back(make_backend(models[w], context.seed));
    KAREUS_CHECK(backends[w] != nullptr) << "the backend factory made no backend";
    for (const methods::MethodSpec& m : options.methods) {
      if (m.noise_free && !backends[w]->NoiseFreeTwin()) {
        ThrowInput("--methods", m.name,
                   "needs a backend with noise-free values (the emulator); " +
                       backends[w]->Description() + " has none");
      }
    }
    if (ProfilesOnRanks(options, models[w])) {
      mobo::ProfileOptions profile = options.profile;
      profile.store = methods::EvaluationStore(options, loaded[w], out);
      profile.oracle = false;  // as the flow profiles
      profilers[w] =
          std::make_unique<mobo::WorkloadProfiler>(models[w], profile, *backends[w], quiet);
    }
  }

  const bool talk = !options.quiet && !context.quiet && Progress::StderrIsTerminal();
  std::vector<Json> rows(n);
  std::vector<bool> finished(n, false);
  auto on_done = [&](std::size_t w) {
    return [&, w](FinishedWorkload done) {
      if (folder) {
        for (const auto& [path, contents] : done.files) {
          WriteFileAtomic(folder->staging() / loaded[w].name / path, contents);
        }
      }
      rows[w] = Json::parse(done.row);
      finished[w] = true;
      if (talk) std::fprintf(stderr, "kareus: workload %s done\n", loaded[w].name.c_str());
    };
  };
  internal::Coordinator& coordinator = *state_->coordinator;
  for (std::size_t w = 0; w < n; ++w) {
    if (profilers[w]) {
      coordinator.AddProfile(profilers[w].get(), static_cast<int>(w), *backends[w], [&, w]() {
        if (talk) std::fprintf(stderr, "kareus: workload %s profiled\n", loaded[w].name.c_str());
        coordinator.AddJob(static_cast<int>(w), profilers[w]->Finish(), on_done(w));
      });
    } else {
      coordinator.AddJob(static_cast<int>(w), std::nullopt, on_done(w));
    }
  }
  coordinator.Run();

  for (std::size_t w = 0; w < n; ++w) {
    KAREUS_CHECK(finished[w]) << loaded[w].name << " was not finished";
  }
  methods::EvaluationResult result = methods::MakeEvaluation(std::move(rows));
  if (folder) {
    WriteJsonFile(folder->staging() / "evaluation.json", result.evaluation);
    WriteFileAtomic(folder->staging() / "evaluation.txt", result.table);
    folder->Commit();
  }
  return result;
}

void ServeWorker(Session& session, const std::function<WorkerSpec()>& make_spec) {
  KAREUS_CHECK(session.distributed() && !session.planner())
      << "ServeWorker runs on ranks other than 0";
  const std::unique_ptr<internal::ExecutorLink> link = internal::MpiExecutorLink();
  internal::ServeExecutor(*link, make_spec, session.host(), static_cast<int64_t>(getpid()));
}

}  // namespace kareus::distributed
