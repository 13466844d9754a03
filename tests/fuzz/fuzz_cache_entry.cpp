// libFuzzer target over the disk cache's entry decoder, which reads files any process with
// access to the cache directory may have written. The first input byte picks what the rest
// is:
//   0     a whole entry file, as found on disk
//   1     metadata (JSON) and blobs, wrapped in a valid header and checksum, so that the
//         metadata checks are reached
//   other edits (offset, byte) pairs applied to a valid entry, its checksum then made valid
// Decoding may only throw CorruptEntry; an entry it accepts must stay within EntryLimits and
// re-encode to a file that decodes to the same entry. Anything else (another exception, a
// crash, a sanitizer report, a hang, a leak) is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "runtime/jit/cache_entry.hpp"

using attnjit::runtime::CacheEntry;
using attnjit::runtime::CompiledKernel;
using attnjit::runtime::EntryLimits;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

void put_le(std::string& bytes, std::size_t offset, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// Recomputes the header's payload size and checksum.
std::string sealed(std::string file) {
  if (file.size() < attnjit::runtime::kEntryHeaderBytes) return file;
  put_le(file, 16, file.size() - attnjit::runtime::kEntryHeaderBytes, 8);
  const std::string_view payload = std::string_view(file).substr(32);
  put_le(file, 24, XXH3_64bits(payload.data(), payload.size()), 8);
  return file;
}

const std::string& valid_entry() {
  static const std::string file = [] {
    CacheEntry entry;
    entry.key = kKey;
    entry.spec_text = "dtype=bf16 head_dim_qk=64 head_dim_v=64 mask=causal target=sm_80";
    CompiledKernel minmax{"flashmask_minmax",
                          "attnjit_minmax",
                          std::string("\x7f"
                                      "ELF\0\1",
                                      6),
                          ".version 8.0\n",
                          {32, 0, 0, 0, 0},
                          128,
                          0};
    CompiledKernel forward{"forward", "attnjit_fwd", "cubin", "", {128, 0, 0, 16, 1024},
                           256,       98304};
    entry.kernels = {minmax, forward};
    return attnjit::runtime::encode_entry(entry);
  }();
  return file;
}

void check_accepted(const CacheEntry& entry) {
  if (entry.key != kKey || entry.kernels.empty() ||
      entry.kernels.size() > EntryLimits::max_kernels) {
    std::abort();
  }
  for (const CompiledKernel& kernel : entry.kernels) {
    if (kernel.threads < 1 || kernel.threads > EntryLimits::max_threads ||
        kernel.dynamic_smem_bytes < 0 ||
        kernel.dynamic_smem_bytes > EntryLimits::max_dynamic_smem_bytes || kernel.name.empty() ||
        (kernel.cubin.empty() && kernel.ptx.empty())) {
      std::abort();
    }
  }
  const CacheEntry again =
      attnjit::runtime::decode_entry(attnjit::runtime::encode_entry(entry), kKey);
  if (again.spec_text != entry.spec_text || again.kernels.size() != entry.kernels.size())
    std::abort();
  for (std::size_t i = 0; i < entry.kernels.size(); ++i) {
    const CompiledKernel& a = entry.kernels[i];
    const CompiledKernel& b = again.kernels[i];
    if (a.name != b.name || a.role != b.role || a.cubin != b.cubin || a.ptx != b.ptx ||
        !(a.report == b.report) || a.threads != b.threads ||
        a.dynamic_smem_bytes != b.dynamic_smem_bytes) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (data[0] == 0) {
    file = std::string(rest);
  } else if (data[0] == 1) {
    file = valid_entry().substr(0, attnjit::runtime::kEntryHeaderBytes);
    file.append(4, '\0');
    // Metadata up to the first NUL byte, blobs after it.
    const std::size_t split = std::min(rest.find('\0'), rest.size());
    put_le(file, 32, split, 4);
    file += rest.substr(0, split);
    if (split < rest.size()) file += rest.substr(split + 1);
    file = sealed(std::move(file));
  } else {
    file = valid_entry();
    for (std::size_t i = 0; i + 2 < rest.size(); i += 3) {
      const std::size_t offset =
          (static_cast<unsigned char>(rest[i]) | static_cast<unsigned char>(rest[i + 1]) << 8) %
          file.size();
      file[offset] = rest[i + 2];
    }
    if (data[0] == 3 && !rest.empty()) file.resize(file.size() - rest.size() % 64);
    file = sealed(std::move(file));
  }
  try {
    check_accepted(attnjit::runtime::decode_entry(file, kKey));
  } catch (const attnjit::runtime::CorruptEntry&) {
  }
  try {
    attnjit::runtime::decode_entry_metadata(file, file.size());
  } catch (const attnjit::runtime::CorruptEntry&) {
  }
  return 0;
}
