// Flag loads, stores, counters and fences with an explicit memory order and scope: the signalling vocabulary of
// the expert-parallel transport (src/device/comm).
//
// Naming: <operation>_<order>_<scope>. Scope `gpu` orders threads of one device (a rank's own kernels and its
// GEMM consumers); scope `sys` also orders threads of other devices that map the same memory through NVLink
// peer mappings (the ranks of the EP group), and is what every cross-rank flag uses. The transport's rule for a
// flag is always one of two patterns:
//   publish: data writes; then a release (a release store, or a release fence and relaxed stores);
//   observe: acquire loads of the flag until one reads the awaited value; then data reads.
// Plain loads and stores of the data itself need no order: the release and acquire around them carry it.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace mok::ptx {

// ---- Loads of flags. ----

// Relaxed at system scope: polls a flag another rank (or another kernel) writes. Never cached in a register or
// L1 across iterations, so a spin sees a peer's store; orders nothing (waits observe with ld_acquire_sys).
__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* ptr) {
    uint64_t value;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
    return value;
}

// Relaxed at GPU scope: polls a flag written by this device's own threads (ring counters, readiness of rows).
__device__ __forceinline__ uint64_t ld_relaxed_gpu(const uint64_t* ptr) {
    uint64_t value;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
    return value;
}

// Acquire at system scope: one load that both observes a flag another device (or this one, through its window) wrote
// with release semantics and orders the caller's later reads and writes after it. It orders only what follows: unlike
// a fence.acq_rel after a relaxed load, it does not also wait for the caller's earlier writes to drain (MEMBAR.SYS at
// system scope).
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* ptr) {
    uint64_t value;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
    return value;
}

// Acquire at GPU scope: one load that both observes a flag and orders the caller's later reads after it.
__device__ __forceinline__ uint64_t ld_acquire_gpu(const uint64_t* ptr) {
    uint64_t value;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
    return value;
}

// Acquire at CTA scope, on a shared-memory word: one warp observing another warp's release of what it wrote.
__device__ __forceinline__ uint64_t ld_acquire_cta_shared(const uint64_t* ptr) {
    uint64_t value;
    asm volatile("ld.acquire.cta.shared.u64 %0, [%1];"
                 : "=l"(value)
                 : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(ptr)))
                 : "memory");
    return value;
}

// ---- Stores of flags. ----

// Release at CTA scope, on a shared-memory word: what this thread (and, after a warp barrier, its warp) wrote before
// is visible to a thread of the block that acquires the value.
__device__ __forceinline__ void st_release_cta_shared(uint64_t* ptr, uint64_t value) {
    asm volatile("st.release.cta.shared.u64 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(ptr))),
                 "l"(value)
                 : "memory");
}

// Release at system scope: everything this thread wrote (or observed) before is visible to any thread, on any
// device, that acquires the value. Used for one-off flags (a rank announcing its expert ids or its dy rows).
__device__ __forceinline__ void st_release_sys(uint64_t* ptr, uint64_t value) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

// Relaxed at system scope: a flag store that follows a fence_acq_rel_sys() in the same thread; the fence gives
// it release semantics, so a batch of flags costs one fence instead of one per store.
__device__ __forceinline__ void st_relaxed_sys(uint64_t* ptr, uint64_t value) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

// Release at GPU scope: publishes rows (or frees ring slots) to consumers on the same device.
__device__ __forceinline__ void st_release_gpu(uint64_t* ptr, uint64_t value) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

// Relaxed at GPU scope: a plain control word written by one kernel and read by the next one in stream order
// (kernel boundaries order it; the relaxed atomic only keeps the compiler from splitting or caching it).
__device__ __forceinline__ void st_relaxed_gpu(uint64_t* ptr, uint64_t value) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

// ---- Counters. ----

// Adds `value` and returns the previous value; acquire-release at GPU scope. The "last block" pattern: each
// block's add releases its own earlier work, and the block that sees the final count acquires everyone's.
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* ptr, uint32_t value) {
    uint32_t previous;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(previous) : "l"(ptr), "r"(value) : "memory");
    return previous;
}

// Adds `value` and returns the previous value; relaxed at GPU scope. For counters that only pace work and guard
// no data (gemm::WaveSync), or whose ordering comes from fences around them (the dispatch's landed rows,
// comm::DispatchPolicy).
__device__ __forceinline__ uint32_t atom_add_relaxed_gpu(uint32_t* ptr, uint32_t value) {
    uint32_t previous;
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;" : "=r"(previous) : "l"(ptr), "r"(value) : "memory");
    return previous;
}

// Compare-and-swap, relaxed at GPU scope: stores `desired` if the word holds `expected`; returns what it held. For
// words that only hand out work (comm::TileQueue's claims) and guard no data.
__device__ __forceinline__ uint64_t atom_cas_relaxed_gpu(uint64_t* ptr, uint64_t expected, uint64_t desired) {
    uint64_t previous;
    asm volatile("atom.relaxed.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(previous)
                 : "l"(ptr), "l"(expected), "l"(desired)
                 : "memory");
    return previous;
}

// Adds `value`, relaxed at GPU scope, without returning anything: the thread does not wait for it. The dispatch's
// landed-row counts (comm::DispatchPolicy), released by a fence before them.
__device__ __forceinline__ void red_add_relaxed_gpu(uint32_t* ptr, uint32_t value) {
    asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

// Acquire at GPU scope, 32 bits: a count that, once whole, orders the caller's later accesses after the writes its
// adders released.
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* ptr) {
    uint32_t value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
    return value;
}

// Relaxed 32-bit read at GPU scope: the poll of such a counter.
__device__ __forceinline__ uint32_t ld_relaxed_gpu(const uint32_t* ptr) {
    uint32_t value;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
    return value;
}

// ---- Fences. ----

// Acquire-release fence at system scope: before relaxed flag stores it is the release half of "publish" (observing
// polls with acquire loads instead, ld_acquire_sys). Cumulative: writes this thread observed from other threads
// (through a bar.sync or an earlier acquire) are released too.
__device__ __forceinline__ void fence_acq_rel_sys() {
    cuda::ptx::fence(cuda::ptx::sem_acq_rel, cuda::ptx::scope_sys);
}

// Acquire-release fence at GPU scope: the same for flags that stay on one device.
__device__ __forceinline__ void fence_acq_rel_gpu() {
    cuda::ptx::fence(cuda::ptx::sem_acq_rel, cuda::ptx::scope_gpu);
}

// Proxy fence between the generic proxy (ordinary loads, stores and flags) and the async proxy (bulk copies)
// for global memory. Needed in both directions: after observing a flag that guards data which a bulk copy will
// read or overwrite, and after a bulk store completes, before a flag announces its data.
__device__ __forceinline__ void fence_proxy_async_global() {
    cuda::ptx::fence_proxy_async(cuda::ptx::space_global);
}

}  // namespace mok::ptx
