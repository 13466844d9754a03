// The attnjit_intervals handle of the C ABI (include/attnjit/attnjit.h), shared by the
// translation units that create it (the host builders, the mask language's interval form).
#pragma once

#include "dsl/intervals.hpp"

/// What an attnjit_intervals* points to: host FlashMask vectors (immutable).
struct attnjit_intervals {
  attnjit::dsl::IntervalVectors vectors;
};
