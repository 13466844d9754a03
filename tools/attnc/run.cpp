// attnc run: random inputs on the GPU, the forward timed with CUDA events, TFLOP/s counting
// visible (query, key) pairs, and with --check the error against attnjit's fp32 reference
// (for a packed batch, varlen=true, computed sequence by sequence: tools/attnc/varlen.hpp).
// --softcap X and --alibi turn the score modifiers on (the spec gets softcap=true /
// alibi=true); the ALiBi slopes are the standard geometric ones, 2^(-8 i / H) for head i-1.
// --sinks adds random sink logits, one per query head (the spec gets sinks=true).
// Predicate masks come from --predicate and --tensor (run_predicate.hpp). A spec with
// kv_cache=contiguous|paged runs against a random KV cache (tools/attnc/kv_cache.hpp) and also
// reports GB/s; there is no reference for it, so --check is refused there.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/half.hpp"
#include "tools/attnc/commands.hpp"
#include "tools/attnc/kv_cache.hpp"
#include "tools/attnc/problem.hpp"
#include "tools/attnc/run_predicate.hpp"
#include "tools/attnc/varlen.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

struct RunOptions {
  std::string spec_text;
  std::optional<std::string> arch;
  ProblemOptions problem;
  std::optional<float> softcap;
  bool alibi = false;
  bool sinks = false;
  int warmup = 1, repeat = 1;
  bool check = false, json = false;
  std::optional<std::string> predicate;
  std::vector<std::string> tensors;
};

float from_bits(attnjit::DType dtype, std::uint16_t bits) {
  return dtype == attnjit::DType::bf16 ? attnjit::runtime::bf16_to_float(bits)
                                       : attnjit::runtime::fp16_to_float(bits);
}

struct Check {
  double max_abs_err = 0, rel_l2_err = 0, lse_max_err = 0;
  std::int64_t nonfinite = 0;
  bool passed = false;
};

Check compare(const DeviceBuffer& out, const DeviceBuffer& ref, const DeviceBuffer& lse,
              const DeviceBuffer& ref_lse, attnjit::DType dtype) {
  std::vector<std::uint16_t> a(out.bytes() / 2), b(ref.bytes() / 2);
  out.download(a.data(), out.bytes());
  ref.download(b.data(), ref.bytes());
  Check c;
  double sq_err = 0, sq_ref = 0, max_ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = from_bits(dtype, a[i]), y = from_bits(dtype, b[i]);
    if (!std::isfinite(x)) {
      ++c.nonfinite;
      continue;
    }
    c.max_abs_err = std::max(c.max_abs_err, std::abs(x - y));
    max_ref = std::max(max_ref, std::abs(y));
    sq_err += (x - y) * (x - y);
    sq_ref += y * y;
  }
  c.rel_l2_err = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
  std::vector<float> l(lse.bytes() / 4), r(ref_lse.bytes() / 4);
  lse.download(l.data(), lse.bytes());
  ref_lse.download(r.data(), ref_lse.bytes());
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (std::isinf(r[i]) && r[i] < 0) {
      if (!(std::isinf(l[i]) && l[i] < 0)) ++c.nonfinite;
      continue;
    }
    if (!std::isfinite(l[i])) {
      ++c.nonfinite;
      continue;
    }
    c.lse_max_err = std::max(c.lse_max_err, std::abs(static_cast<double>(l[i]) - r[i]));
  }
  // Both outputs are rounded to 16 bits; the fused kernel also rounds P before P V.
  const double rel_limit = dtype == attnjit::DType::bf16 ? 1e-2 : 2e-3;
  c.passed = c.nonfinite == 0 && c.rel_l2_err <= rel_limit &&
             c.max_abs_err <= 2e-2 * std::max(1.0, max_ref) && c.lse_max_err <= 1e-2;
  return c;
}

// The standard ALiBi slopes of `heads` heads: 2^(-8 i / H) for i = 1 .. H.
std::vector<float> alibi_slopes(int heads) {
  std::vector<float> slopes(heads);
  for (int i = 1; i <= heads; ++i) slopes[i - 1] = std::exp2(-8.0f * i / heads);
  return slopes;
}

void run(RunOptions o) {
  attnjit::AttentionSpec spec = spec_with_arch(o.spec_text, o.arch);
  // Shape errors are the user's, whether or not a device is there to launch on.
  ProblemOptions& p = o.problem;
  resolve_problem(p, spec);
  if (o.softcap && !(*o.softcap > 0.f && std::isfinite(*o.softcap))) {
    attnjit::throw_field_error("--softcap", fmt::format("{}", *o.softcap), "a finite value > 0");
  }
  if (spec.softcap && !o.softcap) {
    throw attnjit::Error(
        "--softcap: missing, but the spec has softcap=true; accepted: --softcap X with X > 0");
  }
  if (o.softcap) spec.softcap = true;
  if (o.alibi) spec.alibi = true;
  if (o.sinks) spec.sinks = true;
  std::optional<HostPredicate> predicate;
  if (o.predicate) {
    if (spec.mask.kind != attnjit::MaskKind::none) {
      attnjit::throw_field_error("--spec mask", attnjit::to_string(spec.mask),
                                 "no mask= in the spec when --predicate gives the mask");
    }
    predicate = parse_host_predicate(*o.predicate, o.tensors, std::max(p.seqlen_q, p.seqlen_k));
    spec.mask.kind = attnjit::MaskKind::predicate;
    spec.mask.predicate = attnjit::to_string(predicate->lifted);
  } else if (spec.mask.kind == attnjit::MaskKind::predicate) {
    throw attnjit::Error(
        "--predicate: missing; accepted: the predicate as an expression (--predicate "
        "'q >= k && doc[q] == doc[k]' --tensor doc=doc:100,200) instead of mask= in the spec");
  } else if (!o.tensors.empty()) {
    throw attnjit::Error(
        "--tensor: given without --predicate; accepted: --tensor with --predicate");
  }
  if (o.check && predicate && spec.varlen != attnjit::VarlenMode::off) {
    // The reference runs each sequence as a batch of one, whose predicate would see b = 0.
    throw attnjit::Error(
        "--check: given with --predicate on a packed batch; accepted: --check without "
        "--predicate there (a packed predicate is checked by the GPU tests' reference)");
  }
  if (o.check && p.cached()) {
    throw attnjit::Error(fmt::format(
        "--check: given, but the spec has kv_cache={}; accepted: --check without kv_cache (there "
        "is no reference for kv_cache specs)",
        attnjit::name_of(spec.kv_cache)));
  }
  if (o.check && spec.dtype == attnjit::DType::e4m3) {
    throw attnjit::Error(
        "--check: given with dtype=e4m3; accepted: --check with fp16 or bf16 (attnjit's fp32 "
        "reference kernel takes 16-bit inputs; the GPU tests check e4m3 against a float64 "
        "reference)");
  }
  const bool lse_wanted = spec.return_lse || o.check;
  spec.return_lse = lse_wanted;
  const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
  const attnjit::AttentionSpec& s = kernel.spec();

  const std::size_t q_count =
      static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads * s.head_dim_qk;
  const std::size_t k_count = static_cast<std::size_t>(key_rows(p)) * p.kv_heads * s.head_dim_qk;
  const std::size_t v_count = static_cast<std::size_t>(key_rows(p)) * p.kv_heads * s.head_dim_v;
  const std::size_t o_count =
      static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads * s.head_dim_v;
  const std::size_t lse_count = static_cast<std::size_t>(p.batch) * p.heads * p.seqlen_q;
  DeviceBuffer q = random_tensor(q_count, s.dtype, p.seed);
  const attnjit::DType kv = s.kv_dtype.value_or(s.dtype);  // an FP8 cache's e4m3
  DeviceBuffer k = random_tensor(k_count, kv, p.seed + 1);
  DeviceBuffer v = random_tensor(v_count, kv, p.seed + 2);
  DeviceBuffer out(o_count * 2), lse(lse_count * 4);
  out.fill_bytes(0xff);  // NaN: an unwritten element fails the check
  lse.fill_bytes(0xff);

  attnjit::ForwardArgs args;
  args.q = activation_view(q, s.dtype, p, Rows::query, p.heads, s.head_dim_qk);
  args.k = activation_view(k, kv, p, Rows::key, p.kv_heads, s.head_dim_qk);
  args.v = activation_view(v, kv, p, Rows::key, p.kv_heads, s.head_dim_v);
  args.o = activation_view(out, output_dtype(s.dtype), p, Rows::query, p.heads, s.head_dim_v);
  if (lse_wanted) args.lse = lse_view(lse, p);
  if (o.softcap) args.softcap = *o.softcap;
  DeviceBuffer slope_buffer;
  if (s.alibi) {
    const std::vector<float> slopes = alibi_slopes(p.heads);
    slope_buffer = DeviceBuffer(slopes.size() * 4);
    slope_buffer.upload(slopes.data(), slopes.size() * 4);
    args.alibi_slopes =
        attnjit::contiguous_view(slope_buffer.data(), attnjit::ScalarType::fp32, {p.heads});
  }
  DeviceBuffer sink_buffer;
  if (s.sinks) {
    sink_buffer = random_sinks(p.heads, p.seed + 4);
    args.sinks = sinks_view(sink_buffer, p.heads);
  }
  const DeviceMask mask = bind_mask(s, p, predicate, args);

  for (int i = 0; i < o.warmup; ++i) kernel.forward(args, nullptr);
  std::vector<float> times;
  for (int i = 0; i < o.repeat; ++i) {
    attnjit::runtime::EventTimer timer;
    timer.start(nullptr);
    kernel.forward(args, nullptr);
    timer.stop(nullptr);
    times.push_back(timer.milliseconds());
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const std::int64_t pairs = mask.pairs;
  const double tflops = forward_flops(s, pairs) / (ms * 1e-3) / 1e12;
  const double density = pair_density(p, pairs);
  const double gbps = p.cached() ? mask.cache_bytes / (ms * 1e-3) / 1e9 : 0.0;

  std::optional<Check> check;
  if (o.check) {
    DeviceBuffer ref(o_count * 2), ref_lse(lse_count * 4);
    ref.fill_bytes(0xff);
    ref_lse.fill_bytes(0xff);
    if (p.packed()) {
      reference_by_sequence(s, args, p, mask.vectors ? &*mask.vectors : nullptr, ref, ref_lse);
    } else {
      attnjit::ForwardArgs ref_args = args;
      ref_args.o.data = ref.data();
      ref_args.lse = lse_view(ref_lse, p);
      attnjit::jit::compile_reference(s).forward(ref_args, nullptr);
      attnjit::runtime::check(attnjit::runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    }
    check = compare(out, ref, lse, ref_lse, s.dtype);
  }

  const auto& info = kernel.info();
  const auto device = attnjit::runtime::current_device();
  if (o.json) {
    nlohmann::ordered_json j = problem_json(device.name, info, p);
    j["ms"] = ms;
    j["tflops"] = tflops;
    if (p.cached()) j["gbps"] = gbps;
    j["density"] = density;
    j["times_ms"] = times;
    if (check) {
      j["check"] = {{"passed", check->passed},
                    {"max_abs_err", check->max_abs_err},
                    {"rel_l2_err", check->rel_l2_err},
                    {"lse_max_err", check->lse_max_err},
                    {"nonfinite", check->nonfinite}};
    }
    fmt::print("{}\n", j.dump());
  } else {
    print_problem_header(device.name, info, p, density);
    fmt::print("time     {:.4f} ms (median of {}), {:.1f} TFLOP/s{}\n", ms, o.repeat, tflops,
               p.cached() ? fmt::format(", {:.1f} GB/s", gbps) : "");
    if (p.cached()) fmt::print("check    none: no reference for kv_cache specs\n");
    if (check) {
      fmt::print(
          "check    O max abs err {:.3e}, rel l2 err {:.3e}; LSE max abs err {:.3e}; "
          "non-finite {}: {}\n",
          check->max_abs_err, check->rel_l2_err, check->lse_max_err, check->nonfinite,
          check->passed ? "PASS" : "FAIL");
    }
  }
  if (check && !check->passed)
    throw CheckFailure("attnc run --check: the output does not match the reference");
}

}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a spec on the GPU with random inputs and time it");
  static RunOptions o;
  cmd->add_option("--spec", o.spec_text, "Attention spec (SPEC below)")->required();
  cmd->add_option("--arch", o.arch, "Target (default: the spec's, else the device's)");
  add_problem_options(cmd, o.problem);
  cmd->add_option("--softcap", o.softcap,
                  "Soft-cap scores at X (s <- X tanh(s / X)); sets softcap=true in the spec")
      ->check(finite_number());
  cmd->add_flag("--alibi", o.alibi,
                "ALiBi with the slopes 2^(-8 i / H), i = 1 .. H; sets alibi=true in the spec");
  cmd->add_flag("--sinks", o.sinks,
                "Random sink logits in [-2, 3], one per query head; sets sinks=true in the spec");
  cmd->add_option("--predicate", o.predicate,
                  "Mask: an element predicate over b, h, q, k (nonzero: visible); its literals "
                  "become runtime scalars");
  cmd->add_option("--tensor", o.tensors,
                  "A tensor of --predicate: NAME=v0,v1,..., NAME=iota or NAME=doc:LEN1,LEN2,...");
  cmd->add_option("--warmup", o.warmup, "Untimed launches first")->check(integer_in(0, INT32_MAX));
  cmd->add_option("--repeat", o.repeat, "Timed launches (the median is reported)")
      ->check(integer_in(1, INT32_MAX));
  cmd->add_flag("--check", o.check,
                "Compare with attnjit's fp32 reference kernel (varlen: sequence by sequence; "
                "not with kv_cache, which has no reference)");
  cmd->add_flag("--json", o.json, "Print one JSON object");
  cmd->footer(spec_help() + kv_cache_help());
  cmd->callback([] { run(o); });
}

}  // namespace attnc
