// How a consumer warpgroup addresses its operands in a stage: wgmma descriptors for K-major and MN-major tiles.
//
// K-major tiles come from one TMA box of (rows, BLOCK_K): row r is the 128-byte line r. MN-major tiles come
// from boxes of (BLOCK_K, 64) -- 64 contiguous M or N elements per K row -- placed one after another along MN.
#pragma once

#include <cstdint>

#include "device/gemm/gemm_config.cuh"
#include "device/ptx/wgmma.cuh"

namespace mok::gemm {

enum class Major : int {
    kK = 0,   // K contiguous
    kMN = 1,  // M (for A) or N (for B) contiguous; wgmma's "transposed" operand
};

// Descriptor of warpgroup `wg`'s A operand (its 64 rows of the tile) at K step `k_step` of the stage.
template <Major kMajor>
__device__ __forceinline__ uint64_t a_descriptor(const uint8_t* stage_a, int wg, int k_step) {
    if constexpr (kMajor == Major::kK) {
        // (BLOCK_M, BLOCK_K): warpgroup wg's rows start WGMMA_M lines in; K steps of 16 elements are 32 bytes.
        return ptx::make_k_major_desc(stage_a + wg * WGMMA_M * ptx::kSwizzleBytes + k_step * WGMMA_K * kBf16Bytes);
    } else {
        // (BLOCK_K, BLOCK_M) as BLOCK_M / 64 boxes: warpgroup wg's 64 M elements are box wg; a K step is 16 lines.
        return ptx::make_mn_major_desc(stage_a + wg * kMnBoxBytes + k_step * WGMMA_K * ptx::kSwizzleBytes, kMnBoxBytes);
    }
}

// Descriptor of the B operand (all BLOCK_N columns) at K step `k_step` of the stage.
template <Major kMajor>
__device__ __forceinline__ uint64_t b_descriptor(const uint8_t* stage_b, int k_step) {
    if constexpr (kMajor == Major::kK) {
        return ptx::make_k_major_desc(stage_b + k_step * WGMMA_K * kBf16Bytes);
    } else {
        return ptx::make_mn_major_desc(stage_b + k_step * WGMMA_K * ptx::kSwizzleBytes, kMnBoxBytes);
    }
}

}  // namespace mok::gemm
