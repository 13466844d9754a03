// The on-disk kernel cache: safe reads of entry files (runtime/jit/cache_entry.hpp has the
// format), atomic writes, listing and clearing.
#include "runtime/jit/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <system_error>
#include <utility>

#include "attnjit/error.hpp"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kEntrySuffix = ".kernel";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kTempInfix = ".kernel.tmp.";

void check_key(std::string_view key) {
  if (!is_cache_key(key)) {
    throw InternalError(
        fmt::format("disk cache key '{}' is not 32 lowercase hex digits", key.substr(0, 64)));
  }
}

/// A file descriptor closed on destruction.
struct Descriptor {
  int fd = -1;
  explicit Descriptor(int value) : fd(value) {}
  Descriptor(Descriptor&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

/// An entry file opened for reading, and its size.
struct OpenEntry {
  Descriptor file;
  std::uint64_t size = 0;
};

/// Opens an entry without following a link and without blocking (a FIFO would block a plain
/// open until a writer comes); nullopt when there is none. CorruptEntry for a link or anything
/// but a regular file, CacheFileError for another failure.
std::optional<OpenEntry> open_entry(const fs::path& path) {
  OpenEntry entry{Descriptor(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW))};
  if (entry.file.fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    if (errno == ELOOP) throw CorruptEntry("a symbolic link, not a regular file");
    // A socket cannot be opened at all.
    if (errno == ENXIO || errno == EOPNOTSUPP) throw CorruptEntry("not a regular file");
    throw_cache_file_error("open", path, errno);
  }
  struct stat info {};
  if (::fstat(entry.file.fd, &info) != 0) throw_cache_file_error("stat", path, errno);
  if (!S_ISREG(info.st_mode)) throw CorruptEntry("not a regular file");
  entry.size = static_cast<std::uint64_t>(info.st_size);
  return entry;
}

/// Appends up to `count` bytes read from `entry` to `out`; fewer only at the end of the file.
void read_more(const fs::path& path, OpenEntry& entry, std::size_t count, std::string& out) {
  std::size_t done = out.size();
  out.resize(done + count);
  const std::size_t end = out.size();
  while (done < end) {
    const ssize_t got = ::read(entry.file.fd, out.data() + done, end - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_cache_file_error("read", path, errno);
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  out.resize(done);
}

/// The header and then (once the header is checked) the next `count` bytes of an entry, at
/// most the whole file; nullopt when the file does not exist.
std::optional<std::pair<std::string, std::uint64_t>> read_checked_prefix(const fs::path& path,
                                                                         std::uint64_t count) {
  std::optional<OpenEntry> entry = open_entry(path);
  if (!entry) return std::nullopt;
  std::string bytes;
  read_more(path, *entry, kEntryHeaderBytes, bytes);
  const std::uint64_t payload_size = check_entry_header(bytes, entry->size);
  read_more(path, *entry, static_cast<std::size_t>(std::min(count, payload_size)), bytes);
  if (bytes.size() < kEntryHeaderBytes + std::min(count, payload_size)) {
    throw CorruptEntry("truncated while it was read");
  }
  return std::pair{std::move(bytes), entry->size};
}

std::uint64_t random_suffix() {
  thread_local std::mt19937_64 engine(
      std::random_device{}() ^ (static_cast<std::uint64_t>(::getpid()) << 32) ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return engine();
}

/// The first failed step of writing a file: its errno (0 when none) and its name.
struct Failure {
  int error = 0;
  const char* step = "";
};

/// Writes all of `bytes` to `fd` and fsyncs it.
Failure write_and_sync(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return {errno, "write"};
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
  if (::fsync(fd) != 0) return {errno, "fsync"};
  return {};
}

/// The key of a file name `<key><suffix>`, or an empty view.
std::string_view key_of(std::string_view file_name, std::string_view suffix) {
  if (file_name.size() != 32 + suffix.size() || !file_name.ends_with(suffix)) return {};
  const std::string_view key = file_name.substr(0, 32);
  return is_cache_key(key) ? key : std::string_view();
}

/// Removes the file at `path`, or the empty directory; false when there was none. Throws
/// CacheFileError for another failure (a directory that is not empty among them).
bool remove_path(const fs::path& path) {
  if (::unlink(path.c_str()) == 0) return true;
  int error = errno;
  if (error == EISDIR || error == EPERM) {
    if (::rmdir(path.c_str()) == 0) return true;
    // rmdir's errno explains a directory; unlink's anything else (EPERM: a sticky directory).
    if (errno != ENOTDIR) error = errno;
  }
  if (error == ENOENT) return false;
  throw_cache_file_error("remove", path, error);
}

/// Iterates the names in `dir` (none when it does not exist). Throws CacheFileError when it
/// cannot be read.
template <class Visit>
void for_each_file(const fs::path& dir, Visit visit) {
  std::error_code error;
  fs::directory_iterator item(dir, error);
  if (error == std::errc::no_such_file_or_directory) return;
  for (; !error && item != fs::directory_iterator(); item.increment(error)) visit(*item);
  if (error) throw_cache_file_error("list", dir, error.value());
}

}  // namespace

DiskCache::DiskCache(std::filesystem::path dir, bool read_only)
    : dir_(std::move(dir)), read_only_(read_only) {}

std::filesystem::path DiskCache::default_dir() {
  const auto variable = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (const std::string configured = variable("ATTNJIT_CACHE_DIR"); !configured.empty()) {
    return configured;
  }
  if (const std::string xdg = variable("XDG_CACHE_HOME"); !xdg.empty()) {
    return fs::path(xdg) / "attnjit";
  }
  if (const std::string home = variable("HOME"); !home.empty()) {
    return fs::path(home) / ".cache" / "attnjit";
  }
  throw CacheFileError(
      "kernel cache: no directory: ATTNJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset "
      "(set ATTNJIT_CACHE_DIR to a writable directory)");
}

int DiskCache::write_access() const {
  return ::access(dir_.c_str(), W_OK | X_OK) == 0 ? 0 : errno;
}

std::filesystem::path DiskCache::entry_path(std::string_view key) const {
  check_key(key);
  return dir_ / fmt::format("{}{}", key, kEntrySuffix);
}

std::filesystem::path DiskCache::lock_path(std::string_view key) const {
  check_key(key);
  return dir_ / fmt::format("{}{}", key, kLockSuffix);
}

void DiskCache::require_writable(std::string_view operation) const {
  internal_check(!read_only_, fmt::format("DiskCache::{} on a read-only cache", operation));
}

void DiskCache::create_dir() const {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (!error && !fs::is_directory(dir_, error) && !error) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) throw_cache_file_error("create the directory", dir_, error.value());
}

std::optional<CacheEntry> DiskCache::load(std::string_view key) const {
  const fs::path path = entry_path(key);
  try {
    auto file = read_checked_prefix(path, EntryLimits::max_file_bytes);
    if (!file) return std::nullopt;
    return decode_entry(file->first, key);
  } catch (const CorruptEntry& corrupt) {
    std::string reason = corrupt.what();
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    fmt::print(stderr, "attnjit: cache entry {} is corrupt ({}); rebuilding\n", path.string(),
               reason);
    std::fflush(stderr);
    if (!read_only_) {
      try {
        remove_path(path);
      } catch (const CacheFileError&) {
        // Left in place: store() replaces it where it can, and reports why where it cannot.
      }
    }
    return std::nullopt;
  }
}

void DiskCache::store(const CacheEntry& entry) const {
  require_writable("store");
  const fs::path path = entry_path(entry.key);
  const std::string bytes = encode_entry(entry);
  create_dir();
  const fs::path temp =
      dir_ / fmt::format("{}{}{}.{:016x}", entry.key, kTempInfix, ::getpid(), random_suffix());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw_cache_file_error("create", temp, errno);
  Failure failure = write_and_sync(fd, bytes);
  if (::close(fd) != 0 && failure.error == 0) failure = {errno, "close"};
  if (failure.error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) {
    failure = {errno, "rename"};
  }
  if (failure.error != 0) {
    ::unlink(temp.c_str());
    if (std::string_view(failure.step) == "rename") {
      throw_cache_file_error("replace", path, failure.error);
    }
    throw_cache_file_error(failure.step, temp, failure.error);
  }
  // Makes the rename durable. Best effort: the entry is complete and in place already, and
  // some file systems refuse fsync on directories.
  if (const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void DiskCache::remove(std::string_view key) const {
  require_writable("remove");
  remove_path(entry_path(key));
}

FileLock DiskCache::lock(std::string_view key, std::chrono::milliseconds timeout) const {
  require_writable("lock");
  const fs::path path = lock_path(key);
  create_dir();
  return FileLock(path, timeout);
}

std::vector<EntrySummary> DiskCache::list() const {
  std::vector<EntrySummary> summaries;
  for_each_file(dir_, [&](const fs::directory_entry& item) {
    const std::string file_name = item.path().filename().string();
    const std::string_view key = key_of(file_name, kEntrySuffix);
    if (key.empty()) return;
    std::error_code item_error;
    EntrySummary summary{std::string(key), "<corrupt>", 0, item.last_write_time(item_error), {}};
    // The size the directory reports, for entries whose header cannot be trusted or read.
    const auto listed_size = [&] {
      std::error_code size_error;
      const auto bytes = item.is_regular_file(size_error) ? item.file_size(size_error) : 0;
      return size_error ? 0 : bytes;
    };
    try {
      // Header, metadata size and metadata: the metadata limit bounds what is read.
      const auto prefix = read_checked_prefix(item.path(), 4 + EntryLimits::max_metadata_bytes);
      if (!prefix) return;  // removed since the directory was read
      summary.bytes = prefix->second;
      const CacheEntry metadata = decode_entry_metadata(prefix->first, prefix->second);
      if (metadata.key == key) summary.spec_text = metadata.spec_text;
    } catch (const CorruptEntry&) {
      // Listed as "<corrupt>"; load() deletes it when it is next needed.
      summary.bytes = listed_size();
    } catch (const CacheFileError& error) {
      summary.spec_text = "<unreadable>";
      summary.bytes = listed_size();
      summary.problem = error.what();
    }
    summaries.push_back(std::move(summary));
  });
  std::sort(summaries.begin(), summaries.end(),
            [](const EntrySummary& a, const EntrySummary& b) { return a.key < b.key; });
  return summaries;
}

ClearResult DiskCache::clear() const {
  require_writable("clear");
  struct KeyFiles {
    bool entry = false;
    bool lock = false;
    std::vector<fs::path> temps;
  };
  std::map<std::string, KeyFiles> keys;
  for_each_file(dir_, [&](const fs::directory_entry& item) {
    const std::string file_name = item.path().filename().string();
    const std::string_view name(file_name);
    if (const std::string_view key = key_of(name, kEntrySuffix); !key.empty()) {
      keys[std::string(key)].entry = true;
    } else if (const std::string_view key = key_of(name, kLockSuffix); !key.empty()) {
      keys[std::string(key)].lock = true;
    } else if (name.size() > 32 + kTempInfix.size() && is_cache_key(name.substr(0, 32)) &&
               name.substr(32, kTempInfix.size()) == kTempInfix) {
      keys[std::string(name.substr(0, 32))].temps.push_back(item.path());
    }
  });
  ClearResult result;
  for (const auto& [key, files] : keys)
    clear_key(key, files.entry, files.temps, files.lock, result);
  return result;
}

void DiskCache::clear_key(std::string_view key, bool entry, const std::vector<fs::path>& temps,
                          bool lock, ClearResult& result) const {
  const auto attempt = [&](auto&& step) {
    try {
      step();
    } catch (const CacheFileError& error) {
      result.problems.emplace_back(error.what());
    }
  };
  // A complete entry is replaced only by rename: removing it never harms a writer, and a
  // reader that opened it keeps reading the removed file.
  if (entry) attempt([&] { result.removed += remove_path(entry_path(key)) ? 1 : 0; });
  if (temps.empty() && !lock) return;
  // Temp files belong to the writer holding the key's lock: touched only when it is free.
  // The lock file goes last, under its own lock; waiters then lock the next file.
  const fs::path lock_file = lock_path(key);
  struct stat info {};
  if (::lstat(lock_file.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // Not a lock anybody can hold (FileLock refuses it): in the way of every writer.
    attempt([&] { remove_path(lock_file); });
    return;
  }
  attempt([&] {
    if (const std::optional<FileLock> held = FileLock::try_lock(lock_file)) {
      for (const fs::path& temp : temps) remove_path(temp);
      remove_path(lock_file);
    }
  });
}

}  // namespace attnjit::runtime
