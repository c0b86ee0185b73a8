// The one-way DRAM ceilings: a kernel that only reads a buffer and one that only writes it. The device copy
// (copy_ceiling.cpp) moves as many bytes each way; a GEMM at 128 rows per expert mostly reads (the forward and
// dgrad forms stream the weights) or mostly writes (the fresh weight gradients write a tensor the size of the
// weights), so each is held against the ceiling of its own direction.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/buffers.hpp"
#include "bench/common/cuda_check.hpp"
#include "device/common/warp.cuh"

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

__host__ __device__ __forceinline__ uint32_t pattern_word(size_t i, uint32_t seed) {
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
// the host checks. Each thread issues kLoadsInFlight loads before it adds any, so that no load waits on another.
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
    // One atomic per block: one per thread (270,336 on an H200) serialised on the sum's address for about 0.2 ms,
    // which read as a bandwidth of 2.4 TB/s for 1 GiB.
    constexpr uint32_t kWarps = kStreamThreads / device::kWarpSize;
    const uint32_t lane = threadIdx.x % device::kWarpSize;
    // The last lane's inclusive sum is the warp's.
    partial = device::warp_inclusive_sum(partial, lane);
    __shared__ unsigned long long warp_sums[kWarps];
    if (lane == device::kWarpSize - 1) {
        warp_sums[threadIdx.x / device::kWarpSize] = partial;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long block_sum = 0;
        for (uint32_t w = 0; w < kWarps; ++w) {
            block_sum += warp_sums[w];
        }
        atomicAdd(sum, block_sum);
    }
}

uint64_t pattern_sum(size_t num_words, uint32_t seed) {
    uint64_t sum = 0;
    for (size_t i = 0; i < num_words; ++i) {
        sum += pattern_word(i, seed);
    }
    return sum;
}

// Every block of the grid resident at once (as many per SM as the kernel's registers allow, at most
// kStreamBlocksPerSm): a grid-stride loop over a grid that does not fit runs its last blocks' shares after the
// others, at a fraction of the bandwidth.
template <class Kernel>
int stream_grid(int device, Kernel kernel) {
    int num_sms = 0;
    MOK_BENCH_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    int resident = 0;
    MOK_BENCH_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kStreamThreads, 0));
    return num_sms * std::max(1, std::min(resident, kStreamBlocksPerSm));
}

struct StreamGrids {
    int write;
    int sum;

    static StreamGrids of(int device) {
        return {stream_grid(device, write_pattern_kernel), stream_grid(device, sum_words_kernel)};
    }
};

void launch_write(uint32_t* data, size_t num_words, uint32_t seed, const StreamGrids& grids, cudaStream_t stream) {
    write_pattern_kernel<<<grids.write, kStreamThreads, 0, stream>>>(reinterpret_cast<uint4*>(data),
                                                                     num_words / kWordsPerAccess, seed);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void launch_sum(const uint32_t* data, size_t num_words, unsigned long long* sum, const StreamGrids& grids,
                cudaStream_t stream) {
    MOK_BENCH_CHECK_CUDA(cudaMemsetAsync(sum, 0, sizeof(*sum), stream));
    sum_words_kernel<<<grids.sum, kStreamThreads, 0, stream>>>(reinterpret_cast<const uint4*>(data),
                                                               num_words / kWordsPerAccess, sum);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

// The device's sum of `data` against the host's sum of the pattern it should hold.
void expect_pattern(const uint32_t* data, size_t num_words, uint32_t seed, unsigned long long* sum,
                    const StreamGrids& grids, const Stream& stream, const std::string& what) {
    launch_sum(data, num_words, sum, grids, stream.get());
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

enum class StreamDirection { kRead, kWrite };

// Either ceiling: the buffer filled with the pattern and checked, the timed kernel, and the check after timing that
// the buffer holds what the timed runs leave (the write case times another pattern than the one written before, so
// that its check sees the timed writes).
Case stream_case(StreamDirection direction, size_t bytes, const TimingOptions& timing) {
    const bool reads = direction == StreamDirection::kRead;
    Case result;
    result.name = std::string(reads ? "device_read/" : "device_write/") + std::to_string(bytes >> 20) + "MiB";
    const size_t num_words = word_count(bytes);
    const StreamGrids grids = StreamGrids::of(0);
    result.params.set("bytes", bytes)
        .set("method", reads ? "16-byte loads, grid-stride, summed" : "16-byte stores, grid-stride")
        .set("grid", reads ? grids.sum : grids.write)
        .set("threads", kStreamThreads)
        .set("counts", reads ? "read" : "write");
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
    const DeviceBuffer<uint32_t> data(0, num_words);
    const DeviceBuffer<unsigned long long> sum(0, 1);
    const Stream stream(0);
    launch_write(data.get(), num_words, kPatternSeed, grids, stream.get());
    expect_pattern(data.get(), num_words, kPatternSeed, sum.get(), grids, stream, result.name);
    const uint32_t timed_seed = reads ? kPatternSeed : kWritePatternSeed;
    const auto body = [&](int) {
        if (reads) {
            launch_sum(data.get(), num_words, sum.get(), grids, stream.get());
        } else {
            launch_write(data.get(), num_words, timed_seed, grids, stream.get());
        }
    };

    Timer timer({StreamOnDevice{0, stream.get()}});
    const TimingStats stats = timer.time(body, timing);
    expect_pattern(data.get(), num_words, timed_seed, sum.get(), grids, stream, result.name);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(rate_figure("bandwidth", "GB/s", static_cast<double>(bytes) / kBytesPerGigabyte, stats));
    return result;
}

}  // namespace

Case device_read_case(size_t bytes, const TimingOptions& timing) {
    return stream_case(StreamDirection::kRead, bytes, timing);
}

Case device_write_case(size_t bytes, const TimingOptions& timing) {
    return stream_case(StreamDirection::kWrite, bytes, timing);
}

}  // namespace mok::bench::ceilings
