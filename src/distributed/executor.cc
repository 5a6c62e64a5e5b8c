// SPDX-License-Identifier: Apache-2.0
#include "distributed/executor.h"

#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>

#include "distributed/codec.h"
#include "distributed/protocol.h"
#include "kareus/common/error.h"

namespace kareus::distributed::internal {

std::string Encode(const Ready& ready) {
  Writer w;
  w.Bool(ready.ok);
  w.Str(ready.host);
  w.I64(ready.pid);
  w.Str(ready.error);
  w.U64(ready.identities.size());
  for (const Identity& id : ready.identities) {
    w.Str(id.gpu);
    w.Str(id.workload_signature);
    w.Str(id.backend);
  }
  return w.Take();
}

Ready DecodeReady(std::string_view body) {
  Reader r(body);
  Ready ready;
  ready.ok = r.Bool();
  ready.host = r.Str();
  ready.pid = r.I64();
  ready.error = r.Str();
  ready.identities.resize(r.Size());
  for (Identity& id : ready.identities) {
    id.gpu = r.Str();
    id.workload_signature = r.Str();
    id.backend = r.Str();
  }
  r.ExpectDone();
  return ready;
}

KillFault KillFaultFromEnvironment() {
  KillFault fault;
  const char* text = std::getenv("KAREUS_FAULT_KILL_RANK");
  if (text == nullptr) return fault;
  int rank = -1;
  long long after = 0;
  if (std::sscanf(text, "%d:%lld", &rank, &after) != 2 || rank < 0 || after < 1) {
    throw EnvironmentError(std::string("KAREUS_FAULT_KILL_RANK = ") + text +
                           ": expected RANK:MEASUREMENTS (a test switch), e.g. 1:20");
  }
  fault.rank = rank;
  fault.after_measurements = after;
  return fault;
}

namespace {

class Executor {
 public:
  explicit Executor(ExecutorLink& link) : link_(link) {}

  void Serve(const std::function<WorkerSpec()>& make_spec, const std::string& host, int64_t pid) {
    Ready ready{.ok = false, .host = host, .pid = pid, .error = {}, .identities = {}};
    std::string stage = "cannot set up (command line, workload files, backend)";
    try {
      fault_ = KillFaultFromEnvironment();
      spec_ = make_spec();
      for (const workload::WorkloadModel& model : spec_->models) {
        stage = "cannot make its measurement backend for workload " + model.workload.name;
        std::unique_ptr<measure::Backend> backend = spec_->make_backend(model, spec_->seed);
        KAREUS_CHECK(backend != nullptr) << "the backend factory made no backend";
        ready.identities.push_back({.gpu = backend->Gpu().name,
                                    .workload_signature = model.workload.Signature(),
                                    .backend = backend->Description()});
        backends_.push_back(std::move(backend));
      }
      ready.ok = true;
    } catch (const std::exception& e) {
      ready.error = stage + ": " + e.what();
    }
    link_.Send(kReady, Encode(ready));
    Backoff backoff;
    while (true) {
      std::optional<Message> m = link_.TryReceive();
      if (!m) {
        backoff.Wait();
        continue;
      }
      backoff.Reset();
      if (m->tag == kStop) {
        link_.Send(kBye, {});
        return;
      }
      if (!ready.ok) continue;  // the planner stops a job whose ranks are not all ready
      try {
        if (m->tag == kUnit) {
          MeasureUnit(m->body);
        } else if (m->tag == kJob) {
          FinishWorkload(m->body);
        } else {
          throw EnvironmentError("unexpected message tag " + std::to_string(m->tag));
        }
      } catch (const std::exception& e) {
        Writer w;
        w.Str(context_ + e.what());
        link_.Send(kFailed, w.Take());
      }
    }
  }

 private:
  int CheckedWorkload(int index) const {
    if (index < 0 || index >= static_cast<int>(backends_.size())) {
      throw EnvironmentError("workload " + std::to_string(index) + " of " +
                             std::to_string(backends_.size()) +
                             " (different command lines on different ranks?)");
    }
    return index;
  }

  void MeasureUnit(std::string_view body) {
    Reader r(body);
    const int64_t unit = r.I64();
    const int index = CheckedWorkload(r.Int());
    const std::string type_name = r.Str();
    std::vector<measure::PartitionKnobs> knobs(r.Size());
    for (auto& k : knobs) k = GetKnobs(r);
    r.ExpectDone();
    const workload::WorkloadModel& model = spec_->models[index];
    context_ = "measuring " + type_name + " of workload " + model.workload.name + ": ";
    const workload::PartitionType* type = nullptr;
    for (const auto& t : model.partition_types) {
      if (t.name == type_name) type = &t;
    }
    if (type == nullptr) throw EnvironmentError("no partition type " + type_name + " here");
    measure::Backend& backend = *backends_[index];
    const double before_gpu_s = backend.GpuSeconds();
    const int64_t before_count = backend.Measurements();
    backend.MeasureBatch(*type, knobs, [&](std::size_t i, const measure::Sample& sample) {
      Writer w;
      w.I64(unit);
      w.U64(i);
      Put(w, sample);
      link_.Send(kSample, w.Take());
      ++measured_;
      if (link_.id() == fault_.rank && measured_ == fault_.after_measurements) std::raise(SIGKILL);
    });
    Writer w;
    w.I64(unit);
    w.F64(backend.GpuSeconds() - before_gpu_s);
    w.I64(backend.Measurements() - before_count);
    link_.Send(kUnitDone, w.Take());
    context_.clear();
  }

  void FinishWorkload(std::string_view body) {
    Reader r(body);
    const int64_t job = r.I64();
    const int index = CheckedWorkload(r.Int());
    std::optional<mobo::ProfileResult> profile;
    if (r.Bool()) profile = GetProfileResult(r);
    r.ExpectDone();
    context_ = "finishing workload " + spec_->models[index].workload.name + ": ";
    if (!spec_->finish) throw EnvironmentError("this command finishes no workloads");
    const FinishedWorkload done = spec_->finish(index, profile);
    Writer w;
    w.I64(job);
    w.F64(done.gpu_seconds);
    w.U64(done.files.size());
    for (const auto& [path, contents] : done.files) {
      w.Str(path);
      w.Str(contents);
    }
    w.Str(done.row);
    link_.Send(kJobDone, w.Take());
    context_.clear();
  }

  ExecutorLink& link_;
  KillFault fault_;
  std::optional<WorkerSpec> spec_;
  std::vector<std::unique_ptr<measure::Backend>> backends_;
  int64_t measured_ = 0;
  std::string context_;  // what the executor is doing, for failure messages
};

}  // namespace

void ServeExecutor(ExecutorLink& link, const std::function<WorkerSpec()>& make_spec,
                   const std::string& host, int64_t pid) {
  Executor(link).Serve(make_spec, host, pid);
}

}  // namespace kareus::distributed::internal
