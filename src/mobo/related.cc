// SPDX-License-Identifier: Apache-2.0
// Transfer between workloads: reading a related workload's measurement store (read-only) and
// turning its rows of a partition type into extra surrogate rows.
#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/mobo/prior.h"

namespace kareus::mobo {
namespace internal {
namespace {

[[noreturn]] void Unreadable(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("related store " + path.string() + ": " + reason +
                         " (read-only; the file was not modified)");
}

[[noreturn]] void Unrelated(const std::filesystem::path& path, const std::string& reason) {
  ThrowInput("--related", path.string(), reason);
}

// "key=value;key=value" (workload::Workload::Signature()).
std::map<std::string, std::string> SignatureFields(const std::string& signature) {
  std::map<std::string, std::string> fields;
  std::stringstream list(signature);
  std::string item;
  while (std::getline(list, item, ';')) {
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) fields[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return fields;
}

}  // namespace
}  // namespace internal

RelatedWorkload LoadRelatedWorkload(const std::filesystem::path& path,
                                    const workload::WorkloadModel& target,
                                    const std::string& backend_description) {
  using internal::Unreadable;
  using internal::Unrelated;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) == 0) {
    Unreadable(path, "no such store");
  }
  // Read-only: nothing is created or written, not even a journal switch or a -wal file. A
  // damaged row is named and left out (transfer data is extra, and this store is not ours to
  // repair); a damaged meta table or file is an error.
  std::unique_ptr<measure::MeasurementStore> store;
  try {
    store = measure::MeasurementStore::Open(path, {},
                                            {.access = measure::StoreOptions::Access::kReadOnly,
                                             .damaged = measure::StoreOptions::DamagedRows::kSkip,
                                             .check_identity = false});
  } catch (const EnvironmentError& e) {
    throw EnvironmentError(std::string("--related: ") + e.what());
  }
  const measure::StoreIdentity& related = store->identity();
  const workload::Workload& t = target.workload;
  if (related.gpu != t.gpu.name) {
    Unrelated(path, "another GPU (" + related.gpu + ", this workload runs on " + t.gpu.name + ")");
  }
  if (related.backend != backend_description) {
    Unrelated(path, "measured by another backend (" + related.backend +
                        ", this run measures with " + backend_description + ")");
  }
  const std::string signature = related.workload_signature;
  if (signature == t.Signature()) {
    Unrelated(path, "the same workload: pass it as --store to resume from it");
  }
  auto fields = internal::SignatureFields(signature);
  const auto target_fields = internal::SignatureFields(t.Signature());
  if (fields["model"] != target_fields.at("model")) {
    Unrelated(path, "another model (" + fields["model"] + ", this workload's is " +
                        target_fields.at("model") + ")");
  }
  // The related workload's partition types: the target's model and GPU with the related
  // parallelism, batch and sequence (pipeline stages do not change a partition).
  RelatedWorkload out;
  out.store = path;
  out.workload_signature = signature;
  workload::Workload w = t;
  w.name = "related:" + path.filename().string();
  try {
    w.parallelism.tp = std::stoi(fields["tp"]);
    w.parallelism.cp = std::stoi(fields["cp"]);
    w.microbatch_size = std::stoi(fields["mbs"]);
    w.sequence_length = std::stoll(fields["seq"]);
  } catch (const std::exception&) {
    Unreadable(path, "unreadable workload signature '" + signature + "'");
  }
  w.parallelism.pp = 1;
  w.parallelism.dp = 1;
  w.parallelism.layers_per_stage = {static_cast<int>(w.model.layers)};
  for (auto r : {workload::Recompute::kNone, workload::Recompute::kFull}) {
    if (fields["recompute"] == workload::ToString(r)) w.recompute = r;
  }
  if (w.Signature() != signature) {
    Unreadable(path, "cannot rebuild the workload of signature '" + signature + "'");
  }
  out.model = workload::BuildWorkloadModel(w);
  out.measurements = store->All();
  return out;
}

namespace {

// The related rows' prior values as `model` predicts them.
void SetPrior(measure::Backend& model, RelatedRows* data) {
  PriorMean mean = PredictAt(model, *data->type, data->knobs);
  data->prior_time_s = std::move(mean.time_s);
  data->prior_dynamic_energy_j = std::move(mean.dynamic_energy_j);
}

}  // namespace

void CalibrateRelatedPrior(const PriorModel& prior, const ModelPerturbation& calibration,
                           std::vector<RelatedRows>* related) {
  if (!prior.make_calibrated) return;
  for (RelatedRows& data : *related) {
    if (data.prior_time_s.empty() || data.model == nullptr || data.type == nullptr) continue;
    SetPrior(*prior.make_calibrated(*data.model, calibration), &data);
  }
}

std::vector<RelatedRows> RelatedRowsFor(const std::vector<RelatedWorkload>& related,
                                        const workload::PartitionType& type,
                                        const SearchSpace& space, const PriorModel& prior,
                                        std::size_t max_rows, uint64_t seed) {
  std::vector<RelatedRows> out;
  for (std::size_t r = 0; r < related.size(); ++r) {
    const RelatedWorkload& w = related[r];
    const auto it =
        std::find_if(w.model.partition_types.begin(), w.model.partition_types.end(),
                     [&](const workload::PartitionType& t) { return t.name == type.name; });
    if (it == w.model.partition_types.end()) continue;
    std::vector<std::size_t> rows;
    for (std::size_t i = 0; i < w.measurements.size(); ++i) {
      const measure::StoredMeasurement& m = w.measurements[i];
      if (m.partition == type.name && space.IndexOf(m.knobs) >= 0) rows.push_back(i);
    }
    if (rows.empty()) continue;
    if (rows.size() > max_rows) {  // a seeded subset keeps the fits cheap
      Rng rng(DeriveSeed(seed, r));
      std::shuffle(rows.begin(), rows.end(), rng);
      rows.resize(max_rows);
      std::sort(rows.begin(), rows.end());
    }
    RelatedRows data;
    data.workload_signature = w.workload_signature;
    data.model = &w.model;
    data.type = &*it;
    for (std::size_t i : rows) {
      data.indices.push_back(space.IndexOf(w.measurements[i].knobs));
      data.samples.push_back(w.measurements[i].sample);
      data.knobs.push_back(w.measurements[i].knobs);
    }
    if (prior) SetPrior(*prior.make(w.model), &data);
    out.push_back(std::move(data));
  }
  return out;
}

TrainingRows TypeKnowledge::Rows(const SearchSpace& space, const std::vector<int64_t>& indices,
                                 const std::vector<measure::Sample>& samples) const {
  TrainingRows rows;
  const bool with_prior = !prior.empty();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    rows.Add(space.Encode(indices[i]), samples[i].time_s, samples[i].dynamic_energy_j);
    if (with_prior) rows.AddPrior(prior.time_s[indices[i]], prior.dynamic_energy_j[indices[i]]);
  }
  int task = 0;
  for (const RelatedRows& data : related) {
    // A related workload measured without the prior's model cannot join a residual fit.
    if (with_prior && data.prior_time_s.size() != data.indices.size()) continue;
    ++task;
    for (std::size_t i = 0; i < data.indices.size(); ++i) {
      rows.Add(space.Encode(data.indices[i]), data.samples[i].time_s,
               data.samples[i].dynamic_energy_j, task);
      if (with_prior) rows.AddPrior(data.prior_time_s[i], data.prior_dynamic_energy_j[i]);
    }
  }
  return rows;
}

}  // namespace kareus::mobo
