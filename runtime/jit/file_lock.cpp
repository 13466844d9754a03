// FileLock: flock with a polled, bounded wait, and the holder's pid read from /proc/locks.
#include "runtime/jit/file_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "attnjit/error.hpp"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr double kDefaultTimeoutSeconds = 600;
constexpr double kMaxTimeoutSeconds = 1e7;

[[noreturn]] void throw_not_regular(const fs::path& path) {
  throw CacheFileError(fmt::format(
      "kernel cache: cannot use '{}' as a lock (it is not a regular file); accepted: a regular "
      "lock file, or none at that path",
      path.string()));
}

/// Whether `fd` is the file now at `path` (a lock on a removed or replaced file locks nothing).
bool is_file_at(int fd, const fs::path& path) {
  struct stat held {
  }, now{};
  if (::fstat(fd, &held) != 0 || ::lstat(path.c_str(), &now) != 0) return false;
  return held.st_dev == now.st_dev && held.st_ino == now.st_ino && held.st_nlink > 0;
}

/// "process 1234 (name)" for the holder of an flock on `fd`'s file, from /proc/locks (Linux;
/// matched by inode, as file systems such as overlayfs report other device numbers there).
std::string holder_of(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return "another process";
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream fields(line);
    std::string ordinal, kind, mode, access, pid, file;
    fields >> ordinal >> kind;
    if (kind == "->") continue;  // a waiter, not the holder
    fields >> mode >> access >> pid >> file;
    const std::size_t colon = file.rfind(':');
    if (kind != "FLOCK" || colon == std::string::npos) continue;
    if (file.substr(colon + 1) != std::to_string(info.st_ino)) continue;
    std::string name;
    std::ifstream comm("/proc/" + pid + "/comm");
    std::getline(comm, name);
    return name.empty() ? fmt::format("process {}", pid)
                        : fmt::format("process {} ({})", pid, name);
  }
  return "another process";
}

}  // namespace

void throw_cache_file_error(std::string_view action, const fs::path& path, int error) {
  throw CacheFileError(fmt::format("kernel cache: cannot {} '{}' ({})", action, path.string(),
                                   std::strerror(error)));
}

std::chrono::milliseconds lock_timeout() {
  const char* text = std::getenv("ATTNJIT_LOCK_TIMEOUT_S");
  if (text == nullptr || *text == '\0') {
    return std::chrono::milliseconds(static_cast<long long>(kDefaultTimeoutSeconds * 1000));
  }
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0 ||
      seconds > kMaxTimeoutSeconds) {
    throw_field_error("ATTNJIT_LOCK_TIMEOUT_S", std::string_view(text).substr(0, 64),
                      fmt::format("seconds to wait for a kernel cache lock, a number from 0 to "
                                  "{:g} (default {:g})",
                                  kMaxTimeoutSeconds, kDefaultTimeoutSeconds));
  }
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

bool FileLock::attempt(const fs::path& path) {
  if (fd_ < 0) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd_ < 0) {
      const int error = errno;
      // A FIFO without a reader (ENXIO), a socket, a directory, a symbolic link (ELOOP).
      if (error == ELOOP || error == ENXIO || error == EISDIR || error == EOPNOTSUPP) {
        throw_not_regular(path);
      }
      throw_cache_file_error("open the lock file", path, error);
    }
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      release();
      throw_not_regular(path);
    }
  }
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    const int error = errno;
    release();
    throw_cache_file_error("lock", path, error);
  }
  if (is_file_at(fd_, path)) return true;
  release();  // removed or replaced while awaited: lock the file now at the path
  return false;
}

FileLock::FileLock(const fs::path& path, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = 1ms;
  bool reported = false;
  while (!attempt(path)) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (fd_ >= 0 && waited >= timeout) {
      const std::string holder = holder_of(fd_);
      release();
      throw CacheFileError(
          fmt::format("kernel cache: gave up after {:g} s waiting for the lock '{}', held by {} "
                      "(ATTNJIT_LOCK_TIMEOUT_S sets the wait)",
                      timeout.count() / 1000.0, path.string(), holder));
    }
    if (fd_ >= 0 && !reported && waited >= kLockReportAfter) {
      reported = true;
      fmt::print(stderr,
                 "attnjit: waiting for the kernel cache lock {}, held by {}; giving up after "
                 "{:g} s (ATTNJIT_LOCK_TIMEOUT_S)\n",
                 path.string(), holder_of(fd_), timeout.count() / 1000.0);
      std::fflush(stderr);
    }
    if (fd_ >= 0) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
}

std::optional<FileLock> FileLock::try_lock(const fs::path& path) {
  FileLock lock;
  // A file replaced under us is retried; one that stays busy is reported as busy.
  for (int tries = 0; tries < 16; ++tries) {
    if (lock.attempt(path)) return lock;
    if (lock.fd_ >= 0) return std::nullopt;
  }
  return std::nullopt;
}

FileLock::FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileLock::~FileLock() {
  release();
}

void FileLock::release() noexcept {
  // Closing the descriptor drops the flock.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace attnjit::runtime
