// build_mask: the host checks of a family's parameters, one launch of its device builder and,
// when validating, the message naming the first bad device parameter.
#include "attnjit/mask_builder.hpp"

#include <fmt/format.h>

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/masks/mask_params.cuh"
#include "dsl/families.hpp"
#include "runtime/jit/debug_mode.hpp"
#include "runtime/masks/mask_kernels.hpp"

namespace attnjit {
namespace {

// The codes of templates/attnjit/masks/mask_builders.cuh (MaskParamError).
enum ParamError : unsigned {
  kOffsetsStart = 1,
  kOffsetsDecrease = 2,
  kOffsetsEnd = 3,
  kSampleValue = 4,
  kDroppedLength = 5,
  kSegmentPrefix = 6,
};

using dsl::FamilyRow;

/// Sizes taken from the tensors: batch, mask heads, sample length, segments per offsets row.
struct Sizes {
  int batch = 0, mask_heads = 0, seqlen = 0, segments = 0;
};

class ArgsChecker {
 public:
  explicit ArgsChecker(const MaskBuildArgs& args)
      : args_(args),
        row_(dsl::vector_family(args.family)),
        family_(row_.name),
        reads_(row_.device_params) {}

  Sizes check() {
    check_output();
    check_tensor("offsets", args_.offsets, dsl::kOffsets);
    if (reads(dsl::kOffsets)) check_offsets();
    check_tensor("prefix", args_.prefix, dsl::kPrefix);
    if (reads(dsl::kPrefix)) check_per_sample("prefix", args_.prefix);
    check_tensor("test", args_.test, dsl::kTest);
    if (reads(dsl::kTest)) check_per_sample("test", args_.test);
    check_tensor("dropped_start", args_.dropped_start, dsl::kDroppedStart);
    check_tensor("dropped_length", args_.dropped_length, dsl::kDroppedLength);
    if (reads(dsl::kDroppedStart)) check_per_sample("dropped_start", args_.dropped_start);
    if (reads(dsl::kDroppedLength)) check_per_sample("dropped_length", args_.dropped_length);
    check_tensor("prefixes", args_.prefixes, dsl::kPrefixes);
    if (reads(dsl::kPrefixes)) check_prefixes();
    check_int("window", args_.window, dsl::kWindow, 1, INT_MAX, ">= 1");
    check_int("global_tokens", args_.global_tokens, dsl::kGlobalTokens, 0, sizes_.seqlen,
              fmt::format("0 to {} (N)", sizes_.seqlen));
    check_int("window_left", args_.window_left, dsl::kWindowLeft, 0, INT_MAX, ">= 0");
    check_int("window_right", args_.window_right, dsl::kWindowRight, 0, INT_MAX, ">= 0");
    if (!reads(dsl::kSeed) && args_.seed != 0) {
      throw Error(fmt::format("seed: got '{}', but {} reads no seed; accepted: 0 ({} reads {})",
                              args_.seed, family_, family_, dsl::device_param_names(reads_)));
    }
    return sizes_;
  }

 private:
  bool reads(unsigned param) const { return (reads_ & param) != 0; }

  void check_range(std::string_view field, std::int64_t value, std::int64_t lo, std::int64_t hi,
                   std::string_view what) {
    if (value < lo || value > hi) {
      throw_field_error(
          field, std::to_string(value),
          lo == hi ? fmt::format("{} ({})", lo, what) : fmt::format("{} to {} ({})", lo, hi, what));
    }
  }

  void check_output() {
    const TensorView& out = args_.startend_row_indices;
    runtime::check_int32_tensor("startend_row_indices", out, 4);
    check_range("startend_row_indices.shape[0] (batch)", out.shape[0], 1, 65535, "batch rows");
    if (row_.per_head) {
      check_range("startend_row_indices.shape[1] (mask heads)", out.shape[1], 1, 65535,
                  "mask heads");
    } else {
      check_range("startend_row_indices.shape[1] (mask heads)", out.shape[1], 1, 1,
                  fmt::format("{} builds one mask head; broadcast it over heads", family_));
    }
    check_range("startend_row_indices.shape[2] (N)", out.shape[2], 1, INT32_MAX / 2,
                "the sample length");
    const int columns = row_.columns;
    check_range("startend_row_indices.shape[3] (columns)", out.shape[3], columns, columns,
                fmt::format("the columns of {}", family_));
    sizes_.batch = static_cast<int>(out.shape[0]);
    sizes_.mask_heads = static_cast<int>(out.shape[1]);
    sizes_.seqlen = static_cast<int>(out.shape[2]);
  }

  /// A tensor the family does not read must be absent.
  void check_tensor(std::string_view name, const TensorView& t, unsigned param) {
    if (!reads(param) && !t.empty()) {
      throw Error(fmt::format("{}: given, but {} does not read it; accepted: no {} ({} reads {})",
                              name, family_, name, family_, dsl::device_param_names(reads_)));
    }
  }

  void check_batch(std::string_view name, const TensorView& t) {
    check_range(fmt::format("{}.shape[0]", name), t.shape[0], sizes_.batch, sizes_.batch,
                "the batch of startend_row_indices");
  }

  void check_offsets() {
    runtime::check_int32_tensor("offsets", args_.offsets, 2);
    check_batch("offsets", args_.offsets);
    check_range("offsets.shape[1]", args_.offsets.shape[1], 2, INT32_MAX,
                "S + 1 entries for S >= 1 segments");
    sizes_.segments = static_cast<int>(args_.offsets.shape[1] - 1);
  }

  void check_per_sample(std::string_view name, const TensorView& t) {
    runtime::check_int32_tensor(name, t, 1);
    check_batch(name, t);
  }

  void check_prefixes() {
    runtime::check_int32_tensor("prefixes", args_.prefixes, 2);
    check_batch("prefixes", args_.prefixes);
    check_range("prefixes.shape[1]", args_.prefixes.shape[1], sizes_.segments, sizes_.segments,
                "one prefix per segment of offsets");
  }

  void check_int(std::string_view name, int value, unsigned param, std::int64_t lo, std::int64_t hi,
                 std::string_view accepted) {
    if (!reads(param)) {
      if (value != -1) {
        throw Error(
            fmt::format("{}: got '{}', but {} does not read it; accepted: -1 (not "
                        "given; {} reads {})",
                        name, value, family_, family_, dsl::device_param_names(reads_)));
      }
      return;
    }
    if (value < lo || value > hi) throw_field_error(name, std::to_string(value), accepted);
  }

  const MaskBuildArgs& args_;
  const FamilyRow& row_;
  std::string_view family_;
  unsigned reads_;
  Sizes sizes_;
};

/// The one-per-sample field kSampleValue reports: the first of prefix, test and dropped_start
/// that the family reads.
std::pair<std::string_view, const TensorView*> sample_field(const MaskBuildArgs& args) {
  const unsigned reads = dsl::vector_family(args.family).device_params;
  if ((reads & dsl::kPrefix) != 0) return {"prefix", &args.prefix};
  if ((reads & dsl::kTest) != 0) return {"test", &args.test};
  return {"dropped_start", &args.dropped_start};
}

/// The message of the first bad device parameter the builder reported.
[[noreturn]] void throw_bad_parameter(const MaskBuildArgs& args, const Sizes& s,
                                      unsigned long long found) {
  const int b = static_cast<int>(found >> 36);
  const long long index = static_cast<long long>((found >> 4) & 0xffffffffull);
  const unsigned code = static_cast<unsigned>(found & 15);
  const long long row = static_cast<long long>(b) * (s.segments + 1);
  const std::string n = fmt::format("{} (N)", s.seqlen);
  switch (code) {
    case kOffsetsStart:
      throw_field_error(fmt::format("offsets[{}][0]", b),
                        std::to_string(runtime::read_device_int(args.offsets.data, row)),
                        "0 (every row starts at 0)");
    case kOffsetsDecrease: {
      const int value = runtime::read_device_int(args.offsets.data, row + index);
      const int before = runtime::read_device_int(args.offsets.data, row + index - 1);
      throw_field_error(fmt::format("offsets[{}][{}]", b, index), std::to_string(value),
                        fmt::format(">= offsets[{}][{}] = {} (0 = o_0 <= o_1 <= ... <= o_S = N)", b,
                                    index - 1, before));
    }
    case kOffsetsEnd:
      throw_field_error(
          fmt::format("offsets[{}][{}]", b, index),
          std::to_string(runtime::read_device_int(args.offsets.data, row + index)),
          fmt::format("{}: every row ends at N, rows with fewer segments repeat it", n));
    case kSampleValue: {
      const auto [field, t] = sample_field(args);
      throw_field_error(fmt::format("{}[{}]", field, b),
                        std::to_string(runtime::read_device_int(t->data, b)),
                        fmt::format("0 to {}", n));
    }
    case kDroppedLength: {
      const int start = runtime::read_device_int(args.dropped_start.data, b);
      throw_field_error(fmt::format("dropped_length[{}]", b),
                        std::to_string(runtime::read_device_int(args.dropped_length.data, b)),
                        fmt::format("0 to {} (N - dropped_start[{}] = {} - {})",
                                    static_cast<long long>(s.seqlen) - start, b, s.seqlen, start));
    }
    case kSegmentPrefix: {
      const int start = runtime::read_device_int(args.offsets.data, row + index);
      const int end = runtime::read_device_int(args.offsets.data, row + index + 1);
      const long long prefix_row = static_cast<long long>(b) * s.segments;
      throw_field_error(
          fmt::format("prefixes[{}][{}]", b, index),
          std::to_string(runtime::read_device_int(args.prefixes.data, prefix_row + index)),
          fmt::format("0 to {} (the length of segment {}: offsets[{}][{}] - offsets[{}][{}])",
                      static_cast<long long>(end) - start, index, b, index + 1, b, index));
    }
    default:
      throw InternalError(fmt::format("mask builder: unknown parameter error code {}", code));
  }
}

}  // namespace

std::vector<std::string_view> mask_families() {
  std::vector<std::string_view> names;
  for (const FamilyRow& row : dsl::family_table()) {
    if (row.has_vectors()) names.push_back(row.name);
  }
  return names;
}

std::string_view parse_mask_family(std::string_view text) {
  return dsl::vector_family(text).name;
}

MaskSpec mask_spec_of(std::string_view family) {
  const FamilyRow& row = dsl::vector_family(family);
  return {MaskKind::flashmask, row.causal, row.columns};
}

void check_mask_build_args(const MaskBuildArgs& args) {
  ArgsChecker(args).check();
}

MaskSpec build_mask(const MaskBuildArgs& args, jit::Stream stream_handle) {
  const Sizes sizes = ArgsChecker(args).check();
  const bool validating = args.validate || runtime::debug_mode();
  const CUstream stream = static_cast<CUstream>(stream_handle);
  const runtime::MaskKernel kernel = runtime::compile_mask_kernel(
      {std::string(parse_mask_family(args.family)), Arch::auto_detect});

  MaskBuildParams params{};
  params.intervals = static_cast<int*>(args.startend_row_indices.data);
  params.offsets = static_cast<const int*>(args.offsets.data);
  params.prefix = static_cast<const int*>(args.prefix.data);
  params.prefixes = static_cast<const int*>(args.prefixes.data);
  params.test = static_cast<const int*>(args.test.data);
  params.dropped_start = static_cast<const int*>(args.dropped_start.data);
  params.dropped_length = static_cast<const int*>(args.dropped_length.data);
  params.seed = args.seed;
  params.batch = sizes.batch;
  params.mask_heads = sizes.mask_heads;
  params.seqlen = sizes.seqlen;
  params.segments = sizes.segments;
  params.window = args.window;
  params.global_tokens = args.global_tokens;
  params.window_left = args.window_left;
  params.window_right = args.window_right;
  std::optional<runtime::FirstErrorSlot> first_error;
  if (validating) {
    first_error.emplace(stream);
    params.first_error = first_error->device();
  }
  const unsigned grid[3] = {static_cast<unsigned>((static_cast<long long>(sizes.seqlen) +
                                                   runtime::kMaskKernelThreads - 1) /
                                                  runtime::kMaskKernelThreads),
                            static_cast<unsigned>(sizes.batch),
                            static_cast<unsigned>(sizes.mask_heads)};
  runtime::launch_mask_kernel(kernel, grid, &params, stream);
  if (first_error) {
    if (const auto found = first_error->wait_and_read()) throw_bad_parameter(args, sizes, *found);
  }
  return mask_spec_of(args.family);
}

}  // namespace attnjit
