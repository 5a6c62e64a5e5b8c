// SPDX-License-Identifier: Apache-2.0
// Bad input is an InputError whose message names the field, the value and the valid choices.
#include <gtest/gtest.h>

#include <string>

#include "emulator/test_util.h"
#include "kareus/common/error.h"

namespace kareus::emulator {
namespace {

using testing::A100;
using testing::LlamaTp8;

// Runs `f`, expects an InputError, returns its message.
template <typename F>
std::string InputErrorMessage(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST(Input, ClockOffTheGridListsTheGrid) {
  const workload::PartitionType& type = FindPartitionType(LlamaTp8(), "fwd_attn");
  const std::string msg = InputErrorMessage(
      [&] { SimulatePartition(A100(), type, {.freq_mhz = 1405, .sms = 12, .slot = "norm_0"}); });
  EXPECT_NE(msg.find("freq_mhz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1405"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1410"), std::string::npos) << msg;
  EXPECT_NE(msg.find("steps of 15"), std::string::npos) << msg;
  InputErrorMessage([&] { SimulateKernel(A100(), testing::MakeMemoryOp(1e6), 108, 2000); });
}

TEST(Input, SmsOutsideTheChoicesListsTheChoices) {
  const workload::PartitionType& type = FindPartitionType(LlamaTp8(), "fwd_attn");
  const std::string msg = InputErrorMessage(
      [&] { SimulatePartition(A100(), type, {.freq_mhz = 1410, .sms = 4, .slot = "norm_0"}); });
  EXPECT_NE(msg.find("sms = 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3, 6, 9"), std::string::npos) << msg;
  InputErrorMessage([&] { SimulateSequential(A100(), {testing::MakeMemoryOp(1e6)}, 1410, 108); });
}

TEST(Input, UnknownSlotListsTheSlots) {
  const workload::PartitionType& type = FindPartitionType(LlamaTp8(), "fwd_attn");
  const std::string msg = InputErrorMessage(
      [&] { SimulatePartition(A100(), type, {.freq_mhz = 1410, .sms = 12, .slot = "lnear_0"}); });
  EXPECT_NE(msg.find("lnear_0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("norm_0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("linear_0"), std::string::npos) << msg;
}

TEST(Input, UnknownPartitionListsThePartitions) {
  const std::string msg = InputErrorMessage([&] { FindPartitionType(LlamaTp8(), "fwd_atn"); });
  EXPECT_NE(msg.find("fwd_atn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fwd_attn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bwd_mlp"), std::string::npos) << msg;
}

TEST(Input, InstructionChecksStageAndKnobs) {
  const workload::WorkloadModel& model = LlamaTp8();
  const InstructionKnobs knobs = DefaultInstructionKnobs(model, 1410, ExecutionMode::kNanobatched);
  const std::string msg = InputErrorMessage(
      [&] { SimulateInstruction(model, 2, schedule::Direction::kForward, knobs); });
  EXPECT_NE(msg.find("0..1"), std::string::npos) << msg;
  InstructionKnobs bad = knobs;
  bad.partitions["fwd_mlp"] = {.sms = 7, .slot = "norm_0"};
  InputErrorMessage([&] { SimulateInstruction(model, 0, schedule::Direction::kForward, bad); });
  bad = knobs;
  bad.partitions["nope"] = {.sms = 6, .slot = "norm_0"};
  InputErrorMessage([&] { SimulateInstruction(model, 0, schedule::Direction::kForward, bad); });
}

}  // namespace
}  // namespace kareus::emulator
