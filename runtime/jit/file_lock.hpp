// An exclusive lock on a lock file (flock), taken without following symbolic links, with a
// bounded wait that says which process holds the lock.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>

#include "attnjit/error.hpp"

namespace attnjit::runtime {

/// A file of the kernel cache that cannot be created, read, locked, written or removed: an
/// environment failure (permissions, a full disk, something else at the path), never the
/// user's input. The message, "kernel cache: ...", names the path, what was attempted and why
/// (strerror).
class CacheFileError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// CacheFileError("kernel cache: cannot <action> '<path>' (<strerror(error)>)").
[[noreturn]] void throw_cache_file_error(std::string_view action, const std::filesystem::path& path,
                                         int error);

/// How long lock waits last: $ATTNJIT_LOCK_TIMEOUT_S seconds (a number >= 0; 0 means do not
/// wait), default 600. Throws Error naming the variable for another value.
std::chrono::milliseconds lock_timeout();

/// After how long a lock wait says on stderr that it is waiting, and for whom.
inline constexpr std::chrono::seconds kLockReportAfter{3};

/// An exclusive flock on a lock file, held until destruction. Move-only.
///
/// The file is created if absent and never followed when it is a symbolic link (a link, or
/// anything but a regular file, is a CacheFileError naming the path). A lock whose file was removed
/// or replaced while it was awaited is taken again on the file now at the path, so removing
/// a lock file under its own lock is safe (DiskCache::clear does).
class FileLock {
 public:
  /// Waits until the lock of `path` is granted. After kLockReportAfter prints one line on
  /// stderr naming the path and the process that holds it (from /proc/locks, when known);
  /// after `timeout` throws CacheFileError saying so and naming ATTNJIT_LOCK_TIMEOUT_S. Throws
  /// CacheFileError naming the path when the file cannot be opened or locked.
  FileLock(const std::filesystem::path& path, std::chrono::milliseconds timeout);

  /// The lock of `path` if it is free now, else nullopt (never waits).
  static std::optional<FileLock> try_lock(const std::filesystem::path& path);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  FileLock() = default;
  /// Opens `path` and tries once: true when the lock is held (on the file at the path).
  bool attempt(const std::filesystem::path& path);
  void release() noexcept;

  int fd_ = -1;
};

}  // namespace attnjit::runtime
