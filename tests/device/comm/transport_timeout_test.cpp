// Bounded waits on virtual ranks: a rank that never launches ends the others' step with a clear error within the
// timeout (no hang); a rank that stops after planning ends it in the combine; a rank that is merely late changes
// nothing, bit for bit.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_buffer.hpp"
#include "comm/transport_checks.hpp"
#include "comm/transport_problem.hpp"
#include "comm/transport_steps.hpp"
#include "comm/virtual_harness.hpp"
#include "common/device_status.hpp"
#include "host/comm/device_status.hpp"
#include "host/comm/transport_memory.hpp"

namespace mok::comm::testing {
namespace {

// Short, so that the failing tests end quickly; the whole failing step must end within a few of these.
constexpr uint64_t kShortTimeoutMs = 300;
constexpr auto kMaxFailureTime = std::chrono::milliseconds(4 * kShortTimeoutMs + 2000);
constexpr auto kDelay = std::chrono::milliseconds(200);

bool have_gpu() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count >= 1;
}

struct Streams {
    Streams() {
        check_cuda(cudaStreamCreateWithFlags(&early, cudaStreamNonBlocking), "cudaStreamCreate");
        check_cuda(cudaStreamCreateWithFlags(&late, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~Streams() {
        cudaStreamDestroy(early);
        cudaStreamDestroy(late);
    }
    cudaStream_t early = nullptr;
    cudaStream_t late = nullptr;
};

TransportCase four_ranks(uint64_t seed) {
    TransportCase c;
    c.ep_size = 4;
    c.tokens_per_rank = 200;
    c.hidden = 128;
    c.top_k = 4;
    c.num_experts = 12;
    c.num_shared = 1;
    c.seed = seed;
    return c;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(TransportTimeout, RankThatNeverLaunchesEndsTheStepWithAnError) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const VirtualHarness h(make_problem(four_ranks(800)), kShortTimeoutMs, 0);
    const Streams streams;
    const std::vector<int32_t> present = {0, 1, 3};
    const LaunchGroup<VirtualPeers> group = h.group(present);
    h.poison();
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(enqueue_forward(group, h.data(present), StepOptions{}, streams.early).is_ok());
    const Status status = read_device_status(status_records(group), streams.early);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(status.code(), StatusCode::kPeerTimeout) << status.to_string();
    EXPECT_TRUE(contains(status.message(), "rank 0")) << status.message();
    EXPECT_TRUE(contains(status.message(), to_string(WaitSite::kRoutingExchange))) << status.message();
    EXPECT_LT(elapsed, kMaxFailureTime);
}

// Rank 2 exchanges its routing and plans but never dispatches or pushes: the others wait for its expert outputs.
TEST(TransportTimeout, RankThatStopsAfterPlanningEndsTheCombine) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const VirtualHarness h(make_problem(four_ranks(801)), kShortTimeoutMs, 0);
    const Streams streams;
    const std::vector<int32_t> present = {0, 1, 3};
    const LaunchGroup<VirtualPeers> group = h.group(present);
    const LaunchGroup<VirtualPeers> stopped = h.group({2});
    h.poison();
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(enqueue_forward(group, h.data(present), StepOptions{}, streams.early).is_ok());
    const RankRouting routing = h.data_of(2).routing();
    ASSERT_TRUE(stage_rows(stopped.ranks[0].window, stopped.window, SourceRows::kTokens, h.data_of(2).x.data(),
                           h.problem().c.hidden, streams.late)
                    .is_ok());
    ASSERT_TRUE(enqueue_routing_exchange(stopped, &routing, streams.late).is_ok());
    ASSERT_TRUE(enqueue_plan(stopped, streams.late).is_ok());
    const Status status = read_device_status(status_records(group), streams.early);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(read_device_status(status_records(stopped), streams.late).is_ok());
    EXPECT_EQ(status.code(), StatusCode::kPeerTimeout) << status.to_string();
    EXPECT_TRUE(contains(status.message(), to_string(WaitSite::kCombineArrivals))) << status.message();
    EXPECT_LT(elapsed, kMaxFailureTime);
}

// The barrier: all ranks pass it twice (its epochs only grow); with one rank missing, the others report it.
TEST(TransportTimeout, BarrierPassesAndReportsAMissingRank) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const VirtualHarness h(make_problem(four_ranks(803)), kShortTimeoutMs, 0);
    const Streams streams;
    const LaunchGroup<VirtualPeers> all = h.group();
    for (int round = 0; round < 2; ++round) {
        ASSERT_TRUE(clear_device_status(status_records(all), streams.early).is_ok());
        ASSERT_TRUE(enqueue_barrier(all, streams.early).is_ok());
        const Status status = read_device_status(status_records(all), streams.early);
        EXPECT_TRUE(status.is_ok()) << "round " << round << ": " << status.to_string();
    }
    const LaunchGroup<VirtualPeers> three = h.group({0, 1, 2});
    ASSERT_TRUE(clear_device_status(status_records(three), streams.early).is_ok());
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(enqueue_barrier(three, streams.early).is_ok());
    const Status status = read_device_status(status_records(three), streams.early);
    EXPECT_EQ(status.code(), StatusCode::kPeerTimeout) << status.to_string();
    EXPECT_TRUE(contains(status.message(), to_string(WaitSite::kPeerBarrier))) << status.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, kMaxFailureTime);
}

// Rank 1 starts its forward and backward 200 ms after the others, on its own stream: the others wait for it and
// every result is still the CPU's, bit for bit.
TEST(TransportTimeout, LateRankChangesNoBits) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const VirtualHarness h(make_problem(four_ranks(802)), kTestTimeoutMs, 0);
    const Streams streams;
    const std::vector<int32_t> early_ranks = {0, 2, 3};
    const LaunchGroup<VirtualPeers> early = h.group(early_ranks);
    const LaunchGroup<VirtualPeers> late = h.group({1});
    h.poison();
    ASSERT_TRUE(enqueue_forward(early, h.data(early_ranks), StepOptions{}, streams.early).is_ok());
    ASSERT_TRUE(enqueue_backward(early, h.data(early_ranks), StepOptions{}, streams.early).is_ok());
    std::this_thread::sleep_for(kDelay);
    ASSERT_TRUE(enqueue_forward(late, h.data({1}), StepOptions{}, streams.late).is_ok());
    ASSERT_TRUE(enqueue_backward(late, h.data({1}), StepOptions{}, streams.late).is_ok());
    const Status early_status = read_device_status(status_records(early), streams.early);
    const Status late_status = read_device_status(status_records(late), streams.late);
    ASSERT_TRUE(early_status.is_ok()) << early_status.to_string();
    ASSERT_TRUE(late_status.is_ok()) << late_status.to_string();
    const std::vector<RankExpectation> expected = expected_results(h.problem());
    for (int32_t r = 0; r < h.problem().c.ep_size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_TRUE(bits_equal(h.data_of(r).y.download(), expected[r].y, "y"));
        EXPECT_TRUE(bits_equal(h.data_of(r).dx.download(), expected[r].dx, "dx"));
        EXPECT_TRUE(bits_equal(h.data_of(r).d_weights.download(), expected[r].d_weights, "d router weights"));
    }
}

}  // namespace
}  // namespace mok::comm::testing
