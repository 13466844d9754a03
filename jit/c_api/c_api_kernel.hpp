// The attnjit_kernel handle of the C ABI (include/attnjit/attnjit.h), shared by the translation
// units that create it (attnjit_compile*) and use it (launches, prepared launches, info).
#pragma once

#include "attnjit/jit.hpp"

/// What an attnjit_kernel* points to: a compiled attention (shared, immutable).
struct attnjit_kernel {
  attnjit::jit::Kernel kernel;
};
