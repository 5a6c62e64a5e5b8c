// SPDX-License-Identifier: Apache-2.0
#include "distributed/coordinator.h"

#include <algorithm>
#include <set>

#include "distributed/codec.h"
#include "distributed/protocol.h"
#include "kareus/common/error.h"

namespace kareus::distributed::internal {

Coordinator::Coordinator(std::unique_ptr<PlannerLink> link, const PlannerOptions& options)
    : link_(std::move(link)), options_(options) {
  ThrowIfInvalid(options_.Validate());
  executors_.resize(link_->executors());
  for (int e = 0; e < executors(); ++e) executors_[e].stats.rank = e;
}

Coordinator::~Coordinator() {
  try {
    Stop();
  } catch (...) {
    // Destructors do not throw; a rank that cannot be stopped is MPI's (mpirun's) to report.
  }
}

std::string Coordinator::Name(int executor) const {
  const RankStats& s = executors_[executor].stats;
  std::string name = "rank " + std::to_string(executor);
  if (!s.host.empty()) {
    name += " (host " + s.host + ", pid " + std::to_string(static_cast<long long>(s.pid)) + ")";
  }
  return name;
}

void Coordinator::Fail(int executor, const std::string& why) const {
  throw EnvironmentError(Name(executor) + ": " + why);
}

void Coordinator::AwaitReady() {
  std::vector<std::optional<Ready>> ready(executors());
  int seen = 0;
  Backoff backoff;
  while (seen < executors()) {
    std::optional<Message> m = link_->TryReceive();
    if (!m) {
      backoff.Wait();
      continue;
    }
    backoff.Reset();
    KAREUS_CHECK(m->tag == kReady)
        << "message " << m->tag << " from " << m->source << " before ready";
    KAREUS_CHECK(m->source >= 0 && m->source < executors() && !ready[m->source]) << m->source;
    ready[m->source] = DecodeReady(m->body);
    executors_[m->source].stats.host = ready[m->source]->host;
    executors_[m->source].stats.pid = ready[m->source]->pid;
    ++seen;
  }
  ready_seen_ = true;
  std::vector<std::string> problems;
  for (int e = 0; e < executors(); ++e) {
    if (!ready[e]->ok) problems.push_back(Name(e) + ": " + ready[e]->error);
  }
  if (problems.empty()) {
    identities_ = ready[0]->identities;
    for (int e = 1; e < executors(); ++e) {
      const auto& ids = ready[e]->identities;
      for (std::size_t w = 0; w < std::max(ids.size(), identities_.size()); ++w) {
        if (w >= ids.size() || w >= identities_.size()) {
          problems.push_back(Name(e) + ": " + std::to_string(ids.size()) +
                             " workloads, rank 0 has " + std::to_string(identities_.size()));
          break;
        }
        const Identity& mine = identities_[w];
        const Identity& theirs = ids[w];
        if (!(mine == theirs)) {
          problems.push_back(Name(e) + ": measures workload " + std::to_string(w) + " as (" +
                             theirs.gpu + ", " + theirs.backend + ", signature " +
                             theirs.workload_signature + ") but rank 0 as (" + mine.gpu + ", " +
                             mine.backend + ", signature " + mine.workload_signature +
                             "): every rank needs the same workload files, GPU and backend");
        }
      }
    }
  }
  if (!problems.empty()) {
    std::string message = problems.size() == 1
                              ? problems.front()
                              : std::to_string(problems.size()) + " ranks cannot measure: ";
    if (problems.size() > 1) {
      for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    }
    throw EnvironmentError(message);
  }
}

void Coordinator::AddProfile(mobo::WorkloadProfiler* profiler, int index,
                             const measure::Backend& backend, std::function<void()> on_complete) {
  auto profile = std::make_unique<Profile>();
  profile->profiler = profiler;
  profile->index = index;
  profile->backend = &backend;
  profile->on_complete = std::move(on_complete);
  const int types = static_cast<int>(profiler->Types().size());
  profile->slots.resize(types);
  profile->incomplete = types;
  for (int t = 0; t < types; ++t) {
    profile->slots[t].profile = profile.get();
    profile->slots[t].type = t;
  }
  Profile* p = profile.get();
  profiles_.push_back(std::move(profile));
  ++open_profiles_;
  for (TypeSlot& slot : p->slots) ready_.push_back(&slot);
  if (types == 0) {
    --open_profiles_;
    if (p->on_complete) p->on_complete();
  }
}

void Coordinator::AddJob(int index, std::optional<mobo::ProfileResult> profile,
                         std::function<void(FinishedWorkload)> on_done) {
  Item item;
  item.job_index = index;
  item.profile = std::move(profile);
  item.on_done = std::move(on_done);
  item.estimate_gpu_s = 0.0;  // the mean of the jobs done when handed out; corrected on completion
  queue_.push_back(std::move(item));
}

double Coordinator::EstimateUnit(const TypeSlot& slot, std::size_t count) const {
  const workload::PartitionType& type = *slot.profile->profiler->Types()[slot.type];
  const int gpus = measure::PartitionGpus(type);
  double per_sample = 1.0 * gpus;  // nothing observed yet: only relative sizes matter
  if (slot.samples > 0) {
    per_sample = slot.sample_gpu_s / static_cast<double>(slot.samples);
  } else if (samples_ > 0) {
    per_sample = sample_gpu_s_per_gpu_ / static_cast<double>(samples_) * gpus;
  }
  return slot.profile->backend->BatchOverheadSeconds() * gpus +
         per_sample * static_cast<double>(count);
}

// Asks the type for its next batch (a surrogate fit and an acquisition) and queues its units.
void Coordinator::Advance(TypeSlot* slot) {
  Profile& profile = *slot->profile;
  std::optional<mobo::MeasurementBatch> batch = profile.profiler->NextBatch(slot->type);
  if (!batch) {
    if (--profile.incomplete == 0) {
      --open_profiles_;
      if (profile.on_complete) profile.on_complete();
    }
    return;
  }
  slot->pending = batch->knobs.size();
  for (const auto& [begin, end] : batch->units) {
    Item item;
    item.slot = slot;
    item.begin = begin;
    item.knobs.assign(batch->knobs.begin() + begin, batch->knobs.begin() + end);
    item.estimate_gpu_s = EstimateUnit(*slot, item.knobs.size());
    queue_.push_back(std::move(item));
  }
}

// Hands queued work to the least loaded executor (GPU-seconds) with room, or, with
// Assignment::kLeastBusy, to the least loaded one once it has room; ties go to the one with
// fewer items out, then the lowest rank. A job (a workload's remaining flow, its cost unknown
// until one is done) goes to the executor with the fewest jobs first. True if anything was
// handed out.
bool Coordinator::Dispatch() {
  bool any = false;
  while (!queue_.empty()) {
    const bool job = queue_.front().slot == nullptr;
    auto before = [&](const Executor& a, const Executor& b) {
      if (job && a.jobs_assigned != b.jobs_assigned) return a.jobs_assigned < b.jobs_assigned;
      if (a.load_gpu_s != b.load_gpu_s) return a.load_gpu_s < b.load_gpu_s;
      return a.outstanding < b.outstanding;
    };
    const bool wait = options_.assignment == Assignment::kLeastBusy;
    int best = -1;
    for (int e = 0; e < executors(); ++e) {
      const Executor& x = executors_[e];
      if (!wait && x.outstanding >= options_.max_outstanding) continue;
      if (best < 0 || before(x, executors_[best])) best = e;
    }
    if (best < 0 || executors_[best].outstanding >= options_.max_outstanding) break;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    const int64_t id = next_id_++;
    Writer w;
    w.I64(id);
    if (item.slot != nullptr) {
      const Profile& profile = *item.slot->profile;
      w.Int(profile.index);
      w.Str(profile.profiler->Types()[item.slot->type]->name);
      w.U64(item.knobs.size());
      for (const auto& k : item.knobs) Put(w, k);
      link_->Send(best, kUnit, w.Take());
    } else {
      executors_[best].jobs_assigned++;
      if (jobs_done_ > 0) item.estimate_gpu_s = job_gpu_s_ / static_cast<double>(jobs_done_);
      w.Int(item.job_index);
      w.Bool(item.profile.has_value());
      if (item.profile) Put(w, *item.profile);
      link_->Send(best, kJob, w.Take());
    }
    executors_[best].outstanding++;
    executors_[best].load_gpu_s += item.estimate_gpu_s;
    in_flight_.emplace(id, InFlight{.item = std::move(item), .executor = best});
    any = true;
  }
  return any;
}

void Coordinator::Handle(const Message& m) {
  KAREUS_CHECK(m.source >= 0 && m.source < executors()) << m.source;
  Reader r(m.body);
  switch (m.tag) {
    case kSample: {
      const int64_t id = r.I64();
      const uint64_t index = r.U64();
      const measure::Sample sample = GetSample(r);
      r.ExpectDone();
      auto it = in_flight_.find(id);
      if (it == in_flight_.end() || it->second.item.slot == nullptr ||
          index >= it->second.item.knobs.size()) {
        Fail(m.source, "a sample of an unknown unit " + std::to_string(id));
      }
      TypeSlot* slot = it->second.item.slot;
      slot->profile->profiler->Record(slot->type, it->second.item.begin + index, sample);
      slot->sample_gpu_s += sample.GpuSeconds();
      ++slot->samples;
      sample_gpu_s_per_gpu_ += sample.seconds;
      ++samples_;
      KAREUS_CHECK(slot->pending > 0);
      if (--slot->pending == 0) ready_.push_back(slot);
      break;
    }
    case kUnitDone: {
      const int64_t id = r.I64();
      const double gpu_seconds = r.F64();
      const int64_t measurements = r.I64();
      r.ExpectDone();
      auto it = in_flight_.find(id);
      if (it == in_flight_.end() || it->second.executor != m.source) {
        Fail(m.source, "completed an unknown unit " + std::to_string(id));
      }
      if (measurements != static_cast<int64_t>(it->second.item.knobs.size())) {
        Fail(m.source, "measured " + std::to_string(measurements) +
                           " configurations of a unit of " +
                           std::to_string(it->second.item.knobs.size()));
      }
      Executor& x = executors_[m.source];
      x.outstanding--;
      x.load_gpu_s += gpu_seconds - it->second.item.estimate_gpu_s;
      x.stats.units++;
      x.stats.measurements += measurements;
      x.stats.busy_gpu_seconds += gpu_seconds;
      in_flight_.erase(it);
      break;
    }
    case kJobDone: {
      const int64_t id = r.I64();
      FinishedWorkload done;
      done.gpu_seconds = r.F64();
      done.files.resize(r.Size());
      for (auto& [path, contents] : done.files) {
        path = r.Str();
        contents = r.Str();
      }
      done.row = r.Str();
      r.ExpectDone();
      auto it = in_flight_.find(id);
      if (it == in_flight_.end() || it->second.executor != m.source ||
          it->second.item.slot != nullptr) {
        Fail(m.source, "finished an unknown job " + std::to_string(id));
      }
      Executor& x = executors_[m.source];
      x.outstanding--;
      x.load_gpu_s += done.gpu_seconds - it->second.item.estimate_gpu_s;
      x.stats.jobs++;
      x.stats.job_gpu_seconds += done.gpu_seconds;
      job_gpu_s_ += done.gpu_seconds;
      ++jobs_done_;
      std::function<void(FinishedWorkload)> on_done = std::move(it->second.item.on_done);
      in_flight_.erase(it);
      if (on_done) on_done(std::move(done));
      break;
    }
    case kFailed:
      Fail(m.source, r.Str());
    default:
      Fail(m.source, "unexpected message tag " + std::to_string(m.tag));
  }
}

void Coordinator::Run() {
  KAREUS_CHECK(ready_seen_) << "AwaitReady first";
  Backoff backoff;
  while (true) {
    bool progress = false;
    while (std::optional<Message> m = link_->TryReceive()) {
      Handle(*m);
      progress = true;
    }
    progress |= Dispatch();
    if (!ready_.empty()) {
      TypeSlot* slot = ready_.front();
      ready_.pop_front();
      Advance(slot);
      Dispatch();  // hand the new units out before the next (possibly long) surrogate fit
      continue;
    }
    if (open_profiles_ == 0 && queue_.empty() && in_flight_.empty()) {
      profiles_.clear();  // every type complete: nothing refers to them any more
      break;
    }
    if (progress) {
      backoff.Reset();
    } else {
      backoff.Wait();
    }
  }
}

void Coordinator::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (int e = 0; e < executors(); ++e) link_->Send(e, kStop, {});
  std::set<int> byes;
  Backoff backoff;
  while (static_cast<int>(byes.size()) < executors()) {
    std::optional<Message> m = link_->TryReceive();
    if (!m) {
      backoff.Wait();
      continue;
    }
    backoff.Reset();
    if (m->tag == kBye) byes.insert(m->source);  // anything else is late work: dropped
  }
}

RankReport Coordinator::Report() const {
  RankReport report;
  for (const Executor& x : executors_) report.ranks.push_back(x.stats);
  return report;
}

}  // namespace kareus::distributed::internal
