// The CTA-order kernel (templates/attnjit/masks/cta_order.cuh) on the device: the sort gives a
// permutation, heaviest bucket first and in natural order within a bucket, for counts that
// are not multiples of its 1024 threads; the cost phase counts the tiles the forward and
// backward kernels will visit. The attention kernels that read the order are checked against
// the reference by the forward and backward sweeps (every FlashMask and predicate case).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "attnjit/common/params.cuh"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "embedded.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/module.hpp"
#include "runtime/jit/nvrtc.hpp"

using namespace attnjit;

namespace {

std::vector<runtime::NvrtcHeader> template_headers() {
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  return headers;
}

std::string device_arch() {
  const runtime::DeviceInfo device = runtime::current_device();
  return "sm_" + std::to_string(device.major * 10 + device.minor);
}

runtime::DeviceBuffer upload(const std::vector<int>& host) {
  runtime::DeviceBuffer buffer(std::max<std::size_t>(1, host.size()) * sizeof(int));
  if (!host.empty()) buffer.upload(host.data(), host.size() * sizeof(int));
  return buffer;
}

std::vector<int> download(const runtime::DeviceBuffer& buffer, std::size_t count) {
  std::vector<int> host(count);
  buffer.download(host.data(), count * sizeof(int));
  return host;
}

// cost_bucket of cta_order.cuh (the same fp32 operations).
int bucket_of(int cost, int max_cost) {
  if (cost < 0) return 0;
  const float scale = 1022.0f / static_cast<float>(std::max(1, max_cost));
  return 1 + std::min(static_cast<int>(static_cast<float>(cost) * scale), 1022);
}

constexpr const char* kSortSource = R"(#include "attnjit/masks/cta_order.cuh"
extern "C" __global__ void __launch_bounds__(1024)
sort_test(const attnjit::CtaOrderParams<attnjit::FwdParams> params) {
  attnjit::sort_ctas(params, 0, params.grid_x * params.grid_y * params.grid_z);
}
extern "C" __global__ void __launch_bounds__(1024)
group_test(const attnjit::CtaOrderParams<attnjit::FwdParams> params) {
  attnjit::sort_group(params);
}
)";

// Checks that order[first, first + count) is a stable sort of those natural indices by cost
// bucket, heaviest first; returns the number of misplaced entries (or of foreign ones).
int misplaced_in(const std::vector<int>& order, const std::vector<int>& cost, int first,
                 int count, int max_cost) {
  std::vector<int> seen(count, 0);
  int wrong = 0;
  for (int i = first; i < first + count; ++i) {
    if (order[i] < first || order[i] >= first + count) return count;
    ++seen[order[i] - first];
  }
  for (int n : seen) wrong += n != 1;
  for (int i = first + 1; i < first + count; ++i) {
    const int before = bucket_of(cost[order[i - 1]], max_cost);
    const int now = bucket_of(cost[order[i]], max_cost);
    if (now > before || (now == before && order[i] < order[i - 1])) ++wrong;
  }
  return wrong;
}

// Runs phase 1 (`function`: sort_test or group_test) on the costs of an attention grid of
// grid_x x grid_y x grid_z CTAs, launched on launch_x x launch_y blocks, and returns the order.
std::vector<int> sorted_order(CUfunction function, const std::vector<int>& cost, int grid_x,
                              int grid_y, int grid_z, int max_cost, int group_pairs,
                              unsigned launch_x, unsigned launch_y) {
  const runtime::DeviceBuffer d_cost = upload(cost);
  runtime::DeviceBuffer d_order(cost.size() * sizeof(int));
  d_order.fill_bytes(0xff);
  CtaOrderParams<FwdParams> p{};
  p.cost = static_cast<int*>(d_cost.data());
  p.order = static_cast<int*>(d_order.data());
  p.grid_x = grid_x;
  p.grid_y = grid_y;
  p.grid_z = grid_z;
  p.max_cost = max_cost;
  p.group_pairs = group_pairs;
  p.phase = 1;
  void* args[] = {&p};
  runtime::launch(function, runtime::LaunchConfig{{launch_x, launch_y, 1}, {1024, 1, 1}, 0},
                  nullptr, args);
  return download(d_order, cost.size());
}

}  // namespace

TEST_CASE("the CTA order is a stable sort by cost bucket, heaviest first", "[gpu][cta_order]") {
  const runtime::NvrtcOutput compiled = runtime::nvrtc_compile(
      kSortSource, "sort_test.cu", template_headers(), device_arch(), {}, "sort_test");
  const runtime::LoadedModule module = runtime::LoadedModule::load(compiled.cubin);
  const CUfunction function = module.function("sort_test", 0);
  std::mt19937 rng(7);
  for (int count : {1, 31, 1000, 1024, 2500, 5001}) {
    for (int max_cost : {3, 200, 5000}) {
      INFO("count " << count << ", max_cost " << max_cost);
      std::vector<int> cost(count);
      // Few distinct values (ties), empty CTAs (-1), and costs up to max_cost.
      std::uniform_int_distribution<int> pick(-1, max_cost);
      for (int& c : cost) c = pick(rng) % std::max(1, max_cost / 7 + 1) * 7 % (max_cost + 1);
      for (int i = 0; i < count; i += 13) cost[i] = -1;
      const std::vector<int> order = sorted_order(function, cost, count, 1, 1, max_cost, 1, 1, 1);
      CHECK(misplaced_in(order, cost, 0, count, max_cost) == 0);
    }
  }
}

TEST_CASE("the CTA order sorts each group of head pairs of one batch, the groups in place",
          "[gpu][cta_order]") {
  const runtime::NvrtcOutput compiled = runtime::nvrtc_compile(
      kSortSource, "sort_test.cu", template_headers(), device_arch(), {}, "group_test");
  const runtime::LoadedModule module = runtime::LoadedModule::load(compiled.cubin);
  const CUfunction function = module.function("group_test", 0);
  std::mt19937 rng(11);
  constexpr int kMaxCost = 300;
  for (int grid_x : {2, 18, 130}) {
    for (int grid_y : {1, 7}) {
      for (int group_pairs : {1, 2, 3, 7, 9}) {
        const int grid_z = 3;
        const int count = grid_x * grid_y * grid_z;
        INFO("grid " << grid_x << " x " << grid_y << " x " << grid_z << ", group_pairs "
                     << group_pairs);
        std::vector<int> cost(count);
        std::uniform_int_distribution<int> pick(-1, kMaxCost);
        for (int& c : cost) c = pick(rng) / 10 * 10;
        const std::vector<int> order =
            sorted_order(function, cost, grid_x, grid_y, grid_z, kMaxCost, group_pairs,
                         static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
        // The groups' slices cover the order: each is a sort of its own natural indices.
        int wrong = 0;
        for (int z = 0; z < grid_z; ++z) {
          for (int pair = 0; pair < grid_y; pair += group_pairs) {
            const int pairs = std::min(group_pairs, grid_y - pair);
            wrong += misplaced_in(order, cost, grid_x * (pair + grid_y * z), grid_x * pairs,
                                  kMaxCost);
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
}

namespace {

// The FlashMask tile rule of a causal mask whose columns hide nothing (LTS = Sq): a block is
// partial where it crosses the diagonal or Sk, full below it.
int tile_cost(int row_begin, int col_begin, int block_n, int seqlen_k) {
  const int col_last = std::min(col_begin + block_n, seqlen_k) - 1;
  const bool partial = col_begin + block_n > seqlen_k || col_last > row_begin;
  return partial ? 5 : 4;
}

}  // namespace

TEST_CASE("the CTA order's costs count the tiles each CTA visits", "[gpu][cta_order]") {
  constexpr int kBatch = 2, kHeads = 3, kSeq = 1000;
  for (const char* direction : {"forward", "backward"}) {
    INFO(direction);
    const Lowering ir =
        lower(parse_spec("dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=1) target=" +
                         device_arch() + " direction=" + direction));
    const KernelDesc& minmax_desc = *ir.plan->find(KernelRole::flashmask_minmax);
    const KernelDesc& order_desc = *ir.plan->find(KernelRole::cta_order);
    const bool keys = order_desc.orders == KernelRole::backward;
    const int bm = order_desc.block_m, bn = order_desc.block_n;
    const std::vector<runtime::NvrtcHeader> headers = template_headers();
    const runtime::NvrtcOutput minmax_bin = runtime::nvrtc_compile(
        emit_kernel(ir, minmax_desc), "minmax.cu", headers, device_arch(), {}, minmax_desc.name);
    const runtime::NvrtcOutput order_bin = runtime::nvrtc_compile(
        emit_kernel(ir, order_desc), "order.cu", headers, device_arch(), {}, order_desc.name);
    const runtime::LoadedModule minmax_module = runtime::LoadedModule::load(minmax_bin.cubin);
    const runtime::LoadedModule order_module = runtime::LoadedModule::load(order_bin.cubin);

    // LTS = Sq: the FlashMask columns hide nothing, the index rule is plain causal.
    const runtime::DeviceBuffer intervals = upload(std::vector<int>(kBatch * kSeq, kSeq));
    const int key_blocks = (kSeq + bn - 1) / bn;
    runtime::DeviceBuffer table(kBatch * key_blocks * 2 * sizeof(int));
    MinMaxParams mm{};
    mm.intervals = static_cast<const int*>(intervals.data());
    mm.minmax = static_cast<int*>(table.data());
    mm.batch = kBatch;
    mm.mask_heads = 1;
    mm.seqlen_k = kSeq;
    mm.num_key_blocks = key_blocks;
    void* mm_args[] = {&mm};
    runtime::launch(minmax_module.function(minmax_desc.name, 0),
                    runtime::LaunchConfig{
                        {static_cast<unsigned>(kBatch * key_blocks + 3) / 4, 1, 1}, {128, 1, 1}, 0},
                    nullptr, mm_args);

    const int blocks = keys ? key_blocks : (kSeq + bm - 1) / bm;
    const int grid_x = 2 * blocks, grid_y = (kHeads + 1) / 2, count = grid_x * grid_y * kBatch;
    runtime::DeviceBuffer scratch(2 * count * sizeof(int));
    const CUfunction order_function = order_module.function(order_desc.name, 0);
    auto run_phase0 = [&](auto attention) {
      attention.batch = kBatch;
      attention.heads = attention.kv_heads = kHeads;
      attention.mask_heads = 1;
      attention.seqlen_q = attention.seqlen_k = kSeq;
      attention.window_left = attention.window_right = -1;
      attention.intervals = static_cast<const int*>(intervals.data());
      CtaOrderParams<decltype(attention)> p{};
      p.attention = attention;
      p.table = static_cast<const int*>(table.data());
      p.cost = static_cast<int*>(scratch.data());
      p.order = p.cost + count;
      p.grid_x = grid_x;
      p.grid_y = grid_y;
      p.grid_z = kBatch;
      p.max_cost = 5 * (keys ? (kSeq + bm - 1) / bm : key_blocks) + 2;
      p.phase = 0;
      void* args[] = {&p};
      runtime::launch(
          order_function,
          runtime::LaunchConfig{{static_cast<unsigned>(count + 3) / 4, 1, 1}, {128, 1, 1}, 0},
          nullptr, args);
    };
    if (keys) {
      run_phase0(BwdParams{});
    } else {
      run_phase0(FwdParams{});
    }
    const std::vector<int> cost = download(scratch, count);

    int wrong = 0;
    std::string first;
    for (int natural = 0; natural < count; ++natural) {
      const int x = natural % grid_x, y = natural / grid_x % grid_y;
      const int head = 2 * y + x % 2;
      const int block = keys ? x / 2 : blocks - 1 - x / 2;
      int expected = -1;
      if (head < kHeads) {
        expected = 2;
        for (int m = 0; m * bm < kSeq; ++m) {
          for (int n = 0; n < key_blocks; ++n) {
            if ((keys ? n : m) != block) continue;
            if (n * bn > std::min(m * bm + bm, kSeq) - 1) continue;  // above the diagonal
            expected += tile_cost(m * bm, n * bn, bn, kSeq);
          }
        }
      }
      if (cost[natural] != expected && ++wrong == 1) {
        first = "CTA " + std::to_string(natural) + ": cost " + std::to_string(cost[natural]) +
                ", expected " + std::to_string(expected);
      }
    }
    INFO(first);
    CHECK(wrong == 0);
  }
}
