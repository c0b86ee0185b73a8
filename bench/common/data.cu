#include <algorithm>

#include "bench/common/cuda_check.hpp"
#include "bench/common/data.hpp"

namespace mok::bench {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops: enough blocks to fill any current GPU several times over, few enough to launch cheaply.
constexpr size_t kMaxBlocks = 4096;
// splitmix64 (Steele, Lea and Flood, 2014): a bijective 64-bit mix whose output passes BigCrush; a counter
// through it is a fine stateless generator for benchmark data.
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kMixMultiplier1 = 0xbf58476d1ce4e5b9ull;
constexpr uint64_t kMixMultiplier2 = 0x94d049bb133111ebull;
// A float has 24 significand bits: the top 24 bits of the hash map exactly onto [0, 1).
constexpr int kUniformBits = 24;
constexpr float kUniformScale = 1.0f / static_cast<float>(1u << kUniformBits);
constexpr int kHashBits = 64;
constexpr size_t kWordBytes = sizeof(uint4);
constexpr int kBitsPerByte = 8;

__device__ uint64_t splitmix64(uint64_t x) {
    x += kGoldenGamma;
    x = (x ^ (x >> 30)) * kMixMultiplier1;
    x = (x ^ (x >> 27)) * kMixMultiplier2;
    return x ^ (x >> 31);
}

__device__ float uniform_at(uint64_t seed, size_t i, float lo, float hi) {
    const uint64_t bits = splitmix64(seed ^ splitmix64(i));
    const float u = static_cast<float>(bits >> (kHashBits - kUniformBits)) * kUniformScale;
    return lo + (hi - lo) * u;
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* data, size_t count, float lo, float hi, uint64_t seed) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
        data[i] = __float2bfloat16_rn(uniform_at(seed, i, lo, hi));
    }
}

__global__ void fill_uniform_fp32_kernel(float* data, size_t count, float lo, float hi, uint64_t seed) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
        data[i] = uniform_at(seed, i, lo, hi);
    }
}

// Differing bytes of one 32-bit lane: __vcmpne4 sets each unequal byte to 0xff.
__device__ unsigned differing_bytes(unsigned a, unsigned b) {
    return __popc(__vcmpne4(a, b)) / kBitsPerByte;
}

// Counts differing bytes of 16-byte words, then the tail of fewer than 16 bytes; integer atomics only, so the
// total is exact whatever the order.
__global__ void count_differences_kernel(const uint4* a, const uint4* b, size_t num_words, const unsigned char* a_tail,
                                         const unsigned char* b_tail, size_t tail_bytes, unsigned long long* total) {
    unsigned long long count = 0;
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < num_words; i += size_t{gridDim.x} * blockDim.x) {
        const uint4 x = a[i];
        const uint4 y = b[i];
        count += differing_bytes(x.x, y.x) + differing_bytes(x.y, y.y) + differing_bytes(x.z, y.z) +
                 differing_bytes(x.w, y.w);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (size_t i = 0; i < tail_bytes; ++i) {
            count += a_tail[i] != b_tail[i] ? 1 : 0;
        }
    }
    if (count != 0) {
        atomicAdd(total, count);
    }
}

unsigned num_blocks(size_t items) {
    const size_t blocks = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
    return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, kMaxBlocks));
}

bool word_aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % kWordBytes == 0;
}

}  // namespace

void fill_uniform(__nv_bfloat16* data, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream) {
    fill_uniform_bf16_kernel<<<num_blocks(count), kThreadsPerBlock, 0, stream>>>(data, count, lo, hi, seed);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void fill_uniform(float* data, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream) {
    fill_uniform_fp32_kernel<<<num_blocks(count), kThreadsPerBlock, 0, stream>>>(data, count, lo, hi, seed);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

uint64_t count_differences(const void* a, const void* b, size_t bytes, cudaStream_t stream) {
    // Unaligned buffers (rare: cudaMalloc aligns to 256 bytes) take the byte-wise tail path for everything.
    const size_t num_words = word_aligned(a) && word_aligned(b) ? bytes / kWordBytes : 0;
    const size_t word_bytes = num_words * kWordBytes;
    unsigned long long* total = nullptr;
    MOK_BENCH_CHECK_CUDA(cudaMallocAsync(&total, sizeof(*total), stream));
    MOK_BENCH_CHECK_CUDA(cudaMemsetAsync(total, 0, sizeof(*total), stream));
    const auto* a_bytes = static_cast<const unsigned char*>(a);
    const auto* b_bytes = static_cast<const unsigned char*>(b);
    count_differences_kernel<<<num_blocks(num_words), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint4*>(a), static_cast<const uint4*>(b), num_words, a_bytes + word_bytes,
        b_bytes + word_bytes, bytes - word_bytes, total);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
    unsigned long long host_total = 0;
    MOK_BENCH_CHECK_CUDA(cudaMemcpyAsync(&host_total, total, sizeof(host_total), cudaMemcpyDeviceToHost, stream));
    MOK_BENCH_CHECK_CUDA(cudaFreeAsync(total, stream));
    MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    return host_total;
}

}  // namespace mok::bench
