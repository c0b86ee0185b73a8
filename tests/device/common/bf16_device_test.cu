// round_to_bf16_bits on the GPU (the hardware's cvt.rn.bf16.f32, src/common/bf16.hpp) gives the host rule's bits --
// round to nearest, ties to even, in integer arithmetic -- for every fp32 bit pattern but NaNs, which stay NaNs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/bf16.hpp"
#include "device/common/device_buffer.hpp"

namespace mok::test {
namespace {

// A grid-stride sweep of 2^32 patterns: 4096 blocks of 256 threads fill any Hopper GPU many times over, and each
// thread takes 4096 patterns.
constexpr int kThreads = 256;
constexpr int kBlocks = 4096;
constexpr uint32_t kExponentBits = 0x7f800000u;
constexpr uint32_t kMagnitudeBits = 0x7fffffffu;

struct Mismatches {
    unsigned long long count;
    uint32_t first_bits;  // the smallest fp32 bit pattern that disagreed
};

__device__ bool is_bf16_nan(uint16_t b) {
    return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
}

__global__ void sweep_all_patterns(Mismatches* out) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i <= 0xffffffffull; i += stride) {
        const uint32_t bits = static_cast<uint32_t>(i);
        const uint16_t got = round_to_bf16_bits(__uint_as_float(bits));
        const bool nan = (bits & kMagnitudeBits) > kExponentBits;
        const bool ok = nan ? is_bf16_nan(got) : got == round_bits_to_nearest_even(bits);
        if (!ok) {
            atomicAdd(&out->count, 1ull);
            atomicMin(&out->first_bits, bits);
        }
    }
}

TEST(Bf16OnDevice, HardwareRoundingMatchesTheHostRuleForEveryPattern) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    DeviceBuffer<Mismatches> record(std::vector<Mismatches>{{0, 0xffffffffu}});
    sweep_all_patterns<<<kBlocks, kThreads>>>(record.get());
    MOK_ASSERT_CUDA(cudaGetLastError());
    MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    const Mismatches m = record.download()[0];
    EXPECT_EQ(m.count, 0u) << "first fp32 pattern that differs: 0x" << std::hex << m.first_bits;
}

}  // namespace
}  // namespace mok::test
