// build_mask: the host checks of a family's parameters, one launch of its device builder and,
// when validating, the message naming the first bad device parameter.
#include "attnjit/mask_builder.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/masks/mask_params.cuh"
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

/// The parameters a family reads (bit set).
enum Field : unsigned {
  kOffsets = 1u << 0,
  kPrefix = 1u << 1,
  kPrefixes = 1u << 2,
  kTest = 1u << 3,
  kDropped = 1u << 4,  ///< dropped_start and dropped_length
  kWindow = 1u << 5,
  kGlobalWindow = 1u << 6,  ///< global_tokens, window_left, window_right
  kSeed = 1u << 7,
};

unsigned fields_of(MaskFamily family) {
  switch (family) {
    case MaskFamily::sliding_window:
      return kWindow;
    case MaskFamily::causal_document:
    case MaskFamily::document:
    case MaskFamily::share_question:
      return kOffsets;
    case MaskFamily::global_sliding_window:
      return kGlobalWindow;
    case MaskFamily::causal_blockwise:
      return kOffsets | kTest;
    case MaskFamily::prefix_lm_causal:
      return kPrefix;
    case MaskFamily::prefix_lm_document:
      return kOffsets | kPrefixes;
    case MaskFamily::qk_sparse:
      return kDropped;
    case MaskFamily::random_eviction:
      return kSeed;
  }
  throw InternalError("unknown MaskFamily");
}

std::string field_names(unsigned fields) {
  static constexpr std::array<std::pair<unsigned, std::string_view>, 8> kNames{{
      {kOffsets, "offsets"},
      {kPrefix, "prefix"},
      {kPrefixes, "prefixes"},
      {kTest, "test"},
      {kDropped, "dropped_start, dropped_length"},
      {kWindow, "window"},
      {kGlobalWindow, "global_tokens, window_left, window_right"},
      {kSeed, "seed"},
  }};
  std::string out;
  for (const auto& [field, names] : kNames) {
    if ((fields & field) == 0) continue;
    if (!out.empty()) out += ", ";
    out += names;
  }
  return out;
}

/// Sizes taken from the tensors: batch, mask heads, sample length, segments per offsets row.
struct Sizes {
  int batch = 0, mask_heads = 0, seqlen = 0, segments = 0;
};

class ArgsChecker {
 public:
  explicit ArgsChecker(const MaskBuildArgs& args)
      : args_(args), family_(name_of(args.family)), reads_(fields_of(args.family)) {}

  Sizes check() {
    check_output();
    check_tensor("offsets", args_.offsets, kOffsets);
    if (reads(kOffsets)) check_offsets();
    check_tensor("prefix", args_.prefix, kPrefix);
    if (reads(kPrefix)) check_per_sample("prefix", args_.prefix);
    check_tensor("test", args_.test, kTest);
    if (reads(kTest)) check_per_sample("test", args_.test);
    check_tensor("dropped_start", args_.dropped_start, kDropped);
    check_tensor("dropped_length", args_.dropped_length, kDropped);
    if (reads(kDropped)) {
      check_per_sample("dropped_start", args_.dropped_start);
      check_per_sample("dropped_length", args_.dropped_length);
    }
    check_tensor("prefixes", args_.prefixes, kPrefixes);
    if (reads(kPrefixes)) check_prefixes();
    check_int("window", args_.window, kWindow, 1, INT_MAX, ">= 1");
    check_int("global_tokens", args_.global_tokens, kGlobalWindow, 0, sizes_.seqlen,
              fmt::format("0 to {} (N)", sizes_.seqlen));
    check_int("window_left", args_.window_left, kGlobalWindow, 0, INT_MAX, ">= 0");
    check_int("window_right", args_.window_right, kGlobalWindow, 0, INT_MAX, ">= 0");
    if (!reads(kSeed) && args_.seed != 0) {
      throw Error(fmt::format("seed: got '{}', but {} reads no seed; accepted: 0 ({} reads {})",
                              args_.seed, family_, family_, field_names(reads_)));
    }
    return sizes_;
  }

 private:
  bool reads(unsigned field) const { return (reads_ & field) != 0; }

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
    if (args_.family == MaskFamily::random_eviction) {
      check_range("startend_row_indices.shape[1] (mask heads)", out.shape[1], 1, 65535,
                  "mask heads");
    } else {
      check_range("startend_row_indices.shape[1] (mask heads)", out.shape[1], 1, 1,
                  fmt::format("{} builds one mask head; broadcast it over heads", family_));
    }
    check_range("startend_row_indices.shape[2] (N)", out.shape[2], 1, INT32_MAX / 2,
                "the sample length");
    const int columns = mask_spec_of(args_.family).columns;
    check_range("startend_row_indices.shape[3] (columns)", out.shape[3], columns, columns,
                fmt::format("the columns of {}", family_));
    sizes_.batch = static_cast<int>(out.shape[0]);
    sizes_.mask_heads = static_cast<int>(out.shape[1]);
    sizes_.seqlen = static_cast<int>(out.shape[2]);
  }

  /// A tensor the family does not read must be absent.
  void check_tensor(std::string_view name, const TensorView& t, unsigned field) {
    if (!reads(field) && !t.empty()) {
      throw Error(fmt::format("{}: given, but {} does not read it; accepted: no {} ({} reads {})",
                              name, family_, name, family_, field_names(reads_)));
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

  void check_int(std::string_view name, int value, unsigned field, std::int64_t lo, std::int64_t hi,
                 std::string_view accepted) {
    if (!reads(field)) {
      if (value != -1) {
        throw Error(
            fmt::format("{}: got '{}', but {} does not read it; accepted: -1 (not "
                        "given; {} reads {})",
                        name, value, family_, family_, field_names(reads_)));
      }
      return;
    }
    if (value < lo || value > hi) throw_field_error(name, std::to_string(value), accepted);
  }

  const MaskBuildArgs& args_;
  std::string_view family_;
  unsigned reads_;
  Sizes sizes_;
};

std::string_view sample_field(MaskFamily family) {
  switch (family) {
    case MaskFamily::prefix_lm_causal:
      return "prefix";
    case MaskFamily::causal_blockwise:
      return "test";
    default:
      return "dropped_start";
  }
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
      const std::string_view field = sample_field(args.family);
      const TensorView& t = args.family == MaskFamily::prefix_lm_causal   ? args.prefix
                            : args.family == MaskFamily::causal_blockwise ? args.test
                                                                          : args.dropped_start;
      throw_field_error(fmt::format("{}[{}]", field, b),
                        std::to_string(runtime::read_device_int(t.data, b)),
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

MaskSpec mask_spec_of(MaskFamily family) {
  switch (family) {
    case MaskFamily::sliding_window:
    case MaskFamily::causal_document:
    case MaskFamily::share_question:
    case MaskFamily::random_eviction:
      return {MaskKind::flashmask, true, 1};
    case MaskFamily::causal_blockwise:
    case MaskFamily::qk_sparse:
      return {MaskKind::flashmask, true, 2};
    case MaskFamily::document:
    case MaskFamily::prefix_lm_causal:
    case MaskFamily::prefix_lm_document:
      return {MaskKind::flashmask, false, 2};
    case MaskFamily::global_sliding_window:
      return {MaskKind::flashmask, false, 4};
  }
  throw InternalError("unknown MaskFamily");
}

void check_mask_build_args(const MaskBuildArgs& args) {
  ArgsChecker(args).check();
}

MaskSpec build_mask(const MaskBuildArgs& args, jit::Stream stream_handle) {
  const Sizes sizes = ArgsChecker(args).check();
  const bool validating = args.validate || runtime::debug_mode();
  const CUstream stream = static_cast<CUstream>(stream_handle);
  const runtime::MaskKernel kernel = runtime::compile_mask_kernel({args.family, Arch::auto_detect});

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
