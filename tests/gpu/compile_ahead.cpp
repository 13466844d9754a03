// The background compiles of CompileAhead.
#include "gpu/compile_ahead.hpp"

#include <algorithm>

#include "attnjit/jit.hpp"

namespace attnjit::gpu_test {

CompileAhead::CompileAhead(std::vector<AttentionSpec> specs) {
  for (AttentionSpec& spec : specs) {
    if (std::find(specs_.begin(), specs_.end(), spec) == specs_.end()) {
      specs_.push_back(std::move(spec));
    }
  }
  const std::size_t workers =
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), specs_.size());
  for (std::size_t w = 0; w < workers; ++w) workers_.emplace_back([this] { work(); });
}

CompileAhead::~CompileAhead() {
  stop_ = true;
  for (std::jthread& worker : workers_) worker.join();
}

void CompileAhead::work() {
  for (std::size_t i = next_++; i < specs_.size() && !stop_; i = next_++) {
    try {
      jit::compile(specs_[i]);
    } catch (const std::exception&) {
      // The case that needs this spec compiles it again and reports the error.
    }
  }
}

}  // namespace attnjit::gpu_test
