// Tile shape, thread roles and shared-memory budget of mok's grouped GEMM kernels.
//
// One CTA per SM (persistent), 384 threads in three warpgroups:
//   warpgroup 0       producer: one thread issues the TMA loads of every stage; the rest idle with few registers;
//   warpgroups 1, 2   consumers: each owns 64 rows of the 128-row tile and issues m64nBLOCK_Nk16 wgmma.
// The tile is (BLOCK_M, BLOCK_N) = (128, 256) with BLOCK_K = 64 (one 128-byte swizzle line of bf16), so a
// stage holds a 16 KiB A tile and a 32 KiB B tile. Four stages (192 KiB) keep about three K blocks of loads in
// flight ahead of the tensor cores, and leave room for the 32 KiB epilogue staging buffer within the 227 KiB
// a block may use (the accumulate mode by loads stages 64 KiB and runs three: GemmLayout, grouped_gemm_kernel.cuh). A
// 128 x 256 tile does 2*128*256*64 flops per 48 KiB loaded, enough arithmetic intensity for the tensor cores to outrun
// shared-memory and L2 bandwidth.
#pragma once

#include <cstdint>

namespace mok::gemm {

inline constexpr int BLOCK_M = 128;
inline constexpr int BLOCK_N = 256;
inline constexpr int BLOCK_K = 64;
inline constexpr int WGMMA_M = 64;
inline constexpr int WGMMA_K = 16;
inline constexpr int kStages = 4;

inline constexpr int kNumConsumerWarpgroups = BLOCK_M / WGMMA_M;
inline constexpr int kThreadsPerWarpgroup = 128;
inline constexpr int kNumThreads = kThreadsPerWarpgroup * (1 + kNumConsumerWarpgroups);
inline constexpr int kNumConsumerWarps = kNumConsumerWarpgroups * kThreadsPerWarpgroup / 32;

// Register split (setmaxnreg): the registers the launch gives a CTA go mostly to the consumers, whose 64 x 256 fp32
// accumulator alone takes 128 registers per thread. setmaxnreg only moves registers within the CTA's allocation
// (kNumThreads x kLaunchRegisters; an increase beyond it waits for ever): 2 x 128 x 232 + 128 x 40 = 64,512.
inline constexpr uint32_t kLaunchRegisters = 64 * 1024 / kNumThreads / 8 * 8;  // per thread, in units of 8
inline constexpr uint32_t kProducerRegisters = 40;
inline constexpr uint32_t kConsumerRegisters = 232;
// Whether a split of the launch's registers (the producer warpgroup's, each consumer warpgroup's) fits the CTA's
// allocation.
__host__ __device__ constexpr bool register_split_fits(uint32_t producer, uint32_t consumer) {
    return kThreadsPerWarpgroup * (producer + kNumConsumerWarpgroups * consumer) <= kNumThreads * kLaunchRegisters;
}
static_assert(register_split_fits(kProducerRegisters, kConsumerRegisters),
              "the roles' registers must fit what the launch allocates to the CTA");

// Shared memory one CTA may use on Hopper (sm_90's opt-in limit); every arrangement's storage must fit it.
inline constexpr int kMaxCtaSharedBytes = 227 * 1024;

inline constexpr int kBf16Bytes = 2;
inline constexpr int kStageBytesA = BLOCK_M * BLOCK_K * kBf16Bytes;  // (BLOCK_M, BLOCK_K) bf16
inline constexpr int kStageBytesB = BLOCK_N * BLOCK_K * kBf16Bytes;  // (BLOCK_N, BLOCK_K) bf16
// A box of an MN-major operand: 64 contiguous M or N elements (one 128-byte line) by BLOCK_K rows of K.
inline constexpr int kMnBoxElements = 64;
inline constexpr int kMnBoxBytes = kMnBoxElements * BLOCK_K * kBf16Bytes;

// Epilogue staging: each consumer warpgroup stages 64 rows x 128 columns of bf16 (256-byte rows, swizzled in
// 16-byte chunks) before coalesced stores to global memory.
inline constexpr int kStagingCols = 128;
inline constexpr int kStagingRowBytes = kStagingCols * kBf16Bytes;
inline constexpr int kStagingBytesPerWarpgroup = WGMMA_M * kStagingRowBytes;

// Named barrier ids: 0 is __syncthreads; each consumer warpgroup has its own for the epilogue, the two consumers
// share one for the K-block masking of weight-gradient tiles, and the epilogue-warps arrangement's epilogue threads
// have one for publishing a stored row tile.
enum class NamedBarrier : uint32_t {
    kConsumer0Epilogue = 1,
    kConsumer1Epilogue = 2,
    kConsumersMask = 3,
    kEpilogueWarps = 4,
};

// The epilogue-warps arrangement (epilogue_warps_kernel.cuh): the producer warpgroup's warps after the first, which
// issues the loads, finish the consumers' epilogues.
inline constexpr int kEpilogueThreads = kThreadsPerWarpgroup - 32;

enum class WarpgroupRole : int {
    kProducer = 0,
    kConsumer = 1,
};

// The ping-pong arrangement (pingpong_kernel.cuh): clusters of two CTAs, each holding one 64-row half of every
// tile, its consumer warpgroups taking tiles in turn.
inline constexpr int kPingPongClusterSize = 2;
inline constexpr uint16_t kPingPongClusterMask = (1u << kPingPongClusterSize) - 1;  // multicast to both CTAs
inline constexpr int kPingPongRows = BLOCK_M / kPingPongClusterSize;                // a CTA's half of a tile
inline constexpr int kPingPongStageBytesA = kPingPongRows * BLOCK_K * kBf16Bytes;   // (64, BLOCK_K) bf16

// Accumulator registers per consumer thread for an m64 x BLOCK_N tile.
inline constexpr int kNumAccumulators = WGMMA_M * BLOCK_N / kThreadsPerWarpgroup;

}  // namespace mok::gemm
