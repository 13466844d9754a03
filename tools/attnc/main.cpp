// attnc: emit the IR, CUDA and PTX of an attention spec, compile it through the kernel
// cache, manage the cache, run it on the GPU, time it, build FlashMask vectors on the GPU, and
// show what a mask expression compiles to. Exit codes: 0 ok, 1 device or compile failure, 2
// bad input (one line on stderr), 3 internal error.
#include <fmt/format.h>

#include <cstdio>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {

attnjit::AttentionSpec spec_with_arch(const std::string& spec_text,
                                      const std::optional<std::string>& arch) {
  attnjit::AttentionSpec spec = attnjit::parse_spec(spec_text);
  if (arch) spec.target = attnjit::parse_arch(*arch, "--arch");
  return spec;
}

attnjit::AttentionSpec spec_for_emission(const std::string& spec_text,
                                         const std::optional<std::string>& arch) {
  attnjit::AttentionSpec spec = spec_with_arch(spec_text, arch);
  if (spec.target == attnjit::Arch::auto_detect) {
    try {
      spec.target = attnjit::jit::current_device_arch();
    } catch (const attnjit::DeviceError&) {
      spec.target = attnjit::Arch::sm_90;
    }
  }
  return spec;
}

}  // namespace attnc

namespace {

int fail(int code, std::string_view what) {
  std::fprintf(stderr, "attnc: %.*s\n", static_cast<int>(what.size()), what.data());
  return code;
}

// One line: the first line of a message (NVRTC logs and dumps follow on later lines for
// device errors, which are printed whole).
std::string first_line(std::string_view text) {
  return std::string(text.substr(0, text.find('\n')));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnc: the attnjit compiler driver"};
  app.require_subcommand(1);
  attnc::add_emit(app);
  attnc::add_compile(app);
  attnc::add_cache(app);
  attnc::add_run(app);
  attnc::add_bench(app);
  attnc::add_mask_build(app);
  attnc::add_mask(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    return fail(2, first_line(error.what()));
  } catch (const attnjit::Error& error) {
    return fail(2, first_line(error.what()));
  } catch (const attnjit::DeviceError& error) {
    return fail(1, error.what());
  } catch (const attnjit::InternalError& error) {
    return fail(3, error.what());
  } catch (const std::exception& error) {
    return fail(1, error.what());
  }
  return 0;
}
