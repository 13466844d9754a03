// A predicate's literals in spec text: parse_spec lifts them, jit::compile shares one kernel set
// between specs that differ only in them, and a launch without scalars of its own takes the
// Kernel's. Uses fake device pointers: nothing is launched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/driver.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

void* fake(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

jit::Kernel compiled(const std::string& text) {
  jit::CompileOptions options;
  options.no_disk_cache = true;
  return jit::compile(parse_spec(text), options);
}

ForwardArgs args_with_doc() {
  ForwardArgs a;
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {2, 100, 4, 64});
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {2, 120, 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {2, 120, 2, 64});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {2, 100, 4, 64});
  a.predicate.tensors = {{"doc", contiguous_view(fake(0x50000), ScalarType::int32, {2, 120})}};
  return a;
}

std::string error_of(const jit::Kernel& kernel, const ForwardArgs& args) {
  return testing::error_text([&] { kernel.forward(args); });
}

}  // namespace

TEST_CASE("specs that differ only in predicate literals share one kernel set", "[runtime][args]") {
  const std::string text = "dtype=bf16 head_dim=64 target=sm_80 mask=predicate(q>=k&&(q-k)<";
  const jit::Kernel near = compiled(text + "256)");
  const jit::Kernel far = compiled(text + "4096)");
  CHECK(near.info().key == far.info().key);
  CHECK(far.info().cache == jit::CacheLevel::memory);
  CHECK_THAT(near.info().spec_text, Catch::Contains("mask=predicate(q>=k&&q-k<$0)"));
  CHECK(near.predicate_scalars() == std::vector<std::int32_t>{256});
  CHECK(far.predicate_scalars() == std::vector<std::int32_t>{4096});
  CHECK(near.spec().mask.scalars.empty());
  CHECK(compiled("dtype=bf16 head_dim=64 target=sm_80 mask=causal").predicate_scalars().empty());
}

TEST_CASE("a launch without scalars takes the spec's literals", "[runtime][args]") {
  const jit::Kernel kernel =
      compiled("dtype=bf16 head_dim=64 target=sm_80 mask=predicate(q-k<256&&doc[q]==doc[k])");
  const jit::Kernel slots =
      compiled("dtype=bf16 head_dim=64 target=sm_80 mask=predicate(q-k<$0&&doc[q]==doc[k])");
  const ForwardArgs a = args_with_doc();
  // With $N slots in the text the launch must give the values; with numbers it may.
  CHECK_THAT(error_of(slots, a), Catch::Contains("predicate.scalars: got '0 values'"));
  ForwardArgs wrong = a;
  wrong.predicate.scalars = {1, 2};
  CHECK_THAT(error_of(kernel, wrong), Catch::Contains("predicate.scalars: got '2 values'"));
  if (!runtime::driver_available()) {
    // The defaults pass every check up to the device (whose memory check comes last), and so
    // do values the launch gives itself.
    CHECK_THAT(error_of(kernel, a), Catch::Contains("device: no CUDA driver"));
    ForwardArgs own = a;
    own.predicate.scalars = {64};
    CHECK_THAT(error_of(kernel, own), Catch::Contains("device: no CUDA driver"));
  }
}

TEST_CASE("scalars that do not match the predicate's slots are refused", "[runtime][args]") {
  AttentionSpec spec = parse_spec("dtype=bf16 head_dim=64 target=sm_80 mask=predicate(q-k<8)");
  spec.mask.scalars = {1, 2};
  CHECK_THROWS_WITH(jit::compile(spec),
                    "mask.scalars: got '2 values'; accepted: none, or one per scalar slot of "
                    "mask=predicate(q-k<$0) (1)");
  AttentionSpec causal = parse_spec("dtype=bf16 head_dim=64 target=sm_80 mask=causal");
  causal.mask.scalars = {1};
  CHECK_THROWS_AS(jit::compile(causal), Error);
}

TEST_CASE("device_available says whether target=auto can compile", "[runtime]") {
  if (runtime::driver_available()) return;  // a machine with a driver may have a device
  CHECK_FALSE(jit::device_available());
  CHECK_THROWS_AS(jit::compile(parse_spec("dtype=bf16 head_dim=64 mask=causal")), DeviceError);
}
