// attnc: emit the IR, CUDA and PTX of an attention spec, compile it through the kernel
// cache, manage the cache, run it on the GPU, time it, build FlashMask vectors on the GPU, and
// show what a mask expression compiles to. Exit statuses: commands.hpp (ExitStatus).
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

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
  if (spec.target != attnjit::Arch::auto_detect) return spec;
  try {
    spec.target = attnjit::jit::current_device_arch();
    fmt::print(stderr, "attnc: compiling for {}, the current GPU's target (--arch to choose)\n",
               attnjit::name_of(spec.target));
  } catch (const attnjit::DeviceError& error) {
    spec.target = kNoDeviceArch;
    // The reason's head: "no CUDA driver", "no CUDA device", "device X has compute capability
    // 7.5", ...
    const std::string_view reason = error.what();
    fmt::print(stderr,
               "attnc: no supported GPU ({}): compiling for {}, the newest target (--arch to "
               "choose)\n",
               reason.substr(0, reason.find_first_of(":;\n")), attnjit::name_of(spec.target));
  }
  return spec;
}

void throw_write_failure(std::string_view what, const std::filesystem::path& path, int error) {
  throw EnvironmentFailure(fmt::format("{}: cannot write '{}' ({})", what, path.string(),
                                       error != 0 ? std::strerror(error) : "an I/O error"));
}

}  // namespace attnc

namespace {

using attnc::kExitBadInput;
using attnc::kExitEnvironment;
using attnc::kExitFailure;
using attnc::kExitInternal;

constexpr const char* kExitStatusHelp =
    "Exit status: 0 success; 1 a result check failed (run --check) or another failure; 2 bad "
    "input (a spec, option or variable; one line on stderr); 3 an internal error (a bug); 4 "
    "the environment failed (an output or cache file that cannot be read or written, no CUDA "
    "driver or device, a CUDA driver or NVRTC failure).";

int fail(int code, std::string_view what) {
  std::fprintf(stderr, "attnc: %.*s\n", static_cast<int>(what.size()), what.data());
  return code;
}

// Standard output is buffered: a full disk may show only when it is flushed or closed.
int finish_stdout(int status) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0 && !std::ferror(stdout);
  const int flush_error = errno;
  errno = 0;
  const bool closed = std::fclose(stdout) == 0;
  if (flushed && closed) return status;
  const int error = !flushed ? flush_error : errno;
  if (status != 0) return status;  // the first failure is the one reported
  return fail(kExitEnvironment, fmt::format("cannot write the output to standard output ({})",
                                            error != 0 ? std::strerror(error) : "an I/O error"));
}

// One line: the first line of a message (NVRTC logs and dumps follow on later lines for
// device errors, which are printed whole).
std::string first_line(std::string_view text) {
  return std::string(text.substr(0, text.find('\n')));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnc: the attnjit compiler driver"};
  app.footer(kExitStatusHelp);
  app.require_subcommand(1);
  attnc::add_emit(app);
  attnc::add_compile(app);
  attnc::add_cache(app);
  attnc::add_run(app);
  attnc::add_bench(app);
  attnc::add_mask_build(app);
  attnc::add_mask(app);
  attnc::add_version(app);
  int status = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    status = app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    status = app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    status = app.exit(version);
  } catch (const CLI::ParseError& error) {
    status = fail(kExitBadInput, first_line(error.what()));
  } catch (const attnjit::Error& error) {
    status = fail(kExitBadInput, first_line(error.what()));
  } catch (const attnjit::DeviceError& error) {
    status = fail(kExitEnvironment, error.what());
  } catch (const attnc::EnvironmentFailure& error) {
    status = fail(kExitEnvironment, error.what());
  } catch (const attnc::CheckFailure& error) {
    status = fail(kExitFailure, error.what());
  } catch (const attnjit::InternalError& error) {
    status = fail(kExitInternal, error.what());
  } catch (const std::system_error& error) {
    // fmt::print throws this when standard output fails while it is written (a full disk).
    status = std::ferror(stdout) != 0
                 ? fail(kExitEnvironment, fmt::format("cannot write the output to standard "
                                                      "output ({})",
                                                      error.code().message()))
                 : fail(kExitEnvironment, error.what());
  } catch (const std::exception& error) {
    status = fail(kExitFailure, error.what());
  }
  return finish_stdout(status);
}
