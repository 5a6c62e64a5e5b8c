// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "kareus/common/error.h"

namespace kareus {

std::string ReadTextFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(path.string() + ": cannot be read (" + std::strerror(errno) + ")");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFileAtomic(const std::filesystem::path& path, std::string_view contents) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec) {
      throw EnvironmentError(path.parent_path().string() + ": cannot create folder: " +
                             ec.message());
    }
  }
  std::random_device device;
  const fs::path temp =
      path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(device());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw EnvironmentError(temp.string() + ": cannot create: " + std::strerror(errno));
  }
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      throw EnvironmentError(temp.string() + ": write failed: " + reason);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw EnvironmentError(temp.string() + ": flush failed: " + reason);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw EnvironmentError(path.string() + ": rename failed: " + reason);
  }
}

std::filesystem::path DataDir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("KAREUS_DATA_DIR"); env != nullptr && *env != '\0') {
    return fs::path(env);
  }
#ifdef KAREUS_SOURCE_DATA_DIR
  if (fs::exists(fs::path(KAREUS_SOURCE_DATA_DIR) / "gpus")) return fs::path(KAREUS_SOURCE_DATA_DIR);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
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
  for (const auto& entry : std::filesystem::directory_iterator(DataDir() / folder, ec)) {
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
