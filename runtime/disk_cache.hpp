// The on-disk kernel cache: one checksummed file per key, written atomically, with a file
// lock per key so that concurrent processes build a kernel set once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/nvrtc.hpp"

namespace attnjit::runtime {

/// One compiled kernel of a plan, as stored in the cache.
struct CompiledKernel {
  std::string role;  ///< its place in the plan, e.g. "forward"
  std::string name;  ///< entry point
  std::string cubin;
  std::string ptx;
  PtxasReport report;
  int threads = 0;  ///< per block
  int dynamic_smem_bytes = 0;
};

/// Everything stored under one key.
struct CacheEntry {
  std::string key;        ///< 32 lowercase hex digits
  std::string spec_text;  ///< canonical spec, for listings and debugging
  std::vector<CompiledKernel> kernels;
};

/// One line of a cache listing.
struct EntrySummary {
  std::string key;
  std::string spec_text;  ///< "<corrupt>" when the metadata cannot be read
  std::uintmax_t bytes = 0;
  std::filesystem::file_time_type modified;
};

/// An exclusive flock on a lock file, held until destruction. Move-only.
class FileLock {
 public:
  /// Opens (creating) `path` and blocks until the lock is granted. Throws Error naming the
  /// path when the file cannot be opened or locked.
  explicit FileLock(const std::filesystem::path& path);
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  void release() noexcept;

  int fd_ = -1;
};

/// The cache directory and its entries `<dir>/<key>.kernel`. Keys must be 32 lowercase hex
/// digits (InternalError otherwise). Corrupt entries are reported on stderr, deleted and
/// treated as absent. Intended protocol: lock(key); load(key); when absent build and
/// store(entry); drop the lock.
class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path dir);

  /// $ATTNJIT_CACHE_DIR if set and non-empty, else $XDG_CACHE_HOME/attnjit, else
  /// $HOME/.cache/attnjit. Throws Error when none of these is set.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const { return dir_; }

  /// The entry stored under `key`, or nullopt when there is none or it was corrupt.
  std::optional<CacheEntry> load(std::string_view key) const;
  /// Writes `entry` atomically (temp file, fsync, rename), creating the directory. Throws
  /// Error naming the cache directory when it cannot be written; leaves no temp file.
  void store(const CacheEntry& entry) const;
  /// Blocks until this process holds the lock of `key` (`<dir>/<key>.lock`).
  FileLock lock(std::string_view key) const;
  /// Every entry, sorted by key; reads only the metadata.
  std::vector<EntrySummary> list() const;
  /// Removes every entry, lock file and stray temp file; returns the number of entries.
  std::size_t clear() const;

 private:
  std::filesystem::path entry_path(std::string_view key) const;
  void create_dir() const;

  std::filesystem::path dir_;
};

}  // namespace attnjit::runtime
