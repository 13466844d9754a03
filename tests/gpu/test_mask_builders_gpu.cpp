// The device mask builders against their rows' host definitions (dsl/families.hpp, over the
// host builders of dsl/builders.hpp; equal element for element, every family of the table,
// random parameters with empty and padded segments, lengths that are not tile multiples,
// batches up to 8), the builders' device parameter checks, and the device interval check against
// dsl::validate (same first bad element, same message), also through Kernel::forward /
// Kernel::backward with validate_mask and with ATTNJIT_DEBUG=1.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "attnjit/mask_builder.hpp"
#include "dsl/builders.hpp"
#include "dsl/families.hpp"
#include "gpu/gpu_case.hpp"
#include "runtime/jit/driver.hpp"
#include "support/env_override.hpp"
#include "support/error_text.hpp"

using namespace attnjit;
using testing::EnvOverride;

namespace {

/// An int32 tensor in device memory.
struct DeviceInts {
  runtime::DeviceBuffer buffer;
  TensorView view;
};

DeviceInts upload(const std::vector<int>& values, std::initializer_list<std::int64_t> shape) {
  DeviceInts t{runtime::DeviceBuffer(values.size() * sizeof(int)), {}};
  t.buffer.upload(values.data(), values.size() * sizeof(int));
  t.view = contiguous_view(t.buffer.data(), ScalarType::int32, shape);
  return t;
}

std::vector<int> download(const DeviceInts& t) {
  std::vector<int> values(t.buffer.bytes() / sizeof(int));
  t.buffer.download(values.data(), t.buffer.bytes());
  return values;
}

/// A non-blocking stream: the builders must work on the caller's stream.
class Stream {
 public:
  Stream() {
    runtime::check(runtime::driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING),
                   "cuStreamCreate");
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { runtime::driver().cuStreamDestroy(stream_); }
  CUstream get() const { return stream_; }
  void synchronize() const {
    runtime::check(runtime::driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

 private:
  CUstream stream_ = nullptr;
};

int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

/// 0 = o_0 <= ... <= o_S = n with S in [1, max_segments]: cut points drawn with repetition, so
/// empty segments occur; often a cut at 0 or n too.
std::vector<int> random_offsets(std::mt19937_64& rng, int n, int max_segments) {
  const int segments = uniform(rng, 1, max_segments);
  std::vector<int> offsets{0, n};
  for (int i = 1; i < segments; ++i) {
    const int kind = uniform(rng, 0, 5);
    offsets.push_back(kind == 0 ? 0 : kind == 1 ? n : uniform(rng, 0, n));
  }
  std::sort(offsets.begin(), offsets.end());
  return offsets;
}

/// Rows of different segment counts padded to one width by repeating n.
std::vector<int> pad_rows(const std::vector<std::vector<int>>& rows, int n, int& width) {
  width = 0;
  for (const auto& row : rows) width = std::max(width, static_cast<int>(row.size()));
  std::vector<int> flat;
  for (const auto& row : rows) {
    flat.insert(flat.end(), row.begin(), row.end());
    flat.insert(flat.end(), static_cast<std::size_t>(width) - row.size(), n);
  }
  return flat;
}

/// Samples of [1, heads] stacked into [batch, heads] in order.
dsl::IntervalVectors stack_heads(const std::vector<dsl::IntervalVectors>& samples, int batch,
                                 int heads) {
  dsl::IntervalVectors m = samples.front();
  m.batch = batch;
  m.heads = heads;
  m.data.clear();
  for (const auto& sample : samples)
    m.data.insert(m.data.end(), sample.data.begin(), sample.data.end());
  return m;
}

/// One family's random case: device parameters, the arguments and the host builders' vectors.
struct FamilyCase {
  std::vector<DeviceInts> tensors;  ///< keeps the parameters alive
  MaskBuildArgs args;
  dsl::IntervalVectors expected;
  DeviceInts out;
  std::string describe;
};

/// A random case of `family`: random values of every field its device builder reads, and the
/// vectors its row's host definition gives for them.
FamilyCase make_case(std::string_view family, std::mt19937_64& rng, int batch, int n) {
  const dsl::FamilyRow& row = dsl::vector_family(family);
  const auto reads = [&](unsigned param) { return (row.device_params & param) != 0; };
  FamilyCase c;
  c.args.family = family;
  c.describe = fmt::format("{} B={} N={}", family, batch, n);
  auto per_sample = [&](const std::vector<int>& values) {
    c.tensors.push_back(upload(values, {batch}));
    return c.tensors.back().view;
  };
  std::vector<std::vector<int>> rows;
  for (int b = 0; b < batch; ++b) rows.push_back(random_offsets(rng, n, uniform(rng, 1, 12)));
  int width = 0;
  const std::vector<int> flat = pad_rows(rows, n, width);
  std::vector<dsl::DeviceSample> samples(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    samples[b].n = n;
    samples[b].batch_row = b;
    samples[b].offsets.assign(flat.begin() + b * width, flat.begin() + (b + 1) * width);
  }
  if (reads(dsl::kOffsets)) {
    c.tensors.push_back(upload(flat, {batch, width}));
    c.args.offsets = c.tensors.back().view;
  }
  if (reads(dsl::kWindow)) c.args.window = uniform(rng, 0, 3) == 0 ? 1 : uniform(rng, 1, n + 5);
  if (reads(dsl::kGlobalTokens)) c.args.global_tokens = uniform(rng, 0, n);
  if (reads(dsl::kWindowLeft)) c.args.window_left = uniform(rng, 0, n);
  if (reads(dsl::kWindowRight)) c.args.window_right = uniform(rng, 0, n);
  if (reads(dsl::kTest)) {  // often the last segment, else any length
    std::vector<int> tests;
    for (const auto& r : rows) {
      tests.push_back(uniform(rng, 0, 2) == 0 ? n - r[r.size() - 2] : uniform(rng, 0, n));
      samples[tests.size() - 1].test = tests.back();
    }
    c.args.test = per_sample(tests);
  }
  if (reads(dsl::kPrefix)) {
    std::vector<int> prefixes;
    for (dsl::DeviceSample& sample : samples)
      prefixes.push_back(sample.prefix = uniform(rng, 0, n));
    c.args.prefix = per_sample(prefixes);
  }
  if (reads(dsl::kPrefixes)) {
    std::vector<int> all;
    for (dsl::DeviceSample& sample : samples) {
      for (int d = 0; d + 1 < width; ++d) {
        sample.prefixes.push_back(uniform(rng, 0, sample.offsets[d + 1] - sample.offsets[d]));
      }
      all.insert(all.end(), sample.prefixes.begin(), sample.prefixes.end());
    }
    c.tensors.push_back(upload(all, {batch, width - 1}));
    c.args.prefixes = c.tensors.back().view;
  }
  if (reads(dsl::kDroppedStart)) {
    std::vector<int> starts, lengths;
    for (dsl::DeviceSample& sample : samples) {
      starts.push_back(sample.dropped_start = uniform(rng, 0, n));
      lengths.push_back(sample.dropped_length = uniform(rng, 0, n - sample.dropped_start));
    }
    c.args.dropped_start = per_sample(starts);
    if (reads(dsl::kDroppedLength)) c.args.dropped_length = per_sample(lengths);
  }
  if (reads(dsl::kSeed)) c.args.seed = rng();
  const int heads = row.per_head ? uniform(rng, 1, 3) : 1;
  std::vector<dsl::IntervalVectors> expected;
  for (dsl::DeviceSample& sample : samples) {
    sample.window = c.args.window;
    sample.global_tokens = c.args.global_tokens;
    sample.window_left = c.args.window_left;
    sample.window_right = c.args.window_right;
    sample.seed = c.args.seed;
    sample.mask_heads = heads;
    for (int h = 0; h < heads; ++h) {
      sample.mask_head = h;
      expected.push_back(row.device_reference(sample));
    }
  }
  c.expected = stack_heads(expected, batch, heads);
  c.out = upload(std::vector<int>(static_cast<std::size_t>(batch) * heads * n * row.columns, -7),
                 {batch, heads, n, row.columns});
  c.args.startend_row_indices = c.out.view;
  return c;
}

std::string build_error(const MaskBuildArgs& args) {
  return testing::error_text([&] { build_mask(args); });
}

}  // namespace

TEST_CASE("device builders equal the host builders for every family", "[gpu][mask_builder]") {
  std::mt19937_64 rng(20261122);
  const Stream stream;
  const int lengths[] = {1, 2, 5, 63, 64, 65, 127, 129, 200, 255, 1000, 4099};
  for (const std::string_view family : mask_families()) {
    for (int trial = 0; trial < 24; ++trial) {
      const int n = trial < 12 ? lengths[trial] : uniform(rng, 1, 3000);
      const int batch = uniform(rng, 1, 8);
      FamilyCase c = make_case(family, rng, batch, n);
      INFO(c.describe);
      c.args.validate = trial % 2 == 1;  // valid parameters pass the device check
      const MaskSpec spec = build_mask(c.args, stream.get());
      stream.synchronize();
      CHECK(spec == c.expected.mask_spec());
      const std::vector<int> got = download(c.out);
      REQUIRE(got.size() == c.expected.data.size());
      const auto mismatch = std::mismatch(got.begin(), got.end(), c.expected.data.begin());
      if (mismatch.first != got.end()) {
        const std::size_t at = static_cast<std::size_t>(mismatch.first - got.begin());
        FAIL("first difference at flat index " << at << ": device " << *mismatch.first << ", host "
                                               << *mismatch.second);
      }
    }
  }
}

TEST_CASE("device builders report the first bad device parameter", "[gpu][mask_builder]") {
  const int n = 300;
  auto offsets_case = [&](std::string_view family, std::vector<int> flat, int batch) {
    std::mt19937_64 rng(5);
    FamilyCase c = make_case(family, rng, batch, n);
    c.tensors.push_back(upload(flat, {batch, static_cast<std::int64_t>(flat.size()) / batch}));
    c.args.offsets = c.tensors.back().view;
    c.args.validate = true;
    return c;
  };
  SECTION("offsets") {
    FamilyCase c =
        offsets_case("causal_document", {0, 10, 300, 300, 0, 50, 40, 300, 3, 5, 6, 300}, 3);
    CHECK(build_error(c.args) ==
          "offsets[1][2]: got '40'; accepted: >= offsets[1][1] = 50 (0 = "
          "o_0 <= o_1 <= ... <= o_S = N)");
    c = offsets_case("document", {0, 10, 300, 300, 0, 5, 6, 299, 3, 5, 6, 300}, 3);
    CHECK(build_error(c.args) ==
          "offsets[1][3]: got '299'; accepted: 300 (N): every row ends "
          "at N, rows with fewer segments repeat it");
    c = offsets_case("share_question", {0, 10, 300, 300, 0, 5, 6, 300, 3, 5, 6, 300}, 3);
    CHECK(build_error(c.args) == "offsets[2][0]: got '3'; accepted: 0 (every row starts at 0)");
  }
  SECTION("one value per sample") {
    std::mt19937_64 rng(6);
    FamilyCase c = make_case("prefix_lm_causal", rng, 4, n);
    c.tensors.push_back(upload({0, 300, 301, -1}, {4}));
    c.args.prefix = c.tensors.back().view;
    c.args.validate = true;
    CHECK(build_error(c.args) == "prefix[2]: got '301'; accepted: 0 to 300 (N)");
    c = make_case("causal_blockwise", rng, 2, n);
    c.tensors.push_back(upload({-4, 0}, {2}));
    c.args.test = c.tensors.back().view;
    c.args.validate = true;
    CHECK(build_error(c.args) == "test[0]: got '-4'; accepted: 0 to 300 (N)");
    c = make_case("qk_sparse", rng, 2, n);
    c.tensors.push_back(upload({10, 250}, {2}));
    c.args.dropped_start = c.tensors.back().view;
    c.tensors.push_back(upload({291, 51}, {2}));
    c.args.dropped_length = c.tensors.back().view;
    c.args.validate = true;
    CHECK(build_error(c.args) ==
          "dropped_length[0]: got '291'; accepted: 0 to 290 (N - "
          "dropped_start[0] = 300 - 10)");
    c.tensors.push_back(upload({290, 51}, {2}));
    c.args.dropped_length = c.tensors.back().view;
    CHECK(build_error(c.args) ==
          "dropped_length[1]: got '51'; accepted: 0 to 50 (N - "
          "dropped_start[1] = 300 - 250)");
  }
  SECTION("prefixes per segment") {
    std::mt19937_64 rng(7);
    FamilyCase c = make_case("prefix_lm_document", rng, 2, n);
    c.tensors.push_back(upload({0, 100, 300, 0, 300, 300}, {2, 3}));
    c.args.offsets = c.tensors.back().view;
    c.tensors.push_back(upload({100, 200, 300, 1}, {2, 2}));
    c.args.prefixes = c.tensors.back().view;
    c.args.validate = true;
    CHECK(build_error(c.args) ==
          "prefixes[1][1]: got '1'; accepted: 0 to 0 (the length of "
          "segment 1: offsets[1][2] - offsets[1][1])");
  }
  SECTION("ATTNJIT_DEBUG=1 checks without validate; unchecked bad data stays in bounds") {
    FamilyCase c = offsets_case("causal_document", {0, 500, -3, 300}, 1);
    c.args.validate = false;
    {
      const EnvOverride debug("ATTNJIT_DEBUG", "1");
      CHECK(build_error(c.args) ==
            "offsets[0][2]: got '-3'; accepted: >= offsets[0][1] = 500 (0 "
            "= o_0 <= o_1 <= ... <= o_S = N)");
    }
    const EnvOverride debug("ATTNJIT_DEBUG", nullptr);
    CHECK(build_error(c.args) == "no error");
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  }
}

namespace {

/// dsl::validate's message for `m`, or "valid".
std::string host_message(const dsl::IntervalVectors& m) {
  return testing::error_text([&] { dsl::validate(m); }, "valid");
}

/// validate_intervals's message for `m` checked on the device, or "valid".
std::string device_message(const dsl::IntervalVectors& m, CUstream stream) {
  const DeviceInts t = upload(m.data, {m.batch, m.heads, m.seqlen_k, m.columns});
  return testing::error_text([&] { validate_intervals(t.view, m.mask_spec(), m.seqlen_q, stream); },
                             "valid");
}

/// Plants one violation at a random element: 0 a negative value, 1 a value above seqlen_q,
/// 2 LTE below LTS, 3 UTE below UTS (the last two where the layout has those vectors).
void plant(dsl::IntervalVectors& m, std::mt19937_64& rng, int kind) {
  const std::size_t column =
      static_cast<std::size_t>(uniform(rng, 0, m.batch * m.heads * m.seqlen_k - 1));
  int* v = m.data.data() + column * m.columns;
  const int sq = m.seqlen_q;
  if (kind == 0) {
    v[uniform(rng, 0, m.columns - 1)] = -uniform(rng, 1, 100);
  } else if (kind == 1) {
    v[uniform(rng, 0, m.columns - 1)] = sq + uniform(rng, 1, 100);
  } else {
    const int start = kind == 2 ? 0 : 2;
    const int low = uniform(rng, 0, sq - 1);
    v[start] = uniform(rng, low + 1, sq);
    v[start + 1] = low;
  }
}

}  // namespace

TEST_CASE("the device interval check finds the first bad element like dsl::validate",
          "[gpu][mask_builder]") {
  std::mt19937_64 rng(77);
  const Stream stream;
  const MaskSpec layouts[] = {{MaskKind::flashmask, true, 1},
                              {MaskKind::flashmask, true, 2},
                              {MaskKind::flashmask, false, 2},
                              {MaskKind::flashmask, false, 4}};
  for (const MaskSpec& layout : layouts) {
    const bool has_lte = layout.columns == 4 || (layout.causal && layout.columns == 2);
    for (int trial = 0; trial < 30; ++trial) {
      const int batch = uniform(rng, 1, 4);
      const int heads = uniform(rng, 1, 3);
      const int seqlen_q = uniform(rng, 1, 300);
      const int seqlen_k = uniform(rng, 1, 300);
      dsl::IntervalVectors m = dsl::random_intervals(layout.causal, layout.columns, batch, heads,
                                                     seqlen_q, seqlen_k, rng());
      INFO(to_string(layout) << " B=" << batch << " Hm=" << heads << " Sq=" << seqlen_q
                             << " Sk=" << seqlen_k);
      CHECK(device_message(m, stream.get()) == "valid");
      const int planted = uniform(rng, 1, 3);
      for (int i = 0; i < planted; ++i) {
        const int kinds = layout.columns == 4 ? 4 : has_lte ? 3 : 2;
        plant(m, rng, uniform(rng, 0, kinds - 1));
      }
      const std::string expected = host_message(m);
      REQUIRE(expected != "valid");
      CHECK(device_message(m, stream.get()) == expected);
    }
  }
}

TEST_CASE("the device interval check at 32K keys x batch 4", "[gpu][mask_builder]") {
  const Stream stream;
  dsl::IntervalVectors m = dsl::random_documents(true, 32768, 10, 14, 3);
  m = dsl::stack(std::vector<dsl::IntervalVectors>(4, m));
  m.data[3 * 32768 + 32760] = 32769;
  CHECK(device_message(m, stream.get()) ==
        "startend_row_indices[batch=3, head=0, column=32760] LTS=32769 is outside [0, 32768]; "
        "accepted: 0 <= LTS <= 32768 (seqlen_q)");
}

TEST_CASE("forward and backward check the vectors with validate_mask and ATTNJIT_DEBUG=1",
          "[gpu][mask_builder]") {
  const int batch = 1, seqlen = 96, heads = 2, dim = 64;
  const std::size_t elements = static_cast<std::size_t>(batch) * seqlen * heads * dim;
  std::vector<runtime::DeviceBuffer> buffers;
  auto activation = [&] {
    buffers.emplace_back(elements * 2);
    buffers.back().fill_bytes(0x3c);
    return contiguous_view(buffers.back().data(), ScalarType::bf16, {batch, seqlen, heads, dim});
  };
  buffers.reserve(16);
  const std::vector<int> lengths{40, 56};
  const dsl::IntervalVectors good = dsl::document(lengths);
  dsl::IntervalVectors bad = good;
  bad.data[70 * 2 + 1] = 97;
  const DeviceInts good_vectors = upload(good.data, {1, 1, seqlen, 2});
  const DeviceInts bad_vectors = upload(bad.data, {1, 1, seqlen, 2});
  const std::string message =
      "startend_row_indices[batch=0, head=0, column=70] UTE=97 is outside [0, 96]; accepted: 0 "
      "<= UTE <= 96 (seqlen_q)";

  ForwardArgs f;
  f.q = activation();
  f.k = activation();
  f.v = activation();
  f.o = activation();
  buffers.emplace_back(static_cast<std::size_t>(batch) * heads * seqlen * 4);
  f.lse = contiguous_view(buffers.back().data(), ScalarType::fp32, {batch, heads, seqlen});
  f.startend_row_indices = good_vectors.view;
  f.validate_mask = true;
  const jit::Kernel forward = jit::compile(
      parse_spec("dtype=bf16 head_dim=64 mask=flashmask(causal=false,columns=2) return_lse=true"));
  CHECK_NOTHROW(forward.forward(f));
  f.startend_row_indices = bad_vectors.view;
  CHECK_THROWS_WITH(forward.forward(f), message);
  f.validate_mask = false;
  {
    const EnvOverride debug("ATTNJIT_DEBUG", "1");
    CHECK_THROWS_WITH(forward.forward(f), message);
  }

  BackwardArgs b = gpu_test::backward_args_of(f);
  b.d_o = activation();
  b.d_q = activation();
  b.d_k = activation();
  b.d_v = activation();
  b.startend_row_indices = bad_vectors.view;
  b.validate_mask = true;
  const jit::Kernel backward = jit::compile(parse_spec(
      "dtype=bf16 head_dim=64 mask=flashmask(causal=false,columns=2) direction=backward"));
  CHECK_THROWS_WITH(backward.backward(b), message);
  b.validate_mask = false;
  {
    const EnvOverride debug("ATTNJIT_DEBUG", "1");
    CHECK_THROWS_WITH(backward.backward(b), message);
  }
  b.startend_row_indices = good_vectors.view;
  b.validate_mask = true;
  CHECK_NOTHROW(backward.backward(b));
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}
