// SPDX-License-Identifier: Apache-2.0
#include "distributed/link.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <list>
#include <thread>

#include "kareus/common/error.h"

#ifdef KAREUS_HAVE_MPI
#include <mpi.h>
#endif

namespace kareus::distributed::internal {

void InMemoryHub::Queue::Push(Message m) {
  std::lock_guard<std::mutex> lock(mutex);
  messages.push_back(std::move(m));
}

std::optional<Message> InMemoryHub::Queue::Pop() {
  std::lock_guard<std::mutex> lock(mutex);
  if (messages.empty()) return std::nullopt;
  Message m = std::move(messages.front());
  messages.pop_front();
  return m;
}

namespace {

class HubPlannerLink final : public PlannerLink {
 public:
  HubPlannerLink(InMemoryHub::Queue& inbox, std::vector<InMemoryHub::Queue*> outboxes)
      : inbox_(inbox), outboxes_(std::move(outboxes)) {}
  int executors() const override { return static_cast<int>(outboxes_.size()); }
  void Send(int executor, int tag, std::string body) override {
    KAREUS_CHECK(executor >= 0 && executor < executors()) << "executor " << executor;
    outboxes_[executor]->Push({.source = -1, .tag = tag, .body = std::move(body)});
  }
  std::optional<Message> TryReceive() override { return inbox_.Pop(); }

 private:
  InMemoryHub::Queue& inbox_;
  std::vector<InMemoryHub::Queue*> outboxes_;
};

class HubExecutorLink final : public ExecutorLink {
 public:
  HubExecutorLink(int id, InMemoryHub::Queue& inbox, InMemoryHub::Queue& outbox)
      : id_(id), inbox_(inbox), outbox_(outbox) {}
  int id() const override { return id_; }
  void Send(int tag, std::string body) override {
    outbox_.Push({.source = id_, .tag = tag, .body = std::move(body)});
  }
  std::optional<Message> TryReceive() override { return inbox_.Pop(); }

 private:
  int id_;
  InMemoryHub::Queue& inbox_;
  InMemoryHub::Queue& outbox_;
};

}  // namespace

InMemoryHub::InMemoryHub(int executors) {
  KAREUS_CHECK(executors >= 1) << executors;
  for (int i = 0; i < executors; ++i) to_executor_.push_back(std::make_unique<Queue>());
}

InMemoryHub::~InMemoryHub() = default;

std::unique_ptr<PlannerLink> InMemoryHub::Planner() {
  std::vector<Queue*> outboxes;
  for (auto& q : to_executor_) outboxes.push_back(q.get());
  return std::make_unique<HubPlannerLink>(to_planner_, std::move(outboxes));
}

std::unique_ptr<ExecutorLink> InMemoryHub::Executor(int id) {
  KAREUS_CHECK(id >= 0 && id < executors()) << id;
  return std::make_unique<HubExecutorLink>(id, *to_executor_[id], to_planner_);
}

void Backoff::Wait() {
  delay_us_ = delay_us_ == 0 ? 20 : std::min(2000, delay_us_ * 2);
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
}

#ifdef KAREUS_HAVE_MPI

bool HaveMpi() { return true; }

namespace {

int MessageSize(const std::string& body) {
  KAREUS_CHECK(body.size() < static_cast<std::size_t>(INT_MAX))
      << "a message of " << body.size() << " bytes";
  return static_cast<int>(body.size());
}

void CheckMpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw EnvironmentError(std::string("MPI ") + what + " failed: " + std::string(text, length));
}

// Receives the first message waiting from `source` (MPI_ANY_SOURCE for any), if any. A
// matched probe (MPI-3) so that the message probed is the one received, in send order.
std::optional<Message> ProbeAndReceive(int source) {
  int flag = 0;
  MPI_Message handle;
  MPI_Status status;
  CheckMpi(MPI_Improbe(source, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &handle, &status), "probe");
  if (!flag) return std::nullopt;
  int count = 0;
  CheckMpi(MPI_Get_count(&status, MPI_BYTE, &count), "get_count");
  Message m{.source = status.MPI_SOURCE, .tag = status.MPI_TAG, .body = std::string(count, '\0')};
  CheckMpi(MPI_Mrecv(m.body.data(), count, MPI_BYTE, &handle, MPI_STATUS_IGNORE), "receive");
  return m;
}

class MpiPlanner final : public PlannerLink {
 public:
  explicit MpiPlanner(std::unique_ptr<PlannerLink> local) : local_(std::move(local)) {
    CheckMpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "comm_size");
    KAREUS_CHECK(local_->executors() == 1);
  }
  ~MpiPlanner() override {
    // Every send completes once its rank receives it; a rank that is gone is MPI's to report.
    for (auto& pending : pending_) MPI_Wait(&pending.request, MPI_STATUS_IGNORE);
  }
  int executors() const override { return size_; }
  void Send(int executor, int tag, std::string body) override {
    KAREUS_CHECK(executor >= 0 && executor < size_) << "executor " << executor;
    if (executor == 0) {
      local_->Send(0, tag, std::move(body));
      return;
    }
    Complete();
    pending_.push_back({.body = std::move(body), .request = MPI_REQUEST_NULL});
    Pending& p = pending_.back();
    CheckMpi(MPI_Isend(p.body.data(), MessageSize(p.body), MPI_BYTE, executor, tag, MPI_COMM_WORLD,
                       &p.request),
             "send");
  }
  std::optional<Message> TryReceive() override {
    Complete();
    if (auto m = local_->TryReceive()) return m;
    return ProbeAndReceive(MPI_ANY_SOURCE);
  }

 private:
  struct Pending {
    std::string body;
    MPI_Request request;
  };
  void Complete() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      CheckMpi(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "test");
      it = done ? pending_.erase(it) : std::next(it);
    }
  }
  std::unique_ptr<PlannerLink> local_;
  int size_ = 0;
  std::list<Pending> pending_;  // stable addresses for MPI while in flight
};

class MpiExecutor final : public ExecutorLink {
 public:
  MpiExecutor() { CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "comm_rank"); }
  int id() const override { return rank_; }
  // Blocking: the planner receives continuously, so a large message completes promptly.
  void Send(int tag, std::string body) override {
    CheckMpi(MPI_Send(body.data(), MessageSize(body), MPI_BYTE, 0, tag, MPI_COMM_WORLD), "send");
  }
  std::optional<Message> TryReceive() override { return ProbeAndReceive(0); }

 private:
  int rank_ = 0;
};

}  // namespace

std::unique_ptr<PlannerLink> MpiPlannerLink(std::unique_ptr<PlannerLink> local) {
  return std::make_unique<MpiPlanner>(std::move(local));
}

std::unique_ptr<ExecutorLink> MpiExecutorLink() { return std::make_unique<MpiExecutor>(); }

#else

bool HaveMpi() { return false; }

std::unique_ptr<PlannerLink> MpiPlannerLink(std::unique_ptr<PlannerLink>) {
  throw EnvironmentError("this kareus was built without MPI");
}

std::unique_ptr<ExecutorLink> MpiExecutorLink() {
  throw EnvironmentError("this kareus was built without MPI");
}

#endif

}  // namespace kareus::distributed::internal
