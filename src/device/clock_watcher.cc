// SPDX-License-Identifier: Apache-2.0
#include "device/clock_watcher.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "device/signal_guard.h"
#include "kareus/common/error.h"

extern char** environ;

namespace kareus::device::internal {
namespace {

namespace fs = std::filesystem;

constexpr const char* kProgramName = "kareus-clock-watcher";
// NVML's initialization takes up to a few seconds on a machine with many GPUs.
constexpr int kStartTimeoutMs = 60000;

bool IsExecutableFile(const fs::path& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

int64_t NowMs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1'000'000;
}

bool Send(int fd, char op, int slot, int gpu) {
  if (fd < 0) return false;
  WatcherMessage message;
  message.op = op;
  message.slot = slot;
  message.gpu = gpu;
  while (true) {
    const ssize_t n = send(fd, &message, sizeof(message), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof(message))) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// Waits up to `timeout_ms` for a message with op in `ops`; async-signal-safe.
bool Receive(int fd, WatcherMessage* message, const char* ops, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  while (true) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
    const int polled = poll(&ready, 1, static_cast<int>(left));
    if (polled < 0 && errno == EINTR) continue;
    if (polled <= 0) return false;
    const ssize_t n = recv(fd, message, sizeof(*message), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // closed: the watcher is gone
    if (n != static_cast<ssize_t>(sizeof(*message))) continue;
    for (const char* op = ops; *op != '\0'; ++op) {
      if (message->op == *op) return true;
    }
  }
}

std::mutex g_cache_mutex;
std::map<std::string, std::weak_ptr<ClockWatcher>>& Cache() {
  static std::map<std::string, std::weak_ptr<ClockWatcher>> cache;
  return cache;
}

}  // namespace

std::string FindClockWatcherProgram() {
  if (const char* env = std::getenv("KAREUS_CLOCK_WATCHER"); env != nullptr && *env != '\0') {
    return IsExecutableFile(env) ? std::string(env) : std::string();
  }
  std::vector<fs::path> folders;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&FindClockWatcherProgram), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/') {
    folders.push_back(fs::path(info.dli_fname).parent_path());  // libkareus.so, the module
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) folders.push_back(exe.parent_path());  // a program linking the runtime statically
  for (const fs::path& folder : folders) {
    // Beside it, or installed: <prefix>/libexec/kareus/ from <prefix>/lib/ or from a
    // multiarch <prefix>/lib/x86_64-linux-gnu/.
    for (const fs::path& candidate :
         {folder / kProgramName, folder.parent_path() / "libexec" / "kareus" / kProgramName,
          folder.parent_path().parent_path() / "libexec" / "kareus" / kProgramName}) {
      if (IsExecutableFile(candidate)) return candidate.string();
    }
  }
#ifdef KAREUS_CLOCK_WATCHER_INSTALL_PATH
  if (IsExecutableFile(KAREUS_CLOCK_WATCHER_INSTALL_PATH)) return KAREUS_CLOCK_WATCHER_INSTALL_PATH;
#endif
#ifdef KAREUS_CLOCK_WATCHER_BUILD_PATH
  if (IsExecutableFile(KAREUS_CLOCK_WATCHER_BUILD_PATH)) return KAREUS_CLOCK_WATCHER_BUILD_PATH;
#endif
  return "";
}

std::shared_ptr<ClockWatcher> ClockWatcher::ForLibrary(const std::string& library_path) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  std::weak_ptr<ClockWatcher>& cached = Cache()[library_path];
  if (std::shared_ptr<ClockWatcher> watcher = cached.lock();
      watcher != nullptr && watcher->generation_ == ForkGeneration() && watcher->fd() >= 0) {
    return watcher;
  }
  const std::string program = FindClockWatcherProgram();
  if (program.empty()) {
    throw EnvironmentError(fmt::format(
        "cannot find the clock watcher program {} (looked beside the Kareus library and "
        "program, in ../libexec/kareus/, and in the build tree); set KAREUS_CLOCK_WATCHER to "
        "its path. It resets the GPU clocks if this process dies, so no clock is locked "
        "without it",
        kProgramName));
  }
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw EnvironmentError(std::string("cannot create the clock watcher's socket: ") +
                           std::strerror(errno));
  }
  // The watcher's end goes to descriptor 3; from above 3, so dup2 clears close-on-exec.
  const int child_end = fcntl(sockets[1], F_DUPFD_CLOEXEC, 10);
  close(sockets[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, 3);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  // Its own session: a signal to this job's process group does not reach it.
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  std::string arg0 = program;
  std::string arg1 = "--nvml";
  std::string arg2 = library_path;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, &attributes, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(child_end);
  const auto fail = [&](const std::string& reason) {
    close(sockets[0]);
    if (pid > 0) {
      kill(pid, SIGKILL);  // it armed nothing yet
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    throw EnvironmentError(fmt::format("clock watcher {}: {}", program, reason));
  };
  if (spawned != 0) {
    pid = -1;
    fail(std::string("cannot start: ") + std::strerror(spawned));
  }
  WatcherMessage answer;
  if (!Receive(sockets[0], &answer, "KE", kStartTimeoutMs)) fail("did not start");
  if (answer.op == 'E') {
    answer.text[sizeof(answer.text) - 1] = '\0';
    fail(answer.text);
  }
  const int index = RegisterWatcherFd(sockets[0]);
  std::shared_ptr<ClockWatcher> watcher(new ClockWatcher(index, pid, ForkGeneration()));
  cached = watcher;
  return watcher;
}

ClockWatcher::~ClockWatcher() {
  // In a forked child this is the parent's watcher: not ours to close (the fork handler closed
  // our copy of the socket) or to reap.
  if (generation_ != ForkGeneration()) return;
  const int fd = TakeWatcherFd(registry_index_);
  if (fd >= 0) close(fd);  // the watcher resets whatever is still armed, then exits
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

int ClockWatcher::fd() const {
  return generation_ == ForkGeneration() ? WatcherFd(registry_index_) : -1;
}

bool ClockWatcher::Arm(int slot, int gpu) const { return Send(fd(), 'L', slot, gpu); }

bool ClockWatcher::Disarm(int slot, int gpu) const { return Send(fd(), 'U', slot, gpu); }

bool ResetThroughWatcher(int fd, int slot, int gpu, int timeout_ms) {
  if (!Send(fd, 'R', slot, gpu)) return false;
  WatcherMessage answer;
  return Receive(fd, &answer, "r", timeout_ms);
}

pid_t ClockWatcherPid(const std::string& library_path) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  const auto it = Cache().find(library_path);
  if (it == Cache().end()) return -1;
  const std::shared_ptr<ClockWatcher> watcher = it->second.lock();
  return watcher != nullptr && watcher->fd() >= 0 ? watcher->pid() : -1;
}

}  // namespace kareus::device::internal
