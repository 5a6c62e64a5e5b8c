// SPDX-License-Identifier: Apache-2.0
// kareus-clock-watcher: started by the runtime (src/device/clock_watcher.h) with a socket on
// descriptor 3. Resets the GPUs it was told about when that socket closes, whatever ended the
// process that started it. Deliberately tiny: libc and the dynamic loader only, NVML by dlopen.
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "device/clock_watcher.h"

namespace {

using kareus::device::internal::WatcherMessage;

constexpr int kSocket = 3;
constexpr int kMaxSlots = 64;  // signal_guard.cc: controllers per process

using InitFn = int (*)();
using ShutdownFn = int (*)();
using HandleFn = int (*)(unsigned int, void**);
using ResetFn = int (*)(void*);

void Reply(char op, const char* text = "") {
  WatcherMessage message;
  message.op = op;
  std::snprintf(message.text, sizeof(message.text), "%s", text);
  send(kSocket, &message, sizeof(message), MSG_NOSIGNAL);
}

[[noreturn]] void Refuse(const char* what, const char* detail) {
  char text[sizeof(WatcherMessage::text)];
  std::snprintf(text, sizeof(text), "%s%s", what, detail != nullptr ? detail : "");
  Reply('E', text);
  std::fprintf(stderr, "kareus-clock-watcher: %s\n", text);
  _exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  // Signals meant for the job (Ctrl-C, a scheduler's SIGTERM, a hang-up) must not stop the
  // watcher before it has reset the clocks.
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
    std::signal(signal_number, SIG_IGN);
  }
  // Nothing else of the parent's stays open here (a pipe held open would delay its reader).
  if (close_range(4, ~0U, 0) != 0) {
    for (int fd = 4; fd < 65536; ++fd) close(fd);
  }
  if (argc != 3 || std::strcmp(argv[1], "--nvml") != 0) {
    std::fprintf(stderr,
                 "usage: kareus-clock-watcher --nvml LIBRARY  (started by the Kareus runtime "
                 "with its socket on descriptor 3)\n");
    return 2;
  }
  void* library = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) Refuse("cannot load NVML: ", dlerror());
  const auto init = reinterpret_cast<InitFn>(dlsym(library, "nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(library, "nvmlShutdown"));
  const auto handle = reinterpret_cast<HandleFn>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
  const auto reset = reinterpret_cast<ResetFn>(dlsym(library, "nvmlDeviceResetGpuLockedClocks"));
  if (init == nullptr || shutdown == nullptr || handle == nullptr || reset == nullptr) {
    Refuse("NVML library lacks a function: ", argv[2]);
  }
  if (const int code = init(); code != 0) {
    char detail[32];
    std::snprintf(detail, sizeof(detail), "%d", code);
    Refuse("nvmlInit_v2 failed with NVML code ", detail);
  }
  Reply('K');

  const auto reset_gpu = [&](int gpu) {
    void* device = nullptr;
    int code = handle(static_cast<unsigned int>(gpu), &device);
    if (code == 0) code = reset(device);
    if (code != 0) {
      std::fprintf(stderr,
                   "kareus-clock-watcher: could not reset GPU %d (NVML code %d); reset it with "
                   "nvidia-smi -rgc -i %d\n",
                   gpu, code, gpu);
    }
  };
  int armed[kMaxSlots];  // GPU each controller slot may have locked; -1: none
  for (int& gpu : armed) gpu = -1;
  while (true) {
    WatcherMessage message;
    const ssize_t n = recv(kSocket, &message, sizeof(message), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the process that started us is gone (or closed us): reset
    if (n != static_cast<ssize_t>(sizeof(message)) || message.slot < 0 ||
        message.slot >= kMaxSlots || message.gpu < 0) {
      continue;
    }
    int& slot = armed[message.slot];
    switch (message.op) {
      case 'L':
        slot = message.gpu;
        break;
      case 'U':
        if (slot == message.gpu) slot = -1;
        break;
      case 'R':
        if (slot >= 0) reset_gpu(slot);
        slot = -1;
        Reply('r');
        break;
      default:
        break;
    }
  }
  // Each GPU once, even when several controllers armed it.
  for (int i = 0; i < kMaxSlots; ++i) {
    if (armed[i] < 0) continue;
    const int gpu = armed[i];
    reset_gpu(gpu);
    for (int& other : armed) {
      if (other == gpu) other = -1;
    }
  }
  shutdown();
  return 0;
}
