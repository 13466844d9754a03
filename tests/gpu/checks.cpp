// The shared forward and backward checks of the GPU tests.
#include "gpu/checks.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

namespace attnjit::gpu_test {

void check_forward(const Case& c, bool reference_kernel) {
  INFO(c.describe() << (reference_kernel ? " (GPU reference kernel)" : ""));
  const Inputs inputs = make_inputs(c);
  const Outputs got = run_on_gpu(c, inputs, reference_kernel);
  const testing::Reference ref = reference_of(c, inputs);
  const testing::Comparison out = testing::compare_output(got.out, ref, c.spec.dtype);
  const testing::Comparison lse = testing::compare_lse(got.lse, ref);
  INFO("O:   " << out.summary);
  INFO("LSE: " << lse.summary);
  CHECK(got.padding_intact);
  CHECK(out.passed);
  CHECK(lse.passed);
}

void check_backward(const Case& c, bool deterministic) {
  INFO(c.describe() << (deterministic ? " deterministic" : " atomic"));
  const Inputs inputs = make_inputs(c);
  const std::vector<float> d_o = make_d_o(c);
  const BackwardOutputs got = run_backward_on_gpu(c, inputs, d_o, deterministic);
  const testing::Gradients ref = reference_gradients_of(c, inputs, d_o);
  const DType dtype = c.spec.dtype;
  const testing::Comparison dq =
      testing::compare_gradient("dq", got.dq, ref.dq, ref.dq_lowp, dtype, ref.dq_cancellation);
  const testing::Comparison dk =
      testing::compare_gradient("dk", got.dk, ref.dk, ref.dk_lowp, dtype, ref.dk_cancellation);
  const testing::Comparison dv =
      testing::compare_gradient("dv", got.dv, ref.dv, ref.dv_lowp, dtype);
  INFO(dq.summary);
  INFO(dk.summary);
  INFO(dv.summary);
  CHECK(got.padding_intact);
  CHECK(dq.passed);
  CHECK(dk.passed);
  CHECK(dv.passed);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_deterministic_repeatable(const Case& c, int repeats) {
  INFO(c.describe());
  const Inputs inputs = make_inputs(c);
  const std::vector<float> d_o = make_d_o(c);
  const BackwardOutputs first = run_backward_on_gpu(c, inputs, d_o, true);
  for (int run = 0; run < repeats; ++run) {
    const BackwardOutputs again = run_backward_on_gpu(c, inputs, d_o, true);
    CHECK(same_bits(again.dq, first.dq));
    CHECK(same_bits(again.dk, first.dk));
    CHECK(same_bits(again.dv, first.dv));
  }
}

int atomic_dq_variations(const Case& c, int repeats) {
  const Inputs inputs = make_inputs(c);
  const std::vector<float> d_o = make_d_o(c);
  const std::vector<float> first = run_backward_on_gpu(c, inputs, d_o, false).dq;
  int differing = 0;
  for (int run = 0; run < repeats; ++run) {
    differing += !same_bits(run_backward_on_gpu(c, inputs, d_o, false).dq, first);
  }
  return differing;
}

}  // namespace attnjit::gpu_test
