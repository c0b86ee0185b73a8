// Warpgroup MMA (wgmma) support: shared-memory matrix descriptors and the fence / commit / wait protocol.
//
// The instructions themselves are in wgmma_instructions.cuh (generated). A warpgroup issues wgmma
// asynchronously: wgmma_fence orders the accumulator registers' prior writes before the first wgmma,
// commit_group closes a batch, and wait_group<N> blocks until at most N batches are in flight.
#pragma once

#include <cstdint>

#include "device/ptx/wgmma_instructions.cuh"

namespace mok::ptx {

// Operand tiles are written by TMA with 128-byte swizzling: each 128-byte line (64 bf16) of the tile has its
// eight 16-byte chunks permuted by the line index mod 8, so a warp's reads of one chunk column hit eight
// different bank groups. Descriptor layout (PTX ISA, "Matrix Descriptor Format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4
//   bits 62-63  swizzle mode (1 = 128-byte)
inline constexpr uint32_t kSwizzleBytes = 128;
// Eight 128-byte lines form one swizzle atom; atoms repeat along the non-contiguous dimension.
inline constexpr uint32_t kSwizzleAtomBytes = 8 * kSwizzleBytes;

__device__ __forceinline__ uint64_t make_smem_desc_sw128(const void* smem, uint32_t leading_byte_offset,
                                                         uint32_t stride_byte_offset) {
    constexpr uint64_t kSwizzle128B = 1;
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((address >> 4) & 0x3fff);
    desc |= static_cast<uint64_t>((leading_byte_offset >> 4) & 0x3fff) << 16;
    desc |= static_cast<uint64_t>((stride_byte_offset >> 4) & 0x3fff) << 32;
    desc |= kSwizzle128B << 62;
    return desc;
}

// K-major operand (K contiguous): a tile of rows of 64 bf16 (one 128-byte line each). The K extent of one
// instruction (16 elements, 32 bytes) lies inside a line, so the leading offset is unused; consecutive groups
// of eight rows are one atom apart. Advance along K inside the line by moving the start address.
__device__ __forceinline__ uint64_t make_k_major_desc(const void* smem) {
    return make_smem_desc_sw128(smem, /*leading_byte_offset=*/0, /*stride_byte_offset=*/kSwizzleAtomBytes);
}

// MN-major operand (M or N contiguous), as TMA writes a box of 64 MN elements by `k_rows` K rows: each K row
// is one 128-byte line. Along K, groups of eight lines are one atom apart (stride offset); along MN, the next
// 64 elements live in the next box, `box_bytes` further (leading offset).
__device__ __forceinline__ uint64_t make_mn_major_desc(const void* smem, uint32_t box_bytes) {
    return make_smem_desc_sw128(smem, /*leading_byte_offset=*/box_bytes, /*stride_byte_offset=*/kSwizzleAtomBytes);
}

// Orders this thread's prior register writes (the accumulators) before the warpgroup's next wgmma.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the batch of wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kMaxInFlight committed batches are still running.
template <int kMaxInFlight>
__device__ __forceinline__ void wgmma_wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kMaxInFlight) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma boundary: wgmma writes the
// registers asynchronously, behind the compiler's back.
template <int kNum>
__device__ __forceinline__ void fence_accumulators(float (&d)[kNum]) {
#pragma unroll
    for (int i = 0; i < kNum; ++i) {
        asm volatile("" : "+f"(d[i])::"memory");
    }
}

}  // namespace mok::ptx
