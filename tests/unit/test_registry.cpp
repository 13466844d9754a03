// The kernel-family registry and the plan as the launch contract: properties of every choice
// the passes make from the rows (over a sweep of specs and targets), and the launch the
// runtime derives from a plan against the plan's printed text.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <map>
#include <sstream>

#include "compiler/passes/pipeline.hpp"
#include "compiler/registry/kernel_registry.hpp"
#include "runtime/launch/plan_launch.hpp"

using namespace attnjit;

namespace {

// Every spec shape the sweep covers, for one target: every head dim and every pair of unequal
// head dims.
std::vector<std::string> sweep_specs(const char* target) {
  std::vector<std::string> out;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (const char* dims :
         {"head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128", "head_dim=192",
          "head_dim=256", "head_dim_qk=64 head_dim_v=128", "head_dim_qk=128 head_dim_v=64",
          "head_dim_qk=192 head_dim_v=128", "head_dim_qk=256 head_dim_v=128"}) {
      for (const char* mask :
           {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
            "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
            "flashmask(causal=false,columns=4)", "predicate(q>=k&&_d[q]==_d[k])"}) {
        for (const char* modifiers : {"", " softcap=true", " alibi=true"}) {
          for (const char* direction : {"direction=forward", "direction=backward",
                                        "direction=backward deterministic=true"}) {
            out.push_back(fmt::format("dtype={} {} mask={}{} {} target={}", dtype, dims, mask,
                                      modifiers, direction, target));
          }
        }
      }
    }
  }
  return out;
}

// The first row and candidate select_tiles should take, found by walking the table here.
std::pair<const KernelRow*, const TileCandidate*> expected_choice(const Lowering& ir,
                                                                  KernelRole role,
                                                                  KernelFamily family) {
  const MaskCost cost = mask_cost(*ir.mask);
  for (const KernelRow& row : kernel_rows()) {
    if (row.role != role || row.family != family) continue;
    if (!row.compiles_for(ir.spec.target)) continue;
    if (ir.spec.head_dim_v != ir.spec.head_dim_qk && !row.support.unequal_head_dims) continue;
    if (ir.mask->element_predicate && !row.support.predicate_masks) continue;
    if (ir.spec.deterministic && !(row.support.deterministic && row.support.auto_deterministic)) {
      continue;
    }
    if (!ir.spec.deterministic && !row.support.atomic) continue;
    for (const TileCandidate& c : row.candidates) {
      if (c.head_dim != ir.spec.head_dim_qk ||
          (c.head_dim_v == 0 ? c.head_dim : c.head_dim_v) != ir.spec.head_dim_v) {
        continue;
      }
      if (row.fits != nullptr
              ? !row.fits(c, ir.spec, *ir.mask)
              : c.up_to < cost || (ir.spec.softcap && !c.softcap) || (ir.spec.alibi && !c.alibi)) {
        continue;
      }
      if (row.smem_bytes(c, ir.spec, *ir.mask) > ir.target->max_dynamic_smem_bytes) continue;
      return {&row, &c};
    }
  }
  return {nullptr, nullptr};
}

// A tiny evaluator of the printed launch expressions (the IR text), independent of
// LaunchExpr: sums, products, ceil(a/b), floor(a/b), min(a, b), integers and extent names.
class PrintedExpr {
 public:
  PrintedExpr(std::string text, const LaunchExtents& extents)
      : text_(std::move(text)), extents_(extents) {}

  std::int64_t value() {
    const std::int64_t v = sum();
    REQUIRE(at_ == text_.size());
    return v;
  }

 private:
  std::int64_t sum() {
    std::int64_t v = product();
    while (take("+")) v += product();
    return v;
  }
  std::int64_t product() {
    std::int64_t v = leaf();
    while (take("*")) v *= leaf();
    return v;
  }
  std::int64_t leaf() {
    if (take("(")) {
      const std::int64_t v = sum();
      REQUIRE(take(")"));
      return v;
    }
    for (const char* call : {"ceil(", "floor("}) {
      if (!take(call)) continue;
      const std::int64_t a = product();
      REQUIRE(take("/"));
      const std::int64_t b = leaf();
      REQUIRE(take(")"));
      return call[0] == 'c' ? (a + b - 1) / b : a / b;
    }
    if (take("min(")) {
      const std::int64_t a = sum();
      REQUIRE(take(", "));
      const std::int64_t b = sum();
      REQUIRE(take(")"));
      return std::min(a, b);
    }
    std::size_t end = at_;
    while (end < text_.size() && std::isalnum(static_cast<unsigned char>(text_[end]))) ++end;
    const std::string word = text_.substr(at_, end - at_);
    at_ = end;
    REQUIRE(!word.empty());
    if (std::isdigit(static_cast<unsigned char>(word[0]))) return std::stoll(word);
    static const std::map<std::string, Extent> kNames{
        {"B", Extent::batch},      {"Sq", Extent::seqlen_q},      {"Sk", Extent::seqlen_k},
        {"H", Extent::heads},      {"Hkv", Extent::kv_heads},     {"Hm", Extent::mask_heads},
        {"gqa", Extent::gqa},      {"bits", Extent::bits_budget}, {"SMs", Extent::sm_count},
        {"Hg", Extent::head_group}};
    REQUIRE(kNames.count(word) == 1);
    return extents_[kNames.at(word)];
  }
  bool take(std::string_view token) {
    if (text_.compare(at_, token.size(), token) != 0) return false;
    at_ += token.size();
    return true;
  }

  std::string text_;
  const LaunchExtents& extents_;
  std::size_t at_ = 0;
};

// The grids printed for each launch of the plan, in order: `grid=(x, y, z)`, or one
// `phaseN=[grid=(x, y, z) ...]` per phase; the dimensions split at top-level commas.
std::vector<std::array<std::string, 3>> printed_grids(const std::string& ir_text) {
  std::vector<std::array<std::string, 3>> grids;
  std::istringstream lines(ir_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  kernel @", 0) != 0) continue;
    for (std::size_t at = line.find("grid=("); at != std::string::npos;
         at = line.find("grid=(", at + 1)) {
      std::array<std::string, 3> grid;
      int axis = 0;
      int depth = 0;
      for (std::size_t i = at + 6; depth >= 0; ++i) {
        const char c = line.at(i);
        if (c == '(') ++depth;
        if (c == ')') --depth;
        if (depth < 0) break;
        if (depth == 0 && line.compare(i, 2, ", ") == 0) {
          ++axis;
          ++i;
          continue;
        }
        grid.at(axis) += c;
      }
      REQUIRE(axis == 2);
      grids.push_back(grid);
    }
  }
  return grids;
}

}  // namespace

TEST_CASE("the registry: one row per utility role, attention rows with their pieces", "[pass]") {
  for (KernelRole role :
       {KernelRole::flashmask_minmax, KernelRole::predicate_blocks, KernelRole::cta_order,
        KernelRole::backward_preprocess, KernelRole::backward_sinks,
        KernelRole::backward_convert_dq, KernelRole::backward_reduce_dkdv}) {
    INFO(name_of(role));
    CHECK(utility_row(role).threads > 0);
    CHECK(!utility_row(role).header.empty());
  }
  std::vector<std::string_view> ids;
  for (const KernelRow& row : kernel_rows()) {
    INFO(row.id);
    ids.push_back(row.id);
    CHECK(&kernel_row(row.id) == &row);
    CHECK(row.launch != nullptr);
    CHECK(row.buffers != nullptr);
    CHECK(!row.support.targets.empty());
    if (row.candidates.empty()) continue;
    CHECK(!row.kernel_struct.empty());
    CHECK(row.smem_bytes != nullptr);
    CHECK((row.explicit_tiles != nullptr) == !row.tiles_layouts.empty());
    CHECK(!row.config.empty());
    CHECK((row.params == ParamBlock::attention_tma) == !row.tensor_maps_type.empty());
    CHECK((row.params == ParamBlock::attention_tma) == (row.tensor_maps != nullptr));
    const bool splits =
        std::ranges::find(row.config, ConfigField::register_split) != row.config.end();
    CHECK(splits == (row.producer_registers != nullptr));
    // A family's kernels compile only where its instructions exist.
    if (row.family == KernelFamily::sm90a) {
      CHECK(row.support.targets == std::vector<Arch>{Arch::sm_90a});
    }
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
}

TEST_CASE("every tile layout a direction takes forces exactly one row of its role", "[pass]") {
  for (const Direction direction : {Direction::forward, Direction::backward}) {
    const KernelRole role =
        direction == Direction::forward ? KernelRole::forward : KernelRole::backward;
    for (const TileLayoutInfo& info : tile_layouts()) {
      INFO(name_of(direction) << " " << info.name);
      int rows = 0;
      for (const KernelRow& row : kernel_rows()) {
        if (row.role == role &&
            std::ranges::find(row.tiles_layouts, info.layout) != row.tiles_layouts.end()) {
          ++rows;
        }
      }
      CHECK(rows == (takes(direction, info.layout) ? 1 : 0));
    }
  }
  // The row each layout forces.
  const auto row_of = [](const char* spec) {
    const Lowering ir = lower(parse_spec(spec));
    return ir
        .tiles_of(ir.spec.direction == Direction::forward ? KernelRole::forward
                                                          : KernelRole::backward)
        .row;
  };
  CHECK(row_of("dtype=bf16 head_dim=64 tiles=64x64x4:q_registers target=sm_90a") == "forward.sm80");
  CHECK(row_of("dtype=bf16 head_dim=64 tiles=128x64x4:q_shared target=sm_90a") == "forward.sm80");
  CHECK(row_of("dtype=bf16 head_dim=64 tiles=128x128x12:warpgroups target=sm_90a") ==
        "forward.sm90a");
  CHECK(row_of("dtype=bf16 head_dim=64 direction=backward tiles=64x128x8:slabs target=sm_90a") ==
        "backward_slabs.sm80");
  CHECK(row_of("dtype=bf16 head_dim=64 direction=backward tiles=64x128x8:grid target=sm_90a") ==
        "backward_grid.sm80");
  CHECK(row_of("dtype=bf16 head_dim=64 direction=backward tiles=64x128x12:warpgroups "
               "target=sm_90a") == "backward.sm90a");
}

TEST_CASE("row ids, template files, structs and bodies are named alike", "[pass]") {
  // An attention row `KERNEL.FAMILY` lives in templates/attnjit/FAMILY/KERNEL.cuh as the struct
  // KernelFamily (each word capitalized) and the body KERNEL_FAMILY; a utility row (every
  // family's plans) in a header named after it, as the body of its own name.
  const auto pascal = [](std::string_view snake) {
    std::string out;
    bool upper = true;
    for (char c : snake) {
      if (c == '_') {
        upper = true;
        continue;
      }
      out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
    return out;
  };
  for (const KernelRow& row : kernel_rows()) {
    INFO(row.id);
    const std::string_view id = row.id;
    if (row.candidates.empty()) {
      CHECK(id.find('.') == std::string_view::npos);
      CHECK(row.body == id);
      CHECK(row.header.ends_with(fmt::format("/{}.cuh", id)));
      continue;
    }
    const std::size_t dot = id.find('.');
    REQUIRE(dot != std::string_view::npos);
    const std::string_view kernel = id.substr(0, dot);
    const std::string_view family = id.substr(dot + 1);
    CHECK(family == name_of(row.family));
    CHECK(row.header == fmt::format("attnjit/{}/{}.cuh", family, kernel));
    CHECK(row.body == fmt::format("{}_{}", kernel, family));
    CHECK(row.kernel_struct == pascal(row.body));
  }
  CHECK(kernel_row("backward.sm90a").kernel_struct == "BackwardSm90a");
  CHECK(kernel_row("backward_slabs.sm80").header == "attnjit/sm80/backward_slabs.cuh");
}

TEST_CASE("the sm90a kernels' TMA boxes: panels of their tiles, fp32 boxes of 128-byte rows",
          "[pass]") {
  // Per head dim: the forward's panel columns, the backward's (a consumer's half of the head
  // dim above 128) and its dQ accumulator's box columns (one Q panel's bytes above 128).
  struct Expected {
    int head_dim, forward_panel, backward_panel, dq_cols;
  };
  const auto box = [](MapTensor tensor, int rows, int cols, int element) {
    return TensorMapBox{tensor, rows, cols, cols * element};
  };
  for (const Expected e :
       {Expected{64, 64, 64, 32}, Expected{96, 32, 32, 32}, Expected{128, 64, 64, 32},
        Expected{192, 64, 32, 16}, Expected{256, 64, 64, 32}}) {
    for (const char* mask : {"none", "causal", "flashmask(causal=true,columns=2)"}) {
      const std::string spec =
          fmt::format("dtype=bf16 head_dim={} mask={} target=sm_90a", e.head_dim, mask);
      INFO(spec);
      const Lowering forward = lower(parse_spec(spec));
      const KernelDesc& f = *forward.plan->find(KernelRole::forward);
      REQUIRE(f.params == ParamBlock::attention_tma);
      const int p = e.forward_panel;
      CHECK(f.tensor_maps == std::vector<TensorMapBox>{box(MapTensor::q, f.block_m, p, 2),
                                                       box(MapTensor::k, f.block_n, p, 2),
                                                       box(MapTensor::v, f.block_n, p, 2),
                                                       box(MapTensor::o, 64, p, 2)});
      for (const char* mode : {"", " deterministic=true"}) {
        const Lowering backward =
            lower(parse_spec(fmt::format("{} direction=backward{}", spec, mode)));
        const KernelDesc& b = *backward.plan->find(KernelRole::backward);
        REQUIRE(b.params == ParamBlock::attention_tma);
        const int panel = e.backward_panel;
        std::vector<TensorMapBox> expected{box(MapTensor::q, b.block_m, panel, 2),
                                           box(MapTensor::k, b.block_n, panel, 2),
                                           box(MapTensor::v, b.block_n, panel, 2),
                                           box(MapTensor::d_o, b.block_m, panel, 2),
                                           box(MapTensor::dq_accum, b.block_m, e.dq_cols, 4),
                                           box(MapTensor::d_k, 64, panel, 2),
                                           box(MapTensor::d_v, 64, panel, 2)};
        // GQA's fp32 dK and dV sums: the atomic mode only (the deterministic mode writes
        // per-query-head partials without TMA).
        if (*mode == '\0') {
          expected.push_back(box(MapTensor::dk_sum, 64, 32, 4));
          expected.push_back(box(MapTensor::dv_sum, 64, 32, 4));
        }
        CHECK(b.tensor_maps == expected);
      }
    }
  }
  // 80-row query blocks (d128 without a mask): q, d_o and the dQ accumulator boxes of 80 rows.
  const Lowering eighty =
      lower(parse_spec("dtype=fp16 head_dim=128 mask=none direction=backward target=sm_90a"));
  const KernelDesc& b = *eighty.plan->find(KernelRole::backward);
  REQUIRE(b.block_m == 80);
  CHECK(b.tensor_maps.front() == box(MapTensor::q, 80, 64, 2));
  CHECK(b.tensor_maps[4] == box(MapTensor::dq_accum, 80, 32, 4));
  // Kernels that copy without TMA carry no maps.
  const Lowering sm80 = lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90"));
  for (const KernelDesc& kernel : sm80.plan->kernels) CHECK(kernel.tensor_maps.empty());
}

TEST_CASE("every automatic choice is the first fitting candidate of the preferred family",
          "[pass]") {
  for (const char* target : {"sm_80", "sm_86", "sm_90", "sm_90a"}) {
    for (const std::string& text : sweep_specs(target)) {
      INFO(text);
      const Lowering ir = lower(parse_spec(text));
      REQUIRE(ir.tiles.size() == ir.target->families.size());
      for (const FamilyChoice& choice : ir.target->families) {
        INFO(name_of(choice.role));
        const KernelTiles& tiles = ir.tiles_of(choice.role);
        const KernelRow& row = kernel_row(tiles.row);
        CHECK(row.role == choice.role);
        CHECK(row.family == choice.family);
        CHECK(tiles.smem_bytes <= ir.target->max_dynamic_smem_bytes);
        // The more specialised family wherever one of its rows has a fitting candidate.
        const bool sm90a_fits =
            expected_choice(ir, choice.role, KernelFamily::sm90a).first != nullptr;
        CHECK((choice.family == KernelFamily::sm90a) == sm90a_fits);
        const auto [expected_row, expected] = expected_choice(ir, choice.role, choice.family);
        REQUIRE(expected_row != nullptr);
        CHECK(expected_row->id == tiles.row);
        CHECK(tiles.block_m == expected->block_m);
        CHECK(tiles.block_n == expected->block_n);
        CHECK(tiles.warps == expected->warps);
        CHECK(tiles.dim_warps == expected->dim_warps);
        CHECK(tiles.q_in_registers == expected->q_in_registers);
        // The planned kernel is that row's template with those tiles.
        const KernelDesc& kernel = *ir.plan->find(choice.role);
        CHECK(kernel.row == tiles.row);
        CHECK(kernel.template_header == row.header);
        CHECK(kernel.family == row.family);
        CHECK(kernel.threads == tiles.threads());
        CHECK(kernel.dynamic_smem_bytes == tiles.smem_bytes);
        // Every pair of unequal head dims has its sm90a forward and backward on sm_90a.
        if (ir.spec.head_dim_v != ir.spec.head_dim_qk && ir.spec.target == Arch::sm_90a) {
          if (choice.role == KernelRole::forward) CHECK(tiles.row == "forward.sm90a");
          if (choice.role == KernelRole::backward) CHECK(tiles.row == "backward.sm90a");
        }
      }
    }
  }
}

TEST_CASE("every plan's kernels read only buffers an earlier kernel wrote", "[pass]") {
  // The fields a kernel writes (its outputs); every other bound field is read.
  const auto writes = [](const KernelDesc& kernel, ParamField field) {
    switch (field) {
      case ParamField::table_out:
      case ParamField::bits_out:
      case ParamField::bits_used:
      case ParamField::order_cost:
      case ParamField::order_out:
        return true;
      case ParamField::row_dot:
      case ParamField::lse_log2:
        return kernel.role == KernelRole::backward_preprocess;
      case ParamField::dq_accum:  // zeroed by the preprocess, added to by the main kernel
        return kernel.role == KernelRole::backward_preprocess;
      case ParamField::dk_partial:
      case ParamField::dv_partial:
      case ParamField::dq_turns:  // zeroed before the first kernel, counted by the main kernel
        return kernel.role == KernelRole::backward;
      default:
        return false;
    }
  };
  for (const std::string& text : sweep_specs("sm_90a")) {
    INFO(text);
    const Lowering ir = lower(parse_spec(text));
    const KernelPlan& plan = *ir.plan;
    // Zeroed buffers start written (the runtime clears them before the first kernel).
    std::vector<bool> written(plan.scratch.size(), false);
    for (std::size_t b = 0; b < plan.scratch.size(); ++b) written[b] = plan.scratch[b].zeroed;
    std::vector<bool> bound(plan.scratch.size(), false);
    for (const KernelDesc& kernel : plan.kernels) {
      INFO(kernel.name);
      CHECK(!kernel.phases.empty());
      for (const BufferBinding& b : kernel.buffers) {
        REQUIRE(b.buffer >= 0);
        REQUIRE(b.buffer < static_cast<int>(plan.scratch.size()));
        INFO(name_of(b.field) << " " << plan.scratch[b.buffer].name);
        bound[b.buffer] = true;
        if (writes(kernel, b.field)) {
          written[b.buffer] = true;
        } else {
          CHECK(written[b.buffer]);
        }
      }
    }
    CHECK(std::ranges::all_of(bound, [](bool b) { return b; }));
  }
}

TEST_CASE("the grids the IR prints are the grids the runtime launches", "[pass][runtime]") {
  struct Shape {
    int batch, seqlen_q, seqlen_k, heads, kv_heads, mask_heads;
  };
  const std::vector<Shape> shapes{{1, 1, 1, 1, 1, 1},
                                  {2, 1000, 700, 6, 2, 2},
                                  {3, 8192, 8192, 16, 16, 1},
                                  {1, 70, 200, 5, 1, 1}};
  for (const char* target : {"sm_80", "sm_90a"}) {
    for (const std::string& text : sweep_specs(target)) {
      INFO(text);
      const Lowering ir = lower(parse_spec(text));
      const auto printed = printed_grids(to_string(ir));
      std::size_t launches = 0;
      for (const KernelDesc& kernel : ir.plan->kernels) launches += kernel.phases.size();
      REQUIRE(printed.size() == launches);
      for (const Shape& s : shapes) {
        const jit::detail::Shapes shape{s.batch, s.seqlen_q, s.seqlen_k,
                                        s.heads, s.kv_heads, s.mask_heads};
        LaunchExtents extents = jit::detail::launch_extents(shape);
        extents[Extent::sm_count] = 132;  // an H100's (no device here): persistent grids launch
        const jit::detail::LaunchSchedule schedule = jit::detail::schedule_plan(*ir.plan, extents);
        // Every printed grid with no zero dimension is launched, in order, as printed.
        std::size_t launched = 0;
        std::size_t index = 0;
        for (std::size_t k = 0; k < ir.plan->kernels.size(); ++k) {
          for (std::size_t phase = 0; phase < ir.plan->kernels[k].phases.size(); ++phase) {
            std::array<unsigned, 3> grid{};
            for (int axis = 0; axis < 3; ++axis) {
              grid[axis] =
                  static_cast<unsigned>(PrintedExpr(printed[index][axis], extents).value());
            }
            ++index;
            if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) continue;
            REQUIRE(launched < schedule.launches.size());
            const jit::detail::ScheduledLaunch& launch = schedule.launches[launched++];
            CHECK(launch.kernel == static_cast<int>(k));
            CHECK(launch.phase == static_cast<int>(phase));
            CHECK(launch.grid == grid);
          }
        }
        CHECK(launched == schedule.launches.size());
      }
    }
  }
}

TEST_CASE("the sm90a forward under tables is persistent: min(works, SMs) CTAs", "[pass][runtime]") {
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_90a"));
  const KernelDesc& forward = *ir.plan->find(KernelRole::forward);
  REQUIRE(forward.row == "forward.sm90a");
  REQUIRE(forward.phases.size() == 1);
  CHECK(forward.phases[0].grid.to_string() == "(min(2*ceil(Sq/128)*ceil(H/2)*B, SMs), 1, 1)");
  // Not persistent (d256; masks without a CTA order): a CTA per work, on the paired-head grid.
  for (const char* spec : {"dtype=bf16 head_dim=256 mask=flashmask(causal=true,columns=1)",
                           "dtype=bf16 head_dim=128 mask=causal"}) {
    const Lowering plain = lower(parse_spec(fmt::format("{} target=sm_90a", spec)));
    CHECK(plain.plan->find(KernelRole::forward)->phases[0].grid.to_string() ==
          "(2*ceil(Sq/128), ceil(H/2), B)");
  }
  const KernelDesc& order = *ir.plan->find(KernelRole::cta_order);
  const jit::detail::Shapes shape{3, 1000, 1000, 5, 5, 1};
  for (const int sms : {132, 20}) {
    LaunchExtents extents = jit::detail::launch_extents(shape);
    extents[Extent::sm_count] = sms;
    const jit::detail::LaunchSchedule schedule = jit::detail::schedule_plan(*ir.plan, extents);
    // Works: 2 * 8 query blocks x 3 head pairs x 3 batches = 144.
    bool found = false;
    for (const jit::detail::ScheduledLaunch& launch : schedule.launches) {
      if (&ir.plan->kernels[launch.kernel] != &forward) continue;
      found = true;
      CHECK(launch.grid ==
            std::array<unsigned, 3>{static_cast<unsigned>(std::min(144, sms)), 1, 1});
    }
    CHECK(found);
    // The CTA order sorts every work, whatever the launch's CTA count.
    for (const ScalarBinding& scalar : order.scalars) {
      if (scalar.field == ParamScalar::grid_x) CHECK(scalar.value.evaluate(extents) == 16);
      if (scalar.field == ParamScalar::grid_y) CHECK(scalar.value.evaluate(extents) == 3);
      if (scalar.field == ParamScalar::grid_z) CHECK(scalar.value.evaluate(extents) == 3);
    }
  }
}

TEST_CASE("the workspace holds every scratch buffer, aligned, and is zero without any",
          "[pass][runtime]") {
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) direction=backward "
                 "target=sm_90a"));
  const LaunchExtents extents = jit::detail::launch_extents({2, 1000, 1000, 8, 2, 2});
  const jit::detail::LaunchSchedule schedule = jit::detail::schedule_plan(*ir.plan, extents);
  std::size_t end = 0;
  for (std::size_t i = 0; i < ir.plan->scratch.size(); ++i) {
    INFO(ir.plan->scratch[i].name);
    CHECK(schedule.offsets[i] % jit::detail::LaunchSchedule::kAlignment == 0);
    CHECK(schedule.offsets[i] >= end);
    CHECK(static_cast<std::int64_t>(schedule.bytes[i]) ==
          ir.plan->scratch[i].bytes.evaluate(extents));
    end = schedule.offsets[i] + schedule.bytes[i];
  }
  CHECK(schedule.workspace_bytes >= end);
  // dQ accumulator: B * H * Sq * d fp32; under GQA the sm90a backward's dK and dV sums: 2 of
  // B * Hkv * Sk * d fp32, zeroed.
  CHECK(schedule.workspace_bytes >= 2u * 8 * 1000 * 128 * 4 + 2u * 2 * 2 * 1000 * 128 * 4);
  for (std::size_t i = 0; i < ir.plan->scratch.size(); ++i) {
    const ScratchBuffer& buffer = ir.plan->scratch[i];
    if (buffer.name != "dk_partial" && buffer.name != "dv_partial") continue;
    INFO(buffer.name);
    CHECK(buffer.zeroed);
    CHECK(schedule.bytes[i] == 2u * 2 * 1000 * 128 * 4);
  }
  for (const char* target : {"sm_80", "sm_90a"}) {
    const Lowering plain =
        lower(parse_spec(fmt::format("dtype=bf16 head_dim=128 mask=causal target={}", target)));
    CHECK(jit::detail::schedule_plan(*plain.plan, extents).workspace_bytes == 0);
  }
  // The persistent sm90a forward's work counter, zeroed before the launch.
  const Lowering persistent = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_90a"));
  const auto counter = std::ranges::find_if(
      persistent.plan->scratch, [](const ScratchBuffer& b) { return b.name == "work_counter"; });
  REQUIRE(counter != persistent.plan->scratch.end());
  CHECK(counter->zeroed);
  CHECK(counter->bytes.evaluate(extents) == 4);
}

TEST_CASE("the sm90a backward groups the query heads of a KV head where the launch can",
          "[pass][runtime]") {
  using jit::detail::backward_head_group;
  using jit::detail::Shapes;
  // All H / Hkv heads of a KV head where two rounds of the grouped CTAs of 128 keys fill the
  // SMs; else one.
  CHECK(backward_head_group(Shapes{1, 8192, 8192, 32, 8, 1}, 132) == 4);   // 512 CTAs
  CHECK(backward_head_group(Shapes{1, 8192, 8192, 32, 32, 1}, 132) == 1);  // no GQA
  CHECK(backward_head_group(Shapes{1, 8192, 8192, 32, 8, 8}, 132) == 4);   // vectors per KV head
  CHECK(backward_head_group(Shapes{1, 4096, 4096, 32, 8, 1}, 132) == 1);   // 256 < 264 CTAs
  CHECK(backward_head_group(Shapes{1, 4096, 4096, 32, 8, 1}, 128) == 4);   // 256 = 2 x 128
  CHECK(backward_head_group(Shapes{2, 300, 300, 6, 3, 1}, 1) == 2);
  CHECK(backward_head_group(Shapes{2, 300, 300, 6, 3, 1}, 0) == 1);  // no device: 132 SMs

  // Grouped, the plan launches a grid of KV heads, binds no partials and launches no
  // reduction; one head per CTA, partials (sums in the atomic mode) and the reduction. The
  // deterministic mode never groups.
  for (const char* mode : {"", " deterministic=true"}) {
    INFO(mode);
    const bool deterministic = *mode != '\0';
    const Lowering ir = lower(parse_spec(
        std::string("dtype=bf16 head_dim=128 mask=causal direction=backward target=sm_90a") +
        mode));
    const KernelDesc& main = *ir.plan->find(KernelRole::backward);
    REQUIRE(main.row == "backward.sm90a");
    for (const int sms : {132, 1000}) {
      LaunchExtents e = jit::detail::launch_extents(Shapes{1, 8192, 8192, 32, 8, 1});
      e[Extent::sm_count] = sms;
      e[Extent::head_group] = backward_head_group(Shapes{1, 8192, 8192, 32, 8, 1}, sms);
      const bool grouped = sms == 132 && !deterministic;
      const jit::detail::LaunchSchedule schedule = jit::detail::schedule_plan(*ir.plan, e);
      bool reduced = false;
      for (const jit::detail::ScheduledLaunch& launch : schedule.launches) {
        const KernelDesc& kernel = ir.plan->kernels[launch.kernel];
        if (kernel.role == KernelRole::backward_reduce_dkdv) reduced = true;
        if (kernel.role != KernelRole::backward) continue;
        CHECK(launch.grid == std::array<unsigned, 3>{128, grouped ? 4u : 16u, 1});
        if (deterministic) {
          CHECK(launch.scalars.empty());
        } else {
          REQUIRE(launch.scalars.size() == 1);
          CHECK(launch.scalars.front() == std::pair{ParamScalar::head_group, grouped ? 4 : 1});
        }
      }
      CHECK(reduced == !grouped);
      for (std::size_t b = 0; b < ir.plan->scratch.size(); ++b) {
        const std::string& name = ir.plan->scratch[b].name;
        if (name == "dk_partial" || name == "dv_partial") {
          CHECK((schedule.bytes[b] == 0) == grouped);
        }
      }
    }
  }
  // The sm80 rows never group: their grid counts every query head.
  const Lowering sm80 =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=causal direction=backward target=sm_80"));
  CHECK(sm80.plan->find(KernelRole::backward)->phases.front().grid.to_string() ==
        "(2*ceil(Sk/128), ceil(H/2), B)");
}
