// attnc run: random inputs on the GPU, the forward timed with CUDA events, TFLOP/s counting
// visible (query, key) pairs, and with --check the error against attnjit's fp32 reference.
// Predicate masks come from --predicate and --tensor (run_predicate.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "dsl/pairs.hpp"
#include "runtime/driver.hpp"
#include "runtime/half.hpp"
#include "tools/attnc/commands.hpp"
#include "tools/attnc/run_predicate.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

struct RunOptions {
  std::string spec_text, mask_data = "documents";
  std::optional<std::string> arch;
  int batch = 1, heads = 1, kv_heads = 0, mask_heads = 1, seqlen_q = 0, seqlen_k = 0;
  int window_left = -1, window_right = 0;
  int warmup = 1, repeat = 1;
  std::uint64_t seed = 1;
  bool check = false, json = false;
  std::optional<std::string> predicate;
  std::vector<std::string> tensors;
};

std::uint16_t to_bits(attnjit::DType dtype, float x) {
  return dtype == attnjit::DType::bf16 ? attnjit::runtime::float_to_bf16(x)
                                       : attnjit::runtime::float_to_fp16(x);
}

float from_bits(attnjit::DType dtype, std::uint16_t bits) {
  return dtype == attnjit::DType::bf16 ? attnjit::runtime::bf16_to_float(bits)
                                       : attnjit::runtime::fp16_to_float(bits);
}

DeviceBuffer random_tensor(std::size_t count, attnjit::DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::uint16_t> host(count);
  for (auto& x : host) x = to_bits(dtype, normal(rng));
  DeviceBuffer buffer(count * 2);
  buffer.upload(host.data(), count * 2);
  return buffer;
}

// FlashMask vectors for the spec's (causal, columns): documents of random lengths
// (causal document / document / causal blockwise / global + sliding window) or arbitrary
// random intervals.
attnjit::dsl::IntervalVectors make_vectors(const attnjit::MaskSpec& mask, const RunOptions& o) {
  namespace dsl = attnjit::dsl;
  if (o.mask_data == "random" || o.seqlen_q != o.seqlen_k) {
    return dsl::random_intervals(mask.causal, mask.columns, o.batch, o.mask_heads, o.seqlen_q,
                                 o.seqlen_k, o.seed);
  }
  std::vector<dsl::IntervalVectors> samples;
  std::mt19937_64 rng(o.seed);
  const int n = o.seqlen_q;
  for (int b = 0; b < o.batch; ++b) {
    dsl::IntervalVectors sample;
    if (mask.columns == 1 || (!mask.causal && mask.columns == 2)) {
      sample = dsl::random_documents(mask.causal, n, 3, 7, o.seed + b);
    } else if (mask.causal) {
      const int test = std::max(1, n / 4);
      const int first = (n - test) / 2;
      const std::vector<int> blocks{first, n - test - first};
      sample = dsl::causal_blockwise(blocks, test);
    } else {
      const int window = std::max(1, n / 16);
      sample = dsl::global_sliding_window(n, std::min(n, 64), window, window);
    }
    samples.push_back(dsl::broadcast_heads(sample, o.mask_heads));
  }
  return dsl::stack(samples);
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

void run(RunOptions o) {
  attnjit::AttentionSpec spec = spec_with_arch(o.spec_text, o.arch);
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.seqlen_k == 0) o.seqlen_k = o.seqlen_q;
  if (o.repeat < 1) attnjit::throw_field_error("--repeat", std::to_string(o.repeat), ">= 1");
  if (o.warmup < 0) attnjit::throw_field_error("--warmup", std::to_string(o.warmup), ">= 0");
  // Shape errors are the user's, whether or not a device is there to launch on.
  if (o.heads % o.kv_heads != 0) {
    attnjit::throw_field_error("--kv-heads", std::to_string(o.kv_heads),
                               fmt::format("a divisor of --heads ({})", o.heads));
  }
  if (o.mask_heads != 1 && o.mask_heads != o.kv_heads) {
    attnjit::throw_field_error("--mask-heads", std::to_string(o.mask_heads),
                               fmt::format("1 or --kv-heads ({})", o.kv_heads));
  }
  std::optional<HostPredicate> predicate;
  if (o.predicate) {
    if (spec.mask.kind != attnjit::MaskKind::none) {
      attnjit::throw_field_error("--spec mask", attnjit::to_string(spec.mask),
                                 "no mask= in the spec when --predicate gives the mask");
    }
    predicate = parse_host_predicate(*o.predicate, o.tensors, std::max(o.seqlen_q, o.seqlen_k));
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
  const bool lse_wanted = spec.return_lse || o.check;
  spec.return_lse = lse_wanted;
  const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
  const attnjit::AttentionSpec& s = kernel.spec();

  std::mt19937_64 rng(o.seed);
  const std::size_t q_count =
      static_cast<std::size_t>(o.batch) * o.seqlen_q * o.heads * s.head_dim_qk;
  const std::size_t k_count =
      static_cast<std::size_t>(o.batch) * o.seqlen_k * o.kv_heads * s.head_dim_qk;
  const std::size_t v_count =
      static_cast<std::size_t>(o.batch) * o.seqlen_k * o.kv_heads * s.head_dim_v;
  const std::size_t o_count =
      static_cast<std::size_t>(o.batch) * o.seqlen_q * o.heads * s.head_dim_v;
  const std::size_t lse_count = static_cast<std::size_t>(o.batch) * o.heads * o.seqlen_q;
  DeviceBuffer q = random_tensor(q_count, s.dtype, rng);
  DeviceBuffer k = random_tensor(k_count, s.dtype, rng);
  DeviceBuffer v = random_tensor(v_count, s.dtype, rng);
  DeviceBuffer out(o_count * 2), lse(lse_count * 4);
  out.fill_bytes(0xff);  // NaN: an unwritten element fails the check
  lse.fill_bytes(0xff);

  const auto element =
      s.dtype == attnjit::DType::bf16 ? attnjit::ScalarType::bf16 : attnjit::ScalarType::fp16;
  attnjit::ForwardArgs args;
  args.q =
      attnjit::contiguous_view(q.data(), element, {o.batch, o.seqlen_q, o.heads, s.head_dim_qk});
  args.k =
      attnjit::contiguous_view(k.data(), element, {o.batch, o.seqlen_k, o.kv_heads, s.head_dim_qk});
  args.v =
      attnjit::contiguous_view(v.data(), element, {o.batch, o.seqlen_k, o.kv_heads, s.head_dim_v});
  args.o =
      attnjit::contiguous_view(out.data(), element, {o.batch, o.seqlen_q, o.heads, s.head_dim_v});
  if (lse_wanted) {
    args.lse = attnjit::contiguous_view(lse.data(), attnjit::ScalarType::fp32,
                                        {o.batch, o.heads, o.seqlen_q});
  }
  args.window_left = o.window_left;
  args.window_right = o.window_right;
  std::optional<attnjit::dsl::IntervalVectors> vectors;
  DeviceBuffer vector_buffer;
  if (s.mask.kind == attnjit::MaskKind::flashmask) {
    vectors = make_vectors(s.mask, o);
    vector_buffer = DeviceBuffer(vectors->data.size() * 4);
    vector_buffer.upload(vectors->data.data(), vectors->data.size() * 4);
    args.startend_row_indices =
        attnjit::contiguous_view(vector_buffer.data(), attnjit::ScalarType::int32,
                                 {o.batch, o.mask_heads, o.seqlen_k, s.mask.columns});
  }
  std::optional<DevicePredicate> device_predicate;
  if (predicate) {
    device_predicate = upload(*predicate);
    args.predicate = device_predicate->args;
  }

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
  const std::int64_t pairs =
      predicate ? visible_pairs(*predicate, o.batch, o.heads, o.seqlen_q, o.seqlen_k)
                : attnjit::dsl::visible_pairs(s.mask, o.batch, o.heads, o.seqlen_q, o.seqlen_k,
                                              o.window_left, o.window_right,
                                              vectors ? &*vectors : nullptr);
  const double tflops = 4.0 * s.head_dim_qk * static_cast<double>(pairs) / (ms * 1e-3) / 1e12;
  const double density = static_cast<double>(pairs) /
                         (static_cast<double>(o.batch) * o.heads * o.seqlen_q * o.seqlen_k);

  std::optional<Check> check;
  if (o.check) {
    DeviceBuffer ref(o_count * 2), ref_lse(lse_count * 4);
    ref.fill_bytes(0xff);
    ref_lse.fill_bytes(0xff);
    attnjit::ForwardArgs ref_args = args;
    ref_args.o.data = ref.data();
    ref_args.lse = attnjit::contiguous_view(ref_lse.data(), attnjit::ScalarType::fp32,
                                            {o.batch, o.heads, o.seqlen_q});
    attnjit::jit::compile_reference(s).forward(ref_args, nullptr);
    attnjit::runtime::check(attnjit::runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    check = compare(out, ref, lse, ref_lse, s.dtype);
  }

  const auto& info = kernel.info();
  const auto device = attnjit::runtime::current_device();
  if (o.json) {
    nlohmann::json j;
    j["spec"] = info.spec_text;
    j["device"] = device.name;
    j["batch"] = o.batch;
    j["heads"] = o.heads;
    j["kv_heads"] = o.kv_heads;
    j["seqlen_q"] = o.seqlen_q;
    j["seqlen_k"] = o.seqlen_k;
    j["ms"] = ms;
    j["tflops"] = tflops;
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
    fmt::print(
        "device   {}\nspec     {}\nproblem  B={} H={} Hkv={} Sq={} Sk={}, {:.1f}% of pairs "
        "visible\n",
        device.name, info.spec_text, o.batch, o.heads, o.kv_heads, o.seqlen_q, o.seqlen_k,
        100 * density);
    for (const auto& k : info.kernels) {
      fmt::print("kernel   {}: {} registers, {} spill bytes, {} B smem\n", k.name, k.registers,
                 k.spill_bytes, k.static_smem_bytes + k.dynamic_smem_bytes);
    }
    fmt::print("time     {:.4f} ms (median of {}), {:.1f} TFLOP/s\n", ms, o.repeat, tflops);
    if (check) {
      fmt::print(
          "check    O max abs err {:.3e}, rel l2 err {:.3e}; LSE max abs err {:.3e}; "
          "non-finite {}: {}\n",
          check->max_abs_err, check->rel_l2_err, check->lse_max_err, check->nonfinite,
          check->passed ? "PASS" : "FAIL");
    }
  }
  if (check && !check->passed)
    throw attnjit::DeviceError("attnc run --check: the output does not match the reference");
}

}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a spec on the GPU with random inputs and time it");
  static RunOptions o;
  cmd->add_option("--spec", o.spec_text, "Attention spec")->required();
  cmd->add_option("--arch", o.arch, "Target (default: the spec's, else the device's)");
  cmd->add_option("--batch", o.batch, "Batch size")->required()->check(CLI::Range(1, 65535));
  cmd->add_option("--heads", o.heads, "Query heads")->required()->check(CLI::Range(1, 65535));
  cmd->add_option("--kv-heads", o.kv_heads, "Key/value heads (default: --heads)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--mask-heads", o.mask_heads, "FlashMask heads: 1 or the kv heads")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--seqlen-q", o.seqlen_q, "Query length")
      ->required()
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--seqlen-k", o.seqlen_k, "Key length (default: --seqlen-q)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--window-left", o.window_left,
                  "sliding_window: keys left of the diagonal (-1: unbounded)");
  cmd->add_option("--window-right", o.window_right,
                  "sliding_window: keys right of the diagonal (-1: unbounded)");
  cmd->add_option("--mask-data", o.mask_data, "FlashMask vectors: documents (per family) or random")
      ->check(CLI::IsMember({"documents", "random"}));
  cmd->add_option("--predicate", o.predicate,
                  "Mask: an element predicate over b, h, q, k (nonzero: visible); its literals "
                  "become runtime scalars");
  cmd->add_option("--tensor", o.tensors,
                  "A tensor of --predicate: NAME=v0,v1,..., NAME=iota or NAME=doc:LEN1,LEN2,...");
  cmd->add_option("--seed", o.seed, "Random seed");
  cmd->add_option("--warmup", o.warmup, "Untimed launches first");
  cmd->add_option("--repeat", o.repeat, "Timed launches (the median is reported)");
  cmd->add_flag("--check", o.check, "Compare with attnjit's fp32 reference kernel");
  cmd->add_flag("--json", o.json, "Print one JSON object");
  cmd->callback([] { run(o); });
}

}  // namespace attnc
