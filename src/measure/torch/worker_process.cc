// SPDX-License-Identifier: Apache-2.0
#include "measure/torch/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "kareus/common/error.h"

extern char** environ;

namespace kareus::measure::internal {

namespace {

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

WorkerProcess::WorkerProcess(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& environment) {
  KAREUS_CHECK(!argv.empty());
  char path_template[] = "/tmp/kareus-worker-XXXXXX";
  const int stderr_fd = mkstemp(path_template);
  if (stderr_fd < 0) throw EnvironmentError(ErrnoText("cannot create the worker's log file"));
  stderr_path_ = path_template;
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(stderr_fd);
    throw EnvironmentError(ErrnoText("cannot create the worker's pipes"));
  }
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : environment) env[key] = value;
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(stderr_fd);
    throw EnvironmentError(ErrnoText("cannot start the worker"));
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(stderr_fd, STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    execvpe(args[0], args.data(), envp.data());
    const char message[] = "kareus: cannot execute the worker's interpreter\n";
    [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also from here: no race with the child's own call
  pid_ = pid;
  close(stderr_fd);
  close(in_pipe[0]);
  close(out_pipe[1]);
  to_child_ = in_pipe[1];
  from_child_ = out_pipe[0];
}

WorkerProcess::~WorkerProcess() {
  if (to_child_ >= 0) close(to_child_);  // end of input: the worker finishes and exits
  to_child_ = -1;
  if (pid_ > 0 && !status_) {
    for (int i = 0; i < 50 && ExitStatus().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!status_) Kill();
  }
  if (pid_ > 0) kill(-pid_, SIGKILL);  // whatever of its group is left (ranks of a batch)
  if (from_child_ >= 0) close(from_child_);
  if (!stderr_path_.empty()) unlink(stderr_path_.c_str());
}

bool WorkerProcess::Send(const Json& message) {
  if (to_child_ < 0) return false;
  const std::string line = message.dump() + "\n";
  std::size_t written = 0;
  while (written < line.size()) {
    // MSG_NOSIGNAL does not apply to pipes: ignore SIGPIPE for this write by checking EPIPE.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    const ssize_t n = write(to_child_, line.data() + written, line.size() - written);
    const int saved_errno = errno;
    if (n < 0 && saved_errno == EPIPE) {
      // Consume the pending SIGPIPE so that unblocking does not deliver it.
      const timespec zero{0, 0};
      sigtimedwait(&block, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (n < 0) {
      if (saved_errno == EINTR) continue;
      return false;
    }
    written += static_cast<std::size_t>(n);
  }
  return true;
}

WorkerProcess::Outcome WorkerProcess::Receive(double timeout_s, Json& line, std::string& garbage) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const auto newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string text = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      try {
        line = Json::parse(text);
        return Outcome::kLine;
      } catch (const std::exception&) {
        garbage = text;
        return Outcome::kGarbage;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Outcome::kTimeout;
    pollfd fd{.fd = from_child_, .events = POLLIN, .revents = 0};
    const int ready = poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw EnvironmentError(ErrnoText("cannot read the worker's output"));
    }
    if (ready == 0) continue;
    char chunk[65536];
    const ssize_t n = read(from_child_, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw EnvironmentError(ErrnoText("cannot read the worker's output"));
    }
    if (n == 0) {
      if (!buffer_.empty()) {
        garbage = buffer_;
        buffer_.clear();
        return Outcome::kGarbage;
      }
      return Outcome::kClosed;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void WorkerProcess::Kill() {
  if (pid_ <= 0 || status_) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
}

std::string WorkerProcess::ExitStatus() {
  if (pid_ <= 0) return "not started";
  if (!status_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) status_ = status;
    if (!status_) return "";
  }
  if (WIFEXITED(*status_)) return fmt::format("exited with code {}", WEXITSTATUS(*status_));
  if (WIFSIGNALED(*status_)) return fmt::format("was killed by signal {}", WTERMSIG(*status_));
  return "ended";
}

std::string WorkerProcess::StderrTail(std::size_t bytes) const {
  std::ifstream in(stderr_path_, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace kareus::measure::internal
