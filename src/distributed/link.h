// SPDX-License-Identifier: Apache-2.0
// How the planner (rank 0) and the executors (every rank, rank 0's own measuring thread
// included) exchange messages: in memory between threads of one process, over MPI between
// processes. Messages from one sender arrive in the order they were sent.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kareus::distributed::internal {

struct Message {
  int source = 0;  // the executor it came from (on the planner's side)
  int tag = 0;
  std::string body;
};

// The planner's side: executors 0..executors()-1.
class PlannerLink {
 public:
  virtual ~PlannerLink() = default;
  virtual int executors() const = 0;
  // Never blocks for long: the planner must keep receiving while executors send.
  virtual void Send(int executor, int tag, std::string body) = 0;
  virtual std::optional<Message> TryReceive() = 0;
};

// An executor's side: the planner only.
class ExecutorLink {
 public:
  virtual ~ExecutorLink() = default;
  virtual int id() const = 0;
  virtual void Send(int tag, std::string body) = 0;
  virtual std::optional<Message> TryReceive() = 0;
};

// Links between threads of one process: a planner and `executors` executors.
class InMemoryHub {
 public:
  explicit InMemoryHub(int executors);
  ~InMemoryHub();
  int executors() const { return static_cast<int>(to_executor_.size()); }
  // The planner's link (over every executor of the hub) and executor `id`'s; each at most once.
  std::unique_ptr<PlannerLink> Planner();
  std::unique_ptr<ExecutorLink> Executor(int id);

  struct Queue {
    std::mutex mutex;
    std::deque<Message> messages;
    void Push(Message m);
    std::optional<Message> Pop();
  };

 private:
  Queue to_planner_;
  std::vector<std::unique_ptr<Queue>> to_executor_;
};

// True when this build can join an MPI job.
bool HaveMpi();

// Rank 0 of an MPI job: executor 0 is `local` (rank 0's own measuring thread, on an in-memory
// hub of one), executors 1..size-1 are the other ranks. Sends are non-blocking (completed
// while receiving), so the planner never waits on a rank that is itself sending.
std::unique_ptr<PlannerLink> MpiPlannerLink(std::unique_ptr<PlannerLink> local);
// Any other rank: its link to rank 0.
std::unique_ptr<ExecutorLink> MpiExecutorLink();

// Sleeps a little longer each idle round (20 us up to 2 ms), so that waiting ranks do not
// spin on an oversubscribed machine; Reset() after any progress.
class Backoff {
 public:
  void Wait();
  void Reset() { delay_us_ = 0; }

 private:
  int delay_us_ = 0;
};

}  // namespace kareus::distributed::internal
