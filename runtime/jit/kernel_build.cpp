// The cache key of a kernel set, its NVRTC build and the disk-cache protocol around it.
#include "runtime/jit/kernel_build.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "attnjit/error.hpp"
#include "embedded.hpp"
#include "runtime/jit/debug_mode.hpp"
#include "runtime/jit/nvrtc.hpp"

namespace attnjit::runtime {
namespace {

std::atomic<std::uint64_t> g_disk_hits{0};
std::atomic<std::uint64_t> g_builds{0};
// set_disk_cache_mode's value, or -1: $ATTNJIT_DISK_CACHE decides.
std::atomic<int> g_disk_cache_mode{-1};

// Options handed to NVRTC besides the arch; they enter the cache key. With ATTNJIT_DEBUG=1
// the kernels' mbarrier waits are bounded (mbarrier.cuh): a protocol error traps instead of
// hanging the device; and they carry line information for the sanitizers' reports.
std::vector<std::string> nvrtc_options() {
  std::vector<std::string> options{"-default-device"};
  if (debug_mode()) {
    options.push_back("-DATTNJIT_MBARRIER_SPIN_LIMIT=100000000");
    options.push_back("-lineinfo");
  }
  return options;
}

std::vector<NvrtcHeader> template_headers() {
  std::vector<NvrtcHeader> headers;
  for (const templates::EmbeddedFile& file : templates::all()) {
    headers.push_back({file.name, file.source});
  }
  return headers;
}

// The attention kernels (forward, backward, dQ) take most of a set's compile time, ten times
// that of a mask or memory-pass kernel.
bool is_attention_kernel(const KernelSource& source) {
  return source.role == "forward" || source.role == "backward" || source.role == "backward_dq";
}

// Compiles the kernels on as many threads as there are cores (one NVRTC program at a time per
// thread), the attention kernels first: with one thread per kernel the utility kernels took
// cores from the attention kernel that the build waits for.
std::vector<CompiledKernel> compile_sources(const std::vector<KernelSource>& sources, Arch arch) {
  const std::vector<NvrtcHeader> headers = template_headers();
  const std::string arch_name(name_of(arch));
  const std::vector<std::string> options = nvrtc_options();
  std::vector<std::size_t> order(sources.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_partition(order.begin(), order.end(),
                        [&](std::size_t i) { return is_attention_kernel(sources[i]); });
  std::vector<NvrtcOutput> outputs(sources.size());
  std::atomic<std::size_t> next{0};
  const std::size_t workers = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1,
                                                      std::max<std::size_t>(sources.size(), 1));
  std::vector<std::future<void>> pool;
  for (std::size_t w = 0; w < workers; ++w) {
    pool.push_back(std::async(std::launch::async, [&] {
      for (std::size_t k = next++; k < order.size(); k = next++) {
        const KernelSource& source = sources[order[k]];
        outputs[order[k]] = nvrtc_compile(source.source, source.name + ".cu", headers, arch_name,
                                          options, source.name);
      }
    }));
  }
  // Every worker ends before an error is rethrown (get() in order; a future from std::async
  // also waits in its destructor).
  for (std::future<void>& worker : pool) worker.wait();
  for (std::future<void>& worker : pool) worker.get();
  std::vector<CompiledKernel> kernels;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    NvrtcOutput output = std::move(outputs[i]);
    CompiledKernel kernel;
    kernel.role = sources[i].role;
    kernel.name = sources[i].name;
    kernel.cubin = std::move(output.cubin);
    kernel.ptx = std::move(output.ptx);
    kernel.report = output.report;
    kernel.threads = sources[i].threads;
    kernel.dynamic_smem_bytes = sources[i].dynamic_smem_bytes;
    kernels.push_back(std::move(kernel));
  }
  ++g_builds;
  return kernels;
}

// Set once the process has warned about the disk cache: one warning per process.
std::atomic<bool> g_cache_warned{false};

}  // namespace

void warn_cache_failure(std::string_view what, std::string_view consequence, bool read_only) {
  if (g_cache_warned.exchange(true)) return;
  fmt::print(stderr, "attnjit: {}; {} (set ATTNJIT_DISK_CACHE={})\n", what, consequence,
             read_only ? "off to compile without the disk cache"
                       : "off to compile without the disk cache, or readonly to only read it");
  std::fflush(stderr);
}

void reset_cache_warning() {
  g_cache_warned.store(false);
}

namespace {

int sm_version(Arch arch) {
  switch (arch) {
    case Arch::sm_80:
      return 80;
    case Arch::sm_86:
      return 86;
    case Arch::sm_89:
      return 89;
    case Arch::sm_90:
    case Arch::sm_90a:
      return 90;
    case Arch::auto_detect:
      break;
  }
  throw InternalError("a kernel set built for target=auto");
}

/// The disk cache of the compiles (`read_only`: mode readonly), or nullopt when it has no
/// directory. A directory this process cannot write is used read-only.
std::optional<DiskCache> open_disk_cache(bool read_only) {
  std::filesystem::path dir;
  try {
    dir = DiskCache::default_dir();
  } catch (const CacheFileError& error) {
    warn_cache_failure(error.what(), "compiling without it", read_only);
    return std::nullopt;
  }
  if (read_only) return DiskCache(dir, true);
  const DiskCache disk(dir);
  try {
    disk.create_dir();
  } catch (const CacheFileError& error) {
    warn_cache_failure(error.what(), "compiling without it", false);
    return std::nullopt;
  }
  if (const int error = disk.write_access(); error != 0) {
    // Shared, read-only caches (an installed set of kernels) serve what they hold.
    warn_cache_failure(
        fmt::format("kernel cache: cannot write '{}' ({})", dir.string(), std::strerror(error)),
        "using it read-only", false);
    return DiskCache(dir, true);
  }
  return disk;
}

}  // namespace

std::string cache_key(std::string_view kind, std::string_view canonical_text) {
  // What does not change within a process is formatted once (this runs on every compile,
  // memory hits included).
  static const std::string build_context = fmt::format(
      "nvrtc={}\nattnjit={}\ntemplates={}", nvrtc_version(), ATTNJIT_VERSION, templates::hash());
  const std::string material = fmt::format("{}\n{}\n{}\noptions={}", kind, canonical_text,
                                           build_context, fmt::join(nvrtc_options(), " "));
  const XXH128_hash_t hash = XXH3_128bits(material.data(), material.size());
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

std::string entry_mismatch(const CacheEntry& entry, std::string_view canonical_text,
                           const std::vector<KernelSource>& sources, Arch arch) {
  if (entry.spec_text != canonical_text) return "it was built for another spec";
  if (entry.kernels.size() != sources.size()) {
    return fmt::format("it holds {} kernels, the plan has {}", entry.kernels.size(),
                       sources.size());
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const CompiledKernel& stored = entry.kernels[i];
    const KernelSource& planned = sources[i];
    if (stored.role != planned.role || stored.name != planned.name) {
      return fmt::format("its kernel {} is '{}' ({}), the plan's is '{}' ({})", i, stored.name,
                         stored.role, planned.name, planned.role);
    }
    if (stored.threads != planned.threads ||
        stored.dynamic_smem_bytes != planned.dynamic_smem_bytes) {
      return fmt::format(
          "kernel '{}' has {} threads and {} B of dynamic shared memory, the plan {} and {} B",
          stored.name, stored.threads, stored.dynamic_smem_bytes, planned.threads,
          planned.dynamic_smem_bytes);
    }
    const std::optional<int> sm = cubin_sm_version(stored.cubin);
    if (!sm) return fmt::format("kernel '{}' holds no CUDA ELF cubin", stored.name);
    if (*sm != sm_version(arch)) {
      return fmt::format("kernel '{}' holds a cubin for sm_{}, the spec targets {}", stored.name,
                         *sm, name_of(arch));
    }
  }
  return {};
}

CacheEntry load_or_build(const std::string& key, const std::string& canonical_text, bool use_disk,
                         jit::CacheLevel& level, const std::vector<KernelSource>& sources,
                         Arch arch) {
  auto build = [&] {
    CacheEntry entry;
    entry.key = key;
    entry.spec_text = canonical_text;
    entry.kernels = compile_sources(sources, arch);
    level = jit::CacheLevel::miss;
    return entry;
  };
  const jit::DiskCacheMode mode = use_disk ? jit::disk_cache_mode() : jit::DiskCacheMode::off;
  if (mode == jit::DiskCacheMode::off) return build();
  const std::optional<DiskCache> disk = open_disk_cache(mode == jit::DiskCacheMode::readonly);
  if (!disk) return build();
  // Each step that fails on the cache's files (a CacheFileError) is warned about and skipped:
  // the disk cache may make a compile faster, never make it fail.
  std::optional<FileLock> lock;
  if (!disk->read_only()) {
    try {
      lock.emplace(disk->lock(key));
    } catch (const CacheFileError& error) {
      warn_cache_failure(error.what(), "going on without the lock", false);
    }
  }
  std::optional<CacheEntry> entry;
  try {
    entry = disk->load(key);
  } catch (const CacheFileError& error) {
    warn_cache_failure(error.what(), "compiling the kernels instead", disk->read_only());
  }
  if (entry) {
    const std::string mismatch = entry_mismatch(*entry, canonical_text, sources, arch);
    if (mismatch.empty()) {
      level = jit::CacheLevel::disk;
      ++g_disk_hits;
      return std::move(*entry);
    }
    fmt::print(stderr,
               "attnjit: cache entry {}/{}.kernel does not match its plan ({}); rebuilding\n",
               disk->dir().string(), key, mismatch);
    std::fflush(stderr);
  }
  CacheEntry built = build();
  if (!disk->read_only()) {
    try {
      disk->store(built);
    } catch (const CacheFileError& error) {
      warn_cache_failure(error.what(), "the kernels are kept in memory only", false);
    }
  }
  return built;
}

jit::CompileInfo compile_info(const CacheEntry& entry, jit::CacheLevel level, double milliseconds) {
  jit::CompileInfo info;
  info.key = entry.key;
  info.spec_text = entry.spec_text;
  info.cache = level;
  info.compile_ms = milliseconds;
  for (const CompiledKernel& kernel : entry.kernels) {
    jit::KernelReport report;
    report.name = kernel.name;
    report.role = kernel.role;
    report.registers = kernel.report.registers;
    report.spill_bytes = kernel.report.spill_bytes();
    report.stack_bytes = kernel.report.stack_bytes;
    report.static_smem_bytes = kernel.report.static_smem_bytes;
    report.dynamic_smem_bytes = kernel.dynamic_smem_bytes;
    report.threads = kernel.threads;
    info.kernels.push_back(report);
  }
  return info;
}

void reset_disk_cache_mode() {
  g_disk_cache_mode.store(-1);
}

std::uint64_t disk_hits() {
  return g_disk_hits.load();
}

std::uint64_t builds() {
  return g_builds.load();
}

}  // namespace attnjit::runtime

namespace attnjit::jit {

std::string_view name_of(DiskCacheMode mode) {
  switch (mode) {
    case DiskCacheMode::on:
      return "on";
    case DiskCacheMode::readonly:
      return "readonly";
    case DiskCacheMode::off:
      return "off";
  }
  throw InternalError("unknown DiskCacheMode");
}

DiskCacheMode parse_disk_cache_mode(std::string_view text, std::string_view field) {
  for (const DiskCacheMode mode :
       {DiskCacheMode::on, DiskCacheMode::readonly, DiskCacheMode::off}) {
    if (text == name_of(mode)) return mode;
  }
  throw_field_error(field, text, "on (read and write), readonly, off");
}

DiskCacheMode disk_cache_mode() {
  if (const int set = runtime::g_disk_cache_mode.load(); set >= 0) {
    return static_cast<DiskCacheMode>(set);
  }
  const char* text = std::getenv("ATTNJIT_DISK_CACHE");
  if (text == nullptr || *text == '\0') return DiskCacheMode::on;
  return parse_disk_cache_mode(text, "ATTNJIT_DISK_CACHE");
}

void set_disk_cache_mode(DiskCacheMode mode) {
  runtime::g_disk_cache_mode.store(static_cast<int>(mode));
}

}  // namespace attnjit::jit
