// The subcommands of attnc. Each add_* registers its options and callback on the app; a
// callback throws attnjit::Error for bad input (main turns it into exit code 2).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "attnjit/spec.hpp"

namespace attnc {

void add_emit(CLI::App& app);
void add_compile(CLI::App& app);
void add_cache(CLI::App& app);
void add_run(CLI::App& app);
void add_bench(CLI::App& app);
void add_mask_build(CLI::App& app);
void add_mask(CLI::App& app);

/// The spec of --spec with --arch applied (absent: keep the spec's target).
attnjit::AttentionSpec spec_with_arch(const std::string& spec_text,
                                      const std::optional<std::string>& arch);

/// As spec_with_arch, and a target still `auto` becomes the current device's arch, or sm_90
/// when there is no device (emission and compilation need no GPU).
attnjit::AttentionSpec spec_for_emission(const std::string& spec_text,
                                         const std::optional<std::string>& arch);

}  // namespace attnc
