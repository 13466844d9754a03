// The C ABI checks every stride and shape of its tensor descriptors before anything reaches
// the device: outputs whose elements overlap (zero strides, rows closer than the head dim),
// negative strides, spans beyond 2^48 bytes, and 64-bit shapes that an int cannot hold; and
// every count, size and pointer of every entry point before it reads memory (counts of 2^31-1,
// negative counts, NULL arrays with nonzero counts, overlong names, any buffer size). Uses fake
// device pointers; every call fails in its checks.
#include <catch2/catch.hpp>

#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnjit/attnjit.h"
#include "runtime/jit/kernel_build.hpp"

namespace {

/// A contiguous bf16 descriptor [B, S, H, D] at a fake, aligned device address.
attnjit_tensor activation(std::uintptr_t address, std::int64_t b, std::int64_t s, std::int64_t h,
                          std::int64_t d) {
  attnjit_tensor t{};
  t.data = reinterpret_cast<void*>(address);
  t.dtype = ATTNJIT_BF16;
  t.rank = 4;
  const std::int64_t shape[4] = {b, s, h, d};
  const std::int64_t stride[4] = {s * h * d, h * d, d, 1};
  for (int i = 0; i < 4; ++i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride[i];
  }
  return t;
}

attnjit_tensor lse_of(std::int64_t b, std::int64_t h, std::int64_t s) {
  attnjit_tensor t{};
  t.data = reinterpret_cast<void*>(0x90000);
  t.dtype = ATTNJIT_FP32;
  t.rank = 3;
  t.shape[0] = b;
  t.shape[1] = h;
  t.shape[2] = s;
  t.stride[0] = h * s;
  t.stride[1] = s;
  t.stride[2] = 1;
  return t;
}

struct Tensors {
  attnjit_tensor q = activation(0x10000, 2, 100, 4, 64);
  attnjit_tensor k = activation(0x20000, 2, 120, 2, 64);
  attnjit_tensor v = activation(0x30000, 2, 120, 2, 64);
  attnjit_tensor o = activation(0x40000, 2, 100, 4, 64);
  attnjit_tensor lse = lse_of(2, 4, 100);
  attnjit_tensor d_o = activation(0x50000, 2, 100, 4, 64);
  attnjit_tensor d_q = activation(0x60000, 2, 100, 4, 64);
  attnjit_tensor d_k = activation(0x70000, 2, 120, 2, 64);
  attnjit_tensor d_v = activation(0x80000, 2, 120, 2, 64);

  /// The slots of a forward launch: q, k, v, o and lse, the others empty.
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> forward_slots() const {
    std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots{};
    slots[ATTNJIT_SLOT_Q] = q;
    slots[ATTNJIT_SLOT_K] = k;
    slots[ATTNJIT_SLOT_V] = v;
    slots[ATTNJIT_SLOT_O] = o;
    slots[ATTNJIT_SLOT_LSE] = lse;
    return slots;
  }
};

/// The kernels, compiled without the disk cache.
struct Kernels {
  attnjit_kernel* forward = nullptr;
  attnjit_kernel* backward = nullptr;
  Kernels() {
    REQUIRE(attnjit_set_disk_cache_mode(ATTNJIT_DISK_CACHE_OFF) == ATTNJIT_OK);
    REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal return_lse=true target=sm_80",
                            &forward) == ATTNJIT_OK);
    REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_80",
                            &backward) == ATTNJIT_OK);
  }
  ~Kernels() {
    attnjit_release(forward);
    attnjit_release(backward);
    attnjit::runtime::reset_disk_cache_mode();
  }
};

/// The message of a forward call that must fail with a user error.
std::string forward_error(const Kernels& kernels, const Tensors& t) {
  const int code = attnjit_forward(kernels.forward, &t.q, &t.k, &t.v, &t.o, &t.lse, nullptr, 0.f,
                                   -1, 0, nullptr);
  INFO(attnjit_last_error());
  CHECK(code == ATTNJIT_USER_ERROR);
  return attnjit_last_error();
}

std::string backward_error(const Kernels& kernels, const Tensors& t) {
  const int code = attnjit_backward(kernels.backward, &t.q, &t.k, &t.v, &t.o, &t.d_o, &t.lse,
                                    nullptr, &t.d_q, &t.d_k, &t.d_v, 0.f, -1, 0, nullptr);
  INFO(attnjit_last_error());
  CHECK(code == ATTNJIT_USER_ERROR);
  return attnjit_last_error();
}

}  // namespace

TEST_CASE("the C ABI rejects lse strides that are zero, negative or overlapping",
          "[runtime][args]") {
  const Kernels kernels;
  Tensors t;
  t.lse.stride[0] = 0;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("lse.stride[0]: got '0'; accepted: "
                                                          "a nonzero stride"));
  t = Tensors();
  t.lse.stride[1] = -100;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("lse.stride[1]: got '-100'; accepted: "
                                                          ">= 0"));
  t = Tensors();
  t.lse.stride[0] = 50;  // batch rows overlap head rows
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("lse.stride[0]: got '50'"));
  t = Tensors();
  t.lse.stride[1] = 1;
  t.lse.stride[2] = 1;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("lse.stride[1]: got '1'"));
  t = Tensors();
  t.lse.stride[0] = std::int64_t{1} << 60;
  CHECK_THAT(forward_error(kernels, t),
             Catch::StartsWith("lse.stride[0]") && Catch::Contains("at most 2^48 bytes"));
}

TEST_CASE("the C ABI rejects outputs whose elements overlap", "[runtime][args]") {
  const Kernels kernels;
  Tensors t;
  for (std::int64_t& stride : t.o.stride) stride = 0;
  t.o.stride[3] = 1;
  CHECK_THAT(forward_error(kernels, t),
             Catch::StartsWith("o.stride[2]: got '0'; accepted: a nonzero stride (the output o "
                               "is written, so its elements must not overlap)"));
  t = Tensors();
  t.o.stride[1] = 8;  // rows 8 elements apart, each 4 x 64 long
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("o.stride[1]: got '8'; accepted: at "
                                                          "least 64"));
  t = Tensors();
  t.o.stride[0] = 0;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("o.stride[0]: got '0'"));
  t = Tensors();
  t.o.stride[0] = std::int64_t{1} << 62;
  CHECK_THAT(forward_error(kernels, t),
             Catch::StartsWith("o.stride[0]: got '4611686018427387904'") &&
                 Catch::Contains("at most 2^48 bytes"));
  // Inputs may share rows (a broadcast batch), but their span is bounded too.
  t = Tensors();
  t.q.stride[0] = std::int64_t{1} << 62;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("q.stride[0]"));

  for (attnjit_tensor Tensors::*output : {&Tensors::d_q, &Tensors::d_k, &Tensors::d_v}) {
    t = Tensors();
    for (std::int64_t& stride : (t.*output).stride) stride = 0;
    (t.*output).stride[3] = 1;
    CHECK_THAT(backward_error(kernels, t), Catch::StartsWith("d_") && Catch::Contains("overlap"));
    t = Tensors();
    (t.*output).stride[1] = 16;
    CHECK_THAT(backward_error(kernels, t), Catch::Contains(".stride[1]: got '16'"));
  }
}

TEST_CASE("the C ABI range-checks 64-bit shapes before narrowing them", "[runtime][args]") {
  const Kernels kernels;
  Tensors t;
  t.k.shape[2] = (std::int64_t{1} << 32) + 2;
  t.v.shape[2] = t.k.shape[2];
  CHECK_THAT(forward_error(kernels, t),
             Catch::StartsWith("k.shape[2] (kv heads): got '4294967298'; accepted: 0 to 65535"));
  t = Tensors();
  t.q.shape[1] = (std::int64_t{1} << 32) + 100;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("q.shape[1] (seqlen_q)"));
  t = Tensors();
  t.q.shape[0] = -2;
  CHECK_THAT(forward_error(kernels, t), Catch::StartsWith("q.shape[0] (batch): got '-2'"));
  // A batch of 2^40 makes q's span too large too: the batch is named, not the stride.
  t = Tensors();
  for (attnjit_tensor* a : {&t.q, &t.k, &t.v, &t.o}) a->shape[0] = std::int64_t{1} << 40;
  CHECK(forward_error(kernels, t) ==
        "q.shape[0] (batch): got '1099511627776'; accepted: 0 to 65535");
  t = Tensors();
  t.k.shape[0] = std::int64_t{1} << 40;
  CHECK(forward_error(kernels, t) ==
        "k.shape[0] (batch): got '1099511627776'; accepted: 0 to 65535");
  t = Tensors();
  t.o.shape[1] = std::int64_t{1} << 40;
  CHECK(forward_error(kernels, t) ==
        "o.shape[1] (seqlen_q): got '1099511627776'; accepted: 0 to 1073741823");
}

TEST_CASE("the C ABI disk cache switch", "[cache]") {
  int mode = -1;
  REQUIRE(attnjit_set_disk_cache_mode(ATTNJIT_DISK_CACHE_READONLY) == ATTNJIT_OK);
  REQUIRE(attnjit_disk_cache_mode(&mode) == ATTNJIT_OK);
  CHECK(mode == ATTNJIT_DISK_CACHE_READONLY);
  CHECK(attnjit_cache_clear(0, 1) == ATTNJIT_USER_ERROR);
  CHECK_THAT(attnjit_last_error(), Catch::Contains("got 'readonly'"));
  CHECK(attnjit_set_disk_cache_mode(3) == ATTNJIT_USER_ERROR);
  CHECK_THAT(attnjit_last_error(), Catch::StartsWith("mode: got '3'"));
  CHECK(attnjit_disk_cache_mode(nullptr) == ATTNJIT_USER_ERROR);
  attnjit::runtime::reset_disk_cache_mode();
}

namespace {

/// The message of a call that must fail with a user error.
std::string user_error(int code) {
  INFO(attnjit_last_error());
  CHECK(code == ATTNJIT_USER_ERROR);
  return attnjit_last_error();
}

/// An int32 [8] tensor at a fake device address, for a predicate's tensor.
attnjit_tensor doc_tensor() {
  attnjit_tensor t{};
  t.data = reinterpret_cast<void*>(0xa0000);
  t.dtype = ATTNJIT_INT32;
  t.rank = 1;
  t.shape[0] = 8;
  t.stride[0] = 1;
  return t;
}

}  // namespace

TEST_CASE("the C ABI checks a predicate's counts before reading its arrays", "[runtime][args]") {
  const Kernels kernels;
  const Tensors t;
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots = t.forward_slots();
  // Every entry point that takes attnjit_predicate_inputs, each checked alike.
  const std::vector<std::function<int(const attnjit_predicate_inputs*)>> entry_points = {
      [&](const attnjit_predicate_inputs* p) {
        return attnjit_forward_predicate(kernels.forward, &t.q, &t.k, &t.v, &t.o, &t.lse, p, 0.f,
                                         0.f, nullptr, nullptr);
      },
      [&](const attnjit_predicate_inputs* p) {
        return attnjit_backward_predicate(kernels.backward, &t.q, &t.k, &t.v, &t.o, &t.d_o, &t.lse,
                                          p, &t.d_q, &t.d_k, &t.d_v, 0.f, 0.f, nullptr, nullptr);
      },
      [&](const attnjit_predicate_inputs* p) {
        attnjit_launch* launch = nullptr;
        const int code = attnjit_launch_prepare(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT,
                                                p, 0.f, -1, 0, 0.f, -1, &launch);
        CHECK(launch == nullptr);
        attnjit_launch_release(launch);
        return code;
      }};
  const std::int32_t scalars[4] = {1, 2, 3, 4};
  const attnjit_tensor doc = doc_tensor();
  const char* names[1] = {"doc"};
  const std::string long_name(300, 'n');
  const char* long_names[1] = {long_name.c_str()};
  const char* null_names[1] = {nullptr};
  for (std::size_t i = 0; i < entry_points.size(); ++i) {
    INFO("entry point " << i);
    const auto call = entry_points[i];
    // A prepared launch takes no predicate for a kernel without one.
    if (i < 2) CHECK_THAT(user_error(call(nullptr)), Catch::StartsWith("predicate: got 'NULL'"));
    // A count of 2^31-1 over an array of 4 once copied 8 GiB from it.
    for (const int count : {INT32_MAX, 17, -1, INT32_MIN}) {
      const attnjit_predicate_inputs p{scalars, count, names, &doc, 0};
      CHECK(user_error(call(&p)) ==
            "predicate.scalar_count: got '" + std::to_string(count) +
                "'; accepted: 0 to 16 (the scalar slots a predicate may have)");
    }
    for (const int count : {INT32_MAX, 9, -5}) {
      const attnjit_predicate_inputs p{scalars, 1, names, &doc, count};
      CHECK(user_error(call(&p)) == "predicate.tensor_count: got '" + std::to_string(count) +
                                        "'; accepted: 0 to 8 (the tensors a predicate may read)");
    }
    attnjit_predicate_inputs p{nullptr, 3, names, &doc, 1};
    CHECK(user_error(call(&p)) ==
          "predicate.scalars: got 'NULL'; accepted: an array of scalar_count (3) values");
    p = {scalars, 1, nullptr, &doc, 1};
    CHECK_THAT(user_error(call(&p)), Catch::StartsWith("predicate.tensor_names: got 'NULL'"));
    p = {scalars, 1, names, nullptr, 1};
    CHECK_THAT(user_error(call(&p)), Catch::StartsWith("predicate.tensors: got 'NULL'"));
    p = {scalars, 1, null_names, &doc, 1};
    CHECK_THAT(user_error(call(&p)), Catch::StartsWith("predicate.tensor_names[0]: got 'NULL'"));
    p = {scalars, 1, long_names, &doc, 1};
    CHECK_THAT(user_error(call(&p)),
               Catch::StartsWith("predicate.tensor_names[0]: got 'nnnnnnnn") &&
                   Catch::EndsWith("accepted: a name of at most 256 bytes"));
  }
}

TEST_CASE("the C ABI checks the counts of prepared launches", "[runtime][args]") {
  const Kernels kernels;
  const Tensors t;
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots = t.forward_slots();
  attnjit_launch* launch = nullptr;
  for (const int count : {INT32_MAX, ATTNJIT_SLOT_COUNT + 1, 0, -1, INT32_MIN}) {
    CHECK(user_error(attnjit_launch_prepare(kernels.forward, slots.data(), count, nullptr, 0.f, -1,
                                            0, 0.f, -1, &launch)) ==
          "tensor_count: got '" + std::to_string(count) +
              "'; accepted: 23 (ATTNJIT_SLOT_COUNT), 20 (ATTNJIT_SLOT_COUNT_KVCACHE: the slots "
              "before the descales' ones), 16 (ATTNJIT_SLOT_COUNT_SINKS: the slots before the "
              "cache's ones), 14 (ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' ones) "
              "or 11 (ATTNJIT_SLOT_COUNT_PADDED: the slots before the packed batches' ones)");
    CHECK(launch == nullptr);
  }
  CHECK_THAT(user_error(attnjit_launch_prepare(kernels.forward, nullptr, ATTNJIT_SLOT_COUNT,
                                               nullptr, 0.f, -1, 0, 0.f, -1, &launch)),
             Catch::StartsWith("tensors: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_launch_prepare(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT,
                                               nullptr, 0.f, -1, 0, 0.f, INT32_MIN, &launch)),
             Catch::StartsWith("device: got '-2147483648'"));
  slots[ATTNJIT_SLOT_Q].rank = INT32_MAX;
  CHECK_THAT(user_error(attnjit_launch_prepare(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT,
                                               nullptr, 0.f, -1, 0, 0.f, -1, &launch)),
             Catch::StartsWith("q.rank: got '2147483647'; accepted: 0 to 4"));
  slots[ATTNJIT_SLOT_Q] = t.q;
  REQUIRE(attnjit_launch_prepare(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f,
                                 -1, 0, 0.f, -1, &launch) == ATTNJIT_OK);
  std::array<void*, ATTNJIT_SLOT_COUNT> data{};
  for (const int count : {INT32_MAX, ATTNJIT_SLOT_COUNT + 1, ATTNJIT_SLOT_COUNT - 1, -1}) {
    CHECK(user_error(attnjit_launch_run(launch, data.data(), count, nullptr)) ==
          "data_count: got '" + std::to_string(count) +
              "'; accepted: 23 (23 slots and 0 predicate tensors)");
    CHECK(user_error(
              attnjit_launch_run_workspace(launch, data.data(), count, nullptr, SIZE_MAX, nullptr))
              .starts_with("data_count: got"));
  }
  CHECK_THAT(user_error(attnjit_launch_run(launch, nullptr, ATTNJIT_SLOT_COUNT, nullptr)),
             Catch::StartsWith("data: got 'NULL'"));
  std::size_t bytes = 1;
  CHECK(attnjit_launch_workspace_size(launch, &bytes) == ATTNJIT_OK);
  CHECK_THAT(user_error(attnjit_launch_workspace_size(launch, nullptr)),
             Catch::StartsWith("bytes: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_launch_workspace_size(nullptr, &bytes)),
             Catch::StartsWith("launch: got 'NULL'"));
  attnjit_launch_release(launch);
}

TEST_CASE("the C ABI's prepared launches take the sinks' slots after the older ones",
          "[runtime][args]") {
  const Kernels kernels;  // the disk cache off
  attnjit_kernel* forward = nullptr;
  attnjit_kernel* backward = nullptr;
  REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal sinks=true return_lse=true "
                          "target=sm_80",
                          &forward) == ATTNJIT_OK);
  REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal sinks=true direction=backward "
                          "target=sm_80",
                          &backward) == ATTNJIT_OK);
  const Tensors t;
  attnjit_tensor sinks{};
  sinks.data = reinterpret_cast<void*>(0xa0000);
  sinks.dtype = ATTNJIT_FP32;
  sinks.rank = 1;
  sinks.shape[0] = 4;
  sinks.stride[0] = 1;
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots = t.forward_slots();
  slots[ATTNJIT_SLOT_SINKS] = sinks;
  const auto pointers = [](const std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT>& s) {
    std::array<void*, ATTNJIT_SLOT_COUNT> data{};
    for (int i = 0; i < ATTNJIT_SLOT_COUNT; ++i) data[i] = s[i].rank == 0 ? nullptr : s[i].data;
    return data;
  };
  attnjit_launch* launch = nullptr;

  // A forward launch takes no d_sinks.
  auto with_gradient = slots;
  with_gradient[ATTNJIT_SLOT_D_SINKS] = sinks;
  CHECK(user_error(attnjit_launch_prepare(forward, with_gradient.data(), ATTNJIT_SLOT_COUNT,
                                          nullptr, 0.f, -1, 0, 0.f, -1, &launch)) ==
        "tensors[15] (d_sinks): got 'a tensor'; accepted: rank 0 (absent) for a forward kernel");
  CHECK(launch == nullptr);

  // Every slot: the sinks' pointer is bound from the run.
  REQUIRE(attnjit_launch_prepare(forward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                 0.f, -1, &launch) == ATTNJIT_OK);
  auto data = pointers(slots);
  data[ATTNJIT_SLOT_SINKS] = nullptr;
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data[14] (sinks): got 'NULL'; accepted: the device pointer of the tensor the launch was "
        "prepared with");
  attnjit_launch_release(launch);

  // The count before the sinks' slots: a caller written for it has no sinks to give.
  REQUIRE(attnjit_launch_prepare(forward, slots.data(), ATTNJIT_SLOT_COUNT_VARLEN, nullptr, 0.f, -1,
                                 0, 0.f, -1, &launch) == ATTNJIT_OK);
  data = pointers(slots);
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data_count: got '23'; accepted: 14 (14 slots and 0 predicate tensors)");
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT_VARLEN, nullptr)) ==
        "sinks: missing; accepted: for sinks=true an fp32 [4] tensor (one sink logit per query "
        "head) in device memory");
  attnjit_launch_release(launch);

  // The backward's gradient slot.
  slots[ATTNJIT_SLOT_D_O] = t.d_o;
  slots[ATTNJIT_SLOT_D_Q] = t.d_q;
  slots[ATTNJIT_SLOT_D_K] = t.d_k;
  slots[ATTNJIT_SLOT_D_V] = t.d_v;
  REQUIRE(attnjit_launch_prepare(backward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                 0.f, -1, &launch) == ATTNJIT_OK);
  data = pointers(slots);
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "d_sinks: missing; accepted: for sinks=true an fp32 [4] tensor (the sinks' gradient, one "
        "per query head, written by the backward) in device memory");
  data[ATTNJIT_SLOT_D_SINKS] = sinks.data;
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data[15] (d_sinks): got 'a pointer'; accepted: NULL: the launch was prepared without "
        "this tensor");
  attnjit_launch_release(launch);
  slots[ATTNJIT_SLOT_D_SINKS] = sinks;
  slots[ATTNJIT_SLOT_D_SINKS].data = reinterpret_cast<void*>(0xb0002);
  REQUIRE(attnjit_launch_prepare(backward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                 0.f, -1, &launch) == ATTNJIT_OK);
  data = pointers(slots);
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "d_sinks.data: got '0xb0002'; accepted: a 4-byte aligned address");
  attnjit_launch_release(launch);
  attnjit_release(forward);
  attnjit_release(backward);
}

TEST_CASE("the C ABI's prepared launches take e4m3 inputs and their descales",
          "[runtime][args][fp8]") {
  const Kernels kernels;  // the disk cache off
  attnjit_kernel* forward = nullptr;
  REQUIRE(attnjit_compile("dtype=e4m3 head_dim=64 mask=causal return_lse=true target=sm_90a",
                          &forward) == ATTNJIT_OK);
  const Tensors t;
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots = t.forward_slots();
  for (const int slot : {ATTNJIT_SLOT_Q, ATTNJIT_SLOT_K, ATTNJIT_SLOT_V}) {
    slots[slot].dtype = ATTNJIT_E4M3;
  }
  attnjit_tensor descale{};
  descale.data = reinterpret_cast<void*>(0xa0000);
  descale.dtype = ATTNJIT_FP32;
  descale.rank = 2;
  descale.shape[0] = 2;  // [B, Hkv]
  descale.shape[1] = 2;
  descale.stride[0] = 2;
  descale.stride[1] = 1;
  slots[ATTNJIT_SLOT_Q_DESCALE] = descale;
  slots[ATTNJIT_SLOT_K_DESCALE] = descale;
  attnjit_launch* launch = nullptr;

  // A backward launch takes no descales.
  auto backward = slots;
  backward[ATTNJIT_SLOT_D_O] = t.d_o;
  backward[ATTNJIT_SLOT_D_Q] = t.d_q;
  backward[ATTNJIT_SLOT_D_K] = t.d_k;
  backward[ATTNJIT_SLOT_D_V] = t.d_v;
  CHECK(user_error(attnjit_launch_prepare(kernels.backward, backward.data(), ATTNJIT_SLOT_COUNT,
                                          nullptr, 0.f, -1, 0, 0.f, -1, &launch)) ==
        "tensors[20] (q_descale): got 'a tensor'; accepted: rank 0 (absent) for a backward "
        "kernel (e4m3 is forward only)");
  CHECK(launch == nullptr);

  // The descales' shapes are checked at each run, before anything reaches the device.
  slots[ATTNJIT_SLOT_V_DESCALE] = descale;
  slots[ATTNJIT_SLOT_V_DESCALE].rank = 1;
  slots[ATTNJIT_SLOT_V_DESCALE].shape[0] = 3;
  REQUIRE(attnjit_launch_prepare(forward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                 0.f, -1, &launch) == ATTNJIT_OK);
  std::array<void*, ATTNJIT_SLOT_COUNT> data{};
  for (int i = 0; i < ATTNJIT_SLOT_COUNT; ++i) {
    data[i] = slots[i].rank == 0 ? nullptr : slots[i].data;
  }
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "v_descale.shape: got '[3]'; accepted: [2, 2] contiguous (batch, kv heads) or [1]");
  attnjit_launch_release(launch);

  // Descales with 16-bit inputs are refused; a caller of the count before the descales' slots
  // gives none.
  REQUIRE(attnjit_launch_prepare(kernels.forward, t.forward_slots().data(),
                                 ATTNJIT_SLOT_COUNT_KVCACHE, nullptr, 0.f, -1, 0, 0.f, -1,
                                 &launch) == ATTNJIT_OK);
  attnjit_launch_release(launch);
  auto bf16 = t.forward_slots();
  bf16[ATTNJIT_SLOT_Q_DESCALE] = descale;
  REQUIRE(attnjit_launch_prepare(kernels.forward, bf16.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1,
                                 0, 0.f, -1, &launch) == ATTNJIT_OK);
  for (int i = 0; i < ATTNJIT_SLOT_COUNT; ++i) data[i] = bf16[i].rank == 0 ? nullptr : bf16[i].data;
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "q_descale: got 'given with dtype=bf16'; accepted: empty (descale factors apply to "
        "dtype=e4m3 and to kv_dtype=e4m3 caches' k and v)");
  attnjit_launch_release(launch);
  attnjit_release(forward);
}

TEST_CASE("the C ABI's text outputs take any buffer size", "[runtime][args]") {
  const Kernels kernels;
  // NULL or too small: nothing written, the size to allocate returned (>= 4).
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    char buffer[4] = {'x', 'x', 'x', 'x'};
    const int needed = attnjit_kernel_info(kernels.forward, size == 0 ? nullptr : buffer, size);
    CHECK(needed > 4);
    CHECK(buffer[0] == 'x');
    CHECK(attnjit_predicate_lift("q >= k", size == 0 ? nullptr : buffer, size) > 4);
    CHECK(buffer[0] == 'x');
    CHECK(attnjit_cache_dir(size == 0 ? nullptr : buffer, size) >= 4);
    CHECK(buffer[0] == 'x');
  }
  CHECK(attnjit_kernel_info(kernels.forward, nullptr, SIZE_MAX) > 4);
  CHECK_THAT(user_error(attnjit_kernel_info(nullptr, nullptr, 0)),
             Catch::StartsWith("kernel: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_predicate_lift(nullptr, nullptr, 0)),
             Catch::StartsWith("expression: got 'NULL'"));
  // More literals than a spec has scalar slots: refused when lifted, as the spec refuses them.
  std::string seventeen = "q < 0";
  for (int i = 1; i < 17; ++i) seventeen += " || q < " + std::to_string(i);
  CHECK(user_error(attnjit_predicate_lift(seventeen.c_str(), nullptr, 0)) ==
        "mask predicate: got '17 scalar slots'; accepted: at most 16 scalars ($0 .. $15); each "
        "number in the expression takes one");
  attnjit_kernel* kernel = kernels.forward;
  CHECK_THAT(user_error(attnjit_compile(nullptr, &kernel)), Catch::StartsWith("spec_text"));
  CHECK(kernel == nullptr);
  CHECK_THAT(user_error(attnjit_compile("dtype=bf16 head_dim=64", nullptr)),
             Catch::StartsWith("out: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_compile_for_device("dtype=bf16 head_dim=64", INT32_MIN, &kernel)),
             Catch::StartsWith("device: got '-2147483648'"));
  for (const int mode : {INT32_MIN, -1, 3, INT32_MAX}) {
    CHECK_THAT(user_error(attnjit_set_disk_cache_mode(mode)),
               Catch::StartsWith("mode: got '" + std::to_string(mode) + "'"));
  }
  CHECK_THAT(user_error(attnjit_cache_stats(nullptr)), Catch::StartsWith("out: got 'NULL'"));
}

TEST_CASE("the C ABI's builders check counts before reading arrays", "[runtime][args]") {
  const std::int32_t values[4] = {4, 4, 4, 4};
  attnjit_intervals* out = nullptr;
  for (const std::size_t count : {SIZE_MAX, std::size_t{1} << 31}) {
    const std::string got = "got '" + std::to_string(count) + "'; accepted: 0 to 2147483647";
    CHECK(user_error(attnjit_intervals_causal_document(values, count, &out)) ==
          "doc_lengths count: " + got);
    CHECK(user_error(attnjit_intervals_document(values, count, &out)) ==
          "doc_lengths count: " + got);
    CHECK(user_error(attnjit_intervals_share_question(4, values, count, &out)) ==
          "answers count: " + got);
    CHECK(user_error(attnjit_intervals_causal_blockwise(values, count, 4, &out)) ==
          "blocks count: " + got);
    CHECK_THAT(user_error(attnjit_intervals_prefix_lm_document(values, values, count, &out)),
               Catch::EndsWith(" count: " + got));
    CHECK(user_error(attnjit_intervals_random_eviction(values, count, &out)) ==
          "evicted_at_row count: " + got);
    const attnjit_intervals* const pieces[1] = {nullptr};
    CHECK(user_error(attnjit_intervals_pack(pieces, count, &out)) == "pieces count: " + got);
    CHECK(user_error(attnjit_intervals_stack(pieces, count, 1, &out)) == "samples count: " + got);
    CHECK(out == nullptr);
  }
  CHECK_THAT(user_error(attnjit_intervals_causal_document(nullptr, 3, &out)),
             Catch::StartsWith("doc_lengths: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_intervals_pack(nullptr, 2, &out)),
             Catch::StartsWith("pieces: got 'NULL'"));
  REQUIRE(attnjit_intervals_sliding_window(8, 2, &out) == ATTNJIT_OK);
  for (const int heads : {0, -1, INT32_MIN}) {
    std::int64_t pairs = 0;
    CHECK_THAT(user_error(attnjit_intervals_visible_pairs(out, heads, &pairs)),
               Catch::StartsWith("heads: got '" + std::to_string(heads) + "'"));
    attnjit_intervals* more = nullptr;
    CHECK_THAT(user_error(attnjit_intervals_broadcast_heads(out, heads, &more)),
               Catch::Contains("heads"));
    const attnjit_intervals* const one[1] = {out};
    CHECK_THAT(user_error(attnjit_intervals_stack(one, 1, heads, &more)),
               Catch::StartsWith("heads: got '" + std::to_string(heads) + "'"));
  }
  attnjit_intervals_release(out);
  int causal = 0;
  int columns = 0;
  CHECK_THAT(user_error(attnjit_mask_family(nullptr, &causal, &columns)),
             Catch::StartsWith("family: got 'NULL'"));
  CHECK_THAT(user_error(attnjit_mask_build(nullptr, nullptr, nullptr)),
             Catch::StartsWith("args: got 'NULL'"));
  attnjit_mask_build_args args{};
  CHECK_THAT(user_error(attnjit_mask_build(&args, nullptr, nullptr)),
             Catch::StartsWith("args.family: got 'NULL'"));
  attnjit_tensor vectors = doc_tensor();
  vectors.rank = INT32_MIN;
  CHECK_THAT(user_error(attnjit_validate_intervals(&vectors, 1, 1, 8, nullptr)),
             Catch::StartsWith("startend_row_indices.rank: got '-2147483648'; accepted: 0 to 4"));
  vectors.rank = 1;
  CHECK_THAT(user_error(attnjit_validate_intervals(&vectors, INT32_MAX, 1, 8, nullptr)),
             Catch::StartsWith("causal: got '2147483647'; accepted: 0 or 1"));
}
