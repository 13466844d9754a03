// The device mask builders and the interval check without a device: family names and
// structures, every host-side check of build_mask and validate_intervals (each throws Error
// before anything touches the device; fake device pointers), ATTNJIT_DEBUG, and the NVRTC
// compilation and caching of every mask kernel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/mask_builder.hpp"
#include "dsl/families.hpp"
#include "runtime/jit/debug_mode.hpp"
#include "runtime/masks/mask_kernels.hpp"
#include "support/env_override.hpp"
#include "support/error_text.hpp"

using namespace attnjit;
using testing::EnvOverride;

namespace {

void* fake(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

TensorView ints(std::uintptr_t address, std::initializer_list<std::int64_t> shape) {
  return contiguous_view(fake(address), ScalarType::int32, shape);
}

/// Well-formed arguments of `family` for B = 3, N = 100, S = 4, fake pointers: every field its
/// row says the device builder reads. The checks below break one field each, so none of them
/// reaches the device.
MaskBuildArgs good_args(std::string_view family) {
  const dsl::FamilyRow& row = dsl::vector_family(family);
  const auto reads = [&](unsigned param) { return (row.device_params & param) != 0; };
  MaskBuildArgs a;
  a.family = family;
  a.startend_row_indices = ints(0x10000, {3, row.per_head ? 2 : 1, 100, row.columns});
  if (reads(dsl::kOffsets)) a.offsets = ints(0x20000, {3, 5});
  if (reads(dsl::kPrefix)) a.prefix = ints(0x30000, {3});
  if (reads(dsl::kTest)) a.test = ints(0x30000, {3});
  if (reads(dsl::kPrefixes)) a.prefixes = ints(0x40000, {3, 4});
  if (reads(dsl::kDroppedStart)) a.dropped_start = ints(0x30000, {3});
  if (reads(dsl::kDroppedLength)) a.dropped_length = ints(0x40000, {3});
  if (reads(dsl::kWindow)) a.window = 8;
  if (reads(dsl::kGlobalTokens)) a.global_tokens = 4;
  if (reads(dsl::kWindowLeft)) a.window_left = 8;
  if (reads(dsl::kWindowRight)) a.window_right = 0;
  if (reads(dsl::kSeed)) a.seed = 11;
  return a;
}

std::string build_error(const MaskBuildArgs& args) {
  return testing::error_text([&] { build_mask(args); }, "passed the host checks",
                             "passed the host checks: ");
}

std::string validate_error(const TensorView& t, const MaskSpec& mask, int seqlen_q) {
  return testing::error_text([&] { validate_intervals(t, mask, seqlen_q); }, "no error",
                             "passed the host checks: ");
}

}  // namespace

TEST_CASE("mask families: names round-trip and the structure is the host builder's",
          "[mask_builder]") {
  const dsl::DeviceSample sample{.n = 7,
                                 .offsets = {0, 3, 3, 7},
                                 .prefixes = {1, 0, 2},
                                 .prefix = 3,
                                 .test = 2,
                                 .dropped_start = 2,
                                 .dropped_length = 3,
                                 .window = 2,
                                 .global_tokens = 1,
                                 .window_left = 2,
                                 .window_right = 2,
                                 .seed = 5};
  std::vector<std::string_view> with_vectors;
  for (const dsl::FamilyRow& row : dsl::family_table()) {
    if (row.has_vectors()) with_vectors.push_back(row.name);
  }
  CHECK(mask_families() == with_vectors);
  CHECK(with_vectors.size() >= 10);
  for (const std::string_view family : mask_families()) {
    INFO(family);
    CHECK(parse_mask_family(family) == family);
    const dsl::IntervalVectors host = dsl::vector_family(family).device_reference(sample);
    CHECK(mask_spec_of(family) == host.mask_spec());
    dsl::validate(host);
  }
  CHECK_THROWS_WITH(parse_mask_family("causal"),
                    Catch::StartsWith("family: got 'causal'; accepted: sliding_window, "
                                      "causal_document, document, share_question") &&
                        Catch::Contains("qk_sparse, random_eviction"));
  CHECK_THROWS_WITH(mask_spec_of("full"), Catch::StartsWith("family: got 'full'; accepted: "));
}

TEST_CASE("build_mask checks the output tensor on the host", "[mask_builder]") {
  MaskBuildArgs a = good_args("causal_document");
  a.startend_row_indices.data = nullptr;
  CHECK_THAT(build_error(a), Catch::Contains("startend_row_indices: data is null; accepted: a "
                                             "device pointer"));
  a = good_args("causal_document");
  a.startend_row_indices.dtype = ScalarType::fp32;
  CHECK_THAT(build_error(a),
             Catch::Contains("startend_row_indices.dtype: got 'fp32'; accepted: int32"));
  a = good_args("causal_document");
  a.startend_row_indices.rank = 3;
  CHECK_THAT(build_error(a), Catch::Contains("startend_row_indices.rank: got '3'; accepted: 4"));
  a = good_args("causal_document");
  a.startend_row_indices.data = fake(0x10002);
  CHECK_THAT(build_error(a), Catch::Contains("startend_row_indices.data") &&
                                 Catch::Contains("a 4-byte aligned address"));
  a = good_args("causal_document");
  a.startend_row_indices.stride[2] = 2;
  CHECK_THAT(build_error(a), Catch::Contains("startend_row_indices.stride[2]: got '2'; accepted: "
                                             "1 (the tensor must be contiguous)"));
  // One bad dimension each.
  const std::tuple<std::string_view, TensorView, std::string> bad_shapes[] = {
      {"causal_document", ints(0x10000, {0, 1, 100, 1}),
       "startend_row_indices.shape[0] (batch): got '0'; accepted: 1 to 65535"},
      {"causal_document", ints(0x10000, {70000, 1, 100, 1}), "shape[0] (batch): got '70000'"},
      {"causal_document", ints(0x10000, {3, 2, 100, 1}),
       "startend_row_indices.shape[1] (mask heads): got '2'; accepted: 1 (causal_document builds "
       "one"},
      {"causal_document", ints(0x10000, {3, 1, 0, 1}),
       "startend_row_indices.shape[2] (N): got '0'; accepted: 1 to"},
      {"causal_document", ints(0x10000, {3, 1, 100, 2}),
       "startend_row_indices.shape[3] (columns): got '2'; accepted: 1 (the columns of "
       "causal_document)"},
      {"random_eviction", ints(0x10000, {3, 0, 100, 1}),
       "shape[1] (mask heads): got '0'; accepted: 1 to 65535"},
  };
  for (const auto& [family, output, message] : bad_shapes) {
    a = good_args(family);
    a.startend_row_indices = output;
    CHECK_THAT(build_error(a), Catch::Contains(message));
  }
}

TEST_CASE("build_mask checks each family's fields on the host", "[mask_builder]") {
  SECTION("offsets") {
    MaskBuildArgs a = good_args("document");
    a.offsets = {};
    CHECK_THAT(build_error(a), Catch::Contains("offsets: data is null"));
    a.offsets = ints(0x20000, {3, 5});
    a.offsets.dtype = ScalarType::bf16;
    CHECK_THAT(build_error(a), Catch::Contains("offsets.dtype: got 'bf16'; accepted: int32"));
    a.offsets = ints(0x20000, {15});
    CHECK_THAT(build_error(a), Catch::Contains("offsets.rank: got '1'; accepted: 2"));
    a.offsets = ints(0x20000, {2, 5});
    CHECK_THAT(build_error(a), Catch::Contains("offsets.shape[0]: got '2'; accepted: 3 (the "
                                               "batch of startend_row_indices)"));
    a.offsets = ints(0x20000, {3, 1});
    CHECK_THAT(build_error(a), Catch::Contains("offsets.shape[1]: got '1'; accepted: 2 to"));
    a.offsets = ints(0x20000, {3, 5});
    a.offsets.stride[0] = 8;
    CHECK_THAT(build_error(a), Catch::Contains("offsets.stride[0]: got '8'; accepted: 5"));
  }
  SECTION("fields the family does not read") {
    MaskBuildArgs a = good_args("causal_document");
    a.prefix = ints(0x30000, {3});
    CHECK_THAT(build_error(a),
               Catch::Contains("prefix: given, but causal_document does not read it; accepted: "
                               "no prefix (causal_document reads offsets)"));
    a = good_args("sliding_window");
    a.offsets = ints(0x20000, {3, 5});
    CHECK_THAT(build_error(a), Catch::Contains("offsets: given, but sliding_window"));
    a = good_args("document");
    a.window = 5;
    CHECK_THAT(build_error(a), Catch::Contains("window: got '5', but document does not read it"));
    a = good_args("prefix_lm_causal");
    a.window_left = 0;
    CHECK_THAT(build_error(a), Catch::Contains("window_left: got '0', but prefix_lm_causal"));
    a = good_args("document");
    a.seed = 7;
    CHECK_THAT(build_error(a), Catch::Contains("seed: got '7', but document reads no seed"));
    a = good_args("qk_sparse");
    a.test = ints(0x50000, {3});
    CHECK_THAT(build_error(a), Catch::Contains("(qk_sparse reads dropped_start, dropped_length)"));
  }
  SECTION("window sizes") {
    MaskBuildArgs a = good_args("sliding_window");
    a.window = 0;
    CHECK_THAT(build_error(a), Catch::Contains("window: got '0'; accepted: >= 1"));
    a.window = -1;
    CHECK_THAT(build_error(a), Catch::Contains("window: got '-1'; accepted: >= 1"));
    a = good_args("global_sliding_window");
    a.global_tokens = 101;
    CHECK_THAT(build_error(a), Catch::Contains("global_tokens: got '101'; accepted: 0 to 100"));
    a = good_args("global_sliding_window");
    a.window_left = -1;
    CHECK_THAT(build_error(a), Catch::Contains("window_left: got '-1'; accepted: >= 0"));
    a = good_args("global_sliding_window");
    a.window_right = -3;
    CHECK_THAT(build_error(a), Catch::Contains("window_right: got '-3'; accepted: >= 0"));
  }
  SECTION("per-sample tensors") {
    MaskBuildArgs a = good_args("causal_blockwise");
    a.test = ints(0x30000, {4});
    CHECK_THAT(build_error(a), Catch::Contains("test.shape[0]: got '4'; accepted: 3"));
    a = good_args("prefix_lm_causal");
    a.prefix = ints(0x30000, {3, 1});
    CHECK_THAT(build_error(a), Catch::Contains("prefix.rank: got '2'; accepted: 1"));
    a = good_args("qk_sparse");
    a.dropped_length = {};
    CHECK_THAT(build_error(a), Catch::Contains("dropped_length: data is null"));
    a = good_args("qk_sparse");
    a.dropped_start.stride[0] = 2;
    CHECK_THAT(build_error(a), Catch::Contains("dropped_start.stride[0]: got '2'; accepted: 1"));
    a = good_args("prefix_lm_document");
    a.prefixes = ints(0x40000, {3, 5});
    CHECK_THAT(build_error(a), Catch::Contains("prefixes.shape[1]: got '5'; accepted: 4 (one "
                                               "prefix per segment of offsets)"));
    a = good_args("prefix_lm_document");
    a.prefixes = {};
    CHECK_THAT(build_error(a), Catch::Contains("prefixes: data is null"));
  }
}

TEST_CASE("validate_intervals checks the layout on the host", "[mask_builder]") {
  const MaskSpec causal1{MaskKind::flashmask, true, 1};
  const TensorView good = ints(0x10000, {2, 1, 50, 1});
  CHECK_THAT(validate_error(good, {MaskKind::causal, false, 0}, 50),
             Catch::Contains("mask: got 'causal'; accepted: flashmask("));
  CHECK_THAT(validate_error(good, {MaskKind::flashmask, true, 4}, 50),
             Catch::Contains("mask: got 'flashmask(causal=true,columns=4)'; accepted: causal=true "
                             "with columns 1 or 2"));
  CHECK_THAT(validate_error(good, causal1, -1),
             Catch::Contains("seqlen_q: got '-1'; accepted: >= 0"));
  TensorView t = good;
  t.dtype = ScalarType::fp16;
  CHECK_THAT(validate_error(t, causal1, 50),
             Catch::Contains("startend_row_indices.dtype: got 'fp16'; accepted: int32"));
  t = ints(0x10000, {2, 50, 1});
  CHECK_THAT(validate_error(t, causal1, 50),
             Catch::Contains("startend_row_indices.rank: got '3'; accepted: 4"));
  CHECK_THAT(validate_error(good, {MaskKind::flashmask, false, 2}, 50),
             Catch::Contains("startend_row_indices.shape[3]: got '1'; accepted: 2 (the columns of "
                             "flashmask(causal=false,columns=2))"));
  t = good;
  t.stride[0] = 64;
  CHECK_THAT(validate_error(t, causal1, 50),
             Catch::Contains("startend_row_indices.stride[0]: got '64'; accepted: 50"));
  t = good;
  t.data = nullptr;
  CHECK_THAT(validate_error(t, causal1, 50), Catch::Contains("data is null"));
  CHECK_THAT(validate_error(ints(0x10000, {70000, 1, 5, 1}), causal1, 50),
             Catch::Contains("startend_row_indices.shape[0] (batch): got '70000'"));
  // Nothing to check: no device needed.
  CHECK(validate_error(ints(0x10000, {0, 1, 50, 1}), causal1, 50) == "no error");
  CHECK(validate_error(ints(0x10000, {2, 1, 0, 1}), causal1, 50) == "no error");
}

TEST_CASE("ATTNJIT_DEBUG switches the device checks", "[mask_builder]") {
  {
    const EnvOverride unset("ATTNJIT_DEBUG", nullptr);
    CHECK_FALSE(runtime::debug_mode());
  }
  for (const char* off : {"", "0"}) {
    const EnvOverride debug("ATTNJIT_DEBUG", off);
    CHECK_FALSE(runtime::debug_mode());
  }
  {
    const EnvOverride debug("ATTNJIT_DEBUG", "1");
    CHECK(runtime::debug_mode());
  }
  const EnvOverride debug("ATTNJIT_DEBUG", "yes");
  CHECK_THROWS_WITH(runtime::debug_mode(),
                    "ATTNJIT_DEBUG: got 'yes'; accepted: 1 (device checks on), 0, empty or "
                    "unset (off)");
}

TEST_CASE("every mask kernel compiles for sm_80 and sm_90 without spills",
          "[nvrtc][mask_builder]") {
  std::vector<MaskKernelSpec> specs;
  for (Arch arch : {Arch::sm_80, Arch::sm_90}) {
    specs.push_back({"", arch});
    for (const std::string_view family : mask_families())
      specs.push_back({std::string(family), arch});
  }
  std::vector<std::string> keys;
  for (const MaskKernelSpec& spec : specs) {
    const std::string text = to_string(spec);
    INFO(text);
    const runtime::MaskKernel kernel = runtime::compile_mask_kernel(spec, /*use_disk=*/false);
    const jit::CompileInfo& info = kernel.info;
    CHECK(info.spec_text == text);
    CHECK(info.key == runtime::cache_key("mask_kernel", text));
    REQUIRE(info.kernels.size() == 1);
    const jit::KernelReport& report = info.kernels[0];
    CHECK(report.name == emit_mask_kernel(spec).name);
    CHECK(report.role == (spec.family.empty() ? "interval_check" : "mask_builder"));
    CHECK(report.threads == kMaskKernelThreads);
    CHECK(report.registers > 0);
    CHECK(report.spill_bytes == 0);
    CHECK(report.stack_bytes == 0);
    CHECK_THAT(kernel.set->entry.kernels[0].ptx, Catch::Contains(".entry " + report.name));
    keys.push_back(info.key);
  }
  std::sort(keys.begin(), keys.end());
  CHECK(std::unique(keys.begin(), keys.end()) == keys.end());
}

TEST_CASE("mask kernels: canonical text, source and the caches", "[cache][mask_builder]") {
  const MaskKernelSpec builder{"share_question", Arch::sm_90};
  CHECK(to_string(builder) == "mask_kernel=build_share_question target=sm_90");
  CHECK(to_string(MaskKernelSpec{"", Arch::sm_80}) == "mask_kernel=check_intervals target=sm_80");
  const MaskKernelSource source = emit_mask_kernel(builder);
  CHECK(source.name == "attnjit_build_share_question");
  CHECK_THAT(source.source, Catch::Contains("#include \"attnjit/masks/mask_builders.cuh\"") &&
                                Catch::Contains("attnjit_build_share_question(const "
                                                "attnjit::MaskBuildParams params)") &&
                                Catch::Contains("attnjit::build_share_question(params);"));
  CHECK_THAT(emit_mask_kernel({"", Arch::sm_90}).source,
             Catch::Contains("attnjit::check_intervals(params);"));

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "attnjit-test-mask-kernels";
  std::filesystem::remove_all(dir);
  const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", dir.c_str());
  const MaskKernelSpec spec{"qk_sparse", Arch::sm_86};
  runtime::clear_mask_kernel_memory_cache();
  const std::uint64_t builds = runtime::builds();
  CHECK(runtime::compile_mask_kernel(spec).info.cache == jit::CacheLevel::miss);
  CHECK(runtime::builds() == builds + 1);
  CHECK(runtime::compile_mask_kernel(spec).info.cache == jit::CacheLevel::memory);
  jit::clear_memory_cache();
  CHECK(runtime::compile_mask_kernel(spec).info.cache == jit::CacheLevel::disk);
  CHECK(runtime::builds() == builds + 1);
  const std::vector<jit::CacheListing> listing = jit::list_disk_cache();
  REQUIRE(listing.size() == 1);
  CHECK(listing[0].spec_text == "mask_kernel=build_qk_sparse target=sm_86");
  std::filesystem::remove_all(dir);
}
