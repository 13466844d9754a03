// The Driver API layer without a driver (a child process whose driver library is missing): a
// clear DeviceError, remembered. Launch-limit checks need no driver. With a driver:
// tests/gpu/test_driver_gpu.cpp.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/module.hpp"

using namespace attnjit::runtime;

namespace {

std::string load_error() {
  try {
    driver();
  } catch (const attnjit::DeviceError& error) {
    return error.what();
  }
  return {};
}

}  // namespace

TEST_CASE("without a driver every entry point reports why", "[runtime]") {
  // The checks run in a child process of this binary whose driver library does not exist
  // (ATTNJIT_LIBCUDA), so they hold on every machine, with a GPU or without.
  char self[4096] = {};
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  REQUIRE(length > 0);
  const std::string output = std::filesystem::temp_directory_path() /
                             ("attnjit_driverless_" + std::to_string(::getpid()) + ".log");
  const std::string command = "ATTNJIT_LIBCUDA=/nonexistent/libcuda.so.1 '" + std::string(self) +
                              "' '[.driverless]' > '" + output + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream log(output);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::filesystem::remove(output);
  INFO(text);
  CHECK(status == 0);
  CHECK_THAT(text, Catch::Contains("All tests passed"));
}

TEST_CASE("entry points with a missing driver library (run by the test above)", "[.driverless]") {
  // Hidden: only the child process of the test above runs it (a tag filter such as
  // "~[specs]" also selects hidden tests; without the child's environment it has nothing to do).
  const char* library = std::getenv("ATTNJIT_LIBCUDA");
  if (library == nullptr) {
    WARN("runs in the child process of 'without a driver every entry point reports why'");
    return;
  }
  REQUIRE(std::string(library) == "/nonexistent/libcuda.so.1");
  CHECK_FALSE(driver_available());
  const std::string message = load_error();
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith("no CUDA driver: cannot open /nonexistent/libcuda.so.1"));
  CHECK(message.find('\n') == std::string::npos);
  CHECK(load_error() == message);  // remembered, not retried
  CHECK_THROWS_AS(ensure_context(), attnjit::DeviceError);
  CHECK_THROWS_AS(current_device(), attnjit::DeviceError);
  CHECK_THROWS_AS(DeviceBuffer(256), attnjit::DeviceError);
  CHECK_THROWS_AS(EventTimer(), attnjit::DeviceError);
  CHECK_THROWS_AS(LoadedModule::load("not a cubin"), attnjit::DeviceError);
  const DeviceBuffer empty(0);  // allocates nothing, needs no driver
  CHECK(empty.data() == nullptr);
}

TEST_CASE("check turns a CUresult into a DeviceError naming the call", "[runtime]") {
  CHECK_NOTHROW(check(CUDA_SUCCESS, "cuNothing"));
  CHECK_THROWS_AS(check(CUDA_ERROR_INVALID_VALUE, "cuSomething"), attnjit::DeviceError);
  CHECK_THROWS_WITH(check(CUDA_ERROR_INVALID_VALUE, "cuSomething"),
                    Catch::StartsWith("cuSomething failed: "));
}

TEST_CASE("launch checks the grid and block before calling the driver", "[runtime]") {
  LaunchConfig config;
  config.block[0] = 128;
  const auto launch_with = [&](LaunchConfig changed) {
    launch(nullptr, changed, nullptr, nullptr);
  };
  LaunchConfig too_tall = config;
  too_tall.grid[1] = 65536;
  CHECK_THROWS_WITH(launch_with(too_tall), Catch::Contains("grid.y") && Catch::Contains("65536"));
  LaunchConfig too_deep = config;
  too_deep.grid[2] = 70000;
  CHECK_THROWS_WITH(launch_with(too_deep), Catch::Contains("grid.z"));
  LaunchConfig too_wide = config;
  too_wide.grid[0] = 2147483648u;
  CHECK_THROWS_WITH(launch_with(too_wide), Catch::Contains("grid.x"));
  LaunchConfig empty = config;
  empty.grid[0] = 0;
  CHECK_THROWS_AS(launch_with(empty), attnjit::Error);
  LaunchConfig too_many = config;
  too_many.block[1] = 16;
  CHECK_THROWS_WITH(launch_with(too_many), Catch::Contains("2048 threads"));
}
