// The file format of one disk-cache entry: a compiled kernel set, its encoding, and a decoder
// that trusts nothing it reads (sizes, counts and launch geometry are checked against fixed
// limits before anything is allocated or handed to the runtime).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/jit/nvrtc.hpp"

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

/// Limits of a well-formed entry; a file or a field beyond them is corrupt.
struct EntryLimits {
  static constexpr std::uint64_t max_file_bytes = std::uint64_t{256} << 20;
  static constexpr std::uint64_t max_metadata_bytes = std::uint64_t{16} << 20;
  static constexpr std::size_t max_kernels = 64;
  static constexpr int max_threads = 1024;  ///< per block, every supported arch
  /// Opt-in dynamic shared memory per block of the largest supported arch (sm_90: 227 KiB).
  static constexpr int max_dynamic_smem_bytes = 227 * 1024;
  static constexpr int max_static_smem_bytes = 48 * 1024;
  static constexpr int max_registers = 255;
  static constexpr std::size_t max_name_bytes = 256;
};

/// Size of the fixed header that starts every entry file.
inline constexpr std::size_t kEntryHeaderBytes = 32;

/// Why an entry cannot be trusted (the message says what is wrong with it).
class CorruptEntry : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Whether `key` is 32 lowercase hex digits.
bool is_cache_key(std::string_view key);

/// The bytes of the file that stores `entry`. Throws InternalError when the entry breaks
/// EntryLimits (the loader would reject it).
std::string encode_entry(const CacheEntry& entry);

/// The payload size announced by the first kEntryHeaderBytes of a file of `file_size` bytes.
/// Throws CorruptEntry for a bad magic or version, or a size that differs from the file's or
/// exceeds EntryLimits::max_file_bytes.
std::uint64_t check_entry_header(std::string_view header, std::uint64_t file_size);

/// The SM version a cubin was compiled for (e.g. 80, 90), read from its ELF header; nullopt
/// when `cubin` is not a 64-bit CUDA ELF file.
std::optional<int> cubin_sm_version(std::string_view cubin);

/// The entry of a whole file stored under `key`. Throws CorruptEntry for any inconsistency: a
/// bad header or checksum, unparsable metadata, another key, a field outside EntryLimits, or
/// blob sizes that do not add up.
CacheEntry decode_entry(std::string_view file, std::string_view key);

/// The key and spec text of an entry from a prefix of its file holding at least the header
/// and the metadata (`file_size` is the whole file's size); the kernels' blobs are left empty.
/// Throws CorruptEntry as decode_entry does, except that the checksum is not verified.
CacheEntry decode_entry_metadata(std::string_view prefix, std::uint64_t file_size);

}  // namespace attnjit::runtime
