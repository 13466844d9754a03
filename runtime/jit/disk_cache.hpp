// The on-disk kernel cache: one checksummed file per key, written atomically, with a file
// lock per key so that concurrent processes build a kernel set once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/jit/cache_entry.hpp"
#include "runtime/jit/file_lock.hpp"

namespace attnjit::runtime {

/// One line of a cache listing.
struct EntrySummary {
  std::string key;
  std::string spec_text;  ///< "<corrupt>" when the metadata cannot be read
  std::uintmax_t bytes = 0;
  std::filesystem::file_time_type modified;
};

/// The cache directory and its entries `<dir>/<key>.kernel`. Keys must be 32 lowercase hex
/// digits (InternalError otherwise).
///
/// Protocol of a writer: lock(key); load(key); when absent build and store(entry); drop the
/// lock. store() writes `<key>.kernel.tmp.*` and renames it, so a reader without the lock sees
/// a complete entry or none, and a temp file exists only while its writer holds the key's lock.
///
/// Entries are opened without following symbolic links and without blocking (a FIFO cannot
/// stall a reader); anything but a regular file, a file larger than EntryLimits allow, and a
/// file whose header, checksum or metadata is wrong is corrupt: reported on stderr in one
/// line, deleted (by a read-write cache) and treated as absent. Nothing beyond the header is
/// read before the header is checked.
class DiskCache {
 public:
  /// A cache that reads and writes `dir`, or with `read_only` only reads it: load() then never
  /// deletes, and store(), lock() and clear() are InternalErrors.
  explicit DiskCache(std::filesystem::path dir, bool read_only = false);

  /// $ATTNJIT_CACHE_DIR if set and non-empty, else $XDG_CACHE_HOME/attnjit, else
  /// $HOME/.cache/attnjit. Throws Error when none of these is set.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const { return dir_; }
  bool read_only() const { return read_only_; }

  /// Whether this process may create files in the directory (false when it does not exist).
  bool writable() const;

  /// The entry stored under `key`, or nullopt when there is none or it was corrupt.
  std::optional<CacheEntry> load(std::string_view key) const;
  /// Writes `entry` atomically (temp file, fsync, rename), creating the directory. Throws
  /// Error naming the cache directory when it cannot be written; leaves no temp file. Call
  /// it under the key's lock.
  void store(const CacheEntry& entry) const;
  /// Deletes the entry of `key` (under the key's lock), e.g. one that no longer matches what
  /// it was loaded for.
  void remove(std::string_view key) const;
  /// Waits until this process holds the lock of `key` (`<dir>/<key>.lock`), at most
  /// `timeout` (see FileLock).
  FileLock lock(std::string_view key, std::chrono::milliseconds timeout = lock_timeout()) const;
  /// Every entry, sorted by key; reads only the headers and metadata.
  std::vector<EntrySummary> list() const;
  /// Removes every complete entry and returns how many. Keys whose lock is free also lose
  /// their lock file and any temp file a crashed writer left; a key being written keeps its
  /// temp and lock files (its writer stores a fresh entry afterwards).
  std::size_t clear() const;

 private:
  std::filesystem::path entry_path(std::string_view key) const;
  std::filesystem::path lock_path(std::string_view key) const;
  void create_dir() const;
  void require_writable(std::string_view operation) const;

  std::filesystem::path dir_;
  bool read_only_ = false;
};

}  // namespace attnjit::runtime
