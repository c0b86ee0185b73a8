#include "bench/transport/sm_copy.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "bench/common/cuda_check.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/mbarrier.cuh"

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

// Shared memory the bulk gather's row stages may take (the rest of the 227 KiB holds its barriers).
constexpr uint32_t kGatherStagingBytes = 200 * 1024;
constexpr uint32_t kMaxGatherStages = 64;
constexpr uint32_t kMaxGatherIssuers = 8;

// The same rows by bulk copies: in each block, lane 0 of each of `num_issuers` warps pulls whole rows from the peer
// into its own ring of row-sized shared-memory stages (cp.async.bulk completing on an mbarrier per stage) and stores
// each landed row to `dst` by a bulk store, keeping every stage of its ring but one in flight. How far the pull's
// rate moves when the TMA unit, not the threads' loads, carries the NVLink reads. A row that does not land within the
// budget is reported in `ctx`'s record (WaitSite::kBulkCopy) and ends the issuer's loop.
__global__ void __launch_bounds__(kMaxGatherIssuers * 32)
    sm_bulk_gather_kernel(comm::NcclPeers peers, int32_t peer, const uint64_t* row_offsets, uint32_t row_bytes,
                          int64_t num_rows, uint8_t* dst, uint32_t stages_per_issuer, device::WaitContext ctx) {
    extern __shared__ __align__(128) uint8_t all_stages[];
    __shared__ uint64_t all_full[kMaxGatherStages];
    if (threadIdx.x % 32 != 0) {
        return;
    }
    const uint32_t issuer = threadIdx.x / 32;
    const uint32_t num_issuers = blockDim.x / 32;
    uint8_t* stages = all_stages + static_cast<size_t>(issuer) * stages_per_issuer * row_bytes;
    uint64_t* full = all_full + issuer * stages_per_issuer;
    const char* base = static_cast<const char*>(peers.peer_ptr(peer, 0));
    for (uint32_t s = 0; s < stages_per_issuer; ++s) {
        ptx::mbarrier_init(&full[s], 1);
    }
    ptx::fence_mbarrier_init();
    // This issuer's rows: first, first + stride, ...
    const int64_t first = static_cast<int64_t>(blockIdx.x) + static_cast<int64_t>(issuer) * gridDim.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * num_issuers;
    const int64_t my_rows = num_rows > first ? (num_rows - first + stride - 1) / stride : 0;
    auto row_of = [&](int64_t j) { return first + j * stride; };
    auto load = [&](int64_t j) {
        const uint32_t s = static_cast<uint32_t>(j % stages_per_issuer);
        ptx::mbarrier_arrive_expect_tx_release_cta(&full[s], row_bytes);
        ptx::bulk_load_global_to_shared(stages + s * row_bytes, base + row_offsets[row_of(j)], row_bytes, &full[s]);
    };
    for (int64_t j = 0; j < static_cast<int64_t>(stages_per_issuer) && j < my_rows; ++j) {
        load(j);
    }
    for (int64_t j = 0; j < my_rows; ++j) {
        const uint32_t s = static_cast<uint32_t>(j % stages_per_issuer);
        const uint32_t parity = static_cast<uint32_t>(j / stages_per_issuer) & 1u;
        // Reported: the issuer's rows landed so far, of its rows.
        if (!device::bounded_wait_own(
                ctx, WaitSite::kBulkCopy, my_rows,
                [&] { return ptx::mbarrier_try_wait_parity_acquire_cta(&full[s], parity); }, [&] { return j; })) {
            break;
        }
        ptx::bulk_store_shared_to_global(dst + row_of(j) * static_cast<int64_t>(row_bytes), stages + s * row_bytes,
                                         row_bytes);
        ptx::bulk_commit_group();
        // The previous row's store has read its stage once at most one group is pending: refill that stage.
        if (j >= 1 && j - 1 + stages_per_issuer < my_rows) {
            ptx::bulk_wait_group_read<1>();
            load(j - 1 + stages_per_issuer);
        }
    }
    ptx::bulk_wait_group<0>();
}

}  // namespace

void enqueue_sm_gather_copy(const comm::NcclPeers& peers, int32_t peer, const uint64_t* row_offsets, int64_t num_rows,
                            uint32_t row_bytes, void* dst, int32_t num_blocks, cudaStream_t stream) {
    const uint32_t row_chunks = row_bytes / sizeof(uint4);
    sm_gather_copy_kernel<<<num_blocks, kCopyThreads, 0, stream>>>(
        peers, peer, row_offsets, row_chunks, static_cast<uint4*>(dst), static_cast<size_t>(num_rows) * row_chunks);
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void enqueue_sm_bulk_gather_copy(const comm::NcclPeers& peers, int32_t peer, const uint64_t* row_offsets,
                                 int64_t num_rows, uint32_t row_bytes, void* dst, int32_t num_blocks,
                                 int32_t num_issuers, DeviceStatus* status, int32_t rank, uint64_t timeout_ns,
                                 cudaStream_t stream) {
    const auto issuers = static_cast<uint32_t>(std::clamp<int32_t>(num_issuers, 1, kMaxGatherIssuers));
    const uint32_t stages_per_issuer = std::min(kMaxGatherStages, kGatherStagingBytes / row_bytes) / issuers;
    // A ring refills the previous row's stage while the next row's store goes out: it needs two.
    constexpr uint32_t kMinStages = 2;
    if (stages_per_issuer < kMinStages) {
        throw std::invalid_argument("sm_bulk_gather: rows of " + std::to_string(row_bytes) + " bytes leave " +
                                    std::to_string(issuers) + " issuers fewer than two stages each");
    }
    const size_t shared = static_cast<size_t>(stages_per_issuer) * issuers * row_bytes;
    MOK_BENCH_CHECK_CUDA(cudaFuncSetAttribute(sm_bulk_gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared)));
    sm_bulk_gather_kernel<<<num_blocks, issuers * 32, shared, stream>>>(peers, peer, row_offsets, row_bytes, num_rows,
                                                                        static_cast<uint8_t*>(dst), stages_per_issuer,
                                                                        device::WaitContext{status, rank, timeout_ns});
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

void enqueue_sm_pull_copy(const comm::NcclPeers& peers, int32_t peer, uint64_t src_offset, void* dst, size_t bytes,
                          int32_t num_blocks, cudaStream_t stream) {
    sm_pull_copy_kernel<<<num_blocks, kCopyThreads, 0, stream>>>(peers, peer, src_offset, static_cast<uint4*>(dst),
                                                                 bytes / sizeof(uint4));
    MOK_BENCH_CHECK_CUDA(cudaGetLastError());
}

}  // namespace mok::bench::transport
