// Mask-language errors for names: a misspelled family or function names what is accepted
// (the functions and every family of the family table) and the closest name.
#include <catch2/catch.hpp>

#include <string>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/families.hpp"
#include "dsl/mask_lang.hpp"

using namespace attnjit;
using Catch::Contains;

TEST_CASE("a misspelled function names the functions and the families", "[dsl]") {
  const auto message = [](const std::string& text) {
    try {
      dsl::compile_mask(text);
    } catch (const PredicateParseError& error) {
      return std::string(error.what());
    }
    FAIL("no error for " << text);
    return std::string();
  };
  std::string families;
  for (const dsl::FamilyRow& row : dsl::family_table()) {
    families += (families.empty() ? "" : ", ") + std::string(row.name);
  }
  CHECK(message("documnet([4,3,3])") ==
        "mask expression, line 1 column 1: unknown function 'documnet'; did you mean "
        "'document'? accepted: min, max, abs, predicate, and the mask families " +
            families);
  CHECK_THAT(message("causal | slidingwindow(2)"),
             Contains("line 1 column 10: unknown function 'slidingwindow'; did you mean "
                      "'sliding_window'?"));
  CHECK_THAT(message("q >= k && mx(q, k) < 4"),
             Contains("line 1 column 11: unknown function 'mx'; did you mean 'max'?"));
  // Nothing close: no guess, still the list.
  CHECK_THAT(message("zzzzzzzz(q)"),
             Contains("unknown function 'zzzzzzzz'; accepted: min, max, abs, predicate, and the "
                      "mask families full, causal"));
  // A family inside a predicate is a known name: the message says how families combine.
  CHECK_THAT(message("q >= k && document([4,3,3])"),
             Contains("the mask family document combines with & and |"));
}
