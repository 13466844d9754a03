// The C ABI of the device mask builders and the interval check (include/attnjit/attnjit.h):
// attnjit_mask_family, attnjit_mask_build and attnjit_validate_intervals over
// include/attnjit/mask_builder.hpp.
#include <string>

#include "attnjit/attnjit.h"
#include "attnjit/mask_builder.hpp"
#include "jit/c_api/c_api_support.hpp"

namespace {

using attnjit::c_api::guarded;
using attnjit::c_api::require;

/// A descriptor of the args struct: absent when its data is NULL and its rank 0.
attnjit::TensorView field_view(std::string_view name, const attnjit_tensor& tensor) {
  if (tensor.data == nullptr && tensor.rank == 0) return {};
  return attnjit::c_api::to_view(name, tensor);
}

}  // namespace

extern "C" {

int attnjit_mask_family(const char* family, int* causal, int* columns) {
  return guarded([&] {
    require(family != nullptr, "family", "a family name such as \"causal_document\"");
    require(causal != nullptr, "causal", "a pointer to an int to fill");
    require(columns != nullptr, "columns", "a pointer to an int to fill");
    const attnjit::MaskSpec spec = attnjit::mask_spec_of(family);
    *causal = spec.causal ? 1 : 0;
    *columns = spec.columns;
  });
}

int attnjit_mask_build(const attnjit_mask_build_args* args,
                       const attnjit_tensor* startend_row_indices, void* stream) {
  return guarded([&] {
    require(args != nullptr, "args", "an attnjit_mask_build_args");
    require(args->family != nullptr, "args.family", "a family name such as \"causal_document\"");
    attnjit::MaskBuildArgs a;
    a.family = attnjit::parse_mask_family(args->family);
    a.startend_row_indices =
        attnjit::c_api::required_view("startend_row_indices", startend_row_indices);
    a.offsets = field_view("offsets", args->offsets);
    a.prefix = field_view("prefix", args->prefix);
    a.prefixes = field_view("prefixes", args->prefixes);
    a.test = field_view("test", args->test);
    a.dropped_start = field_view("dropped_start", args->dropped_start);
    a.dropped_length = field_view("dropped_length", args->dropped_length);
    a.window = args->window;
    a.global_tokens = args->global_tokens;
    a.window_left = args->window_left;
    a.window_right = args->window_right;
    a.seed = args->seed;
    a.validate = args->validate != 0;
    attnjit::build_mask(a, stream);
  });
}

int attnjit_validate_intervals(const attnjit_tensor* startend_row_indices, int causal, int columns,
                               int seqlen_q, void* stream) {
  return guarded([&] {
    const attnjit::TensorView view =
        attnjit::c_api::required_view("startend_row_indices", startend_row_indices);
    if (causal != 0 && causal != 1) {
      attnjit::throw_field_error("causal", std::to_string(causal), "0 or 1");
    }
    const attnjit::MaskSpec mask{attnjit::MaskKind::flashmask, causal == 1, columns};
    attnjit::validate_intervals(view, mask, seqlen_q, stream);
  });
}

}  // extern "C"
