// The checks of a decode launch's cache arguments (KvCacheArgs) and what they set in Shapes
// and FwdParams.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/ir/lowering.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/launch_support.hpp"
#include "runtime/masks/mask_kernels.hpp"

namespace attnjit::jit::detail {
namespace {

// k_new and v_new: both or neither, [B, S_new, Hkv, D] and [.., Dv] of the cache's type, with
// the cache's lengths to append at.
void check_appended(const AttentionSpec& spec, const ForwardArgs& a, Shapes& s) {
  const KvCacheArgs& c = a.kv_cache;
  if (c.k_new.empty() && c.v_new.empty()) return;
  if (c.k_new.empty() != c.v_new.empty()) {
    throw Error(
        fmt::format("kv_cache.{}: missing; accepted: k_new and v_new together (the keys "
                    "and values to append), or neither",
                    c.k_new.empty() ? "k_new" : "v_new"));
  }
  if (c.cache_seqlens.empty()) {
    throw Error(
        "kv_cache.cache_seqlens: missing; accepted: with k_new/v_new an int32 [batch] tensor of "
        "the cached lengths to append at");
  }
  const ScalarType dtype = input_type(spec.kv_dtype.value_or(spec.dtype));
  for (const auto& [name, t, dim] : {std::tuple{"kv_cache.k_new", &c.k_new, spec.head_dim_qk},
                                     std::tuple{"kv_cache.v_new", &c.v_new, spec.head_dim_v}}) {
    check_cache_type(name, *t, spec);
    check_activation(
        name, *t, dtype, dim,
        {{"batch", kMaxGridYZ}, {"new tokens", INT32_MAX / 2}, {"kv heads", kMaxGridYZ}},
        "4 ([batch, new tokens, kv heads, head_dim])");
    check_same(fmt::format("{}.shape[0]", name), t->shape[0], s.batch, "batch of q");
    check_same(fmt::format("{}.shape[2]", name), t->shape[2], s.kv_heads, "kv heads of the cache");
  }
  check_same("kv_cache.v_new.shape[1]", c.v_new.shape[1], c.k_new.shape[1], "new tokens of k_new");
  s.new_tokens = static_cast<int>(c.k_new.shape[1]);
}

// [total, a, b] as [batch, rows, a, b] of batch stride 0: a sequence's rows start where
// cu_seqlens_q says (the kernels add it).
TensorView ragged_rows(const TensorView& t, std::int64_t batch, int rows) {
  TensorView view = t;
  view.rank = 4;
  view.shape = {batch, rows, t.shape[1], t.shape[2]};
  view.stride = {0, t.stride[0], t.stride[1], t.stride[2]};
  return view;
}

}  // namespace

std::optional<ForwardArgs> ragged_as_batch(const AttentionSpec& spec, const ForwardArgs& a) {
  const KvCacheArgs& c = a.kv_cache;
  if (c.cu_seqlens_q.empty()) {
    if (c.max_seqlen_q != 0) {
      throw_field_error("kv_cache.max_seqlen_q", std::to_string(c.max_seqlen_q),
                        "0 without cu_seqlens_q");
    }
    return std::nullopt;
  }
  if (spec.kv_cache == KvCache::none) return std::nullopt;  // check_kv_cache refuses it
  runtime::check_int32_tensor("kv_cache.cu_seqlens_q", c.cu_seqlens_q, 1);
  if (c.cu_seqlens_q.shape[0] < 2) {
    throw_field_error("kv_cache.cu_seqlens_q.shape[0]", std::to_string(c.cu_seqlens_q.shape[0]),
                      "B + 1 with B >= 1 sequences");
  }
  const std::int64_t batch = c.cu_seqlens_q.shape[0] - 1;
  if (c.max_seqlen_q < 1 || c.max_seqlen_q > INT32_MAX / 2) {
    throw_field_error("kv_cache.max_seqlen_q", std::to_string(c.max_seqlen_q),
                      fmt::format("1 to {} (the most new tokens of a sequence) with cu_seqlens_q",
                                  INT32_MAX / 2));
  }
  const ScalarType dtype = spec.dtype == DType::bf16 ? ScalarType::bf16 : ScalarType::fp16;
  const std::string rank_text = "3 ([total_q, heads, head_dim]: new tokens packed by cu_seqlens_q)";
  check_activation("q", a.q, dtype, spec.head_dim_qk,
                   {{"total_q", INT32_MAX / 2}, {"heads", kMaxGridYZ}}, rank_text);
  check_activation("o", a.o, dtype, spec.head_dim_v,
                   {{"total_q", INT32_MAX / 2}, {"heads", kMaxGridYZ}}, rank_text);
  const std::int64_t total_q = a.q.shape[0];
  check_same("o.shape[0] (total_q)", a.o.shape[0], total_q, "total_q of q");
  check_same("o.shape[1] (heads)", a.o.shape[1], a.q.shape[1], "heads of q");
  check_no_overlap("o", a.o);
  ForwardArgs out = a;
  out.q = ragged_rows(a.q, batch, c.max_seqlen_q);
  out.o = ragged_rows(a.o, batch, c.max_seqlen_q);
  if (!a.lse.empty()) {
    const TensorView& l = a.lse;
    check_packed_lse(l, a.q.shape[1], total_q, "new tokens packed by cu_seqlens_q");
    check_span("lse", l);
    check_no_overlap("lse", l);
    out.lse.rank = 3;
    out.lse.shape = {batch, l.shape[0], c.max_seqlen_q};
    out.lse.stride = {0, l.stride[0], 1};
  }
  for (const auto& [name, t, rows] :
       {std::tuple{"kv_cache.k_new", &out.kv_cache.k_new, &a.kv_cache.k_new},
        std::tuple{"kv_cache.v_new", &out.kv_cache.v_new, &a.kv_cache.v_new}}) {
    if (rows->empty()) continue;
    if (rows->rank != 3) {
      throw_field_error(fmt::format("{}.rank", name), std::to_string(rows->rank),
                        "3 ([total_q, kv heads, head_dim]: each sequence appends its new tokens, "
                        "packed by cu_seqlens_q)");
    }
    check_same(fmt::format("{}.shape[0] (total_q)", name), rows->shape[0], total_q, "total_q of q");
    *t = ragged_rows(*rows, batch, c.max_seqlen_q);
  }
  return out;
}

void check_kv_cache(const AttentionSpec& spec, const ForwardArgs& a, Shapes& s) {
  const KvCacheArgs& c = a.kv_cache;
  if (spec.kv_cache == KvCache::none) {
    if (!c.cache_seqlens.empty() || !c.block_table.empty() || c.num_splits != 0 ||
        !c.k_new.empty() || !c.v_new.empty() || !c.cu_seqlens_q.empty()) {
      throw Error(
          "kv_cache: cache arguments (cache_seqlens, block_table, num_splits, k_new, v_new or "
          "cu_seqlens_q) given, but the spec has kv_cache=none; accepted: none of them (compile "
          "with kv_cache=contiguous or kv_cache=paged)");
    }
    return;
  }
  s.decode = true;
  s.paged = spec.kv_cache == KvCache::paged;
  s.head_dim_qk = spec.head_dim_qk;
  s.fp8_kv = spec.kv_dtype.has_value();
  if (c.num_splits < 0 || c.num_splits > kMaxDecodeSplits) {
    throw_field_error(
        "kv_cache.num_splits", std::to_string(c.num_splits),
        fmt::format("0 (chosen from the SM count and the shapes) or 1 to {}", kMaxDecodeSplits));
  }
  s.num_splits = c.num_splits;
  if (!c.cache_seqlens.empty()) {
    runtime::check_int32_tensor("kv_cache.cache_seqlens", c.cache_seqlens, 1);
    check_same("kv_cache.cache_seqlens.shape[0]", c.cache_seqlens.shape[0], s.batch, "batch of q");
  }
  if (spec.kv_cache == KvCache::paged) {
    const std::int64_t page_size = a.k.shape[1];
    if (page_size < 1 || (page_size & (page_size - 1)) != 0) {
      throw_field_error("k.shape[1] (page_size)", std::to_string(page_size),
                        "a power of two (1, 2, 4, ..., 256, ...)");
    }
    // The decode kernel addresses a page's rows with 32-bit products of these strides.
    for (const auto& [name, pool] : {std::pair{"k", &a.k}, std::pair{"v", &a.v}}) {
      for (int dim = 0; dim < 2; ++dim) {
        const std::int64_t bytes = pool->stride[dim] * kv_element_size(spec);
        if (bytes < 0 || bytes > INT32_MAX) {
          throw_field_error(fmt::format("{}.stride[{}]", name, dim),
                            std::to_string(pool->stride[dim]),
                            fmt::format("0 to {} elements (a page pool's page and row strides "
                                        "within 2 GiB)",
                                        INT32_MAX / kv_element_size(spec)));
        }
      }
    }
    if (c.block_table.empty()) {
      throw Error(
          "kv_cache.block_table: missing; accepted: for kv_cache=paged an int32 [batch, "
          "max_pages] tensor of page indices into k and v");
    }
    // Its rows may be strided (a slice of a larger table); each row is contiguous.
    runtime::check_int32_tensor("kv_cache.block_table", c.block_table, 2, /*contiguous_dims=*/1);
    check_same("kv_cache.block_table.shape[0]", c.block_table.shape[0], s.batch, "batch of q");
    if (c.block_table.shape[1] < 1) {
      throw_field_error("kv_cache.block_table.shape[1] (max_pages)",
                        std::to_string(c.block_table.shape[1]), "at least 1");
    }
    const std::int64_t capacity = c.block_table.shape[1] * page_size;
    if (capacity > INT32_MAX / 2) {
      throw_field_error(
          "kv_cache.block_table.shape[1] (max_pages)", std::to_string(c.block_table.shape[1]),
          fmt::format("at most {} pages of {} keys", INT32_MAX / 2 / page_size, page_size));
    }
    s.seqlen_k = static_cast<int>(capacity);
  } else if (!c.block_table.empty()) {
    throw Error(
        "kv_cache.block_table: given, but the spec has kv_cache=contiguous; accepted: no block "
        "table (compile with kv_cache=paged for a paged cache)");
  }
  check_appended(spec, a, s);
  // One CTA row per 16 packed query rows (G x Sq) of each KV head: grid y.
  const std::int64_t rows = static_cast<std::int64_t>(s.heads / s.kv_heads) * s.seqlen_q;
  if ((rows + 15) / 16 * s.kv_heads > kMaxGridYZ) {
    throw_field_error(
        "q.shape[1] (seqlen_q)", std::to_string(s.seqlen_q),
        fmt::format("at most {} new tokens per sequence with {} query heads over "
                    "{} KV heads",
                    kMaxGridYZ / s.kv_heads * 16 / (s.heads / s.kv_heads), s.heads, s.kv_heads));
  }
}

void check_kv_cache_contents(const AttentionSpec& spec, const ForwardArgs& a, const Shapes& s,
                             std::int64_t total_q, CUstream stream) {
  const KvCacheArgs& c = a.kv_cache;
  const bool paged = spec.kv_cache == KvCache::paged;
  const bool ragged = !c.cu_seqlens_q.empty();
  if (s.batch == 0 || (c.cache_seqlens.empty() && !paged && !ragged)) return;
  // What the stream's earlier work wrote, before any launch of this call.
  runtime::check(runtime::driver().cuStreamSynchronize(stream),
                 "cuStreamSynchronize(ATTNJIT_DEBUG check of the cache arguments)");
  const auto read = [](const void* data, std::int64_t count) {
    std::vector<int> values(static_cast<std::size_t>(count));
    runtime::check(runtime::driver().cuMemcpyDtoH(
                       values.data(), reinterpret_cast<CUdeviceptr>(data), count * sizeof(int)),
                   "cuMemcpyDtoH(ATTNJIT_DEBUG check of the cache arguments)");
    return values;
  };
  // The keys each sequence appends: k_new's rows, with ragged new tokens its own count.
  std::vector<int> appended(static_cast<std::size_t>(s.batch), s.new_tokens);
  if (ragged) {
    const std::vector<int> cu = read(c.cu_seqlens_q.data, s.batch + 1);
    for (int e = 0; e <= s.batch; ++e) {
      const std::string field = fmt::format("kv_cache.cu_seqlens_q[{}]", e);
      if (e == 0 && cu[0] != 0) {
        throw_field_error(field, std::to_string(cu[0]), "0 (the first sequence starts at 0)");
      }
      if (e > 0 && cu[e] < cu[e - 1]) {
        throw_field_error(
            field, std::to_string(cu[e]),
            fmt::format(">= cu_seqlens_q[{}] = {} (boundaries never decrease)", e - 1, cu[e - 1]));
      }
      if (e > 0 && cu[e] - cu[e - 1] > s.seqlen_q) {
        throw_field_error("kv_cache.max_seqlen_q", std::to_string(s.seqlen_q),
                          fmt::format("at least {} (sequence {} has that many new tokens)",
                                      cu[e] - cu[e - 1], e - 1));
      }
      if (e > 0 && s.new_tokens > 0) appended[e - 1] = cu[e] - cu[e - 1];
    }
    if (cu[s.batch] != total_q) {
      throw_field_error(fmt::format("kv_cache.cu_seqlens_q[{}]", s.batch),
                        std::to_string(cu[s.batch]),
                        fmt::format("{} (total_q: the packed rows of q)", total_q));
    }
  }
  const int capacity = s.seqlen_k;
  std::vector<int> lengths(static_cast<std::size_t>(s.batch), capacity);
  if (!c.cache_seqlens.empty()) lengths = read(c.cache_seqlens.data, s.batch);
  for (int b = 0; b < s.batch; ++b) {
    if (lengths[b] >= 0 && lengths[b] <= capacity - appended[b]) continue;
    throw_field_error(
        fmt::format("kv_cache.cache_seqlens[{}]", b), std::to_string(lengths[b]),
        appended[b] > 0
            ? fmt::format("0 to {} (the cache holds {} keys per sequence and {} are appended)",
                          capacity - appended[b], capacity, appended[b])
            : fmt::format("0 to {} (the keys the cache holds per sequence)", capacity));
  }
  if (!paged) return;
  const std::int64_t page_size = a.k.shape[1];
  const std::int64_t num_pages = a.k.shape[0];
  for (int b = 0; b < s.batch; ++b) {
    const std::int64_t pages = (lengths[b] + appended[b] + page_size - 1) / page_size;
    if (pages == 0) continue;
    const std::vector<int> row =
        read(static_cast<const int*>(c.block_table.data) + b * c.block_table.stride[0], pages);
    for (std::int64_t i = 0; i < pages; ++i) {
      if (row[i] >= 0 && row[i] < num_pages) continue;
      throw_field_error(fmt::format("kv_cache.block_table[{}][{}]", b, i), std::to_string(row[i]),
                        fmt::format("0 to {} (the pages of k and v; sequence {} uses its first "
                                    "{} entries)",
                                    num_pages - 1, b, pages));
    }
  }
}

void add_kv_cache_shapes(const AttentionSpec& spec, const ForwardArgs& a, Shapes& s) {
  if (spec.kv_cache == KvCache::none) return;
  const KvCacheArgs& c = a.kv_cache;
  s.decode = true;
  s.paged = spec.kv_cache == KvCache::paged;
  s.head_dim_qk = spec.head_dim_qk;
  s.fp8_kv = spec.kv_dtype.has_value();
  s.num_splits = c.num_splits;
  if (spec.kv_cache == KvCache::paged && c.block_table.rank == 2 && a.k.rank == 4) {
    s.seqlen_k = static_cast<int>(c.block_table.shape[1] * a.k.shape[1]);
  }
  s.new_tokens = c.k_new.rank == 4   ? static_cast<int>(c.k_new.shape[1])
                 : c.k_new.rank == 3 ? c.max_seqlen_q  // ragged: each sequence's own tokens
                                     : 0;
}

void allow_prefill(const KernelPlan& plan, const ForwardArgs& a, Shapes& s) {
  const KvCacheArgs& c = a.kv_cache;
  const bool paged = !c.block_table.empty();
  s.prefill_allowed = s.decode && plan.find(KernelRole::prefill) != nullptr && c.num_splits == 0 &&
                      (!paged || (a.k.rank == 4 && a.k.shape[1] >= 8));
}

void fill_kv_cache(KvCacheInputs& p, const AttentionSpec& spec, const ForwardArgs& a) {
  const KvCacheArgs& c = a.kv_cache;
  p.cache_seqlens = static_cast<const int*>(c.cache_seqlens.data);
  p.cu_seqlens_q = static_cast<const int*>(c.cu_seqlens_q.data);
  if (!c.k_new.empty()) {
    p.k_new = c.k_new.data;
    p.v_new = c.v_new.data;
    set_strides(c.k_new, p.k_new_batch_stride, p.k_new_row_stride, p.k_new_head_stride);
    set_strides(c.v_new, p.v_new_batch_stride, p.v_new_row_stride, p.v_new_head_stride);
    p.new_tokens = static_cast<int>(c.k_new.shape[1]);
  }
  if (spec.kv_cache != KvCache::paged) return;
  p.block_table = static_cast<const int*>(c.block_table.data);
  p.block_table_stride = c.block_table.stride[0];
  p.num_pages = static_cast<int>(std::min<std::int64_t>(a.k.shape[0], INT32_MAX));
  int shift = 0;
  while ((std::int64_t{1} << shift) < a.k.shape[1]) ++shift;
  p.page_shift = shift;
}

}  // namespace attnjit::jit::detail
