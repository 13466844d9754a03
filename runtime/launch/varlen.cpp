// Packed batches on the padded launch (runtime/launch/varlen.hpp).
#include "runtime/launch/varlen.hpp"

#include <fmt/format.h>

#include <climits>
#include <string>
#include <type_traits>

#include "attnjit/error.hpp"
#include "runtime/launch/launch_support.hpp"

namespace attnjit::jit::detail {
namespace {

// The codes of templates/attnjit/masks/varlen_intervals.cuh (VarlenError).
enum VarlenError : unsigned {
  kCuQStart = 1,
  kCuQDecrease = 2,
  kCuQEnd = 3,
  kCuKStart = 4,
  kCuKDecrease = 5,
  kCuKEnd = 6,
  kMaxSeqlenQ = 7,
  kMaxSeqlenK = 8,
  kSequsedK = 9,
};

// A packed activation: rank 3 [total, heads, head_dim] of `dtype` (the spec's inputs' or
// output's) and the head dim, with the layout the kernels copy.
void check_packed(std::string_view name, const TensorView& t, const AttentionSpec& spec,
                  ScalarType dtype, int head_dim, std::string_view total) {
  check_activation(name, t, dtype, head_dim, {{total, INT32_MAX / 2}, {"heads", kMaxGridYZ}},
                   fmt::format("3 ([{}, heads, head_dim]: the spec has varlen={})", total,
                               name_of(spec.varlen)));
}

// An int32 boundary tensor: rank 1, contiguous, 4-byte aligned, of `entries` entries.
void check_boundaries(std::string_view name, const TensorView& t, std::int64_t entries,
                      std::string_view what) {
  if (t.data == nullptr) {
    throw Error(
        fmt::format("{}: missing; accepted: an int32 device tensor [{}] (the spec packs its "
                    "batch: varlen=true or shared)",
                    name, what));
  }
  runtime::check_int32_tensor(name, t, 1);
  if (entries >= 0) check_same(fmt::format("{}.shape[0]", name), t.shape[0], entries, what);
}

// [1, total, H, D] (lse: [1, H, total]): a leading batch dim of extent 1.
TensorView as_batch_row(const TensorView& t) {
  if (t.empty()) return t;
  TensorView view = t;
  view.rank = t.rank + 1;
  view.shape[0] = 1;
  view.stride[0] = t.shape[0] * t.stride[0];
  for (int d = 0; d < t.rank; ++d) {
    view.shape[d + 1] = t.shape[d];
    view.stride[d + 1] = t.stride[d];
  }
  return view;
}

void check_varlen_args(const VarlenArgs& v, int total_q, int total_k) {
  check_boundaries("cu_seqlens_q", v.cu_seqlens_q, -1, "B + 1, B >= 1 sequences");
  const std::int64_t sequences = v.cu_seqlens_q.shape[0] - 1;
  if (sequences < 1 || sequences > INT32_MAX - 1) {
    throw_field_error("cu_seqlens_q.shape[0]", std::to_string(v.cu_seqlens_q.shape[0]),
                      "B + 1 entries for B >= 1 sequences");
  }
  check_boundaries("cu_seqlens_k", v.cu_seqlens_k, sequences + 1,
                   "B + 1: as many entries as cu_seqlens_q");
  if (!v.seqused_k.empty()) {
    check_boundaries("seqused_k", v.seqused_k, sequences, "B: one per sequence");
  }
  if (v.max_seqlen_q < 0 || v.max_seqlen_q > total_q) {
    throw_field_error(
        "max_seqlen_q", std::to_string(v.max_seqlen_q),
        fmt::format("0 to {} (total_q): the longest query sequence or more", total_q));
  }
  if (v.max_seqlen_k < 0 || v.max_seqlen_k > total_k) {
    throw_field_error("max_seqlen_k", std::to_string(v.max_seqlen_k),
                      fmt::format("0 to {} (total_k): the longest key sequence or more", total_k));
  }
}

// varlen=shared: the keys take the queries' boundaries (cu_seqlens_k absent or cu_seqlens_q
// itself, no seqused_k, as many keys as queries); max_seqlen_k defaults to max_seqlen_q.
VarlenArgs shared_boundaries(const VarlenArgs& v, std::int64_t total_q, std::int64_t total_k) {
  if (!v.cu_seqlens_k.empty() && v.cu_seqlens_k.data != v.cu_seqlens_q.data) {
    throw Error(
        "cu_seqlens_k: a tensor other than cu_seqlens_q, but the spec has varlen=shared; "
        "accepted: cu_seqlens_q itself or none (compile with varlen=true for keys with "
        "boundaries of their own)");
  }
  if (!v.seqused_k.empty()) {
    throw Error(
        "seqused_k: given, but the spec has varlen=shared (every sequence uses all its keys); "
        "accepted: none (compile with varlen=true to give seqused_k)");
  }
  check_same("k.shape[0] (total_k)", total_k, total_q,
             "total_q of q: the spec has varlen=shared, keys and queries share the boundaries");
  VarlenArgs shared = v;
  shared.cu_seqlens_k = v.cu_seqlens_q;
  if (shared.max_seqlen_k == -1) shared.max_seqlen_k = v.max_seqlen_q;
  return shared;
}

}  // namespace

template <class Args>
std::optional<Args> packed_as_batch(const AttentionSpec& spec, const Args& args) {
  if (spec.varlen == VarlenMode::off) {
    if (!args.varlen.empty()) {
      throw Error(
          "cu_seqlens_q/cu_seqlens_k/seqused_k/max_seqlen: given, but the spec has "
          "varlen=false; accepted: none of them (compile with varlen=true or varlen=shared for "
          "packed batches)");
    }
    return std::nullopt;
  }
  const ScalarType in = input_type(spec.dtype);
  check_packed("q", args.q, spec, in, spec.head_dim_qk, "total_q");
  check_packed("k", args.k, spec, in, spec.head_dim_qk, "total_k");
  check_packed("v", args.v, spec, in, spec.head_dim_v, "total_k");
  check_packed("o", args.o, spec, output_type(spec.dtype), spec.head_dim_v, "total_q");
  check_same("v.shape[0] (total_k)", args.v.shape[0], args.k.shape[0], "total_k of k");
  check_same("v.shape[1] (kv heads)", args.v.shape[1], args.k.shape[1], "kv heads of k");
  check_same("o.shape[0] (total_q)", args.o.shape[0], args.q.shape[0], "total_q of q");
  check_same("o.shape[1] (heads)", args.o.shape[1], args.q.shape[1], "heads of q");
  const std::int64_t heads = args.q.shape[1];
  const std::int64_t kv_heads = args.k.shape[1];
  if (kv_heads < 1 || heads % kv_heads != 0) {
    throw_field_error("k.shape[1] (kv heads)", std::to_string(kv_heads),
                      fmt::format("a divisor of the {} query heads (GQA/MQA)", heads));
  }
  if (!args.lse.empty()) {
    check_packed_lse(args.lse, heads, args.q.shape[0],
                     fmt::format("the spec has varlen={}", name_of(spec.varlen)));
  }
  const TensorView& vectors = args.startend_row_indices;
  if (spec.mask.kind == MaskKind::flashmask && vectors.rank == 4 && vectors.shape[0] != 1) {
    throw_field_error("startend_row_indices.shape[0]", std::to_string(vectors.shape[0]),
                      fmt::format("1 (a packed batch's vectors are [1, mask_heads, total_k, {}], "
                                  "rows local to each sequence: the spec has varlen={})",
                                  spec.mask.columns, name_of(spec.varlen)));
  }
  Args out = args;
  if (spec.varlen == VarlenMode::shared) {
    out.varlen = shared_boundaries(args.varlen, args.q.shape[0], args.k.shape[0]);
  }
  check_varlen_args(out.varlen, static_cast<int>(args.q.shape[0]),
                    static_cast<int>(args.k.shape[0]));
  out.q = as_batch_row(args.q);
  out.k = as_batch_row(args.k);
  out.v = as_batch_row(args.v);
  out.o = as_batch_row(args.o);
  out.lse = as_batch_row(args.lse);
  if constexpr (std::is_same_v<Args, BackwardArgs>) {
    check_same_layout("d_o", args.d_o, "o", args.o);
    check_same_layout("d_q", args.d_q, "q", args.q);
    check_same_layout("d_k", args.d_k, "k", args.k);
    check_same_layout("d_v", args.d_v, "v", args.v);
    out.d_o = as_batch_row(args.d_o);
    out.d_q = as_batch_row(args.d_q);
    out.d_k = as_batch_row(args.d_k);
    out.d_v = as_batch_row(args.d_v);
  }
  return out;
}

template std::optional<ForwardArgs> packed_as_batch(const AttentionSpec&, const ForwardArgs&);
template std::optional<BackwardArgs> packed_as_batch(const AttentionSpec&, const BackwardArgs&);

void fill_varlen(VarlenInputs& p, const VarlenArgs& args, const TensorView& startend_row_indices) {
  p = VarlenInputs{};
  if (args.cu_seqlens_q.empty()) return;
  p.mask_vectors = static_cast<const int*>(startend_row_indices.data);
  p.cu_seqlens_q = static_cast<const int*>(args.cu_seqlens_q.data);
  p.cu_seqlens_k = static_cast<const int*>(args.cu_seqlens_k.data);
  p.seqused_k = static_cast<const int*>(args.seqused_k.data);
  p.sequences = static_cast<int>(args.cu_seqlens_q.shape[0] - 1);
  p.max_seqlen_q = args.max_seqlen_q;
  p.max_seqlen_k = args.max_seqlen_k;
}

VarlenCheck::VarlenCheck(bool requested, CUstream stream) {
  if (requested) slot_.emplace(stream);
}

void VarlenCheck::finish(const VarlenArgs& args, int total_q, int total_k) const {
  if (!slot_) return;
  const auto found = slot_->wait_and_read();
  if (!found) return;
  const long long entry = static_cast<long long>(*found >> 4);
  const unsigned code = static_cast<unsigned>(*found & 15);
  const bool query = code <= kCuQEnd || code == kMaxSeqlenQ;
  const char* name = query ? "cu_seqlens_q" : "cu_seqlens_k";
  const void* cu = query ? args.cu_seqlens_q.data : args.cu_seqlens_k.data;
  const auto at = [&](long long index) { return runtime::read_device_int(cu, index); };
  const std::string field = fmt::format("{}[{}]", name, entry);
  switch (code) {
    case kCuQStart:
    case kCuKStart:
      throw_field_error(field, std::to_string(at(entry)), "0 (the first sequence starts at 0)");
    case kCuQDecrease:
    case kCuKDecrease:
      throw_field_error(field, std::to_string(at(entry)),
                        fmt::format(">= {}[{}] = {} (boundaries never decrease)", name, entry - 1,
                                    at(entry - 1)));
    case kCuQEnd:
    case kCuKEnd:
      throw_field_error(
          field, std::to_string(at(entry)),
          fmt::format("{} ({}: the packed rows of {}; the last boundary is the total)",
                      query ? total_q : total_k, query ? "total_q" : "total_k", query ? "q" : "k"));
    case kMaxSeqlenQ:
    case kMaxSeqlenK: {
      const long long length = static_cast<long long>(at(entry)) - at(entry - 1);
      throw_field_error(query ? "max_seqlen_q" : "max_seqlen_k",
                        std::to_string(query ? args.max_seqlen_q : args.max_seqlen_k),
                        fmt::format("at least {}, the length of sequence {} ({}[{}] - {}[{}])",
                                    length, entry - 1, name, entry, name, entry - 1));
    }
    case kSequsedK: {
      const long long keys = static_cast<long long>(at(entry + 1)) - at(entry);
      throw_field_error(fmt::format("seqused_k[{}]", entry),
                        std::to_string(runtime::read_device_int(args.seqused_k.data, entry)),
                        fmt::format("0 to {} (the keys of sequence {})", keys, entry));
    }
    default:
      throw InternalError(fmt::format("varlen check: unknown error code {}", code));
  }
}

}  // namespace attnjit::jit::detail
