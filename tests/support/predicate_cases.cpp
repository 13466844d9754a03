// Random predicates, their bindings, the reference evaluator and the grid kernel source.
#include "support/predicate_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <functional>

namespace attnjit::testing {
namespace {

constexpr std::array<std::int32_t, 15> kEdges{
    INT_MIN, INT_MIN + 1, -65536, -7, -3, -2, -1, 0, 1, 2, 3, 7, 65536, INT_MAX - 1, INT_MAX};

/// A binary operator and its definition on exact integers, before the result wraps to int32.
struct BinaryOperator {
  PredicateOp op;
  std::function<std::int64_t(std::int64_t, std::int64_t)> define;
};

// The standard function objects define each operator independently of the evaluator's switch;
// / and % by 0 give 0.
const std::array<BinaryOperator, 15> kBinary{{
    {PredicateOp::mul, std::multiplies<std::int64_t>{}},
    {PredicateOp::div, [](std::int64_t x, std::int64_t y) { return y == 0 ? 0 : x / y; }},
    {PredicateOp::mod, [](std::int64_t x, std::int64_t y) { return y == 0 ? 0 : x % y; }},
    {PredicateOp::add, std::plus<std::int64_t>{}},
    {PredicateOp::sub, std::minus<std::int64_t>{}},
    {PredicateOp::less, std::less<std::int64_t>{}},
    {PredicateOp::less_equal, std::less_equal<std::int64_t>{}},
    {PredicateOp::greater, std::greater<std::int64_t>{}},
    {PredicateOp::greater_equal, std::greater_equal<std::int64_t>{}},
    {PredicateOp::equal, std::equal_to<std::int64_t>{}},
    {PredicateOp::not_equal, std::not_equal_to<std::int64_t>{}},
    {PredicateOp::logical_and, std::logical_and<std::int64_t>{}},
    {PredicateOp::logical_or, std::logical_or<std::int64_t>{}},
    {PredicateOp::min, [](std::int64_t x, std::int64_t y) { return std::min(x, y); }},
    {PredicateOp::max, [](std::int64_t x, std::int64_t y) { return std::max(x, y); }},
}};

int pick(std::mt19937& rng, int count) {
  return std::uniform_int_distribution<int>(0, count - 1)(rng);
}

Predicate random_leaf(std::mt19937& rng) {
  switch (pick(rng, 4)) {
    case 0:
      return make_literal(random_edge_value(rng));
    case 1:
      return make_scalar(pick(rng, 3));
    case 2: {
      constexpr std::array<PredicateOp, 4> kVariables{PredicateOp::batch, PredicateOp::head,
                                                      PredicateOp::query, PredicateOp::key};
      return make_variable(kVariables[pick(rng, 4)]);
    }
    default:
      return make_variable(pick(rng, 2) == 0 ? PredicateOp::query : PredicateOp::key);
  }
}

std::int32_t wrap(std::int64_t value) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(value));
}

std::int32_t evaluate(const Predicate& p, int at, const PredicateBindings& bindings, int b, int h,
                      int q, int k) {
  const PredicateNode& node = p.nodes[at];
  const std::int64_t x = node.lhs >= 0 ? evaluate(p, node.lhs, bindings, b, h, q, k) : 0;
  const std::int64_t y = node.rhs >= 0 ? evaluate(p, node.rhs, bindings, b, h, q, k) : 0;
  switch (node.op) {
    case PredicateOp::literal:
      return node.value;
    case PredicateOp::scalar:
      return bindings.scalars.at(node.value);
    case PredicateOp::batch:
      return b;
    case PredicateOp::head:
      return h;
    case PredicateOp::query:
      return q;
    case PredicateOp::key:
      return k;
    case PredicateOp::tensor_read:
      for (const PredicateTensor& tensor : bindings.tensors) {
        if (tensor.name != node.tensor) continue;
        if (x < 0 || x >= tensor.length) return 0;
        return tensor.values.at((tensor.rows == 1 ? 0 : b) * tensor.length + x);
      }
      throw Error("reference_value: unbound tensor " + node.tensor);
    case PredicateOp::negate:
      return wrap(-x);
    case PredicateOp::logical_not:
      return x == 0;
    case PredicateOp::abs:
      return wrap(x < 0 ? -x : x);
    default:
      break;
  }
  for (const BinaryOperator& binary : kBinary) {
    if (binary.op == node.op) return wrap(binary.define(x, y));
  }
  throw Error("reference_value: unknown operator");
}

}  // namespace

std::int32_t random_edge_value(std::mt19937& rng) {
  if (pick(rng, 2) == 0) return kEdges[pick(rng, static_cast<int>(kEdges.size()))];
  return static_cast<std::int32_t>(rng());
}

Predicate random_predicate(std::mt19937& rng, int max_depth) {
  if (max_depth <= 1 || pick(rng, 4) == 0) return random_leaf(rng);
  switch (pick(rng, 6)) {
    case 0:
      return make_tensor_read(pick(rng, 2) == 0 ? "t" : "u", random_predicate(rng, max_depth - 1));
    case 1: {
      constexpr std::array<PredicateOp, 3> kUnary{PredicateOp::negate, PredicateOp::logical_not,
                                                  PredicateOp::abs};
      return make_unary(kUnary[pick(rng, 3)], random_predicate(rng, max_depth - 1));
    }
    default: {
      const PredicateOp op = kBinary[pick(rng, static_cast<int>(kBinary.size()))].op;
      const Predicate lhs = random_predicate(rng, max_depth - 1);
      return make_binary(op, lhs, random_predicate(rng, max_depth - 1));
    }
  }
}

PredicateBindings random_bindings(std::mt19937& rng, const Predicate& predicate, int batch) {
  const PredicateInfo used = info(predicate);
  PredicateBindings bindings;
  for (const std::string& name : used.tensors) {
    PredicateTensor tensor{name, pick(rng, 2) == 0 ? 1 : batch, 1 + pick(rng, 8), {}};
    for (int i = 0; i < tensor.rows * tensor.length; ++i) {
      // Small values too, so that reads index other tensors in range.
      tensor.values.push_back(pick(rng, 2) == 0 ? pick(rng, 9) - 1 : random_edge_value(rng));
    }
    bindings.tensors.push_back(std::move(tensor));
  }
  for (int i = 0; i < used.scalar_count; ++i) bindings.scalars.push_back(random_edge_value(rng));
  return bindings;
}

std::int32_t reference_value(const Predicate& predicate, const PredicateBindings& bindings, int b,
                             int h, int q, int k) {
  return evaluate(predicate, static_cast<int>(predicate.nodes.size()) - 1, bindings, b, h, q, k);
}

std::string predicate_kernel_source(const Predicate& predicate) {
  return fmt::format(R"(#include "attnjit/masks/predicate.cuh"

extern "C" __global__ void predicate_visible(int* out, const int* data, const int* offsets,
                                             const int* rows, const int* lengths,
                                             const int* scalars, int batch, int heads,
                                             int seqlen_q, int seqlen_k) {{
  using namespace attnjit;
  const long long total = static_cast<long long>(batch) * heads * seqlen_q * seqlen_k;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int k = static_cast<int>(i % seqlen_k);
  const int q = static_cast<int>(i / seqlen_k % seqlen_q);
  const int h = static_cast<int>(i / seqlen_k / seqlen_q % heads);
  const int b = static_cast<int>(i / seqlen_k / seqlen_q / heads);
  auto tensor_at = [&](int slot, int index) {{
    const int* row = data + offsets[slot] + (rows[slot] > 1 ? b : 0) * lengths[slot];
    return pred_tensor_read(row, lengths[slot], index);
  }};
  auto scalar_at = [&](int slot) {{ return scalars[slot]; }};
  (void)tensor_at;
  (void)scalar_at;
  out[i] = ({}) ? 1 : 0;
}}
)",
                     emit_cuda_expression(predicate));
}

}  // namespace attnjit::testing
