// The C ABI's device-aware compile, prepared launches and cache counters
// (include/attnjit/attnjit.h): what a binding that repeats calls on same-shaped tensors, such
// as the Python package, uses to keep its per-call work to the data pointers and the stream.
#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "jit/c_api/c_api_kernel.hpp"
#include "jit/c_api/c_api_support.hpp"
#include "runtime/jit/driver.hpp"

/// A bound launch: the kernel, every argument but the data pointers, and the device.
struct attnjit_launch {
  attnjit::jit::Kernel kernel;
  bool backward = false;
  attnjit::ForwardArgs forward;
  attnjit::BackwardArgs backward_args;
  std::array<bool, ATTNJIT_SLOT_COUNT> present{};
  int slot_count = ATTNJIT_SLOT_COUNT;  ///< as prepared: ATTNJIT_SLOT_COUNT or an older count
  int predicate_tensors = 0;
  int device = -1;
  std::size_t workspace_bytes = 0;  ///< what a run takes at the prepared shapes
};

namespace {

using attnjit::c_api::guarded;
using attnjit::c_api::require;
using attnjit::c_api::to_view;

constexpr std::array<std::string_view, ATTNJIT_SLOT_COUNT> kSlotNames = {"q",
                                                                         "k",
                                                                         "v",
                                                                         "o",
                                                                         "lse",
                                                                         "startend_row_indices",
                                                                         "alibi_slopes",
                                                                         "d_o",
                                                                         "d_q",
                                                                         "d_k",
                                                                         "d_v",
                                                                         "cu_seqlens_q",
                                                                         "cu_seqlens_k",
                                                                         "seqused_k",
                                                                         "sinks",
                                                                         "d_sinks",
                                                                         "cache_seqlens",
                                                                         "block_table",
                                                                         "k_new",
                                                                         "v_new",
                                                                         "q_descale",
                                                                         "k_descale",
                                                                         "v_descale"};
constexpr std::array kVarlenSlots = {ATTNJIT_SLOT_CU_SEQLENS_Q, ATTNJIT_SLOT_CU_SEQLENS_K,
                                     ATTNJIT_SLOT_SEQUSED_K};
constexpr std::array kCacheSlots = {ATTNJIT_SLOT_CACHE_SEQLENS, ATTNJIT_SLOT_BLOCK_TABLE,
                                    ATTNJIT_SLOT_K_NEW, ATTNJIT_SLOT_V_NEW};
constexpr std::array kGradientSlots = {ATTNJIT_SLOT_D_O, ATTNJIT_SLOT_D_Q, ATTNJIT_SLOT_D_K,
                                       ATTNJIT_SLOT_D_V, ATTNJIT_SLOT_D_SINKS};
constexpr std::array kDescaleSlots = {ATTNJIT_SLOT_Q_DESCALE, ATTNJIT_SLOT_K_DESCALE,
                                      ATTNJIT_SLOT_V_DESCALE};

/// Whether `count` is ATTNJIT_SLOT_COUNT or ATTNJIT_SLOT_COUNT_KVCACHE (the count before the
/// descales' slots, which callers built against an older header pass as their full count).
bool full_count(int count) {
  return count == ATTNJIT_SLOT_COUNT || count == ATTNJIT_SLOT_COUNT_KVCACHE;
}

/// The TensorView of a slot: empty for rank 0 (absent) and for a slot past `count` (a launch
/// prepared with one of the older counts), and an Error naming the slot when a required one is
/// absent.
attnjit::TensorView slot_view(const attnjit_tensor* tensors, int count, int slot, bool required) {
  const attnjit_tensor absent{};
  const attnjit_tensor& tensor = slot < count ? tensors[slot] : absent;
  if (tensor.rank == 0) {
    if (required) {
      attnjit::throw_field_error(fmt::format("tensors[{}] ({})", slot, kSlotNames[slot]),
                                 "rank 0 (absent)", "a tensor descriptor of rank 1 to 4");
    }
    return attnjit::TensorView{};
  }
  attnjit::TensorView view = to_view(kSlotNames[slot], tensor);
  view.data = nullptr;  // each run supplies it
  return view;
}

void check_device(int device) {
  if (device < -1) {
    attnjit::throw_field_error("device", std::to_string(device),
                               "a device ordinal >= 0, or -1 for the current context");
  }
}

/// Copies a run's pointer of `slot` into `view` when the slot is present; an absent slot takes
/// none, and a slot past the count the launch was prepared with has no pointer in `data_slots`.
void bind(attnjit::TensorView& view, const attnjit_launch& launch, void* const* data_slots,
          int slot) {
  if (slot >= launch.slot_count) return;
  const bool present = launch.present[static_cast<std::size_t>(slot)];
  void* const data = data_slots[slot];
  if (present) {
    std::int64_t elements = 1;
    for (int d = 0; d < view.rank; ++d) elements *= view.shape[d];
    if (data == nullptr && elements != 0) {
      attnjit::throw_field_error(fmt::format("data[{}] ({})", slot, kSlotNames[slot]), "NULL",
                                 "the device pointer of the tensor the launch was prepared with");
    }
    view.data = data;
  } else if (data != nullptr) {
    attnjit::throw_field_error(fmt::format("data[{}] ({})", slot, kSlotNames[slot]), "a pointer",
                               "NULL: the launch was prepared without this tensor");
  }
}

/// The tensors and scalars that forward and backward launches share (the LSE is the
/// backward's input, the forward's optional output).
/// The scalar arguments of a prepared launch; max_seqlen_q < 0 for a padded batch.
struct Scalars {
  float softmax_scale = 0.0f;
  int window_left = -1;
  int window_right = 0;
  float softcap = 0.0f;
  int max_seqlen_q = -1;
  int max_seqlen_k = -1;
  int num_splits = 0;  ///< a kv_cache launch's key splits
};

/// Which prepare call a launch comes from: the kind of batch its kernel's spec takes.
enum class Batch { padded, packed, cache };

/// The tensors and scalars that forward and backward launches share (the LSE is the
/// backward's input, the forward's optional output); the varlen slots and lengths only for a
/// packed batch (`varlen`).
template <class Args>
void bind_shared(Args& args, const attnjit_tensor* tensors, int count, bool lse_required,
                 bool varlen, const Scalars& scalars, attnjit::PredicateArgs predicate) {
  args.q = slot_view(tensors, count, ATTNJIT_SLOT_Q, true);
  args.k = slot_view(tensors, count, ATTNJIT_SLOT_K, true);
  args.v = slot_view(tensors, count, ATTNJIT_SLOT_V, true);
  args.o = slot_view(tensors, count, ATTNJIT_SLOT_O, true);
  args.lse = slot_view(tensors, count, ATTNJIT_SLOT_LSE, lse_required);
  args.startend_row_indices = slot_view(tensors, count, ATTNJIT_SLOT_STARTEND_ROW_INDICES, false);
  args.alibi_slopes = slot_view(tensors, count, ATTNJIT_SLOT_ALIBI_SLOPES, false);
  args.sinks = slot_view(tensors, count, ATTNJIT_SLOT_SINKS, false);
  args.softmax_scale = scalars.softmax_scale;
  args.window_left = scalars.window_left;
  args.window_right = scalars.window_right;
  args.softcap = scalars.softcap;
  args.predicate = std::move(predicate);
  if constexpr (std::is_same_v<Args, attnjit::ForwardArgs>) {
    args.kv_cache.cache_seqlens = slot_view(tensors, count, ATTNJIT_SLOT_CACHE_SEQLENS, false);
    args.kv_cache.block_table = slot_view(tensors, count, ATTNJIT_SLOT_BLOCK_TABLE, false);
    args.kv_cache.k_new = slot_view(tensors, count, ATTNJIT_SLOT_K_NEW, false);
    args.kv_cache.v_new = slot_view(tensors, count, ATTNJIT_SLOT_V_NEW, false);
    args.kv_cache.num_splits = scalars.num_splits;
    args.q_descale = slot_view(tensors, count, ATTNJIT_SLOT_Q_DESCALE, false);
    args.k_descale = slot_view(tensors, count, ATTNJIT_SLOT_K_DESCALE, false);
    args.v_descale = slot_view(tensors, count, ATTNJIT_SLOT_V_DESCALE, false);
    if (!varlen) {
      // A kv_cache launch's ragged new tokens.
      args.kv_cache.cu_seqlens_q = slot_view(tensors, count, ATTNJIT_SLOT_CU_SEQLENS_Q, false);
      args.kv_cache.max_seqlen_q = std::max(scalars.max_seqlen_q, 0);
    }
  }
  if (varlen) {
    args.varlen.cu_seqlens_q = slot_view(tensors, count, ATTNJIT_SLOT_CU_SEQLENS_Q, true);
    args.varlen.cu_seqlens_k = slot_view(tensors, count, ATTNJIT_SLOT_CU_SEQLENS_K, true);
    args.varlen.seqused_k = slot_view(tensors, count, ATTNJIT_SLOT_SEQUSED_K, false);
    args.varlen.max_seqlen_q = scalars.max_seqlen_q;
    args.varlen.max_seqlen_k = scalars.max_seqlen_k;
  }
}

/// A run's pointers of the slots that forward and backward launches share, of the predicate's
/// tensors (after the slots) and its workspace.
template <class Args>
void bind_run(Args& args, const attnjit_launch& launch, void* const* data, void* workspace,
              std::size_t workspace_bytes) {
  // cu_seqlens_q: a packed batch's boundaries, or a kv_cache launch's ragged new tokens.
  attnjit::TensorView* cu_seqlens_q = &args.varlen.cu_seqlens_q;
  if constexpr (std::is_same_v<Args, attnjit::ForwardArgs>) {
    if (!args.kv_cache.cu_seqlens_q.empty()) cu_seqlens_q = &args.kv_cache.cu_seqlens_q;
  }
  bind(*cu_seqlens_q, launch, data, ATTNJIT_SLOT_CU_SEQLENS_Q);
  for (const auto& [view, slot] : {std::pair{&args.q, ATTNJIT_SLOT_Q},
                                   {&args.k, ATTNJIT_SLOT_K},
                                   {&args.v, ATTNJIT_SLOT_V},
                                   {&args.o, ATTNJIT_SLOT_O},
                                   {&args.lse, ATTNJIT_SLOT_LSE},
                                   {&args.startend_row_indices, ATTNJIT_SLOT_STARTEND_ROW_INDICES},
                                   {&args.alibi_slopes, ATTNJIT_SLOT_ALIBI_SLOPES},
                                   {&args.varlen.cu_seqlens_k, ATTNJIT_SLOT_CU_SEQLENS_K},
                                   {&args.varlen.seqused_k, ATTNJIT_SLOT_SEQUSED_K},
                                   {&args.sinks, ATTNJIT_SLOT_SINKS}}) {
    bind(*view, launch, data, slot);
  }
  if constexpr (std::is_same_v<Args, attnjit::ForwardArgs>) {
    for (const auto& [view, slot] :
         {std::pair{&args.kv_cache.cache_seqlens, ATTNJIT_SLOT_CACHE_SEQLENS},
          {&args.kv_cache.block_table, ATTNJIT_SLOT_BLOCK_TABLE},
          {&args.kv_cache.k_new, ATTNJIT_SLOT_K_NEW},
          {&args.kv_cache.v_new, ATTNJIT_SLOT_V_NEW},
          {&args.q_descale, ATTNJIT_SLOT_Q_DESCALE},
          {&args.k_descale, ATTNJIT_SLOT_K_DESCALE},
          {&args.v_descale, ATTNJIT_SLOT_V_DESCALE}}) {
      bind(*view, launch, data, slot);
    }
  }
  for (int i = 0; i < launch.predicate_tensors; ++i) {
    args.predicate.tensors[static_cast<std::size_t>(i)].tensor.data = data[launch.slot_count + i];
  }
  args.workspace = {workspace, workspace_bytes};
}

/// attnjit_launch_prepare, attnjit_launch_prepare_varlen and attnjit_launch_prepare_kvcache
/// (`batch`): the checks of the counts and of which slots a kernel takes, then the bound
/// arguments and the workspace size.
void prepare(const attnjit_kernel* kernel, const attnjit_tensor* tensors, int tensor_count,
             const attnjit_predicate_inputs* predicate, const Scalars& scalars, int device,
             Batch batch, attnjit_launch** out) {
  const bool varlen = batch == Batch::packed;
  require(out != nullptr, "out", "a pointer to an attnjit_launch* to fill");
  require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
  require(tensors != nullptr, "tensors", "ATTNJIT_SLOT_COUNT tensor descriptors");
  if (varlen && !full_count(tensor_count) && tensor_count != ATTNJIT_SLOT_COUNT_VARLEN) {
    attnjit::throw_field_error(
        "tensor_count", std::to_string(tensor_count),
        fmt::format("{} (ATTNJIT_SLOT_COUNT), {} (ATTNJIT_SLOT_COUNT_KVCACHE) or {} "
                    "(ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' ones); a packed "
                    "batch's launch takes the cu_seqlens slots",
                    int{ATTNJIT_SLOT_COUNT}, int{ATTNJIT_SLOT_COUNT_KVCACHE},
                    int{ATTNJIT_SLOT_COUNT_VARLEN}));
  }
  if (batch == Batch::cache && !full_count(tensor_count)) {
    attnjit::throw_field_error(
        "tensor_count", std::to_string(tensor_count),
        fmt::format("{} (ATTNJIT_SLOT_COUNT) or {} (ATTNJIT_SLOT_COUNT_KVCACHE: the slots before "
                    "the descales' ones); a kv_cache launch takes the cache's slots",
                    int{ATTNJIT_SLOT_COUNT}, int{ATTNJIT_SLOT_COUNT_KVCACHE}));
  }
  if (!full_count(tensor_count) && tensor_count != ATTNJIT_SLOT_COUNT_SINKS &&
      tensor_count != ATTNJIT_SLOT_COUNT_VARLEN && tensor_count != ATTNJIT_SLOT_COUNT_PADDED) {
    attnjit::throw_field_error(
        "tensor_count", std::to_string(tensor_count),
        fmt::format("{} (ATTNJIT_SLOT_COUNT), {} (ATTNJIT_SLOT_COUNT_KVCACHE: the slots before "
                    "the descales' ones), {} (ATTNJIT_SLOT_COUNT_SINKS: the slots before the "
                    "cache's ones), {} (ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' "
                    "ones) or {} (ATTNJIT_SLOT_COUNT_PADDED: the slots before the packed "
                    "batches' ones)",
                    int{ATTNJIT_SLOT_COUNT}, int{ATTNJIT_SLOT_COUNT_KVCACHE},
                    int{ATTNJIT_SLOT_COUNT_SINKS}, int{ATTNJIT_SLOT_COUNT_VARLEN},
                    int{ATTNJIT_SLOT_COUNT_PADDED}));
  }
  check_device(device);
  const attnjit::AttentionSpec& spec = kernel->kernel.spec();
  if ((spec.varlen != attnjit::VarlenMode::off) != varlen) {
    attnjit::throw_field_error(
        "kernel", fmt::format("a spec with varlen={}", attnjit::name_of(spec.varlen)),
        varlen ? "a spec with varlen=true or shared (a padded batch's launch is prepared with "
                 "attnjit_launch_prepare)"
               : "a spec with varlen=false (a packed batch's launch is prepared with "
                 "attnjit_launch_prepare_varlen, which takes max_seqlen_q and max_seqlen_k)");
  }
  if ((spec.kv_cache != attnjit::KvCache::none) != (batch == Batch::cache)) {
    attnjit::throw_field_error(
        "kernel", fmt::format("a spec with kv_cache={}", attnjit::name_of(spec.kv_cache)),
        batch == Batch::cache
            ? "a spec with kv_cache=contiguous or paged (other launches are prepared with "
              "attnjit_launch_prepare or attnjit_launch_prepare_varlen)"
            : "a spec with kv_cache=none (a KV cache's launch is prepared with "
              "attnjit_launch_prepare_kvcache)");
  }
  auto launch = std::make_unique<attnjit_launch>();
  launch->kernel = kernel->kernel;
  launch->backward = spec.direction == attnjit::Direction::backward;
  launch->device = device;
  launch->slot_count = tensor_count;
  for (int slot = 0; slot < tensor_count; ++slot) {
    launch->present[slot] = tensors[slot].rank != 0;
  }
  if (batch != Batch::cache) {
    for (int slot : kCacheSlots) {
      if (launch->present[slot]) {
        attnjit::throw_field_error(
            fmt::format("tensors[{}] ({})", slot, kSlotNames[slot]), "a tensor",
            "rank 0 (absent): the KV cache's slots belong to attnjit_launch_prepare_kvcache");
      }
    }
  }
  if (batch == Batch::cache) {
    // Ragged new tokens: the boundaries and their largest count together.
    const bool ragged = launch->present[ATTNJIT_SLOT_CU_SEQLENS_Q];
    if (ragged ? scalars.max_seqlen_q < 1 : scalars.max_seqlen_q != 0) {
      attnjit::throw_field_error(
          "kv_cache.max_seqlen_q", std::to_string(scalars.max_seqlen_q),
          ragged ? "1 or more (the most new tokens of a sequence) with a cu_seqlens_q tensor"
                 : "0 without a cu_seqlens_q tensor");
    }
  }
  if (!varlen) {
    for (int slot : kVarlenSlots) {
      if (batch == Batch::cache && slot == ATTNJIT_SLOT_CU_SEQLENS_Q) continue;
      if (launch->present[slot]) {
        attnjit::throw_field_error(
            fmt::format("tensors[{}] ({})", slot, kSlotNames[slot]), "a tensor",
            "rank 0 (absent) with attnjit_launch_prepare (a packed batch's launch is prepared "
            "with attnjit_launch_prepare_varlen)");
      }
    }
  }
  attnjit::PredicateArgs predicate_args;
  if (predicate != nullptr) {
    predicate_args = attnjit::c_api::predicate_args(predicate);
    for (attnjit::PredicateTensorArg& tensor : predicate_args.tensors) tensor.tensor.data = nullptr;
    launch->predicate_tensors = static_cast<int>(predicate_args.tensors.size());
  }
  if (launch->backward) {
    for (int slot : kDescaleSlots) {
      if (launch->present[slot]) {
        attnjit::throw_field_error(fmt::format("tensors[{}] ({})", slot, kSlotNames[slot]),
                                   "a tensor",
                                   "rank 0 (absent) for a backward kernel (e4m3 is forward only)");
      }
    }
    attnjit::BackwardArgs& args = launch->backward_args;
    bind_shared(args, tensors, tensor_count, /*lse_required=*/true, varlen, scalars,
                std::move(predicate_args));
    args.d_o = slot_view(tensors, tensor_count, ATTNJIT_SLOT_D_O, true);
    args.d_q = slot_view(tensors, tensor_count, ATTNJIT_SLOT_D_Q, true);
    args.d_k = slot_view(tensors, tensor_count, ATTNJIT_SLOT_D_K, true);
    args.d_v = slot_view(tensors, tensor_count, ATTNJIT_SLOT_D_V, true);
    args.d_sinks = slot_view(tensors, tensor_count, ATTNJIT_SLOT_D_SINKS, false);
  } else {
    for (int slot : kGradientSlots) {
      if (launch->present[slot]) {
        attnjit::throw_field_error(fmt::format("tensors[{}] ({})", slot, kSlotNames[slot]),
                                   "a tensor", "rank 0 (absent) for a forward kernel");
      }
    }
    bind_shared(launch->forward, tensors, tensor_count, /*lse_required=*/false, varlen, scalars,
                std::move(predicate_args));
  }
  // A KV cache's key splits follow the SM count: its workspace is sized on the run's device.
  const attnjit::runtime::DeviceScope scope(batch == Batch::cache ? device : -1);
  launch->workspace_bytes = launch->backward ? launch->kernel.workspace_size(launch->backward_args)
                                             : launch->kernel.workspace_size(launch->forward);
  *out = launch.release();
}

}  // namespace

extern "C" {

int attnjit_compile_for_device(const char* spec_text, int device, attnjit_kernel** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "out", "a pointer to an attnjit_kernel* to fill");
    require(spec_text != nullptr, "spec_text", "a spec such as 'dtype=bf16 head_dim=128'");
    check_device(device);
    const attnjit::AttentionSpec spec = attnjit::parse_spec(spec_text);
    // An explicit target needs no device: do not ask the driver for one.
    const bool needs_device = spec.target == attnjit::Arch::auto_detect;
    const attnjit::runtime::DeviceScope scope(needs_device ? device : -1);
    *out = new attnjit_kernel{attnjit::jit::compile(spec)};
  });
}

int attnjit_launch_prepare(const attnjit_kernel* kernel, const attnjit_tensor* tensors,
                           int tensor_count, const attnjit_predicate_inputs* predicate,
                           float softmax_scale, int window_left, int window_right, float softcap,
                           int device, attnjit_launch** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    const Scalars scalars{softmax_scale, window_left, window_right, softcap};
    prepare(kernel, tensors, tensor_count, predicate, scalars, device, Batch::padded, out);
  });
}

int attnjit_launch_prepare_kvcache(const attnjit_kernel* kernel, const attnjit_tensor* tensors,
                                   int tensor_count, const attnjit_predicate_inputs* predicate,
                                   float softmax_scale, int window_left, int window_right,
                                   float softcap, int num_splits, int max_seqlen_q, int device,
                                   attnjit_launch** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    Scalars scalars{softmax_scale, window_left, window_right, softcap, max_seqlen_q};
    scalars.num_splits = num_splits;
    prepare(kernel, tensors, tensor_count, predicate, scalars, device, Batch::cache, out);
  });
}

int attnjit_launch_prepare_varlen(const attnjit_kernel* kernel, const attnjit_tensor* tensors,
                                  int tensor_count, const attnjit_predicate_inputs* predicate,
                                  float softmax_scale, int window_left, int window_right,
                                  float softcap, int max_seqlen_q, int max_seqlen_k, int device,
                                  attnjit_launch** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    const Scalars scalars{softmax_scale, window_left,  window_right,
                          softcap,       max_seqlen_q, max_seqlen_k};
    prepare(kernel, tensors, tensor_count, predicate, scalars, device, Batch::packed, out);
  });
}

int attnjit_launch_workspace_size(const attnjit_launch* launch, size_t* bytes) {
  return guarded([&] {
    require(launch != nullptr, "launch", "a handle from attnjit_launch_prepare");
    require(bytes != nullptr, "bytes", "a pointer to a size_t to fill");
    *bytes = launch->workspace_bytes;
  });
}

int attnjit_launch_run(const attnjit_launch* launch, void* const* data, int data_count,
                       void* stream) {
  return attnjit_launch_run_workspace(launch, data, data_count, nullptr, 0, stream);
}

int attnjit_launch_run_workspace(const attnjit_launch* launch, void* const* data, int data_count,
                                 void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(launch != nullptr, "launch", "a handle from attnjit_launch_prepare");
    require(data != nullptr, "data", "one device pointer per slot and predicate tensor");
    const int expected = launch->slot_count + launch->predicate_tensors;
    if (data_count != expected) {
      attnjit::throw_field_error("data_count", std::to_string(data_count),
                                 fmt::format("{} ({} slots and {} predicate tensors)", expected,
                                             launch->slot_count, launch->predicate_tensors));
    }
    if (launch->backward) {
      attnjit::BackwardArgs args = launch->backward_args;
      bind_run(args, *launch, data, workspace, workspace_bytes);
      bind(args.d_o, *launch, data, ATTNJIT_SLOT_D_O);
      bind(args.d_q, *launch, data, ATTNJIT_SLOT_D_Q);
      bind(args.d_k, *launch, data, ATTNJIT_SLOT_D_K);
      bind(args.d_v, *launch, data, ATTNJIT_SLOT_D_V);
      bind(args.d_sinks, *launch, data, ATTNJIT_SLOT_D_SINKS);
      // The device after the arguments: a bad pointer is the caller's error on any machine.
      const attnjit::runtime::DeviceScope scope(launch->device);
      launch->kernel.backward(args, stream);
    } else {
      attnjit::ForwardArgs args = launch->forward;
      bind_run(args, *launch, data, workspace, workspace_bytes);
      // The backward's slots are absent (prepare refused them): their pointers must be NULL.
      for (int slot : kGradientSlots) {
        attnjit::TensorView unused;
        bind(unused, *launch, data, slot);
      }
      const attnjit::runtime::DeviceScope scope(launch->device);
      launch->kernel.forward(args, stream);
    }
  });
}

void attnjit_launch_release(attnjit_launch* launch) {
  delete launch;
}

int attnjit_cache_stats(attnjit_cache_counters* out) {
  return guarded([&] {
    require(out != nullptr, "out", "an attnjit_cache_counters to fill");
    const attnjit::jit::CacheStats stats = attnjit::jit::cache_stats();
    out->memory_hits = stats.memory_hits;
    out->disk_hits = stats.disk_hits;
    out->compiles = stats.compiles;
    out->memory_entries = stats.memory_entries;
  });
}

}  // extern "C"
