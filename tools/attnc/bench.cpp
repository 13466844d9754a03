// attnc bench: times a forward or backward spec on the GPU with CUDA events, rotating among
// random input sets, and prints the median (min, max) time and TFLOP/s counting visible
// (query, key) pairs: forward 4 * B * H * D * pairs, backward 2.5x that (a packed batch,
// varlen=true: the pairs within its sequences). A predicate mask is
// the spec's (mask=predicate(EXPR)), its tensors given by --tensor as for attnc run. --sinks
// adds random sink logits (the spec gets sinks=true), and the backward their gradient. A spec
// with kv_cache=contiguous|paged times decoding against random KV caches and also reports GB/s:
// K and V of the cached keys some query sees plus q and o (kv_cache_bytes). --descales gives
// e4m3 inputs (or an e4m3 cache) descale factors of 1, per tensor or per (batch row or
// sequence, KV head), so that their cost is timed (a packed batch's apply per query row).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/driver.hpp"
#include "tools/attnc/commands.hpp"
#include "tools/attnc/kv_cache.hpp"
#include "tools/attnc/problem.hpp"
#include "tools/attnc/run_predicate.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

/// Input sets the timed launches rotate among, so that no launch finds its inputs in L2.
constexpr int kInputSets = 3;
constexpr double kBackwardFlopsFactor = 2.5;

struct BenchOptions {
  std::string spec_text;
  std::optional<std::string> arch;
  ProblemOptions problem;
  std::vector<std::string> tensors;
  bool sinks = false;
  std::string descales = "none";  ///< none, tensor or head (--descales)
  int warmup = 5, repeat = 20;
  bool json = false;
};

struct Timing {
  std::vector<float> times_ms;  ///< in launch order
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

/// Times `launch(set)` once per event pair after `warmup` untimed calls, rotating the set.
Timing time_launches(int warmup, int repeat, const std::function<void(int)>& launch) {
  for (int i = 0; i < warmup; ++i) launch(i % kInputSets);
  Timing t;
  for (int i = 0; i < repeat; ++i) {
    attnjit::runtime::EventTimer timer;
    timer.start(nullptr);
    launch(i % kInputSets);
    timer.stop(nullptr);
    t.times_ms.push_back(timer.milliseconds());
  }
  std::vector<float> sorted = t.times_ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  t.median_ms = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  t.min_ms = sorted.front();
  t.max_ms = sorted.back();
  return t;
}

/// Device buffers of the problem's tensors, sized from the resolved spec.
struct Sizes {
  std::size_t q, k, v, o, lse;
};

Sizes sizes_of(const attnjit::AttentionSpec& s, const ProblemOptions& p) {
  const auto b = static_cast<std::size_t>(p.batch);
  const auto keys = static_cast<std::size_t>(key_rows(p));
  return {b * p.seqlen_q * p.heads * s.head_dim_qk, keys * p.kv_heads * s.head_dim_qk,
          keys * p.kv_heads * s.head_dim_v, b * p.seqlen_q * p.heads * s.head_dim_v,
          b * p.heads * p.seqlen_q};
}

/// The inputs of one forward launch; the outputs are shared by every set.
struct ForwardSet {
  DeviceBuffer q, k, v;
  attnjit::ForwardArgs args;
};

ForwardSet make_forward_set(const attnjit::AttentionSpec& s, const ProblemOptions& p, int set,
                            const attnjit::ForwardArgs& shared) {
  const Sizes n = sizes_of(s, p);
  const std::uint64_t seed = p.seed + 16 * static_cast<std::uint64_t>(set);
  const attnjit::DType kv = s.kv_dtype.value_or(s.dtype);  // an FP8 cache's e4m3
  ForwardSet f{random_tensor(n.q, s.dtype, seed), random_tensor(n.k, kv, seed + 1),
               random_tensor(n.v, kv, seed + 2), shared};
  f.args.q = activation_view(f.q, s.dtype, p, Rows::query, p.heads, s.head_dim_qk);
  f.args.k = activation_view(f.k, kv, p, Rows::key, p.kv_heads, s.head_dim_qk);
  f.args.v = activation_view(f.v, kv, p, Rows::key, p.kv_heads, s.head_dim_v);
  return f;
}

/// The inputs of one backward launch: a forward set, its output and LSE (computed by the
/// forward kernel) and a random output gradient.
struct BackwardSet {
  ForwardSet forward;
  DeviceBuffer o, lse, d_o;
  attnjit::BackwardArgs args;
};

attnjit::AttentionSpec forward_spec_of(const attnjit::AttentionSpec& backward) {
  attnjit::AttentionSpec spec = backward;
  spec.direction = attnjit::Direction::forward;
  spec.return_lse = true;
  spec.deterministic = false;
  spec.tiles = {};
  return spec;
}

struct Result {
  Timing timing;
  std::int64_t pairs = 0;
  double flops = 0;
  double bytes = 0;  ///< kv_cache only: kv_cache_bytes
};

/// --descales: factors of 1 for e4m3 q, k and v (an e4m3 cache's k and v), one for each
/// tensor ([1]) or one per batch row (a packed batch's sequence) and KV head; none: no buffer.
DeviceBuffer bind_descales(const attnjit::AttentionSpec& s, const ProblemOptions& p,
                           const std::string& descales, attnjit::ForwardArgs& args) {
  if (descales == "none") return {};
  const std::int64_t rows = p.packed() ? static_cast<std::int64_t>(p.lengths_q.size()) : p.batch;
  const std::int64_t count = descales == "tensor" ? 1 : rows * p.kv_heads;
  const std::vector<float> ones(static_cast<std::size_t>(count), 1.f);
  DeviceBuffer buffer(ones.size() * 4);
  buffer.upload(ones.data(), ones.size() * 4);
  const attnjit::TensorView view =
      descales == "tensor"
          ? attnjit::contiguous_view(buffer.data(), attnjit::ScalarType::fp32, {1})
          : attnjit::contiguous_view(buffer.data(), attnjit::ScalarType::fp32, {rows, p.kv_heads});
  if (s.dtype == attnjit::DType::e4m3) args.q_descale = view;
  args.k_descale = args.v_descale = view;
  return buffer;
}

Result bench(const attnjit::jit::Kernel& kernel, const ProblemOptions& p,
             const std::optional<HostPredicate>& predicate, const std::string& descales, int warmup,
             int repeat) {
  const attnjit::AttentionSpec& s = kernel.spec();
  const Sizes n = sizes_of(s, p);
  attnjit::ForwardArgs shared;
  const DeviceMask mask = bind_mask(s, p, predicate, shared);
  DeviceBuffer sinks, d_sinks;
  if (s.sinks) {
    sinks = random_sinks(p.heads, p.seed + 4);
    shared.sinks = sinks_view(sinks, p.heads);
  }
  const DeviceBuffer factors = bind_descales(s, p, descales, shared);

  Result r;
  r.pairs = mask.pairs;
  r.flops = forward_flops(s, r.pairs);
  if (p.cached()) r.bytes = mask.cache_bytes;
  if (s.direction == attnjit::Direction::forward) {
    DeviceBuffer out(n.o * 2), lse(s.return_lse ? n.lse * 4 : 0);
    shared.o = activation_view(out, output_dtype(s.dtype), p, Rows::query, p.heads, s.head_dim_v);
    if (s.return_lse) shared.lse = lse_view(lse, p);
    std::vector<ForwardSet> sets;
    for (int i = 0; i < kInputSets; ++i) sets.push_back(make_forward_set(s, p, i, shared));
    r.timing = time_launches(warmup, repeat, [&](int i) { kernel.forward(sets[i].args); });
    return r;
  }

  r.flops *= kBackwardFlopsFactor;
  const attnjit::jit::Kernel forward = attnjit::jit::compile(forward_spec_of(s));
  DeviceBuffer d_q(n.q * 2), d_k(n.k * 2), d_v(n.v * 2);
  if (s.sinks) d_sinks = DeviceBuffer(static_cast<std::size_t>(p.heads) * 4);
  std::vector<BackwardSet> sets;
  for (int i = 0; i < kInputSets; ++i) {
    BackwardSet b{make_forward_set(s, p, i, shared),
                  DeviceBuffer(n.o * 2),
                  DeviceBuffer(n.lse * 4),
                  random_tensor(n.o, s.dtype, p.seed + 16 * i + 3),
                  {}};
    attnjit::ForwardArgs& f = b.forward.args;
    f.o = activation_view(b.o, s.dtype, p, Rows::query, p.heads, s.head_dim_v);
    f.lse = lse_view(b.lse, p);
    forward.forward(f);
    b.args.q = f.q;
    b.args.k = f.k;
    b.args.v = f.v;
    b.args.o = f.o;
    b.args.lse = f.lse;
    b.args.startend_row_indices = f.startend_row_indices;
    b.args.window_left = f.window_left;
    b.args.window_right = f.window_right;
    b.args.predicate = f.predicate;
    b.args.varlen = f.varlen;
    b.args.d_o = activation_view(b.d_o, s.dtype, p, Rows::query, p.heads, s.head_dim_v);
    b.args.d_q = activation_view(d_q, s.dtype, p, Rows::query, p.heads, s.head_dim_qk);
    b.args.d_k = activation_view(d_k, s.dtype, p, Rows::key, p.kv_heads, s.head_dim_qk);
    b.args.d_v = activation_view(d_v, s.dtype, p, Rows::key, p.kv_heads, s.head_dim_v);
    if (s.sinks) {
      b.args.sinks = f.sinks;
      b.args.d_sinks = sinks_view(d_sinks, p.heads);
    }
    sets.push_back(std::move(b));
  }
  r.timing = time_launches(warmup, repeat, [&](int i) { kernel.backward(sets[i].args); });
  return r;
}

void print(const attnjit::jit::Kernel& kernel, const BenchOptions& o, const Result& r) {
  const ProblemOptions& p = o.problem;
  const attnjit::AttentionSpec& s = kernel.spec();
  const auto& info = kernel.info();
  const auto device = attnjit::runtime::current_device();
  const bool backward = s.direction == attnjit::Direction::backward;
  const double tflops = r.flops / (r.timing.median_ms * 1e-3) / 1e12;
  const double density = pair_density(p, r.pairs);
  const double gbps = r.bytes / (r.timing.median_ms * 1e-3) / 1e9;
  if (o.json) {
    nlohmann::ordered_json j = problem_json(device.name, info, p);
    j["direction"] = attnjit::name_of(s.direction);
    j["visible_pairs"] = r.pairs;
    j["density"] = density;
    j["flops"] = r.flops;
    j["warmup"] = o.warmup;
    j["repeat"] = o.repeat;
    j["input_sets"] = kInputSets;
    j["ms"] = r.timing.median_ms;
    j["min_ms"] = r.timing.min_ms;
    j["max_ms"] = r.timing.max_ms;
    j["tflops"] = tflops;
    if (p.cached()) {
      j["bytes"] = r.bytes;
      j["gbps"] = gbps;
    }
    j["times_ms"] = r.timing.times_ms;
    fmt::print("{}\n", j.dump());
    return;
  }
  print_problem_header(device.name, info, p, density);
  fmt::print(
      "time     {:.4f} ms median, {:.4f} min, {:.4f} max ({} runs after {} warm-up, {} "
      "rotating input sets)\n",
      r.timing.median_ms, r.timing.min_ms, r.timing.max_ms, o.repeat, o.warmup, kInputSets);
  fmt::print("rate     {:.1f} TFLOP/s ({}2*B*H*(Dqk+Dv)*visible pairs)\n", tflops,
             backward ? "2.5 x " : "");
  if (p.cached()) {
    fmt::print(
        "traffic  {:.1f} GB/s ({:.0f} bytes: K and V of each sequence's cached keys, or of those "
        "within the window or left visible by the vectors, Hkv*(Dqk+Dv)*2 each, + q + o)\n",
        gbps, r.bytes);
  }
}

void run_bench(BenchOptions o) {
  attnjit::AttentionSpec spec = spec_with_arch(o.spec_text, o.arch);
  resolve_problem(o.problem, spec);
  std::optional<HostPredicate> predicate;
  if (spec.mask.kind == attnjit::MaskKind::predicate) {
    // The spec's text of the mask has the literals' values back in place: predicate(EXPR).
    const std::string mask = attnjit::to_string(spec.mask);
    predicate = parse_host_predicate(mask.substr(10, mask.size() - 11), o.tensors,
                                     std::max(o.problem.seqlen_q, o.problem.seqlen_k));
  } else if (!o.tensors.empty()) {
    throw attnjit::Error(
        "--tensor: given without a predicate mask; accepted: --tensor with mask=predicate(EXPR)");
  }
  if (o.sinks) spec.sinks = true;
  const bool fp8 = spec.dtype == attnjit::DType::e4m3 || spec.kv_dtype == attnjit::DType::e4m3;
  if (o.descales != "none" && (!fp8 || spec.direction != attnjit::Direction::forward)) {
    throw attnjit::Error(fmt::format(
        "--descales: got '{}' with dtype={}{} direction={}; accepted: none (descale factors "
        "apply to the forward of dtype=e4m3 and to kv_dtype=e4m3 caches)",
        o.descales, attnjit::name_of(spec.dtype),
        spec.kv_dtype ? fmt::format(" kv_dtype={}", attnjit::name_of(*spec.kv_dtype)) : "",
        attnjit::name_of(spec.direction)));
  }
  const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
  const Result r = bench(kernel, o.problem, predicate, o.descales, o.warmup, o.repeat);
  print(kernel, o, r);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Time a forward or backward spec on the GPU over rotating random inputs");
  static BenchOptions o;
  cmd->add_option("--spec", o.spec_text,
                  "Attention spec, direction=forward or backward (SPEC below)")
      ->required();
  cmd->add_option("--arch", o.arch, "Target (default: the spec's, else the device's)");
  add_problem_options(cmd, o.problem);
  cmd->add_option("--tensor", o.tensors,
                  "A tensor of the spec's predicate mask: NAME=v0,v1,..., NAME=iota or "
                  "NAME=doc:LEN1,LEN2,...");
  cmd->add_option("--warmup", o.warmup, "Untimed launches first")->check(integer_in(0, INT32_MAX));
  cmd->add_option("--repeat", o.repeat, "Timed launches (median, min and max are reported)")
      ->check(integer_in(1, INT32_MAX));
  cmd->add_flag("--sinks", o.sinks,
                "Random sink logits in [-2, 3], one per query head; sets sinks=true in the spec");
  cmd->add_option("--descales", o.descales,
                  "e4m3 inputs or an e4m3 cache: descale factors of 1, per tensor ([1]) or per "
                  "batch row (a packed batch's sequence) and KV head ([rows, kv heads]); none: "
                  "no factors (default)")
      ->check(CLI::IsMember({"none", "tensor", "head"}));
  cmd->add_flag("--json", o.json, "Print one JSON object");
  cmd->footer(spec_help() + kv_cache_help());
  cmd->callback([] { run_bench(o); });
}

}  // namespace attnc
