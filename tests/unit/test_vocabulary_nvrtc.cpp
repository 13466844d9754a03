// The tile vocabulary's test kernels (tests/support/vocabulary_kernels) compile with NVRTC for
// the architectures they target, without spills: the headers stay self-contained and
// NVRTC-compilable without a device. The GPU tests run the same kernels.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/jit/nvrtc.hpp"
#include "support/vocabulary_kernels.hpp"

using namespace attnjit;

TEST_CASE("the vocabulary's test kernels compile for sm_80 and sm_90a", "[nvrtc][vocabulary]") {
  const std::vector<runtime::NvrtcHeader> headers = testing::template_headers();
  for (const testing::VocabularyKernel& kernel : testing::vocabulary_kernels()) {
    for (const char* arch : {"sm_80", "sm_90a"}) {
      if (kernel.needs_sm90a && std::string(arch) != "sm_90a") continue;
      INFO(kernel.program << " for " << arch);
      const runtime::NvrtcOutput output = runtime::nvrtc_compile(
          kernel.source, kernel.program, headers, arch, {}, kernel.entries[0]);
      for (const std::string& entry : kernel.entries) {
        INFO(entry);
        CHECK(output.ptx.find(".entry " + entry + "(") != std::string::npos);
        const runtime::PtxasReport report = runtime::parse_ptxas_report(output.log, entry);
        CHECK(report.registers > 0);
        CHECK(report.spill_bytes() == 0);
        CHECK(report.wgmma_serializations == 0);
      }
    }
  }
}
