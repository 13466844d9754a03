// The Driver API layer on a device: the device query, ATTNJIT_DEVICE, memory, module loading
// with the shared-memory opt-in, a launch and timing.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/module.hpp"
#include "runtime/jit/nvrtc.hpp"

using namespace attnjit::runtime;

namespace {

constexpr std::string_view kKernel = R"(
extern "C" __global__ void add_one(float* data, int n) {
  extern __shared__ float staging[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  staging[threadIdx.x] = i < n ? data[i] : 0.0f;
  __syncthreads();
  if (i < n) data[i] = staging[threadIdx.x] + 1.0f;
}
)";

}  // namespace

TEST_CASE("with a driver: device query, memory, module, launch and timing", "[gpu][runtime]") {
  const DeviceInfo device = current_device();
  INFO(device.name << " sm_" << device.major << device.minor);
  CHECK(device.major >= 3);
  CHECK(device.major < 100);
  CHECK(device.sm_count > 0);
  CHECK(device.max_smem_optin >= 48 * 1024);
  CHECK(device.l2_bytes > 0);
  CHECK_FALSE(device.name.empty());

  // A thread without a current context retains the device that ATTNJIT_DEVICE names.
  std::string bad_device_message;
  {
    const char* old = std::getenv("ATTNJIT_DEVICE");
    const std::string saved = old != nullptr ? old : "";
    ::setenv("ATTNJIT_DEVICE", "99x", 1);
    std::thread([&] {
      try {
        ensure_context();
      } catch (const attnjit::Error& error) {
        bad_device_message = error.what();
      }
    }).join();
    if (old != nullptr) {
      ::setenv("ATTNJIT_DEVICE", saved.c_str(), 1);
    } else {
      ::unsetenv("ATTNJIT_DEVICE");
    }
  }
  CHECK(bad_device_message.find("ATTNJIT_DEVICE: got '99x'") != std::string::npos);
  int other_thread_ordinal = -1;
  std::thread([&] {
    try {
      other_thread_ordinal = current_device().ordinal;
    } catch (const std::exception&) {
      other_thread_ordinal = -2;
    }
  }).join();
  CHECK(other_thread_ordinal == device.ordinal);

  constexpr int kCount = 1000;
  std::vector<float> host(kCount);
  for (int i = 0; i < kCount; ++i) host[i] = static_cast<float>(i);
  DeviceBuffer buffer(kCount * sizeof(float));
  buffer.upload(host.data(), host.size() * sizeof(float));
  CHECK_THROWS_AS(buffer.upload(host.data(), buffer.bytes() + 1), attnjit::Error);

  // NVRTC 13 targets sm_75 and newer; older devices skip the launch.
  if (device.major * 10 + device.minor < 75) return;
  const std::string arch = "sm_" + std::to_string(device.major * 10 + device.minor);
  const NvrtcOutput compiled = nvrtc_compile(kKernel, "add_one.cu", {}, arch, {}, "add_one");
  const LoadedModule module = LoadedModule::load(compiled.cubin);
  const int smem = 64 * 1024;  // above 48 KiB: needs the opt-in
  const CUfunction function = module.function("add_one", smem);
  CHECK_THROWS_WITH(
      module.function("add_one", device.max_smem_optin + 4096),
      Catch::Contains("add_one") && Catch::Contains(std::to_string(device.max_smem_optin)));
  CHECK_THROWS_AS(module.function("no_such_kernel", 0), attnjit::DeviceError);

  void* data = buffer.data();
  int count = kCount;
  void* params[] = {&data, &count};
  EventTimer timer;
  timer.start(nullptr);
  launch(function, LaunchConfig{{(kCount + 255) / 256, 1, 1}, {256, 1, 1}, smem}, nullptr, params);
  timer.stop(nullptr);
  CHECK(timer.milliseconds() >= 0.0f);
  std::vector<float> result(kCount);
  buffer.download(result.data(), result.size() * sizeof(float));
  bool all_incremented = true;
  for (int i = 0; i < kCount; ++i) all_incremented = all_incremented && result[i] == i + 1.0f;
  CHECK(all_incremented);

  buffer.fill_bytes(0);
  buffer.download(result.data(), result.size() * sizeof(float));
  CHECK(result[0] == 0.0f);
  CHECK(result[kCount - 1] == 0.0f);
}
