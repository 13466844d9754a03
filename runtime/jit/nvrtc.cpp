// NVRTC compilation, the source dump on failure and the ptxas report parser.
#include "runtime/jit/nvrtc.hpp"

#include <fmt/format.h>
#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;

void check_nvrtc(nvrtcResult result, std::string_view call) {
  if (result != NVRTC_SUCCESS) {
    throw DeviceError(fmt::format("{} failed: {}", call, nvrtcGetErrorString(result)));
  }
}

/// One nvrtcProgram, destroyed with its owner. Never shared between threads.
class Program {
 public:
  Program(std::string_view source, std::string_view name, std::span<const NvrtcHeader> headers)
      : source_(source), name_(name) {
    for (const NvrtcHeader& header : headers) {
      header_names_.emplace_back(header.name);
      header_sources_.emplace_back(header.source);
    }
    std::vector<const char*> names;
    std::vector<const char*> sources;
    for (std::size_t i = 0; i < headers.size(); ++i) {
      names.push_back(header_names_[i].c_str());
      sources.push_back(header_sources_[i].c_str());
    }
    check_nvrtc(nvrtcCreateProgram(&program_, source_.c_str(), name_.c_str(),
                                   static_cast<int>(headers.size()), sources.data(), names.data()),
                "nvrtcCreateProgram");
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }

  nvrtcProgram get() const { return program_; }

 private:
  std::string source_;
  std::string name_;
  std::vector<std::string> header_names_;
  std::vector<std::string> header_sources_;
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram program) {
  std::size_t size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  check_nvrtc(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  // The size counts the terminating NUL.
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

std::string program_ptx(nvrtcProgram program) {
  std::size_t size = 0;
  check_nvrtc(nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check_nvrtc(nvrtcGetPTX(program, ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

std::string program_cubin(nvrtcProgram program) {
  std::size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

/// `name` with every character outside [A-Za-z0-9._-] replaced, safe as one path component.
std::string safe_file_name(std::string_view name) {
  std::string safe;
  for (const char c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    safe.push_back(plain ? c : '_');
  }
  if (safe.empty() || safe == "." || safe == "..") safe = "program";
  return safe;
}

/// Where a header named `name` goes inside the dump directory: its include path when that
/// stays inside the directory, else a flattened name.
fs::path header_dump_path(std::string_view name) {
  const fs::path path(name);
  bool inside = path.is_relative() && !path.empty();
  for (const fs::path& part : path) inside = inside && part != "..";
  return inside ? path : fs::path(safe_file_name(name));
}

void write_file(const fs::path& path, std::string_view content) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

fs::path dump_root() {
  const char* configured = std::getenv("ATTNJIT_DUMP_DIR");
  if (configured != nullptr && *configured != '\0') return fs::path(configured);
  return fs::temp_directory_path() / fmt::format("attnjit-dump-{}", getpid());
}

/// Writes the failed program, its headers, options and log to a fresh directory and returns
/// the path of the source file.
fs::path dump_program(std::string_view source, std::string_view program_name,
                      std::span<const NvrtcHeader> headers, std::span<const std::string> options,
                      std::string_view log) {
  static std::atomic<unsigned> counter{0};
  std::string file_name = safe_file_name(program_name);
  const fs::path directory =
      dump_root() / fmt::format("{}-{}-{}", file_name, getpid(), counter.fetch_add(1));
  fs::create_directories(directory);
  if (!fs::path(file_name).has_extension()) file_name += ".cu";
  const fs::path source_path = directory / file_name;
  write_file(source_path, source);
  for (const NvrtcHeader& header : headers) {
    write_file(directory / header_dump_path(header.name), header.source);
  }
  write_file(directory / "options.txt", fmt::format("{}\n", fmt::join(options, "\n")));
  write_file(directory / "nvrtc.log", log);
  return source_path;
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

/// The number written just before the first `suffix` in `line` ("8" in "Used 8 registers").
std::optional<int> number_before(std::string_view line, std::string_view suffix) {
  const auto position = line.find(suffix);
  if (position == std::string_view::npos) return std::nullopt;
  std::size_t end = position;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  int value = 0;
  const auto [ptr, errc] = std::from_chars(line.data() + begin, line.data() + end, value);
  if (begin == end || errc != std::errc() || ptr != line.data() + end) return std::nullopt;
  return value;
}

/// The quoted name after `marker` ("k" in "Compiling entry function 'k' for 'sm_90'").
std::optional<std::string_view> quoted_after(std::string_view line, std::string_view marker) {
  const auto position = line.find(marker);
  if (position == std::string_view::npos) return std::nullopt;
  const auto begin = position + marker.size();
  const auto end = line.find('\'', begin);
  if (end == std::string_view::npos) return std::nullopt;
  return line.substr(begin, end - begin);
}

}  // namespace

PtxasReport parse_ptxas_report(std::string_view log, std::string_view kernel_name) {
  PtxasReport report;
  const std::string quoted_kernel = fmt::format("'{}'", kernel_name);
  std::string_view compiling;   // the function whose "Used" line comes next
  std::string_view properties;  // the function whose stack/spill line comes next
  bool have_usage = false;
  while (!log.empty()) {
    const auto newline = log.find('\n');
    const std::string_view line = log.substr(0, newline);
    log = newline == std::string_view::npos ? std::string_view() : log.substr(newline + 1);

    if (!kernel_name.empty() && line.find(quoted_kernel) != line.npos) {
      // By the messages' text, not a list of codes: ptxas 13.0 has eleven reasons to
      // serialize (C7510-C7521, among them C7520: a warpgroup.arrive it inserted in a path it
      // cannot prove uniform) and two kinds of injected arrive or wait.
      for (std::string_view message :
           {"wgmma.mma_async instructions are serialized", "warpgroup.arrive is injected",
            "warpgroup.wait is injected"}) {
        if (line.find(message) != line.npos) ++report.wgmma_serializations;
      }
    }
    if (auto name = quoted_after(line, "Compiling entry function '")) {
      compiling = *name;
    } else if (auto other = quoted_after(line, "Compiling function '")) {
      compiling = *other;
    } else if (const auto at = line.find("Function properties for "); at != line.npos) {
      properties = trim(line.substr(at + std::string_view("Function properties for ").size()));
    } else if (line.find("bytes stack frame") != line.npos) {
      if (properties == kernel_name) {
        report.stack_bytes = number_before(line, "bytes stack frame").value_or(0);
        report.spill_store_bytes = number_before(line, "bytes spill stores").value_or(0);
        report.spill_load_bytes = number_before(line, "bytes spill loads").value_or(0);
      }
      properties = {};
    } else if (!have_usage && compiling == kernel_name && line.find("Used ") != line.npos) {
      const std::string_view usage = line.substr(line.find("Used "));
      report.registers = number_before(usage, "registers").value_or(0);
      report.static_smem_bytes = number_before(usage, "bytes smem").value_or(0);
      have_usage = true;
    }
  }
  return report;
}

NvrtcOutput nvrtc_compile(std::string_view source, std::string_view program_name,
                          std::span<const NvrtcHeader> headers, std::string_view arch,
                          std::span<const std::string> extra_options,
                          std::string_view kernel_name) {
  const auto started = std::chrono::steady_clock::now();
  const bool real_arch = arch.starts_with("sm_");
  if (!real_arch && !arch.starts_with("compute_")) {
    throw Error(fmt::format(
        "arch: got '{}'; accepted: sm_<NN>[a|f] (CUBIN and PTX) or compute_<NN>[a|f] (PTX)", arch));
  }
  std::vector<std::string> options = {fmt::format("--gpu-architecture={}", arch), "-std=c++17",
                                      "--ptxas-options=-v"};
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());

  const Program program(source, program_name, headers);
  const nvrtcResult compiled = nvrtcCompileProgram(
      program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  NvrtcOutput output;
  output.log = program_log(program.get());
  if (compiled != NVRTC_SUCCESS) {
    std::string dumped;
    try {
      dumped = "source dumped to " +
               dump_program(source, program_name, headers, options, output.log).string();
    } catch (const std::exception& error) {
      dumped = fmt::format("source dump failed: {}", error.what());
    }
    throw DeviceError(fmt::format("NVRTC failed to compile '{}' for {}: {}; {}\n{}", program_name,
                                  arch, nvrtcGetErrorString(compiled), dumped, output.log));
  }
  output.ptx = program_ptx(program.get());
  if (real_arch) {
    output.cubin = program_cubin(program.get());
    output.report = parse_ptxas_report(output.log, kernel_name);
  }
  output.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return output;
}

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

}  // namespace attnjit::runtime
