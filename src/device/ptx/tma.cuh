// Tensor memory accelerator (TMA): bulk tensor copies global -> shared completing on an mbarrier, and shared ->
// global joining the issuing thread's bulk async-group (commit and wait with device/ptx/bulk_copy.cuh).
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace mok::ptx {

// Tensor maps are kernel parameters (__grid_constant__ CUtensorMap); prefetching one pulls its descriptor
// into the cache ahead of the first load that names it.
__device__ __forceinline__ void prefetch_tensor_map(const void* tensor_map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map)) : "memory");
}

// Loads the 2-D box at (c0 innermost, c1) into `smem`; the bytes count toward `bar`'s transaction count.
__device__ __forceinline__ void tma_load_2d(void* smem, const void* tensor_map, int32_t c0, int32_t c1, uint64_t* bar) {
    const int32_t coords[2] = {c0, c1};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, tensor_map, coords, bar);
}

// Loads the 3-D box at (c0 innermost, c1, c2).
__device__ __forceinline__ void tma_load_3d(void* smem, const void* tensor_map, int32_t c0, int32_t c1, int32_t c2,
                                            uint64_t* bar) {
    const int32_t coords[3] = {c0, c1, c2};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, tensor_map, coords, bar);
}

// Loads the 4-D box at (c0 innermost, c1, c2, c3).
__device__ __forceinline__ void tma_load_4d(void* smem, const void* tensor_map, int32_t c0, int32_t c1, int32_t c2,
                                            int32_t c3, uint64_t* bar) {
    const int32_t coords[4] = {c0, c1, c2, c3};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, tensor_map, coords, bar);
}

// The same loads, multicast: the box lands at `smem`'s offset in the shared memory of every cluster CTA whose bit
// is set in `cta_mask`, and its bytes count toward the barrier at `bar`'s offset in each of those CTAs.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem, const void* tensor_map, int32_t c0, int32_t c1,
                                                      uint64_t* bar, uint16_t cta_mask) {
    const int32_t coords[2] = {c0, c1};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, tensor_map, coords, bar,
                                    cta_mask);
}

__device__ __forceinline__ void tma_load_3d_multicast(void* smem, const void* tensor_map, int32_t c0, int32_t c1,
                                                      int32_t c2, uint64_t* bar, uint16_t cta_mask) {
    const int32_t coords[3] = {c0, c1, c2};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, tensor_map, coords, bar,
                                    cta_mask);
}

// Stores `smem` to the 3-D box at (c0 innermost, c1, c2); elements outside the tensor are not written. The
// store joins this thread's current bulk async-group; the buffer may be rewritten once bulk_wait_group_read
// says the group has read it. The writers of `smem` ran fence_proxy_async_shared_cta before the barrier that
// handed it to this thread.
__device__ __forceinline__ void tma_store_3d(const void* tensor_map, int32_t c0, int32_t c1, int32_t c2,
                                             const void* smem) {
    const int32_t coords[3] = {c0, c1, c2};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, tensor_map, coords, smem);
}

// Adds `smem` element-wise into the 3-D box at (c0 innermost, c1, c2) of global memory (the tensor map's element
// type; fp32 here: each sum rounded to nearest, once); elements outside the tensor are neither read nor written. Like
// tma_store_3d, it joins this thread's bulk async-group, and its writers fenced to the async proxy before handing
// `smem` over.
__device__ __forceinline__ void tma_reduce_add_3d(const void* tensor_map, int32_t c0, int32_t c1, int32_t c2,
                                                  const void* smem) {
    const int32_t coords[3] = {c0, c1, c2};
    cuda::ptx::cp_reduce_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add,
                                           tensor_map, coords, smem);
}

}  // namespace mok::ptx
