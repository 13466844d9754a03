// Catch2's session for the test binaries' mains, so that Catch2's implementation is compiled
// once (catch_session.cpp) for both of them.
#pragma once

namespace attnjit::testing {

/// Runs Catch2 over the test cases linked in, with the command line's arguments; returns the
/// number of failed test cases (Catch::Session::run).
int run_catch_session(int argc, char** argv);

}  // namespace attnjit::testing
