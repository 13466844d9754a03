// Test material for the disk cache: temporary directories, a sample entry, whole-file I/O,
// captured stderr, child processes with a time limit, and entry files forged byte by byte.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/jit/cache_entry.hpp"
#include "runtime/jit/kernel_build.hpp"

namespace attnjit::testing {

/// A fresh directory under the system temp directory, removed with its contents.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline const std::string kCacheKey = "0123456789abcdef0123456789abcdef";
inline const std::string kOtherCacheKey = "fedcba9876543210fedcba9876543210";

/// The plan text of tiny_sources().
inline const std::string kText = "test set: one kernel";

/// A set of one tiny forward kernel (it writes 1 to *out), quick for NVRTC.
std::vector<runtime::KernelSource> tiny_sources();

/// Two kernels (a min/max kernel and a forward kernel) with binary blobs, stored under `key`.
runtime::CacheEntry sample_entry(const std::string& key = kCacheKey);

/// Whether every field of `a` and `b` is equal.
bool same_entry(const runtime::CacheEntry& a, const runtime::CacheEntry& b);

std::string read_all(const std::filesystem::path& path);
void write_all(const std::filesystem::path& path, const std::string& bytes);

/// Runs `body` with stderr redirected to `file` and returns what it wrote there.
template <class Body>
std::string capture_stderr(const std::filesystem::path& file, Body body) {
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  return read_all(file);
}

/// Runs `body` (returning an exit status) in a forked child killed by SIGALRM after `seconds`;
/// returns the child's exit status, or 128 + the signal that ended it. An exception escaping
/// `body` exits with 99.
template <class Body>
int run_in_child(unsigned seconds, Body body) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::alarm(seconds);
    int code = 99;
    try {
      code = body();
    } catch (...) {
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// An entry file with a valid header and checksum around `metadata` (any text, e.g. JSON that
/// breaks the entry's limits) followed by `blobs`.
std::string forge_entry(std::string_view metadata, std::string_view blobs);

/// The 64-byte ELF header of a cubin for SM version `sm` (e.g. 80): `new_abi` as CUDA 13 writes
/// it (ELFOSABI_CUDA_V2, the SM in e_flags bits 8-15), else as CUDA 12 (bits 0-7).
std::string cubin_header(int sm, bool new_abi = true);

}  // namespace attnjit::testing
