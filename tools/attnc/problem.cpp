// Generated problems for attnc run and attnc bench: options, activations, FlashMask vectors.
#include "tools/attnc/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <random>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "runtime/jit/half.hpp"
#include "runtime/launch/launch_support.hpp"
#include "tools/attnc/commands.hpp"
#include "tools/attnc/varlen.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

std::uint16_t to_bits(attnjit::DType dtype, float x) {
  return dtype == attnjit::DType::bf16 ? attnjit::runtime::float_to_bf16(x)
                                       : attnjit::runtime::float_to_fp16(x);
}

attnjit::ScalarType element_type(attnjit::DType dtype) {
  switch (dtype) {
    case attnjit::DType::bf16:
      return attnjit::ScalarType::bf16;
    case attnjit::DType::e4m3:
      return attnjit::ScalarType::e4m3;
    case attnjit::DType::fp16:
      break;
  }
  return attnjit::ScalarType::fp16;
}

// e4m3 inputs: two codes a 16-bit word, of standard normal values (as the 16-bit dtypes' inputs,
// so that the softmax sees scores of the same spread).
std::uint16_t random_e4m3_pair(std::mt19937_64& rng, std::normal_distribution<float>& normal) {
  const std::uint8_t low = attnjit::runtime::float_to_e4m3(normal(rng));
  return static_cast<std::uint16_t>(low | attnjit::runtime::float_to_e4m3(normal(rng)) << 8);
}

constexpr int kMaxLength = 1 << 24;
constexpr std::int64_t kMaxTotal = INT32_MAX / 2;  // the packed rows the launch takes

// A comma-separated list of lengths, each 0 to kMaxLength.
std::vector<int> parse_lengths(std::string_view option, const std::string& text) {
  const std::string accepted = fmt::format(
      "comma-separated integers from 0 to {}, one per sequence (e.g. 1000,0,1,4096)", kMaxLength);
  std::vector<int> lengths;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    int value = 0;
    const auto [last, error] = std::from_chars(text.data() + begin, text.data() + end, value);
    if (begin == end || error != std::errc() || last != text.data() + end || value < 0 ||
        value > kMaxLength) {
      attnjit::throw_field_error(option, text.substr(0, 64), accepted);
    }
    lengths.push_back(value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (lengths.size() > 65535) {
    attnjit::throw_field_error(option, text.substr(0, 64),
                               fmt::format("at most 65535 sequences, got {}", lengths.size()));
  }
  return lengths;
}

std::int64_t total_of(std::string_view option, const std::string& text,
                      const std::vector<int>& lengths) {
  std::int64_t total = 0;
  for (const int length : lengths) total += length;
  if (total < 1 || total > kMaxTotal) {
    attnjit::throw_field_error(
        option, text.substr(0, 64),
        fmt::format("lengths whose sum (here {}) is 1 to {}", total, kMaxTotal));
  }
  return total;
}

// The packed batch of a varlen=true spec: --seqlens, --seqlens-k and --seqused-k read, batch 1
// and the totals as the lengths of its one row.
void resolve_packed(ProblemOptions& o) {
  for (const auto& [option, given] : {std::pair<const char*, int>{"--batch", o.batch},
                                      {"--seqlen-q", o.seqlen_q},
                                      {"--seqlen-k", o.seqlen_k}}) {
    if (given != 0) {
      attnjit::throw_field_error(
          option, std::to_string(given),
          "nothing with varlen=true in the spec (--seqlens, --seqlens-k give the sequences)");
    }
  }
  if (o.seqlens.empty()) {
    throw attnjit::Error(
        "--seqlens: missing, but the spec has varlen=true; accepted: the packed sequences' query "
        "lengths, comma-separated (e.g. --seqlens 1000,0,1,4096)");
  }
  o.lengths_q = parse_lengths("--seqlens", o.seqlens);
  o.lengths_k = o.seqlens_k.empty() ? o.lengths_q : parse_lengths("--seqlens-k", o.seqlens_k);
  if (o.lengths_k.size() != o.lengths_q.size()) {
    attnjit::throw_field_error(
        "--seqlens-k", o.seqlens_k.substr(0, 64),
        fmt::format("{} lengths, one per sequence of --seqlens", o.lengths_q.size()));
  }
  if (!o.seqused_k.empty()) {
    o.used_k = parse_lengths("--seqused-k", o.seqused_k);
    if (o.used_k.size() != o.lengths_q.size()) {
      attnjit::throw_field_error(
          "--seqused-k", o.seqused_k.substr(0, 64),
          fmt::format("{} lengths, one per sequence of --seqlens", o.lengths_q.size()));
    }
    for (std::size_t s = 0; s < o.used_k.size(); ++s) {
      if (o.used_k[s] > o.lengths_k[s]) {
        attnjit::throw_field_error(
            "--seqused-k", o.seqused_k.substr(0, 64),
            fmt::format("at most each sequence's keys; sequence {} has {} keys, not {}", s,
                        o.lengths_k[s], o.used_k[s]));
      }
    }
  }
  o.batch = 1;
  o.seqlen_q = static_cast<int>(total_of("--seqlens", o.seqlens, o.lengths_q));
  o.seqlen_k =
      static_cast<int>(total_of(o.seqlens_k.empty() ? "--seqlens" : "--seqlens-k",
                                o.seqlens_k.empty() ? o.seqlens : o.seqlens_k, o.lengths_k));
}

// What a kv_cache option accepts when the spec has none.
void refuse_kv_cache_options(const ProblemOptions& o) {
  const char* accepted =
      "nothing with kv_cache=none in the spec (kv_cache=contiguous or kv_cache=paged takes it)";
  if (!o.kv_cache_len.empty()) {
    attnjit::throw_field_error("--kv-cache-len", o.kv_cache_len.substr(0, 64), accepted);
  }
  for (const auto& [option, given] :
       {std::pair<const char*, const std::optional<int>&>{"--kv-capacity", o.kv_capacity},
        {"--page-size", o.page_size},
        {"--num-splits", o.num_splits}}) {
    if (given) attnjit::throw_field_error(option, std::to_string(*given), accepted);
  }
}

// The KV cache of a kv_cache=contiguous|paged spec: each sequence's cached keys, the capacity as
// seqlen_k, the page size and the splits; the batch from --batch or the lengths' count.
void resolve_kv_cache(ProblemOptions& o) {
  const std::string cache(attnjit::name_of(o.kv_cache));
  const std::string no_keys = fmt::format(
      "nothing with kv_cache={} in the spec (--kv-cache-len and --kv-capacity give the cached "
      "keys)",
      cache);
  if (o.seqlen_k != 0)
    attnjit::throw_field_error("--seqlen-k", std::to_string(o.seqlen_k), no_keys);
  for (const auto& [option, text] :
       {std::pair<const char*, const std::string&>{"--seqlens", o.seqlens},
        {"--seqlens-k", o.seqlens_k},
        {"--seqused-k", o.seqused_k}}) {
    if (!text.empty()) attnjit::throw_field_error(option, text.substr(0, 64), no_keys);
  }
  if (!o.paged() && o.page_size) {
    attnjit::throw_field_error(
        "--page-size", std::to_string(*o.page_size),
        fmt::format("nothing with kv_cache={} in the spec (kv_cache=paged takes it)", cache));
  }
  if (o.kv_cache_len.empty() && !o.kv_capacity) {
    throw attnjit::Error(fmt::format(
        "--kv-cache-len: missing, but the spec has kv_cache={}; accepted: the cached keys per "
        "sequence, 0 to {}, one length for all or one per sequence (e.g. --kv-cache-len "
        "4096 or 100,0,4096), or --kv-capacity N for full caches",
        cache, kMaxLength));
  }
  if (!o.kv_cache_len.empty()) o.cache_lengths = parse_lengths("--kv-cache-len", o.kv_cache_len);
  if (o.batch == 0) {
    if (o.cache_lengths.empty()) {
      throw attnjit::Error(
          "--batch: missing; accepted: the batch size, 1 to 65535 (or one --kv-cache-len "
          "length per sequence)");
    }
    o.batch = static_cast<int>(o.cache_lengths.size());
  }
  if (o.cache_lengths.size() == 1) o.cache_lengths.assign(o.batch, o.cache_lengths.front());
  if (!o.cache_lengths.empty() && o.cache_lengths.size() != static_cast<std::size_t>(o.batch)) {
    attnjit::throw_field_error(
        "--kv-cache-len", o.kv_cache_len.substr(0, 64),
        fmt::format("one length, or {} lengths, one per sequence of --batch", o.batch));
  }
  if (o.cache_lengths.empty()) {
    o.seqlen_k = *o.kv_capacity;
    o.cache_lengths.assign(o.batch, o.seqlen_k);
  } else {
    // A cache holds at least one key, even where every sequence is empty.
    const int longest = *std::max_element(o.cache_lengths.begin(), o.cache_lengths.end());
    o.seqlen_k = o.kv_capacity.value_or(std::max(longest, 1));
  }
  for (std::size_t s = 0; s < o.cache_lengths.size(); ++s) {
    if (o.cache_lengths[s] > o.seqlen_k) {
      attnjit::throw_field_error(
          "--kv-cache-len", o.kv_cache_len.substr(0, 64),
          fmt::format("at most --kv-capacity ({}) keys per sequence; sequence {} has {}",
                      o.seqlen_k, s, o.cache_lengths[s]));
    }
  }
  if (o.paged()) {
    if (!o.page_size) o.page_size = 16;
    if ((*o.page_size & (*o.page_size - 1)) != 0) {
      attnjit::throw_field_error("--page-size", std::to_string(*o.page_size),
                                 fmt::format("a power of two from 1 to {}", kMaxLength));
    }
    // The block table holds int32 page indices into a pool of batch x pages_per_sequence.
    if (static_cast<std::int64_t>(o.batch) * o.pages_per_sequence() > INT32_MAX) {
      attnjit::throw_field_error(
          "--page-size", std::to_string(*o.page_size),
          fmt::format("a size that leaves at most {} pages in the pool (--batch {} sequences of "
                      "{} pages)",
                      INT32_MAX, o.batch, o.pages_per_sequence()));
    }
  }
  if (!o.num_splits) o.num_splits = 0;
  if (o.seqlen_q == 0) o.seqlen_q = 1;
}

}  // namespace

void add_problem_options(CLI::App* cmd, ProblemOptions& o) {
  cmd->add_option("--batch", o.batch,
                  "Batch size (not with varlen=true; kv_cache: default the --kv-cache-len count)")
      ->check(integer_in(1, 65535));
  cmd->add_option("--heads", o.heads, "Query heads")->required()->check(integer_in(1, 65535));
  cmd->add_option("--kv-heads", o.kv_heads, "Key/value heads (default: --heads)")
      ->check(integer_in(1, 65535));
  cmd->add_option("--mask-heads", o.mask_heads, "FlashMask heads: 1 or the kv heads")
      ->check(integer_in(1, 65535));
  cmd->add_option("--seqlen-q", o.seqlen_q,
                  "Query length (not with varlen=true); kv_cache: the new tokens per sequence "
                  "(default 1)")
      ->check(integer_in(1, kMaxLength));
  cmd->add_option("--seqlen-k", o.seqlen_k,
                  "Key length (default: --seqlen-q; not with varlen=true or kv_cache)")
      ->check(integer_in(1, kMaxLength));
  cmd->add_option("--seqlens", o.seqlens,
                  "varlen=true: the packed sequences' query lengths, e.g. 1000,0,1,4096");
  cmd->add_option("--seqlens-k", o.seqlens_k,
                  "varlen=true: their key lengths, as many (default: --seqlens)");
  cmd->add_option("--seqused-k", o.seqused_k,
                  "varlen=true: the keys each sequence uses, from its start (default: all)");
  cmd->add_option("--kv-cache-len", o.kv_cache_len,
                  "kv_cache: the cached keys of every sequence, or of each, e.g. 4096 or "
                  "100,0,4096 (default: --kv-capacity)");
  cmd->add_option("--kv-capacity", o.kv_capacity,
                  "kv_cache: the keys each sequence's cache holds (default: the longest "
                  "--kv-cache-len)")
      ->check(integer_in(1, kMaxLength));
  cmd->add_option("--page-size", o.page_size,
                  "kv_cache=paged: keys per page, a power of two (default 16); the pool has "
                  "batch x ceil(capacity / page size) pages, shuffled in the block table")
      ->check(integer_in(1, kMaxLength));
  cmd->add_option("--num-splits", o.num_splits,
                  "kv_cache: key splits per sequence and KV head (default 0: automatic)")
      ->check(integer_in(0, attnjit::jit::detail::kMaxDecodeSplits));
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

void resolve_problem(ProblemOptions& o, const attnjit::AttentionSpec& spec) {
  o.kv_cache = spec.kv_cache;
  if (!o.cached()) refuse_kv_cache_options(o);
  if (o.cached()) {
    resolve_kv_cache(o);
  } else if (spec.varlen != attnjit::VarlenMode::off) {
    resolve_packed(o);
  } else {
    for (const auto& [option, text] :
         {std::pair<const char*, const std::string&>{"--seqlens", o.seqlens},
          {"--seqlens-k", o.seqlens_k},
          {"--seqused-k", o.seqused_k}}) {
      if (!text.empty()) {
        throw attnjit::Error(fmt::format(
            "{}: given, but the spec has varlen=false; accepted: {} with varlen=true in the spec "
            "(a packed batch), else --batch and --seqlen-q",
            option, option));
      }
    }
    if (o.batch == 0) {
      throw attnjit::Error(
          "--batch: missing; accepted: the batch size, 1 to 65535 (or --seqlens with varlen=true "
          "in the spec)");
    }
    if (o.seqlen_q == 0) {
      throw attnjit::Error(
          fmt::format("--seqlen-q: missing; accepted: the query length, 1 to {} (or --seqlens with "
                      "varlen=true in the spec)",
                      kMaxLength));
    }
  }
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

DeviceBuffer random_sinks(int heads, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> logit(-2.f, 3.f);
  std::vector<float> host(static_cast<std::size_t>(heads));
  for (float& t : host) t = logit(rng);
  DeviceBuffer buffer(std::max<std::size_t>(host.size(), 1) * 4);
  buffer.upload(host.data(), host.size() * 4);
  return buffer;
}

attnjit::TensorView sinks_view(const DeviceBuffer& sinks, int heads) {
  return attnjit::contiguous_view(sinks.data(), attnjit::ScalarType::fp32, {heads});
}

DeviceBuffer random_tensor(std::size_t count, attnjit::DType dtype, std::uint64_t seed) {
  constexpr std::size_t kPool = std::size_t{1} << 16;
  constexpr std::size_t kRun = 64;
  constexpr std::size_t kChunk = std::size_t{1} << 24;  // elements staged per upload
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::uint16_t> pool(kPool + kRun);
  for (auto& x : pool) {
    x = dtype == attnjit::DType::e4m3 ? random_e4m3_pair(rng, normal) : to_bits(dtype, normal(rng));
  }
  // e4m3: `count` bytes as count / 2 words of two codes (head dims are even).
  if (dtype == attnjit::DType::e4m3) count /= 2;
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

attnjit::dsl::IntervalVectors family_sample(const attnjit::MaskSpec& mask, int n,
                                            std::uint64_t seed, int heads) {
  namespace dsl = attnjit::dsl;
  dsl::IntervalVectors sample;
  if (mask.columns == 1 || (!mask.causal && mask.columns == 2)) {
    sample = dsl::random_documents(mask.causal, n, std::min(3, n), 7, seed);
  } else if (mask.causal) {
    const int test = std::max(1, n / 4);
    const int first = (n - test) / 2;
    const std::vector<int> blocks{first, n - test - first};
    sample = dsl::causal_blockwise(blocks, test);
  } else {
    const int window = std::max(1, n / 16);
    sample = dsl::global_sliding_window(n, std::min(n, 64), window, window);
  }
  return dsl::broadcast_heads(sample, heads);
}

attnjit::dsl::IntervalVectors make_vectors(const attnjit::MaskSpec& mask, const ProblemOptions& o) {
  namespace dsl = attnjit::dsl;
  if (o.packed()) return packed_vectors(mask, o);
  if (o.cached()) {
    // Over a KV cache the rows are positions, the same numbers as the keys: a row per key of
    // the capacity, each sequence's sample drawn over all of it.
    const int capacity = o.cache_capacity();
    if (o.mask_data == "random") {
      return dsl::random_intervals(mask.causal, mask.columns, o.batch, o.mask_heads, capacity,
                                   capacity, o.seed);
    }
    std::vector<dsl::IntervalVectors> samples;
    for (int b = 0; b < o.batch; ++b) {
      samples.push_back(family_sample(mask, capacity, o.seed + b, o.mask_heads));
    }
    return dsl::stack(samples);
  }
  if (o.mask_data == "random" || o.seqlen_q != o.seqlen_k) {
    return dsl::random_intervals(mask.causal, mask.columns, o.batch, o.mask_heads, o.seqlen_q,
                                 o.seqlen_k, o.seed);
  }
  std::vector<dsl::IntervalVectors> samples;
  for (int b = 0; b < o.batch; ++b) {
    samples.push_back(family_sample(mask, o.seqlen_q, o.seed + b, o.mask_heads));
  }
  return dsl::stack(samples);
}

attnjit::DType output_dtype(attnjit::DType dtype) {
  return dtype == attnjit::DType::e4m3 ? attnjit::DType::bf16 : dtype;
}

attnjit::TensorView activation_view(const DeviceBuffer& buffer, attnjit::DType dtype,
                                    const ProblemOptions& o, Rows rows, int heads, int dim) {
  const int seq = rows == Rows::query ? o.seqlen_q : o.seqlen_k;
  if (o.paged() && rows == Rows::key) {
    return attnjit::contiguous_view(buffer.data(), element_type(dtype),
                                    {key_rows(o) / *o.page_size, *o.page_size, heads, dim});
  }
  if (o.packed())
    return attnjit::contiguous_view(buffer.data(), element_type(dtype), {seq, heads, dim});
  return attnjit::contiguous_view(buffer.data(), element_type(dtype), {o.batch, seq, heads, dim});
}

std::int64_t key_rows(const ProblemOptions& o) {
  if (o.paged()) return static_cast<std::int64_t>(o.batch) * o.pages_per_sequence() * *o.page_size;
  return static_cast<std::int64_t>(o.batch) * o.seqlen_k;
}

attnjit::TensorView lse_view(const DeviceBuffer& buffer, const ProblemOptions& o) {
  if (o.packed()) {
    return attnjit::contiguous_view(buffer.data(), attnjit::ScalarType::fp32,
                                    {o.heads, o.seqlen_q});
  }
  return attnjit::contiguous_view(buffer.data(), attnjit::ScalarType::fp32,
                                  {o.batch, o.heads, o.seqlen_q});
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

double forward_flops(const attnjit::AttentionSpec& spec, std::int64_t pairs) {
  return 2.0 * (spec.head_dim_qk + spec.head_dim_v) * static_cast<double>(pairs);
}

double pair_density(const ProblemOptions& o, std::int64_t pairs) {
  double elements = static_cast<double>(o.batch) * o.seqlen_q * o.seqlen_k;
  if (o.cached()) {
    elements = 0;
    for (const int keys : o.cache_lengths) elements += static_cast<double>(o.seqlen_q) * keys;
  }
  if (o.packed()) {
    elements = 0;
    for (std::size_t s = 0; s < o.lengths_q.size(); ++s) {
      elements += static_cast<double>(o.lengths_q[s]) * o.lengths_k[s];
    }
  }
  return elements > 0 ? static_cast<double>(pairs) / (elements * o.heads) : 0.0;
}

nlohmann::ordered_json problem_json(const std::string& device,
                                    const attnjit::jit::CompileInfo& info,
                                    const ProblemOptions& o) {
  if (o.cached()) {
    nlohmann::ordered_json j = {{"spec", info.spec_text},
                                {"device", device},
                                {"batch", o.batch},
                                {"heads", o.heads},
                                {"kv_heads", o.kv_heads},
                                {"seqlen_q", o.seqlen_q},
                                {"kv_cache", std::string(attnjit::name_of(o.kv_cache))},
                                {"kv_capacity", o.seqlen_k},
                                {"cache_seqlens", o.cache_lengths}};
    if (o.paged()) {
      j["page_size"] = *o.page_size;
      j["num_pages"] = key_rows(o) / *o.page_size;
    }
    j["num_splits"] = *o.num_splits;
    return j;
  }
  if (o.packed()) {
    nlohmann::ordered_json j = {
        {"spec", info.spec_text}, {"device", device},         {"batch", o.lengths_q.size()},
        {"heads", o.heads},       {"kv_heads", o.kv_heads},   {"total_q", o.seqlen_q},
        {"total_k", o.seqlen_k},  {"seqlens_q", o.lengths_q}, {"seqlens_k", o.lengths_k}};
    if (!o.used_k.empty()) j["seqused_k"] = o.used_k;
    return j;
  }
  return {{"spec", info.spec_text}, {"device", device},       {"batch", o.batch},
          {"heads", o.heads},       {"kv_heads", o.kv_heads}, {"mask_heads", o.mask_heads},
          {"seqlen_q", o.seqlen_q}, {"seqlen_k", o.seqlen_k}};
}

void print_problem_header(const std::string& device, const attnjit::jit::CompileInfo& info,
                          const ProblemOptions& o, double density) {
  fmt::print("device   {}\nspec     {}\n", device, info.spec_text);
  if (o.cached()) {
    const auto [shortest, longest] =
        std::minmax_element(o.cache_lengths.begin(), o.cache_lengths.end());
    const std::string keys = *shortest == *longest ? std::to_string(*longest)
                                                   : fmt::format("{}..{}", *shortest, *longest);
    const std::string pages =
        o.paged() ? fmt::format(" in {} pages of {}", key_rows(o) / *o.page_size, *o.page_size)
                  : "";
    const std::string splits = *o.num_splits == 0 ? "auto" : std::to_string(*o.num_splits);
    fmt::print(
        "problem  B={} H={} Hkv={} Sq={} kv_cache={} capacity={}{}, cached keys {}, splits {}, "
        "{:.1f}% of pairs visible\n",
        o.batch, o.heads, o.kv_heads, o.seqlen_q, attnjit::name_of(o.kv_cache), o.seqlen_k, pages,
        keys, splits, 100 * density);
  } else if (o.packed()) {
    fmt::print(
        "problem  B={} packed, H={} Hkv={} total_q={} total_k={} (max Sq={} Sk={}){}, {:.1f}% of "
        "pairs within the sequences visible\n",
        o.lengths_q.size(), o.heads, o.kv_heads, o.seqlen_q, o.seqlen_k,
        *std::max_element(o.lengths_q.begin(), o.lengths_q.end()),
        *std::max_element(o.lengths_k.begin(), o.lengths_k.end()),
        o.used_k.empty() ? "" : ", seqused_k", 100 * density);
  } else {
    fmt::print("problem  B={} H={} Hkv={} Sq={} Sk={}, {:.1f}% of pairs visible\n", o.batch,
               o.heads, o.kv_heads, o.seqlen_q, o.seqlen_k, 100 * density);
  }
  for (const auto& k : info.kernels) {
    fmt::print("kernel   {}: {} registers, {} spill bytes, {} B smem\n", k.name, k.registers,
               k.spill_bytes, k.static_smem_bytes + k.dynamic_smem_bytes);
  }
}

}  // namespace attnc
