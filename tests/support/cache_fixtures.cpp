// The disk-cache test material of cache_fixtures.hpp.
#include "support/cache_fixtures.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <system_error>

namespace attnjit::testing {
namespace fs = std::filesystem;
using runtime::CacheEntry;
using runtime::CompiledKernel;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path = fs::temp_directory_path() /
         ("attnjit-test-cache-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path);
  fs::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ignored);
  fs::remove_all(path, ignored);
}

std::vector<runtime::KernelSource> tiny_sources() {
  return {{"forward", "attnjit_test_kernel",
           "extern \"C\" __global__ void attnjit_test_kernel(int* out) { *out = 1; }\n", 128, 0}};
}

CacheEntry sample_entry(const std::string& key) {
  CacheEntry entry;
  entry.key = key;
  entry.spec_text = "attention<fp16, d=128> { mask = causal }";
  CompiledKernel first;
  first.role = "flashmask_minmax";
  first.name = "attnjit_minmax";
  first.cubin = std::string(
      "\x7f"
      "ELF\0\0\x01\xff\0tail",
      12);
  first.ptx = ".version 9.0\n.target sm_90\n";
  first.report = {40, 8, 12, 16, 4096};
  first.threads = 128;
  first.dynamic_smem_bytes = 0;
  CompiledKernel second;
  second.role = "forward";
  second.name = "attnjit_forward";
  second.cubin = std::string(1000, '\0') + "end";
  second.ptx = "";
  second.report = {255, 0, 0, 0, 0};
  second.threads = 256;
  second.dynamic_smem_bytes = 196608;
  entry.kernels = {first, second};
  return entry;
}

bool same_entry(const CacheEntry& a, const CacheEntry& b) {
  if (a.key != b.key || a.spec_text != b.spec_text || a.kernels.size() != b.kernels.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.kernels.size(); ++i) {
    const CompiledKernel& x = a.kernels[i];
    const CompiledKernel& y = b.kernels[i];
    if (x.role != y.role || x.name != y.name || x.cubin != y.cubin || x.ptx != y.ptx ||
        !(x.report == y.report) || x.threads != y.threads ||
        x.dynamic_smem_bytes != y.dynamic_smem_bytes) {
      return false;
    }
  }
  return true;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

namespace {

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string forge_entry(std::string_view metadata, std::string_view blobs) {
  std::string payload;
  append_le(payload, metadata.size(), 4);
  payload += metadata;
  payload += blobs;
  std::string file = "ATTNJITC";
  append_le(file, 1, 4);
  append_le(file, 0, 4);
  append_le(file, payload.size(), 8);
  append_le(file, XXH3_64bits(payload.data(), payload.size()), 8);
  return file + payload;
}

std::string cubin_header(int sm, bool new_abi) {
  std::string header(
      "\x7f"
      "ELF",
      4);
  header += '\x02';                                    // 64-bit
  header += '\x01';                                    // little-endian
  header += '\x01';                                    // ELF version
  header += static_cast<char>(new_abi ? 0x41 : 0x33);  // OS ABI: CUDA
  header += static_cast<char>(new_abi ? 8 : 7);        // ABI version
  header.resize(16, '\0');
  append_le(header, 2, 2);    // e_type: executable
  append_le(header, 190, 2);  // e_machine: EM_CUDA
  append_le(header, 1, 4);    // e_version
  header.resize(48, '\0');
  const std::uint64_t flags = new_abi ? 0x6000004 | (std::uint64_t(sm) << 8)
                                      : 0x500 | (std::uint64_t(sm) << 16) | std::uint64_t(sm);
  append_le(header, flags, 4);
  header.resize(64, '\0');
  return header;
}

}  // namespace attnjit::testing
