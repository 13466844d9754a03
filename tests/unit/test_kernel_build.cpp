// load_or_build and the disk cache modes: a loaded entry must match the plan it is loaded
// for (else it is rebuilt), ATTNJIT_DISK_CACHE=off|readonly and set_disk_cache_mode, and a
// directory this process cannot write is served read-only; a set of several kernels keeps
// its order and names the one that fails. Compiles tiny kernels with NVRTC (no GPU needed).
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/disk_cache.hpp"
#include "runtime/jit/kernel_build.hpp"
#include "support/cache_fixtures.hpp"
#include "support/env_override.hpp"

using namespace attnjit;
using namespace attnjit::runtime;
using namespace attnjit::testing;
namespace fs = std::filesystem;

namespace {

/// load_or_build of the tiny set under kCacheKey for sm_80; `level` says where it came from.
CacheEntry load_or_build_tiny(jit::CacheLevel& level) {
  return load_or_build(kCacheKey, kText, /*use_disk=*/true, level, tiny_sources(), Arch::sm_80);
}

/// Lets $ATTNJIT_DISK_CACHE decide the mode again on scope exit.
struct ModeReset {
  ~ModeReset() { reset_disk_cache_mode(); }
};

}  // namespace

TEST_CASE("entry_mismatch compares an entry with the plan it serves", "[cache]") {
  const std::vector<KernelSource> sources = tiny_sources();
  CacheEntry entry;
  entry.key = kCacheKey;
  entry.spec_text = kText;
  CompiledKernel kernel;
  kernel.role = "forward";
  kernel.name = "attnjit_test_kernel";
  kernel.threads = 128;
  kernel.cubin = cubin_header(80);
  entry.kernels = {kernel};
  CHECK(entry_mismatch(entry, kText, sources, Arch::sm_80).empty());

  CacheEntry other = entry;
  other.spec_text = "dtype=bf16 head_dim=64 mask=causal";
  CHECK(entry_mismatch(other, kText, sources, Arch::sm_80) == "it was built for another spec");
  other = entry;
  other.kernels.clear();
  CHECK(entry_mismatch(other, kText, sources, Arch::sm_80) == "it holds 0 kernels, the plan has 1");
  other = entry;
  other.kernels.push_back(kernel);
  CHECK(entry_mismatch(other, kText, sources, Arch::sm_80) == "it holds 2 kernels, the plan has 1");
  other = entry;
  other.kernels[0].role = "backward";
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_80), Catch::Contains("(backward)"));
  other = entry;
  other.kernels[0].name = "attnjit_causal";
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_80),
             Catch::Contains("'attnjit_causal'"));
  other = entry;
  other.kernels[0].threads = 256;
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_80), Catch::Contains("256 threads"));
  other = entry;
  other.kernels[0].dynamic_smem_bytes = 1024;
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_80), Catch::Contains("1024 B"));

  // The cubin's ELF header must name the spec's SM version (either ABI of the ELF flags).
  CHECK(entry_mismatch(entry, kText, sources, Arch::sm_80).empty());
  CHECK(entry_mismatch(entry, kText, sources, Arch::sm_86) ==
        "kernel 'attnjit_test_kernel' holds a cubin for sm_80, the spec targets sm_86");
  other = entry;
  other.kernels[0].cubin = cubin_header(90, /*new_abi=*/false);
  CHECK(entry_mismatch(other, kText, sources, Arch::sm_90a).empty());
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_89),
             Catch::Contains("a cubin for sm_90, the spec targets sm_89"));
  other.kernels[0].cubin = "x";
  CHECK(entry_mismatch(other, kText, sources, Arch::sm_80) ==
        "kernel 'attnjit_test_kernel' holds no CUDA ELF cubin");
  other.kernels[0].cubin = cubin_header(80).substr(0, 40);
  CHECK_THAT(entry_mismatch(other, kText, sources, Arch::sm_80), Catch::Contains("no CUDA ELF"));
}

TEST_CASE("a cubin's SM version comes from its ELF header", "[cache]") {
  CHECK(cubin_sm_version(cubin_header(86)) == 86);
  CHECK(cubin_sm_version(cubin_header(86, /*new_abi=*/false)) == 86);
  std::string not_cuda = cubin_header(80);
  not_cuda[18] = 62;  // EM_X86_64
  CHECK_FALSE(cubin_sm_version(not_cuda).has_value());
  CHECK_FALSE(cubin_sm_version("").has_value());
  // NVRTC's own cubins, whichever ELF ABI this toolkit writes.
  jit::CacheLevel level = jit::CacheLevel::memory;
  for (const Arch arch : {Arch::sm_80, Arch::sm_89, Arch::sm_90a}) {
    const CacheEntry built =
        load_or_build(kCacheKey, kText, /*use_disk=*/false, level, tiny_sources(), arch);
    CHECK(entry_mismatch(built, kText, tiny_sources(), arch).empty());
  }
}

TEST_CASE("an entry of another spec under the key is rebuilt, then hit", "[cache]") {
  TempDir dir;
  const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", dir.path.c_str());
  const EnvOverride mode("ATTNJIT_DISK_CACHE", nullptr);
  // A forged entry: right key, valid checksum, but another spec's kernels.
  CacheEntry forged = sample_entry(kCacheKey);
  DiskCache(dir.path).store(forged);
  jit::CacheLevel level = jit::CacheLevel::memory;
  CacheEntry entry;
  const std::string warning =
      capture_stderr(dir.path / "stderr.txt", [&] { entry = load_or_build_tiny(level); });
  CHECK(level == jit::CacheLevel::miss);
  CHECK(entry.spec_text == kText);
  REQUIRE(entry.kernels.size() == 1);
  CHECK(entry.kernels[0].name == "attnjit_test_kernel");
  CHECK_THAT(warning, Catch::Contains("does not match its plan (it was built for another "
                                      "spec); rebuilding"));
  entry = load_or_build_tiny(level);
  CHECK(level == jit::CacheLevel::disk);
}

TEST_CASE("ATTNJIT_DISK_CACHE and set_disk_cache_mode", "[cache]") {
  TempDir dir;
  const fs::path cache = dir.path / "cache";
  const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", cache.c_str());
  const ModeReset reset;
  jit::CacheLevel level = jit::CacheLevel::memory;

  SECTION("off: the directory is never touched") {
    const EnvOverride mode("ATTNJIT_DISK_CACHE", "off");
    CHECK(jit::disk_cache_mode() == jit::DiskCacheMode::off);
    load_or_build_tiny(level);
    CHECK(level == jit::CacheLevel::miss);
    CHECK_FALSE(fs::exists(cache));
    CHECK_THROWS_WITH(jit::clear_disk_cache(), Catch::Contains("got 'off'"));
  }
  SECTION("readonly: entries are loaded, nothing is written, locked or deleted") {
    const EnvOverride mode("ATTNJIT_DISK_CACHE", "readonly");
    load_or_build_tiny(level);  // a miss, not stored
    CHECK(level == jit::CacheLevel::miss);
    CHECK_FALSE(fs::exists(cache));
    jit::set_disk_cache_mode(jit::DiskCacheMode::on);  // over the variable
    load_or_build_tiny(level);
    CHECK(level == jit::CacheLevel::miss);
    REQUIRE(fs::exists(cache / (kCacheKey + ".kernel")));
    fs::remove(cache / (kCacheKey + ".lock"));
    jit::set_disk_cache_mode(jit::DiskCacheMode::readonly);
    load_or_build_tiny(level);
    CHECK(level == jit::CacheLevel::disk);
    CHECK_FALSE(fs::exists(cache / (kCacheKey + ".lock")));
    write_all(cache / (kCacheKey + ".kernel"), "corrupt");
    capture_stderr(dir.path / "stderr.txt", [&] { load_or_build_tiny(level); });
    CHECK(level == jit::CacheLevel::miss);
    CHECK(read_all(cache / (kCacheKey + ".kernel")) == "corrupt");
    CHECK_THROWS_WITH(jit::clear_disk_cache(), Catch::Contains("got 'readonly'"));
  }
  SECTION("a bad value names the variable") {
    const EnvOverride mode("ATTNJIT_DISK_CACHE", "sometimes");
    CHECK_THROWS_WITH(jit::disk_cache_mode(),
                      "ATTNJIT_DISK_CACHE: got 'sometimes'; accepted: on (read and write), "
                      "readonly, off");
    CHECK_THROWS_AS(load_or_build_tiny(level), Error);
  }
}

TEST_CASE("a directory this process cannot write is served read-only", "[cache]") {
  TempDir dir;
  const fs::path cache = dir.path / "cache";
  const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", cache.c_str());
  const EnvOverride mode("ATTNJIT_DISK_CACHE", nullptr);
  jit::CacheLevel level = jit::CacheLevel::memory;
  load_or_build_tiny(level);
  REQUIRE(level == jit::CacheLevel::miss);
  fs::remove(cache / (kCacheKey + ".lock"));
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::permissions(cache, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                             fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
  const fs::path warning = dir.path / "stderr.txt";
  write_all(warning, "");
  fs::permissions(warning, fs::perms::all);
  // Root writes everywhere: the child drops to an unprivileged user first.
  const int status = run_in_child(120, [&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 10;
    if (DiskCache(cache).write_access() == 0) return 11;
    reset_cache_warning();
    jit::CacheLevel child_level = jit::CacheLevel::memory;
    CacheEntry other;
    capture_stderr(warning, [&] {
      load_or_build_tiny(child_level);
      if (child_level != jit::CacheLevel::disk) return;
      // A miss is built and not stored.
      other = load_or_build(kOtherCacheKey, kText, true, child_level, tiny_sources(), Arch::sm_80);
    });
    if (child_level != jit::CacheLevel::miss || other.kernels.size() != 1) return 13;
    return fs::exists(cache / (kCacheKey + ".lock")) ? 14 : 0;
  });
  CHECK(status == 0);
  CHECK_FALSE(fs::exists(cache / (kOtherCacheKey + ".kernel")));
  CHECK(read_all(warning) == "attnjit: kernel cache: cannot write '" + cache.string() +
                                 "' (Permission denied); using it read-only (set "
                                 "ATTNJIT_DISK_CACHE=off to compile without the disk cache, or "
                                 "readonly to only read it)\n");
}

TEST_CASE("a set of several kernels keeps the plan's order; a failing kernel is named", "[cache]") {
  // More kernels than the machine has cores, the attention kernels last in the plan: they
  // compile first, but the entry lists the kernels in the plan's order with their own code.
  std::vector<KernelSource> sources;
  const char* roles[] = {"flashmask_minmax",    "cta_order", "backward_preprocess", "forward",
                         "backward_convert_dq", "backward",  "backward_dq"};
  for (int i = 0; i < 7; ++i) {
    const std::string name = "attnjit_test_kernel_" + std::to_string(i);
    sources.push_back({roles[i], name,
                       "extern \"C\" __global__ void " + name +
                           "(int* out) { *out = " + std::to_string(100 + i) + "; }\n",
                       32 * (i + 1), 0});
  }
  jit::CacheLevel level = jit::CacheLevel::memory;
  const CacheEntry entry = load_or_build(kCacheKey, "test set: seven kernels", /*use_disk=*/false,
                                         level, sources, Arch::sm_80);
  CHECK(level == jit::CacheLevel::miss);
  REQUIRE(entry.kernels.size() == sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    INFO(i);
    CHECK(entry.kernels[i].role == sources[i].role);
    CHECK(entry.kernels[i].name == sources[i].name);
    CHECK(entry.kernels[i].threads == sources[i].threads);
    CHECK(entry.kernels[i].ptx.find(".entry " + sources[i].name) != std::string::npos);
    CHECK(entry.kernels[i].ptx.find(std::to_string(100 + i)) != std::string::npos);
    CHECK_FALSE(entry.kernels[i].cubin.empty());
  }

  // One kernel that does not compile: the build fails naming it, after the others finished.
  sources[2].source = "extern \"C\" __global__ void attnjit_test_kernel_2(int* out) { *out = ; }\n";
  try {
    load_or_build(kCacheKey, "test set: seven kernels, one broken", /*use_disk=*/false, level,
                  sources, Arch::sm_80);
    FAIL("a kernel that does not compile was built");
  } catch (const DeviceError& error) {
    CHECK_THAT(error.what(), Catch::Contains("attnjit_test_kernel_2.cu"));
  }
}
