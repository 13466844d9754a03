// Helpers of the tile vocabulary's GPU tests: loading a test program of
// tests/support/vocabulary_kernels for the device, 16-bit random operands, and buffers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/module.hpp"

namespace attnjit::gpu_test {

/// Whether the device runs sm_90a code (compute capability 9.0).
bool device_runs_sm90a();

/// The test program `program` compiled for the device (sm_90a where it needs wgmma) and loaded.
runtime::LoadedModule load_vocabulary_program(std::string_view program);

/// `count` random values uniform in [-1, 1], rounded to `dtype`: the 16-bit patterns and the
/// values they hold.
struct Operand16 {
  std::vector<std::uint16_t> bits;
  std::vector<float> values;
};
Operand16 random_operand(DType dtype, std::size_t count, std::mt19937& rng);

/// A device copy of `host`.
template <class T>
runtime::DeviceBuffer upload(const std::vector<T>& host) {
  runtime::DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}

/// A device buffer of `count` floats, every byte 0xff (NaN): what a kernel does not write
/// shows as NaN.
runtime::DeviceBuffer poisoned_floats(std::size_t count);

std::vector<float> download_floats(const runtime::DeviceBuffer& buffer, std::size_t count);

/// The launch of a one-block test kernel of `threads` threads with arguments `args`.
void launch_one_block(CUfunction function, int threads, void** args, int dynamic_smem_bytes = 0);

/// launch_one_block() of a kernel whose parameters are the device pointers of `buffers`, in order.
void launch_on_buffers(CUfunction function, int threads,
                       std::initializer_list<const runtime::DeviceBuffer*> buffers,
                       int dynamic_smem_bytes = 0);

}  // namespace attnjit::gpu_test
