// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/io.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "kareus/common/error.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarkerName = ".kareus-output";

// Temporary files and staging folders that a signal must not leave behind. WriteFileAtomic and
// OutputFolder create their temporaries while holding the mutex, and the signal thread holds it
// from the clean-up until the process is gone, so nothing is created after the clean-up.
std::mutex& TemporariesMutex() {
  static std::mutex mutex;
  return mutex;
}

std::set<std::string>& Temporaries() {
  static std::set<std::string> paths;
  return paths;
}

std::string RandomSuffix() {
  std::random_device device;
  return std::to_string(::getpid()) + "-" + std::to_string(device());
}

std::string ErrnoText() { return std::strerror(errno); }

// ".NAME.kareus-KIND-PID-N", the name of a temporary folder beside `target`. Built by appending:
// GCC 12 warns (-Wrestrict, bug 105329) about "literal" + std::string here.
std::string TemporaryName(const fs::path& target, const std::string& kind) {
  std::string name = ".";
  name += target.filename().string();
  name += ".kareus-";
  name += kind;
  return name;
}

void FsyncDirectory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the renames are already atomic; this makes them durable
  ::close(fd);
}

// Names that `kareus run/evaluate/solve/export` write, so a folder made only of them (written
// before the marker existed) may be replaced.
bool KnownOutputName(const std::string& name) {
  static const char* const kPatterns[] = {"plan.json",
                                          "frontier.json",
                                          "summary.json",
                                          "report.html",
                                          "evaluation.json",
                                          "evaluation.txt",
                                          "plans",
                                          "methods",
                                          "timetable.json",
                                          "measurements.sqlite*",
                                          "freqs_pipeline_*.py",
                                          "scheds_pipeline_*.py",
                                          "*.tmp.*",
                                          kMarkerName};
  return std::any_of(std::begin(kPatterns), std::end(kPatterns),
                     [&](const char* pattern) { return ::fnmatch(pattern, name.c_str(), 0) == 0; });
}

// The first entry of `dir` that shows it is not a Kareus output folder, or "" when it may be
// replaced (empty, marked, or made of output names and of subfolders that qualify themselves,
// as `kareus evaluate` writes one folder per workload).
std::string FirstForeignEntry(const fs::path& dir, int depth) {
  std::error_code ec;
  if (fs::exists(dir / kMarkerName, ec)) return "";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (KnownOutputName(name)) continue;
    if (depth == 0 && entry.is_directory(ec) && !entry.is_symlink(ec) &&
        !fs::is_empty(entry.path(), ec) && FirstForeignEntry(entry.path(), depth + 1).empty()) {
      continue;
    }
    return name;
  }
  if (ec) return "(unreadable: " + ec.message() + ")";
  return "";
}

// Staging and previous folders beside `target` whose process is gone (SIGKILL, power loss).
void RemoveStaleTemporaries(const fs::path& target) {
  const std::string prefix = TemporaryName(target, "");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string rest = name.substr(prefix.size());
    for (const char* kind : {"staging-", "previous-"}) {
      if (rest.rfind(kind, 0) == 0) rest = rest.substr(std::strlen(kind));
    }
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

// Links (or, where the filesystem has no hard links, copies) `from` to `to`.
void LinkOrCopy(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  fs::remove(to, ec);
  if (::link(from.c_str(), to.c_str()) == 0) return;
  const std::string reason = ErrnoText();
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    throw EnvironmentError(to.string() + ": cannot carry " + from.string() +
                           " into the new outputs: " + reason + "; " + ec.message());
  }
}

}  // namespace

std::string ReadTextFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path.string() + ": cannot be read (" + ErrnoText() + ")");
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw InputError(path.string() + ": is a folder, not a file");
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string reason = ErrnoText();
      ::close(fd);
      throw InputError(path.string() + ": cannot be read (" + reason + ")");
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > kMaxInputFileBytes) {
      ::close(fd);
      throw InputError(path.string() + ": larger than " + std::to_string(kMaxInputFileBytes >> 20) +
                       " MiB; not a Kareus input file");
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

void WriteFileAtomic(const fs::path& path, std::string_view contents) {
  fs::path temp;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(TemporariesMutex());
    std::error_code ec;
    // Refused before anything is written (the rename at the end would fail on a folder).
    if (fs::is_directory(path, ec)) {
      throw InputError(path.string() + ": is a folder; a file path is required");
    }
    if (path.has_parent_path()) {
      fs::create_directories(path.parent_path(), ec);
      if (ec) {
        throw EnvironmentError(path.string() + ": cannot be written: its folder " +
                               path.parent_path().string() + " cannot be created (" + ec.message() +
                               ")");
      }
    }
    temp = path.string() + ".tmp." + RandomSuffix();
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw EnvironmentError(path.string() +
                             ": cannot be written: the folder that holds it must be writable (" +
                             ErrnoText() + ")");
    }
    Temporaries().insert(temp.string());
  }
  const auto fail = [&](const std::string& what) {
    const std::string reason = ErrnoText();
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    std::lock_guard<std::mutex> lock(TemporariesMutex());
    Temporaries().erase(temp.string());
    throw EnvironmentError(what + reason);
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(temp.string() + ": write failed: ");
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail(temp.string() + ": flush failed: ");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail(temp.string() + ": flush failed: ");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail(path.string() + ": rename failed: ");
  std::lock_guard<std::mutex> lock(TemporariesMutex());
  Temporaries().erase(temp.string());
}

void ValidatePathComponent(const std::string& field, const std::string& name) {
  if (name.empty()) ThrowInput(field, "\"\"", "must not be empty (it names a file or folder)");
  if (name.size() > 128) ThrowInput(field, name, "must be at most 128 bytes (it names a folder)");
  if (!IsValidUtf8(name)) ThrowInput(field, name, "must be UTF-8 text (it names a folder)");
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\' || byte < 0x20 || byte == 0x7F) {
      ThrowInput(field, name,
                 "must be usable as one folder name: no '/', '\\' or control characters");
    }
  }
  if (name.front() == '.' || name.front() == '-') {
    ThrowInput(field, name, "must not start with '.' or '-' (it names a folder)");
  }
}

bool IsMountPoint(const fs::path& path) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  if (resolved == resolved.root_path()) return true;
  // /proc/self/mountinfo's fifth field is the mount point, with ' ', '\t', '\n' and '\\'
  // written as octal escapes; it lists bind mounts that st_dev cannot tell apart (and st_dev
  // alone would take a btrfs subvolume, which can be renamed, for one).
  std::ifstream mounts("/proc/self/mountinfo");
  if (!mounts) {
    struct stat self {
    }, parent{};
    return ::stat(resolved.c_str(), &self) == 0 &&
           ::stat(resolved.parent_path().c_str(), &parent) == 0 && self.st_dev != parent.st_dev;
  }
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string field, mount_point;
    for (int k = 0; k < 5 && (fields >> field); ++k) mount_point = field;
    std::string decoded;
    for (std::size_t i = 0; i < mount_point.size(); ++i) {
      if (mount_point[i] == '\\' && i + 3 < mount_point.size() &&
          std::isdigit(static_cast<unsigned char>(mount_point[i + 1]))) {
        decoded += static_cast<char>(std::stoi(mount_point.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        decoded += mount_point[i];
      }
    }
    if (!decoded.empty() && fs::path(decoded) == resolved) return true;
  }
  return false;
}

OutputFolder::OutputFolder(const fs::path& target) {
  if (target.empty()) ThrowInput("out", "\"\"", "an output folder is required");
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::absolute(target, ec), ec);
  if (ec) ThrowInput("out", target.string(), "cannot be resolved: " + ec.message());
  while (!resolved.has_filename() && resolved != resolved.root_path()) {
    resolved = resolved.parent_path();  // "out/" -> "out"
  }
  if (resolved == resolved.root_path()) {
    ThrowInput("out", target.string(), "must name a folder below / (it is replaced as a whole)");
  }
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const fs::path relative = cwd.lexically_relative(resolved);
    if (!relative.empty() && *relative.begin() != "..") {
      ThrowInput("out", target.string(),
                 "must not be the current folder or one of its parents (the output folder is "
                 "replaced as a whole)");
    }
  }
  if (fs::exists(resolved, ec)) {
    if (!fs::is_directory(resolved, ec)) {
      ThrowInput("out", target.string(), "exists and is not a folder");
    }
    if (IsMountPoint(resolved)) {
      // The outputs are swapped in as a whole (a rename), which a mount point refuses: checked
      // here, before any work, not after it.
      ThrowInput("out", target.string(),
                 "is a mount point, and an output folder is replaced as a whole (renamed into "
                 "place), which a mount point cannot be; name a folder inside it, e.g. " +
                     (resolved / "kareus-out").string());
    }
    const std::string foreign = FirstForeignEntry(resolved, 0);
    if (!foreign.empty()) {
      ThrowInput("out", target.string(),
                 "exists and holds '" + ShownValue(foreign) +
                     "', which Kareus did not write; an output folder is replaced as a whole, "
                     "so choose a new or empty folder");
    }
  }
  target_ = resolved;
  fs::create_directories(target_.parent_path(), ec);
  if (ec) {
    throw EnvironmentError("out = " + ShownValue(target.string()) + ": its parent folder " +
                           target_.parent_path().string() + " cannot be created (" + ec.message() +
                           ")");
  }
  RemoveStaleTemporaries(target_);
  std::lock_guard<std::mutex> lock(TemporariesMutex());
  staging_ = target_.parent_path() / (TemporaryName(target_, "staging-") + RandomSuffix());
  if (!fs::create_directory(staging_, ec) || ec) {
    // The outputs are staged beside the target and swapped in whole, so its parent folder
    // must be writable.
    throw EnvironmentError("out = " + ShownValue(target.string()) + ": its parent folder " +
                           target_.parent_path().string() + " must be writable (" +
                           (ec ? ec.message() : std::string("staging folder already exists")) +
                           ")");
  }
  Temporaries().insert(staging_.string());
}

OutputFolder::~OutputFolder() {
  if (committed_) return;
  std::lock_guard<std::mutex> lock(TemporariesMutex());
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
  Temporaries().erase(staging_.string());
}

void OutputFolder::Keep(const fs::path& path) {
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return;
  const fs::path relative = absolute.lexically_relative(target_);
  if (relative.empty() || *relative.begin() == ".." || relative == ".") return;
  keep_.push_back(relative);
}

void OutputFolder::Commit() {
  KAREUS_CHECK(!committed_) << "OutputFolder committed twice";
  WriteFileAtomic(staging_ / kMarkerName,
                  "Kareus output folder: the next run into it replaces it as a whole.\n");
  std::lock_guard<std::mutex> lock(TemporariesMutex());
  std::error_code ec;
  for (const fs::path& relative : keep_) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      const fs::path from = target_ / (relative.string() + suffix);
      if (fs::is_regular_file(from, ec)) LinkOrCopy(from, staging_ / (relative.string() + suffix));
    }
  }
  FsyncDirectory(staging_);
  bool swapped = false;
  if (!fs::exists(target_, ec)) {
    swapped = ::rename(staging_.c_str(), target_.c_str()) == 0;
    if (swapped) {
      Temporaries().erase(staging_.string());
    } else if (errno != EEXIST && errno != ENOTEMPTY) {
      throw EnvironmentError(target_.string() +
                             ": cannot move the new outputs in place: " + ErrnoText());
    }
  }
  if (!swapped) {
    // One atomic step: afterwards the staging name holds the previous outputs.
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(staging_, ec);
      Temporaries().erase(staging_.string());
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
      // No exchange on this filesystem: two renames, with a moment where the target is absent.
      const fs::path previous =
          target_.parent_path() / (TemporaryName(target_, "previous-") + RandomSuffix());
      if (::rename(target_.c_str(), previous.c_str()) != 0) {
        throw EnvironmentError(target_.string() +
                               ": cannot move the previous outputs aside: " + ErrnoText());
      }
      Temporaries().insert(previous.string());
      if (::rename(staging_.c_str(), target_.c_str()) != 0) {
        const std::string reason = ErrnoText();
        ::rename(previous.c_str(), target_.c_str());
        Temporaries().erase(previous.string());
        throw EnvironmentError(target_.string() +
                               ": cannot move the new outputs in place: " + reason);
      }
      Temporaries().erase(staging_.string());
      fs::remove_all(previous, ec);
      Temporaries().erase(previous.string());
    } else {
      throw EnvironmentError(target_.string() + ": cannot swap in the new outputs: " + ErrnoText());
    }
  }
  FsyncDirectory(target_.parent_path());
  committed_ = true;
}

namespace {
std::atomic<const char*> g_termination_message{nullptr};
}  // namespace

void SetTerminationMessage(const char* message) { g_termination_message.store(message); }

void RemoveTemporariesOnTermination() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t signals;
    sigemptyset(&signals);
    for (const int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction current {};
      sigaction(signal_number, nullptr, &current);
      // A signal the process ignores (nohup's SIGHUP) stays ignored.
      if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) continue;
      sigaddset(&signals, signal_number);
    }
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::thread([signals] {
      int signal_number = 0;
      if (sigwait(&signals, &signal_number) != 0) return;
      const char* message = g_termination_message.load();
      if (message != nullptr && signal_number == SIGTERM) {
        [[maybe_unused]] const ssize_t n = ::write(2, message, std::strlen(message));
      }
      // Held until the process is gone: no temporary is created after the clean-up.
      TemporariesMutex().lock();
      for (const std::string& path : Temporaries()) {
        std::error_code ignored;
        fs::remove_all(path, ignored);
      }
      std::signal(signal_number, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, signal_number);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(signal_number);  // the default action: the process ends by this signal
      _exit(128 + signal_number);
    }).detach();
  });
}

fs::path DataDir() {
  if (const char* env = std::getenv("KAREUS_DATA_DIR"); env != nullptr && *env != '\0') {
    return fs::path(env);
  }
  // A wheel (pip install .) carries the presets in the package: kareus/data beside the module
  // and the program it runs.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  Dl_info info{};
  for (const fs::path& holder : {dladdr(reinterpret_cast<void*>(&DataDir), &info) != 0 &&
                                         info.dli_fname != nullptr && info.dli_fname[0] == '/'
                                     ? fs::path(info.dli_fname)
                                     : fs::path(),
                                 ec ? fs::path() : exe}) {
    if (holder.empty()) continue;
    const fs::path beside = holder.parent_path() / "data";
    if (fs::exists(beside / "gpus") && fs::exists(beside / "models")) return beside;
  }
#ifdef KAREUS_SOURCE_DATA_DIR
  if (fs::exists(fs::path(KAREUS_SOURCE_DATA_DIR) / "gpus"))
    return fs::path(KAREUS_SOURCE_DATA_DIR);
#endif
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "kareus" / "data";
    if (fs::exists(installed)) return installed;
  }
  throw EnvironmentError(
      "cannot find the data folder (GPU and model presets); set KAREUS_DATA_DIR");
}

std::vector<std::string> PresetNames(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(DataDir() / folder, ec)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace kareus
