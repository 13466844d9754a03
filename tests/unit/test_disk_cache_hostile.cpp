// The disk cache under hostile conditions: entries that are FIFOs, links or huge files,
// metadata that breaks the entry limits, symbolic-link lock files, locks held by other
// processes (the report and the timeout), lock files replaced while awaited, and clearing
// while a writer is at work.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "attnjit/error.hpp"
#include "runtime/jit/disk_cache.hpp"
#include "support/cache_fixtures.hpp"
#include "support/env_override.hpp"

using namespace attnjit::runtime;
using namespace attnjit::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string& kKey = kCacheKey;

/// The metadata JSON of sample_entry() with `field` of its first kernel set to `value`.
std::string metadata_with(const std::string& field, const std::string& value) {
  return R"({"key":")" + kKey + R"(","spec_text":"s","kernels":[{"role":"forward","name":"k",)" +
         R"("registers":1,"spill_store_bytes":0,"spill_load_bytes":0,"stack_bytes":0,)" +
         R"("static_smem_bytes":0,"threads":128,"dynamic_smem_bytes":0,"cubin_size":1,)" +
         R"("ptx_size":0,")" + field + R"(":)" + value + "}]}";
}

}  // namespace

TEST_CASE("a FIFO entry neither blocks a load nor survives it", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  const fs::path path = dir.path / (kKey + ".kernel");
  REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
  // In a child with a time limit: a blocking open() would wait for a writer forever.
  const int status = run_in_child(20, [&] {
    std::optional<CacheEntry> loaded;
    const std::string warning =
        capture_stderr(dir.path / "stderr.txt", [&] { loaded = cache.load(kKey); });
    return !loaded && warning.find("not a regular file") != std::string::npos ? 0 : 1;
  });
  CHECK(status == 0);
  CHECK_FALSE(fs::exists(fs::symlink_status(path)));
}

TEST_CASE("an entry that is a symbolic link is corrupt; its target is untouched", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path / "cache");
  const DiskCache elsewhere(dir.path / "other");
  elsewhere.store(sample_entry());
  const fs::path target = elsewhere.dir() / (kKey + ".kernel");
  fs::create_directories(cache.dir());
  const fs::path link = cache.dir() / (kKey + ".kernel");
  fs::create_symlink(target, link);
  std::optional<CacheEntry> loaded;
  const std::string warning =
      capture_stderr(dir.path / "stderr.txt", [&] { loaded = cache.load(kKey); });
  CHECK_FALSE(loaded.has_value());
  CHECK_THAT(warning, Catch::Contains("symbolic link"));
  CHECK_FALSE(fs::exists(fs::symlink_status(link)));
  CHECK(elsewhere.load(kKey).has_value());
}

TEST_CASE("a huge entry is rejected from its size, without reading it", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  const fs::path path = dir.path / (kKey + ".kernel");
  const auto make_huge = [&](bool valid_header) {
    const std::uint64_t size = std::uint64_t{3} << 30;  // sparse: takes no disk space
    std::string header = valid_header ? forge_entry("", "").substr(0, kEntryHeaderBytes) : "junk";
    if (valid_header) {
      for (int i = 0; i < 8; ++i)
        header[16 + i] = static_cast<char>(((size - 32) >> (8 * i)) & 0xff);
    }
    write_all(path, header);
    fs::resize_file(path, size);
  };
  for (const bool valid_header : {false, true}) {
    make_huge(valid_header);
    // With 1 GiB of address space more than now, reading 3 GiB cannot even be attempted.
    const int status = run_in_child(60, [&] {
      rlimit limit{};
      ::getrlimit(RLIMIT_AS, &limit);
      std::ifstream statm("/proc/self/statm");
      std::uint64_t pages = 0;
      statm >> pages;
      limit.rlim_cur = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + (1ull << 30);
      ::setrlimit(RLIMIT_AS, &limit);
      std::optional<CacheEntry> loaded;
      const auto start = std::chrono::steady_clock::now();
      const std::string warning =
          capture_stderr(dir.path / "stderr.txt", [&] { loaded = cache.load(kKey); });
      const bool quick = std::chrono::steady_clock::now() - start < 5s;
      return !loaded && quick && warning.find("is corrupt") != std::string::npos ? 0 : 1;
    });
    CHECK(status == 0);
    CHECK_FALSE(fs::exists(path));
  }
}

TEST_CASE("metadata beyond the entry limits is corrupt", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  const fs::path path = dir.path / (kKey + ".kernel");
  const auto expect_rejected = [&](const std::string& metadata, const std::string& reason) {
    INFO(metadata);
    write_all(path, forge_entry(metadata, "x"));
    std::optional<CacheEntry> loaded;
    const std::string warning =
        capture_stderr(dir.path / "stderr.txt", [&] { loaded = cache.load(kKey); });
    CHECK_FALSE(loaded.has_value());
    CHECK_THAT(warning, Catch::Contains(reason));
    CHECK_FALSE(fs::exists(path));
  };
  // The forged metadata is accepted as it is: only the field under test breaks it.
  write_all(path, forge_entry(metadata_with("threads", "128"), "x"));
  REQUIRE(cache.load(kKey).has_value());

  expect_rejected(R"({"key":")" + kKey + R"(","spec_text":"s","kernels":[]})", "1 to 64 kernels");
  expect_rejected(R"({"key":")" + kKey + R"(","spec_text":"s","kernels":{}})", "1 to 64 kernels");
  // One kernel field of the forged metadata set to a value out of bounds, and the reason given:
  // threads outside its range, threads not an integer, a size named by its field, and the rest.
  for (const std::string value : {"-5", "0", "1025"}) {
    expect_rejected(metadata_with("threads", value), "threads " + value + " outside [1, 1024]");
  }
  for (const char* value : {"4294967424", "128.5", "\"128\""}) {
    expect_rejected(metadata_with("threads", value), "'threads' is not an integer");
  }
  for (const auto& [field, value] :
       {std::pair{"dynamic_smem_bytes", "2147483647"}, std::pair{"dynamic_smem_bytes", "-1"},
        std::pair{"static_smem_bytes", "65536"}, std::pair{"registers", "256"}}) {
    expect_rejected(metadata_with(field, value), field);
  }
  expect_rejected(metadata_with("cubin_size", "18446744073709551615"), "'cubin_size'");
  expect_rejected(metadata_with("name", "\"../../x\""), "kernel name");
  expect_rejected(metadata_with("role", "\"\""), "role");
  expect_rejected("[1,2,3]", "not a JSON object");
  expect_rejected("{", "unparsable metadata");
  std::string long_key = metadata_with("threads", "128");
  long_key.replace(long_key.find(kKey), kKey.size(), std::string(100000, 'k'));
  write_all(path, forge_entry(long_key, "x"));
  const std::string warning =
      capture_stderr(dir.path / "stderr.txt", [&] { CHECK_FALSE(cache.load(kKey)); });
  CHECK_THAT(warning, Catch::Contains("malformed key"));
  CHECK(warning.size() < 300);
}

TEST_CASE("a lock file that is a symbolic link is refused, and nothing is created", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path / "cache");
  fs::create_directories(cache.dir());
  const fs::path target = dir.path / "elsewhere";
  fs::create_symlink(target, cache.dir() / (kKey + ".lock"));
  CHECK_THROWS_WITH(cache.lock(kKey),
                    Catch::Contains("not a regular file") && Catch::Contains(kKey + ".lock"));
  CHECK_THROWS_AS(cache.lock(kKey), CacheFileError);
  CHECK_FALSE(fs::exists(fs::symlink_status(target)));

  fs::remove(cache.dir() / (kKey + ".lock"));
  REQUIRE(::mkfifo((cache.dir() / (kKey + ".lock")).c_str(), 0644) == 0);
  CHECK_THROWS_WITH(cache.lock(kKey), Catch::Contains("not a regular file"));
}

TEST_CASE("ATTNJIT_LOCK_TIMEOUT_S sets the lock wait", "[cache]") {
  {
    const EnvOverride unset("ATTNJIT_LOCK_TIMEOUT_S", nullptr);
    CHECK(lock_timeout() == 600s);
  }
  {
    const EnvOverride set("ATTNJIT_LOCK_TIMEOUT_S", "2.5");
    CHECK(lock_timeout() == 2500ms);
  }
  {
    const EnvOverride zero("ATTNJIT_LOCK_TIMEOUT_S", "0");
    CHECK(lock_timeout() == 0ms);
  }
  for (const char* bad : {"-1", "soon", "1e9", "nan", "5s"}) {
    const EnvOverride set("ATTNJIT_LOCK_TIMEOUT_S", bad);
    CHECK_THROWS_WITH(lock_timeout(), Catch::StartsWith("ATTNJIT_LOCK_TIMEOUT_S: got '"));
  }
}

TEST_CASE("a lock held by another process: a report naming it, then a timeout", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  int ready[2];
  int done[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(done) == 0);
  std::fflush(nullptr);
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    const FileLock lock = cache.lock(kKey);
    char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    (void)!::read(done[0], &byte, 1);  // holds the lock until the parent is done
    ::_exit(0);
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);

  CHECK_THROWS_AS(cache.lock(kKey, 0ms), attnjit::DeviceError);
  CHECK_FALSE(FileLock::try_lock(dir.path / (kKey + ".lock")).has_value());
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  const std::string report = capture_stderr(dir.path / "stderr.txt", [&] {
    try {
      cache.lock(kKey, kLockReportAfter + 500ms);
    } catch (const attnjit::DeviceError& error) {
      message = error.what();
    }
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= kLockReportAfter + 500ms);
  CHECK(waited < kLockReportAfter + 10s);
  const std::string who = "held by process " + std::to_string(holder);
  CHECK_THAT(report, Catch::StartsWith("attnjit: waiting for the kernel cache lock") &&
                         Catch::Contains(who) && Catch::Contains("ATTNJIT_LOCK_TIMEOUT_S"));
  CHECK(std::count(report.begin(), report.end(), '\n') == 1);
  CHECK_THAT(message, Catch::StartsWith("kernel cache: gave up after 3.5 s waiting for the lock") &&
                          Catch::Contains(who) && Catch::Contains("ATTNJIT_LOCK_TIMEOUT_S"));

  (void)!::write(done[1], &byte, 1);
  int status = 0;
  REQUIRE(::waitpid(holder, &status, 0) == holder);
  CHECK_NOTHROW(cache.lock(kKey, 0ms));
}

TEST_CASE("a lock file removed while awaited: the waiter locks the file now at the path",
          "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  const fs::path lock_file = dir.path / (kKey + ".lock");
  std::optional<FileLock> first(cache.lock(kKey));
  std::optional<FileLock> second;
  std::thread waiter([&] { second.emplace(cache.lock(kKey, 30s)); });
  std::this_thread::sleep_for(200ms);
  // What clear() does with a free lock: remove the file under its own lock.
  fs::remove(lock_file);
  first.reset();
  waiter.join();
  REQUIRE(second.has_value());
  CHECK(fs::exists(lock_file));
  // The waiter's lock is the one at the path: nobody else gets it.
  CHECK_FALSE(FileLock::try_lock(lock_file).has_value());
  second.reset();
  CHECK(FileLock::try_lock(lock_file).has_value());
}

TEST_CASE("clear leaves the temp and lock files of a key being written", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  cache.store(sample_entry(kKey));
  cache.store(sample_entry(kOtherCacheKey));
  const fs::path temp = dir.path / (kKey + ".kernel.tmp.99.00000000deadbeef");
  {
    // A writer of kKey at work: it holds the lock and writes its temp file.
    const FileLock writer = cache.lock(kKey);
    write_all(temp, "half an entry");
    CHECK(cache.clear().removed == 2);
    CHECK(fs::exists(temp));
    CHECK(fs::exists(dir.path / (kKey + ".lock")));
    CHECK_FALSE(fs::exists(dir.path / (kKey + ".kernel")));
    CHECK_FALSE(fs::exists(dir.path / (kOtherCacheKey + ".kernel")));
  }
  // Its writer gone (crashed), the temp file is a leftover: removed with the lock file.
  CHECK(cache.clear().removed == 0);
  CHECK(fs::is_empty(dir.path));
}
