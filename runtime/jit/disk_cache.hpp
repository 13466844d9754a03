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
  /// "<corrupt>" when the entry is not a valid entry file, "<unreadable>" when it cannot be read
  std::string spec_text;
  std::uintmax_t bytes = 0;
  std::filesystem::file_time_type modified;
  std::string problem;  ///< for "<unreadable>": the path and why (CacheFileError's message)
};

/// What DiskCache::clear did.
struct ClearResult {
  std::size_t removed = 0;            ///< entries removed
  std::vector<std::string> problems;  ///< one message per file it could not remove
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
/// line, removed (by a read-write cache, where permissions allow; an empty directory too) and
/// treated as absent. Nothing beyond the header is read before the header is checked.
///
/// A file that cannot be created, read, locked, written or removed (permissions, a full disk,
/// a directory in the way) is a CacheFileError naming the path and the reason; the compile
/// path (load_or_build) goes on without the disk cache where it fails.
class DiskCache {
 public:
  /// A cache that reads and writes `dir`, or with `read_only` only reads it: load() then never
  /// deletes, and store(), lock() and clear() are InternalErrors.
  explicit DiskCache(std::filesystem::path dir, bool read_only = false);

  /// $ATTNJIT_CACHE_DIR if set and non-empty, else $XDG_CACHE_HOME/attnjit, else
  /// $HOME/.cache/attnjit. Throws CacheFileError when none of these is set.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const { return dir_; }
  bool read_only() const { return read_only_; }

  /// 0 when this process may create files in the directory, else the errno that says why
  /// not (ENOENT when it does not exist).
  int write_access() const;

  /// Creates the directory and its parents if absent. Throws CacheFileError when it cannot.
  void create_dir() const;

  /// The entry stored under `key`, or nullopt when there is none or it was corrupt. Throws
  /// CacheFileError when the file cannot be read (e.g. no read permission).
  std::optional<CacheEntry> load(std::string_view key) const;
  /// Writes `entry` atomically (temp file, fsync, rename), creating the directory; replaces
  /// whatever file is at the entry's path. Throws CacheFileError naming the file and the step
  /// that failed; leaves no temp file. Call it under the key's lock.
  void store(const CacheEntry& entry) const;
  /// Deletes the entry of `key` (under the key's lock), e.g. one that no longer matches what
  /// it was loaded for. Throws CacheFileError when it cannot.
  void remove(std::string_view key) const;
  /// Waits until this process holds the lock of `key` (`<dir>/<key>.lock`), at most
  /// `timeout` (see FileLock), creating the directory. Throws CacheFileError when the
  /// directory or the lock file cannot be used, or the wait times out.
  FileLock lock(std::string_view key, std::chrono::milliseconds timeout = lock_timeout()) const;
  /// Every entry, sorted by key; reads only the headers and metadata. An entry that cannot be
  /// read is listed as "<unreadable>" with its problem. Throws CacheFileError when the
  /// directory cannot be read.
  std::vector<EntrySummary> list() const;
  /// Removes every complete entry, going on past files it cannot remove (each one a problem
  /// of the result). Keys whose lock is free also lose their lock file and any temp file a
  /// crashed writer left; a key being written keeps its temp and lock files (its writer stores
  /// a fresh entry afterwards); a lock path that is not a regular file is removed. Throws
  /// CacheFileError when the directory cannot be read.
  ClearResult clear() const;

 private:
  std::filesystem::path entry_path(std::string_view key) const;
  std::filesystem::path lock_path(std::string_view key) const;
  void clear_key(std::string_view key, bool entry, const std::vector<std::filesystem::path>& temps,
                 bool lock, ClearResult& result) const;
  void require_writable(std::string_view operation) const;

  std::filesystem::path dir_;
  bool read_only_ = false;
};

}  // namespace attnjit::runtime
