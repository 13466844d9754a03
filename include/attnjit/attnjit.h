/* The stable C ABI of attnjit: compile a spec, run its forward or backward pass on device
 * tensors, read what the compiler did, manage the kernel cache, build and check FlashMask
 * vectors on the device. C99; usable from C, C++ and through FFI layers (ctypes, cffi). No
 * C++ exception crosses it: every failing call returns a nonzero code and leaves a message in
 * attnjit_last_error(). */
#ifndef ATTNJIT_ATTNJIT_H
#define ATTNJIT_ATTNJIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ATTNJIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define ATTNJIT_API __attribute__((visibility("default")))
#else
#define ATTNJIT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Return codes of every int-returning function (except attnjit_kernel_info's sizes). */
enum {
  ATTNJIT_OK = 0,            /**< success */
  ATTNJIT_USER_ERROR = 1,    /**< bad spec, tensor or argument (the message names the field) */
  ATTNJIT_DEVICE_ERROR = 2,  /**< no driver or device, a Driver API call or NVRTC failed, or
                                  the disk cache's files cannot be listed or removed */
  ATTNJIT_INTERNAL_ERROR = 3 /**< a bug in attnjit, or out of memory */
};

/** Element types of attnjit_tensor::dtype (the order of attnjit::ScalarType). ATTNJIT_E4M3:
 * FP8 E4M3 bytes (q, k and v of a spec with dtype=e4m3). */
enum { ATTNJIT_FP16 = 0, ATTNJIT_BF16 = 1, ATTNJIT_FP32 = 2, ATTNJIT_INT32 = 3, ATTNJIT_E4M3 = 4 };

/** A non-owning view of a device tensor; shape and strides are in elements, rank <= 4. */
typedef struct attnjit_tensor {
  void* data;
  int dtype; /**< one of ATTNJIT_FP16, ATTNJIT_BF16, ATTNJIT_FP32, ATTNJIT_INT32, ATTNJIT_E4M3 */
  int rank;
  int64_t shape[4];
  int64_t stride[4];
} attnjit_tensor;

/** A compiled attention: immutable, safe to share between threads. */
typedef struct attnjit_kernel attnjit_kernel;

/** Compiles (or finds in the memory or disk cache) the kernels of `spec_text`, e.g.
 * "dtype=bf16 head_dim=128 mask=causal". Without `target=` in the spec the current device's
 * architecture is used. On success stores a new handle in `*out` (release it with
 * attnjit_release) and returns 0; otherwise `*out` is set to NULL. */
ATTNJIT_API int attnjit_compile(const char* spec_text, attnjit_kernel** out);

/** Like attnjit_compile, but returns the slow fp32 reference attention of the same spec (for
 * checking results; its forward always needs `lse`). */
ATTNJIT_API int attnjit_compile_reference(const char* spec_text, attnjit_kernel** out);

/** Releases a handle from attnjit_compile or attnjit_compile_reference. NULL is ignored. */
ATTNJIT_API void attnjit_release(attnjit_kernel* kernel);

/** Enqueues the forward pass on `stream` (a CUstream; NULL is the legacy default stream) and
 * returns without waiting. Tensors: q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv],
 * o [B, Sq, H, Dv]; lse fp32 [B, H, Sq] (NULL when the spec has no return_lse);
 * startend_row_indices int32 [B, Hm, Sk, C] (NULL unless the mask is flashmask).
 * softmax_scale 0 means 1/sqrt(D); window_left/window_right are the sliding-window sizes
 * (-1 unbounded). Uses the CUDA context current on the calling thread. */
ATTNJIT_API int attnjit_forward(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                const attnjit_tensor* k, const attnjit_tensor* v,
                                const attnjit_tensor* o, const attnjit_tensor* lse,
                                const attnjit_tensor* startend_row_indices, float softmax_scale,
                                int window_left, int window_right, void* stream);

/** Enqueues the backward pass of a kernel compiled from a spec with direction=backward on
 * `stream` and returns without waiting: writes d_q [B, Sq, H, D], d_k [B, Sk, Hkv, D] and
 * d_v [B, Sk, Hkv, Dv], each of q's dtype and shaped like q, k and v (with GQA a KV head's
 * gradient sums over its query heads). Inputs as in attnjit_forward, plus the forward pass's
 * output o and its gradient d_o [B, Sq, H, Dv], and lse fp32 [B, H, Sq] as a forward with
 * return_lse=true wrote it (required). startend_row_indices, softmax_scale and the window sizes
 * must be those of the forward pass. Takes stream-ordered scratch memory on `stream`. Uses the
 * CUDA context current on the calling thread. */
ATTNJIT_API int attnjit_backward(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                 const attnjit_tensor* k, const attnjit_tensor* v,
                                 const attnjit_tensor* o, const attnjit_tensor* d_o,
                                 const attnjit_tensor* lse,
                                 const attnjit_tensor* startend_row_indices,
                                 const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                                 const attnjit_tensor* d_v, float softmax_scale, int window_left,
                                 int window_right, void* stream);

/** The parameters of attnjit_mask_build, field for field those of attnjit::MaskBuildArgs
 * (attnjit_mask_families lists the families and the fields each reads). A tensor with data
 * NULL and rank 0 is absent; an int of -1 is not given. */
typedef struct attnjit_mask_build_args {
  const char* family; /**< e.g. "causal_document"; see attnjit_mask_family */
  attnjit_tensor offsets;
  attnjit_tensor prefix;
  attnjit_tensor prefixes;
  attnjit_tensor test;
  attnjit_tensor dropped_start;
  attnjit_tensor dropped_length;
  int window;
  int global_tokens;
  int window_left;
  int window_right;
  uint64_t seed;
  int validate; /**< nonzero: check the device parameters too and wait for the stream */
} attnjit_mask_build_args;

/** The mask structure of a FlashMask family's vectors: stores its causal flag (0 or 1) and its
 * number of columns (1, 2 or 4) for allocating startend_row_indices [B, Hm, N, columns].
 * Unknown names are a user error listing the families. */
ATTNJIT_API int attnjit_mask_family(const char* family, int* causal, int* columns);

/** Fills startend_row_indices (int32 [B, Hm, N, C], contiguous; Hm = 1 except for
 * random_eviction) on `stream` with the vectors of args->family built from its parameters, one
 * sample per batch row, and returns without waiting unless args->validate is set (or
 * ATTNJIT_DEBUG=1). Uses the CUDA context current on the calling thread. */
ATTNJIT_API int attnjit_mask_build(const attnjit_mask_build_args* args,
                                   const attnjit_tensor* startend_row_indices, void* stream);

/** Checks FlashMask vectors (int32 [B, Hm, Sk, C], contiguous) of the mask structure
 * flashmask(causal, columns) on the device: values in [0, seqlen_q], LTS <= LTE, UTS <= UTE.
 * Waits for `stream`; a violation is a user error naming the first bad element (batch, head,
 * column, vector), its value and the accepted range. */
ATTNJIT_API int attnjit_validate_intervals(const attnjit_tensor* startend_row_indices, int causal,
                                           int columns, int seqlen_q, void* stream);

/** attnjit_forward for a spec with score modifiers (softcap=true and/or alibi=true; see
 * attnjit/spec.hpp): `softcap` is the cap of s <- cap * tanh(s / cap), a finite value > 0 when
 * the spec has softcap=true and 0 otherwise; `alibi_slopes` is an fp32 [H] device tensor (one
 * slope per query head) when the spec has alibi=true and NULL otherwise. Changing either never
 * recompiles. attnjit_forward is this function with softcap 0 and alibi_slopes NULL. */
ATTNJIT_API int attnjit_forward_score_mod(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                          const attnjit_tensor* k, const attnjit_tensor* v,
                                          const attnjit_tensor* o, const attnjit_tensor* lse,
                                          const attnjit_tensor* startend_row_indices,
                                          float softmax_scale, int window_left, int window_right,
                                          float softcap, const attnjit_tensor* alibi_slopes,
                                          void* stream);

/** attnjit_backward for a spec with score modifiers; `softcap` and `alibi_slopes` as in
 * attnjit_forward_score_mod, and those of the forward pass. attnjit_backward is this function
 * with softcap 0 and alibi_slopes NULL. */
ATTNJIT_API int attnjit_backward_score_mod(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                           const attnjit_tensor* k, const attnjit_tensor* v,
                                           const attnjit_tensor* o, const attnjit_tensor* d_o,
                                           const attnjit_tensor* lse,
                                           const attnjit_tensor* startend_row_indices,
                                           const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                                           const attnjit_tensor* d_v, float softmax_scale,
                                           int window_left, int window_right, float softcap,
                                           const attnjit_tensor* alibi_slopes, void* stream);

/** The runtime inputs of a spec with mask=predicate(...): the values of its scalar slots
 * $0, $1, ... (exactly as many as the predicate has) and its int32 device tensors by name
 * (tensor_names[i] names tensors[i]; [length] or [rows, length], rows 1 or B, contiguous).
 * The counts are checked before the arrays are read: scalar_count 0 to 16, tensor_count 0 to
 * 8, arrays NULL only with a count of 0, names of at most 256 bytes. */
typedef struct attnjit_predicate_inputs {
  const int32_t* scalars;
  int scalar_count;
  const char* const* tensor_names;
  const attnjit_tensor* tensors;
  int tensor_count;
} attnjit_predicate_inputs;

/** attnjit_forward for a spec with kv_cache=contiguous|paged (see KvCacheArgs in
 * attnjit/tensor.hpp): `k` and `v` are the cache, contiguous [B, capacity, Hkv, D] or paged
 * [num_pages, page_size, Hkv, D]; `cache_seqlens` (int32 [B], NULL: every sequence holds its
 * capacity) the keys of each sequence; `block_table` (int32 [B, max_pages]) the pages of a paged
 * cache, NULL for a contiguous one; `startend_row_indices` the FlashMask vectors of a spec with
 * mask=flashmask(...), int32 [B, Hm, capacity, C] (Hm 1 or Hkv) whose rows are positions in the
 * sequence (a new token's is the index of its own key), else NULL; `predicate` the inputs of a
 * spec with mask=predicate(...) (as attnjit_forward_predicate's; q and k are the query's and the
 * key's positions; every cached key is evaluated), else NULL; `k_new` and `v_new`
 * ([B, S_new, Hkv, D] and [.., Dv], or both NULL) keys and values first written into the cache at
 * positions cache_seqlens[b] + t, attention then covering cache_seqlens[b] + S_new keys
 * (cache_seqlens is not updated); `cu_seqlens_q` (int32 [B + 1], NULL: every sequence has q's Sq
 * new tokens) ragged new tokens with `max_seqlen_q` (else 0), q and o then [total_q, H, D], lse
 * [H, total_q] and k_new, v_new [total_q, Hkv, D] (KvCacheArgs::cu_seqlens_q); `num_splits` the
 * key splits (0: chosen). `window_left` and `window_right` as in attnjit_forward
 * (mask=sliding_window), `softcap` and `alibi_slopes` as in attnjit_forward_score_mod (the bias
 * slope[h] * (j - position), a new token's position being the index of its own key), `sinks` an
 * fp32 [H] device tensor for a spec with sinks=true, else NULL. New lengths, tables and split
 * counts never recompile. */
ATTNJIT_API int attnjit_forward_kvcache(
    const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
    const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* lse,
    const attnjit_tensor* cache_seqlens, const attnjit_tensor* block_table,
    const attnjit_tensor* startend_row_indices, const attnjit_predicate_inputs* predicate,
    const attnjit_tensor* k_new, const attnjit_tensor* v_new, const attnjit_tensor* cu_seqlens_q,
    int max_seqlen_q, int num_splits, float softmax_scale, int window_left, int window_right,
    float softcap, const attnjit_tensor* alibi_slopes, const attnjit_tensor* sinks, void* stream);

/** attnjit_forward for a spec with mask=predicate(...): `predicate` gives its inputs (new
 * values never recompile); `softcap` and `alibi_slopes` as in attnjit_forward_score_mod (0 and
 * NULL for a spec without score modifiers). */
ATTNJIT_API int attnjit_forward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                          const attnjit_tensor* k, const attnjit_tensor* v,
                                          const attnjit_tensor* o, const attnjit_tensor* lse,
                                          const attnjit_predicate_inputs* predicate,
                                          float softmax_scale, float softcap,
                                          const attnjit_tensor* alibi_slopes, void* stream);

/** attnjit_backward for a spec with mask=predicate(...) and direction=backward; `predicate`,
 * `softcap` and `alibi_slopes` must be the forward pass's. */
ATTNJIT_API int attnjit_backward_predicate(
    const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
    const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* d_o,
    const attnjit_tensor* lse, const attnjit_predicate_inputs* predicate, const attnjit_tensor* d_q,
    const attnjit_tensor* d_k, const attnjit_tensor* d_v, float softmax_scale, float softcap,
    const attnjit_tensor* alibi_slopes, void* stream);

/** Parses a predicate as a user writes it (e.g. "q - k < 256 && doc[q] == doc[k]") and lifts
 * its literals: writes the NUL-terminated JSON object {"structure": the lifted canonical text
 * for mask=predicate(...), "scalars": the literals' values in slot order, "tensors": the names
 * it reads in slot order}. Same size protocol as attnjit_kernel_info; a parse error is
 * ATTNJIT_USER_ERROR with the line and column in its message. */
ATTNJIT_API int attnjit_predicate_lift(const char* expression, char* buffer, size_t size);

/** Writes a NUL-terminated JSON object describing the compile call that produced `kernel`:
 * {"key", "spec", "cache": "memory"|"disk"|"miss", "compile_ms", "kernels": [{"name", "role",
 * "registers", "spill_bytes", "stack_bytes", "static_smem_bytes", "dynamic_smem_bytes",
 * "threads"}], "predicate_scalars": the values of the predicate literals the spec text held,
 * which a launch without scalars of its own passes ([] when none)}. Returns 0 when it fit into
 * `size` bytes. When it did not (or `buffer` is NULL), writes nothing and returns the size to
 * allocate: the text's bytes plus the NUL, and never less than 4, so that a size cannot be
 * mistaken for an error code. Returns an error code (1 to 3) on failure. */
ATTNJIT_API int attnjit_kernel_info(const attnjit_kernel* kernel, char* buffer, size_t size);

/** Writes the PTX of kernel `index` of `kernel` (0 <= index < the number of "kernels" of
 * attnjit_kernel_info, in the same order), NUL-terminated. Same size protocol as
 * attnjit_kernel_info; an index out of range is a user error naming the count. */
ATTNJIT_API int attnjit_kernel_ptx(const attnjit_kernel* kernel, int index, char* buffer,
                                   size_t size);

/** Clears the memory cache when `memory` is nonzero and the disk cache when `disk` is
 * nonzero (its complete entries, and the lock and temp files of keys no process is writing;
 * a user error unless the disk cache mode is ATTNJIT_DISK_CACHE_ON). Goes on past files it
 * cannot remove, then returns ATTNJIT_DEVICE_ERROR naming each. Kernels already handed out
 * stay valid. */
ATTNJIT_API int attnjit_cache_clear(int memory, int disk);

/** Disk cache modes (attnjit_set_disk_cache_mode; the ATTNJIT_DISK_CACHE variable's on,
 * readonly and off). */
enum {
  ATTNJIT_DISK_CACHE_ON = 0,       /**< read and write (a directory the process cannot write is
                                        used read-only) */
  ATTNJIT_DISK_CACHE_READONLY = 1, /**< load existing entries; never write, lock or delete */
  ATTNJIT_DISK_CACHE_OFF = 2       /**< never touch the disk cache */
};

/** Sets how the compiles of this process use the disk cache, over $ATTNJIT_DISK_CACHE: one of
 * ATTNJIT_DISK_CACHE_ON, _READONLY, _OFF (anything else is a user error). */
ATTNJIT_API int attnjit_set_disk_cache_mode(int mode);

/** Stores the disk cache mode compiles use now into `*mode` (set by
 * attnjit_set_disk_cache_mode, else from $ATTNJIT_DISK_CACHE: a bad value is a user error). */
ATTNJIT_API int attnjit_disk_cache_mode(int* mode);

/** Writes the disk cache directory ($ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else
 * ~/.cache/attnjit) NUL-terminated into `buffer`. Same size protocol as attnjit_kernel_info. */
ATTNJIT_API int attnjit_cache_dir(char* buffer, size_t size);

/** The message of the last failed call on this thread ("" if none); valid until the next
 * failing attnjit call on this thread. */
ATTNJIT_API const char* attnjit_last_error(void);

/** The library version, e.g. "0.1.0". */
ATTNJIT_API const char* attnjit_version(void);

/* ---- Devices, prepared launches and cache counters ----
 *
 * The launch functions above run on the device that holds q's memory: when the context
 * current on the calling thread belongs to another device, that device's primary context (the
 * one PyTorch and the CUDA runtime use) is made current for the call and the previous context
 * restored afterwards. A prepared launch names its device explicitly. */

/** attnjit_compile with `target=` left out resolved for device `device` (an ordinal; -1: the
 * device of the current context, as attnjit_compile). A bad ordinal is a user error. */
ATTNJIT_API int attnjit_compile_for_device(const char* spec_text, int device, attnjit_kernel** out);

/** The tensor slots of a prepared launch, in order: a forward launch uses q, k, v, o, lse,
 * startend_row_indices and alibi_slopes; a backward launch these and d_o, d_q, d_k, d_v; a
 * packed batch's launch (attnjit_launch_prepare_varlen) also cu_seqlens_q, cu_seqlens_k and
 * seqused_k; a spec with sinks=true takes sinks (fp32 [H] sink logits, forward and backward)
 * and, in a backward launch, d_sinks (fp32 [H], the sinks' gradient, written whole by each
 * run); a kv_cache spec's launch (attnjit_launch_prepare_kvcache) takes cache_seqlens,
 * block_table, k_new and v_new, and cu_seqlens_q for ragged new tokens (see
 * attnjit_forward_kvcache); a forward launch of a spec with dtype=e4m3 takes q_descale,
 * k_descale and v_descale (fp32 [B, Hkv], with varlen [sequences, Hkv], or [1]: the values
 * q, k and v stand for are their bytes times these; absent: 1), and a kv_cache launch of a
 * spec with kv_dtype=e4m3 k_descale and v_descale for its cache. Newer slots come after older
 * ones, so the older counts stay valid: a caller may pass ATTNJIT_SLOT_COUNT_PADDED slots
 * (padded batches, no sinks), ATTNJIT_SLOT_COUNT_VARLEN slots (no sinks),
 * ATTNJIT_SLOT_COUNT_SINKS slots (no cache) or ATTNJIT_SLOT_COUNT_KVCACHE slots (no descales)
 * to the prepare call and then that many pointers (plus the predicate's) to each run; the
 * slots past the count are absent. */
enum {
  ATTNJIT_SLOT_Q = 0,
  ATTNJIT_SLOT_K = 1,
  ATTNJIT_SLOT_V = 2,
  ATTNJIT_SLOT_O = 3,
  ATTNJIT_SLOT_LSE = 4,
  ATTNJIT_SLOT_STARTEND_ROW_INDICES = 5,
  ATTNJIT_SLOT_ALIBI_SLOPES = 6,
  ATTNJIT_SLOT_D_O = 7,
  ATTNJIT_SLOT_D_Q = 8,
  ATTNJIT_SLOT_D_K = 9,
  ATTNJIT_SLOT_D_V = 10,
  ATTNJIT_SLOT_COUNT_PADDED = 11,
  ATTNJIT_SLOT_CU_SEQLENS_Q = 11,
  ATTNJIT_SLOT_CU_SEQLENS_K = 12,
  ATTNJIT_SLOT_SEQUSED_K = 13,
  ATTNJIT_SLOT_COUNT_VARLEN = 14,
  ATTNJIT_SLOT_SINKS = 14,
  ATTNJIT_SLOT_D_SINKS = 15,
  ATTNJIT_SLOT_COUNT_SINKS = 16,
  ATTNJIT_SLOT_CACHE_SEQLENS = 16,
  ATTNJIT_SLOT_BLOCK_TABLE = 17,
  ATTNJIT_SLOT_K_NEW = 18,
  ATTNJIT_SLOT_V_NEW = 19,
  ATTNJIT_SLOT_COUNT_KVCACHE = 20,
  ATTNJIT_SLOT_Q_DESCALE = 20,
  ATTNJIT_SLOT_K_DESCALE = 21,
  ATTNJIT_SLOT_V_DESCALE = 22,
  ATTNJIT_SLOT_COUNT = 23
};

/** A forward or backward call with everything but the data pointers and the stream bound:
 * what a caller that repeats a call on tensors of the same shapes keeps (immutable, safe to
 * share between threads). */
typedef struct attnjit_launch attnjit_launch;

/** Binds a launch of `kernel` (its direction says forward or backward) on padded batches:
 * `tensors` holds `tensor_count` (ATTNJIT_SLOT_COUNT or one of the older counts above)
 * descriptors in slot order, whose data pointers are ignored; a
 * descriptor of rank 0 is an absent tensor (lse, startend_row_indices, alibi_slopes, sinks,
 * d_sinks where the spec has none; the packed batches' slots always). `predicate` (NULL
 * unless the mask is a predicate) binds the scalars and the tensor names and shapes; its
 * tensors' pointers come with each run too. The scalar arguments are those of
 * attnjit_forward_score_mod. `device` is the ordinal every run uses (-1: the context current
 * at the run). A kernel of a spec with varlen=true is refused (it is
 * prepared with attnjit_launch_prepare_varlen). Shapes, strides and alignment are checked at
 * each run, with the messages of attnjit_forward. Release with attnjit_launch_release. */
ATTNJIT_API int attnjit_launch_prepare(const attnjit_kernel* kernel, const attnjit_tensor* tensors,
                                       int tensor_count, const attnjit_predicate_inputs* predicate,
                                       float softmax_scale, int window_left, int window_right,
                                       float softcap, int device, attnjit_launch** out);

/** attnjit_launch_prepare for a kernel of a spec with varlen=true (a packed batch,
 * FlashAttention's varlen arguments), and only for one: `tensor_count` is ATTNJIT_SLOT_COUNT
 * (or an older count from ATTNJIT_SLOT_COUNT_VARLEN on);
 * q [total_q, H, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv], o [total_q, H, Dv], lse fp32
 * [H, total_q], the gradients shaped like their tensors; cu_seqlens_q and cu_seqlens_k int32
 * [B + 1] (required; 0 = cu[0] <= ... <= cu[B] = total_q, resp. total_k: sequence s holds
 * rows [cu[s], cu[s + 1]), empty sequences allowed); seqused_k int32 [B] (optional: the keys
 * of each sequence used, from its start); all three contiguous, in device memory.
 * `max_seqlen_q` and `max_seqlen_k` (0 to total_q, resp. total_k) bound the sequences'
 * lengths. Masks are per sequence, in its local positions: causal is bottom-right aligned,
 * the sliding window is window_left/window_right around row i + Sk_s - Sq_s. Each run checks
 * the shapes and types; the boundaries' values only on the device, when the environment has
 * ATTNJIT_DEBUG=1 (the run then waits for its stream). New boundary values never recompile
 * and never synchronize the host: a run can be captured in a CUDA graph and replayed with new
 * contents of the same tensors. */
ATTNJIT_API int attnjit_launch_prepare_varlen(const attnjit_kernel* kernel,
                                              const attnjit_tensor* tensors, int tensor_count,
                                              const attnjit_predicate_inputs* predicate,
                                              float softmax_scale, int window_left,
                                              int window_right, float softcap, int max_seqlen_q,
                                              int max_seqlen_k, int device, attnjit_launch** out);

/** attnjit_launch_prepare for a kernel of a spec with kv_cache=contiguous|paged, and only for
 * one: `tensor_count` is ATTNJIT_SLOT_COUNT (or ATTNJIT_SLOT_COUNT_KVCACHE); q, k (the
 * cache), v, o, lse and sinks as in attnjit_forward_kvcache, its FlashMask vectors and ALiBi
 * slopes, cache_seqlens, block_table, k_new and v_new in their slots and its cu_seqlens_q in
 * ATTNJIT_SLOT_CU_SEQLENS_Q (rank 0 where absent); `predicate` as in attnjit_launch_prepare (NULL
 * without one); `num_splits` its key splits (0: chosen from the shapes and the SM count),
 * `max_seqlen_q` the most new tokens of a sequence with cu_seqlens_q (else 0). A run takes no host
 * synchronization and allocates nothing but what its workspace (attnjit_launch_workspace_size) does
 * not cover: with a workspace, it can be captured in a CUDA graph and replayed with new lengths,
 * tables and cache contents. */
ATTNJIT_API int attnjit_launch_prepare_kvcache(const attnjit_kernel* kernel,
                                               const attnjit_tensor* tensors, int tensor_count,
                                               const attnjit_predicate_inputs* predicate,
                                               float softmax_scale, int window_left,
                                               int window_right, float softcap, int num_splits,
                                               int max_seqlen_q, int device, attnjit_launch** out);

/** Enqueues a prepared launch on `stream` and returns without waiting. `data` holds
 * `data_count` device pointers: one per slot of the prepare call's tensor_count (NULL for an
 * absent tensor), then one per tensor of the predicate, in its order. */
ATTNJIT_API int attnjit_launch_run(const attnjit_launch* launch, void* const* data, int data_count,
                                   void* stream);

/** The bytes of device memory a run of `launch` takes for its scratch buffers (FlashMask
 * tables, CTA orders, predicate tables and bits; the backward's fp32 dQ accumulator, row
 * statistics and GQA partials) at the shapes it was prepared with; 0 when it takes none. */
ATTNJIT_API int attnjit_launch_workspace_size(const attnjit_launch* launch, size_t* bytes);

/** attnjit_launch_run with the scratch memory given by the caller: `workspace`, device memory
 * of the launch's device, 256-byte aligned, of `workspace_bytes` bytes, at least what
 * attnjit_launch_workspace_size reports (else an error naming both numbers), not used by other
 * work until the run's kernels have finished on `stream`. NULL and 0: as attnjit_launch_run,
 * which takes stream-ordered scratch memory. */
ATTNJIT_API int attnjit_launch_run_workspace(const attnjit_launch* launch, void* const* data,
                                             int data_count, void* workspace,
                                             size_t workspace_bytes, void* stream);

/** Releases a handle of attnjit_launch_prepare. NULL is ignored. */
ATTNJIT_API void attnjit_launch_release(attnjit_launch* launch);

/** The kernel caches' counters since the process started (attnjit::jit::cache_stats). */
typedef struct attnjit_cache_counters {
  uint64_t memory_hits;    /**< compile calls answered from memory */
  uint64_t disk_hits;      /**< kernel sets loaded from the disk cache */
  uint64_t compiles;       /**< kernel sets built with NVRTC */
  uint64_t memory_entries; /**< kernel sets held in memory now */
} attnjit_cache_counters;

/** Writes the counters into `*out`. */
ATTNJIT_API int attnjit_cache_stats(attnjit_cache_counters* out);

/* ---- FlashMask interval vectors of the standard mask families, built on the host ----
 *
 * The vectors a flashmask spec takes as startend_row_indices, built by the builders of
 * dsl/builders.hpp (docs/masks.md): attnjit_intervals_family builds any family of
 * attnjit_mask_families from its parameters by name, the attnjit_intervals_<family> functions
 * take typed parameters. Each builds ONE sample (batch = heads = 1, seqlen_q = seqlen_k = N);
 * attnjit_intervals_pack, _stack and _broadcast_heads combine samples into a batch. "full" and
 * "causal" have no vectors (masks none and causal). Handles are immutable; release each with
 * attnjit_intervals_release. Bad parameters return ATTNJIT_USER_ERROR with a message naming the
 * parameter, its value and what is accepted, and set `*out` to NULL. A NULL array is accepted
 * only with a count of 0, and counts above 2147483647 are refused before an array is read. */

/** Host FlashMask vectors: int32 [batch, heads, seqlen_k, columns], columns fastest. */
typedef struct attnjit_intervals attnjit_intervals;

/** The layout of an attnjit_intervals: the mask structure of the spec it goes with
 * (mask=flashmask(causal=...,columns=...)) and its shape. */
typedef struct attnjit_intervals_shape {
  int causal;  /**< 1 or 0 */
  int columns; /**< 1 (LTS), 2 (causal: LTS, LTE; otherwise LTS, UTE) or 4 (LTS, LTE, UTS, UTE) */
  int batch;
  int heads; /**< mask heads */
  int seqlen_q;
  int seqlen_k;
} attnjit_intervals_shape;

/** Writes a NUL-terminated JSON array describing every mask family of the family table, in
 * order: [{"name", "causal", "columns" (0 for "full" and "causal", which have no vectors),
 * "parameters": [{"name", "depth"}] (attnjit_intervals_family's parameters; depth 0 an int,
 * 1 a list of ints, 2 a list of lists of ints), "per_head" (whether its vectors may differ
 * between mask heads), "device_parameters" (the attnjit_mask_build_args fields
 * attnjit_mask_build reads for it)}]. Same size protocol as attnjit_kernel_info. */
ATTNJIT_API int attnjit_mask_families(char* buffer, size_t size);

/** One sample of `seqlen` tokens of any family with vectors, from its parameters as
 * attnjit_mask_families lists them: `parameters` is a JSON object such as
 * {"doc_lengths": [4, 3, 3]}. Sums and counts that must equal seqlen are checked first;
 * `context` (NULL, or a text such as " (sample 1)") follows the value in those messages. */
ATTNJIT_API int attnjit_intervals_family(const char* family, int seqlen, const char* parameters,
                                         const char* context, attnjit_intervals** out);

/** Causal sliding window of `window` keys including the diagonal (n >= 1, window >= 1):
 * causal, 1 column, LTS_j = min(j + window, n). */
ATTNJIT_API int attnjit_intervals_sliding_window(int n, int window, attnjit_intervals** out);

/** Packed documents of the given lengths (>= 0, sum >= 1), causal inside each: causal,
 * 1 column, LTS_j = end of j's document. */
ATTNJIT_API int attnjit_intervals_causal_document(const int32_t* doc_lengths, size_t count,
                                                  attnjit_intervals** out);

/** Packed documents, bidirectional inside each: non-causal, 2 columns, LTS_j = end and
 * UTE_j = start of j's document. */
ATTNJIT_API int attnjit_intervals_document(const int32_t* doc_lengths, size_t count,
                                           attnjit_intervals** out);

/** A question of `question` tokens followed by `count` answers that share it: causal,
 * 1 column; question columns LTS = N, answer columns LTS = end of their answer. */
ATTNJIT_API int attnjit_intervals_share_question(int question, const int32_t* answers, size_t count,
                                                 attnjit_intervals** out);

/** `global` global tokens, then a window of `left` keys before and `right` keys after each row:
 * non-causal, 4 columns (0 <= global <= n, left >= 0, right >= 0). */
ATTNJIT_API int attnjit_intervals_global_sliding_window(int n, int global, int left, int right,
                                                        attnjit_intervals** out);

/** Demonstration blocks (each sees only itself, causally) followed by a test block of `test`
 * tokens that sees every earlier key: causal, 2 columns. */
ATTNJIT_API int attnjit_intervals_causal_blockwise(const int32_t* blocks, size_t count, int test,
                                                   attnjit_intervals** out);

/** Prefix LM: the first `prefix` keys visible to every row, the rest causally (0 <= prefix <= n):
 * non-causal, 2 columns. */
ATTNJIT_API int attnjit_intervals_prefix_lm_causal(int n, int prefix, attnjit_intervals** out);

/** Packed prefix-LM documents: `count` document lengths and as many prefix lengths
 * (0 <= prefixes[d] <= doc_lengths[d]): non-causal, 2 columns. */
ATTNJIT_API int attnjit_intervals_prefix_lm_document(const int32_t* doc_lengths,
                                                     const int32_t* prefixes, size_t count,
                                                     attnjit_intervals** out);

/** Causal with the keys of [offset, offset + length) hidden from the rows before
 * offset + length (offset + length <= n): causal, 2 columns. */
ATTNJIT_API int attnjit_intervals_qk_sparse(int n, int offset, int length, attnjit_intervals** out);

/** Causal with per-key eviction: key j is visible to rows j <= i < evicted_at_row[j]
 * (N = count >= 1, values in [0, N]): causal, 1 column. */
ATTNJIT_API int attnjit_intervals_random_eviction(const int32_t* evicted_at_row, size_t count,
                                                  attnjit_intervals** out);

/** Places `count` single-sample, single-head pieces one after another along the sequence, each
 * seeing only itself (packed samples); layouts: causal with 1 column or non-causal with 2. */
ATTNJIT_API int attnjit_intervals_pack(const attnjit_intervals* const* pieces, size_t count,
                                       attnjit_intervals** out);

/** A batch of `count` single-sample, single-head masks of one layout and length, given in
 * (batch, head) order: [count / heads, heads, N, C] (count a multiple of heads >= 1). */
ATTNJIT_API int attnjit_intervals_stack(const attnjit_intervals* const* samples, size_t count,
                                        int heads, attnjit_intervals** out);

/** The single-head mask `intervals` repeated for `heads` mask heads. */
ATTNJIT_API int attnjit_intervals_broadcast_heads(const attnjit_intervals* intervals, int heads,
                                                  attnjit_intervals** out);

/** Writes the layout and shape of `intervals` into `*shape`. */
ATTNJIT_API int attnjit_intervals_get_shape(const attnjit_intervals* intervals,
                                            attnjit_intervals_shape* shape);

/** The batch * heads * seqlen_k * columns values of `intervals` (valid until it is released);
 * NULL for NULL. */
ATTNJIT_API const int32_t* attnjit_intervals_data(const attnjit_intervals* intervals);

/** Writes into `*pairs` the number of visible (query, key) pairs summed over the batch and
 * `heads` query heads (a multiple of the mask heads, each mask head shared by heads / mask
 * heads query heads): the pairs behind the FLOP count 4 * head_dim * pairs of a forward pass. */
ATTNJIT_API int attnjit_intervals_visible_pairs(const attnjit_intervals* intervals, int heads,
                                                int64_t* pairs);

/** Releases a handle of the attnjit_intervals_* functions. NULL is ignored. */
ATTNJIT_API void attnjit_intervals_release(attnjit_intervals* intervals);

/* ---- The mask language, built on the host ----
 *
 * One line that combines the mask families (document([4,3,3])), element predicates
 * (q >= k && doc[q] == doc[k]) and their intersections & and unions | (docs/masks.md; what
 * `attnc mask` reads), compiled to the spec's mask and built for one problem size into the
 * data its launches take: FlashMask vectors, or a predicate's scalars and int32 tensors. */

/** An int32 tensor on the host that a mask expression reads by name, [rows, length] row-major:
 * a predicate's tensor or a family's list parameter (one zero-padded sample per row); rows 1
 * (every sample) or the batch size. */
typedef struct attnjit_host_tensor {
  const char* name;
  const int32_t* values; /**< rows * length values; NULL only when that is 0 */
  int rows;
  int length;
} attnjit_host_tensor;

/** A mask expression built for one problem size (immutable). */
typedef struct attnjit_host_mask attnjit_host_mask;

/** Parses and compiles a mask expression without building it: writes the NUL-terminated JSON
 * object {"form": "none"|"causal"|"intervals"|"predicate" (decided from the text alone),
 * "mask": the spec's mask (a predicate lifted: its literals are $N slots), "scalars": the
 * literals' values, "tensors": the names of the tensors the text reads, in order, "element":
 * whether the text is one element predicate (no family, no & or |)}. Same size protocol as
 * attnjit_kernel_info; bad text is a user error naming the line and column. */
ATTNJIT_API int attnjit_mask_parse(const char* expression, char* buffer, size_t size);

/** Compiles `expression` and builds its data for `batch` samples (1 to 65535) of `seqlen_q`
 * queries and `seqlen_k` keys (>= 1 each, batch times either at most 2^31 - 1) from the
 * `tensor_count` (0 to 1024) named host tensors at `tensors` (NULL only with 0), as
 * attnjit::build_host_mask does. Stores a new handle in `*out` (NULL on failure); release it
 * with attnjit_host_mask_release. */
ATTNJIT_API int attnjit_host_mask_build(const char* expression, int batch, int seqlen_q,
                                        int seqlen_k, const attnjit_host_tensor* tensors,
                                        int tensor_count, attnjit_host_mask** out);

/** Writes the NUL-terminated JSON object {"form", "mask", "scalars" (as attnjit_mask_parse),
 * "predicate": the lifted predicate text of the predicate form ("" otherwise), "batch",
 * "seqlen_q", "seqlen_k", "tensors": [{"name", "rows", "length"}] (the predicate form's
 * tensors, generated ones such as "_doc0" included, in the order attnjit_host_mask_tensor
 * numbers them)}. Same size protocol as attnjit_kernel_info. */
ATTNJIT_API int attnjit_host_mask_info(const attnjit_host_mask* mask, char* buffer, size_t size);

/** The FlashMask vectors of a mask of the "intervals" form as a new attnjit_intervals handle
 * (one mask head); a user error for the other forms. */
ATTNJIT_API int attnjit_host_mask_intervals(const attnjit_host_mask* mask, attnjit_intervals** out);

/** Stores in `*values` the rows * length values of tensor `index` (0 <= index < the number of
 * "tensors" of attnjit_host_mask_info) of a predicate-form mask, valid until `mask` is
 * released. */
ATTNJIT_API int attnjit_host_mask_tensor(const attnjit_host_mask* mask, int index,
                                         const int32_t** values);

/** Releases a handle of attnjit_host_mask_build. NULL is ignored. */
ATTNJIT_API void attnjit_host_mask_release(attnjit_host_mask* mask);

#ifdef __cplusplus
}
#endif

#endif /* ATTNJIT_ATTNJIT_H */
