// The on-disk kernel cache. File layout of `<key>.kernel` (integers little-endian):
//   "ATTNJITC" | u32 format version | u32 0 | u64 payload size | u64 XXH3-64 of the payload
//   payload: u32 metadata size | metadata (JSON) | cubin and ptx of each kernel, in order
#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "attnjit/error.hpp"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kMagic = "ATTNJITC";
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 32;
constexpr std::string_view kEntrySuffix = ".kernel";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kTempInfix = ".kernel.tmp.";

/// Why an entry cannot be trusted; caught where entries are read.
class CorruptEntry : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

bool is_key(std::string_view key) {
  return key.size() == 32 && std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void check_key(std::string_view key) {
  if (!is_key(key)) {
    throw InternalError(fmt::format("disk cache key '{}' is not 32 lowercase hex digits", key));
  }
}

void append_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void append_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t read_le(std::string_view bytes, std::size_t offset, int width) {
  std::uint64_t value = 0;
  for (int i = 0; i < width; ++i) {
    value |= std::uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return value;
}

std::string serialize(const CacheEntry& entry) {
  json kernels = json::array();
  for (const CompiledKernel& kernel : entry.kernels) {
    kernels.push_back({{"role", kernel.role},
                       {"name", kernel.name},
                       {"registers", kernel.report.registers},
                       {"spill_store_bytes", kernel.report.spill_store_bytes},
                       {"spill_load_bytes", kernel.report.spill_load_bytes},
                       {"stack_bytes", kernel.report.stack_bytes},
                       {"static_smem_bytes", kernel.report.static_smem_bytes},
                       {"threads", kernel.threads},
                       {"dynamic_smem_bytes", kernel.dynamic_smem_bytes},
                       {"cubin_size", kernel.cubin.size()},
                       {"ptx_size", kernel.ptx.size()}});
  }
  // Invalid UTF-8 (never produced by the spec printer) is replaced rather than thrown on.
  const std::string metadata =
      json{{"key", entry.key}, {"spec_text", entry.spec_text}, {"kernels", kernels}}.dump(
          -1, ' ', false, json::error_handler_t::replace);
  if (metadata.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw InternalError("disk cache metadata larger than 4 GiB");
  }
  std::string payload;
  append_u32(payload, static_cast<std::uint32_t>(metadata.size()));
  payload += metadata;
  for (const CompiledKernel& kernel : entry.kernels) {
    payload += kernel.cubin;
    payload += kernel.ptx;
  }
  std::string file(kMagic);
  append_u32(file, kFormatVersion);
  append_u32(file, 0);
  append_u64(file, payload.size());
  append_u64(file, XXH3_64bits(payload.data(), payload.size()));
  file += payload;
  return file;
}

/// The payload size the header announces; throws CorruptEntry for a bad header or a file
/// whose size differs from it.
std::uint64_t check_header(std::string_view header, std::uint64_t file_size) {
  if (header.size() < kHeaderBytes) throw CorruptEntry("truncated header");
  if (header.substr(0, kMagic.size()) != kMagic) throw CorruptEntry("wrong magic");
  const auto version = read_le(header, 8, 4);
  if (version != kFormatVersion || read_le(header, 12, 4) != 0) {
    throw CorruptEntry(fmt::format("format version {}, expected {}", version, kFormatVersion));
  }
  const std::uint64_t payload_size = read_le(header, 16, 8);
  if (file_size - kHeaderBytes != payload_size) {
    throw CorruptEntry(
        fmt::format("{}: header announces {} payload bytes, file holds {}",
                    file_size - kHeaderBytes < payload_size ? "truncated" : "wrong size",
                    payload_size, file_size - kHeaderBytes));
  }
  return payload_size;
}

/// Metadata of an entry: the entry without its blobs, and the blob sizes.
struct Metadata {
  CacheEntry entry;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blob_sizes;  ///< cubin, ptx
};

/// Parses the metadata at the start of `payload` (which may stop right after it) and returns
/// it with the offset of the first blob.
std::pair<Metadata, std::size_t> parse_metadata(std::string_view payload,
                                                std::uint64_t payload_size) {
  if (payload.size() < 4) throw CorruptEntry("truncated metadata");
  const std::uint64_t metadata_size = read_le(payload, 0, 4);
  if (metadata_size > payload_size - 4 || metadata_size > payload.size() - 4) {
    throw CorruptEntry("metadata larger than the payload");
  }
  Metadata metadata;
  try {
    const json parsed = json::parse(payload.substr(4, metadata_size));
    metadata.entry.key = parsed.at("key").get<std::string>();
    metadata.entry.spec_text = parsed.at("spec_text").get<std::string>();
    for (const json& item : parsed.at("kernels")) {
      CompiledKernel kernel;
      kernel.role = item.at("role").get<std::string>();
      kernel.name = item.at("name").get<std::string>();
      kernel.report.registers = item.at("registers").get<int>();
      kernel.report.spill_store_bytes = item.at("spill_store_bytes").get<int>();
      kernel.report.spill_load_bytes = item.at("spill_load_bytes").get<int>();
      kernel.report.stack_bytes = item.at("stack_bytes").get<int>();
      kernel.report.static_smem_bytes = item.at("static_smem_bytes").get<int>();
      kernel.threads = item.at("threads").get<int>();
      kernel.dynamic_smem_bytes = item.at("dynamic_smem_bytes").get<int>();
      metadata.blob_sizes.emplace_back(item.at("cubin_size").get<std::uint64_t>(),
                                       item.at("ptx_size").get<std::uint64_t>());
      metadata.entry.kernels.push_back(std::move(kernel));
    }
  } catch (const json::exception& error) {
    throw CorruptEntry(fmt::format("unparsable metadata: {}", error.what()));
  }
  return {std::move(metadata), 4 + metadata_size};
}

CacheEntry parse_entry(std::string_view file, std::string_view key) {
  const std::uint64_t payload_size = check_header(file, file.size());
  const std::string_view payload = file.substr(kHeaderBytes);
  if (XXH3_64bits(payload.data(), payload.size()) != read_le(file, 24, 8)) {
    throw CorruptEntry("checksum mismatch");
  }
  auto [metadata, offset] = parse_metadata(payload, payload_size);
  if (metadata.entry.key != key) {
    throw CorruptEntry(fmt::format("it holds key '{}'", metadata.entry.key));
  }
  for (std::size_t i = 0; i < metadata.blob_sizes.size(); ++i) {
    const auto [cubin_size, ptx_size] = metadata.blob_sizes[i];
    if (cubin_size > payload.size() - offset || ptx_size > payload.size() - offset - cubin_size) {
      throw CorruptEntry("kernel blobs larger than the payload");
    }
    CompiledKernel& kernel = metadata.entry.kernels[i];
    kernel.cubin = std::string(payload.substr(offset, cubin_size));
    kernel.ptx = std::string(payload.substr(offset + cubin_size, ptx_size));
    offset += cubin_size + ptx_size;
  }
  if (offset != payload.size()) throw CorruptEntry("bytes after the last kernel");
  return std::move(metadata.entry);
}

[[noreturn]] void throw_cache_error(const fs::path& dir, std::string_view what, int error) {
  throw Error(fmt::format(
      "ATTNJIT_CACHE_DIR: cannot use '{}' as the kernel cache ({}: {}); accepted: a directory "
      "this process can create and write",
      dir.string(), what, std::strerror(error)));
}

/// Up to `limit` bytes from the start of `path` and the file's size, or nullopt when it does
/// not exist.
std::optional<std::pair<std::string, std::uint64_t>> read_file(const fs::path& dir,
                                                               const fs::path& path,
                                                               std::uint64_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw_cache_error(dir, fmt::format("open {}", path.string()), errno);
  }
  struct stat info {};
  std::string bytes;
  int error = ::fstat(fd, &info) == 0 ? 0 : errno;
  if (error == 0) {
    bytes.resize(std::min<std::uint64_t>(limit, static_cast<std::uint64_t>(info.st_size)));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) error = errno;
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (error != 0) throw_cache_error(dir, fmt::format("read {}", path.string()), error);
  return std::pair{std::move(bytes), static_cast<std::uint64_t>(info.st_size)};
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
  return is_key(key) ? key : std::string_view();
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_cache_error(path.parent_path(), fmt::format("open {}", path.string()), errno);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    release();
    throw_cache_error(path.parent_path(), fmt::format("flock {}", path.string()), error);
  }
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

DiskCache::DiskCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

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
  throw Error(
      "ATTNJIT_CACHE_DIR: not set, and neither are XDG_CACHE_HOME and HOME; accepted: a "
      "writable directory for the kernel cache");
}

std::filesystem::path DiskCache::entry_path(std::string_view key) const {
  check_key(key);
  return dir_ / fmt::format("{}{}", key, kEntrySuffix);
}

void DiskCache::create_dir() const {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (!error && !fs::is_directory(dir_, error) && !error) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) {
    throw Error(fmt::format(
        "ATTNJIT_CACHE_DIR: cannot use '{}' as the kernel cache ({}); accepted: a directory "
        "this process can create and write",
        dir_.string(), error.message()));
  }
}

std::optional<CacheEntry> DiskCache::load(std::string_view key) const {
  const fs::path path = entry_path(key);
  auto file = read_file(dir_, path, std::numeric_limits<std::uint64_t>::max());
  if (!file) return std::nullopt;
  try {
    return parse_entry(file->first, key);
  } catch (const CorruptEntry& corrupt) {
    std::string reason = corrupt.what();
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    fmt::print(stderr, "attnjit: cache entry {} is corrupt ({}); rebuilding\n", path.string(),
               reason);
    std::error_code ignored;
    fs::remove(path, ignored);
    return std::nullopt;
  }
}

void DiskCache::store(const CacheEntry& entry) const {
  const fs::path path = entry_path(entry.key);
  const std::string bytes = serialize(entry);
  create_dir();
  const fs::path temp =
      dir_ / fmt::format("{}{}{}.{:016x}", entry.key, kTempInfix, ::getpid(), random_suffix());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_cache_error(dir_, fmt::format("create {}", temp.string()), errno);
  Failure failure = write_and_sync(fd, bytes);
  if (::close(fd) != 0 && failure.error == 0) failure = {errno, "close"};
  if (failure.error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) {
    failure = {errno, "rename"};
  }
  if (failure.error != 0) {
    ::unlink(temp.c_str());
    throw_cache_error(dir_, fmt::format("{} {}", failure.step, temp.string()), failure.error);
  }
  // Makes the rename durable. Best effort: the entry is complete and in place already, and
  // some file systems refuse fsync on directories.
  if (const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

FileLock DiskCache::lock(std::string_view key) const {
  check_key(key);
  create_dir();
  return FileLock(dir_ / fmt::format("{}{}", key, kLockSuffix));
}

std::vector<EntrySummary> DiskCache::list() const {
  std::vector<EntrySummary> summaries;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir_, error)) {
    const std::string file_name = item.path().filename().string();
    const std::string_view key = key_of(file_name, kEntrySuffix);
    std::error_code item_error;
    if (key.empty() || !item.is_regular_file(item_error)) continue;
    EntrySummary summary{std::string(key), "<corrupt>", 0, item.last_write_time(item_error)};
    // Header, metadata size and metadata: a bounded prefix suffices for any sane entry.
    const auto prefix = read_file(dir_, item.path(), kHeaderBytes + 4 + (1u << 24));
    if (!prefix) continue;
    summary.bytes = prefix->second;
    try {
      const std::uint64_t payload_size = check_header(prefix->first, prefix->second);
      const Metadata metadata =
          parse_metadata(std::string_view(prefix->first).substr(kHeaderBytes), payload_size).first;
      if (metadata.entry.key == key) summary.spec_text = metadata.entry.spec_text;
    } catch (const CorruptEntry&) {
      // Listed as "<corrupt>"; load() deletes it when it is next needed.
    }
    summaries.push_back(std::move(summary));
  }
  if (error && error != std::errc::no_such_file_or_directory) {
    throw Error(
        fmt::format("ATTNJIT_CACHE_DIR: cannot list '{}' ({})", dir_.string(), error.message()));
  }
  std::sort(summaries.begin(), summaries.end(),
            [](const EntrySummary& a, const EntrySummary& b) { return a.key < b.key; });
  return summaries;
}

std::size_t DiskCache::clear() const {
  std::vector<fs::path> doomed;
  std::size_t entries = 0;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir_, error)) {
    const std::string file_name = item.path().filename().string();
    const std::string_view name(file_name);
    const bool entry = !key_of(name, kEntrySuffix).empty();
    const bool lock_file = !key_of(name, kLockSuffix).empty();
    const bool temp = name.size() > 32 + kTempInfix.size() && is_key(name.substr(0, 32)) &&
                      name.substr(32, kTempInfix.size()) == kTempInfix;
    if (entry || lock_file || temp) doomed.push_back(item.path());
    if (entry) ++entries;
  }
  if (error && error != std::errc::no_such_file_or_directory) {
    throw Error(
        fmt::format("ATTNJIT_CACHE_DIR: cannot list '{}' ({})", dir_.string(), error.message()));
  }
  for (const fs::path& path : doomed) {
    if (!fs::remove(path, error) && error) {
      throw Error(fmt::format("ATTNJIT_CACHE_DIR: cannot remove '{}' ({})", path.string(),
                              error.message()));
    }
  }
  return entries;
}

}  // namespace attnjit::runtime
