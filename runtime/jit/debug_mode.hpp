// The debug switch ATTNJIT_DEBUG: with ATTNJIT_DEBUG=1 every attention launch validates its
// FlashMask vectors on the device, every device mask builder checks its parameters, and the
// kernels compiled then bound their mbarrier waits (a hang becomes a trap).
#pragma once

namespace attnjit::runtime {

/// True iff the environment has ATTNJIT_DEBUG=1; unset, empty or 0 means false. Read on every
/// call, so a process may switch it. Throws Error for any other value.
bool debug_mode();

}  // namespace attnjit::runtime
