// Random predicates, their bindings, the reference evaluator and the grid kernel source.
#include "support/predicate_cases.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>

namespace attnjit::testing {
namespace {

constexpr std::array<std::int32_t, 15> kEdges{
    INT_MIN, INT_MIN + 1, -65536, -7, -3, -2, -1, 0, 1, 2, 3, 7, 65536, INT_MAX - 1, INT_MAX};

constexpr std::array<PredicateOp, 15> kBinary{
    PredicateOp::mul,        PredicateOp::div,       PredicateOp::mod,
    PredicateOp::add,        PredicateOp::sub,       PredicateOp::less,
    PredicateOp::less_equal, PredicateOp::greater,   PredicateOp::greater_equal,
    PredicateOp::equal,      PredicateOp::not_equal, PredicateOp::logical_and,
    PredicateOp::logical_or, PredicateOp::min,       PredicateOp::max};

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
    case PredicateOp::mul:
      return wrap(x * y);
    case PredicateOp::div:
      return y == 0 ? 0 : wrap(x / y);
    case PredicateOp::mod:
      return y == 0 ? 0 : wrap(x % y);
    case PredicateOp::add:
      return wrap(x + y);
    case PredicateOp::sub:
      return wrap(x - y);
    case PredicateOp::less:
      return x < y;
    case PredicateOp::less_equal:
      return x <= y;
    case PredicateOp::greater:
      return x > y;
    case PredicateOp::greater_equal:
      return x >= y;
    case PredicateOp::equal:
      return x == y;
    case PredicateOp::not_equal:
      return x != y;
    case PredicateOp::logical_and:
      return x != 0 && y != 0;
    case PredicateOp::logical_or:
      return x != 0 || y != 0;
    case PredicateOp::min:
      return wrap(std::min(x, y));
    case PredicateOp::max:
      return wrap(std::max(x, y));
    case PredicateOp::abs:
      return wrap(x < 0 ? -x : x);
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
      const PredicateOp op = kBinary[pick(rng, static_cast<int>(kBinary.size()))];
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
