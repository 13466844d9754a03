// Catch2's implementation and its session.
#define CATCH_CONFIG_RUNNER
#include "support/catch_session.hpp"

#include <catch2/catch.hpp>

namespace attnjit::testing {

int run_catch_session(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}

}  // namespace attnjit::testing
