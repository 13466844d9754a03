// The user-facing entry point: jit::compile(spec) returns a Kernel whose forward() runs
// the generated kernels on device tensors. Kernels are cached by signature in memory and
// on disk (ATTNJIT_CACHE_DIR, default ~/.cache/attnjit).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit::jit {

/// A CUDA stream handle (CUstream / cudaStream_t); nullptr is the legacy default stream.
using Stream = void*;

/// What ptxas reported for one compiled kernel.
struct KernelReport {
  std::string name;     ///< the kernel's entry point
  std::string role;     ///< its place in the plan, e.g. "flashmask_minmax", "forward"
  int registers = 0;    ///< registers per thread
  int spill_bytes = 0;  ///< spill stores + spill loads
  int stack_bytes = 0;  ///< stack frame
  int static_smem_bytes = 0;
  int dynamic_smem_bytes = 0;
  int threads = 0;  ///< threads per block
};

/// Where a compile() call found its kernels.
enum class CacheLevel { memory, disk, miss };
std::string_view name_of(CacheLevel level);

/// What one compile() call did.
struct CompileInfo {
  std::string key;        ///< cache key of the spec's kernel set
  std::string spec_text;  ///< canonical spec with the target resolved
  CacheLevel cache = CacheLevel::miss;
  double compile_ms = 0.0;  ///< wall time of this call (lowering + lookup + NVRTC)
  std::vector<KernelReport> kernels;
};

struct CompileOptions {
  /// Skip the disk cache (the memory cache is still used).
  bool no_disk_cache = false;
};

class Kernel;

namespace detail {
struct KernelSet;
/// The compiled set behind a kernel (for attnjit's own tools).
const KernelSet& set_of(const Kernel& kernel);
/// What a kernel set computes: the planned attention kernels or the reference kernel.
enum class SetKind { attention, reference };
Kernel compile_set(SetKind kind, const AttentionSpec& spec, bool use_disk_cache);
}  // namespace detail

/// A compiled attention: immutable, cheap to copy, safe to share between threads.
class Kernel {
 public:
  const CompileInfo& info() const { return info_; }
  const AttentionSpec& spec() const;

  /// Runs the forward pass on `stream`. Checks every tensor against the spec (dtype, rank,
  /// shapes, strides, alignment) and throws Error naming the first bad field. Asynchronous:
  /// returns after enqueueing the kernels.
  void forward(const ForwardArgs& args, Stream stream = nullptr) const;

  /// Runs the backward pass on `stream` (the spec must have direction=backward): writes d_q,
  /// d_k and d_v. Checks every tensor like forward() and throws Error naming the first bad
  /// field. Asynchronous; takes stream-ordered scratch memory for the fp32 dQ accumulator,
  /// the row sums D = rowsum(dO * O) and, with GQA, per-query-head dK/dV partials, unless
  /// args.workspace provides the memory.
  void backward(const BackwardArgs& args, Stream stream = nullptr) const;

  /// Bytes of scratch memory forward(args) / backward(args) takes for the shapes of args' q, k
  /// and startend_row_indices (what args.workspace must hold when given; data pointers may be
  /// null here). Reads ATTNJIT_PREDICATE_BITS_MIB, which sizes a predicate's element bits.
  std::size_t workspace_size(const ForwardArgs& args) const;
  std::size_t workspace_size(const BackwardArgs& args) const;

  /// PTX of each kernel, in plan order.
  std::vector<std::string> ptx() const;

  /// The values of the predicate literals that the compiled spec's text held
  /// (MaskSpec::scalars, e.g. {256} for `mask=predicate(q-k<256)`): the scalars of a forward()
  /// or backward() whose args.predicate.scalars is empty. Empty when the spec had none.
  const std::vector<std::int32_t>& predicate_scalars() const { return predicate_scalars_; }

 private:
  friend Kernel detail::compile_set(detail::SetKind, const AttentionSpec&, bool);
  friend const detail::KernelSet& detail::set_of(const Kernel&);
  std::shared_ptr<const detail::KernelSet> set_;
  CompileInfo info_;
  std::vector<std::int32_t> predicate_scalars_;
};

/// Lowers, generates, compiles (or finds in the cache) and returns the kernels of `spec`.
/// A spec whose target is auto_detect is compiled for the current device (and throws
/// DeviceError when there is none: see device_available). Throws Error for an invalid spec.
/// Specs that differ only in the values of predicate literals (MaskSpec::scalars) share one
/// compiled kernel set; each Kernel keeps its own values (Kernel::predicate_scalars).
Kernel compile(const AttentionSpec& spec, const CompileOptions& options = {});

/// A plain fp32 attention (one CTA per query row, the mask evaluated element by element)
/// computing the same function as compile(spec).forward, for checking results. Always writes
/// LSE, so ForwardArgs::lse is required. Slow; needs (head_dim + Sk) * 4 bytes of shared
/// memory per CTA.
Kernel compile_reference(const AttentionSpec& spec);

/// The arch of the current CUDA device (what target=auto resolves to). Throws DeviceError
/// when there is no driver or device, or the device is not supported.
Arch current_device_arch();

/// Whether target=auto can compile here and kernels can run: a CUDA driver and a supported
/// current device (current_device_arch() succeeds). False where it would throw DeviceError;
/// a bad ATTNJIT_DEVICE value still throws Error. A program that should also work on a machine
/// without a GPU compiles for an explicit target when this is false, and launches nothing.
bool device_available();

/// Counters of the kernel caches since the process started.
struct CacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;  ///< kernel sets built with NVRTC
  std::size_t memory_entries = 0;
};
CacheStats cache_stats();

/// One entry of the disk cache.
struct CacheListing {
  std::string key;
  std::string spec_text;  ///< "<corrupt>" or "<unreadable>" for an entry that cannot be used
  std::uintmax_t bytes = 0;
  std::string problem;  ///< for "<unreadable>": its path and why it cannot be read
};

/// What clear_disk_cache did.
struct CacheClearReport {
  std::size_t removed = 0;            ///< entries removed
  std::vector<std::string> problems;  ///< one message (path and reason) per file left
};

/// The disk cache directory: $ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else
/// ~/.cache/attnjit. Throws DeviceError when none of these is set.
std::string cache_dir();
/// Every disk entry, sorted by key. Throws DeviceError when the directory cannot be read.
std::vector<CacheListing> list_disk_cache();
/// Removes every complete disk entry (and the lock and temp files of keys no process is
/// writing), going on past files it cannot remove. Throws Error unless disk_cache_mode() is
/// on, DeviceError when the directory cannot be read.
CacheClearReport clear_disk_cache();

/// How compiles use the disk cache.
enum class DiskCacheMode {
  on,        ///< read and write; a directory this process cannot write is used read-only
  readonly,  ///< load the entries that exist; never write, lock or delete anything
  off,       ///< never touch the disk cache (the memory cache is still used)
};
std::string_view name_of(DiskCacheMode mode);
/// The mode named `text` (on, readonly, off); Error naming `field` otherwise.
DiskCacheMode parse_disk_cache_mode(std::string_view text, std::string_view field);
/// The mode of compiles: the last set_disk_cache_mode() of this process, else
/// $ATTNJIT_DISK_CACHE (on, readonly or off; unset or empty: on). Throws Error naming the
/// variable for another value.
DiskCacheMode disk_cache_mode();
/// Sets the mode for this process, over $ATTNJIT_DISK_CACHE.
void set_disk_cache_mode(DiskCacheMode mode);
/// Forgets every kernel held in memory (kernels already handed out stay valid).
void clear_memory_cache();

}  // namespace attnjit::jit
