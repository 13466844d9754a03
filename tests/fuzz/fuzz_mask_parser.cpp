// libFuzzer target over the mask language's front end: parse_predicate, compile_mask, and for
// inputs that compile, build_mask on a small problem. Any input may only ever throw
// attnjit::Error subclasses; anything else (another exception, a crash, a sanitizer report,
// a hang or a leak) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/mask_lang.hpp"

namespace {

// Every tensor name the seed corpus reads, one ascending row of 8 values.
std::vector<attnjit::PredicateTensor> tensors() {
  std::vector<attnjit::PredicateTensor> all;
  for (const char* name : {"doc", "lengths", "ev", "t"}) {
    attnjit::PredicateTensor t;
    t.name = name;
    t.length = 8;
    t.values = {0, 0, 1, 1, 1, 2, 3, 3};
    all.push_back(t);
  }
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    attnjit::parse_predicate(text);
  } catch (const attnjit::Error&) {
  }
  try {
    const attnjit::dsl::MaskProgram program = attnjit::dsl::compile_mask(text);
    static const std::vector<attnjit::PredicateTensor> given = tensors();
    const attnjit::dsl::MaskData mask = attnjit::dsl::build_mask(program, 2, 8, 8, given);
    attnjit::dsl::dense_visible(mask, 1);
  } catch (const attnjit::Error&) {
  }
  return 0;
}
