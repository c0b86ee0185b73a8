#include "bench/transport/sm_copy.hpp"

#include "bench/common/cuda_check.hpp"

namespace mok::bench::transport {
namespace {

constexpr int kCopyThreads = 1024;
// Independent 16-byte loads each thread keeps in flight: enough to cover NVLink latency.
constexpr int kLoadsInFlight = 4;

__global__ void __launch_bounds__(kCopyThreads)
    sm_pull_copy_kernel(comm::NcclPeers peers, int32_t peer, uint64_t src_offset, uint4* dst, size_t count) {
    const uint4* src = static_cast<const uint4*>(peers.peer_ptr(peer, src_offset));
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (kLoadsInFlight - 1) * stride < count; i += kLoadsInFlight * stride) {
        uint4 v[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            v[j] = src[i + j * stride];
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            dst[i + j * stride] = v[j];
        }
    }
    for (; i < count; i += stride) {
        dst[i] = src[i];
    }
}

__global__ void __launch_bounds__(kCopyThreads)
    sm_gather_copy_kernel(comm::NcclPeers peers, int32_t peer, const uint64_t* row_offsets, uint32_t row_chunks,
                          uint4* dst, size_t count) {
    const char* base = static_cast<const char*>(peers.peer_ptr(peer, 0));
    const auto source = [&](size_t i) {
        return reinterpret_cast<const uint4*>(base + row_offsets[i / row_chunks]) + i % row_chunks;
    };
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (kLoadsInFlight - 1) * stride < count; i += kLoadsInFlight * stride) {
        uint4 v[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            v[j] = *source(i + j * stride);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            dst[i + j * stride] = v[j];
        }
    }
    for (; i < count; i += stride) {
        dst[i] = *source(i);
    }
}

}  // namespace

void enqueue_sm_gather_copy(const comm::NcclPeers& peers, int32_t peer, const uint64_t* row_offsets, int64_t num_rows,
                            uint32_t row_bytes, void* dst, int32_t num_blocks, cudaStream_t stream) {
    const uint32_t row_chunks = row_bytes / sizeof(uint4);
    sm_gather_copy_kernel<<<num_blocks, kCopyThreads, 0, stream>>>(
        peers, peer, row_offsets, row_chunks, static_cast<uint4*>(dst), static_cast<size_t>(num_rows) * row_chunks);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void enqueue_sm_pull_copy(const comm::NcclPeers& peers, int32_t peer, uint64_t src_offset, void* dst, size_t bytes,
                          int32_t num_blocks, cudaStream_t stream) {
    sm_pull_copy_kernel<<<num_blocks, kCopyThreads, 0, stream>>>(peers, peer, src_offset, static_cast<uint4*>(dst),
                                                                 bytes / sizeof(uint4));
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

}  // namespace mok::bench::transport
