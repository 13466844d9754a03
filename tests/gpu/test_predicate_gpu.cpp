// Element predicates on the device: the CUDA expression emit_cuda_expression generates,
// with templates/attnjit/masks/predicate.cuh, gives the host evaluator's visibility bit for bit
// (int32 edge values, division by zero, wrap-around, tensor reads out of range, batch rows).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/predicate.hpp"
#include "embedded.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/module.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "support/predicate_cases.hpp"

using namespace attnjit;

namespace {

constexpr int kBatch = 2, kHeads = 3, kSeqQ = 37, kSeqK = 41;

/// Runs `predicate` over the whole (b, h, q, k) grid on the device and compares every element
/// with the evaluator. Returns the number of visible elements.
int check_on_device(const Predicate& predicate, const PredicateBindings& bindings) {
  INFO(to_string(predicate));
  const runtime::DeviceInfo device = runtime::current_device();
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  const std::string arch = "sm_" + std::to_string(device.major * 10 + device.minor);
  const runtime::NvrtcOutput compiled =
      runtime::nvrtc_compile(testing::predicate_kernel_source(predicate), "predicate.cu", headers,
                             arch, {}, "predicate_visible");
  const runtime::LoadedModule module = runtime::LoadedModule::load(compiled.cubin);
  const CUfunction function = module.function("predicate_visible", 0);

  // Tensors in info() order, packed into one buffer.
  const PredicateInfo used = info(predicate);
  std::vector<int> data, offsets, rows, lengths;
  for (const std::string& name : used.tensors) {
    for (const PredicateTensor& tensor : bindings.tensors) {
      if (tensor.name != name) continue;
      offsets.push_back(static_cast<int>(data.size()));
      rows.push_back(tensor.rows);
      lengths.push_back(tensor.length);
      data.insert(data.end(), tensor.values.begin(), tensor.values.end());
    }
  }
  std::vector<int> scalars(bindings.scalars.begin(), bindings.scalars.end());
  auto upload = [](const std::vector<int>& host) {
    runtime::DeviceBuffer buffer(std::max<std::size_t>(1, host.size()) * sizeof(int));
    if (!host.empty()) buffer.upload(host.data(), host.size() * sizeof(int));
    return buffer;
  };
  const runtime::DeviceBuffer d_data = upload(data), d_offsets = upload(offsets),
                              d_rows = upload(rows), d_lengths = upload(lengths),
                              d_scalars = upload(scalars);
  const int total = kBatch * kHeads * kSeqQ * kSeqK;
  runtime::DeviceBuffer d_out(total * sizeof(int));
  d_out.fill_bytes(0xff);

  void* out_ptr = d_out.data();
  void* data_ptr = d_data.data();
  void* offsets_ptr = d_offsets.data();
  void* rows_ptr = d_rows.data();
  void* lengths_ptr = d_lengths.data();
  void* scalars_ptr = d_scalars.data();
  int batch = kBatch, heads = kHeads, seqlen_q = kSeqQ, seqlen_k = kSeqK;
  void* params[] = {&out_ptr,     &data_ptr, &offsets_ptr, &rows_ptr, &lengths_ptr,
                    &scalars_ptr, &batch,    &heads,       &seqlen_q, &seqlen_k};
  runtime::launch(function, runtime::LaunchConfig{{(total + 127) / 128, 1, 1}, {128, 1, 1}, 0},
                  nullptr, params);
  std::vector<int> got(total);
  d_out.download(got.data(), got.size() * sizeof(int));

  const PredicateEvaluator evaluator(predicate, bindings);
  int visible = 0, mismatches = 0;
  std::string first;
  for (int i = 0; i < total; ++i) {
    const int k = i % kSeqK, q = i / kSeqK % kSeqQ, h = i / kSeqK / kSeqQ % kHeads,
              b = i / kSeqK / kSeqQ / kHeads;
    const int expected = evaluator.visible(b, h, q, k) ? 1 : 0;
    visible += expected;
    if (got[i] != expected && mismatches++ == 0) {
      first = "b=" + std::to_string(b) + " h=" + std::to_string(h) + " q=" + std::to_string(q) +
              " k=" + std::to_string(k) + ": device " + std::to_string(got[i]);
    }
  }
  INFO("first mismatch: " << first);
  CHECK(mismatches == 0);
  return visible;
}

}  // namespace

TEST_CASE("predicates on the device match the host evaluator", "[gpu][predicate]") {
  const std::vector<std::int32_t> doc{0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
  CHECK(check_on_device(parse_predicate("q >= k && doc[q] == doc[k]"),
                        {{{"doc", 1, 10, doc}}, {}}) > 0);
  // Per-batch rows, reads past the end (q, k up to 40 on rows of 10 read 0).
  std::vector<std::int32_t> two_rows(doc);
  two_rows.insert(two_rows.end(), doc.rbegin(), doc.rend());
  CHECK(check_on_device(parse_predicate("doc[q] == doc[k] || doc[q - 50] == doc[k + 2147483647]"),
                        {{{"doc", 2, 10, two_rows}}, {}}) > 0);
  CHECK(check_on_device(parse_predicate("(q - k < $0 && q >= k) || k < $1"), {{}, {8, 4}}) > 0);
  CHECK(check_on_device(parse_predicate("(q * 2147483647 + k * -2147483648) / (h - 1) % (b - 1) "
                                        "> abs(q - 2147483647 - k) / 7 - 3"),
                        {}) > 0);
}

TEST_CASE("random predicates on the device match the host evaluator", "[gpu][predicate]") {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 40; ++trial) {
    const Predicate predicate = testing::random_predicate(rng, 7);
    check_on_device(predicate, testing::random_bindings(rng, predicate, kBatch));
  }
}
