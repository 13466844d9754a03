// The in-memory cache of built values (kernel sets) by key: one build per key however many
// threads ask at once; a failed build is reported to every waiter and then forgotten.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "attnjit/error.hpp"

namespace attnjit::runtime {

/// A thread-safe map from key to an immutable value that is built on first request.
template <class V>
class MemoryCache {
 public:
  struct Result {
    std::shared_ptr<const V> value;
    bool built;  ///< true for the one call that ran the builder
  };
  struct Stats {
    std::uint64_t hits = 0;      ///< calls served by an existing or concurrent build
    std::uint64_t builds = 0;    ///< successful builds
    std::uint64_t failures = 0;  ///< builds that threw
  };
  using Builder = std::function<std::shared_ptr<const V>()>;

  /// The value of `key`. The first caller runs `build` (outside the lock); callers arriving
  /// meanwhile wait for it. If `build` throws (or returns nullptr: InternalError), that
  /// exception reaches the builder and every waiter and the key is forgotten, so the next
  /// call builds again.
  Result get_or_build(const std::string& key, const Builder& build) {
    std::unique_lock lock(mutex_);
    if (const auto found = entries_.find(key); found != entries_.end()) {
      if (found->second.value) {
        ++stats_.hits;
        return {found->second.value, false};
      }
      const std::shared_future<std::shared_ptr<const V>> pending = found->second.pending;
      lock.unlock();
      std::shared_ptr<const V> value = pending.get();
      lock.lock();
      ++stats_.hits;
      return {std::move(value), false};
    }
    const std::uint64_t generation = ++generation_;
    std::promise<std::shared_ptr<const V>> promise;
    entries_.emplace(key, Slot{nullptr, promise.get_future().share(), generation});
    lock.unlock();

    std::shared_ptr<const V> value;
    try {
      value = build();
      if (!value) throw InternalError("MemoryCache builder returned nullptr for key " + key);
    } catch (...) {
      lock.lock();
      erase_if_current(key, generation);
      ++stats_.failures;
      lock.unlock();
      promise.set_exception(std::current_exception());
      throw;
    }
    lock.lock();
    if (const auto found = entries_.find(key);
        found != entries_.end() && found->second.generation == generation) {
      found->second.value = value;
    }
    ++stats_.builds;
    lock.unlock();
    promise.set_value(value);
    return {std::move(value), true};
  }

  /// Forgets every value. Builds in flight still deliver to their waiters but are not kept.
  void clear() {
    const std::lock_guard lock(mutex_);
    entries_.clear();
  }

  /// Number of keys held, builds in flight included.
  std::size_t size() const {
    const std::lock_guard lock(mutex_);
    return entries_.size();
  }

  Stats stats() const {
    const std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  struct Slot {
    std::shared_ptr<const V> value;  ///< null while the build runs
    std::shared_future<std::shared_ptr<const V>> pending;
    std::uint64_t generation;  ///< tells this build's slot from a later one after clear()
  };

  void erase_if_current(const std::string& key, std::uint64_t generation) {
    if (const auto found = entries_.find(key);
        found != entries_.end() && found->second.generation == generation) {
      entries_.erase(found);
    }
  }

  mutable std::mutex mutex_;
  std::unordered_map<std::string, Slot> entries_;
  std::uint64_t generation_ = 0;
  Stats stats_;
};

}  // namespace attnjit::runtime
