// Generated problems for attnc run and attnc bench: options, activations, FlashMask vectors.
#include "tools/attnc/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "runtime/jit/half.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

std::uint16_t to_bits(attnjit::DType dtype, float x) {
  return dtype == attnjit::DType::bf16 ? attnjit::runtime::float_to_bf16(x)
                                       : attnjit::runtime::float_to_fp16(x);
}

attnjit::ScalarType element_type(attnjit::DType dtype) {
  return dtype == attnjit::DType::bf16 ? attnjit::ScalarType::bf16 : attnjit::ScalarType::fp16;
}

}  // namespace

void add_problem_options(CLI::App* cmd, ProblemOptions& o) {
  cmd->add_option("--batch", o.batch, "Batch size")->required()->check(integer_in(1, 65535));
  cmd->add_option("--heads", o.heads, "Query heads")->required()->check(integer_in(1, 65535));
  cmd->add_option("--kv-heads", o.kv_heads, "Key/value heads (default: --heads)")
      ->check(integer_in(1, 65535));
  cmd->add_option("--mask-heads", o.mask_heads, "FlashMask heads: 1 or the kv heads")
      ->check(integer_in(1, 65535));
  cmd->add_option("--seqlen-q", o.seqlen_q, "Query length")
      ->required()
      ->check(integer_in(1, 1 << 24));
  cmd->add_option("--seqlen-k", o.seqlen_k, "Key length (default: --seqlen-q)")
      ->check(integer_in(1, 1 << 24));
  cmd->add_option("--window-left", o.window_left,
                  "sliding_window: keys left of the diagonal (-1: unbounded)")
      ->check(integer_in(-1, INT32_MAX));
  cmd->add_option("--window-right", o.window_right,
                  "sliding_window: keys right of the diagonal (-1: unbounded)")
      ->check(integer_in(-1, INT32_MAX));
  cmd->add_option("--mask-data", o.mask_data, "FlashMask vectors: documents (per family) or random")
      ->check(CLI::IsMember({"documents", "random"}));
  cmd->add_option("--seed", o.seed, "Random seed")->check(unsigned_64());
}

void resolve_problem(ProblemOptions& o) {
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.seqlen_k == 0) o.seqlen_k = o.seqlen_q;
  if (o.heads % o.kv_heads != 0) {
    attnjit::throw_field_error("--kv-heads", std::to_string(o.kv_heads),
                               fmt::format("a divisor of --heads ({})", o.heads));
  }
  if (o.mask_heads != 1 && o.mask_heads != o.kv_heads) {
    attnjit::throw_field_error("--mask-heads", std::to_string(o.mask_heads),
                               fmt::format("1 or --kv-heads ({})", o.kv_heads));
  }
}

DeviceBuffer random_tensor(std::size_t count, attnjit::DType dtype, std::uint64_t seed) {
  constexpr std::size_t kPool = std::size_t{1} << 16;
  constexpr std::size_t kRun = 64;
  constexpr std::size_t kChunk = std::size_t{1} << 24;  // elements staged per upload
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::uint16_t> pool(kPool + kRun);
  for (auto& x : pool) x = to_bits(dtype, normal(rng));
  std::uniform_int_distribution<std::size_t> offset(0, kPool - 1);

  DeviceBuffer buffer(count * 2);
  std::vector<std::uint16_t> host(std::min(count, kChunk));
  const auto base = reinterpret_cast<CUdeviceptr>(buffer.data());
  for (std::size_t first = 0; first < count; first += kChunk) {
    const std::size_t n = std::min(kChunk, count - first);
    for (std::size_t i = 0; i < n; i += kRun) {
      const std::size_t run = std::min(kRun, n - i);
      std::copy_n(pool.begin() + static_cast<std::ptrdiff_t>(offset(rng)), run, host.begin() + i);
    }
    attnjit::runtime::check(
        attnjit::runtime::driver().cuMemcpyHtoD(base + first * 2, host.data(), n * 2),
        "cuMemcpyHtoD");
  }
  return buffer;
}

attnjit::dsl::IntervalVectors make_vectors(const attnjit::MaskSpec& mask, const ProblemOptions& o) {
  namespace dsl = attnjit::dsl;
  if (o.mask_data == "random" || o.seqlen_q != o.seqlen_k) {
    return dsl::random_intervals(mask.causal, mask.columns, o.batch, o.mask_heads, o.seqlen_q,
                                 o.seqlen_k, o.seed);
  }
  std::vector<dsl::IntervalVectors> samples;
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

attnjit::TensorView activation_view(const DeviceBuffer& buffer, attnjit::DType dtype, int batch,
                                    int seq, int heads, int dim) {
  return attnjit::contiguous_view(buffer.data(), element_type(dtype), {batch, seq, heads, dim});
}

DeviceBuffer upload_vectors(const attnjit::dsl::IntervalVectors& vectors) {
  DeviceBuffer buffer(vectors.data.size() * 4);
  buffer.upload(vectors.data.data(), vectors.data.size() * 4);
  return buffer;
}

attnjit::TensorView vectors_view(const DeviceBuffer& buffer,
                                 const attnjit::dsl::IntervalVectors& vectors) {
  return attnjit::contiguous_view(
      buffer.data(), attnjit::ScalarType::int32,
      {vectors.batch, vectors.heads, vectors.seqlen_k, vectors.columns});
}

double pair_density(const ProblemOptions& o, std::int64_t pairs) {
  return static_cast<double>(pairs) /
         (static_cast<double>(o.batch) * o.heads * o.seqlen_q * o.seqlen_k);
}

nlohmann::ordered_json problem_json(const std::string& device,
                                    const attnjit::jit::CompileInfo& info,
                                    const ProblemOptions& o) {
  return {{"spec", info.spec_text}, {"device", device},           {"batch", o.batch},
          {"heads", o.heads},       {"kv_heads", o.kv_heads},     {"mask_heads", o.mask_heads},
          {"seqlen_q", o.seqlen_q}, {"seqlen_k", o.seqlen_k}};
}

void print_problem_header(const std::string& device, const attnjit::jit::CompileInfo& info,
                          const ProblemOptions& o, double density) {
  fmt::print(
      "device   {}\nspec     {}\nproblem  B={} H={} Hkv={} Sq={} Sk={}, {:.1f}% of pairs "
      "visible\n",
      device, info.spec_text, o.batch, o.heads, o.kv_heads, o.seqlen_q, o.seqlen_k, 100 * density);
  for (const auto& k : info.kernels) {
    fmt::print("kernel   {}: {} registers, {} spill bytes, {} B smem\n", k.name, k.registers,
               k.spill_bytes, k.static_smem_bytes + k.dynamic_smem_bytes);
  }
}

}  // namespace attnc
