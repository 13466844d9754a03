// Packed batches (varlen=true) against the CPU float64 reference computed sequence by sequence
// on the packed tensors' slices: forward (O, LSE) and backward (dQ, dK, dV, atomic and
// deterministic) on ragged lengths that are not tile multiples, with an empty sequence, one of
// length 1, Sq != Sk per sequence, seqused_k, GQA, none/causal/sliding_window, bf16 and fp16,
// each kernel family forced by its tiles; FlashMask vectors inside the sequences (every arity,
// rows local to each sequence, one mask head or one per KV head); predicates on each sequence's
// local q and k with b its index (scalars, heads, tensors with a row per sequence); the device
// check of the
// boundaries (validate_mask) and small specs for compute-sanitizer ([sanitizer]).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/builders.hpp"
#include "dsl/intervals.hpp"
#include "gpu/checks.hpp"
#include "gpu/compile_ahead.hpp"
#include "gpu/gpu_case.hpp"
#include "runtime/jit/driver.hpp"
#include "support/env_override.hpp"
#include "support/error_text.hpp"
#include "support/half_round.hpp"
#include "support/reference.hpp"
#include "support/reference_backward.hpp"
#include "support/sm90a_tiles.hpp"

using namespace attnjit;

namespace {

// A packed batch: its sequences' lengths, heads, mask window and the kernels it forces.
struct Packed {
  DType dtype = DType::bf16;
  int head_dim = 64;
  MaskKind mask = MaskKind::none;
  /// mask=flashmask: the vectors' layout and values, [1, Hm, total_k, C] with rows local to
  /// each sequence (random_vectors).
  bool vectors_causal = false;
  int columns = 0;
  dsl::IntervalVectors vectors;
  /// mask=predicate: the written predicate and its tensors (a row per sequence).
  std::string predicate;
  std::vector<PredicateTensor> predicate_tensors;
  std::vector<int> seqlens_q, seqlens_k;
  std::vector<int> seqused_k;  ///< empty: every key of each sequence
  /// shared: cu_seqlens_k is cu_seqlens_q (seqlens_k equal, no seqused_k)
  VarlenMode mode = VarlenMode::separate;
  std::vector<float> alibi_slopes;  ///< [heads]: ALiBi (varlen=shared only); empty: none
  int heads = 4, kv_heads = 2;
  int window_left = -1, window_right = 0;
  std::uint64_t seed = 1;
  TileShape forward_tiles, backward_tiles;  ///< empty: select_tiles' choice
  std::string forward_row, backward_row;    ///< the rows they must run; empty: any

  int sequences() const { return static_cast<int>(seqlens_q.size()); }
  int used(int s) const { return seqused_k.empty() ? seqlens_k[s] : seqused_k[s]; }
  std::vector<int> cu(const std::vector<int>& lengths) const {
    std::vector<int> out{0};
    for (const int n : lengths) out.push_back(out.back() + n);
    return out;
  }
  int total_q() const { return cu(seqlens_q).back(); }
  int total_k() const { return cu(seqlens_k).back(); }

  AttentionSpec forward_spec() const {
    AttentionSpec spec;
    spec.dtype = dtype;
    spec.head_dim_qk = spec.head_dim_v = head_dim;
    spec.mask.kind = mask;
    if (mask == MaskKind::flashmask) {
      spec.mask.causal = vectors_causal;
      spec.mask.columns = columns;
    }
    if (mask == MaskKind::predicate) {
      spec.mask =
          parse_spec(fmt::format("dtype=bf16 head_dim=64 mask=predicate({})", predicate)).mask;
    }
    spec.return_lse = true;
    spec.varlen = mode;
    spec.alibi = !alibi_slopes.empty();
    spec.tiles = forward_tiles;
    return spec;
  }
  // The backward's forward takes the automatic tiles; the forced ones are the backward's.
  std::vector<AttentionSpec> backward_specs(bool deterministic) const {
    AttentionSpec forward = forward_spec();
    forward.tiles = {};
    AttentionSpec backward = forward_spec();
    backward.return_lse = false;
    backward.direction = Direction::backward;
    backward.deterministic = deterministic;
    backward.tiles = backward_tiles;
    return {forward, backward};
  }
  std::string describe() const {
    return fmt::format(
        "{} d{} mask={} varlen={} alibi={} H={} Hkv={} Hm={} seqlens_q=[{}] seqlens_k=[{}] "
        "seqused_k=[{}] window=({}, {}) tiles fwd={} bwd={} seed={}",
        name_of(dtype), head_dim, to_string(forward_spec().mask), name_of(mode),
        !alibi_slopes.empty(), heads, kv_heads, vectors.heads, fmt::join(seqlens_q, ","),
        fmt::join(seqlens_k, ","), fmt::join(seqused_k, ","), window_left, window_right,
        to_string(forward_tiles), to_string(backward_tiles), gpu_test::data_seed(seed));
  }
};

// Host values of q [total_q, H, D], k and v [total_k, Hkv, D] and dO [total_q, H, D], already
// representable in the dtype.
struct HostData {
  std::vector<float> q, k, v, d_o;
};

std::vector<float> random_values(std::size_t count, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> out(count);
  for (float& x : out) x = testing::round_to(dtype, normal(rng));
  return out;
}

HostData make_data(const Packed& c) {
  std::mt19937_64 rng(gpu_test::data_seed(c.seed));
  const auto d = static_cast<std::size_t>(c.head_dim);
  HostData h;
  h.q = random_values(c.total_q() * c.heads * d, c.dtype, rng);
  h.k = random_values(c.total_k() * c.kv_heads * d, c.dtype, rng);
  h.v = random_values(c.total_k() * c.kv_heads * d, c.dtype, rng);
  h.d_o = random_values(c.total_q() * c.heads * d, c.dtype, rng);
  return h;
}

constexpr std::uint8_t kPoison = 0xff;  // NaN in bf16, fp16 and fp32

// A contiguous [rows, heads, dim] device tensor, poisoned, then `values` uploaded when given.
struct DevicePacked {
  runtime::DeviceBuffer buffer;
  TensorView view;
};

DevicePacked device_tensor(DType dtype, int rows, int heads, int dim,
                           const std::vector<float>* values = nullptr) {
  const std::size_t count = static_cast<std::size_t>(rows) * heads * dim;
  DevicePacked t{runtime::DeviceBuffer(std::max<std::size_t>(count, 1) * 2), {}};
  t.buffer.fill_bytes(kPoison);
  t.view =
      contiguous_view(t.buffer.data(), dtype == DType::bf16 ? ScalarType::bf16 : ScalarType::fp16,
                      {rows, heads, dim});
  if (values != nullptr) {
    std::vector<std::uint16_t> bits(count);
    for (std::size_t i = 0; i < count; ++i) {
      bits[i] = dtype == DType::bf16 ? testing::float_to_bf16_bits((*values)[i])
                                     : testing::float_to_fp16_bits((*values)[i]);
    }
    t.buffer.upload(bits.data(), count * 2);
  }
  return t;
}

std::vector<float> download(const DevicePacked& t, DType dtype) {
  const std::size_t count =
      static_cast<std::size_t>(t.view.shape[0]) * t.view.shape[1] * t.view.shape[2];
  std::vector<std::uint16_t> bits(count);
  t.buffer.download(bits.data(), count * 2);
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = dtype == DType::bf16 ? testing::bf16_bits_to_float(bits[i])
                                  : testing::fp16_bits_to_float(bits[i]);
  }
  return out;
}

runtime::DeviceBuffer upload_ints(const std::vector<int>& values) {
  runtime::DeviceBuffer buffer(std::max<std::size_t>(values.size(), 1) * 4);
  buffer.upload(values.data(), values.size() * 4);
  return buffer;
}

// The boundaries on the device and the VarlenArgs that name them.
struct DeviceBoundaries {
  runtime::DeviceBuffer cu_q, cu_k, used;
  VarlenArgs args;
};

DeviceBoundaries upload_boundaries(const std::vector<int>& cu_q, const std::vector<int>& cu_k,
                                   const std::vector<int>& used, int max_q, int max_k) {
  DeviceBoundaries b{upload_ints(cu_q), upload_ints(cu_k), {}, {}};
  b.args.cu_seqlens_q =
      contiguous_view(b.cu_q.data(), ScalarType::int32, {static_cast<std::int64_t>(cu_q.size())});
  b.args.cu_seqlens_k =
      contiguous_view(b.cu_k.data(), ScalarType::int32, {static_cast<std::int64_t>(cu_k.size())});
  if (!used.empty()) {
    b.used = upload_ints(used);
    b.args.seqused_k =
        contiguous_view(b.used.data(), ScalarType::int32, {static_cast<std::int64_t>(used.size())});
  }
  b.args.max_seqlen_q = max_q;
  b.args.max_seqlen_k = max_k;
  return b;
}

DeviceBoundaries upload_boundaries(const Packed& c) {
  DeviceBoundaries b = upload_boundaries(c.cu(c.seqlens_q), c.cu(c.seqlens_k), c.seqused_k,
                                         *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end()),
                                         *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()));
  if (c.mode == VarlenMode::shared) b.args.cu_seqlens_k = b.args.cu_seqlens_q;
  return b;
}

// The packed problem's tensors on the device, with q, k, v and dO uploaded.
struct DeviceProblem {
  DevicePacked q, k, v, o, d_o, d_q, d_k, d_v;
  runtime::DeviceBuffer lse;
  DeviceBoundaries boundaries;
  runtime::DeviceBuffer alibi_slopes;  ///< [heads] fp32 when the case has ALiBi
  runtime::DeviceBuffer vectors;       ///< the FlashMask vectors when the case has them
  std::vector<runtime::DeviceBuffer> predicate_tensors;
};

DeviceProblem upload(const Packed& c, const HostData& h) {
  const int tq = c.total_q(), tk = c.total_k(), d = c.head_dim;
  DeviceProblem p{device_tensor(c.dtype, tq, c.heads, d, &h.q),
                  device_tensor(c.dtype, tk, c.kv_heads, d, &h.k),
                  device_tensor(c.dtype, tk, c.kv_heads, d, &h.v),
                  device_tensor(c.dtype, tq, c.heads, d),
                  device_tensor(c.dtype, tq, c.heads, d, &h.d_o),
                  device_tensor(c.dtype, tq, c.heads, d),
                  device_tensor(c.dtype, tk, c.kv_heads, d),
                  device_tensor(c.dtype, tk, c.kv_heads, d),
                  runtime::DeviceBuffer(std::max<std::size_t>(tq * c.heads, 1) * 4),
                  upload_boundaries(c)};
  p.lse.fill_bytes(kPoison);
  if (!c.alibi_slopes.empty()) {
    p.alibi_slopes = runtime::DeviceBuffer(c.alibi_slopes.size() * 4);
    p.alibi_slopes.upload(c.alibi_slopes.data(), c.alibi_slopes.size() * 4);
  }
  if (c.mask == MaskKind::flashmask) p.vectors = upload_ints(c.vectors.data);
  for (const PredicateTensor& t : c.predicate_tensors) {
    p.predicate_tensors.push_back(upload_ints(t.values));
  }
  return p;
}

ForwardArgs forward_args(const Packed& c, const DeviceProblem& p) {
  ForwardArgs a;
  a.q = p.q.view;
  a.k = p.k.view;
  a.v = p.v.view;
  a.o = p.o.view;
  a.lse = contiguous_view(p.lse.data(), ScalarType::fp32, {c.heads, c.total_q()});
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.varlen = p.boundaries.args;
  if (!c.alibi_slopes.empty()) {
    a.alibi_slopes = contiguous_view(p.alibi_slopes.data(), ScalarType::fp32, {c.heads});
  }
  if (c.mask == MaskKind::flashmask) {
    a.startend_row_indices = contiguous_view(p.vectors.data(), ScalarType::int32,
                                             {1, c.vectors.heads, c.total_k(), c.columns});
  }
  for (std::size_t i = 0; i < c.predicate_tensors.size(); ++i) {
    const PredicateTensor& t = c.predicate_tensors[i];
    a.predicate.tensors.push_back({t.name, contiguous_view(p.predicate_tensors[i].data(),
                                                           ScalarType::int32, {t.rows, t.length})});
  }
  return a;
}

// Valid FlashMask vectors for every sequence of the case, [1, mask_heads, total_k, C] with
// rows local to each sequence: arbitrary intervals (random_intervals) on its Sq and all its
// keys (those past seqused_k too, which the kernels must ignore); zeros for an empty one.
dsl::IntervalVectors random_vectors(const Packed& c, int mask_heads) {
  std::vector<dsl::IntervalVectors> pieces;
  for (int s = 0; s < c.sequences(); ++s) {
    const int queries = c.seqlens_q[s], keys = c.seqlens_k[s];
    if (queries == 0 || keys == 0) {
      pieces.push_back(
          {c.vectors_causal, c.columns, 1, mask_heads, queries, keys,
           std::vector<std::int32_t>(static_cast<std::size_t>(mask_heads) * keys * c.columns, 0)});
    } else {
      pieces.push_back(dsl::random_intervals(c.vectors_causal, c.columns, 1, mask_heads, queries,
                                             keys, gpu_test::data_seed(c.seed) + s));
    }
  }
  return dsl::concat_keys(pieces);
}

// Sequence s's part of the case's vectors: its used keys, its Sq (the reference's layout);
// no vectors for the masks that have none.
dsl::IntervalVectors sequence_vectors(const Packed& c, int s) {
  if (c.mask != MaskKind::flashmask) return {};
  return dsl::key_range(c.vectors, c.cu(c.seqlens_k)[s], c.used(s), c.seqlens_q[s]);
}

// The host evaluator of the case's predicate, with its literals and tensors.
std::optional<PredicateEvaluator> evaluator_of(const Packed& c) {
  if (c.mask != MaskKind::predicate) return std::nullopt;
  const MaskSpec mask = c.forward_spec().mask;
  return PredicateEvaluator(parse_predicate(mask.predicate),
                            PredicateBindings{c.predicate_tensors, mask.scalars});
}

// Sequence s alone as a padded reference problem: its queries on its used keys; a FlashMask
// reads `vectors` (sequence_vectors) and a predicate `evaluator` with b = s, which must
// outlive the problem.
testing::Problem sequence_problem(const Packed& c, int s, const dsl::IntervalVectors& vectors,
                                  const std::optional<PredicateEvaluator>& evaluator) {
  testing::Problem p;
  p.seqlen_q = c.seqlens_q[s];
  p.seqlen_k = c.used(s);
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = p.head_dim_v = c.head_dim;
  p.softmax_scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  p.dtype = c.dtype;
  p.mask.kind = c.mask;
  p.mask.window_left = c.window_left;
  p.mask.window_right = c.window_right;
  p.score_mod.alibi_slopes = c.alibi_slopes;
  if (c.mask == MaskKind::flashmask) p.mask.intervals = &vectors;
  if (evaluator) {
    p.mask.predicate = &*evaluator;
    p.mask.predicate_batch = s;
  }
  return p;
}

// Rows [first, first + rows) of a packed [total, heads, dim] array.
template <class T>
std::vector<T> rows_of(const std::vector<T>& packed, int first, int rows, int width) {
  return {packed.begin() + static_cast<std::ptrdiff_t>(first) * width,
          packed.begin() + static_cast<std::ptrdiff_t>(first + rows) * width};
}

template <class T, class U>
void put_rows(std::vector<T>& packed, int first, int width, const std::vector<U>& rows) {
  std::copy(rows.begin(), rows.end(), packed.begin() + static_cast<std::ptrdiff_t>(first) * width);
}

// The float64 reference of the packed forward: each sequence's O and LSE, in the packed
// layouts (O [total_q, H, D], LSE [H, total_q]); a sequence without used keys gives O = 0 and
// LSE = -inf.
testing::Reference reference_forward(const Packed& c, const HostData& h) {
  const int tq = c.total_q(), qw = c.heads * c.head_dim, kw = c.kv_heads * c.head_dim;
  testing::Reference ref;
  ref.out.assign(static_cast<std::size_t>(tq) * qw, 0.0);
  ref.out_lowp.assign(ref.out.size(), 0.f);
  ref.lse.assign(static_cast<std::size_t>(tq) * c.heads, -std::numeric_limits<double>::infinity());
  const std::vector<int> cu_q = c.cu(c.seqlens_q), cu_k = c.cu(c.seqlens_k);
  const std::optional<PredicateEvaluator> evaluator = evaluator_of(c);
  for (int s = 0; s < c.sequences(); ++s) {
    const int rows = c.seqlens_q[s];
    if (rows == 0 || c.used(s) == 0) continue;
    const dsl::IntervalVectors vectors = sequence_vectors(c, s);
    const testing::Reference one = testing::reference_forward(
        sequence_problem(c, s, vectors, evaluator), rows_of(h.q, cu_q[s], rows, qw),
        rows_of(h.k, cu_k[s], c.used(s), kw), rows_of(h.v, cu_k[s], c.used(s), kw));
    put_rows(ref.out, cu_q[s], qw, one.out);
    put_rows(ref.out_lowp, cu_q[s], qw, one.out_lowp);
    for (int head = 0; head < c.heads; ++head) {
      std::copy_n(one.lse.begin() + static_cast<std::ptrdiff_t>(head) * rows, rows,
                  ref.lse.begin() + static_cast<std::ptrdiff_t>(head) * tq + cu_q[s]);
    }
  }
  return ref;
}

// The float64 reference gradients of the packed backward, sequence by sequence; keys past
// seqused_k and the queries of sequences without used keys get zero gradients.
testing::Gradients reference_backward(const Packed& c, const HostData& h) {
  const int qw = c.heads * c.head_dim, kw = c.kv_heads * c.head_dim;
  testing::Gradients g;
  g.dq.assign(h.q.size(), 0.0);
  g.dk.assign(h.k.size(), 0.0);
  g.dv.assign(h.v.size(), 0.0);
  g.dq_lowp.assign(h.q.size(), 0.f);
  g.dk_lowp.assign(h.k.size(), 0.f);
  g.dv_lowp.assign(h.v.size(), 0.f);
  const std::vector<int> cu_q = c.cu(c.seqlens_q), cu_k = c.cu(c.seqlens_k);
  const std::optional<PredicateEvaluator> evaluator = evaluator_of(c);
  for (int s = 0; s < c.sequences(); ++s) {
    const int rows = c.seqlens_q[s], keys = c.used(s);
    if (rows == 0 || keys == 0) continue;
    const dsl::IntervalVectors vectors = sequence_vectors(c, s);
    const testing::Gradients one = testing::reference_backward(
        sequence_problem(c, s, vectors, evaluator), rows_of(h.q, cu_q[s], rows, qw),
        rows_of(h.k, cu_k[s], keys, kw), rows_of(h.v, cu_k[s], keys, kw),
        rows_of(h.d_o, cu_q[s], rows, qw));
    put_rows(g.dq, cu_q[s], qw, one.dq);
    put_rows(g.dk, cu_k[s], kw, one.dk);
    put_rows(g.dv, cu_k[s], kw, one.dv);
    put_rows(g.dq_lowp, cu_q[s], qw, one.dq_lowp);
    put_rows(g.dk_lowp, cu_k[s], kw, one.dk_lowp);
    put_rows(g.dv_lowp, cu_k[s], kw, one.dv_lowp);
    g.dq_cancellation = std::max(g.dq_cancellation, one.dq_cancellation);
    g.dk_cancellation = std::max(g.dk_cancellation, one.dk_cancellation);
  }
  return g;
}

void check_comparison(const testing::Comparison& comparison) {
  INFO(comparison.summary);
  CHECK(comparison.passed);
}

void check_forward(const Packed& c) {
  INFO(c.describe());
  const HostData h = make_data(c);
  DeviceProblem p = upload(c, h);
  const jit::Kernel kernel = jit::compile(c.forward_spec());
  gpu_test::note_rows(kernel, KernelRole::forward, c.forward_row);
  kernel.forward(forward_args(c, p), nullptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  const std::vector<float> out = download(p.o, c.dtype);
  std::vector<float> lse(static_cast<std::size_t>(c.total_q()) * c.heads);
  p.lse.download(lse.data(), lse.size() * 4);

  const testing::Reference ref = reference_forward(c, h);
  check_comparison(testing::compare_output(out, ref, c.dtype));
  check_comparison(testing::compare_lse(lse, ref));
}

void check_backward(const Packed& c, bool deterministic) {
  INFO(c.describe() << (deterministic ? " deterministic" : " atomic"));
  const HostData h = make_data(c);
  DeviceProblem p = upload(c, h);
  const std::vector<AttentionSpec> specs = c.backward_specs(deterministic);
  const jit::Kernel forward = jit::compile(specs[0]);
  const jit::Kernel backward = jit::compile(specs[1]);
  gpu_test::note_rows(forward, KernelRole::forward, "");
  gpu_test::note_rows(backward, KernelRole::backward, c.backward_row);
  const ForwardArgs f = forward_args(c, p);
  forward.forward(f, nullptr);
  BackwardArgs b = gpu_test::backward_args_of(f);
  b.d_o = p.d_o.view;
  b.d_q = p.d_q.view;
  b.d_k = p.d_k.view;
  b.d_v = p.d_v.view;
  backward.backward(b, nullptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");

  const testing::Gradients ref = reference_backward(c, h);
  check_comparison(testing::compare_gradient("dq", download(p.d_q, c.dtype), ref.dq, ref.dq_lowp,
                                             c.dtype, ref.dq_cancellation));
  check_comparison(testing::compare_gradient("dk", download(p.d_k, c.dtype), ref.dk, ref.dk_lowp,
                                             c.dtype, ref.dk_cancellation));
  check_comparison(
      testing::compare_gradient("dv", download(p.d_v, c.dtype), ref.dv, ref.dv_lowp, c.dtype));
}

// The kernel families the device runs: sm80 everywhere, sm90a on an sm_90a device.
std::vector<std::string> families() {
  if (jit::current_device_arch() == Arch::sm_90a) return {"sm80", "sm90a"};
  WARN("not an sm_90a device: the sm90a family is not run on packed batches");
  return {"sm80"};
}

// Forces the case's forward and backward onto `family` by explicit tiles.
void force(Packed& c, const std::string& family) {
  if (family == "sm90a") {
    AttentionSpec spec = c.forward_spec();
    spec.tiles = {};
    c.forward_tiles = testing::sm90a_forward_spec(spec).tiles;
    c.backward_tiles = {64, 128, 12, TileLayout::warpgroups};
    c.forward_row = testing::kSm90aForwardRow;
    c.backward_row = "backward.sm90a";
    return;
  }
  const bool d64 = c.head_dim == 64;
  c.forward_tiles = d64 ? TileShape{64, 64, 4, TileLayout::q_registers}
                        : TileShape{128, 64, 8, TileLayout::q_registers};
  // The grid layout takes no predicate: those run on slabs at every head dim.
  const bool slabs = d64 || c.mask == MaskKind::predicate;
  c.backward_tiles = {64, 128, 8, slabs ? TileLayout::slabs : TileLayout::grid};
  c.forward_row = "forward.sm80";
  c.backward_row = slabs ? "backward_slabs.sm80" : "backward_grid.sm80";
}

// Ragged batches forced onto `family`: lengths that are not tile multiples, an empty sequence
// and one of length 1, keys of their own (Sq != Sk per sequence), seqused_k, GQA and MQA; each
// mask with each shape once, head dims 64 and 128 and both dtypes rotating.
std::vector<Packed> ragged_cases(const std::string& family) {
  struct Shape {
    std::vector<int> q, k, used;
    int heads, kv_heads;
  };
  const Shape shapes[] = {
      {{130, 0, 1, 257, 64}, {130, 0, 1, 257, 64}, {}, 4, 2},
      {{77, 1, 0, 300}, {190, 1, 33, 211}, {}, 4, 4},
      {{200, 45, 1, 0, 129}, {150, 45, 70, 9, 129}, {150, 30, 0, 9, 100}, 6, 1},
  };
  std::vector<Packed> cases;
  int i = 0;
  for (const MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::sliding_window}) {
    for (const Shape& shape : shapes) {
      Packed c;
      c.dtype = i % 4 < 2 ? DType::bf16 : DType::fp16;
      c.head_dim = i % 2 == 0 ? 64 : 128;
      c.mask = mask;
      c.seqlens_q = shape.q;
      c.seqlens_k = shape.k;
      c.seqused_k = shape.used;
      if (shape.q == shape.k && shape.used.empty()) {
        // Shared boundaries; ALiBi, whose distances are then the packed row's, with causal.
        c.mode = VarlenMode::shared;
        if (mask == MaskKind::causal) {
          for (int h = 0; h < shape.heads; ++h) c.alibi_slopes.push_back(0.5f / (h + 1));
        }
      }
      c.heads = shape.heads;
      c.kv_heads = shape.kv_heads;
      if (mask == MaskKind::sliding_window) {
        c.window_left = i == 7 ? -1 : 37;
        c.window_right = i == 8 ? -1 : 5;
      }
      c.seed = 4400 + i++;
      force(c, family);
      cases.push_back(c);
    }
  }
  return cases;
}

// The ragged batches of the mask cases: an empty sequence and one of length 1, lengths that
// are not tile multiples; shared boundaries, then keys of their own with seqused_k.
struct Ragged {
  std::vector<int> q, k, used;
  int heads, kv_heads;
};
const Ragged kRagged[] = {
    {{150, 0, 1, 263, 90}, {150, 0, 1, 263, 90}, {}, 4, 2},
    {{97, 1, 0, 320}, {180, 1, 40, 301}, {170, 1, 0, 290}, 4, 2},
};

// Case i of a mask on `shape`: bf16 or fp16 and head dims 128 or 64 rotating, shared
// boundaries where the keys are the queries' and all used.
Packed ragged_case(const Ragged& shape, MaskKind mask, int i, std::uint64_t seed) {
  Packed c;
  c.dtype = i % 3 == 2 ? DType::fp16 : DType::bf16;
  c.head_dim = i % 2 == 0 ? 128 : 64;
  c.mask = mask;
  c.seqlens_q = shape.q;
  c.seqlens_k = shape.k;
  c.seqused_k = shape.used;
  if (shape.q == shape.k && shape.used.empty()) c.mode = VarlenMode::shared;
  c.heads = shape.heads;
  c.kv_heads = shape.kv_heads;
  c.seed = seed;
  return c;
}

// Predicates inside ragged sequences, forced onto `family`: local q and k (a causal rule, a
// blockwise rule with a literal), the sequence's index b, the head h, and a tensor with a row
// per sequence (documents of 37 positions, shifted by the sequence's index).
std::vector<Packed> predicate_cases(const std::string& family) {
  const char* predicates[] = {"q>=k", "(q/48+k/48+b)%2==0||q==k", "h%2==0||q>=k",
                              "doc[q]==doc[k]&&k<=q+b"};
  std::vector<Packed> cases;
  int i = 0;
  for (const char* predicate : predicates) {
    for (const Ragged& shape : kRagged) {
      Packed c = ragged_case(shape, MaskKind::predicate, i, 4800 + i);
      ++i;
      c.predicate = predicate;
      if (std::string(predicate).find("doc") != std::string::npos) {
        PredicateTensor doc{"doc", c.sequences(), 0, {}};
        doc.length = std::max(*std::max_element(shape.q.begin(), shape.q.end()),
                              *std::max_element(shape.k.begin(), shape.k.end()));
        for (int s = 0; s < doc.rows; ++s) {
          for (int x = 0; x < doc.length; ++x) doc.values.push_back((x + 5 * s) / 37);
        }
        c.predicate_tensors.push_back(doc);
      }
      force(c, family);
      cases.push_back(c);
    }
  }
  return cases;
}

// FlashMask vectors inside ragged sequences, forced onto `family`: every arity (causal with 1
// and 2 columns, non-causal with 2 and 4), one mask head or one per KV head.
std::vector<Packed> flashmask_cases(const std::string& family) {
  std::vector<Packed> cases;
  int i = 0;
  for (const auto& [causal, columns] :
       {std::pair{true, 1}, std::pair{true, 2}, std::pair{false, 2}, std::pair{false, 4}}) {
    for (const Ragged& shape : kRagged) {
      Packed c = ragged_case(shape, MaskKind::flashmask, i, 4700 + i);
      c.vectors_causal = causal;
      c.columns = columns;
      c.vectors = random_vectors(c, i % 2 == 0 ? 1 : c.kv_heads);
      ++i;
      force(c, family);
      cases.push_back(c);
    }
  }
  return cases;
}

// Case i's forward spec and its backward's (deterministic for odd i), for CompileAhead.
std::vector<AttentionSpec> forward_and_backward_specs(const std::vector<Packed>& cases) {
  std::vector<AttentionSpec> specs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    specs.push_back(cases[i].forward_spec());
    for (const AttentionSpec& spec : cases[i].backward_specs(i % 2 == 1)) specs.push_back(spec);
  }
  return specs;
}

void check_forward_and_backward(const std::vector<Packed>& cases) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    check_forward(cases[i]);
    check_backward(cases[i], i % 2 == 1);
  }
}

}  // namespace

TEST_CASE("varlen FlashMask vectors inside the sequences match the reference, every family",
          "[gpu][varlen][flashmask][forward][backward]") {
  for (const std::string& family : families()) {
    const std::vector<Packed> cases = flashmask_cases(family);
    const gpu_test::CompileAhead ahead(forward_and_backward_specs(cases));
    check_forward_and_backward(cases);
  }
}

TEST_CASE("varlen predicates see each sequence's local q, k and index b, every family",
          "[gpu][varlen][predicate][forward][backward]") {
  for (const std::string& family : families()) {
    const std::vector<Packed> cases = predicate_cases(family);
    const gpu_test::CompileAhead ahead(forward_and_backward_specs(cases));
    // With the partial tiles' stored bits, then without (ATTNJIT_PREDICATE_BITS_MIB=0: the
    // attention kernels find the sequences and evaluate the predicate per element).
    for (const char* budget : {static_cast<const char*>(nullptr), "0"}) {
      INFO("ATTNJIT_PREDICATE_BITS_MIB=" << (budget != nullptr ? budget : "default"));
      const testing::EnvOverride bits("ATTNJIT_PREDICATE_BITS_MIB", budget);
      check_forward_and_backward(cases);
    }
  }
}

TEST_CASE("varlen forward matches the reference sequence by sequence, every family",
          "[gpu][varlen][forward]") {
  for (const std::string& family : families()) {
    const std::vector<Packed> cases = ragged_cases(family);
    std::vector<AttentionSpec> specs;
    for (const Packed& c : cases) specs.push_back(c.forward_spec());
    const gpu_test::CompileAhead ahead(specs);
    for (const Packed& c : cases) check_forward(c);
  }
}

TEST_CASE("varlen backward matches the reference gradients, atomic and deterministic",
          "[gpu][varlen][backward]") {
  for (const std::string& family : families()) {
    const std::vector<Packed> cases = ragged_cases(family);
    std::vector<AttentionSpec> specs;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      for (const AttentionSpec& spec : cases[i].backward_specs(i % 2 == 1)) specs.push_back(spec);
    }
    const gpu_test::CompileAhead ahead(specs);
    for (std::size_t i = 0; i < cases.size(); ++i) check_backward(cases[i], i % 2 == 1);
  }
}

TEST_CASE("varlen deterministic backward is bitwise repeatable", "[gpu][varlen][backward]") {
  Packed c;
  c.dtype = DType::bf16;
  c.mask = MaskKind::causal;
  c.seqlens_q = {300, 1, 0, 171};
  c.seqlens_k = {280, 17, 5, 171};
  c.heads = 4;
  c.kv_heads = 1;
  c.seed = 4500;
  const HostData h = make_data(c);
  const std::vector<AttentionSpec> specs = c.backward_specs(true);
  const jit::Kernel forward = jit::compile(specs[0]);
  const jit::Kernel backward = jit::compile(specs[1]);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    DeviceProblem p = upload(c, h);
    const ForwardArgs f = forward_args(c, p);
    forward.forward(f, nullptr);
    BackwardArgs b = gpu_test::backward_args_of(f);
    b.d_o = p.d_o.view;
    b.d_q = p.d_q.view;
    b.d_k = p.d_k.view;
    b.d_v = p.d_v.view;
    backward.backward(b, nullptr);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<float> all = download(p.d_q, c.dtype);
    for (const DevicePacked* t : {&p.d_k, &p.d_v}) {
      const std::vector<float> part = download(*t, c.dtype);
      all.insert(all.end(), part.begin(), part.end());
    }
    runs.push_back(std::move(all));
  }
  CHECK(gpu_test::same_bits(runs[0], runs[1]));
}

TEST_CASE("varlen: two small specs (the compute-sanitizer runs)",
          "[gpu][varlen][forward][backward][sanitizer]") {
  Packed causal;
  causal.dtype = DType::bf16;
  causal.head_dim = 128;
  causal.mask = MaskKind::causal;
  causal.seqlens_q = {70, 0, 1, 90};
  causal.seqlens_k = {100, 3, 1, 60};
  causal.seqused_k = {90, 3, 0, 60};
  causal.heads = 2;
  causal.kv_heads = 1;
  causal.seed = 4600;
  check_forward(causal);
  Packed window = causal;
  window.dtype = DType::fp16;
  window.head_dim = 64;
  window.mask = MaskKind::sliding_window;
  window.window_left = 20;
  window.window_right = 3;
  window.seed = 4601;
  check_backward(window, true);
  Packed vectors = causal;
  vectors.mask = MaskKind::flashmask;
  vectors.columns = 4;
  vectors.seed = 4602;
  vectors.vectors = random_vectors(vectors, 1);
  check_forward(vectors);
  check_backward(vectors, false);
  Packed predicate = causal;
  predicate.mask = MaskKind::predicate;
  predicate.predicate = "(q/48+k/48+b)%2==0||q==k";
  predicate.seed = 4603;
  check_forward(predicate);
  check_backward(predicate, true);
}

TEST_CASE("validate_mask reports bad sequence boundaries", "[gpu][varlen]") {
  // 10 packed queries and 12 keys, 2 heads; each case breaks one rule.
  Packed c;
  c.mask = MaskKind::causal;
  c.seqlens_q = {4, 6};
  c.seqlens_k = {5, 7};
  c.heads = c.kv_heads = 2;
  const HostData h = make_data(c);
  DeviceProblem p = upload(c, h);
  const jit::Kernel kernel = jit::compile(c.forward_spec());
  struct Bad {
    std::vector<int> cu_q, cu_k, used;
    int max_q, max_k;
    std::string message;
  };
  const Bad cases[] = {
      {{1, 4, 10},
       {0, 5, 12},
       {},
       6,
       7,
       "cu_seqlens_q[0]: got '1'; accepted: 0 (the first sequence starts at 0)"},
      {{0, 6, 4, 10},
       {0, 5, 5, 12},
       {},
       10,
       12,
       "cu_seqlens_q[2]: got '4'; accepted: >= cu_seqlens_q[1] = 6 (boundaries never decrease)"},
      {{0, 4, 10},
       {0, 5, 11},
       {},
       6,
       7,
       "cu_seqlens_k[2]: got '11'; accepted: 12 (total_k: the packed rows of k; the last "
       "boundary is the total)"},
      {{0, 4, 9},
       {0, 5, 12},
       {},
       6,
       7,
       "cu_seqlens_q[2]: got '9'; accepted: 10 (total_q: the packed rows of q; the last "
       "boundary is the total)"},
      {{0, 3, 10},
       {0, 5, 12},
       {},
       5,
       7,
       "max_seqlen_q: got '5'; accepted: at least 7, the length of sequence 1 (cu_seqlens_q[2] "
       "- cu_seqlens_q[1])"},
      {{0, 4, 10},
       {0, 2, 12},
       {},
       6,
       7,
       "max_seqlen_k: got '7'; accepted: at least 10, the length of sequence 1 (cu_seqlens_k[2] "
       "- cu_seqlens_k[1])"},
      {{0, 4, 10},
       {0, 5, 12},
       {5, 8},
       6,
       7,
       "seqused_k[1]: got '8'; accepted: 0 to 7 (the keys of sequence 1)"},
      {{0, 4, 10},
       {0, 5, 12},
       {-1, 7},
       6,
       7,
       "seqused_k[0]: got '-1'; accepted: 0 to 5 (the keys of sequence 0)"},
  };
  for (const Bad& bad : cases) {
    INFO(fmt::format("cu_seqlens_q=[{}] cu_seqlens_k=[{}] seqused_k=[{}]", fmt::join(bad.cu_q, ","),
                     fmt::join(bad.cu_k, ","), fmt::join(bad.used, ",")));
    const DeviceBoundaries boundaries =
        upload_boundaries(bad.cu_q, bad.cu_k, bad.used, bad.max_q, bad.max_k);
    ForwardArgs a = forward_args(c, p);
    a.varlen = boundaries.args;
    a.validate_mask = true;
    CHECK(testing::error_text([&] { kernel.forward(a, nullptr); }) == bad.message);
  }
  // Good boundaries pass the check, and so does the backward with the same.
  ForwardArgs a = forward_args(c, p);
  a.validate_mask = true;
  CHECK(testing::error_text([&] { kernel.forward(a, nullptr); }) == "no error");
  const std::vector<AttentionSpec> specs = c.backward_specs(false);
  const jit::Kernel backward = jit::compile(specs[1]);
  BackwardArgs b = gpu_test::backward_args_of(a);
  b.d_o = p.d_o.view;
  b.d_q = p.d_q.view;
  b.d_k = p.d_k.view;
  b.d_v = p.d_v.view;
  CHECK(testing::error_text([&] { backward.backward(b, nullptr); }) == "no error");
  const DeviceBoundaries decreasing = upload_boundaries({0, 4, 10}, {0, 6, 5}, {}, 6, 7);
  b.varlen = decreasing.args;
  CHECK(testing::error_text([&] { backward.backward(b, nullptr); }) ==
        "cu_seqlens_k[2]: got '5'; accepted: >= cu_seqlens_k[1] = 6 (boundaries never decrease)");
}
