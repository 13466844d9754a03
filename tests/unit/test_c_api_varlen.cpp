// Packed batches (varlen=true) through the C ABI's prepared launches: the slot counts and the
// entry point each kind of kernel takes (attnjit_launch_prepare vs _varlen), the required
// cu_seqlens slots and their pointers, and the runs' checks of the packed tensors' and the
// boundaries' dtypes, ranks and shapes, of max_seqlen_q/k and of e4m3 inputs' descales (per
// sequence or per tensor). Uses fake device pointers; every run fails in its checks, before
// the device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "attnjit/attnjit.h"
#include "runtime/jit/kernel_build.hpp"

namespace {

/// A contiguous descriptor of `dtype` at a fake, aligned device address (rank = shape's size).
attnjit_tensor tensor(std::uintptr_t address, int dtype,
                      std::initializer_list<std::int64_t> shape) {
  attnjit_tensor t{};
  t.data = reinterpret_cast<void*>(address);
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (const std::int64_t extent : shape) t.shape[d++] = extent;
  std::int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.stride[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

/// A packed batch of 3 sequences: 100 queries and 120 keys in all, 4 query heads, 2 KV heads,
/// head dim 64.
struct Packed {
  attnjit_tensor q = tensor(0x10000, ATTNJIT_BF16, {100, 4, 64});
  attnjit_tensor k = tensor(0x20000, ATTNJIT_BF16, {120, 2, 64});
  attnjit_tensor v = tensor(0x30000, ATTNJIT_BF16, {120, 2, 64});
  attnjit_tensor o = tensor(0x40000, ATTNJIT_BF16, {100, 4, 64});
  attnjit_tensor lse = tensor(0x50000, ATTNJIT_FP32, {4, 100});
  attnjit_tensor d_o = tensor(0x60000, ATTNJIT_BF16, {100, 4, 64});
  attnjit_tensor d_q = tensor(0x70000, ATTNJIT_BF16, {100, 4, 64});
  attnjit_tensor d_k = tensor(0x80000, ATTNJIT_BF16, {120, 2, 64});
  attnjit_tensor d_v = tensor(0x90000, ATTNJIT_BF16, {120, 2, 64});
  attnjit_tensor cu_seqlens_q = tensor(0xa0000, ATTNJIT_INT32, {4});
  attnjit_tensor cu_seqlens_k = tensor(0xb0000, ATTNJIT_INT32, {4});
  attnjit_tensor seqused_k = tensor(0xc0000, ATTNJIT_INT32, {3});
  int max_seqlen_q = 60;
  int max_seqlen_k = 70;

  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots(bool backward) const {
    std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> s{};
    s[ATTNJIT_SLOT_Q] = q;
    s[ATTNJIT_SLOT_K] = k;
    s[ATTNJIT_SLOT_V] = v;
    s[ATTNJIT_SLOT_O] = o;
    s[ATTNJIT_SLOT_LSE] = lse;
    s[ATTNJIT_SLOT_CU_SEQLENS_Q] = cu_seqlens_q;
    s[ATTNJIT_SLOT_CU_SEQLENS_K] = cu_seqlens_k;
    s[ATTNJIT_SLOT_SEQUSED_K] = seqused_k;
    if (backward) {
      s[ATTNJIT_SLOT_D_O] = d_o;
      s[ATTNJIT_SLOT_D_Q] = d_q;
      s[ATTNJIT_SLOT_D_K] = d_k;
      s[ATTNJIT_SLOT_D_V] = d_v;
    }
    return s;
  }
};

/// The kernels, compiled without the disk cache: varlen forward and backward, and a padded
/// forward.
struct Kernels {
  attnjit_kernel* forward = nullptr;
  attnjit_kernel* backward = nullptr;
  attnjit_kernel* padded = nullptr;
  Kernels() {
    REQUIRE(attnjit_set_disk_cache_mode(ATTNJIT_DISK_CACHE_OFF) == ATTNJIT_OK);
    REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal return_lse=true varlen=true "
                            "target=sm_80",
                            &forward) == ATTNJIT_OK);
    REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal direction=backward varlen=true "
                            "target=sm_80",
                            &backward) == ATTNJIT_OK);
    REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal target=sm_80", &padded) ==
            ATTNJIT_OK);
  }
  ~Kernels() {
    attnjit_release(forward);
    attnjit_release(backward);
    attnjit_release(padded);
    attnjit::runtime::reset_disk_cache_mode();
  }
};

std::string user_error(int code) {
  INFO(attnjit_last_error());
  CHECK(code == ATTNJIT_USER_ERROR);
  return attnjit_last_error();
}

/// The message of a varlen prepare that must fail; *out must stay NULL.
std::string prepare_error(const attnjit_kernel* kernel, const attnjit_tensor* slots, int count,
                          int max_seqlen_q = 60, int max_seqlen_k = 70) {
  attnjit_launch* launch = reinterpret_cast<attnjit_launch*>(0x1);
  const std::string message = user_error(attnjit_launch_prepare_varlen(
      kernel, slots, count, nullptr, 0.f, -1, 0, 0.f, max_seqlen_q, max_seqlen_k, -1, &launch));
  CHECK(launch == nullptr);
  return message;
}

/// The data pointers of `slots` (NULL for an absent slot).
std::array<void*, ATTNJIT_SLOT_COUNT> pointers(
    const std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT>& slots) {
  std::array<void*, ATTNJIT_SLOT_COUNT> data{};
  for (int i = 0; i < ATTNJIT_SLOT_COUNT; ++i)
    data[i] = slots[i].rank == 0 ? nullptr : slots[i].data;
  return data;
}

/// Prepares a varlen launch of `kernel` with `slots` and `p`'s maximum lengths (which must
/// succeed) and returns the message of its run, which must fail with a user error.
std::string run_error(const attnjit_kernel* kernel, const Packed& p,
                      const std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT>& slots) {
  attnjit_launch* launch = nullptr;
  const int prepared =
      attnjit_launch_prepare_varlen(kernel, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                    0.f, p.max_seqlen_q, p.max_seqlen_k, -1, &launch);
  INFO(attnjit_last_error());
  REQUIRE(prepared == ATTNJIT_OK);
  const auto data = pointers(slots);
  const std::string message =
      user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr));
  attnjit_launch_release(launch);
  return message;
}

/// run_error with `p`'s tensors.
std::string run_error(const attnjit_kernel* kernel, const Packed& p, bool backward) {
  return run_error(kernel, p, p.slots(backward));
}

}  // namespace

TEST_CASE("the C ABI prepares a packed batch only through attnjit_launch_prepare_varlen",
          "[runtime][args][varlen]") {
  const Kernels kernels;
  const Packed p;
  const auto slots = p.slots(false);
  attnjit_launch* launch = nullptr;
  CHECK(user_error(attnjit_launch_prepare(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT,
                                          nullptr, 0.f, -1, 0, 0.f, -1, &launch)) ==
        "kernel: got 'a spec with varlen=true'; accepted: a spec with varlen=false (a packed "
        "batch's launch is prepared with attnjit_launch_prepare_varlen, which takes max_seqlen_q "
        "and max_seqlen_k)");
  CHECK(launch == nullptr);
  CHECK(user_error(attnjit_launch_prepare(kernels.backward, slots.data(), ATTNJIT_SLOT_COUNT_PADDED,
                                          nullptr, 0.f, -1, 0, 0.f, -1, &launch))
            .starts_with("kernel: got 'a spec with varlen=true'"));
  CHECK(prepare_error(kernels.padded, slots.data(), ATTNJIT_SLOT_COUNT) ==
        "kernel: got 'a spec with varlen=false'; accepted: a spec with varlen=true or shared (a "
        "padded "
        "batch's launch is prepared with attnjit_launch_prepare)");

  // A padded kernel's launch takes no boundaries, whichever slot count it is prepared with.
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> padded_slots{};
  padded_slots[ATTNJIT_SLOT_Q] = tensor(0x10000, ATTNJIT_BF16, {2, 50, 4, 64});
  padded_slots[ATTNJIT_SLOT_K] = tensor(0x20000, ATTNJIT_BF16, {2, 60, 2, 64});
  padded_slots[ATTNJIT_SLOT_V] = padded_slots[ATTNJIT_SLOT_K];
  padded_slots[ATTNJIT_SLOT_O] = padded_slots[ATTNJIT_SLOT_Q];
  for (const int slot : {ATTNJIT_SLOT_CU_SEQLENS_Q, ATTNJIT_SLOT_SEQUSED_K}) {
    auto with_boundaries = padded_slots;
    with_boundaries[slot] = p.cu_seqlens_q;
    CHECK(user_error(attnjit_launch_prepare(kernels.padded, with_boundaries.data(),
                                            ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0, 0.f, -1,
                                            &launch)) ==
          "tensors[" + std::to_string(slot) + "] (" +
              (slot == ATTNJIT_SLOT_SEQUSED_K ? "seqused_k" : "cu_seqlens_q") +
              "): got 'a tensor'; accepted: rank 0 (absent) with attnjit_launch_prepare (a "
              "packed batch's launch is prepared with attnjit_launch_prepare_varlen)");
  }
}

TEST_CASE("the C ABI's prepared launches take the slot count before the packed batches' slots",
          "[runtime][args][varlen]") {
  const Kernels kernels;
  const Packed p;
  const auto slots = p.slots(false);
  attnjit_launch* launch = nullptr;
  for (const int count : {ATTNJIT_SLOT_COUNT + 1, ATTNJIT_SLOT_COUNT - 1, 0, -1}) {
    CHECK(user_error(attnjit_launch_prepare(kernels.padded, slots.data(), count, nullptr, 0.f, -1,
                                            0, 0.f, -1, &launch)) ==
          "tensor_count: got '" + std::to_string(count) +
              "'; accepted: 23 (ATTNJIT_SLOT_COUNT), 20 (ATTNJIT_SLOT_COUNT_KVCACHE: the slots "
              "before the descales' ones), 16 (ATTNJIT_SLOT_COUNT_SINKS: the slots before the "
              "cache's ones), 14 (ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' ones) "
              "or 11 (ATTNJIT_SLOT_COUNT_PADDED: the slots before the packed batches' ones)");
  }
  for (const int count : {int{ATTNJIT_SLOT_COUNT_PADDED}, ATTNJIT_SLOT_COUNT + 1, 0}) {
    CHECK(prepare_error(kernels.forward, slots.data(), count) ==
          "tensor_count: got '" + std::to_string(count) +
              "'; accepted: 23 (ATTNJIT_SLOT_COUNT), 20 (ATTNJIT_SLOT_COUNT_KVCACHE) or 14 "
              "(ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' ones); a packed batch's "
              "launch takes the cu_seqlens slots");
  }

  // A caller of the padded slot count: its runs pass as many pointers, never more.
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT_PADDED> padded{};
  padded[ATTNJIT_SLOT_Q] = tensor(0x10000, ATTNJIT_BF16, {2, 50, 4, 64});
  padded[ATTNJIT_SLOT_K] = tensor(0x20000, ATTNJIT_BF16, {2, 60, 2, 64});
  padded[ATTNJIT_SLOT_V] = padded[ATTNJIT_SLOT_K];
  padded[ATTNJIT_SLOT_O] = padded[ATTNJIT_SLOT_Q];
  REQUIRE(attnjit_launch_prepare(kernels.padded, padded.data(), ATTNJIT_SLOT_COUNT_PADDED, nullptr,
                                 0.f, -1, 0, 0.f, -1, &launch) == ATTNJIT_OK);
  std::array<void*, ATTNJIT_SLOT_COUNT> data{};
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data_count: got '23'; accepted: 11 (11 slots and 0 predicate tensors)");
  // The right count reaches the pointer checks (q's is NULL here).
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT_PADDED, nullptr)) ==
        "data[0] (q): got 'NULL'; accepted: the device pointer of the tensor the launch was "
        "prepared with");
  attnjit_launch_release(launch);
}

TEST_CASE("the C ABI's varlen launch requires cu_seqlens_q and cu_seqlens_k",
          "[runtime][args][varlen]") {
  const Kernels kernels;
  const Packed p;
  for (const int slot : {ATTNJIT_SLOT_CU_SEQLENS_Q, ATTNJIT_SLOT_CU_SEQLENS_K}) {
    auto slots = p.slots(false);
    slots[slot] = attnjit_tensor{};
    CHECK(prepare_error(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT) ==
          "tensors[" + std::to_string(slot) + "] (cu_seqlens_" +
              (slot == ATTNJIT_SLOT_CU_SEQLENS_Q ? "q" : "k") +
              "): got 'rank 0 (absent)'; accepted: a tensor descriptor of rank 1 to 4");
  }
  // seqused_k is optional; its pointer then must be NULL, and a present one must be given.
  const auto slots = p.slots(false);
  attnjit_launch* launch = nullptr;
  REQUIRE(attnjit_launch_prepare_varlen(kernels.forward, slots.data(), ATTNJIT_SLOT_COUNT, nullptr,
                                        0.f, -1, 0, 0.f, 60, 70, -1, &launch) == ATTNJIT_OK);
  auto data = pointers(slots);
  data[ATTNJIT_SLOT_CU_SEQLENS_K] = nullptr;
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data[12] (cu_seqlens_k): got 'NULL'; accepted: the device pointer of the tensor the "
        "launch was prepared with");
  attnjit_launch_release(launch);
  auto without_seqused = slots;
  without_seqused[ATTNJIT_SLOT_SEQUSED_K] = attnjit_tensor{};
  REQUIRE(attnjit_launch_prepare_varlen(kernels.forward, without_seqused.data(), ATTNJIT_SLOT_COUNT,
                                        nullptr, 0.f, -1, 0, 0.f, 60, 70, -1,
                                        &launch) == ATTNJIT_OK);
  data = pointers(slots);
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT, nullptr)) ==
        "data[13] (seqused_k): got 'a pointer'; accepted: NULL: the launch was prepared without "
        "this tensor");
  attnjit_launch_release(launch);
}

TEST_CASE("the C ABI's varlen runs check the boundaries' dtype, rank and shape",
          "[runtime][args][varlen]") {
  const Kernels kernels;
  Packed p;
  p.cu_seqlens_q.dtype = ATTNJIT_FP32;
  CHECK(run_error(kernels.forward, p, false) == "cu_seqlens_q.dtype: got 'fp32'; accepted: int32");
  p = Packed();
  p.cu_seqlens_k = tensor(0xb0000, ATTNJIT_INT32, {2, 2});
  CHECK(run_error(kernels.forward, p, false) == "cu_seqlens_k.rank: got '2'; accepted: 1");
  p = Packed();
  p.cu_seqlens_k = tensor(0xb0000, ATTNJIT_INT32, {5});
  CHECK(run_error(kernels.forward, p, false) ==
        "cu_seqlens_k.shape[0]: got '5'; accepted: 4 (B + 1: as many entries as cu_seqlens_q)");
  p = Packed();
  p.cu_seqlens_q = tensor(0xa0000, ATTNJIT_INT32, {1});
  CHECK(run_error(kernels.forward, p, false) ==
        "cu_seqlens_q.shape[0]: got '1'; accepted: B + 1 entries for B >= 1 sequences");
  p = Packed();
  p.seqused_k = tensor(0xc0000, ATTNJIT_INT32, {4});
  CHECK(run_error(kernels.backward, p, true) ==
        "seqused_k.shape[0]: got '4'; accepted: 3 (B: one per sequence)");
  p = Packed();
  p.cu_seqlens_q.stride[0] = 2;
  CHECK(run_error(kernels.forward, p, false) ==
        "cu_seqlens_q.stride[0]: got '2'; accepted: 1 (the tensor must be contiguous)");
}

TEST_CASE("the C ABI's varlen runs check max_seqlen_q/k and the packed tensors",
          "[runtime][args][varlen]") {
  const Kernels kernels;
  Packed p;
  p.max_seqlen_q = -1;
  CHECK(run_error(kernels.forward, p, false) ==
        "max_seqlen_q: got '-1'; accepted: 0 to 100 (total_q): the longest query sequence or "
        "more");
  p = Packed();
  p.max_seqlen_k = 121;
  CHECK(run_error(kernels.backward, p, true) ==
        "max_seqlen_k: got '121'; accepted: 0 to 120 (total_k): the longest key sequence or more");
  p = Packed();
  // Padded layouts ([1, total, H, D]) for a varlen kernel.
  p.q = tensor(0x10000, ATTNJIT_BF16, {1, 100, 4, 64});
  p.o = tensor(0x40000, ATTNJIT_BF16, {1, 100, 4, 64});
  p.k = tensor(0x20000, ATTNJIT_BF16, {1, 120, 2, 64});
  p.v = tensor(0x30000, ATTNJIT_BF16, {1, 120, 2, 64});
  {  // refused as the launch is prepared (its workspace size reads the shapes)
    const auto slots = p.slots(false);
    attnjit_launch* launch = nullptr;
    CHECK(user_error(attnjit_launch_prepare_varlen(kernels.forward, slots.data(),
                                                   ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0, 0.f,
                                                   p.max_seqlen_q, p.max_seqlen_k, -1, &launch)) ==
          "q.rank: got '4'; accepted: 3 ([total_q, heads, head_dim]: the spec has varlen=true)");
    CHECK(launch == nullptr);
  }
  p = Packed();
  p.v = tensor(0x30000, ATTNJIT_BF16, {119, 2, 64});
  CHECK(run_error(kernels.forward, p, false) ==
        "v.shape[0] (total_k): got '119'; accepted: 120 (total_k of k)");
  p = Packed();
  p.lse = tensor(0x50000, ATTNJIT_FP32, {1, 4, 100});
  CHECK(run_error(kernels.forward, p, false) ==
        "lse.rank: got '3'; accepted: 2 ([heads, total_q]: the spec has varlen=true)");
  p = Packed();
  p.d_k = tensor(0x80000, ATTNJIT_BF16, {100, 2, 64});
  CHECK(run_error(kernels.backward, p, true) ==
        "d_k.shape[0]: got '100'; accepted: 120 (that of k)");
}

TEST_CASE("the C ABI prepares a packed predicate: its tensors take a row per sequence",
          "[capi][varlen][predicate]") {
  REQUIRE(attnjit_set_disk_cache_mode(ATTNJIT_DISK_CACHE_OFF) == ATTNJIT_OK);
  attnjit_kernel* kernel = nullptr;
  REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=predicate(doc[q]==doc[k]&&q>=k) "
                          "return_lse=true varlen=true target=sm_80",
                          &kernel) == ATTNJIT_OK);
  const Packed p;
  const auto slots = p.slots(false);
  // Two rows for three sequences: prepared (the rows are a run's data), refused by the run.
  const char* names[] = {"doc"};
  const attnjit_tensor doc = tensor(0xd0000, ATTNJIT_INT32, {2, 70});
  const attnjit_predicate_inputs inputs{nullptr, 0, names, &doc, 1};
  attnjit_launch* launch = nullptr;
  const int prepared =
      attnjit_launch_prepare_varlen(kernel, slots.data(), ATTNJIT_SLOT_COUNT, &inputs, 0.f, -1, 0,
                                    0.f, p.max_seqlen_q, p.max_seqlen_k, -1, &launch);
  INFO(attnjit_last_error());
  REQUIRE(prepared == ATTNJIT_OK);
  std::array<void*, ATTNJIT_SLOT_COUNT + 1> data{};
  const auto packed = pointers(slots);
  std::copy(packed.begin(), packed.end(), data.begin());
  data[ATTNJIT_SLOT_COUNT] = doc.data;
  CHECK(user_error(attnjit_launch_run(launch, data.data(), ATTNJIT_SLOT_COUNT + 1, nullptr)) ==
        "predicate tensor 'doc' shape[0] (rows): got '2'; accepted: 1 (shared by every "
        "sequence) or 3 (one per sequence of the packed batch)");
  attnjit_launch_release(launch);
  attnjit_release(kernel);
  attnjit::runtime::reset_disk_cache_mode();
}

TEST_CASE("the C ABI's packed e4m3 launches take descales per sequence or per tensor",
          "[capi][varlen][fp8]") {
  REQUIRE(attnjit_set_disk_cache_mode(ATTNJIT_DISK_CACHE_OFF) == ATTNJIT_OK);
  attnjit_kernel* kernel = nullptr;
  REQUIRE(attnjit_compile("dtype=e4m3 head_dim=64 mask=causal return_lse=true varlen=true "
                          "target=sm_90a",
                          &kernel) == ATTNJIT_OK);
  Packed p;
  p.q.dtype = p.k.dtype = p.v.dtype = ATTNJIT_E4M3;
  p.seqused_k = {};
  auto slots = p.slots(false);
  // q's per (sequence, KV head): three sequences, two KV heads; k's per tensor.
  slots[ATTNJIT_SLOT_Q_DESCALE] = tensor(0xd0000, ATTNJIT_FP32, {3, 2});
  slots[ATTNJIT_SLOT_K_DESCALE] = tensor(0xd1000, ATTNJIT_FP32, {1});
  // v's per batch row of the launch's one packed row: not a packed batch's shape.
  slots[ATTNJIT_SLOT_V_DESCALE] = tensor(0xd2000, ATTNJIT_FP32, {1, 2});
  CHECK(run_error(kernel, p, slots) ==
        "v_descale.shape: got '[1, 2]'; accepted: [3, 2] contiguous (sequences, kv heads) or "
        "[1]");
  // o stays bf16 for e4m3 inputs.
  slots[ATTNJIT_SLOT_V_DESCALE] = tensor(0xd2000, ATTNJIT_FP32, {3, 2});
  slots[ATTNJIT_SLOT_O].dtype = ATTNJIT_E4M3;
  CHECK(run_error(kernel, p, slots) == "o.dtype: got 'e4m3'; accepted: bf16 (the spec's dtype)");
  attnjit_release(kernel);
  attnjit::runtime::reset_disk_cache_mode();
}
