// The shared forward and backward checks of the GPU tests, one case at a time or over a list
// of cases whose kernels compile and whose inputs and references are made ahead.
#include "gpu/checks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <utility>
#include <vector>

#include "gpu/compile_ahead.hpp"

namespace attnjit::gpu_test {
namespace {

/// Makes make(0), make(1), ... on threads of their own, at most `window` ahead of the one
/// taken last, and hands them over in order: take(0), take(1), ... Destroying it waits for
/// what is under way.
template <class T>
class Ahead {
 public:
  Ahead(std::size_t count, std::function<T(std::size_t)> make, std::size_t window = 4)
      : make_(std::move(make)), futures_(count), window_(window) {
    for (std::size_t i = 0; i < std::min(count, window_); ++i) launch(i);
  }

  T take(std::size_t i) {
    if (i + window_ < futures_.size()) launch(i + window_);
    return futures_[i].get();
  }

 private:
  void launch(std::size_t i) { futures_[i] = std::async(std::launch::async, make_, i); }

  std::function<T(std::size_t)> make_;
  std::vector<std::future<T>> futures_;
  std::size_t window_;
};

/// A forward case's inputs and reference.
struct ForwardData {
  Inputs inputs;
  testing::Reference ref;
};

ForwardData forward_data(const Case& c) {
  ForwardData data{make_inputs(c), {}};
  data.ref = reference_of(c, data.inputs);
  return data;
}

/// A backward case's inputs, upstream gradient and, when wanted, reference gradients.
struct BackwardData {
  Inputs inputs;
  std::vector<float> d_o;
  testing::Gradients ref;
};

BackwardData backward_data(const Case& c, bool with_reference) {
  BackwardData data{make_inputs(c), make_d_o(c), {}};
  if (with_reference) data.ref = reference_gradients_of(c, data.inputs, data.d_o);
  return data;
}

void check_outputs(const Case& c, const ForwardData& data, bool reference_kernel) {
  INFO(c.describe() << (reference_kernel ? " (GPU reference kernel)" : ""));
  const Outputs got = run_on_gpu(c, data.inputs, reference_kernel);
  const testing::Comparison out = testing::compare_output(got.out, data.ref, c.spec.dtype);
  const testing::Comparison lse = testing::compare_lse(got.lse, data.ref);
  INFO("O:   " << out.summary);
  INFO("LSE: " << lse.summary);
  CHECK(got.padding_intact);
  CHECK(out.passed);
  CHECK(lse.passed);
}

// The gradients of one mode against the reference.
void check_gradients(const Case& c, const BackwardData& data, bool deterministic) {
  INFO((deterministic ? "deterministic" : "atomic"));
  const BackwardOutputs got = run_backward_on_gpu(c, data.inputs, data.d_o, deterministic);
  const DType dtype = c.spec.dtype;
  const testing::Gradients& ref = data.ref;
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
  if (c.spec.sinks) {
    const testing::Comparison d_sinks = testing::compare_gradient(
        "d_sinks", got.d_sinks, ref.d_sinks, ref.d_sinks_lowp, dtype, ref.d_sinks_cancellation);
    INFO(d_sinks.summary);
    CHECK(d_sinks.passed);
  }
}

void check_run(const BackwardRun& run, const BackwardData& data) {
  INFO(run.c.describe());
  if (run.atomic) check_gradients(run.c, data, false);
  if (run.deterministic) check_gradients(run.c, data, true);
}

// Deterministic runs repeat the first one's bits.
void check_repeatable(const Case& c, const BackwardData& data, int repeats) {
  INFO(c.describe());
  const BackwardOutputs first = run_backward_on_gpu(c, data.inputs, data.d_o, true);
  for (int run = 0; run < repeats; ++run) {
    const BackwardOutputs again = run_backward_on_gpu(c, data.inputs, data.d_o, true);
    CHECK(same_bits(again.dq, first.dq));
    CHECK(same_bits(again.dk, first.dk));
    CHECK(same_bits(again.dv, first.dv));
    CHECK(same_bits(again.d_sinks, first.d_sinks));
  }
}

int atomic_variations(const Case& c, const BackwardData& data, int repeats) {
  const std::vector<float> first = run_backward_on_gpu(c, data.inputs, data.d_o, false).dq;
  int differing = 0;
  for (int run = 0; run < repeats; ++run) {
    differing += !same_bits(run_backward_on_gpu(c, data.inputs, data.d_o, false).dq, first);
  }
  return differing;
}

}  // namespace

void check_forward(const Case& c, bool reference_kernel) {
  check_outputs(c, forward_data(c), reference_kernel);
}

void check_against_reference_kernel(const Case& c) {
  INFO(c.describe());
  const Inputs inputs = make_inputs(c);
  const Outputs fused = run_on_gpu(c, inputs);
  const Outputs reference = run_on_gpu(c, inputs, /*reference_kernel=*/true);
  double max_err = 0, max_ref = 0, sq_err = 0, sq_ref = 0, lse_err = 0;
  for (std::size_t i = 0; i < fused.out.size(); ++i) {
    REQUIRE(std::isfinite(fused.out[i]));
    const double d = static_cast<double>(fused.out[i]) - reference.out[i];
    max_err = std::max(max_err, std::abs(d));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(reference.out[i])));
    sq_err += d * d;
    sq_ref += static_cast<double>(reference.out[i]) * reference.out[i];
  }
  for (std::size_t i = 0; i < fused.lse.size(); ++i) {
    lse_err = std::max(lse_err, std::abs(static_cast<double>(fused.lse[i]) - reference.lse[i]));
  }
  INFO("max abs err " << max_err << " (max |ref| " << max_ref << "), rel l2 "
                      << std::sqrt(sq_err / sq_ref) << ", lse max err " << lse_err);
  // Both outputs are rounded to bf16 (2^-8 relative); P is rounded before P V in the fused
  // kernel only.
  CHECK(std::sqrt(sq_err / sq_ref) < 1e-2);
  CHECK(max_err < 2e-2 * std::max(1.0, max_ref));
  CHECK(lse_err < 1e-3 * std::log(static_cast<double>(c.seqlen_k)) + 1e-3);
}

void check_backward(const Case& c, bool deterministic) {
  const BackwardRun run = BackwardRun::in_mode(c, deterministic);
  check_run(run, backward_data(c, /*with_reference=*/true));
}

void check_forwards(const std::vector<Case>& cases) {
  std::vector<AttentionSpec> specs;
  for (const Case& c : cases) specs.push_back(forward_spec(c));
  const CompileAhead compiles(std::move(specs));
  Ahead<ForwardData> data(cases.size(), [&](std::size_t i) { return forward_data(cases[i]); });
  for (std::size_t i = 0; i < cases.size(); ++i) check_outputs(cases[i], data.take(i), false);
}

void check_backwards(const std::vector<BackwardRun>& runs) {
  std::vector<AttentionSpec> specs;
  for (const BackwardRun& run : runs) {
    for (bool deterministic : {false, true}) {
      if (deterministic ? !run.deterministic : !run.atomic) continue;
      for (AttentionSpec& spec : backward_specs(run.c, deterministic)) {
        specs.push_back(std::move(spec));
      }
    }
  }
  const CompileAhead compiles(std::move(specs));
  Ahead<BackwardData> data(runs.size(), [&](std::size_t i) {
    return backward_data(runs[i].c, /*with_reference=*/true);
  });
  for (std::size_t i = 0; i < runs.size(); ++i) check_run(runs[i], data.take(i));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_deterministic_repeatable(const Case& c, int repeats) {
  check_repeatable(c, backward_data(c, /*with_reference=*/false), repeats);
}

void check_deterministic_repeatable(const std::vector<Case>& cases, int repeats,
                                    int atomic_repeats) {
  const CompileAhead compiles(backward_specs(cases, atomic_repeats > 0
                                                        ? std::initializer_list<bool>{true, false}
                                                        : std::initializer_list<bool>{true}));
  Ahead<BackwardData> data(cases.size(), [&](std::size_t i) {
    return backward_data(cases[i], /*with_reference=*/false);
  });
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BackwardData inputs = data.take(i);
    check_repeatable(cases[i], inputs, repeats);
    if (atomic_repeats > 0) {
      // For the log: what the deterministic mode's turns take away.
      const int differing = atomic_variations(cases[i], inputs, atomic_repeats);
      WARN(cases[i].describe() << ": atomic dQ differed from its first run in " << differing
                               << " of " << atomic_repeats << " runs");
    }
  }
}

int atomic_dq_variations(const Case& c, int repeats) {
  return atomic_variations(c, backward_data(c, /*with_reference=*/false), repeats);
}

}  // namespace attnjit::gpu_test
