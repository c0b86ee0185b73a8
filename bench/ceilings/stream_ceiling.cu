// The one-way DRAM ceilings: a kernel that only reads a buffer and one that only writes it. The device copy
// (copy_ceiling.cpp) moves as many bytes each way; a GEMM at 128 rows per expert mostly reads (the forward and
// dgrad forms stream the weights) or mostly writes (the fresh weight gradients write a tensor the size of the
// weights), so each is held against the ceiling of its own direction.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/buffers.hpp"
#include "bench/common/cuda_check.hpp"

namespace mok::bench::ceilings {
namespace {

// Word i of the pattern is i * kPatternMultiplier + seed (mod 2^32): every word differs from its neighbours, and the
// host can sum the pattern without reading it back.
constexpr uint32_t kPatternMultiplier = 0x9e3779b1u;
constexpr uint32_t kPatternSeed = 0x7f4a7c15u;
constexpr uint32_t kWritePatternSeed = 0x6a09e667u;
// Four resident blocks of 512 threads per SM keep enough 16-byte accesses in flight to saturate HBM.
constexpr int kStreamThreads = 512;
constexpr int kStreamBlocksPerSm = 4;
constexpr int kWordsPerAccess = 4;  // one uint4
constexpr int kLoadsInFlight = 8;
constexpr double kBytesPerGigabyte = 1e9;

__device__ __forceinline__ uint32_t pattern_word(size_t i, uint32_t seed) {
    return static_cast<uint32_t>(i) * kPatternMultiplier + seed;
}

// Writes the pattern, 16 bytes per store.
__global__ void __launch_bounds__(kStreamThreads) write_pattern_kernel(uint4* data, size_t num_vectors, uint32_t seed) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < num_vectors; v += stride) {
        const size_t w = v * kWordsPerAccess;
        data[v] = make_uint4(pattern_word(w, seed), pattern_word(w + 1, seed), pattern_word(w + 2, seed),
                             pattern_word(w + 3, seed));
    }
}

// Sums every word, 16 bytes per load, into *sum (mod 2^64): the sum is what makes the loads necessary, and what
// the host checks. Each thread has kLoadsInFlight loads out before it adds any: with one at a time (a load, then its
// add) the kernel read at 3.8 TB/s where the device copy moves 4.3 TB/s, bound by the bytes in flight, not by DRAM.
__global__ void __launch_bounds__(kStreamThreads)
    sum_words_kernel(const uint4* data, size_t num_vectors, unsigned long long* sum) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    unsigned long long partial = 0;
    for (; v + (kLoadsInFlight - 1) * stride < num_vectors; v += kLoadsInFlight * stride) {
        uint4 q[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            q[j] = data[v + j * stride];
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            partial += static_cast<unsigned long long>(q[j].x) + q[j].y + q[j].z + q[j].w;
        }
    }
    for (; v < num_vectors; v += stride) {
        const uint4 q = data[v];
        partial += static_cast<unsigned long long>(q.x) + q.y + q.z + q.w;
    }
    atomicAdd(sum, partial);
}

uint64_t pattern_sum(size_t num_words, uint32_t seed) {
    uint64_t sum = 0;
    for (size_t i = 0; i < num_words; ++i) {
        sum += static_cast<uint32_t>(static_cast<uint32_t>(i) * kPatternMultiplier + seed);
    }
    return sum;
}

int stream_grid(int device) {
    int num_sms = 0;
    MOK_BENCH_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    return num_sms * kStreamBlocksPerSm;
}

void launch_write(uint32_t* data, size_t num_words, uint32_t seed, int grid, cudaStream_t stream) {
    write_pattern_kernel<<<grid, kStreamThreads, 0, stream>>>(reinterpret_cast<uint4*>(data),
                                                              num_words / kWordsPerAccess, seed);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void launch_sum(const uint32_t* data, size_t num_words, unsigned long long* sum, int grid, cudaStream_t stream) {
    MOK_BENCH_CHECK_CUDA(cudaMemsetAsync(sum, 0, sizeof(*sum), stream));
    sum_words_kernel<<<grid, kStreamThreads, 0, stream>>>(reinterpret_cast<const uint4*>(data),
                                                          num_words / kWordsPerAccess, sum);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

// The device's sum of `data` against the host's sum of the pattern it should hold.
void expect_pattern(const uint32_t* data, size_t num_words, uint32_t seed, unsigned long long* sum, int grid,
                    const Stream& stream, const std::string& what) {
    launch_sum(data, num_words, sum, grid, stream.get());
    unsigned long long device_sum = 0;
    MOK_BENCH_CHECK_CUDA(cudaMemcpyAsync(&device_sum, sum, sizeof(device_sum), cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    if (device_sum != pattern_sum(num_words, seed)) {
        throw std::runtime_error(what + ": the buffer's sum is not the pattern's");
    }
}

size_t word_count(size_t bytes) {
    constexpr size_t kVectorBytes = sizeof(uint4);
    if (bytes % kVectorBytes != 0) {
        throw std::invalid_argument("stream ceilings: bytes must be a multiple of 16, got " + std::to_string(bytes));
    }
    return bytes / sizeof(uint32_t);
}

}  // namespace

Case device_read_case(size_t bytes, const TimingOptions& timing) {
    Case result;
    result.name = "device_read/" + std::to_string(bytes >> 20) + "MiB";
    const size_t num_words = word_count(bytes);
    const int grid = stream_grid(0);
    result.params.set("bytes", bytes)
        .set("method", "16-byte loads, grid-stride, summed")
        .set("grid", grid)
        .set("threads", kStreamThreads)
        .set("counts", "read");
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
    const DeviceBuffer<uint32_t> data(0, num_words);
    const DeviceBuffer<unsigned long long> sum(0, 1);
    const Stream stream(0);
    launch_write(data.get(), num_words, kPatternSeed, grid, stream.get());
    const auto read = [&](int) { launch_sum(data.get(), num_words, sum.get(), grid, stream.get()); };
    expect_pattern(data.get(), num_words, kPatternSeed, sum.get(), grid, stream, result.name);

    Timer timer({StreamOnDevice{0, stream.get()}});
    const TimingStats stats = timer.time(read, timing);
    expect_pattern(data.get(), num_words, kPatternSeed, sum.get(), grid, stream, result.name);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(rate_figure("bandwidth", "GB/s", static_cast<double>(bytes) / kBytesPerGigabyte, stats));
    return result;
}

Case device_write_case(size_t bytes, const TimingOptions& timing) {
    Case result;
    result.name = "device_write/" + std::to_string(bytes >> 20) + "MiB";
    const size_t num_words = word_count(bytes);
    const int grid = stream_grid(0);
    result.params.set("bytes", bytes)
        .set("method", "16-byte stores, grid-stride")
        .set("grid", grid)
        .set("threads", kStreamThreads)
        .set("counts", "write");
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
    const DeviceBuffer<uint32_t> data(0, num_words);
    const DeviceBuffer<unsigned long long> sum(0, 1);
    const Stream stream(0);
    // The pattern written before timing differs from the timed one, so the check after timing sees the timed
    // writes.
    launch_write(data.get(), num_words, kPatternSeed, grid, stream.get());
    expect_pattern(data.get(), num_words, kPatternSeed, sum.get(), grid, stream, result.name);
    const auto write = [&](int) { launch_write(data.get(), num_words, kWritePatternSeed, grid, stream.get()); };

    Timer timer({StreamOnDevice{0, stream.get()}});
    const TimingStats stats = timer.time(write, timing);
    expect_pattern(data.get(), num_words, kWritePatternSeed, sum.get(), grid, stream, result.name);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(rate_figure("bandwidth", "GB/s", static_cast<double>(bytes) / kBytesPerGigabyte, stats));
    return result;
}

}  // namespace mok::bench::ceilings
