// The two bounded waits on the GPU (src/device/common/bounded_wait.cuh). bounded_wait gives up at its deadline or
// as soon as another block has recorded an error; bounded_wait_own, for a block's own asynchronous operations
// (the row copy's bulk loads), only at its deadline. Both report a timeout with the rank, the block, the site and
// the values the caller names.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/device_status.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/common/device_buffer.hpp"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/timer.cuh"

namespace mok::test {
namespace {

constexpr int32_t kRank = 3;
// Long enough that a wait which gives up early cannot pass for one that waited; short for a test.
constexpr uint64_t kTimeoutNs = 50'000'000;
// Bytes a barrier phase is told to expect from a copy that is never issued: a load that never lands.
constexpr uint32_t kLostBytes = 16;
// How long the arriving warp of the late-arrival kernel spins before it arrives: well under kTimeoutNs, and well over
// the polls a wait makes before it first reads the clock (each try_wait may suspend the thread for a while).
constexpr uint64_t kLateArrivalNs = 2'000'000;

enum class Waiter : int32_t { kBoundedWait, kBoundedWaitOwn };

struct WaitOutcome {
    int32_t landed;      // the wait's result
    uint64_t waited_ns;  // how long it took
};

template <typename ReadyFn>
__device__ bool wait_with(Waiter waiter, const device::WaitContext& ctx, ReadyFn&& ready) {
    auto observe = [] { return int64_t{5}; };
    return waiter == Waiter::kBoundedWaitOwn ? device::bounded_wait_own(ctx, WaitSite::kBulkCopy, 7, ready, observe)
                                             : device::bounded_wait(ctx, WaitSite::kBulkCopy, 7, ready, observe);
}

// One thread: a phase that expects bytes no copy will bring.
__global__ void wait_for_lost_load(DeviceStatus* status, Waiter waiter, WaitOutcome* out) {
    __shared__ uint64_t full;
    ptx::mbarrier_init(&full, 1);
    ptx::fence_mbarrier_init();
    ptx::mbarrier_arrive_expect_tx_release_cta(&full, kLostBytes);
    const device::WaitContext ctx{status, kRank, kTimeoutNs};
    const uint64_t start = ptx::global_timer_ns();
    const bool landed = wait_with(waiter, ctx, [&] { return ptx::mbarrier_try_wait_parity_acquire_cta(&full, 0); });
    *out = {landed ? 1 : 0, ptx::global_timer_ns() - start};
}

// Two warps: warp 1 arrives on the barrier after kLateArrivalNs; lane 0 of warp 0 waits for it, in a launch whose
// record already holds another block's error.
__global__ void wait_for_late_arrival(DeviceStatus* status, Waiter waiter, WaitOutcome* out) {
    __shared__ uint64_t full;
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(&full, 1);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    const device::WaitContext ctx{status, kRank, kTimeoutNs};
    if (threadIdx.x == 32) {
        const uint64_t start = ptx::global_timer_ns();
        while (ptx::global_timer_ns() - start < kLateArrivalNs) {
        }
        ptx::mbarrier_arrive_release_cta(&full);
    } else if (threadIdx.x == 0) {
        const uint64_t start = ptx::global_timer_ns();
        const bool landed = wait_with(waiter, ctx, [&] { return ptx::mbarrier_try_wait_parity_acquire_cta(&full, 0); });
        *out = {landed ? 1 : 0, ptx::global_timer_ns() - start};
    }
}

struct WaitRun {
    WaitOutcome outcome;
    DeviceStatus status;
};

// One launch of `kernel` with the record starting as `initial`; the outcome and the record after it. (A void
// function: the CUDA checks end a failing test by returning.)
template <typename Kernel>
void run(Kernel kernel, int threads, Waiter waiter, const DeviceStatus& initial, WaitRun& result) {
    DeviceBuffer<DeviceStatus> status(std::vector<DeviceStatus>{initial});
    DeviceBuffer<WaitOutcome> outcome(std::vector<WaitOutcome>{{-1, 0}});
    kernel<<<1, threads>>>(status.get(), waiter, outcome.get());
    MOK_ASSERT_CUDA(cudaGetLastError());
    MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    result = {outcome.download()[0], status.download()[0]};
}

// The record another block left: a timeout of its own.
DeviceStatus other_block_failed() {
    DeviceStatus s{};
    s.code = static_cast<int32_t>(DeviceErrorCode::kTimeout);
    s.rank = 1;
    s.block = 9;
    s.site = static_cast<int32_t>(WaitSite::kPeerBarrier);
    return s;
}

TEST(BoundedWaitOwn, ReportsALoadThatNeverLands) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    WaitRun r{};
    ASSERT_NO_FATAL_FAILURE(run(wait_for_lost_load, 1, Waiter::kBoundedWaitOwn, DeviceStatus{}, r));
    EXPECT_EQ(r.outcome.landed, 0);
    EXPECT_GE(r.outcome.waited_ns, kTimeoutNs);
    EXPECT_EQ(r.status.code, static_cast<int32_t>(DeviceErrorCode::kTimeout));
    EXPECT_EQ(r.status.rank, kRank + 1);
    EXPECT_EQ(r.status.block, 0);
    EXPECT_EQ(r.status.site, static_cast<int32_t>(WaitSite::kBulkCopy));
    EXPECT_EQ(r.status.observed, 5);
    EXPECT_EQ(r.status.expected, 7);
}

// A wait by `waiter` for an arrival kLateArrivalNs late, in a launch whose record holds another block's error. The
// other block's record stays either way: the first error names the root cause.
void wait_after_another_block_failed(Waiter waiter, WaitRun& r) {
    const DeviceStatus failed = other_block_failed();
    ASSERT_NO_FATAL_FAILURE(run(wait_for_late_arrival, 64, waiter, failed, r));
    EXPECT_EQ(r.status.block, failed.block);
    EXPECT_EQ(r.status.site, failed.site);
}

TEST(BoundedWaitOwn, WaitsOnWhenAnotherBlockHasFailed) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    WaitRun r{};
    ASSERT_NO_FATAL_FAILURE(wait_after_another_block_failed(Waiter::kBoundedWaitOwn, r));
    EXPECT_EQ(r.outcome.landed, 1);
    EXPECT_GE(r.outcome.waited_ns, kLateArrivalNs);
}

TEST(BoundedWait, GivesUpAtOnceWhenAnotherBlockHasFailed) {
    if (!has_gpu()) {
        GTEST_SKIP() << "no GPU";
    }
    WaitRun r{};
    ASSERT_NO_FATAL_FAILURE(wait_after_another_block_failed(Waiter::kBoundedWait, r));
    EXPECT_EQ(r.outcome.landed, 0);
    EXPECT_LT(r.outcome.waited_ns, kLateArrivalNs);
}

}  // namespace
}  // namespace mok::test
