// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/backend.h"

#include <algorithm>

#include "kareus/common/context.h"

namespace kareus::measure {

std::vector<Sample> Backend::MeasureAll(const workload::PartitionType& partition,
                                        const std::vector<PartitionKnobs>& batch) {
  std::vector<Sample> samples(batch.size());
  MeasureBatch(partition, batch,
               [&samples](std::size_t index, const Sample& sample) { samples[index] = sample; });
  return samples;
}

std::vector<Sample> Backend::MeasureAll(const workload::WorkloadModel& model,
                                        const std::vector<InstructionRequest>& batch) {
  std::vector<Sample> samples(batch.size());
  MeasureInstructions(model, batch, [&samples](std::size_t index, const Sample& sample) {
    samples[index] = sample;
  });
  return samples;
}

std::vector<Sample> Backend::MeasureAll(const workload::WorkloadModel& model,
                                        const std::vector<FixedWorkRequest>& batch) {
  std::vector<Sample> samples(batch.size());
  MeasureFixedWork(model, batch, [&samples](std::size_t index, const Sample& sample) {
    samples[index] = sample;
  });
  return samples;
}

std::vector<Sample> Backend::MeasureAll(const workload::WorkloadModel& model,
                                        const std::vector<GradientSyncRequest>& batch) {
  std::vector<Sample> samples(batch.size());
  MeasureGradientSync(model, batch, [&samples](std::size_t index, const Sample& sample) {
    samples[index] = sample;
  });
  return samples;
}

const char* ToString(GradientSyncWork work) {
  switch (work) {
    case GradientSyncWork::kOverlapped:
      return "overlapped";
    case GradientSyncWork::kLastBuckets:
      return "last_buckets";
    case GradientSyncWork::kSyncNode:
      return "sync_node";
  }
  return "unknown";
}

int GradientSyncGpus(const workload::WorkloadModel& model) {
  return std::max(1, model.workload.GpusPerStage());
}

int PartitionGpus(const workload::PartitionType& partition) {
  return std::max(1, partition.collective.group_size);
}

int InstructionGpus(const workload::WorkloadModel& model) {
  return std::max(1, model.workload.parallelism.tp * model.workload.parallelism.cp);
}

uint64_t ConfigurationKey(const std::string& workload_signature, const std::string& partition,
                          const PartitionKnobs& knobs) {
  uint64_t key = HashString(workload_signature.c_str());
  key = DeriveSeed(key, HashString(partition.c_str()));
  key = DeriveSeed(key, static_cast<uint64_t>(knobs.freq_mhz));
  key = DeriveSeed(key, static_cast<uint64_t>(knobs.sms));
  key = DeriveSeed(key, HashString(knobs.slot.c_str()));
  return key;
}

}  // namespace kareus::measure
