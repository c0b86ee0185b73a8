// Warpgroup-level control: register reallocation, named barriers, and the generic-to-async proxy fence.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace mok::ptx {

// setmaxnreg: a warpgroup returns registers (dec) or claims them (inc). Takes effect only under a register
// cap at kernel entry (__launch_bounds__(threads, 1)); every warp of the warpgroup must execute it.
template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// bar.sync on a named barrier among `num_threads` threads (a multiple of 32). Orders shared-memory accesses of
// the participating threads, like __syncthreads does for the whole block.
__device__ __forceinline__ void named_barrier_sync(uint32_t barrier_id, uint32_t num_threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(barrier_id), "r"(num_threads) : "memory");
}

// bar.red.and on a named barrier: bar.sync that also returns whether `pred` held in every participating thread.
// Every thread of the barrier must use this form for the round.
__device__ __forceinline__ bool named_barrier_sync_all(uint32_t barrier_id, uint32_t num_threads, bool pred) {
    uint32_t all = 0;
    asm volatile(
        "{\n"
        ".reg .pred p, q;\n"
        "setp.ne.u32 p, %1, 0;\n"
        "bar.red.and.pred q, %2, %3, p;\n"
        "selp.u32 %0, 1, 0, q;\n"
        "}\n"
        : "=r"(all)
        : "r"(static_cast<uint32_t>(pred)), "r"(barrier_id), "r"(num_threads)
        : "memory");
    return all != 0;
}

// bar.arrive on a named barrier among `num_threads` threads: signals without waiting. The producer half of a
// producer/consumer hand-off: the arriving threads' prior memory accesses are performed, for the threads that
// wait on the barrier with named_barrier_sync, before those threads continue.
__device__ __forceinline__ void named_barrier_arrive(uint32_t barrier_id, uint32_t num_threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(barrier_id), "r"(num_threads) : "memory");
}

// Makes this thread's prior generic-proxy shared-memory writes visible to the async proxy (TMA stores,
// wgmma operand reads). Each writing thread runs it before the barrier that hands the data over.
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
}

}  // namespace mok::ptx
