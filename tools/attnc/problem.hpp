// The attention problem that `attnc run` and `attnc bench` generate: the shape and mask
// options they share, random activations on the device and FlashMask interval vectors.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnjit/jit.hpp"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "dsl/intervals.hpp"
#include "runtime/jit/driver.hpp"

namespace attnc {

/// Shape, window and mask-data options of a generated problem. A spec with varlen=true takes a
/// packed batch (--seqlens, --seqlens-k, --seqused-k) instead of --batch, --seqlen-q and
/// --seqlen-k: resolve_problem fills lengths_q, lengths_k (and used_k) from them and makes the
/// problem one batch row of the totals, batch = 1, seqlen_q = total_q, seqlen_k = total_k.
/// A spec with kv_cache=contiguous|paged takes a KV cache (--kv-cache-len, --kv-capacity,
/// --page-size, --num-splits) instead of --seqlen-k: resolve_problem fills cache_lengths, makes
/// seqlen_k the capacity, seqlen_q the new tokens per sequence (default 1), page_size the
/// paged cache's (default 16) and num_splits 0 (automatic) where they were not given.
struct ProblemOptions {
  int batch = 0, heads = 1, kv_heads = 0, mask_heads = 1, seqlen_q = 0, seqlen_k = 0;
  int window_left = -1, window_right = 0;
  std::string mask_data = "documents";
  std::uint64_t seed = 1;
  std::string seqlens, seqlens_k, seqused_k;  ///< the packed batch's options, as given
  std::vector<int> lengths_q, lengths_k;      ///< each sequence's queries and keys
  std::vector<int> used_k;                    ///< --seqused-k: each sequence's used keys
  std::string kv_cache_len;                   ///< --kv-cache-len, as given
  std::optional<int> kv_capacity, page_size, num_splits;  ///< as given, then resolved
  attnjit::KvCache kv_cache = attnjit::KvCache::none;     ///< the spec's
  std::vector<int> cache_lengths;                         ///< kv_cache: each sequence's cached keys

  bool packed() const { return !lengths_q.empty(); }
  bool cached() const { return kv_cache != attnjit::KvCache::none; }
  bool paged() const { return kv_cache == attnjit::KvCache::paged; }
  /// kv_cache=paged: the pages of one sequence's capacity (seqlen_k), rounded up.
  int pages_per_sequence() const { return (seqlen_k + *page_size - 1) / *page_size; }
  /// A KV cache's keys per sequence: seqlen_k, or its whole pages when paged (FlashMask
  /// vectors over the cache have a row per key of it).
  int cache_capacity() const { return paged() ? pages_per_sequence() * *page_size : seqlen_k; }
};

/// The share of (batch, head, query, key) elements that `pairs` visible pairs are; for a packed
/// batch, of the (head, query, key) elements within its sequences; for a KV cache, of those
/// over each sequence's cached keys.
double pair_density(const ProblemOptions& o, std::int64_t pairs);

/// The FLOPs of a forward over `pairs` visible (query, key) pairs (of every batch and head):
/// 2 x (head_dim_qk + head_dim_v) per pair, Q K^T and P V.
double forward_flops(const attnjit::AttentionSpec& spec, std::int64_t pairs);

/// Prints the lines `attnc run` and `attnc bench` open with: the device, the spec, the problem
/// with its density, and each kernel's registers, spill bytes and shared memory.
void print_problem_header(const std::string& device, const attnjit::jit::CompileInfo& info,
                          const ProblemOptions& o, double density);

/// The JSON fields `attnc run` and `attnc bench` open with: the spec, the device and the
/// problem's sizes.
nlohmann::ordered_json problem_json(const std::string& device,
                                    const attnjit::jit::CompileInfo& info, const ProblemOptions& o);

/// Registers --batch, --heads, --kv-heads, --mask-heads, --seqlen-q, --seqlen-k, --seqlens,
/// --seqlens-k, --seqused-k, --kv-cache-len, --kv-capacity, --page-size, --num-splits,
/// --window-left, --window-right, --mask-data and --seed on `cmd`, writing into `o` (which must
/// outlive the parse).
void add_problem_options(CLI::App* cmd, ProblemOptions& o);

/// Fills the defaults (kv_heads = heads, seqlen_k = seqlen_q), reads the packed batch's options
/// for a spec with varlen (resolve_packed) and the KV cache's for a spec with kv_cache
/// (resolve_kv_cache), and throws attnjit::Error for options missing or given against the
/// spec's varlen and kv_cache keys and for head counts that do not fit together (kv_heads not
/// dividing heads, mask_heads neither 1 nor kv_heads). Needs no device.
void resolve_problem(ProblemOptions& o, const attnjit::AttentionSpec& spec);

/// The rows of k and v: batch x seqlen_k, a packed batch's total keys, or a paged cache's pool,
/// batch x pages_per_sequence pages of page_size keys.
std::int64_t key_rows(const ProblemOptions& o);

/// `count` normally distributed values of `dtype` (fp16 or bf16) in a new device buffer,
/// deterministic for `seed`. Values are drawn once into a small pool and copied from random
/// offsets of it in short runs, so filling gigabytes takes about as long as uploading them.
attnjit::runtime::DeviceBuffer random_tensor(std::size_t count, attnjit::DType dtype,
                                             std::uint64_t seed);

/// Sink logits (AttentionSpec::sinks) for `heads` query heads: fp32 values uniform in [-2, 3]
/// (the range of the scores of normal inputs) in a new device buffer, deterministic for `seed`.
attnjit::runtime::DeviceBuffer random_sinks(int heads, std::uint64_t seed);

/// The fp32 [heads] view of a buffer of random_sinks.
attnjit::TensorView sinks_view(const attnjit::runtime::DeviceBuffer& sinks, int heads);

/// FlashMask vectors of one sample of n queries and keys for the mask's (causal, columns)
/// layout, [1, heads, n, columns]: 3 (at most n) to 7 random documents (causal document,
/// document), or causal blockwise (causal, 2 columns), or global + sliding window (4 columns).
attnjit::dsl::IntervalVectors family_sample(const attnjit::MaskSpec& mask, int n,
                                            std::uint64_t seed, int heads);

/// FlashMask vectors for the mask's (causal, columns) layout, [batch, mask_heads, seqlen_k,
/// columns]: with --mask-data documents (and seqlen_q == seqlen_k), family_sample per sample;
/// with --mask-data random, arbitrary valid intervals. A packed batch's: packed_vectors.
attnjit::dsl::IntervalVectors make_vectors(const attnjit::MaskSpec& mask, const ProblemOptions& o);

/// Whose rows an activation holds: the queries' (q, o, d_o, d_q) or the keys' (k, v, d_k, d_v).
enum class Rows { query, key };

/// The output's element type: the inputs', bf16 for e4m3 inputs.
attnjit::DType output_dtype(attnjit::DType dtype);

/// A contiguous view of `buffer` holding `dtype` elements: [batch, seq, heads, dim], or
/// [total, heads, dim] for a packed batch (seq and total those of `rows`); a paged cache's keys
/// [pages, page_size, heads, dim].
attnjit::TensorView activation_view(const attnjit::runtime::DeviceBuffer& buffer,
                                    attnjit::DType dtype, const ProblemOptions& o, Rows rows,
                                    int heads, int dim);

/// A contiguous fp32 view of `buffer` for the LSE: [batch, heads, seqlen_q], or [heads, total_q]
/// for a packed batch.
attnjit::TensorView lse_view(const attnjit::runtime::DeviceBuffer& buffer, const ProblemOptions& o);

/// The vectors uploaded to a new device buffer.
attnjit::runtime::DeviceBuffer upload_vectors(const attnjit::dsl::IntervalVectors& vectors);

/// A contiguous int32 [batch, heads, seqlen_k, columns] view of uploaded `vectors`.
attnjit::TensorView vectors_view(const attnjit::runtime::DeviceBuffer& buffer,
                                 const attnjit::dsl::IntervalVectors& vectors);

}  // namespace attnc
