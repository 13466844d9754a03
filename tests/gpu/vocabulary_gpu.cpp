// Helpers of the tile vocabulary's GPU tests (vocabulary_gpu.hpp).
#include "gpu/vocabulary_gpu.hpp"

#include <string>

#include "runtime/jit/nvrtc.hpp"
#include "support/half_round.hpp"
#include "support/vocabulary_kernels.hpp"

namespace attnjit::gpu_test {

bool device_runs_sm90a() {
  const runtime::DeviceInfo device = runtime::current_device();
  return device.major == 9 && device.minor == 0;
}

runtime::LoadedModule load_vocabulary_program(std::string_view program) {
  const testing::VocabularyKernel& kernel = testing::vocabulary_kernel(program);
  const runtime::DeviceInfo device = runtime::current_device();
  const std::string arch = kernel.needs_sm90a
                               ? std::string("sm_90a")
                               : "sm_" + std::to_string(device.major * 10 + device.minor);
  const runtime::NvrtcOutput compiled = runtime::nvrtc_compile(
      kernel.source, kernel.program, testing::template_headers(), arch, {}, kernel.entries[0]);
  return runtime::LoadedModule::load(compiled.cubin);
}

Operand16 random_operand(DType dtype, std::size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  Operand16 out;
  for (std::size_t i = 0; i < count; ++i) {
    const float x = value(rng);
    const std::uint16_t bits =
        dtype == DType::bf16 ? testing::float_to_bf16_bits(x) : testing::float_to_fp16_bits(x);
    out.bits.push_back(bits);
    out.values.push_back(dtype == DType::bf16 ? testing::bf16_bits_to_float(bits)
                                              : testing::fp16_bits_to_float(bits));
  }
  return out;
}

runtime::DeviceBuffer poisoned_floats(std::size_t count) {
  runtime::DeviceBuffer buffer(count * sizeof(float));
  buffer.fill_bytes(0xff);
  return buffer;
}

std::vector<float> download_floats(const runtime::DeviceBuffer& buffer, std::size_t count) {
  std::vector<float> host(count);
  buffer.download(host.data(), count * sizeof(float));
  return host;
}

void launch_one_block(CUfunction function, int threads, void** args, int dynamic_smem_bytes) {
  runtime::LaunchConfig config;
  config.block[0] = static_cast<unsigned>(threads);
  config.dynamic_smem_bytes = static_cast<unsigned>(dynamic_smem_bytes);
  runtime::launch(function, config, nullptr, args);
}

void launch_on_buffers(CUfunction function, int threads,
                       std::initializer_list<const runtime::DeviceBuffer*> buffers,
                       int dynamic_smem_bytes) {
  std::vector<void*> pointers;
  for (const runtime::DeviceBuffer* buffer : buffers) pointers.push_back(buffer->data());
  std::vector<void*> args;
  for (void*& pointer : pointers) args.push_back(&pointer);
  launch_one_block(function, threads, args.data(), dynamic_smem_bytes);
}

}  // namespace attnjit::gpu_test
