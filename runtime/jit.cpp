// jit::compile: resolve the target, derive the cache key from the canonical spec, and get
// the kernel set from memory, from disk, or by lowering, generating and NVRTC-compiling it.
#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <future>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "embedded.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/memory_cache.hpp"
#include "runtime/nvrtc.hpp"

namespace attnjit::jit {
namespace {

using detail::KernelSet;

std::atomic<std::uint64_t> g_disk_hits{0};
std::atomic<std::uint64_t> g_compiles{0};

runtime::MemoryCache<KernelSet>& memory_cache() {
  static runtime::MemoryCache<KernelSet> cache;
  return cache;
}

// Options handed to NVRTC besides the arch; they enter the cache key.
const std::vector<std::string>& nvrtc_options() {
  static const std::vector<std::string> options{"-default-device"};
  return options;
}

}  // namespace

Arch current_device_arch() {
  static const Arch arch = [] {
    const runtime::DeviceInfo device = runtime::current_device();
    const int cc = device.major * 10 + device.minor;
    if (cc == 80) return Arch::sm_80;
    if (cc == 86 || cc == 87) return Arch::sm_86;
    if (cc == 89) return Arch::sm_89;
    if (cc == 90) return Arch::sm_90;
    throw DeviceError(fmt::format(
        "device {} has compute capability {}.{}; this version of attnjit supports sm_80, "
        "sm_86, sm_89 and sm_90 (pass an explicit target to compile for one of them)",
        device.name, device.major, device.minor));
  }();
  return arch;
}

namespace {

AttentionSpec resolve_target(const AttentionSpec& spec) {
  AttentionSpec resolved = spec;
  if (resolved.target == Arch::auto_detect) resolved.target = current_device_arch();
  return resolved;
}

// The key: a hash of the canonical spec text and of everything else that changes the
// binary. One derivation for every kernel family (see design.md, the signature rule).
std::string cache_key(std::string_view kind, std::string_view spec_text) {
  // What does not change within a process is formatted once (this runs on every compile(),
  // memory hits included).
  static const std::string build_context =
      fmt::format("nvrtc={}\nattnjit={}\ntemplates={}\noptions={}", runtime::nvrtc_version(),
                  ATTNJIT_VERSION, templates::hash(), fmt::join(nvrtc_options(), " "));
  const std::string material = fmt::format("{}\n{}\n{}", kind, spec_text, build_context);
  const XXH128_hash_t hash = XXH3_128bits(material.data(), material.size());
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

std::vector<runtime::NvrtcHeader> template_headers() {
  std::vector<runtime::NvrtcHeader> headers;
  for (const templates::EmbeddedFile& file : templates::all()) {
    headers.push_back({file.name, file.source});
  }
  return headers;
}

struct SourceToCompile {
  std::string role;
  std::string name;
  std::string source;
  int threads = 0;
  int dynamic_smem_bytes = 0;
};

// Compiles every kernel concurrently (one NVRTC program per thread).
std::vector<runtime::CompiledKernel> compile_sources(const std::vector<SourceToCompile>& sources,
                                                     Arch arch) {
  const std::vector<runtime::NvrtcHeader> headers = template_headers();
  const std::string arch_name(name_of(arch));
  std::vector<std::future<runtime::NvrtcOutput>> outputs;
  for (const SourceToCompile& source : sources) {
    outputs.push_back(std::async(std::launch::async, [&] {
      return runtime::nvrtc_compile(source.source, source.name + ".cu", headers, arch_name,
                                    nvrtc_options(), source.name);
    }));
  }
  std::vector<runtime::CompiledKernel> kernels;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    runtime::NvrtcOutput output = outputs[i].get();
    runtime::CompiledKernel kernel;
    kernel.role = sources[i].role;
    kernel.name = sources[i].name;
    kernel.cubin = std::move(output.cubin);
    kernel.ptx = std::move(output.ptx);
    kernel.report = output.report;
    kernel.threads = sources[i].threads;
    kernel.dynamic_smem_bytes = sources[i].dynamic_smem_bytes;
    kernels.push_back(std::move(kernel));
  }
  ++g_compiles;
  return kernels;
}

std::vector<SourceToCompile> plan_sources(const Lowering& ir) {
  std::vector<SourceToCompile> sources;
  for (const KernelDesc& kernel : ir.plan->kernels) {
    sources.push_back({std::string(name_of(kernel.role)), kernel.name, emit_kernel(ir, kernel),
                       kernel.threads, kernel.dynamic_smem_bytes});
  }
  return sources;
}

// Memory cache miss: take the key's file lock, then the disk entry or a fresh build.
runtime::CacheEntry load_or_build(const std::string& key, const std::string& spec_text,
                                  bool use_disk, CacheLevel& level,
                                  const std::function<std::vector<SourceToCompile>()>& sources,
                                  Arch arch) {
  auto build = [&] {
    runtime::CacheEntry entry;
    entry.key = key;
    entry.spec_text = spec_text;
    entry.kernels = compile_sources(sources(), arch);
    return entry;
  };
  if (!use_disk) {
    level = CacheLevel::miss;
    return build();
  }
  const runtime::DiskCache disk(runtime::DiskCache::default_dir());
  const runtime::FileLock lock = disk.lock(key);
  if (std::optional<runtime::CacheEntry> entry = disk.load(key)) {
    level = CacheLevel::disk;
    ++g_disk_hits;
    return std::move(*entry);
  }
  level = CacheLevel::miss;
  runtime::CacheEntry entry = build();
  disk.store(entry);
  return entry;
}

CompileInfo make_info(const KernelSet& set, CacheLevel level, double milliseconds) {
  CompileInfo info;
  info.key = set.entry.key;
  info.spec_text = set.entry.spec_text;
  info.cache = level;
  info.compile_ms = milliseconds;
  for (const runtime::CompiledKernel& kernel : set.entry.kernels) {
    KernelReport report;
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

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

std::string_view name_of(CacheLevel level) {
  switch (level) {
    case CacheLevel::memory:
      return "memory";
    case CacheLevel::disk:
      return "disk";
    case CacheLevel::miss:
      return "miss";
  }
  throw InternalError("unknown CacheLevel");
}

const AttentionSpec& Kernel::spec() const {
  return set_->spec;
}

std::vector<std::string> Kernel::ptx() const {
  std::vector<std::string> out;
  for (const runtime::CompiledKernel& kernel : set_->entry.kernels) out.push_back(kernel.ptx);
  return out;
}

namespace detail {

Kernel compile_set(SetKind kind, const AttentionSpec& spec, bool use_disk_cache) {
  const auto start = std::chrono::steady_clock::now();
  // Validate first: a bad spec is the user's error even where no device could resolve it.
  const AttentionSpec canonical = resolve_target(canonical_spec(spec));
  const std::string spec_text = to_string(canonical);
  const std::string key =
      cache_key(kind == SetKind::attention ? "attention" : "reference", spec_text);
  CacheLevel level = CacheLevel::memory;
  auto result = memory_cache().get_or_build(key, [&] {
    auto set = std::make_shared<KernelSet>();
    set->spec = canonical;
    std::function<std::vector<SourceToCompile>()> sources;
    if (kind == SetKind::attention) {
      set->ir = lower(canonical);
      sources = [&] { return plan_sources(*set->ir); };
    } else {
      sources = [&] {
        const ReferenceKernel reference = emit_reference_kernel(canonical);
        return std::vector<SourceToCompile>{
            {"reference", reference.name, reference.source, reference.threads, 0}};
      };
    }
    set->entry = load_or_build(key, spec_text, use_disk_cache, level, sources, canonical.target);
    return std::shared_ptr<const KernelSet>(std::move(set));
  });
  Kernel kernel;
  kernel.set_ = result.value;
  kernel.info_ =
      make_info(*result.value, result.built ? level : CacheLevel::memory, elapsed_ms(start));
  return kernel;
}

}  // namespace detail

Kernel compile(const AttentionSpec& spec, const CompileOptions& options) {
  return detail::compile_set(detail::SetKind::attention, spec, !options.no_disk_cache);
}

Kernel compile_reference(const AttentionSpec& spec) {
  return detail::compile_set(detail::SetKind::reference, spec, true);
}

CacheStats cache_stats() {
  const auto memory = memory_cache().stats();
  CacheStats stats;
  stats.memory_hits = memory.hits;
  stats.disk_hits = g_disk_hits.load();
  stats.compiles = g_compiles.load();
  stats.memory_entries = memory_cache().size();
  return stats;
}

std::string cache_dir() {
  return runtime::DiskCache::default_dir().string();
}

std::vector<CacheListing> list_disk_cache() {
  std::vector<CacheListing> out;
  for (const runtime::EntrySummary& entry :
       runtime::DiskCache(runtime::DiskCache::default_dir()).list()) {
    out.push_back({entry.key, entry.spec_text, entry.bytes});
  }
  return out;
}

std::size_t clear_disk_cache() {
  return runtime::DiskCache(runtime::DiskCache::default_dir()).clear();
}

void clear_memory_cache() {
  memory_cache().clear();
}

}  // namespace attnjit::jit
