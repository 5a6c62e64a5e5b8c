// SPDX-License-Identifier: Apache-2.0
// Distributed planning on MPI (`mpirun -np N kareus profile|run|evaluate ...`). Rank 0 is the
// planner: it owns every partition type's Bayesian-optimization loop (mobo::WorkloadProfiler)
// and the measurement store, and hands out units of work — one unit is a slice of one batch of
// one partition type's configurations (ProfileOptions::unit_size; the whole batch by default),
// or, for `kareus evaluate`, the rest of one workload's flow after its profiling. Every rank
// (rank 0 too, on a thread of its own) measures with its own backend; samples flow back to
// rank 0 as they are taken and are committed to the store as they arrive. A unit goes to the
// rank with the least GPU-seconds of work so far among those with room (PlannerOptions).
//
// Same answer as one process, by construction: a type's decisions depend only on its own seed
// and its own samples (mobo::WorkloadProfiler), a configuration reads the same on every rank
// (backends key their noise by configuration), samples are recorded at their place in the
// batch whatever their arrival order, costs are summed from the samples in evaluation order,
// and summaries, files and tables are assembled in workload and type order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/distributed/session.h"
#include "kareus/measure/backend.h"
#include "kareus/methods/run.h"
#include "kareus/mobo/profiler.h"
#include "kareus/workload/ops.h"

namespace kareus::distributed {

// How a queued unit picks its rank. Busy time is the backend's GPU-seconds of the work handed
// to a rank (estimates of what is out, corrected by what the rank reports when it is done).
enum class Assignment {
  // The least busy rank among those with room (fewer than max_outstanding units out): no rank
  // idles while work is queued. For a backend that measures in real time (GPUs), a rank's
  // turnaround is its busy time, so the ranks share the work evenly this way.
  kLeastBusyWithRoom,
  // The least busy rank, waiting for it to have room: list scheduling on busy time, the way
  // ranks measuring in real time would share the work. For a backend whose GPU-seconds do not
  // pass in wall time (the emulator): there "with room" would follow the operating system's
  // scheduling (rank 0's in-process thread turns units around first), not the work's cost.
  kLeastBusy,
};

struct PlannerOptions {
  int max_outstanding = 2;  // units handed to one rank ahead of its results (one being
                            // measured, one waiting, so a rank never idles on a round trip)
  Assignment assignment = Assignment::kLeastBusyWithRoom;

  std::optional<OptionError> Validate() const;
};

// What a rank that finished a workload sends back: its output files and its evaluation row.
struct FinishedWorkload {
  std::vector<std::pair<std::string, std::string>> files;  // path under out/<workload>, contents
  std::string row;           // the workload's row of evaluation.json (JSON text)
  double gpu_seconds = 0.0;  // backend GPU-seconds of the finishing (sweeps, fixed work,
                             // evaluation of plans), the profile's not included
};

// What every rank builds from its own command line; the planner checks that every rank's
// backends identify the same way as its own (same GPU, workload signature, backend).
struct WorkerSpec {
  std::vector<workload::WorkloadModel> models;  // in the planner's order
  measure::BackendFactory make_backend;
  uint64_t seed = 1;
  // `kareus evaluate` only: everything after workload `index`'s partition profiling.
  std::function<FinishedWorkload(int index, const std::optional<mobo::ProfileResult>& profile)>
      finish;
};

// Work done per rank. Busy time is the backend's GPU-seconds (what a real cluster pays; the
// emulator's CPU time is microseconds per measurement, its GPU-seconds the protocol's).
struct RankStats {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  int64_t units = 0;              // profiling units measured
  int64_t measurements = 0;       // configurations measured
  double busy_gpu_seconds = 0.0;  // backend GPU-seconds of those units
  int64_t jobs = 0;               // workloads finished (evaluate)
  double job_gpu_seconds = 0.0;   // backend GPU-seconds of those
};

struct RankReport {
  std::vector<RankStats> ranks;
  // Max over ranks of the profiling busy time / its mean (1 = perfectly balanced; 0 when no
  // unit was measured).
  double LoadBalance() const;
  Json ToJson() const;
  std::string ToText() const;  // one line per rank and the balance
};

// Rank 0's planner.
class Planner {
 public:
  // Under mpirun: starts rank 0's measuring thread (its spec from make_spec) and waits for every
  // rank's ready message; EnvironmentError naming every rank that cannot set up (e.g. cannot
  // reach its backend) or whose backend or workload differs from rank 0's.
  Planner(Session& session, const std::function<WorkerSpec()>& make_spec,
          const PlannerOptions& options = {});
  // Without MPI: `executors` threads of this process stand for the ranks (tests, and the same
  // scheduler on one machine).
  Planner(int executors, const std::function<WorkerSpec()>& make_spec,
          const PlannerOptions& options = {});
  ~Planner();  // stops every rank (each finishes the unit it is measuring)
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  int executors() const;

  // mobo::ProfileWorkload over the ranks: `model` must be workload `index` of the spec, and
  // `backend` (rank 0's, for the GPU, static power, description and the oracle) must identify
  // as the ranks' do; otherwise (e.g. a method measuring through the noise-free twin) the
  // profile runs here, without the store, like one process would compute it.
  mobo::ProfileResult Profile(int index, const workload::WorkloadModel& model,
                              const mobo::ProfileOptions& options, measure::Backend& backend,
                              const Context& context);

  // methods::EvaluateWorkloads over the ranks: the workloads' partition types are profiled
  // together (rank 0 writes every store), then each workload's remaining flow (clock sweeps,
  // composition, solve, evaluation, files) runs on a rank; rank 0 writes the files and the
  // table in workload order. The spec must come from EvaluateSpec with the same arguments.
  methods::EvaluationResult Evaluate(const std::vector<std::filesystem::path>& workloads,
                                     const methods::RunOptions& options,
                                     const measure::BackendFactory& make_backend,
                                     const Context& context, const std::filesystem::path& out);

  RankReport Report() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The WorkerSpec of `kareus evaluate` (every rank builds it from the same arguments).
WorkerSpec EvaluateSpec(const std::vector<std::filesystem::path>& workloads,
                        const methods::RunOptions& options,
                        const measure::BackendFactory& make_backend, const Context& context,
                        const std::filesystem::path& out);

// Ranks other than 0: sets up (make_spec and one backend per workload; a failure is reported
// to rank 0 with this rank's name), then measures what rank 0 hands out until it says stop.
void ServeWorker(Session& session, const std::function<WorkerSpec()>& make_spec);

}  // namespace kareus::distributed
