// DiskCache: round trips, corruption handling, atomic writes, listing, clearing, the
// default directory, unusable directories, and two processes racing on one key.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "runtime/jit/disk_cache.hpp"
#include "support/cache_fixtures.hpp"
#include "support/env_override.hpp"

using namespace attnjit::runtime;
using namespace attnjit::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string& kKey = attnjit::testing::kCacheKey;
const std::string& kOtherKey = attnjit::testing::kOtherCacheKey;

}  // namespace

TEST_CASE("an entry round-trips through the disk cache", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path / "cache");
  CHECK_FALSE(cache.load(kKey).has_value());  // missing key, missing directory
  cache.store(sample_entry());
  const std::optional<CacheEntry> loaded = cache.load(kKey);
  REQUIRE(loaded.has_value());
  CHECK(same_entry(*loaded, sample_entry()));
  CHECK_FALSE(cache.load(kOtherKey).has_value());

  // Storing again replaces the entry atomically and leaves only the entry behind.
  CacheEntry changed = sample_entry();
  changed.spec_text = "changed";
  cache.store(changed);
  REQUIRE(cache.load(kKey).has_value());
  CHECK(cache.load(kKey)->spec_text == "changed");
  int files = 0;
  for (const auto& item : fs::directory_iterator(cache.dir())) {
    CHECK(item.path().filename() == kKey + ".kernel");
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("corrupt entries are reported, deleted and treated as absent", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  const fs::path path = dir.path / (kKey + ".kernel");
  cache.store(sample_entry());
  const std::string good = read_all(path);

  const auto expect_rejected = [&](const std::string& bytes, const std::string& reason) {
    write_all(path, bytes);
    std::optional<CacheEntry> loaded;
    const std::string warning =
        capture_stderr(dir.path / "stderr.txt", [&] { loaded = cache.load(kKey); });
    CHECK_FALSE(loaded.has_value());
    CHECK_FALSE(fs::exists(path));
    CHECK(warning.find("attnjit: cache entry " + path.string() + " is corrupt (") == 0);
    CHECK(warning.find(reason) != std::string::npos);
    CHECK(warning.find("; rebuilding\n") != std::string::npos);
    CHECK(std::count(warning.begin(), warning.end(), '\n') == 1);
  };

  SECTION("one flipped payload byte") {
    std::string bytes = good;
    bytes[bytes.size() - 5] ^= 0x01;
    expect_rejected(bytes, "checksum mismatch");
  }
  SECTION("truncated") {
    expect_rejected(good.substr(0, good.size() - 7), "truncated");
  }
  SECTION("truncated inside the header") {
    expect_rejected(good.substr(0, 10), "truncated");
  }
  SECTION("empty") {
    expect_rejected("", "truncated");
  }
  SECTION("bytes appended") {
    expect_rejected(good + "x", "wrong size");
  }
  SECTION("wrong magic") {
    std::string bytes = good;
    bytes[0] = 'X';
    expect_rejected(bytes, "wrong magic");
  }
  SECTION("wrong format version") {
    std::string bytes = good;
    bytes[8] = 99;
    expect_rejected(bytes, "format version");
  }
  SECTION("renamed to another key") {
    const DiskCache other(dir.path);
    other.store(sample_entry(kOtherKey));
    fs::rename(dir.path / (kOtherKey + ".kernel"), path);
    expect_rejected(read_all(path), kOtherKey);
  }
}

TEST_CASE("list shows entries and clear removes them", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  CHECK(DiskCache(dir.path / "absent").list().empty());
  CHECK(DiskCache(dir.path / "absent").clear().removed == 0);
  cache.store(sample_entry(kKey));
  CacheEntry other = sample_entry(kOtherKey);
  other.spec_text = "other spec";
  cache.store(other);
  const std::string corrupt_key = "00000000000000000000000000000000";
  write_all(dir.path / (corrupt_key + ".kernel"), "garbage");
  { const FileLock lock = cache.lock(kKey); }
  // A temp file a crashed writer left: its key's lock is free.
  write_all(dir.path / (kKey + ".kernel.tmp.1234.00000000deadbeef"), "stray");
  write_all(dir.path / "notes.txt", "not ours");

  const std::vector<EntrySummary> entries = cache.list();
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].key == corrupt_key);
  CHECK(entries[0].spec_text == "<corrupt>");
  CHECK(entries[0].bytes == 7);
  CHECK(entries[1].key == kKey);
  CHECK(entries[1].spec_text == sample_entry().spec_text);
  CHECK(entries[1].bytes == fs::file_size(dir.path / (kKey + ".kernel")));
  CHECK(entries[2].key == kOtherKey);
  CHECK(entries[2].spec_text == "other spec");
  CHECK(fs::exists(dir.path / (corrupt_key + ".kernel")));  // list never deletes

  const ClearResult cleared = cache.clear();
  CHECK(cleared.removed == 3);
  CHECK(cleared.problems.empty());
  std::vector<std::string> left;
  for (const auto& item : fs::directory_iterator(dir.path)) {
    left.push_back(item.path().filename().string());
  }
  CHECK(left == std::vector<std::string>{"notes.txt"});
  CHECK(cache.list().empty());
}

TEST_CASE("default_dir follows ATTNJIT_CACHE_DIR, XDG_CACHE_HOME and HOME", "[cache]") {
  SECTION("ATTNJIT_CACHE_DIR wins") {
    const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", "/tmp/attnjit-explicit");
    const EnvOverride xdg("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(DiskCache::default_dir() == fs::path("/tmp/attnjit-explicit"));
  }
  SECTION("then XDG_CACHE_HOME") {
    const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", "");
    const EnvOverride xdg("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(DiskCache::default_dir() == fs::path("/tmp/xdg/attnjit"));
  }
  SECTION("then HOME") {
    const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", nullptr);
    const EnvOverride xdg("XDG_CACHE_HOME", nullptr);
    const EnvOverride home("HOME", "/tmp/home");
    CHECK(DiskCache::default_dir() == fs::path("/tmp/home/.cache/attnjit"));
  }
  SECTION("none set") {
    const EnvOverride cache_dir("ATTNJIT_CACHE_DIR", nullptr);
    const EnvOverride xdg("XDG_CACHE_HOME", nullptr);
    const EnvOverride home("HOME", nullptr);
    CHECK_THROWS_AS(DiskCache::default_dir(), CacheFileError);
    CHECK_THROWS_WITH(DiskCache::default_dir(),
                      Catch::Contains("ATTNJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset"));
  }
}

TEST_CASE("an unusable cache directory is an environment failure naming the path", "[cache]") {
  TempDir dir;
  write_all(dir.path / "file", "a regular file");
  const fs::path bad = dir.path / "file" / "cache";
  const DiskCache cache(bad);
  CHECK_THROWS_WITH(cache.store(sample_entry()), "kernel cache: cannot create the directory '" +
                                                     bad.string() + "' (Not a directory)");
  CHECK_THROWS_AS(cache.store(sample_entry()), CacheFileError);
  CHECK_THROWS_AS(cache.lock(kKey), CacheFileError);
  CHECK_FALSE(cache.load(kKey).has_value());
}

TEST_CASE("keys that are not 32 hex digits are internal errors", "[cache]") {
  TempDir dir;
  const DiskCache cache(dir.path);
  for (const std::string key : {"", "../../etc/passwd", "0123456789ABCDEF0123456789ABCDEF",
                                "0123456789abcdef0123456789abcde"}) {
    CHECK_THROWS_AS(cache.load(key), attnjit::InternalError);
    CHECK_THROWS_AS(cache.lock(key), attnjit::InternalError);
    CHECK_THROWS_AS(cache.store(sample_entry(key)), attnjit::InternalError);
  }
}

namespace {

/// One process's side of the race: lock; load; if absent build slowly, count, store; unlock.
/// Exit status 0 when it ends with an intact entry.
int build_once(const fs::path& dir, const fs::path& counter) noexcept {
  try {
    const DiskCache cache(dir);
    {
      const FileLock lock = cache.lock(kKey);
      if (!cache.load(kKey)) {
        std::this_thread::sleep_for(300ms);
        const int builds = std::stoi(read_all(counter));
        write_all(counter, std::to_string(builds + 1));
        cache.store(sample_entry());
      }
    }
    const std::optional<CacheEntry> loaded = cache.load(kKey);
    return loaded && same_entry(*loaded, sample_entry()) ? 0 : 3;
  } catch (...) {
    return 4;
  }
}

}  // namespace

TEST_CASE("two processes compiling one key build it once", "[cache]") {
  TempDir dir;
  const fs::path counter = dir.path / "counter";
  write_all(counter, "0");
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::fflush(nullptr);
  pid_t children[2];
  for (pid_t& child : children) {
    child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(gate[1]);
      char byte = 0;
      // Both children start when the parent closes the pipe.
      while (::read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      ::_exit(build_once(dir.path / "cache", counter));
    }
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (const pid_t child : children) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(read_all(counter) == "1");
}
