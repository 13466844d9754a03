// The C ABI checks every stride and shape of its tensor descriptors before anything reaches
// the device: outputs whose elements overlap (zero strides, rows closer than the head dim),
// negative strides, spans beyond 2^48 bytes, and 64-bit shapes that an int cannot hold. Uses
// fake device pointers; every call fails in its checks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

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
