// The cache key of a kernel set, its NVRTC build and the disk-cache protocol around it.
#include "runtime/kernel_build.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <future>

#include "embedded.hpp"
#include "runtime/debug_mode.hpp"
#include "runtime/nvrtc.hpp"

namespace attnjit::runtime {
namespace {

std::atomic<std::uint64_t> g_disk_hits{0};
std::atomic<std::uint64_t> g_builds{0};

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

// Compiles every kernel concurrently (one NVRTC program per thread).
std::vector<CompiledKernel> compile_sources(const std::vector<KernelSource>& sources, Arch arch) {
  const std::vector<NvrtcHeader> headers = template_headers();
  const std::string arch_name(name_of(arch));
  const std::vector<std::string> options = nvrtc_options();
  std::vector<std::future<NvrtcOutput>> outputs;
  for (const KernelSource& source : sources) {
    outputs.push_back(std::async(std::launch::async, [&] {
      return nvrtc_compile(source.source, source.name + ".cu", headers, arch_name, options,
                           source.name);
    }));
  }
  std::vector<CompiledKernel> kernels;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    NvrtcOutput output = outputs[i].get();
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

CacheEntry load_or_build(const std::string& key, const std::string& canonical_text, bool use_disk,
                         jit::CacheLevel& level,
                         const std::function<std::vector<KernelSource>()>& sources, Arch arch) {
  auto build = [&] {
    CacheEntry entry;
    entry.key = key;
    entry.spec_text = canonical_text;
    entry.kernels = compile_sources(sources(), arch);
    return entry;
  };
  if (!use_disk) {
    level = jit::CacheLevel::miss;
    return build();
  }
  const DiskCache disk(DiskCache::default_dir());
  const FileLock lock = disk.lock(key);
  if (std::optional<CacheEntry> entry = disk.load(key)) {
    level = jit::CacheLevel::disk;
    ++g_disk_hits;
    return std::move(*entry);
  }
  level = jit::CacheLevel::miss;
  CacheEntry entry = build();
  disk.store(entry);
  return entry;
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

std::uint64_t disk_hits() {
  return g_disk_hits.load();
}

std::uint64_t builds() {
  return g_builds.load();
}

}  // namespace attnjit::runtime
