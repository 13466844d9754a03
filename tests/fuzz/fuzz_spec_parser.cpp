// libFuzzer target over the spec parser: parse_spec, and for inputs that parse, the canonical
// text round trip (parse_spec(to_string(s)) == s, printed identically) and the parse of a
// predicate mask's expression. Any input may only ever throw attnjit::Error, with a message
// that quotes a bounded part of the input; anything else (another exception, a crash, a
// sanitizer report, a hang, a leak, a broken round trip, a message of the input's size) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "attnjit/error.hpp"
#include "attnjit/spec.hpp"
#include "compiler/ir/predicate.hpp"

namespace {

// Messages name the field and what is accepted, and quote at most ~200 bytes of the input.
void check_message(const attnjit::Error& error) {
  if (std::strlen(error.what()) > 1024) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  attnjit::AttentionSpec spec;
  try {
    spec = attnjit::parse_spec(text);
  } catch (const attnjit::Error& error) {
    check_message(error);
    return 0;
  }
  const std::string printed = attnjit::to_string(spec);
  const attnjit::AttentionSpec again = attnjit::parse_spec(printed);  // must not throw
  if (!(again == spec) || attnjit::to_string(again) != printed) std::abort();
  if (spec.mask.kind == attnjit::MaskKind::predicate) {
    try {
      attnjit::parse_predicate(spec.mask.predicate);
    } catch (const attnjit::Error& error) {
      check_message(error);
    }
  }
  return 0;
}
