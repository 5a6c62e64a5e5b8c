// SPDX-License-Identifier: Apache-2.0
// The planner's event loop: advances every partition type's Bayesian-optimization loop as its
// batches complete, hands units and jobs to executors (least GPU-seconds of work first), and
// records each sample in its profiler (which commits it to the store) as it arrives.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/executor.h"
#include "distributed/link.h"
#include "kareus/distributed/planner.h"
#include "kareus/mobo/profiler.h"

namespace kareus::distributed::internal {

class Coordinator {
 public:
  Coordinator(std::unique_ptr<PlannerLink> link, const PlannerOptions& options);
  ~Coordinator();

  // Waits for every executor's ready message. EnvironmentError naming every executor that
  // could not set up, or whose backends identify differently from executor 0's.
  void AwaitReady();
  // Executor 0's backend identity per workload (rank 0's own).
  const std::vector<Identity>& identities() const { return identities_; }
  int executors() const { return static_cast<int>(executors_.size()); }

  // Profiles `profiler`'s types (workload `index` of the spec) on the executors; `backend`
  // gives each unit's expected overhead. `on_complete` runs once every type is complete.
  void AddProfile(mobo::WorkloadProfiler* profiler, int index, const measure::Backend& backend,
                  std::function<void()> on_complete);
  // Finishes workload `index` on an executor; `on_done` receives its files and row.
  void AddJob(int index, std::optional<mobo::ProfileResult> profile,
              std::function<void(FinishedWorkload)> on_done);
  // Runs until every profile and job added (also from callbacks) is done. A failed unit or job
  // is an EnvironmentError naming the rank.
  void Run();
  // Tells every executor to stop and waits for each (idempotent).
  void Stop();
  RankReport Report() const;

 private:
  struct Profile;
  struct TypeSlot {
    Profile* profile = nullptr;
    int type = 0;
    std::size_t pending = 0;    // samples of the batch in flight not yet recorded
    double sample_gpu_s = 0.0;  // observed cost of this type's samples (unit estimates)
    int64_t samples = 0;
  };
  struct Profile {
    mobo::WorkloadProfiler* profiler = nullptr;
    int index = 0;
    const measure::Backend* backend = nullptr;
    std::function<void()> on_complete;
    std::vector<TypeSlot> slots;
    int incomplete = 0;
  };
  struct Item {  // a unit (slot != nullptr) or a job
    TypeSlot* slot = nullptr;
    std::size_t begin = 0;
    std::vector<measure::PartitionKnobs> knobs;
    int job_index = 0;
    std::optional<mobo::ProfileResult> profile;
    std::function<void(FinishedWorkload)> on_done;
    double estimate_gpu_s = 0.0;
  };
  struct InFlight {
    Item item;
    int executor = 0;
  };
  struct Executor {
    RankStats stats;
    int outstanding = 0;
    int64_t jobs_assigned = 0;
    double load_gpu_s = 0.0;  // assigned work: estimates, corrected by actuals on completion
  };

  std::string Name(int executor) const;
  void Handle(const Message& m);
  void Advance(TypeSlot* slot);
  bool Dispatch();
  double EstimateUnit(const TypeSlot& slot, std::size_t count) const;
  [[noreturn]] void Fail(int executor, const std::string& why) const;

  std::unique_ptr<PlannerLink> link_;
  PlannerOptions options_;
  std::vector<Executor> executors_;
  std::vector<Identity> identities_;
  std::vector<std::unique_ptr<Profile>> profiles_;
  std::deque<TypeSlot*> ready_;  // types whose next batch is due
  std::deque<Item> queue_;       // work not yet handed out
  std::map<int64_t, InFlight> in_flight_;
  int64_t next_id_ = 0;
  int open_profiles_ = 0;
  double sample_gpu_s_per_gpu_ = 0.0;  // observed cost per sample and GPU, all types
  int64_t samples_ = 0;
  double job_gpu_s_ = 0.0;  // of the jobs done (job estimates)
  int64_t jobs_done_ = 0;
  bool ready_seen_ = false;
  bool stopped_ = false;
};

}  // namespace kareus::distributed::internal
