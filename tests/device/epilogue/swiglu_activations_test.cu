// swiglu_activations (src/device/epilogue/swiglu_activations.cuh) against the scalar swiglu::activation, whose bits
// the CPU reference shares: its refined reciprocal for every divisor it takes, and whole batches for every fp32
// pattern, each batch mixing values of the common path with values of the general one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"
#include "device/common/device_buffer.hpp"
#include "device/epilogue/swiglu_activations.cuh"

namespace mok::test {
namespace {

// Grid-stride sweeps: 4096 blocks of 256 threads fill any Hopper GPU many times over.
constexpr int kThreads = 256;
constexpr int kBlocks = 4096;
constexpr uint32_t kOneBits = 0x3f800000u;  // 1.0f
constexpr uint32_t kSignBit = 0x80000000u;

struct Mismatches {
    unsigned long long count;
    uint32_t first_bits;  // the smallest fp32 bit pattern that disagreed
};

__device__ void record(Mismatches* out, uint32_t bits) {
    atomicAdd(&out->count, 1ull);
    atomicMin(&out->first_bits, bits);
}

__device__ bool same(float a, float b) {
    return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);
}

__global__ void sweep_reciprocal(Mismatches* out, uint32_t end_bits) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = kOneBits + blockIdx.x * blockDim.x + threadIdx.x; i < end_bits; i += stride) {
        const float d = __uint_as_float(static_cast<uint32_t>(i));
        if (__float_as_uint(epilogue::reciprocal_in_range(d)) != __float_as_uint(fp32::div(1.0f, d))) {
            record(out, static_cast<uint32_t>(i));
        }
    }
}

// Batch j of pattern p holds p and three patterns far from it (the other sign, another exponent range), so that
// batches mix the common path and the general one wherever one of them needs the general path.
constexpr int kBatch = 4;
__device__ uint32_t batch_member(uint32_t bits, int j) {
    constexpr uint32_t kFlips[kBatch] = {0u, kSignBit, 0x40000000u, 0x21000000u};
    return bits ^ kFlips[j];
}

__global__ void sweep_activations(Mismatches* out) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i <= 0xffffffffull; i += stride) {
        const auto bits = static_cast<uint32_t>(i);
        float g[kBatch];
        for (int j = 0; j < kBatch; ++j) {
            g[j] = __uint_as_float(batch_member(bits, j));
        }
        swiglu::Activation a[kBatch];
        epilogue::swiglu_activations<kBatch>(g, a);
        for (int j = 0; j < kBatch; ++j) {
            const swiglu::Activation want = swiglu::activation(g[j]);
            if (!same(a[j].s, want.s) || !same(a[j].silu, want.silu)) {
                record(out, bits);
            }
        }
    }
}

Mismatches run(void (*launch)(Mismatches*)) {
    DeviceBuffer<Mismatches> record_buffer(std::vector<Mismatches>{{0, 0xffffffffu}});
    launch(record_buffer.get());
    return record_buffer.download()[0];
}

TEST(SwigluActivations, RefinedReciprocalIsTheDivisionForEveryDivisorItTakes) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    const uint32_t end_bits = fp32::bits_of(epilogue::kReciprocalDivisorLimit);
    const Mismatches m = run([](Mismatches* out) {
        sweep_reciprocal<<<kBlocks, kThreads>>>(out, fp32::bits_of(epilogue::kReciprocalDivisorLimit));
        MOK_ASSERT_CUDA(cudaGetLastError());
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    });
    EXPECT_GT(end_bits, kOneBits);
    EXPECT_EQ(m.count, 0u) << "first divisor pattern that differs: 0x" << std::hex << m.first_bits;
}

TEST(SwigluActivations, BatchesHaveTheScalarBitsForEveryPattern) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    const Mismatches m = run([](Mismatches* out) {
        sweep_activations<<<kBlocks, kThreads>>>(out);
        MOK_ASSERT_CUDA(cudaGetLastError());
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    });
    EXPECT_EQ(m.count, 0u) << "first pattern whose batch differs: 0x" << std::hex << m.first_bits;
}

}  // namespace
}  // namespace mok::test
