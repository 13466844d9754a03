// attnc mask-build: FlashMask vectors of a family built on the GPU from random (or given)
// compact parameters, optionally printed, and with --time the median time of building them, of
// the forward's min/max tables over them, and of both, with CUDA events.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <list>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnjit/common/params.cuh"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "attnjit/mask_builder.hpp"
#include "dsl/families.hpp"
#include "dsl/intervals.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

struct MaskBuildOptions {
  std::string family, docs = "3:7", offsets;
  int batch = 1, seqlen = 0, mask_heads = 1;
  int window = 1024, global_tokens = 64, window_left = 1024, window_right = 1024;
  std::uint64_t seed = 1;
  int warmup = 5, repeat = 50;
  bool validate = false, time = false, print = false, json = false;
};

/// A uniform integer in [lo, hi] from the raw engine output (the same on every platform).
int uniform(std::mt19937_64& rng, int lo, int hi) {
  return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

int parse_int(std::string_view text, std::string_view field) {
  int value = 0;
  const auto [end, errc] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || errc != std::errc() || end != text.data() + text.size()) {
    attnjit::throw_field_error(field, text, "an integer");
  }
  return value;
}

/// --docs MIN:MAX, 1 <= MIN <= MAX.
std::pair<int, int> parse_docs(const std::string& text) {
  const auto colon = text.find(':');
  const std::string_view whole(text);
  if (colon == std::string::npos) attnjit::throw_field_error("--docs", text, "MIN:MAX");
  const int lo = parse_int(whole.substr(0, colon), "--docs");
  const int hi = parse_int(whole.substr(colon + 1), "--docs");
  if (lo < 1 || hi < lo) attnjit::throw_field_error("--docs", text, "MIN:MAX with 1 <= MIN <= MAX");
  return {lo, hi};
}

/// --offsets "0,4,7,10;0,5,10": one row per batch row, each 0 = o_0 <= ... <= o_S = N.
std::vector<std::vector<int>> parse_offsets(const std::string& text, int batch, int seqlen) {
  std::vector<std::vector<int>> rows;
  std::string_view rest(text);
  while (true) {
    const auto end = rest.find(';');
    std::vector<int> row;
    std::string_view items = rest.substr(0, end);
    while (true) {
      const auto comma = items.find(',');
      row.push_back(parse_int(items.substr(0, comma), "--offsets"));
      if (comma == std::string_view::npos) break;
      items.remove_prefix(comma + 1);
    }
    const bool ordered = std::is_sorted(row.begin(), row.end());
    if (row.size() < 2 || row.front() != 0 || row.back() != seqlen || !ordered) {
      attnjit::throw_field_error(
          "--offsets", text,
          fmt::format("rows 0,o_1,...,{} of non-decreasing integers separated by ';'", seqlen));
    }
    rows.push_back(std::move(row));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  if (static_cast<int>(rows.size()) != batch) {
    attnjit::throw_field_error("--offsets", text, fmt::format("{} rows (--batch)", batch));
  }
  return rows;
}

/// Offsets of a sample split into a random number of documents in [lo, min(hi, n)], each of
/// at least one token.
std::vector<int> random_offsets(std::mt19937_64& rng, int n, int lo, int hi) {
  const int docs = uniform(rng, std::min(lo, n), std::min(hi, n));
  std::vector<int> cuts(static_cast<std::size_t>(n - 1));
  std::iota(cuts.begin(), cuts.end(), 1);
  for (int i = 0; i < docs - 1; ++i) std::swap(cuts[i], cuts[uniform(rng, i, n - 2)]);
  cuts.resize(static_cast<std::size_t>(docs - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> offsets{0};
  offsets.insert(offsets.end(), cuts.begin(), cuts.end());
  offsets.push_back(n);
  return offsets;
}

/// An int32 device tensor holding `values`.
struct DeviceInts {
  DeviceBuffer buffer;
  attnjit::TensorView view;
};

/// The family's compact parameters, and the segment counts of the rows. The tensors of `args`
/// view `host` until to_device() uploads them (the checks run on the host views first).
struct Parameters {
  std::list<std::vector<int>> host;
  std::vector<DeviceInts> tensors;
  attnjit::MaskBuildArgs args;
  int min_segments = 0, max_segments = 0;
};

/// Uploads every host tensor `args` views and points the views at the device copies.
void to_device(Parameters& p) {
  attnjit::MaskBuildArgs& a = p.args;
  for (attnjit::TensorView* view : {&a.startend_row_indices, &a.offsets, &a.prefix, &a.prefixes,
                                    &a.test, &a.dropped_start, &a.dropped_length}) {
    if (view->data == nullptr) continue;
    const auto host = std::find_if(p.host.begin(), p.host.end(), [&](const std::vector<int>& v) {
      return static_cast<const void*>(v.data()) == view->data;
    });
    attnjit::internal_check(host != p.host.end(), "every mask-build tensor views a host buffer");
    DeviceInts device{DeviceBuffer(host->size() * sizeof(int)), *view};
    device.buffer.upload(host->data(), host->size() * sizeof(int));
    device.view.data = device.buffer.data();
    *view = device.view;
    p.tensors.push_back(std::move(device));
  }
}

/// Random (or given) values of every field the family's device builder reads.
Parameters make_parameters(const attnjit::dsl::FamilyRow& family, const MaskBuildOptions& o,
                           const std::vector<std::vector<int>>& rows, std::mt19937_64& rng) {
  namespace dsl = attnjit::dsl;
  Parameters p;
  attnjit::MaskBuildArgs& a = p.args;
  a.family = family.name;
  a.validate = o.validate;
  const int n = o.seqlen;
  const auto reads = [&](unsigned param) { return (family.device_params & param) != 0; };
  auto tensor = [&](const std::vector<int>& values, std::initializer_list<std::int64_t> shape) {
    p.host.push_back(values);
    return attnjit::contiguous_view(p.host.back().data(), attnjit::ScalarType::int32, shape);
  };
  int width = 0;
  for (const auto& row : rows) width = std::max(width, static_cast<int>(row.size()));
  p.min_segments = width - 1;
  for (const auto& row : rows) {
    p.min_segments = std::min(p.min_segments, static_cast<int>(row.size()) - 1);
  }
  p.max_segments = width - 1;
  std::vector<int> flat;
  for (const auto& row : rows) {
    flat.insert(flat.end(), row.begin(), row.end());
    flat.insert(flat.end(), width - row.size(), n);
  }
  const auto batch = static_cast<std::size_t>(o.batch);
  if (reads(dsl::kOffsets)) a.offsets = tensor(flat, {o.batch, width});
  if (reads(dsl::kWindow)) a.window = o.window;
  if (reads(dsl::kGlobalTokens)) a.global_tokens = std::min(o.global_tokens, n);
  if (reads(dsl::kWindowLeft)) a.window_left = o.window_left;
  if (reads(dsl::kWindowRight)) a.window_right = o.window_right;
  if (reads(dsl::kTest)) {  // the last document is the test block
    std::vector<int> tests(batch);
    for (int b = 0; b < o.batch; ++b) tests[b] = n - rows[b][rows[b].size() - 2];
    a.test = tensor(tests, {o.batch});
  }
  if (reads(dsl::kPrefix)) {
    std::vector<int> prefixes(batch);
    for (int& prefix : prefixes) prefix = uniform(rng, 0, n);
    a.prefix = tensor(prefixes, {o.batch});
  }
  if (reads(dsl::kPrefixes)) {
    std::vector<int> prefixes;
    for (int b = 0; b < o.batch; ++b) {
      for (int d = 0; d + 1 < width; ++d) {
        const int* row = flat.data() + static_cast<std::size_t>(b) * width;
        prefixes.push_back(uniform(rng, 0, row[d + 1] - row[d]));
      }
    }
    a.prefixes = tensor(prefixes, {o.batch, width - 1});
  }
  if (reads(dsl::kDroppedStart) || reads(dsl::kDroppedLength)) {
    std::vector<int> starts(batch), lengths(batch);
    for (int b = 0; b < o.batch; ++b) {
      starts[b] = uniform(rng, 0, n);
      lengths[b] = uniform(rng, 0, n - starts[b]);
    }
    if (reads(dsl::kDroppedStart)) a.dropped_start = tensor(starts, {o.batch});
    if (reads(dsl::kDroppedLength)) a.dropped_length = tensor(lengths, {o.batch});
  }
  if (reads(dsl::kSeed)) a.seed = o.seed;
  return p;
}

/// "random_eviction": the families whose vectors differ between mask heads.
std::string per_head_families() {
  std::vector<std::string_view> names;
  for (const attnjit::dsl::FamilyRow& row : attnjit::dsl::family_table()) {
    if (row.per_head) names.push_back(row.name);
  }
  return fmt::format("{} build{}", fmt::join(names, ", "), names.size() == 1 ? "s" : "");
}

/// The forward kernel over `mask` (bf16, head dim 128) whose plan builds the min/max tables.
attnjit::jit::Kernel forward_over(const attnjit::MaskSpec& mask) {
  attnjit::AttentionSpec spec;
  spec.dtype = attnjit::DType::bf16;
  spec.head_dim_qk = spec.head_dim_v = 128;
  spec.mask = mask;
  return attnjit::jit::compile(spec);
}

double median_us(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2];
}

template <class Work>
double time_median_us(const MaskBuildOptions& o, Work&& work) {
  for (int i = 0; i < o.warmup; ++i) work();
  std::vector<float> times;
  for (int i = 0; i < o.repeat; ++i) {
    attnjit::runtime::EventTimer timer;
    timer.start(nullptr);
    work();
    timer.stop(nullptr);
    times.push_back(timer.milliseconds());
  }
  return median_us(times);
}

void print_vectors(const DeviceInts& out, const attnjit::MaskSpec& mask) {
  std::vector<int> values(out.buffer.bytes() / sizeof(int));
  out.buffer.download(values.data(), out.buffer.bytes());
  const auto& shape = out.view.shape;
  for (std::int64_t b = 0; b < shape[0]; ++b) {
    for (std::int64_t h = 0; h < shape[1]; ++h) {
      for (int c = 0; c < mask.columns; ++c) {
        std::string line = fmt::format("b={} h={} {}:", b, h,
                                       attnjit::dsl::vector_name(mask.causal, mask.columns, c));
        for (std::int64_t j = 0; j < shape[2]; ++j) {
          line += fmt::format(" {}", values[((b * shape[1] + h) * shape[2] + j) * shape[3] + c]);
        }
        fmt::print("{}\n", line);
      }
    }
  }
}

void mask_build(const MaskBuildOptions& o) {
  const attnjit::dsl::FamilyRow& family = attnjit::dsl::vector_family(o.family);
  const attnjit::MaskSpec mask = attnjit::mask_spec_of(family.name);
  const bool reads_offsets = (family.device_params & attnjit::dsl::kOffsets) != 0;
  const auto [min_docs, max_docs] = parse_docs(o.docs);
  if (o.mask_heads != 1 && !family.per_head) {
    attnjit::throw_field_error("--mask-heads", std::to_string(o.mask_heads),
                               fmt::format("1 (only {} several mask heads)", per_head_families()));
  }
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int>> rows;
  if (!o.offsets.empty()) {
    rows = parse_offsets(o.offsets, o.batch, o.seqlen);
  } else {
    for (int b = 0; b < o.batch; ++b) {
      rows.push_back(random_offsets(rng, o.seqlen, min_docs, max_docs));
    }
  }

  Parameters p = make_parameters(family, o, rows, rng);
  const std::size_t count =
      static_cast<std::size_t>(o.batch) * o.mask_heads * o.seqlen * mask.columns;
  p.host.emplace_back(count, -1);
  p.args.startend_row_indices =
      attnjit::contiguous_view(p.host.back().data(), attnjit::ScalarType::int32,
                               {o.batch, o.mask_heads, o.seqlen, mask.columns});
  attnjit::check_mask_build_args(p.args);  // before any device work
  to_device(p);
  const DeviceInts& out = p.tensors.front();
  attnjit::build_mask(p.args);
  attnjit::runtime::check(attnjit::runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  const std::string mask_text = attnjit::to_string(mask);
  const std::string device = attnjit::runtime::current_device().name;

  nlohmann::json j;
  j["device"] = device;
  j["family"] = o.family;
  j["mask"] = mask_text;
  j["batch"] = o.batch;
  j["mask_heads"] = o.mask_heads;
  j["seqlen"] = o.seqlen;
  if (reads_offsets) j["segments"] = {p.min_segments, p.max_segments};
  if (o.time) {
    // Only the plan's min/max kernel, launched as the forward launches it.
    namespace detail = attnjit::jit::detail;
    const attnjit::jit::Kernel forward = forward_over(mask);
    const detail::KernelSet& set = detail::set_of(forward);
    const attnjit::KernelDesc* minmax = set.plan->find(attnjit::KernelRole::flashmask_minmax);
    attnjit::internal_check(minmax != nullptr, "a flashmask forward plan has a min/max kernel");
    const detail::Shapes shapes{o.batch,      o.seqlen,     o.seqlen,
                                o.mask_heads, o.mask_heads, o.mask_heads};
    attnjit::FwdParams params{};
    params.intervals = static_cast<const int*>(out.view.data);
    params.batch = o.batch;
    params.heads = params.kv_heads = params.mask_heads = o.mask_heads;
    params.seqlen_q = params.seqlen_k = o.seqlen;
    const std::size_t workspace_bytes =
        detail::schedule_plan(*set.plan, detail::launch_extents(shapes)).workspace_bytes;
    DeviceBuffer workspace_memory(workspace_bytes);
    const attnjit::Workspace workspace{workspace_memory.data(), workspace_bytes};
    auto build = [&] { attnjit::build_mask(p.args); };
    auto tables_only = [&] {
      detail::launch_plan(set, params, shapes, workspace, nullptr,
                          attnjit::KernelRole::flashmask_minmax);
    };
    const double build_us = time_median_us(o, build);
    const double minmax_us = time_median_us(o, tables_only);
    const double both_us = time_median_us(o, [&] {
      build();
      tables_only();
    });
    j["block_n"] = minmax->block_n;
    j["build_us"] = build_us;
    j["minmax_us"] = minmax_us;
    j["total_us"] = both_us;
    j["repeat"] = o.repeat;
  }
  if (o.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("device    {}\nmask      {}: {}, B={} Hm={} N={}{}\n", device, o.family, mask_text,
             o.batch, o.mask_heads, o.seqlen,
             reads_offsets
                 ? fmt::format(", {}..{} segments per row", p.min_segments, p.max_segments)
                 : "");
  if (o.print) print_vectors(out, mask);
  if (o.time) {
    fmt::print("| step (median of {}, CUDA events) | us |\n|---|---:|\n", o.repeat);
    fmt::print("| build vectors | {:.1f} |\n", j["build_us"].get<double>());
    fmt::print("| min/max tables (block_n={}) | {:.1f} |\n", j["block_n"].get<int>(),
               j["minmax_us"].get<double>());
    fmt::print("| build + min/max | {:.1f} |\n", j["total_us"].get<double>());
  }
}

}  // namespace

void add_mask_build(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "mask-build", "Build a family's FlashMask vectors on the GPU (and time them with --time)");
  static MaskBuildOptions o;
  cmd->add_option("--family", o.family, "sliding_window, causal_document, document, ...")
      ->required();
  cmd->add_option("--batch", o.batch, "Batch rows")->check(integer_in(1, 65535));
  cmd->add_option("--seqlen", o.seqlen, "Tokens per sample (N)")
      ->required()
      ->check(integer_in(1, 1 << 30));
  cmd->add_option("--docs", o.docs, "Random documents per row: MIN:MAX (default 3:7)");
  cmd->add_option("--offsets", o.offsets, "Given offsets rows instead, e.g. 0,4,7,10;0,5,10");
  cmd->add_option("--window", o.window, "sliding_window: keys per row")
      ->check(integer_in(INT32_MIN, INT32_MAX));
  cmd->add_option("--global", o.global_tokens, "global_sliding_window: global tokens")
      ->check(integer_in(INT32_MIN, INT32_MAX));
  cmd->add_option("--left", o.window_left, "global_sliding_window: keys left of the diagonal")
      ->check(integer_in(INT32_MIN, INT32_MAX));
  cmd->add_option("--right", o.window_right, "global_sliding_window: keys right of the diagonal")
      ->check(integer_in(INT32_MIN, INT32_MAX));
  cmd->add_option("--mask-heads", o.mask_heads, "random_eviction: mask heads")
      ->check(integer_in(1, 65535));
  cmd->add_option("--seed", o.seed, "Seed of the random parameters (and of random_eviction)")
      ->check(unsigned_64());
  cmd->add_flag("--validate", o.validate, "Check the device parameters too");
  cmd->add_flag("--print", o.print, "Print the vectors");
  cmd->add_flag("--time", o.time, "Time building, the min/max tables and both (CUDA events)");
  cmd->add_option("--warmup", o.warmup, "Untimed runs first (default 5)")
      ->check(integer_in(0, INT32_MAX));
  cmd->add_option("--repeat", o.repeat, "Timed runs; the median is reported (default 50)")
      ->check(integer_in(1, INT32_MAX));
  cmd->add_flag("--json", o.json, "Print one JSON object");
  cmd->callback([] { mask_build(o); });
}

}  // namespace attnc
