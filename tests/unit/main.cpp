// The unit test runner.
#include "support/catch_session.hpp"

int main(int argc, char** argv) {
  return attnjit::testing::run_catch_session(argc, argv);
}
