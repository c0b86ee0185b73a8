// Matrix stores: a warp's register fragments of 8 x 8 matrices of 16-bit elements into shared memory (stmatrix).
#pragma once

#include <cstdint>

namespace mok::ptx {

// Stores four 8 x 8 matrices of 16-bit elements, one 16-byte row per address (stmatrix .x4): lane l gives the
// shared-memory address of row l % 8 of matrix l / 8, and register j of lane t holds row t / 4, elements
// 2 (t % 4) and 2 (t % 4) + 1, of matrix j -- the layout in which wgmma leaves an accumulator's eight-column groups,
// so a warp moves 512 bytes per instruction where 4-byte stores move 128. Every lane of the warp must take part.
// A weak shared-memory store, like st.shared: what orders it for other threads or the async proxy is the caller's
// barrier or fence, as after any store.
__device__ __forceinline__ void stmatrix_x4(void* row_address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

}  // namespace mok::ptx
