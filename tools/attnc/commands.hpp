// The subcommands of attnc. Each add_* registers its options and callback on the app; a
// callback throws attnjit::Error for bad input, attnjit::DeviceError or EnvironmentFailure
// when the environment fails, CheckFailure when a result is wrong (main turns each into its
// exit status, ExitStatus).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "attnjit/spec.hpp"

namespace attnc {

/// attnc's exit statuses (attnc --help and docs/cli-exit-codes.md say the same).
enum ExitStatus : int {
  kExitOk = 0,
  kExitFailure = 1,      ///< a result check failed, or another failure
  kExitBadInput = 2,     ///< bad input: a spec, option or variable (one line on stderr)
  kExitInternal = 3,     ///< a bug in attnjit
  kExitEnvironment = 4,  ///< the environment failed: I/O, the CUDA driver or NVRTC, the cache
};

/// The environment failed outside the library: an output that cannot be written, a cache
/// that could not be fully listed or cleared. Exit status kExitEnvironment.
class EnvironmentFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A computed result that does not match its reference. Exit status kExitFailure.
class CheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A check of an integer option's text: a base-10 integer in [lo, hi]; otherwise CLI11 fails
/// with "<option>: got '<text>'; accepted: an integer from <lo> to <hi>" (exit status 2).
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
/// As integer_in for an unsigned 64-bit option (a seed).
CLI::Validator unsigned_64();
/// A check of a floating-point option's text: a finite number a float can hold.
CLI::Validator finite_number();

/// Throws EnvironmentFailure("<what>: cannot write '<path>' (<strerror(error)>)").
[[noreturn]] void throw_write_failure(std::string_view what, const std::filesystem::path& path,
                                      int error);

void add_emit(CLI::App& app);
void add_compile(CLI::App& app);
void add_cache(CLI::App& app);
void add_run(CLI::App& app);
void add_bench(CLI::App& app);
void add_mask_build(CLI::App& app);
void add_mask(CLI::App& app);
void add_version(CLI::App& app);

/// The help of the subcommands that take --spec: the syntax, examples, and every key with
/// what it accepts (attnjit::spec_keys()).
std::string spec_help();
/// The help of run's and bench's KV cache options (a spec with kv_cache), with an example.
std::string kv_cache_help();
/// The help of --arch for the subcommands that compile without a GPU.
std::string arch_help();
/// What `attnc --version` prints: the attnjit, NVRTC and CUDA driver versions, one per line
/// (without a driver, why not), without a final newline.
std::string version_report();

/// The spec of --spec with --arch applied (absent: keep the spec's target).
attnjit::AttentionSpec spec_with_arch(const std::string& spec_text,
                                      const std::optional<std::string>& arch);

/// The target of emission and compilation without a device: the newest kernel family's (sm90a,
/// the Hopper kernels), not sm_90's, which runs the sm80 family.
constexpr attnjit::Arch kNoDeviceArch = attnjit::Arch::sm_90a;

/// As spec_with_arch, and a target still `auto` becomes the current device's arch, or
/// kNoDeviceArch when there is no device (emission and compilation need no GPU); one line on
/// stderr says which and why.
attnjit::AttentionSpec spec_for_emission(const std::string& spec_text,
                                         const std::optional<std::string>& arch);

}  // namespace attnc
