// Running and checking one GPU forward case.
#include "gpu/gpu_case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <catch2/catch.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string_view>
#include <utility>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "support/half_round.hpp"

namespace attnjit::gpu_test {

Case make_case(MaskSpec mask, DType dtype, int head_dim, int batch, int heads, int kv_heads,
               int seqlen_q, int seqlen_k, std::uint64_t seed) {
  Case c{.batch = batch,
         .heads = heads,
         .kv_heads = kv_heads,
         .seqlen_q = seqlen_q,
         .seqlen_k = seqlen_k,
         .seed = seed};
  c.spec.dtype = dtype;
  c.spec.head_dim_qk = c.spec.head_dim_v = head_dim;
  c.spec.mask = std::move(mask);
  c.spec.return_lse = true;
  return c;
}

dsl::IntervalVectors four_column_intervals(
    int seqlen, const std::function<std::array<std::int32_t, 4>(int)>& per_key) {
  dsl::IntervalVectors m{false, 4, 1, 1, seqlen, seqlen, {}};
  for (int j = 0; j < seqlen; ++j) {
    const std::array<std::int32_t, 4> column = per_key(j);
    m.data.insert(m.data.end(), column.begin(), column.end());
  }
  return m;
}

BackwardArgs backward_args_of(const ForwardArgs& fwd) {
  BackwardArgs bwd;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.o = fwd.o;
  bwd.lse = fwd.lse;
  bwd.startend_row_indices = fwd.startend_row_indices;
  bwd.softmax_scale = fwd.softmax_scale;
  bwd.window_left = fwd.window_left;
  bwd.window_right = fwd.window_right;
  bwd.validate_mask = fwd.validate_mask;
  bwd.softcap = fwd.softcap;
  bwd.alibi_slopes = fwd.alibi_slopes;
  bwd.sinks = fwd.sinks;
  bwd.predicate = fwd.predicate;
  bwd.varlen = fwd.varlen;
  return bwd;
}

Case predicate_case(const std::string& text, std::vector<PredicateTensor> tensors, DType dtype,
                    int head_dim, int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k,
                    std::uint64_t seed) {
  std::vector<std::int32_t> scalars;
  MaskSpec mask{MaskKind::predicate};
  mask.predicate = to_string(lift_literals(parse_predicate(text), scalars));
  Case c =
      make_case(std::move(mask), dtype, head_dim, batch, heads, kv_heads, seqlen_q, seqlen_k, seed);
  c.predicate.scalars = scalars;
  c.predicate.tensors = std::move(tensors);
  return c;
}

namespace {

std::mutex rows_mutex;
std::map<std::string, int> rows_tally;

}  // namespace

void note_rows(const jit::Kernel& kernel, KernelRole role, const std::string& expect_row) {
  const KernelPlan& plan = *jit::detail::set_of(kernel).plan;
  const KernelDesc* main = plan.find(role);
  REQUIRE(main != nullptr);
  if (!expect_row.empty()) {
    INFO(to_string(kernel.spec()));
    REQUIRE(main->row == expect_row);
  }
  const std::lock_guard lock(rows_mutex);
  for (const KernelDesc& k : plan.kernels) {
    if (k.role == KernelRole::forward || k.role == KernelRole::backward ||
        k.role == KernelRole::backward_dq) {
      ++rows_tally[k.row];
    }
  }
}

namespace {

constexpr std::uint8_t kPoison = 0xff;  // 0xffff is NaN in both bf16 and fp16

// A [B, S, H, D] tensor in device memory, optionally with padded rows and batches.
struct DeviceTensor {
  runtime::DeviceBuffer buffer;
  TensorView view;
};

DeviceTensor make_tensor(DType dtype, int b, int s, int h, int d, bool padded) {
  const std::int64_t head_stride = d;
  const std::int64_t row_stride = static_cast<std::int64_t>(h) * d + (padded ? 24 : 0);
  const std::int64_t batch_stride = s * row_stride + (padded ? 40 : 0);
  const std::size_t elements =
      static_cast<std::size_t>(std::max<std::int64_t>(b * batch_stride, 1));
  DeviceTensor t{runtime::DeviceBuffer(elements * 2), {}};
  t.buffer.fill_bytes(kPoison);
  t.view.data = t.buffer.data();
  t.view.dtype = dtype == DType::bf16 ? ScalarType::bf16 : ScalarType::fp16;
  t.view.rank = 4;
  t.view.shape = {b, s, h, d};
  t.view.stride = {batch_stride, row_stride, head_stride, 1};
  return t;
}

std::uint16_t to_bits(DType dtype, float value) {
  return dtype == DType::bf16 ? testing::float_to_bf16_bits(value)
                              : testing::float_to_fp16_bits(value);
}

float from_bits(DType dtype, std::uint16_t bits) {
  return dtype == DType::bf16 ? testing::bf16_bits_to_float(bits)
                              : testing::fp16_bits_to_float(bits);
}

// Whether the tensor's elements fill its buffer in order (no padding, not empty).
bool contiguous(const DeviceTensor& t) {
  const auto& sh = t.view.shape;
  const auto& st = t.view.stride;
  return st[3] == 1 && st[2] == sh[3] && st[1] == sh[2] * sh[3] && st[0] == sh[1] * st[1] &&
         static_cast<std::size_t>(sh[0] * st[0]) * 2 == t.buffer.bytes();
}

// Scatters contiguous [B, S, H, D] values into the tensor's strided layout (padding poisoned).
void upload(DeviceTensor& t, DType dtype, const std::vector<float>& values) {
  std::vector<std::uint16_t> host(t.buffer.bytes() / 2, 0xffff);
  if (contiguous(t)) {
    for (std::size_t i = 0; i < values.size(); ++i) host[i] = to_bits(dtype, values[i]);
    t.buffer.upload(host.data(), host.size() * 2);
    return;
  }
  const auto& sh = t.view.shape;
  const auto& st = t.view.stride;
  std::size_t i = 0;
  for (std::int64_t b = 0; b < sh[0]; ++b)
    for (std::int64_t s = 0; s < sh[1]; ++s)
      for (std::int64_t h = 0; h < sh[2]; ++h)
        for (std::int64_t d = 0; d < sh[3]; ++d)
          host[b * st[0] + s * st[1] + h * st[2] + d] = to_bits(dtype, values[i++]);
  t.buffer.upload(host.data(), host.size() * 2);
}

std::vector<float> download(const DeviceTensor& t, DType dtype, bool& padding_intact) {
  std::vector<std::uint16_t> host(t.buffer.bytes() / 2);
  t.buffer.download(host.data(), host.size() * 2);
  if (contiguous(t)) {
    padding_intact = true;
    std::vector<float> values(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) values[i] = from_bits(dtype, host[i]);
    return values;
  }
  std::vector<bool> inside(host.size(), false);
  std::vector<float> values;
  const auto& sh = t.view.shape;
  const auto& st = t.view.stride;
  for (std::int64_t b = 0; b < sh[0]; ++b)
    for (std::int64_t s = 0; s < sh[1]; ++s)
      for (std::int64_t h = 0; h < sh[2]; ++h)
        for (std::int64_t d = 0; d < sh[3]; ++d) {
          const std::int64_t index = b * st[0] + s * st[1] + h * st[2] + d;
          inside[index] = true;
          values.push_back(from_bits(dtype, host[index]));
        }
  padding_intact = true;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (!inside[i] && host[i] != 0xffff) padding_intact = false;
  }
  return values;
}

// The case's predicate tensors in device memory and the launch arguments naming them.
struct DevicePredicate {
  std::vector<runtime::DeviceBuffer> buffers;
  PredicateArgs args;
};

DevicePredicate upload_predicate(const Case& c) {
  DevicePredicate out;
  out.args.scalars = c.predicate.scalars;
  for (const PredicateTensor& t : c.predicate.tensors) {
    out.buffers.emplace_back(std::max<std::size_t>(t.values.size(), 1) * 4);
    out.buffers.back().upload(t.values.data(), t.values.size() * 4);
    out.args.tensors.push_back({t.name, contiguous_view(out.buffers.back().data(),
                                                        ScalarType::int32, {t.rows, t.length})});
  }
  return out;
}

std::vector<float> random_values(std::size_t count, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> out(count);
  for (float& x : out) x = testing::round_to(dtype, normal(rng));
  return out;
}

std::uint64_t parse_run_seed() {
  const char* text = std::getenv("ATTNJIT_TEST_SEED");
  if (text == nullptr || *text == 0) return 0;
  const std::string_view value(text);
  if (value == "random") {
    std::random_device device;
    const std::uint64_t drawn = (std::uint64_t{device()} << 32) | device();
    return drawn == 0 ? 1 : drawn;
  }
  std::uint64_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (error != std::errc() || end != value.data() + value.size()) {
    throw Error(
        fmt::format("ATTNJIT_TEST_SEED: got '{}'; accepted: an unsigned 64-bit number "
                    "(0: the cases' fixed seeds) or 'random'",
                    value));
  }
  return parsed;
}

}  // namespace

std::uint64_t run_seed() {
  static const std::uint64_t value = parse_run_seed();
  return value;
}

std::uint64_t data_seed(std::uint64_t fixed) {
  const std::uint64_t run = run_seed();
  if (run == 0) return fixed;
  // splitmix64 of the pair: neighbouring fixed seeds get unrelated streams.
  std::uint64_t z = fixed + 0x9e3779b97f4a7c15ull * (run | 1) + run;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string Case::describe() const {
  std::string inputs;
  if (spec.mask.kind == MaskKind::predicate) {
    inputs = fmt::format(" scalars=[{}]", fmt::join(predicate.scalars, ","));
    for (const PredicateTensor& t : predicate.tensors) {
      inputs += fmt::format(" {}=[{}x{}]", t.name, t.rows, t.length);
    }
  }
  return fmt::format(
      "{} | B={} H={} Hkv={} Sq={} Sk={} window=({},{}) mask_heads={} vectors_offset={} "
      "padded={} seed={} run_seed={} softcap={} alibi_slopes=[{}] sinks=[{}]{}",
      to_string(spec), batch, heads, kv_heads, seqlen_q, seqlen_k, window_left, window_right,
      intervals ? intervals->heads : 0, intervals_offset, padded_strides, seed, run_seed(),
      score_mod.softcap, fmt::join(score_mod.alibi_slopes, ", "), fmt::join(sinks, ", "), inputs);
}

namespace {

// The slopes and the sinks on the device (each empty without its flag) and the arguments that
// name them.
struct DeviceScoreMod {
  runtime::DeviceBuffer slopes, sinks;
  float softcap = 0;
  TensorView slopes_view, sinks_view;
};

// `values` as an fp32 [size] device tensor in `buffer`; an empty view for none.
TensorView upload_vector(const std::vector<float>& values, runtime::DeviceBuffer& buffer) {
  if (values.empty()) return {};
  buffer = runtime::DeviceBuffer(values.size() * 4);
  buffer.upload(values.data(), values.size() * 4);
  return contiguous_view(buffer.data(), ScalarType::fp32,
                         {static_cast<std::int64_t>(values.size())});
}

DeviceScoreMod upload_score_mod(const Case& c) {
  DeviceScoreMod out;
  out.softcap = c.score_mod.softcap;
  out.slopes_view = upload_vector(c.score_mod.alibi_slopes, out.slopes);
  out.sinks_view = upload_vector(c.sinks, out.sinks);
  return out;
}

}  // namespace

Inputs make_inputs(const Case& c) {
  std::mt19937_64 rng(data_seed(c.seed));
  Inputs in;
  const std::size_t dq = c.spec.head_dim_qk, dv = c.spec.head_dim_v;
  in.q = random_values(static_cast<std::size_t>(c.batch) * c.seqlen_q * c.heads * dq, c.spec.dtype,
                       rng);
  in.k = random_values(static_cast<std::size_t>(c.batch) * c.seqlen_k * c.kv_heads * dq,
                       c.spec.dtype, rng);
  in.v = random_values(static_cast<std::size_t>(c.batch) * c.seqlen_k * c.kv_heads * dv,
                       c.spec.dtype, rng);
  return in;
}

AttentionSpec forward_spec(const Case& c) {
  AttentionSpec spec = c.spec;
  spec.return_lse = true;
  return spec;
}

std::vector<AttentionSpec> backward_specs(const Case& c, bool deterministic) {
  AttentionSpec forward = forward_spec(c);
  // The case's tiles, if any, are the backward's; the forward takes its own.
  forward.tiles = {};
  AttentionSpec backward = c.spec;
  backward.return_lse = false;
  backward.direction = Direction::backward;
  backward.deterministic = deterministic;
  return {forward, backward};
}

std::vector<AttentionSpec> backward_specs(const std::vector<Case>& cases,
                                          std::initializer_list<bool> modes) {
  std::vector<AttentionSpec> specs;
  for (const Case& c : cases) {
    for (bool deterministic : modes) {
      for (AttentionSpec& spec : backward_specs(c, deterministic)) specs.push_back(std::move(spec));
    }
  }
  return specs;
}

Outputs run_on_gpu(const Case& c, const Inputs& in, bool reference_kernel) {
  const DType dtype = c.spec.dtype;
  const int dq = c.spec.head_dim_qk, dv = c.spec.head_dim_v;
  DeviceTensor q = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dq, c.padded_strides);
  DeviceTensor k = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dq, c.padded_strides);
  DeviceTensor v = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dv, c.padded_strides);
  DeviceTensor o = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dv, c.padded_strides);
  upload(q, dtype, in.q);
  upload(k, dtype, in.k);
  upload(v, dtype, in.v);

  const std::size_t lse_count = static_cast<std::size_t>(c.batch) * c.heads * c.seqlen_q;
  runtime::DeviceBuffer lse(std::max<std::size_t>(lse_count, 1) * 4);
  lse.fill_bytes(kPoison);
  runtime::DeviceBuffer vectors;

  ForwardArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.o = o.view;
  args.lse = contiguous_view(lse.data(), ScalarType::fp32, {c.batch, c.heads, c.seqlen_q});
  args.window_left = c.window_left;
  args.window_right = c.window_right;
  const DeviceScoreMod score_mod = upload_score_mod(c);
  args.softcap = score_mod.softcap;
  args.alibi_slopes = score_mod.slopes_view;
  args.sinks = score_mod.sinks_view;
  if (c.intervals) {
    const dsl::IntervalVectors& m = *c.intervals;
    std::vector<std::int32_t> shifted(c.intervals_offset, -1);
    shifted.insert(shifted.end(), m.data.begin(), m.data.end());
    vectors = runtime::DeviceBuffer(shifted.size() * 4);
    vectors.upload(shifted.data(), shifted.size() * 4);
    args.startend_row_indices =
        contiguous_view(static_cast<std::int32_t*>(vectors.data()) + c.intervals_offset,
                        ScalarType::int32, {m.batch, m.heads, m.seqlen_k, m.columns});
  }
  const DevicePredicate predicate = upload_predicate(c);
  args.predicate = predicate.args;
  const AttentionSpec spec = forward_spec(c);
  const jit::Kernel kernel = reference_kernel ? jit::compile_reference(spec) : jit::compile(spec);
  if (!reference_kernel) note_rows(kernel, KernelRole::forward, c.expect_row);
  kernel.forward(args, nullptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");

  Outputs out;
  out.out = download(o, dtype, out.padding_intact);
  out.lse.resize(lse_count);
  lse.download(out.lse.data(), lse_count * 4);
  return out;
}

namespace {

// `evaluator` keeps the predicate's evaluator alive while the problem points to it.
testing::Problem problem_of(const Case& c, std::optional<PredicateEvaluator>& evaluator) {
  testing::Problem p;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.spec.head_dim_qk;
  p.head_dim_v = c.spec.head_dim_v;
  p.softmax_scale = 1.f / std::sqrt(static_cast<float>(c.spec.head_dim_qk));
  p.dtype = c.spec.dtype;
  p.mask.kind = c.spec.mask.kind;
  p.mask.window_left = c.window_left;
  p.mask.window_right = c.window_right;
  p.mask.intervals = c.intervals ? &*c.intervals : nullptr;
  p.score_mod = c.score_mod;
  p.sinks = c.sinks;
  if (c.spec.mask.kind == MaskKind::predicate) {
    evaluator.emplace(parse_predicate(c.spec.mask.predicate), c.predicate);
    p.mask.predicate = &*evaluator;
  }
  return p;
}

}  // namespace

testing::Reference reference_of(const Case& c, const Inputs& in) {
  std::optional<PredicateEvaluator> evaluator;
  return testing::reference_forward(problem_of(c, evaluator), in.q, in.k, in.v);
}

testing::Gradients reference_gradients_of(const Case& c, const Inputs& in,
                                          const std::vector<float>& d_o) {
  std::optional<PredicateEvaluator> evaluator;
  return testing::reference_backward(problem_of(c, evaluator), in.q, in.k, in.v, d_o);
}

std::vector<float> make_d_o(const Case& c) {
  std::mt19937_64 rng(data_seed(c.seed) ^ 0x5eedd0ull);
  return random_values(static_cast<std::size_t>(c.batch) * c.seqlen_q * c.heads * c.spec.head_dim_v,
                       c.spec.dtype, rng);
}

BackwardOutputs run_backward_on_gpu(const Case& c, const Inputs& in, const std::vector<float>& d_o,
                                    bool deterministic) {
  const DType dtype = c.spec.dtype;
  const int dq = c.spec.head_dim_qk, dv = c.spec.head_dim_v;
  const bool padded = c.padded_strides;
  DeviceTensor q = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dq, padded);
  DeviceTensor k = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dq, padded);
  DeviceTensor v = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dv, padded);
  DeviceTensor o = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dv, padded);
  DeviceTensor grad_o = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dv, padded);
  DeviceTensor grad_q = make_tensor(dtype, c.batch, c.seqlen_q, c.heads, dq, padded);
  DeviceTensor grad_k = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dq, padded);
  DeviceTensor grad_v = make_tensor(dtype, c.batch, c.seqlen_k, c.kv_heads, dv, padded);
  upload(q, dtype, in.q);
  upload(k, dtype, in.k);
  upload(v, dtype, in.v);
  upload(grad_o, dtype, d_o);
  const std::size_t lse_count = static_cast<std::size_t>(c.batch) * c.heads * c.seqlen_q;
  runtime::DeviceBuffer lse(std::max<std::size_t>(lse_count, 1) * 4);
  lse.fill_bytes(kPoison);
  runtime::DeviceBuffer vectors;
  TensorView vector_view;
  if (c.intervals) {
    const dsl::IntervalVectors& m = *c.intervals;
    vectors = runtime::DeviceBuffer(m.data.size() * 4);
    vectors.upload(m.data.data(), m.data.size() * 4);
    vector_view = contiguous_view(vectors.data(), ScalarType::int32,
                                  {m.batch, m.heads, m.seqlen_k, m.columns});
  }
  const TensorView lse_view =
      contiguous_view(lse.data(), ScalarType::fp32, {c.batch, c.heads, c.seqlen_q});
  const DeviceScoreMod score_mod = upload_score_mod(c);

  ForwardArgs fwd;
  fwd.q = q.view;
  fwd.k = k.view;
  fwd.v = v.view;
  fwd.o = o.view;
  fwd.lse = lse_view;
  fwd.startend_row_indices = vector_view;
  fwd.window_left = c.window_left;
  fwd.window_right = c.window_right;
  fwd.softcap = score_mod.softcap;
  fwd.alibi_slopes = score_mod.slopes_view;
  fwd.sinks = score_mod.sinks_view;
  const DevicePredicate predicate = upload_predicate(c);
  fwd.predicate = predicate.args;
  const std::vector<AttentionSpec> specs = backward_specs(c, deterministic);
  const jit::Kernel forward = jit::compile(specs[0]);
  note_rows(forward, KernelRole::forward, "");
  forward.forward(fwd, nullptr);

  BackwardArgs bwd = backward_args_of(fwd);
  bwd.d_o = grad_o.view;
  bwd.d_q = grad_q.view;
  bwd.d_k = grad_k.view;
  bwd.d_v = grad_v.view;
  // The sinks' gradient lands in a poisoned buffer: every value must be written.
  runtime::DeviceBuffer grad_sinks;
  if (!c.sinks.empty()) {
    grad_sinks = runtime::DeviceBuffer(c.sinks.size() * 4);
    grad_sinks.fill_bytes(kPoison);
    bwd.d_sinks = contiguous_view(grad_sinks.data(), ScalarType::fp32,
                                  {static_cast<std::int64_t>(c.sinks.size())});
  }
  const jit::Kernel backward = jit::compile(specs[1]);
  note_rows(backward, KernelRole::backward, c.expect_row);
  backward.backward(bwd, nullptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");

  BackwardOutputs out;
  bool intact = true;
  out.dq = download(grad_q, dtype, intact);
  out.padding_intact = intact;
  out.dk = download(grad_k, dtype, intact);
  out.padding_intact = out.padding_intact && intact;
  out.dv = download(grad_v, dtype, intact);
  out.padding_intact = out.padding_intact && intact;
  if (!c.sinks.empty()) {
    out.d_sinks.resize(c.sinks.size());
    grad_sinks.download(out.d_sinks.data(), out.d_sinks.size() * 4);
  }
  return out;
}

namespace {

/// A problem shape of the sweeps.
struct Shape {
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
};

/// A mask of the sweeps: its structure, window and, for FlashMask, which vectors to draw.
struct MaskCase {
  MaskSpec mask;
  int window_left, window_right;
  int kind = 0;  // 0 index mask, 1 documents, 2 random intervals
};

/// The case of one sweep point (returning LSE), before its vectors and modifiers.
Case sweep_case(DType dtype, int head_dim, const MaskCase& mc, const Shape& s, std::uint64_t seed) {
  Case c = make_case(mc.mask, dtype, head_dim, s.batch, s.heads, s.kv_heads, s.seqlen_q, s.seqlen_k,
                     seed);
  c.window_left = mc.window_left;
  c.window_right = mc.window_right;
  return c;
}

}  // namespace

std::vector<Case> sweep_cases() {
  // Lengths that are not tile multiples, Sq != Sk both ways, MHA / GQA / MQA.
  const Shape shapes[] = {{2, 4, 4, 100, 100}, {1, 4, 2, 257, 129}, {2, 4, 1, 130, 300},
                          {1, 2, 2, 333, 333}, {2, 6, 3, 17, 70},   {1, 4, 4, 1, 65}};
  const MaskCase masks[] = {
      {{MaskKind::none, false, 0}, -1, 0, 0},
      {{MaskKind::causal, false, 0}, -1, 0, 0},
      {{MaskKind::sliding_window, false, 0}, 37, 0, 0},
      {{MaskKind::sliding_window, false, 0}, 20, 11, 0},
      {{MaskKind::flashmask, true, 1}, -1, 0, 1},
      {{MaskKind::flashmask, true, 2}, -1, 0, 2},
      {{MaskKind::flashmask, false, 2}, -1, 0, 1},
      {{MaskKind::flashmask, false, 4}, -1, 0, 2},
  };
  std::vector<Case> cases;
  std::uint64_t seed = 1000;
  int rotation = 0;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {32, 64, 96, 128, 192, 256}) {
      for (const MaskCase& mc : masks) {
        for (int repeat = 0; repeat < 2; ++repeat) {
          const Shape& s = shapes[rotation++ % std::size(shapes)];
          Case c = sweep_case(dtype, head_dim, mc, s, ++seed);
          c.padded_strides = rotation % 3 == 0;
          if (mc.kind != 0) {
            const int mask_heads = rotation % 2 == 0 ? 1 : s.kv_heads;
            if (mc.kind == 2 || s.seqlen_q != s.seqlen_k) {
              c.intervals =
                  dsl::random_intervals(mc.mask.causal, mc.mask.columns, s.batch, mask_heads,
                                        s.seqlen_q, s.seqlen_k, data_seed(seed));
            } else {
              std::vector<dsl::IntervalVectors> samples;
              for (int b = 0; b < s.batch; ++b) {
                samples.push_back(dsl::broadcast_heads(
                    dsl::random_documents(mc.mask.causal, s.seqlen_q, 1, 5, data_seed(seed + b)),
                    mask_heads));
              }
              c.intervals = dsl::stack(samples);
            }
          }
          cases.push_back(std::move(c));
        }
      }
    }
  }
  return cases;
}

std::vector<float> alibi_slopes(int heads) {
  std::vector<float> slopes(heads);
  for (int i = 1; i <= heads; ++i) slopes[i - 1] = std::exp2(-8.0f * i / heads);
  return slopes;
}

std::vector<Case> score_mod_cases() {
  // Lengths that are not tile multiples, Sq != Sk both ways, MHA / GQA / MQA; five shapes
  // against four masks, so that each mask meets every shape.
  const Shape shapes[] = {{2, 4, 2, 200, 200},
                          {1, 4, 1, 257, 129},
                          {2, 4, 4, 130, 300},
                          {1, 6, 2, 333, 333},
                          {1, 2, 1, 65, 190}};
  const MaskCase masks[] = {{{MaskKind::none, false, 0}, -1, 0},
                            {{MaskKind::causal, false, 0}, -1, 0},
                            {{MaskKind::sliding_window, false, 0}, 37, 5},
                            {{MaskKind::flashmask, true, 1}, -1, 0}};
  const std::pair<bool, bool> modifiers[] = {{true, false}, {false, true}, {true, true}};
  std::vector<Case> cases;
  std::uint64_t seed = 5000;
  int rotation = 0;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      for (const auto& [softcap, alibi] : modifiers) {
        for (const MaskCase& mc : masks) {
          const Shape& s = shapes[rotation++ % std::size(shapes)];
          Case c = sweep_case(dtype, head_dim, mc, s, ++seed);
          c.spec.softcap = softcap;
          c.spec.alibi = alibi;
          // Scores are about N(0, 1): a cap of 1.5 bends most of them, 5 only the tails.
          if (softcap) c.score_mod.softcap = rotation % 2 == 0 ? 1.5f : 5.0f;
          if (alibi) {
            c.score_mod.alibi_slopes = alibi_slopes(s.heads);
            // Negative slopes favour distant keys and give rows past Sq large positive biases.
            if (rotation % 3 == 0) {
              for (float& slope : c.score_mod.alibi_slopes) slope = -slope;
            }
          }
          if (mc.mask.kind == MaskKind::flashmask) {
            if (s.seqlen_q != s.seqlen_k) {
              c.intervals = dsl::random_intervals(true, 1, s.batch, 1, s.seqlen_q, s.seqlen_k,
                                                  data_seed(seed));
            } else {
              std::vector<dsl::IntervalVectors> samples;
              for (int b = 0; b < s.batch; ++b) {
                samples.push_back(
                    dsl::random_documents(true, s.seqlen_q, 1, 5, data_seed(seed + b)));
              }
              c.intervals = dsl::stack(samples);
            }
          }
          cases.push_back(std::move(c));
        }
      }
    }
  }
  return cases;
}

namespace {

bool parse_exhaustive() {
  const char* text = std::getenv("ATTNJIT_GPU_EXHAUSTIVE");
  if (text == nullptr || *text == 0 || std::string_view(text) == "0") return false;
  if (std::string_view(text) == "1") return true;
  throw Error(
      fmt::format("ATTNJIT_GPU_EXHAUSTIVE: got '{}'; accepted: 1 (every case of the "
                  "sweeps) or 0 (a pairwise sample of each, the default)",
                  text));
}

}  // namespace

std::vector<Case> large_cases() {
  std::vector<Case> cases;
  for (const auto& [mask, seqlen] : {std::pair{MaskSpec{MaskKind::none, false, 0}, 2000},
                                     std::pair{MaskSpec{MaskKind::causal, false, 0}, 3001},
                                     std::pair{MaskSpec{MaskKind::flashmask, true, 1}, 4099},
                                     std::pair{MaskSpec{MaskKind::flashmask, false, 2}, 2500}}) {
    Case c = make_case(mask, DType::bf16, 128, 1, 4, 1, seqlen, seqlen, 31 + seqlen);
    if (mask.kind == MaskKind::flashmask) {
      c.intervals = dsl::random_documents(mask.causal, seqlen, 3, 7, data_seed(c.seed));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

bool exhaustive() {
  static const bool value = parse_exhaustive();
  return value;
}

testing::Features features(const Case& c) {
  testing::Features out{
      fmt::format("dtype={}", name_of(c.spec.dtype)),
      fmt::format("head_dim={}/{}", c.spec.head_dim_qk, c.spec.head_dim_v),
      fmt::format("mask={} window=({},{})", to_string(c.spec.mask), c.window_left, c.window_right),
      fmt::format("softcap={} alibi={} sinks={}", c.spec.softcap, c.spec.alibi, c.spec.sinks),
      fmt::format("target={} tiles={}", name_of(c.spec.target), to_string(c.spec.tiles)),
      fmt::format("shape={}x{}x{}/{}x{}", c.batch, c.seqlen_q, c.heads, c.kv_heads, c.seqlen_k),
      fmt::format("padded={}", c.padded_strides)};
  return out;
}

std::vector<std::size_t> sample(const std::vector<testing::Features>& items) {
  if (exhaustive()) {
    std::vector<std::size_t> all(items.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }
  return testing::pairwise_sample(items, run_seed());
}

std::vector<Case> sampled(const std::vector<Case>& cases) {
  std::vector<testing::Features> items;
  for (const Case& c : cases) items.push_back(features(c));
  std::vector<Case> out;
  for (std::size_t i : sample(items)) out.push_back(cases[i]);
  return out;
}

std::vector<std::pair<std::string, int>> rows_run() {
  const std::lock_guard lock(rows_mutex);
  return {rows_tally.begin(), rows_tally.end()};
}

}  // namespace attnjit::gpu_test
