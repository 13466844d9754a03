// The disk cache never fails a compile: a full disk, no cache directory, a directory, socket or
// FIFO where an entry or a lock belongs, unreadable entries and directories, other users'
// files. Each compile succeeds in memory with one warning per process naming the path, the
// reason and ATTNJIT_DISK_CACHE; entries that cannot be used are replaced where permissions
// allow. Listing and clearing go on past such files. Permission cases run in a child that
// drops root's privileges (root reads and writes through mode bits).
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/disk_cache.hpp"
#include "runtime/jit/kernel_build.hpp"
#include "support/cache_fixtures.hpp"
#include "support/env_override.hpp"

using namespace attnjit;
using namespace attnjit::runtime;
using namespace attnjit::testing;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

/// What one load_or_build of the tiny set did.
struct Outcome {
  jit::CacheLevel level = jit::CacheLevel::memory;
  bool compiled = false;  ///< a kernel with a cubin came back
  std::string output;     ///< what it printed on stderr
};

/// load_or_build of the tiny set for sm_80 under kCacheKey, as a fresh process would do it
/// (its one warning not printed yet).
Outcome compile_tiny(const fs::path& capture) {
  reset_cache_warning();
  Outcome out;
  out.output = capture_stderr(capture, [&] {
    const CacheEntry entry =
        load_or_build(kCacheKey, kText, /*use_disk=*/true, out.level, tiny_sources(), Arch::sm_80);
    out.compiled = entry.kernels.size() == 1 && !entry.kernels[0].cubin.empty();
  });
  return out;
}

/// How many cache warnings `output` holds.
int warnings(const std::string& output) {
  int count = 0;
  for (std::size_t at = output.find("attnjit: kernel cache: "); at != std::string::npos;
       at = output.find("attnjit: kernel cache: ", at + 1)) {
    ++count;
  }
  return count;
}

/// Checks the one warning: it names `path` and `reason`, and the way out.
void check_warning(const std::string& output, const std::string& path, const std::string& reason) {
  INFO(output);
  CHECK(warnings(output) == 1);
  CHECK_THAT(output, Catch::Contains("'" + path + "'") && Catch::Contains("(" + reason + ")") &&
                         Catch::Contains("ATTNJIT_DISK_CACHE=off"));
}

/// Whether this process can act as another user (it runs as root).
bool can_drop_privileges() {
  return ::geteuid() == 0;
}

/// In a child: becomes user nobody when this process is root; false when that fails.
bool drop_to_nobody() {
  return !can_drop_privileges() || (::setgid(kNobody) == 0 && ::setuid(kNobody) == 0);
}

/// Makes `path` an empty file that a child running as nobody can write.
void make_shared_file(const fs::path& path) {
  write_all(path, "");
  ::chmod(path.c_str(), 0666);
}

/// Runs compile_tiny in a child, as user nobody when this process is root; the outcome's
/// level and output come back through the exit status and `capture`. `setup` runs in the
/// child first, with the privileges of this process.
Outcome compile_in_child(const fs::path& capture, const std::function<void()>& setup = {}) {
  make_shared_file(capture);
  const int status = run_in_child(120, [&] {
    if (setup) setup();
    if (!drop_to_nobody()) return 98;
    const Outcome out = compile_tiny(capture);
    return out.compiled ? 10 + static_cast<int>(out.level) : 1;
  });
  Outcome out;
  out.compiled = status >= 10 && status <= 12;
  if (out.compiled) out.level = static_cast<jit::CacheLevel>(status - 10);
  out.output = read_all(capture);
  INFO("child status " << status << ", output: " << out.output);
  CHECK(out.compiled);
  return out;
}

/// Hands `path` to user nobody when this process is root (else it is this process's already).
void give_to_nobody(const fs::path& path) {
  if (can_drop_privileges()) REQUIRE(::chown(path.c_str(), kNobody, kNobody) == 0);
}

void make_socket(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.string().size() < sizeof(address.sun_path));
  std::strcpy(address.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  ::close(fd);
}

/// The files of `dir` whose names contain `part`.
int files_with(const fs::path& dir, const std::string& part) {
  int count = 0;
  for (const auto& item : fs::directory_iterator(dir)) {
    if (item.path().filename().string().find(part) != std::string::npos) ++count;
  }
  return count;
}

/// A fresh cache directory `<tmp>/cache` that ATTNJIT_CACHE_DIR names for the test.
struct CacheDir {
  TempDir tmp;
  fs::path dir = tmp.path / "cache";
  fs::path entry = dir / (kCacheKey + ".kernel");
  fs::path lock = dir / (kCacheKey + ".lock");
  fs::path capture = tmp.path / "stderr.txt";
  EnvOverride variable{"ATTNJIT_CACHE_DIR", dir.c_str()};
  EnvOverride mode{"ATTNJIT_DISK_CACHE", nullptr};
  CacheDir() {
    fs::create_directories(dir);
    // The child runs as nobody: it must reach the directory and write its stderr file.
    fs::permissions(tmp.path, fs::perms::all);
  }
  ~CacheDir() { ::chmod(dir.c_str(), 0755); }  // TempDir can remove it again
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;
};

}  // namespace

TEST_CASE("a full disk leaves the compile in memory, with one warning", "[cache]") {
  CacheDir cache;
  // Writes beyond 1 KiB fail with EFBIG (SIGXFSZ ignored), as a full disk fails them with
  // ENOSPC: the entry's temp file cannot be written.
  const int status = run_in_child(120, [&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1024, 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 97;
    const Outcome out = compile_tiny(cache.capture);
    return out.compiled && out.level == jit::CacheLevel::miss ? 0 : 1;
  });
  CHECK(status == 0);
  const std::string output = read_all(cache.capture);
  INFO(output);
  CHECK_THAT(output, Catch::Contains("attnjit: kernel cache: cannot write '" +
                                     cache.entry.string() + ".tmp.") &&
                         Catch::Contains("(File too large); the kernels are kept in memory only"));
  CHECK(warnings(output) == 1);
  CHECK(files_with(cache.dir, ".tmp.") == 0);
  CHECK_FALSE(fs::exists(cache.entry));
  // With room again, the next compile stores the entry and the one after loads it.
  CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::miss);
  CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::disk);
}

TEST_CASE("no cache directory: the compile goes on without it", "[cache]") {
  TempDir tmp;
  const fs::path capture = tmp.path / "stderr.txt";
  const EnvOverride mode("ATTNJIT_DISK_CACHE", nullptr);
  {
    const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", nullptr);
    const EnvOverride xdg("XDG_CACHE_HOME", nullptr);
    const EnvOverride home("HOME", nullptr);
    const Outcome out = compile_tiny(capture);
    CHECK(out.compiled);
    CHECK(out.level == jit::CacheLevel::miss);
    CHECK(warnings(out.output) == 1);
    CHECK_THAT(out.output, Catch::Contains("ATTNJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are all "
                                           "unset") &&
                               Catch::Contains("compiling without it"));
  }
  write_all(tmp.path / "file", "a regular file");
  const fs::path under_file = tmp.path / "file" / "cache";
  const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", under_file.c_str());
  const Outcome out = compile_tiny(capture);
  CHECK(out.compiled);
  CHECK(out.level == jit::CacheLevel::miss);
  check_warning(out.output, under_file.string(), "Not a directory");
}

TEST_CASE("a directory or socket at an entry's path is replaced where it can be", "[cache]") {
  CacheDir cache;
  SECTION("an empty directory: removed, the entry stored") {
    fs::create_directory(cache.entry);
    const Outcome out = compile_tiny(cache.capture);
    CHECK(out.level == jit::CacheLevel::miss);
    CHECK_THAT(out.output, Catch::Contains("is corrupt (not a regular file); rebuilding"));
    CHECK(warnings(out.output) == 0);
    CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::disk);
  }
  SECTION("a socket: removed, the entry stored") {
    make_socket(cache.entry);
    const Outcome out = compile_tiny(cache.capture);
    CHECK(out.level == jit::CacheLevel::miss);
    CHECK_THAT(out.output, Catch::Contains("is corrupt (not a regular file)"));
    CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::disk);
  }
  SECTION("a directory with files: left, the kernels kept in memory") {
    fs::create_directory(cache.entry);
    write_all(cache.entry / "someone's file", "x");
    const Outcome out = compile_tiny(cache.capture);
    CHECK(out.compiled);
    CHECK(out.level == jit::CacheLevel::miss);
    check_warning(out.output, cache.entry.string(), "Is a directory");
    CHECK_THAT(out.output, Catch::Contains("cannot replace '"));
    CHECK(fs::exists(cache.entry / "someone's file"));
    CHECK(files_with(cache.dir, ".tmp.") == 0);
    // One warning per process: the next compile in this process says nothing more about it.
    jit::CacheLevel level = jit::CacheLevel::memory;
    const std::string again = capture_stderr(cache.capture, [&] {
      load_or_build(kCacheKey, kText, true, level, tiny_sources(), Arch::sm_80);
    });
    CHECK(level == jit::CacheLevel::miss);
    CHECK(warnings(again) == 0);
  }
}

TEST_CASE("a directory, FIFO, socket or link at the lock's path: compiled and stored anyway",
          "[cache]") {
  CacheDir cache;
  SECTION("directory") {
    fs::create_directory(cache.lock);
  }
  SECTION("FIFO") {
    REQUIRE(::mkfifo(cache.lock.c_str(), 0644) == 0);
  }
  SECTION("socket") {
    make_socket(cache.lock);
  }
  SECTION("dangling symbolic link") {
    fs::create_symlink(cache.tmp.path / "nowhere", cache.lock);
  }
  const Outcome out = compile_tiny(cache.capture);
  CHECK(out.compiled);
  CHECK(out.level == jit::CacheLevel::miss);
  check_warning(out.output, cache.lock.string(), "it is not a regular file");
  CHECK_THAT(out.output, Catch::Contains("going on without the lock"));
  CHECK_FALSE(fs::exists(cache.tmp.path / "nowhere"));
  CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::disk);
}

TEST_CASE("an entry of mode 000: rebuilt and replaced", "[cache]") {
  CacheDir cache;
  give_to_nobody(cache.dir);
  compile_in_child(cache.capture);  // stores the entry, as nobody
  REQUIRE(fs::exists(cache.entry));
  REQUIRE(::chmod(cache.entry.c_str(), 0) == 0);
  const Outcome out = compile_in_child(cache.capture);
  CHECK(out.level == jit::CacheLevel::miss);
  check_warning(out.output, cache.entry.string(), "Permission denied");
  CHECK_THAT(out.output,
             Catch::Contains("cannot open '") && Catch::Contains("compiling the kernels instead"));
  CHECK((fs::status(cache.entry).permissions() & fs::perms::owner_read) != fs::perms::none);
  CHECK(compile_in_child(cache.capture).level == jit::CacheLevel::disk);
}

TEST_CASE("a cache directory of mode 000: compiled in memory", "[cache]") {
  CacheDir cache;
  give_to_nobody(cache.dir);
  compile_in_child(cache.capture);
  REQUIRE(::chmod(cache.dir.c_str(), 0) == 0);
  const Outcome out = compile_in_child(cache.capture);
  CHECK(out.level == jit::CacheLevel::miss);
  check_warning(out.output, cache.dir.string(), "Permission denied");
  CHECK_THAT(out.output,
             Catch::Contains("cannot write '") && Catch::Contains("using it read-only"));
}

TEST_CASE("another user's unreadable entry and lock: compiled, replaced where allowed", "[cache]") {
  if (!can_drop_privileges()) {
    WARN("skipped: creating another user's files needs root, and this test runs as uid "
         << ::geteuid());
    return;
  }
  CacheDir cache;
  compile_tiny(cache.capture);  // root's entry and lock, mode 0644
  REQUIRE(::chmod(cache.entry.c_str(), 0600) == 0);
  REQUIRE(::chmod(cache.lock.c_str(), 0600) == 0);
  SECTION("in a sticky directory, as /tmp: left in place") {
    REQUIRE(::chmod(cache.dir.c_str(), 01777) == 0);
    const Outcome out = compile_in_child(cache.capture);
    CHECK(out.level == jit::CacheLevel::miss);
    check_warning(out.output, cache.lock.string(), "Permission denied");
    struct stat info {};
    REQUIRE(::stat(cache.entry.c_str(), &info) == 0);
    CHECK(info.st_uid == 0);
    CHECK(files_with(cache.dir, ".tmp.") == 0);
  }
  SECTION("in a directory all may write: replaced") {
    REQUIRE(::chmod(cache.dir.c_str(), 0777) == 0);
    CHECK(compile_in_child(cache.capture).level == jit::CacheLevel::miss);
    struct stat info {};
    REQUIRE(::stat(cache.entry.c_str(), &info) == 0);
    CHECK(info.st_uid == kNobody);
    CHECK(compile_in_child(cache.capture).level == jit::CacheLevel::disk);
  }
}

TEST_CASE("an entry whose cubin is for another arch is rebuilt and replaced", "[cache]") {
  CacheDir cache;
  CacheEntry forged =
      compile_tiny(cache.capture).compiled ? *DiskCache(cache.dir).load(kCacheKey) : CacheEntry{};
  REQUIRE(forged.kernels.size() == 1);
  forged.kernels[0].cubin = cubin_header(86) + forged.kernels[0].cubin.substr(64);
  DiskCache(cache.dir).store(forged);
  const Outcome out = compile_tiny(cache.capture);
  CHECK(out.level == jit::CacheLevel::miss);
  CHECK_THAT(out.output,
             Catch::Contains("does not match its plan (kernel 'attnjit_test_kernel' holds a cubin "
                             "for sm_86, the spec targets sm_80); rebuilding"));
  CHECK(cubin_sm_version(DiskCache(cache.dir).load(kCacheKey)->kernels[0].cubin) == 80);
  CHECK(compile_tiny(cache.capture).level == jit::CacheLevel::disk);
}

TEST_CASE("list and clear go on past entries they cannot read or remove", "[cache]") {
  CacheDir cache;
  const DiskCache disk(cache.dir);
  disk.store(sample_entry(kCacheKey));
  disk.store(sample_entry(kOtherCacheKey));
  const std::string third = "00000000000000000000000000000000";
  const fs::path blocked = cache.dir / (third + ".kernel");
  fs::create_directory(blocked);
  write_all(blocked / "inside", "x");
  REQUIRE(::mkfifo((cache.dir / (kOtherCacheKey + ".lock")).c_str(), 0644) == 0);
  give_to_nobody(cache.dir);
  for (const auto& item : fs::directory_iterator(cache.dir)) give_to_nobody(item.path());
  REQUIRE(::chmod(cache.entry.c_str(), 0) == 0);

  const fs::path report = cache.tmp.path / "report.txt";
  make_shared_file(report);
  const int status = run_in_child(60, [&] {
    if (!drop_to_nobody()) return 98;
    std::string text;
    for (const EntrySummary& entry : disk.list()) {
      text += entry.key + " " + entry.spec_text + " " + entry.problem + "\n";
      // An unreadable entry still has the size the directory lists.
      if (entry.spec_text == "<unreadable>" && entry.bytes == 0) return 7;
    }
    const ClearResult cleared = disk.clear();
    text += "removed " + std::to_string(cleared.removed) + "\n";
    for (const std::string& problem : cleared.problems) text += problem + "\n";
    write_all(report, text);
    return 0;
  });
  REQUIRE(status == 0);
  const std::string text = read_all(report);
  INFO(text);
  CHECK_THAT(text, Catch::Contains(third + " <corrupt> \n"));
  CHECK_THAT(text, Catch::Contains(kCacheKey + " <unreadable> kernel cache: cannot open '" +
                                   cache.entry.string() + "' (Permission denied)\n"));
  CHECK_THAT(text, Catch::Contains(kOtherCacheKey + " " + sample_entry().spec_text + " \n"));
  // Both entries go (a directory's write permission removes them); the directory in the way
  // of one is reported, and the FIFO at a lock's path removed.
  CHECK_THAT(text, Catch::Contains("removed 2\nkernel cache: cannot remove '" + blocked.string() +
                                   "' (Directory not empty)\n"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 5);
  CHECK_FALSE(fs::exists(fs::symlink_status(cache.dir / (kOtherCacheKey + ".lock"))));
  CHECK(fs::exists(blocked / "inside"));
}

TEST_CASE("clearing through the API reports what it could not remove", "[cache]") {
  CacheDir cache;
  DiskCache(cache.dir).store(sample_entry(kOtherCacheKey));
  fs::create_directory(cache.entry);
  write_all(cache.entry / "inside", "x");
  const jit::CacheClearReport report = jit::clear_disk_cache();
  CHECK(report.removed == 1);
  REQUIRE(report.problems.size() == 1);
  CHECK(report.problems[0] ==
        "kernel cache: cannot remove '" + cache.entry.string() + "' (Directory not empty)");
  DiskCache(cache.dir).store(sample_entry(kOtherCacheKey));
  CHECK(attnjit_cache_clear(0, 1) == ATTNJIT_DEVICE_ERROR);
  CHECK_THAT(attnjit_last_error(),
             Catch::StartsWith("disk cache: could not remove 1 files (1 entries removed): "
                               "kernel cache: cannot remove '" +
                               cache.entry.string() + "' (Directory not empty)"));
  CHECK_FALSE(fs::exists(cache.dir / (kOtherCacheKey + ".kernel")));
}

TEST_CASE("list and clear of a directory that cannot be read fail naming it", "[cache]") {
  CacheDir cache;
  DiskCache(cache.dir).store(sample_entry());
  give_to_nobody(cache.dir);
  REQUIRE(::chmod(cache.dir.c_str(), 0) == 0);
  const fs::path report = cache.tmp.path / "report.txt";
  make_shared_file(report);
  const int status = run_in_child(60, [&] {
    if (!drop_to_nobody()) return 98;
    std::string text;
    for (const auto& step : {std::function<void()>([&] { DiskCache(cache.dir).list(); }),
                             std::function<void()>([&] { DiskCache(cache.dir).clear(); })}) {
      try {
        step();
      } catch (const CacheFileError& error) {
        text += std::string(error.what()) + "\n";
      }
    }
    write_all(report, text);
    return 0;
  });
  REQUIRE(status == 0);
  const std::string expected =
      "kernel cache: cannot list '" + cache.dir.string() + "' (Permission denied)\n";
  CHECK(read_all(report) == expected + expected);
}
