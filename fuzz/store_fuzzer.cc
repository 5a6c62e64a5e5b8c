// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the measurement store opener. The input is written as the store file;
// opening it must give a store (whose rows then read back checked) or an EnvironmentError that
// leaves the file exactly as it was.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/measure/store.h"

namespace {

// In memory (/dev/shm) where there is one: the store syncs every commit, a disk would make
// the fuzzer measure the disk.
std::filesystem::path StorePath() {
  static const std::filesystem::path path =
      (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                 : std::filesystem::temp_directory_path()) /
      ("kareus_store_fuzz_" + std::to_string(::getpid()) + ".sqlite");
  return path;
}

void RemoveStore() {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ignored;
    std::filesystem::remove(StorePath().string() + suffix, ignored);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RemoveStore();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(StorePath(), std::ios::binary);
    out << bytes;
  }
  const kareus::measure::StoreIdentity identity{
      .gpu = "A100-SXM4-40GB",
      .workload_signature = "model=llama3.2-3b",
      .backend = "emulator(time_noise=0.003,energy_noise=0.01)"};
  std::unique_ptr<kareus::measure::MeasurementStore> store;
  try {
    store = kareus::measure::MeasurementStore::Open(StorePath(), identity,
                                                    {.warn = [](const std::string&) {}});
  } catch (const kareus::EnvironmentError&) {
    // Refused: the file must be exactly as it was (size 0 is the "new store" case).
    if (size > 0 && kareus::ReadTextFile(StorePath()) != bytes) __builtin_trap();
  }
  if (store != nullptr) {
    try {  // opened: every row reads back checked, or the read names what is wrong
      for (const auto& row : store->All()) (void)store->Find(row.partition, row.knobs);
      (void)store->Count();
    } catch (const kareus::EnvironmentError&) {
    }
  }
  store.reset();
  RemoveStore();
  return 0;
}
