// NVRTC: CUDA C++ source to CUBIN and PTX, with the ptxas resource report parsed from the
// compile log. Needs no driver and no GPU.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace attnjit::runtime {

/// What ptxas reported for one kernel (`--ptxas-options=-v`).
struct PtxasReport {
  int registers = 0;  ///< per thread
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_bytes = 0;  ///< stack frame
  int static_smem_bytes = 0;
  /// ptxas infos naming the kernel that say it serialized its warpgroup MMAs (C7510-C7515,
  /// C7520, C7521: "wgmma.mma_async instructions are serialized due to ...") or injected a
  /// warpgroup.arrive or warpgroup.wait next to one because registers an MMA reads or writes
  /// were used there (C7519, C7517): each costs the overlap that wgmma exists for.
  int wgmma_serializations = 0;

  /// Spill stores plus spill loads.
  int spill_bytes() const { return spill_store_bytes + spill_load_bytes; }
  bool operator==(const PtxasReport&) const = default;
};

/// A header handed to NVRTC as a string; the source includes it by `name`, e.g.
/// `#include "attnjit/sm80/forward.cuh"`.
struct NvrtcHeader {
  std::string_view name;
  std::string_view source;
};

/// The result of one compilation.
struct NvrtcOutput {
  std::string cubin;  ///< empty for a virtual architecture (compute_XX)
  std::string ptx;
  std::string log;          ///< NVRTC's program log, ptxas report included
  PtxasReport report;       ///< of `kernel_name`; all zero for a virtual architecture
  double milliseconds = 0;  ///< wall time of the whole call
};

/// Compiles `source` for `arch` ("sm_80", "sm_90a", ... for CUBIN and PTX; "compute_90", ...
/// for PTX only) with `--gpu-architecture=<arch> -std=c++17 --ptxas-options=-v` followed by
/// `extra_options`, and parses the ptxas report of `kernel_name` (the name as ptxas prints
/// it: the plain name of an extern "C" kernel, else the mangled one). On a compile error
/// writes the source and headers to a fresh directory under $ATTNJIT_DUMP_DIR (default
/// <temp>/attnjit-dump-<pid>) and throws DeviceError with the program name, that directory
/// and the full NVRTC log. Throws Error for an `arch` that is neither sm_* nor compute_*.
/// Thread-safe: every call has its own program.
NvrtcOutput nvrtc_compile(std::string_view source, std::string_view program_name,
                          std::span<const NvrtcHeader> headers, std::string_view arch,
                          std::span<const std::string> extra_options, std::string_view kernel_name);

/// The report of entry `kernel_name` in a ptxas `-v` log that may describe several entries;
/// all zero when the log has no such entry. Fields it does not know are ignored.
PtxasReport parse_ptxas_report(std::string_view log, std::string_view kernel_name);

/// The NVRTC version, e.g. "13.0".
std::string nvrtc_version();

}  // namespace attnjit::runtime
