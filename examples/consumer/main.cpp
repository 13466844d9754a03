// Parses a spec, compiles its kernels with attnjit's C++ API and prints what ptxas reported;
// then builds a mask of the mask language (attnjit/masks.hpp) on the host and compiles the spec
// with it. The default spec names target=sm_80, so NVRTC compiles it without a GPU or a driver.
#include <attnjit/error.hpp>
#include <attnjit/jit.hpp>
#include <attnjit/masks.hpp>
#include <attnjit/spec.hpp>

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  const char* text = argc > 1 ? argv[1] : "dtype=bf16 head_dim=64 mask=causal target=sm_80";
  try {
    attnjit::AttentionSpec spec = attnjit::parse_spec(text);
    const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
    const attnjit::jit::CompileInfo& info = kernel.info();
    std::printf("spec: %s\ncache: %s, %.0f ms\n", info.spec_text.c_str(),
                std::string(attnjit::jit::name_of(info.cache)).c_str(), info.compile_ms);
    for (const attnjit::jit::KernelReport& report : info.kernels) {
      std::printf("  %s (%s): %d registers, %d spill bytes, %d threads\n", report.name.c_str(),
                  report.role.c_str(), report.registers, report.spill_bytes, report.threads);
    }

    // Ten tokens in three documents, each seen whole, or within two keys of the diagonal.
    const attnjit::HostMask mask =
        attnjit::build_host_mask("document([4,3,3]) | sliding_window(2)", 1, 10, 10);
    spec.mask = mask.spec;
    const attnjit::jit::Kernel masked = attnjit::jit::compile(spec);
    std::printf("mask: %s, %zu tensor(s), %zu kernels\n",
                attnjit::to_string(masked.spec().mask).c_str(), mask.tensors.size(),
                masked.info().kernels.size());
    return info.kernels.empty() ? 1 : 0;
  } catch (const attnjit::Error& error) {
    std::fprintf(stderr, "attnjit_consumer: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attnjit_consumer: %s\n", error.what());
    return 1;
  }
}
