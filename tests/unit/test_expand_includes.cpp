// templates::expand_includes: a generated kernel with its embedded headers expanded is one
// source that NVRTC compiles with no headers given (what `attnc emit --stage cuda --expand`
// prints).
#include <catch2/catch.hpp>

#include <string>

#include "attnjit/spec.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "embedded.hpp"
#include "runtime/jit/nvrtc.hpp"

using namespace attnjit;
using Catch::Contains;

namespace {

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace

TEST_CASE("expand_includes inlines embedded headers once each and keeps other includes", "[emit]") {
  const templates::EmbeddedFile* primitives = templates::find("attnjit/common/primitives.cuh");
  REQUIRE(primitives != nullptr);
  CHECK(templates::find("attnjit/no_such_header.cuh") == nullptr);
  const std::string expanded = templates::expand_includes(
      "#include <cuda_bf16.h>\n"
      "#include \"attnjit/common/primitives.cuh\"\n"
      "  #  include \"attnjit/common/primitives.cuh\"\n"
      "#include \"not_embedded.cuh\"\n"
      "int x;\n");
  CHECK_THAT(expanded, Contains("#include <cuda_bf16.h>\n"));
  CHECK_THAT(expanded, Contains("#include \"not_embedded.cuh\"\n"));
  CHECK(occurrences(expanded, "// ----- begin attnjit/common/primitives.cuh -----") == 1);
  CHECK(expanded.find("#include \"attnjit/") == std::string::npos);
  CHECK(expanded.find("#pragma once") == std::string::npos);
  CHECK(expanded.ends_with("int x;\n"));
}

TEST_CASE("an expanded sm_90a kernel compiles with NVRTC by itself", "[emit][nvrtc]") {
  AttentionSpec spec = parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90a");
  const Lowering ir = lower(spec);
  REQUIRE(ir.plan->kernels.size() == 1);
  const KernelDesc& kernel = ir.plan->kernels.front();
  const std::string expanded = templates::expand_includes(emit_kernel(ir, kernel));
  CHECK(expanded.find("#include \"attnjit/") == std::string::npos);
  CHECK_THAT(expanded, Contains("// ----- begin attnjit/sm90a/"));
  // Every embedded header the kernel reaches appears once.
  for (const templates::EmbeddedFile& file : templates::all()) {
    INFO(file.name);
    CHECK(occurrences(expanded, "// ----- begin " + std::string(file.name) + " -----") <= 1);
  }
  const std::string options[] = {"-default-device"};
  const runtime::NvrtcOutput out =
      runtime::nvrtc_compile(expanded, kernel.name + ".cu", {}, "sm_90a", options, kernel.name);
  CHECK_THAT(out.ptx, Contains("wgmma.mma_async"));
}
