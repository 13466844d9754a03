// NVRTC: compiling for real and virtual architectures with string headers, the ptxas report,
// spills, compile errors with the source dump, and the report parser on canned logs.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "support/env_override.hpp"

using namespace attnjit::runtime;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kHeaderName = "attnjit_test/scale.cuh";
constexpr std::string_view kHeader = R"(#pragma once
namespace attnjit_test {
__device__ inline float scale(float x) { return 2.0f * x + 1.0f; }
}  // namespace attnjit_test
)";
constexpr std::string_view kSource = R"(#include "attnjit_test/scale.cuh"
extern "C" __global__ void scale_kernel(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = attnjit_test::scale(in[i]);
}
)";

/// 32 floats live across a loop: more than 24 registers can hold.
constexpr std::string_view kSpillingSource = R"(
extern "C" __global__ void spill_kernel(const float* in, float* out, int n) {
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = in[threadIdx.x + i * blockDim.x];
  for (int step = 0; step < n; ++step) {
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = acc[i] * acc[(i + 7) % 32] + acc[(i + 13) % 32];
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += acc[i] * (i + 1);
  out[threadIdx.x] = sum;
}
)";

const NvrtcHeader kHeaders[] = {{kHeaderName, kHeader}};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a kernel with a string header compiles to CUBIN and PTX", "[nvrtc]") {
  const std::string arch = GENERATE("sm_80", "sm_90", "sm_90a");
  const NvrtcOutput output = nvrtc_compile(kSource, "scale.cu", kHeaders, arch, {}, "scale_kernel");
  REQUIRE(output.cubin.size() > 4);
  CHECK(output.cubin.substr(0, 4) ==
        "\x7f"
        "ELF");
  CHECK(output.ptx.find(".entry scale_kernel") != std::string::npos);
  CHECK(output.ptx.back() != '\0');
  CHECK(output.log.find("Compiling entry function 'scale_kernel' for '" + arch + "'") !=
        std::string::npos);
  CHECK(output.report.registers > 0);
  CHECK(output.report.spill_bytes() == 0);
  CHECK(output.report.stack_bytes == 0);
  CHECK(output.milliseconds > 0.0);
}

TEST_CASE("a virtual architecture gives PTX only", "[nvrtc]") {
  const NvrtcOutput output =
      nvrtc_compile(kSource, "scale.cu", kHeaders, "compute_90", {}, "scale_kernel");
  CHECK(output.cubin.empty());
  CHECK(output.ptx.find(".target sm_90") != std::string::npos);
  CHECK(output.report == PtxasReport{});
}

TEST_CASE("an architecture that is neither sm_ nor compute_ is a user error", "[nvrtc]") {
  CHECK_THROWS_AS(nvrtc_compile(kSource, "scale.cu", kHeaders, "90", {}, "scale_kernel"),
                  attnjit::Error);
}

TEST_CASE("spills show in the report", "[nvrtc]") {
  const std::vector<std::string> options = {"--maxrregcount=24"};
  const NvrtcOutput output =
      nvrtc_compile(kSpillingSource, "spill.cu", {}, "sm_80", options, "spill_kernel");
  CHECK(output.report.registers <= 24);
  CHECK(output.report.spill_store_bytes > 0);
  CHECK(output.report.spill_load_bytes > 0);
  CHECK(output.report.spill_bytes() ==
        output.report.spill_store_bytes + output.report.spill_load_bytes);
}

TEST_CASE("a compile error carries the log and the path of the dumped source", "[nvrtc]") {
  const fs::path dump_dir =
      fs::temp_directory_path() / ("attnjit-test-dump-" + std::to_string(::getpid()));
  fs::remove_all(dump_dir);
  const attnjit::testing::EnvOverride dump("ATTNJIT_DUMP_DIR", dump_dir.string().c_str());
  const std::string source = std::string(kSource) +
                             "\nextern \"C\" __global__ void broken() {"
                             " int x = ; }\n";
  std::string message;
  try {
    nvrtc_compile(source, "broken.cu", kHeaders, "sm_80", {}, "broken");
  } catch (const attnjit::DeviceError& error) {
    message = error.what();
  }
  INFO(message);
  REQUIRE_FALSE(message.empty());
  CHECK(message.find("'broken.cu'") != std::string::npos);
  CHECK(message.find("expected an expression") != std::string::npos);
  const std::string marker = "source dumped to ";
  const auto at = message.find(marker);
  REQUIRE(at != std::string::npos);
  const auto end = message.find('\n', at);
  const fs::path dumped = message.substr(at + marker.size(), end - at - marker.size());
  CHECK(dumped.string().starts_with(dump_dir.string()));
  REQUIRE(fs::is_regular_file(dumped));
  CHECK(read_all(dumped) == source);
  CHECK(read_all(dumped.parent_path() / kHeaderName) == kHeader);
  fs::remove_all(dump_dir);
}

TEST_CASE("nvrtc_version is major.minor", "[nvrtc]") {
  CHECK(std::regex_match(nvrtc_version(), std::regex("[0-9]+\\.[0-9]+")));
}

TEST_CASE("parse_ptxas_report reads one entry of a log", "[nvrtc]") {
  const std::string log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_80'
ptxas info    : Function properties for k2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 4.953 ms
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     256 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 36 registers, used 0 barriers, 256 bytes cumulative stack size, 364 bytes cmem[0]
ptxas info    : Compile time = 7.888 ms
ptxas info    : Function properties for _Z7helperPfi
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
)";
  const PtxasReport k2 = parse_ptxas_report(log, "k2");
  CHECK(k2 == PtxasReport{255, 0, 0, 0, 4096});
  const PtxasReport k = parse_ptxas_report(log, "k");
  CHECK(k == PtxasReport{36, 24, 32, 256, 0});
  CHECK(k.spill_bytes() == 56);
  CHECK(parse_ptxas_report(log, "absent") == PtxasReport{});
  CHECK(parse_ptxas_report("", "k") == PtxasReport{});
}

TEST_CASE("parse_ptxas_report reads the NVRTC 13 example", "[nvrtc]") {
  const std::string log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 5.701 ms
)";
  CHECK(parse_ptxas_report(log, "k") == PtxasReport{8, 0, 0, 0, 0});
  CHECK(parse_ptxas_report(log, "") == PtxasReport{});
  CHECK(parse_ptxas_report(log, "k_other") == PtxasReport{});
}

TEST_CASE("parse_ptxas_report counts the kernel's serialized warpgroup MMAs", "[nvrtc]") {
  // The C7519 lines as ptxas 13.0 printed them for a kernel whose A operands were packed
  // between wgmma.fence and the MMA; the C7515 line in the form of its documented message;
  // the C7514 and C7517 lines as ptxas 13.0 printed them for a loop that issued O += P V
  // under a condition; the C7520 line as it printed it for a loop that issued both products
  // under conditions it could not prove uniform.
  const std::string log = R"(ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : (C7519) warpgroup.arrive is injected in around line 2485 by compiler to allow use of registers in GMMA in function 'k'
ptxas info    : (C7519) warpgroup.arrive is injected in around line 2510 by compiler to allow use of registers in GMMA in function 'k'
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the presence of Extern calls in the function 'k2'.
ptxas info    : (C7517) warpgroup.wait is injected in around line 855 by compiler to allow use of registers defined by GMMA in function 'k3'
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function 'k3'
ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted WG.AR in divergent path in the function 'k4'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 249 registers, used 1 barriers
)";
  CHECK(parse_ptxas_report(log, "k").wgmma_serializations == 2);
  CHECK(parse_ptxas_report(log, "k").registers == 249);
  CHECK(parse_ptxas_report(log, "k2").wgmma_serializations == 1);
  CHECK(parse_ptxas_report(log, "k3").wgmma_serializations == 2);
  CHECK(parse_ptxas_report(log, "k4").wgmma_serializations == 1);
  CHECK(parse_ptxas_report(log, "kk").wgmma_serializations == 0);
}
