// The entry file format (integers little-endian):
//   "ATTNJITC" | u32 format version | u32 0 | u64 payload size | u64 XXH3-64 of the payload
//   payload: u32 metadata size | metadata (JSON) | cubin and ptx of each kernel, in order
#include "runtime/jit/cache_entry.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"

namespace attnjit::runtime {
namespace {

using nlohmann::json;

constexpr std::string_view kMagic = "ATTNJITC";
constexpr std::uint32_t kFormatVersion = 1;

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

bool is_identifier(std::string_view name) {
  const auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  return !name.empty() && name.size() <= EntryLimits::max_name_bytes &&
         !(name[0] >= '0' && name[0] <= '9') && std::all_of(name.begin(), name.end(), word);
}

/// Why `kernel` breaks EntryLimits, or an empty string.
std::string limit_violation(const CompiledKernel& kernel) {
  const auto outside = [](std::string_view field, long long value, long long lo, long long hi) {
    return value < lo || value > hi ? fmt::format("{} {} outside [{}, {}]", field, value, lo, hi)
                                    : std::string();
  };
  if (!is_identifier(kernel.role)) return "a role that is not an identifier";
  if (!is_identifier(kernel.name)) return "a kernel name that is not an identifier";
  const PtxasReport& r = kernel.report;
  constexpr int kMaxBytes = 1 << 24;
  for (std::string why :
       {outside("threads", kernel.threads, 1, EntryLimits::max_threads),
        outside("dynamic_smem_bytes", kernel.dynamic_smem_bytes, 0,
                EntryLimits::max_dynamic_smem_bytes),
        outside("static_smem_bytes", r.static_smem_bytes, 0, EntryLimits::max_static_smem_bytes),
        outside("registers", r.registers, 0, EntryLimits::max_registers),
        outside("spill_store_bytes", r.spill_store_bytes, 0, kMaxBytes),
        outside("spill_load_bytes", r.spill_load_bytes, 0, kMaxBytes),
        outside("stack_bytes", r.stack_bytes, 0, kMaxBytes)}) {
    if (!why.empty()) return fmt::format("kernel '{}': {}", kernel.name, why);
  }
  return {};
}

/// An integer field of `item` in [lo, hi]; CorruptEntry for another type or value.
std::int64_t integer(const json& item, const char* field, std::int64_t lo, std::int64_t hi) {
  const json& value = item.at(field);
  bool in_range = false;
  std::int64_t result = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo;
    result = in_range ? static_cast<std::int64_t>(u) : 0;
  } else if (value.is_number_integer()) {
    result = value.get<std::int64_t>();
    in_range = result >= lo && result <= hi;
  }
  if (!in_range) {
    throw CorruptEntry(
        fmt::format("metadata field '{}' is not an integer in [{}, {}]", field, lo, hi));
  }
  return result;
}

int int_field(const json& item, const char* field) {
  return static_cast<int>(
      integer(item, field, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

/// Metadata of an entry: the entry without its blobs, and the blob sizes.
struct Metadata {
  CacheEntry entry;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blob_sizes;  ///< cubin, ptx
  std::size_t blobs_offset = 0;                                     ///< within the payload
};

/// Parses the metadata at the start of `payload` (which may stop right after it).
Metadata parse_metadata(std::string_view payload, std::uint64_t payload_size) {
  if (payload.size() < 4) throw CorruptEntry("truncated metadata");
  const std::uint64_t metadata_size = read_le(payload, 0, 4);
  if (metadata_size > payload_size - 4 || metadata_size > payload.size() - 4 ||
      metadata_size > EntryLimits::max_metadata_bytes) {
    throw CorruptEntry("metadata larger than the payload");
  }
  Metadata metadata;
  metadata.blobs_offset = 4 + metadata_size;
  try {
    const json parsed = json::parse(payload.substr(4, metadata_size));
    if (!parsed.is_object()) throw CorruptEntry("metadata is not a JSON object");
    metadata.entry.key = parsed.at("key").get<std::string>();
    metadata.entry.spec_text = parsed.at("spec_text").get<std::string>();
    const json& kernels = parsed.at("kernels");
    if (!kernels.is_array() || kernels.empty() || kernels.size() > EntryLimits::max_kernels) {
      throw CorruptEntry(fmt::format("metadata field 'kernels' is not a list of 1 to {} kernels",
                                     EntryLimits::max_kernels));
    }
    for (const json& item : kernels) {
      if (!item.is_object()) throw CorruptEntry("a kernel's metadata is not a JSON object");
      CompiledKernel kernel;
      kernel.role = item.at("role").get<std::string>();
      kernel.name = item.at("name").get<std::string>();
      kernel.report.registers = int_field(item, "registers");
      kernel.report.spill_store_bytes = int_field(item, "spill_store_bytes");
      kernel.report.spill_load_bytes = int_field(item, "spill_load_bytes");
      kernel.report.stack_bytes = int_field(item, "stack_bytes");
      kernel.report.static_smem_bytes = int_field(item, "static_smem_bytes");
      kernel.threads = int_field(item, "threads");
      kernel.dynamic_smem_bytes = int_field(item, "dynamic_smem_bytes");
      if (const std::string why = limit_violation(kernel); !why.empty()) throw CorruptEntry(why);
      const auto max_blob = static_cast<std::int64_t>(EntryLimits::max_file_bytes);
      metadata.blob_sizes.emplace_back(integer(item, "cubin_size", 0, max_blob),
                                       integer(item, "ptx_size", 0, max_blob));
      metadata.entry.kernels.push_back(std::move(kernel));
    }
  } catch (const json::exception& error) {
    throw CorruptEntry(fmt::format("unparsable metadata: {}", error.what()));
  }
  return metadata;
}

}  // namespace

bool is_cache_key(std::string_view key) {
  return key.size() == 32 && std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string encode_entry(const CacheEntry& entry) {
  if (entry.kernels.empty() || entry.kernels.size() > EntryLimits::max_kernels) {
    throw InternalError(fmt::format("disk cache entry with {} kernels", entry.kernels.size()));
  }
  json kernels = json::array();
  for (const CompiledKernel& kernel : entry.kernels) {
    if (const std::string why = limit_violation(kernel); !why.empty()) {
      throw InternalError(fmt::format("disk cache entry breaks its limits: {}", why));
    }
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
  if (metadata.size() > EntryLimits::max_metadata_bytes) {
    throw InternalError("disk cache metadata larger than its limit");
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
  if (file.size() > EntryLimits::max_file_bytes) {
    throw InternalError("disk cache entry larger than its limit");
  }
  return file;
}

std::uint64_t check_entry_header(std::string_view header, std::uint64_t file_size) {
  if (header.size() < kEntryHeaderBytes || file_size < kEntryHeaderBytes) {
    throw CorruptEntry("truncated header");
  }
  if (header.substr(0, kMagic.size()) != kMagic) throw CorruptEntry("wrong magic");
  const auto version = read_le(header, 8, 4);
  if (version != kFormatVersion || read_le(header, 12, 4) != 0) {
    throw CorruptEntry(fmt::format("format version {}, expected {}", version, kFormatVersion));
  }
  const std::uint64_t payload_size = read_le(header, 16, 8);
  if (file_size - kEntryHeaderBytes != payload_size) {
    throw CorruptEntry(
        fmt::format("{}: header announces {} payload bytes, file holds {}",
                    file_size - kEntryHeaderBytes < payload_size ? "truncated" : "wrong size",
                    payload_size, file_size - kEntryHeaderBytes));
  }
  if (file_size > EntryLimits::max_file_bytes) {
    throw CorruptEntry(fmt::format("{} bytes, more than the {} an entry may hold", file_size,
                                   EntryLimits::max_file_bytes));
  }
  return payload_size;
}

std::optional<int> cubin_sm_version(std::string_view cubin) {
  constexpr std::size_t kElf64HeaderBytes = 64;
  constexpr int kElfClass64 = 2;
  constexpr std::uint64_t kMachineCuda = 190;
  // ELFOSABI_CUDA_V2 (CUDA 13's cubins) keeps the SM in bits 8-15 of e_flags; the older
  // ELFOSABI_CUDA in bits 0-7.
  constexpr int kOsAbiCudaV2 = 0x41;
  if (cubin.size() < kElf64HeaderBytes ||
      cubin.substr(0, 4) !=
          "\x7f"
          "ELF" ||
      cubin[4] != kElfClass64 || read_le(cubin, 18, 2) != kMachineCuda) {
    return std::nullopt;
  }
  const std::uint64_t flags = read_le(cubin, 48, 4);
  const int os_abi = static_cast<unsigned char>(cubin[7]);
  return static_cast<int>(os_abi == kOsAbiCudaV2 ? (flags >> 8) & 0xff : flags & 0xff);
}

CacheEntry decode_entry(std::string_view file, std::string_view key) {
  const std::uint64_t payload_size = check_entry_header(file, file.size());
  const std::string_view payload = file.substr(kEntryHeaderBytes);
  if (XXH3_64bits(payload.data(), payload.size()) != read_le(file, 24, 8)) {
    throw CorruptEntry("checksum mismatch");
  }
  Metadata metadata = parse_metadata(payload, payload_size);
  if (metadata.entry.key != key) {
    // Quoted in a message: shortened, and only when it is a key at all.
    throw CorruptEntry(is_cache_key(metadata.entry.key)
                           ? fmt::format("it holds key '{}'", metadata.entry.key)
                           : std::string("it holds a malformed key"));
  }
  std::size_t offset = metadata.blobs_offset;
  for (std::size_t i = 0; i < metadata.blob_sizes.size(); ++i) {
    const auto [cubin_size, ptx_size] = metadata.blob_sizes[i];
    if (cubin_size > payload.size() - offset || ptx_size > payload.size() - offset - cubin_size) {
      throw CorruptEntry("kernel blobs larger than the payload");
    }
    CompiledKernel& kernel = metadata.entry.kernels[i];
    if (cubin_size == 0 && ptx_size == 0) {
      throw CorruptEntry(fmt::format("kernel '{}' has neither cubin nor PTX", kernel.name));
    }
    kernel.cubin = std::string(payload.substr(offset, cubin_size));
    kernel.ptx = std::string(payload.substr(offset + cubin_size, ptx_size));
    offset += cubin_size + ptx_size;
  }
  if (offset != payload.size()) throw CorruptEntry("bytes after the last kernel");
  return std::move(metadata.entry);
}

CacheEntry decode_entry_metadata(std::string_view prefix, std::uint64_t file_size) {
  const std::uint64_t payload_size = check_entry_header(prefix, file_size);
  return parse_metadata(prefix.substr(kEntryHeaderBytes), payload_size).entry;
}

}  // namespace attnjit::runtime
