/* The stable C ABI of attnjit: compile a spec, run its forward or backward pass on device
 * tensors, read what the compiler did, manage the kernel cache. C99; usable from C, C++ and
 * through FFI layers (ctypes, cffi). No C++ exception crosses it: every failing call returns a
 * nonzero code and leaves a message in attnjit_last_error(). */
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
  ATTNJIT_DEVICE_ERROR = 2,  /**< no driver or device, a Driver API call or NVRTC failed */
  ATTNJIT_INTERNAL_ERROR = 3 /**< a bug in attnjit, or out of memory */
};

/** Element types of attnjit_tensor::dtype (the order of attnjit::ScalarType). */
enum { ATTNJIT_FP16 = 0, ATTNJIT_BF16 = 1, ATTNJIT_FP32 = 2, ATTNJIT_INT32 = 3 };

/** A non-owning view of a device tensor; shape and strides are in elements, rank <= 4. */
typedef struct attnjit_tensor {
  void* data;
  int dtype; /**< one of ATTNJIT_FP16, ATTNJIT_BF16, ATTNJIT_FP32, ATTNJIT_INT32 */
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

/** The runtime inputs of a spec with mask=predicate(...): the values of its scalar slots
 * $0, $1, ... (exactly as many as the predicate has) and its int32 device tensors by name
 * (tensor_names[i] names tensors[i]; [length] or [rows, length], rows 1 or B, contiguous). */
typedef struct attnjit_predicate_inputs {
  const int32_t* scalars;
  int scalar_count;
  const char* const* tensor_names;
  const attnjit_tensor* tensors;
  int tensor_count;
} attnjit_predicate_inputs;

/** attnjit_forward for a spec with mask=predicate(...): `predicate` gives its inputs (new
 * values never recompile). */
ATTNJIT_API int attnjit_forward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                                          const attnjit_tensor* k, const attnjit_tensor* v,
                                          const attnjit_tensor* o, const attnjit_tensor* lse,
                                          const attnjit_predicate_inputs* predicate,
                                          float softmax_scale, void* stream);

/** attnjit_backward for a spec with mask=predicate(...) and direction=backward; `predicate`
 * must hold the forward pass's inputs. */
ATTNJIT_API int attnjit_backward_predicate(
    const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
    const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* d_o,
    const attnjit_tensor* lse, const attnjit_predicate_inputs* predicate, const attnjit_tensor* d_q,
    const attnjit_tensor* d_k, const attnjit_tensor* d_v, float softmax_scale, void* stream);

/** Parses a predicate as a user writes it (e.g. "q - k < 256 && doc[q] == doc[k]") and lifts
 * its literals: writes the NUL-terminated JSON object {"structure": the lifted canonical text
 * for mask=predicate(...), "scalars": the literals' values in slot order, "tensors": the names
 * it reads in slot order}. Same size protocol as attnjit_kernel_info; a parse error is
 * ATTNJIT_USER_ERROR with the line and column in its message. */
ATTNJIT_API int attnjit_predicate_lift(const char* expression, char* buffer, size_t size);

/** Writes a NUL-terminated JSON object describing the compile call that produced `kernel`:
 * {"key", "spec", "cache": "memory"|"disk"|"miss", "compile_ms", "kernels": [{"name", "role",
 * "registers", "spill_bytes", "stack_bytes", "static_smem_bytes", "dynamic_smem_bytes",
 * "threads"}]}. Returns 0 when it fit into `size` bytes. When it did not (or `buffer` is
 * NULL), writes nothing and returns the size to allocate: the text's bytes plus the NUL, and
 * never less than 4, so that a size cannot be mistaken for an error code. Returns an error
 * code (1 to 3) on failure. */
ATTNJIT_API int attnjit_kernel_info(const attnjit_kernel* kernel, char* buffer, size_t size);

/** Clears the memory cache when `memory` is nonzero and the disk cache when `disk` is
 * nonzero. Kernels already handed out stay valid. */
ATTNJIT_API int attnjit_cache_clear(int memory, int disk);

/** Writes the disk cache directory ($ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else
 * ~/.cache/attnjit) NUL-terminated into `buffer`. Same size protocol as attnjit_kernel_info. */
ATTNJIT_API int attnjit_cache_dir(char* buffer, size_t size);

/** The message of the last failed call on this thread ("" if none); valid until the next
 * failing attnjit call on this thread. */
ATTNJIT_API const char* attnjit_last_error(void);

/** The library version, e.g. "0.1.0". */
ATTNJIT_API const char* attnjit_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTNJIT_ATTNJIT_H */
