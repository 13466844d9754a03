// Building compiled kernel sets through the caches, for every kind of kernel attnjit compiles
// (attention plans, reference kernels, mask utility kernels): the one cache-key derivation,
// NVRTC compilation of a set's sources, and the disk-cache protocol (lock, load, else build and
// store).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/jit.hpp"
#include "attnjit/spec.hpp"
#include "runtime/jit/disk_cache.hpp"

namespace attnjit::runtime {

/// One kernel of a set to compile: its place in the set, entry point, source and launch shape.
struct KernelSource {
  std::string role;
  std::string name;
  std::string source;
  int threads = 0;
  int dynamic_smem_bytes = 0;
};

/// The cache key of a kernel set: a hash of `kind` (what the set computes, e.g. "attention"),
/// `canonical_text` (the one canonical serialization of what is compiled: a canonical spec,
/// or a mask kernel's text, its target included) and the build context (NVRTC version,
/// attnjit version, template hash, NVRTC options). The single key derivation of every kernel
/// family (design.md, the signature rule). 32 lowercase hex digits.
std::string cache_key(std::string_view kind, std::string_view canonical_text);

/// The entry of `key` (a kernel set for `arch` whose canonical text is `canonical_text`): with
/// `use_disk` and the disk cache mode (jit::disk_cache_mode()) not off, from the disk cache
/// (under the key's file lock unless the cache is read-only) when its entry matches
/// `sources` and `arch`, else built by compiling `sources` (one NVRTC program per kernel, on
/// as many threads as there are cores, the attention kernels first; the entry keeps the
/// plan's order) and stored unless the cache is read-only; without, always built. A directory
/// this process cannot write is used read-only. The disk cache never fails the call: a step
/// that fails on its files (no directory, a lock, an entry or the directory that cannot be
/// read or written) is skipped, with one warning per process (warn_cache_failure). Sets
/// `level` to disk or miss.
CacheEntry load_or_build(const std::string& key, const std::string& canonical_text, bool use_disk,
                         jit::CacheLevel& level, const std::vector<KernelSource>& sources,
                         Arch arch);

/// Why a loaded `entry` cannot serve the set `sources` of `canonical_text` for `arch` (another
/// spec text, kernel count, role, name, block size or dynamic shared memory, or a cubin that
/// is not a CUDA ELF file for the arch's SM version), or "" when it can.
std::string entry_mismatch(const CacheEntry& entry, std::string_view canonical_text,
                           const std::vector<KernelSource>& sources, Arch arch);

/// Prints "attnjit: <what>; <consequence> (set ATTNJIT_DISK_CACHE=off ...)" on stderr, the
/// way out fitting a `read_only` cache, unless the process has warned already. `what` is a
/// CacheFileError's message ("kernel cache: ...").
void warn_cache_failure(std::string_view what, std::string_view consequence, bool read_only);

/// Lets the next warn_cache_failure print again (for tests).
void reset_cache_warning();

/// What a compile call reports about the set in `entry`, found at `level` in `milliseconds`.
jit::CompileInfo compile_info(const CacheEntry& entry, jit::CacheLevel level, double milliseconds);

/// Forgets jit::set_disk_cache_mode's value: $ATTNJIT_DISK_CACHE decides again (for tests).
void reset_disk_cache_mode();

/// Disk-cache hits and NVRTC builds of kernel sets since the process started.
std::uint64_t disk_hits();
std::uint64_t builds();

}  // namespace attnjit::runtime
