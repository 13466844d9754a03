// compile_mask and build_mask: the form decision, the lowering of families into predicates,
// the checks of the tensors a mask reads, and the host renderings used by tests and attnc.
#include "dsl/mask_lang.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "dsl/mask_families.hpp"

namespace attnjit::dsl {
namespace {

void check_families(const MaskExpr& e, bool& forced) {
  if (e.kind == MaskExpr::Kind::family) check_family_call(e);
  if (e.kind == MaskExpr::Kind::force) forced = true;
  for (const MaskExpr& operand : e.operands) check_families(operand, forced);
}

Predicate lower(const MaskExpr& e, std::vector<MaskExpr>& families) {
  switch (e.kind) {
    case MaskExpr::Kind::family:
      families.push_back(e);
      return family_predicate(e, static_cast<int>(families.size()) - 1);
    case MaskExpr::Kind::predicate: {
      if (info(e.predicate).scalar_count > 0) {
        throw_field_error("mask expression", to_string(e.predicate),
                          "numbers instead of $N slots (numbers become runtime scalars)");
      }
      return e.predicate;
    }
    case MaskExpr::Kind::force:
      return lower(e.operands[0], families);
    default: {
      const Predicate lhs = lower(e.operands[0], families);
      const Predicate rhs = lower(e.operands[1], families);
      const PredicateOp op =
          e.kind == MaskExpr::Kind::intersect ? PredicateOp::logical_and : PredicateOp::logical_or;
      return make_binary(op, lhs, rhs);
    }
  }
}

void check_size(std::string_view field, int value) {
  if (value < 1) throw_field_error(field, fmt::to_string(value), ">= 1");
}

// Checks every tensor the predicate reads: given, rows 1 or batch, values rows * length, long
// enough for its reads at q and at k.
void check_tensors(const Predicate& predicate, const std::vector<PredicateTensor>& tensors,
                   int batch, int seqlen_q, int seqlen_k) {
  for (const PredicateNode& node : predicate.nodes) {
    if (node.op != PredicateOp::tensor_read) continue;
    const auto t = std::find_if(tensors.begin(), tensors.end(),
                                [&](const PredicateTensor& x) { return x.name == node.tensor; });
    if (t == tensors.end()) {
      throw Error(
          fmt::format("tensor {}: not given; accepted: every tensor the mask reads, "
                      "as int32 [1 or batch, length] (attnc: --tensor {}=v0,v1,...)",
                      node.tensor, node.tensor));
    }
    if (t->rows != 1 && t->rows != batch) {
      throw Error(fmt::format("tensor {}: got {} rows; accepted: 1 or the batch size {}", t->name,
                              t->rows, batch));
    }
    if (t->length < 0 || t->values.size() != static_cast<std::size_t>(t->rows) * t->length) {
      throw Error(
          fmt::format("tensor {}: got {} values for {} rows of length {}; accepted: rows "
                      "* length values",
                      t->name, t->values.size(), t->rows, t->length));
    }
    const PredicateOp index = predicate.nodes[node.lhs].op;
    const bool at_q = index == PredicateOp::query;
    if ((at_q || index == PredicateOp::key) && t->length < (at_q ? seqlen_q : seqlen_k)) {
      throw Error(fmt::format(
          "tensor {}: got length {}; accepted: at least seqlen_{} = {} (it "
          "is read at {})",
          t->name, t->length, at_q ? "q" : "k", at_q ? seqlen_q : seqlen_k, at_q ? "q" : "k"));
    }
  }
}

}  // namespace

MaskProgram compile_mask(std::string_view text) {
  const MaskExpr expr = parse_mask_expr(text);
  bool forced = false;
  check_families(expr, forced);
  MaskProgram program;
  program.predicate = lower(expr, program.families);
  if (expr.kind == MaskExpr::Kind::family) {
    program.family = expr;
    const FamilyLayout layout = family_layout(expr.family);
    if (layout.columns == 0) {
      program.spec.kind = layout.causal ? MaskKind::causal : MaskKind::none;
    } else {
      program.spec = MaskSpec{MaskKind::flashmask, layout.causal, layout.columns};
    }
    return program;
  }
  if (!forced) program.derived = derive_layout(program.predicate);
  if (program.derived) {
    program.spec =
        program.derived->columns == 0
            ? MaskSpec{MaskKind::causal}
            : MaskSpec{MaskKind::flashmask, program.derived->causal, program.derived->columns};
    return program;
  }
  const Predicate lifted = lift_literals(program.predicate, program.scalars);
  program.spec.kind = MaskKind::predicate;
  program.spec.predicate = to_string(lifted);
  return program;
}

MaskData build_mask(const MaskProgram& program, int batch, int seqlen_q, int seqlen_k,
                    std::span<const PredicateTensor> tensors) {
  check_size("batch", batch);
  check_size("seqlen_q", seqlen_q);
  check_size("seqlen_k", seqlen_k);
  MaskData data;
  data.spec = program.spec;
  data.batch = batch;
  data.seqlen_q = seqlen_q;
  data.seqlen_k = seqlen_k;
  if (program.family) {
    if (program.spec.kind == MaskKind::flashmask) {
      data.intervals = family_intervals(*program.family, batch, seqlen_q, seqlen_k, tensors);
    }
    return data;
  }
  std::vector<PredicateTensor> all(tensors.begin(), tensors.end());
  for (std::size_t i = 0; i < program.families.size(); ++i) {
    std::vector<PredicateTensor> generated = family_tensors(
        program.families[i], static_cast<int>(i), batch, seqlen_q, seqlen_k, tensors);
    all.insert(all.end(), std::make_move_iterator(generated.begin()),
               std::make_move_iterator(generated.end()));
  }
  check_tensors(program.predicate, all, batch, seqlen_q, seqlen_k);
  if (program.derived && program.derived->columns == 0) {
    if (seqlen_q != seqlen_k) {
      throw Error(
          fmt::format("seqlen_k: got {} with seqlen_q {}; accepted: equal lengths for the "
                      "predicate q>=k (top-left), which runs as the causal mask (bottom-"
                      "right); write causal for bottom-right, or predicate(q>=k)",
                      seqlen_k, seqlen_q));
    }
    return data;
  }
  PredicateBindings bindings{std::move(all), {}};
  if (program.derived) {
    data.intervals =
        derive_intervals(program.predicate, *program.derived, bindings, batch, seqlen_q, seqlen_k);
    return data;
  }
  for (const std::string& name : info(program.predicate).tensors) {
    const auto t = std::find_if(bindings.tensors.begin(), bindings.tensors.end(),
                                [&](const PredicateTensor& x) { return x.name == name; });
    data.bindings.tensors.push_back(*t);
  }
  data.bindings.scalars = program.scalars;
  return data;
}

std::vector<std::uint8_t> dense_visible(const MaskData& data, int b) {
  if (b < 0 || b >= data.batch) {
    throw_field_error("dense_visible: batch index", fmt::to_string(b),
                      fmt::format("0 <= b < {}", data.batch));
  }
  const int sq = data.seqlen_q;
  const int sk = data.seqlen_k;
  std::vector<std::uint8_t> visible(static_cast<std::size_t>(sq) * sk, 1);
  if (data.intervals) {
    const std::vector<std::uint8_t> masked = dense_mask(*data.intervals, b, 0);
    for (std::size_t i = 0; i < visible.size(); ++i) visible[i] = masked[i] ? 0 : 1;
  } else if (data.spec.kind == MaskKind::causal) {
    for (int q = 0; q < sq; ++q) {
      for (int k = 0; k < sk; ++k) visible[static_cast<std::size_t>(q) * sk + k] = k <= q + sk - sq;
    }
  } else if (data.spec.kind == MaskKind::predicate) {
    PredicateParseOptions options;
    options.allow_reserved_tensor_names = true;
    const PredicateEvaluator evaluator(parse_predicate(data.spec.predicate, options),
                                       data.bindings);
    for (int q = 0; q < sq; ++q) {
      for (int k = 0; k < sk; ++k) {
        visible[static_cast<std::size_t>(q) * sk + k] = evaluator.visible(b, 0, q, k);
      }
    }
  }
  return visible;
}

std::vector<TileClass> classify_tiles(std::span<const std::uint8_t> visible, int seqlen_q,
                                      int seqlen_k, int block_m, int block_n) {
  check_size("block_m", block_m);
  check_size("block_n", block_n);
  const int rows = (seqlen_q + block_m - 1) / block_m;
  const int cols = (seqlen_k + block_n - 1) / block_n;
  std::vector<TileClass> tiles(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      std::size_t seen = 0, total = 0;
      for (int q = r * block_m; q < std::min(seqlen_q, (r + 1) * block_m); ++q) {
        for (int k = c * block_n; k < std::min(seqlen_k, (c + 1) * block_n); ++k) {
          seen += visible[static_cast<std::size_t>(q) * seqlen_k + k];
          ++total;
        }
      }
      tiles[static_cast<std::size_t>(r) * cols + c] = seen == 0       ? TileClass::skip
                                                      : seen == total ? TileClass::full
                                                                      : TileClass::partial;
    }
  }
  return tiles;
}

}  // namespace attnjit::dsl
