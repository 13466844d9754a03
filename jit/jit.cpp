// jit::compile, the orchestrator above the engine: resolve the target, derive the cache key
// from the canonical spec, and get the kernel set from memory, from disk, or by lowering
// (compiler/), generating and NVRTC-compiling it (runtime/); the Kernel keeps the values of the
// spec's predicate literals, which the canonical spec leaves out.
#include <fmt/format.h>

#include <chrono>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "runtime/jit/kernel_build.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "runtime/masks/mask_kernels.hpp"
#include "runtime/jit/memory_cache.hpp"

namespace attnjit::jit {
namespace {

using detail::KernelSet;

runtime::MemoryCache<KernelSet>& memory_cache() {
  static runtime::MemoryCache<KernelSet> cache;
  return cache;
}

AttentionSpec resolve_target(const AttentionSpec& spec) {
  AttentionSpec resolved = spec;
  if (resolved.target == Arch::auto_detect) resolved.target = current_device_arch();
  return resolved;
}

std::vector<runtime::KernelSource> plan_sources(const Lowering& ir) {
  std::vector<runtime::KernelSource> sources;
  for (const KernelDesc& kernel : ir.plan->kernels) {
    sources.push_back({std::string(name_of(kernel.role)), kernel.name, emit_kernel(ir, kernel),
                       kernel.threads, kernel.dynamic_smem_bytes});
  }
  return sources;
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

const KernelSet& set_of(const Kernel& kernel) {
  return *kernel.set_;
}

Kernel compile_set(SetKind kind, const AttentionSpec& spec, bool use_disk_cache) {
  const auto start = std::chrono::steady_clock::now();
  // Validate first: a bad spec is the user's error even where no device could resolve it.
  const AttentionSpec canonical = resolve_target(canonical_spec(spec));
  if (kind == SetKind::reference && canonical.varlen != VarlenMode::off) {
    throw_field_error("varlen", name_of(canonical.varlen),
                      "false: the reference kernel takes padded batches (check a packed batch "
                      "sequence by sequence)");
  }
  if (kind == SetKind::reference && canonical.kv_cache != KvCache::none) {
    throw_field_error("kv_cache", name_of(canonical.kv_cache),
                      "none: the reference kernel takes padded batches (check a cache through "
                      "the keys of each sequence, gathered)");
  }
  const std::string spec_text = to_string(canonical);
  const std::string key =
      runtime::cache_key(kind == SetKind::attention ? "attention" : "reference", spec_text);
  CacheLevel level = CacheLevel::memory;
  auto result = memory_cache().get_or_build(key, [&] {
    auto set = std::make_shared<KernelSet>();
    set->spec = canonical;
    std::vector<runtime::KernelSource> generated;
    if (kind == SetKind::attention) {
      const Lowering ir = lower(canonical);
      generated = plan_sources(ir);
      set->plan = ir.plan;
      set->predicate = ir.plan->predicate;
    } else {
      const ReferenceKernel reference = emit_reference_kernel(canonical);
      generated.push_back({"reference", reference.name, reference.source, reference.threads, 0});
      set->predicate = reference.predicate;
    }
    // On disk the key covers the generated code too: another attnjit build whose passes pick
    // other tiles for the same spec text must not load the kernels of the old choice (the
    // launch follows the new plan). In memory the spec text suffices: one process, one build.
    std::string code_text = spec_text;
    for (const runtime::KernelSource& source : generated) {
      code_text += '\n';
      code_text += source.source;
    }
    const std::string disk_key =
        runtime::cache_key(kind == SetKind::attention ? "attention" : "reference", code_text);
    set->entry = runtime::load_or_build(disk_key, spec_text, use_disk_cache, level, generated,
                                        canonical.target);
    return std::shared_ptr<const KernelSet>(std::move(set));
  });
  const std::size_t slots = static_cast<std::size_t>(result.value->predicate.scalar_count);
  if (!spec.mask.scalars.empty() && spec.mask.scalars.size() != slots) {
    throw_field_error("mask.scalars", fmt::format("{} values", spec.mask.scalars.size()),
                      fmt::format("none, or one per scalar slot of mask={} ({})",
                                  to_string(canonical.mask), slots));
  }
  Kernel kernel;
  kernel.set_ = result.value;
  kernel.info_ = runtime::compile_info(
      result.value->entry, result.built ? level : CacheLevel::memory, elapsed_ms(start));
  kernel.predicate_scalars_ = spec.mask.scalars;
  return kernel;
}

}  // namespace detail

Kernel compile(const AttentionSpec& spec, const CompileOptions& options) {
  return detail::compile_set(detail::SetKind::attention, spec, !options.no_disk_cache);
}

Kernel compile_reference(const AttentionSpec& spec) {
  return detail::compile_set(detail::SetKind::reference, spec, true);
}

bool device_available() {
  try {
    current_device_arch();
    return true;
  } catch (const DeviceError&) {
    return false;
  }
}

CacheStats cache_stats() {
  const auto memory = memory_cache().stats();
  CacheStats stats;
  stats.memory_hits = memory.hits;
  stats.disk_hits = runtime::disk_hits();
  stats.compiles = runtime::builds();
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
    out.push_back({entry.key, entry.spec_text, entry.bytes, entry.problem});
  }
  return out;
}

CacheClearReport clear_disk_cache() {
  if (const DiskCacheMode mode = disk_cache_mode(); mode != DiskCacheMode::on) {
    throw Error(fmt::format(
        "disk cache mode: got '{}' (ATTNJIT_DISK_CACHE or set_disk_cache_mode), which never "
        "deletes entries; accepted: on to clear the disk cache",
        name_of(mode)));
  }
  runtime::ClearResult cleared = runtime::DiskCache(runtime::DiskCache::default_dir()).clear();
  return {cleared.removed, std::move(cleared.problems)};
}

void clear_memory_cache() {
  memory_cache().clear();
  runtime::clear_mask_kernel_memory_cache();
}

}  // namespace attnjit::jit
