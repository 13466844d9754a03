// MemoryCache: one build per key under contention, failure propagation and retry,
// independent keys, cheap hits.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/jit/memory_cache.hpp"

using attnjit::runtime::MemoryCache;
using namespace std::chrono_literals;

namespace {

/// Runs `body(i)` on `count` threads released at the same moment; joins them.
template <class Body>
void run_together(int count, Body body) {
  std::latch start(count);
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace

TEST_CASE("concurrent requests for one key build once", "[cache]") {
  MemoryCache<std::string> cache;
  std::atomic<int> builder_calls{0};
  constexpr int kThreads = 16;
  std::vector<MemoryCache<std::string>::Result> results(kThreads);
  run_together(kThreads, [&](int i) {
    results[i] = cache.get_or_build("key", [&] {
      ++builder_calls;
      std::this_thread::sleep_for(50ms);
      return std::make_shared<const std::string>("value");
    });
  });
  CHECK(builder_calls == 1);
  int built = 0;
  for (const auto& result : results) {
    REQUIRE(result.value != nullptr);
    CHECK(result.value == results[0].value);
    CHECK(*result.value == "value");
    built += result.built ? 1 : 0;
  }
  CHECK(built == 1);
  const auto stats = cache.stats();
  CHECK(stats.builds == 1);
  CHECK(stats.hits == kThreads - 1);
  CHECK(stats.failures == 0);
  CHECK(cache.size() == 1);
}

TEST_CASE("a failed build reaches every waiter and is retried later", "[cache]") {
  MemoryCache<int> cache;
  std::atomic<int> builder_calls{0};
  std::atomic<int> saw_error{0};
  constexpr int kThreads = 16;
  run_together(kThreads, [&](int) {
    try {
      cache.get_or_build("key", [&]() -> std::shared_ptr<const int> {
        ++builder_calls;
        std::this_thread::sleep_for(50ms);
        throw std::runtime_error("builder failed");
      });
    } catch (const std::runtime_error& error) {
      if (std::string(error.what()) == "builder failed") ++saw_error;
    }
  });
  CHECK(builder_calls == 1);
  CHECK(saw_error == kThreads);
  CHECK(cache.size() == 0);
  CHECK(cache.stats().failures == 1);

  const auto retry = cache.get_or_build("key", [&] {
    ++builder_calls;
    return std::make_shared<const int>(7);
  });
  CHECK(retry.built);
  CHECK(*retry.value == 7);
  CHECK(builder_calls == 2);
  CHECK(cache.stats().builds == 1);
}

TEST_CASE("a builder returning nullptr is a failure", "[cache]") {
  MemoryCache<int> cache;
  CHECK_THROWS_AS(cache.get_or_build("key", [] { return std::shared_ptr<const int>(); }),
                  attnjit::InternalError);
  CHECK(cache.size() == 0);
}

TEST_CASE("different keys build independently", "[cache]") {
  MemoryCache<std::string> cache;
  std::promise<void> b_built;
  std::shared_future<void> b_done = b_built.get_future().share();
  std::future_status a_waited = std::future_status::deferred;
  std::thread a([&] {
    cache.get_or_build("a", [&] {
      // Finishes only once "b" was built meanwhile: a build must not block other keys.
      a_waited = b_done.wait_for(5s);
      return std::make_shared<const std::string>("A");
    });
  });
  std::thread b([&] {
    while (cache.size() == 0) std::this_thread::yield();  // "a" is building now
    cache.get_or_build("b", [] { return std::make_shared<const std::string>("B"); });
    b_built.set_value();
  });
  a.join();
  b.join();
  CHECK(a_waited == std::future_status::ready);
  CHECK(cache.stats().builds == 2);
  CHECK(cache.size() == 2);
  CHECK(*cache.get_or_build("a", [] { return nullptr; }).value == "A");
  CHECK(*cache.get_or_build("b", [] { return nullptr; }).value == "B");
  cache.clear();
  CHECK(cache.size() == 0);
}

TEST_CASE("a hit is cheap", "[cache]") {
  MemoryCache<int> cache;
  const std::string key = "0123456789abcdef0123456789abcdef";
  cache.get_or_build(key, [] { return std::make_shared<const int>(1); });
  const MemoryCache<int>::Builder unused = [] { return std::make_shared<const int>(2); };
  constexpr int kHits = 200000;
  const auto started = std::chrono::steady_clock::now();
  long sum = 0;
  for (int i = 0; i < kHits; ++i) sum += *cache.get_or_build(key, unused).value;
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count() /
      kHits;
  INFO("hit: " << ns << " ns");
  CHECK(sum == kHits);
  // The target is well under 1 us; the bound is loose so that a busy machine does not fail.
  CHECK(ns < 5000.0);
}
