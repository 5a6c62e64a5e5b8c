// SPDX-License-Identifier: Apache-2.0
#include "distributed/codec.h"

#include <bit>
#include <cstring>

#include "kareus/common/error.h"

namespace kareus::distributed::internal {

void Writer::U64(uint64_t value) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  bytes_.append(buf, 8);
}

void Writer::F64(double value) { U64(std::bit_cast<uint64_t>(value)); }

void Writer::Str(std::string_view value) {
  U64(value.size());
  bytes_.append(value.data(), value.size());
}

void Reader::Need(std::size_t n) const {
  if (bytes_.size() - offset_ < n) {
    throw EnvironmentError("malformed message between ranks: " + std::to_string(n) +
                           " more bytes expected at offset " + std::to_string(offset_) + " of " +
                           std::to_string(bytes_.size()) + " (ranks of different kareus builds?)");
  }
}

uint64_t Reader::U64() {
  Need(8);
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[offset_ + i])) << (8 * i);
  }
  offset_ += 8;
  return value;
}

int Reader::Int() {
  const int64_t value = I64();
  if (value < INT32_MIN || value > INT32_MAX) {
    throw EnvironmentError("malformed message between ranks: integer " + std::to_string(value) +
                           " out of range");
  }
  return static_cast<int>(value);
}

double Reader::F64() { return std::bit_cast<double>(U64()); }

std::string Reader::Str() {
  const uint64_t n = U64();
  Need(n);
  std::string value(bytes_.substr(offset_, n));
  offset_ += n;
  return value;
}

std::size_t Reader::Size() {
  const uint64_t n = U64();
  Need(0);
  // Every element takes at least one byte: a count beyond the rest is malformed.
  if (n > bytes_.size() - offset_) {
    throw EnvironmentError("malformed message between ranks: a count of " + std::to_string(n) +
                           " with " + std::to_string(bytes_.size() - offset_) + " bytes left");
  }
  return static_cast<std::size_t>(n);
}

void Reader::ExpectDone() const {
  if (!Done()) {
    throw EnvironmentError("malformed message between ranks: " +
                           std::to_string(bytes_.size() - offset_) + " bytes left over");
  }
}

void Put(Writer& w, const measure::Sample& s) {
  w.F64(s.time_s);
  w.F64(s.energy_j);
  w.F64(s.static_energy_j);
  w.F64(s.dynamic_energy_j);
  w.F64(s.realized_freq_mhz);
  w.F64(s.seconds);
  w.Int(s.gpus);
  w.Bool(s.noise_free);
}

measure::Sample GetSample(Reader& r) {
  measure::Sample s;
  s.time_s = r.F64();
  s.energy_j = r.F64();
  s.static_energy_j = r.F64();
  s.dynamic_energy_j = r.F64();
  s.realized_freq_mhz = r.F64();
  s.seconds = r.F64();
  s.gpus = r.Int();
  s.noise_free = r.Bool();
  return s;
}

void Put(Writer& w, const measure::PartitionKnobs& k) {
  w.Int(k.freq_mhz);
  w.Int(k.sms);
  w.Str(k.slot);
}

measure::PartitionKnobs GetKnobs(Reader& r) {
  measure::PartitionKnobs k;
  k.freq_mhz = r.Int();
  k.sms = r.Int();
  k.slot = r.Str();
  return k;
}

namespace {

void Put(Writer& w, const mobo::FrontierPoint& p) {
  Put(w, p.knobs);
  w.F64(p.time_s);
  w.F64(p.energy_j);
  w.F64(p.dynamic_energy_j);
  w.F64(p.measured_time_s);
  w.F64(p.measured_energy_j);
}

mobo::FrontierPoint GetPoint(Reader& r) {
  mobo::FrontierPoint p;
  p.knobs = GetKnobs(r);
  p.time_s = r.F64();
  p.energy_j = r.F64();
  p.dynamic_energy_j = r.F64();
  p.measured_time_s = r.F64();
  p.measured_energy_j = r.F64();
  return p;
}

void PutPoints(Writer& w, const std::vector<mobo::FrontierPoint>& points) {
  w.U64(points.size());
  for (const auto& p : points) Put(w, p);
}

std::vector<mobo::FrontierPoint> GetPoints(Reader& r) {
  std::vector<mobo::FrontierPoint> points(r.Size());
  for (auto& p : points) p = GetPoint(r);
  return points;
}

void Put(Writer& w, const pareto::Point& p) {
  w.F64(p.time_s);
  w.F64(p.energy_j);
  w.I64(p.payload);
}

pareto::Point GetParetoPoint(Reader& r) {
  pareto::Point p;
  p.time_s = r.F64();
  p.energy_j = r.F64();
  p.payload = r.I64();
  return p;
}

void Put(Writer& w, const mobo::PriorUse& u) {
  w.F64(u.time_weight);
  w.F64(u.energy_weight);
  w.F64(u.held_out.time);
  w.F64(u.held_out.dynamic_energy);
  w.U64(u.related_similarity.size());
  for (double v : u.related_similarity) w.F64(v);
  w.Str(u.calibration);
  w.F64(u.calibration_log_rms_before);
  w.F64(u.calibration_log_rms_after);
}

mobo::PriorUse GetPriorUse(Reader& r) {
  mobo::PriorUse u;
  u.time_weight = r.F64();
  u.energy_weight = r.F64();
  u.held_out.time = r.F64();
  u.held_out.dynamic_energy = r.F64();
  u.related_similarity.resize(r.Size());
  for (double& v : u.related_similarity) v = r.F64();
  u.calibration = r.Str();
  u.calibration_log_rms_before = r.F64();
  u.calibration_log_rms_after = r.F64();
  return u;
}

void Put(Writer& w, const mobo::PartitionResult& p) {
  w.Str(p.type);
  w.Bool(p.tunable);
  w.I64(p.space_size);
  w.I64(p.budget);
  w.Int(p.initial_design);
  w.Int(p.batch_size);
  w.U64(p.evaluations.size());
  for (const mobo::Evaluation& e : p.evaluations) {
    w.I64(e.index);
    Put(w, e.knobs);
    Put(w, e.sample);
    Put(w, e.estimate);
    w.Int(e.batch);
    w.Str(e.reason);
    w.Bool(e.from_store);
  }
  w.I64(p.measured);
  w.I64(p.reused);
  w.Int(p.batches);
  w.F64(p.gpu_seconds);
  w.F64(p.cost_gpu_seconds);
  w.F64(p.hypervolume);
  w.U64(p.hypervolume_trace.size());
  for (double hv : p.hypervolume_trace) w.F64(hv);
  PutPoints(w, p.frontier);
  w.U64(p.clock_frontiers.size());
  for (const mobo::ClockFrontier& cf : p.clock_frontiers) {
    w.Int(cf.freq_mhz);
    PutPoints(w, cf.points);
  }
  w.Bool(p.oracle.has_value());
  if (p.oracle) {
    const mobo::OracleComparison& o = *p.oracle;
    for (double v :
         {o.oracle_hypervolume, o.hypervolume, o.hv_ratio, o.random_hv_ratio, o.space_ref_hv_ratio,
          o.random_space_ref_hv_ratio, o.clock_hv_ratio, o.random_clock_hv_ratio}) {
      w.F64(v);
    }
    Put(w, o.reference);
    Put(w, o.space_reference);
  }
  w.Bool(p.has_prior);
  w.U64(p.prior_uses.size());
  for (const mobo::PriorUse& u : p.prior_uses) Put(w, u);
}

mobo::PartitionResult GetPartitionResult(Reader& r) {
  mobo::PartitionResult p;
  p.type = r.Str();
  p.tunable = r.Bool();
  p.space_size = r.I64();
  p.budget = r.I64();
  p.initial_design = r.Int();
  p.batch_size = r.Int();
  p.evaluations.resize(r.Size());
  for (mobo::Evaluation& e : p.evaluations) {
    e.index = r.I64();
    e.knobs = GetKnobs(r);
    e.sample = GetSample(r);
    e.estimate = GetSample(r);
    e.batch = r.Int();
    e.reason = r.Str();
    e.from_store = r.Bool();
  }
  p.measured = r.I64();
  p.reused = r.I64();
  p.batches = r.Int();
  p.gpu_seconds = r.F64();
  p.cost_gpu_seconds = r.F64();
  p.hypervolume = r.F64();
  p.hypervolume_trace.resize(r.Size());
  for (double& hv : p.hypervolume_trace) hv = r.F64();
  p.frontier = GetPoints(r);
  p.clock_frontiers.resize(r.Size());
  for (mobo::ClockFrontier& cf : p.clock_frontiers) {
    cf.freq_mhz = r.Int();
    cf.points = GetPoints(r);
  }
  if (r.Bool()) {
    mobo::OracleComparison o;
    for (double* v : {&o.oracle_hypervolume, &o.hypervolume, &o.hv_ratio, &o.random_hv_ratio,
                      &o.space_ref_hv_ratio, &o.random_space_ref_hv_ratio, &o.clock_hv_ratio,
                      &o.random_clock_hv_ratio}) {
      *v = r.F64();
    }
    o.reference = GetParetoPoint(r);
    o.space_reference = GetParetoPoint(r);
    p.oracle = o;
  }
  p.has_prior = r.Bool();
  p.prior_uses.resize(r.Size());
  for (mobo::PriorUse& u : p.prior_uses) u = GetPriorUse(r);
  return p;
}

}  // namespace

void Put(Writer& w, const mobo::ProfileResult& s) {
  w.Str(s.gpu);
  w.Str(s.workload_signature);
  w.Str(s.backend);
  w.Str(s.surrogate);
  w.Str(s.strategy);
  w.Str(s.prior);
  w.U64(s.related.size());
  for (const std::string& r : s.related) w.Str(r);
  w.Bool(s.prior_is_measuring_model);
  w.Str(s.prior_note);
  w.U64(s.seed);
  w.U64(s.partitions.size());
  for (const auto& p : s.partitions) Put(w, p);
  w.F64(s.gpu_seconds);
  w.F64(s.cost_gpu_seconds);
  w.I64(s.measurements_taken);
  w.I64(s.measurements_reused);
}

mobo::ProfileResult GetProfileResult(Reader& r) {
  mobo::ProfileResult s;
  s.gpu = r.Str();
  s.workload_signature = r.Str();
  s.backend = r.Str();
  s.surrogate = r.Str();
  s.strategy = r.Str();
  s.prior = r.Str();
  s.related.resize(r.Size());
  for (std::string& related : s.related) related = r.Str();
  s.prior_is_measuring_model = r.Bool();
  s.prior_note = r.Str();
  s.seed = r.U64();
  s.partitions.resize(r.Size());
  for (auto& p : s.partitions) p = GetPartitionResult(r);
  s.gpu_seconds = r.F64();
  s.cost_gpu_seconds = r.F64();
  s.measurements_taken = r.I64();
  s.measurements_reused = r.I64();
  return s;
}

}  // namespace kareus::distributed::internal
