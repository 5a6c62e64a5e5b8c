// SPDX-License-Identifier: Apache-2.0
// The bytes that cross between ranks: a small binary encoding (fixed-width little-endian
// integers, IEEE-754 doubles by their bits, length-prefixed strings), so that every double
// arrives bit-identical and a rank's decisions never depend on a decimal round trip.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kareus/measure/types.h"
#include "kareus/mobo/profiler.h"

namespace kareus::distributed::internal {

class Writer {
 public:
  void U64(uint64_t value);
  void I64(int64_t value) { U64(static_cast<uint64_t>(value)); }
  void Int(int value) { I64(value); }
  void Bool(bool value) { U64(value ? 1 : 0); }
  void F64(double value);
  void Str(std::string_view value);
  const std::string& bytes() const { return bytes_; }
  std::string Take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// Reads what a Writer wrote; a short or malformed message is an EnvironmentError (a rank
// speaking another version of the protocol), never undefined behaviour.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  uint64_t U64();
  int64_t I64() { return static_cast<int64_t>(U64()); }
  int Int();
  bool Bool() { return U64() != 0; }
  double F64();
  std::string Str();
  std::size_t Size();  // a count of elements that follow, checked against what is left
  bool Done() const { return offset_ == bytes_.size(); }
  void ExpectDone() const;

 private:
  void Need(std::size_t n) const;
  std::string_view bytes_;
  std::size_t offset_ = 0;
};

void Put(Writer& w, const measure::Sample& sample);
measure::Sample GetSample(Reader& r);
void Put(Writer& w, const measure::PartitionKnobs& knobs);
measure::PartitionKnobs GetKnobs(Reader& r);

// Every field of a profile, so that a rank finishing a workload sees exactly what the
// planner saw.
void Put(Writer& w, const mobo::ProfileResult& summary);
mobo::ProfileResult GetProfileResult(Reader& r);

}  // namespace kareus::distributed::internal
