// The routing plan built on the GPU (routing exchange + the four planner kernels) against build_host_plan, table
// for table, on virtual ranks: random routings of every skew the plan suite draws, the routing that sends every
// token to one rank, a DeepSeek-V3-sized routing, schedule overflow and invalid routing (errors, never traps).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/device_buffer.hpp"
#include "comm/transport_checks.hpp"
#include "comm/transport_problem.hpp"
#include "comm/transport_steps.hpp"
#include "comm/virtual_harness.hpp"
#include "host/comm/device_status.hpp"
#include "plan/random_routing.hpp"

namespace mok::comm::testing {
namespace {

// The plan needs no row data: the narrowest legal rows keep the many cases quick.
constexpr int64_t kPlanHidden = 8;
// A ring of one tile, for cases that name none (the ring does not change the plan's tables).
constexpr int64_t kMinRing = 128;

bool have_gpu() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count >= 1;
}

// The problem of a routing case from the plan suite: its ids, with random weights and rows.
TransportProblem problem_of(const plan::testing::RoutingCase& routing, int64_t capacity_rows) {
    TransportCase c;
    c.ep_size = routing.ep_size;
    c.tokens_per_rank = routing.tokens_per_rank;
    c.hidden = kPlanHidden;
    c.top_k = routing.top_k;
    c.num_experts = routing.num_experts;
    c.ring_rows = std::max(routing.ring_rows, kMinRing);
    c.capacity_rows = capacity_rows;
    c.seed = routing.seed;
    TransportProblem problem = make_problem(c);
    for (int32_t r = 0; r < c.ep_size; ++r) {
        problem.ranks[r].expert_ids = routing.ids[r];
    }
    return problem;
}

// Exchanges the routing and plans on every rank; returns the first rank's failure.
Status plan_on_device(const VirtualHarness& h) {
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const LaunchGroup<VirtualPeers> group = h.group();
    std::vector<RankRouting> routing;
    for (const RankDeviceData* d : h.data()) {
        routing.push_back(d->routing());
    }
    const std::vector<DeviceStatus*> records = status_records(group);
    Status status = clear_device_status(records, stream);
    if (status.is_ok()) {
        status = enqueue_routing_exchange(group, routing.data(), stream);
    }
    if (status.is_ok()) {
        status = enqueue_plan(group, stream);
    }
    if (status.is_ok()) {
        status = read_device_status(records, stream);
    }
    cudaStreamDestroy(stream);
    return status;
}

::testing::AssertionResult device_plans_match(const VirtualHarness& h) {
    const std::vector<plan::HostPlan> expected = host_plans(h.problem());
    for (int32_t r = 0; r < h.problem().c.ep_size; ++r) {
        const ::testing::AssertionResult result = plans_equal(h.download_plan(r), expected[r]);
        if (!result) {
            return ::testing::AssertionFailure() << "rank " << r << ": " << result.message();
        }
    }
    return ::testing::AssertionSuccess();
}

void expect_plan_matches(const TransportProblem& problem) {
    SCOPED_TRACE(problem.c.describe());
    const VirtualHarness h(problem, kTestTimeoutMs, 0);
    const Status status = plan_on_device(h);
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_TRUE(device_plans_match(h));
}

TEST(DevicePlan, RandomRoutingsMatchHostPlan) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    for (uint64_t seed = 1; seed <= 120; ++seed) {
        const plan::testing::RoutingCase routing = plan::testing::random_routing_case(seed, 1, 700);
        SCOPED_TRACE(routing.describe());
        expect_plan_matches(problem_of(routing, 0));
    }
}

TEST(DevicePlan, AllTokensToOneRankMatchesHostPlan) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    for (const int32_t ep_size : {2, 4, 8}) {
        const auto routing = plan::testing::all_to_one_rank_case(31 + ep_size, ep_size, 3, 4, 400, ep_size - 1);
        expect_plan_matches(problem_of(routing, 0));
    }
}

// DeepSeek-V3's routing shape at EP 8: 4096 tokens per rank, 256 experts, top 8 (262,144 slots per plan).
TEST(DevicePlan, DeepSeekV3ShapeMatchesHostPlan) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    TransportCase c;
    c.ep_size = 8;
    c.tokens_per_rank = 4096;
    c.hidden = kPlanHidden;
    c.top_k = 8;
    c.num_experts = 256;
    c.ring_rows = kMinRing;
    c.seed = 2048;
    expect_plan_matches(make_problem(c));
}

// Two steps in a row use the two parities of the routing buffers; both give the host's tables.
TEST(DevicePlan, ConsecutiveStepsMatchHostPlan) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const auto routing = plan::testing::random_routing_case(77, 100, 300);
    const VirtualHarness h(problem_of(routing, 0), kTestTimeoutMs, 0);
    for (int step = 0; step < 2; ++step) {
        const Status status = plan_on_device(h);
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        EXPECT_TRUE(device_plans_match(h)) << "step " << step;
    }
}

// Every token on rank 1's experts with a capacity of one tile: rank 1 overflows. Every rank reports it (each checks
// every owner's layout), and rank 1's plan status says so, as the host plan's does.
TEST(DevicePlan, OverflowIsReportedByEveryRank) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    const auto routing = plan::testing::all_to_one_rank_case(5, 4, 2, 2, 300, 1);
    const TransportProblem problem = problem_of(routing, plan::kExpertRowAlignment);
    const VirtualHarness h(problem, kTestTimeoutMs, 0);
    const Status status = plan_on_device(h);
    EXPECT_EQ(status.code(), StatusCode::kScheduleOverflow) << status.to_string();
    const LaunchGroup<VirtualPeers> group = h.group();
    for (int32_t r = 0; r < problem.c.ep_size; ++r) {
        DeviceStatus record = download(group.ranks[r].local.status, 1)[0];
        EXPECT_EQ(status_from_device(record).code(), StatusCode::kScheduleOverflow) << "rank " << r;
        EXPECT_EQ(record.rank - 1, 1) << "the record names the overflowing owner";
    }
    EXPECT_EQ(h.download_plan(1).status, static_cast<int32_t>(plan::PlanStatus::kScheduleOverflow));
    EXPECT_EQ(host_plans(problem)[1].status, static_cast<int32_t>(plan::PlanStatus::kScheduleOverflow));
}

// An expert id out of range, an expert twice in a token, a NaN weight: every rank reports the bad token of rank 2.
TEST(DevicePlan, InvalidRoutingIsReportedByEveryRank) {
    if (!have_gpu()) {
        GTEST_SKIP() << "needs one CUDA device";
    }
    TransportCase c;
    c.ep_size = 4;
    c.tokens_per_rank = 150;
    c.hidden = kPlanHidden;
    c.top_k = 3;
    c.num_experts = 8;
    c.ring_rows = kMinRing;
    c.seed = 9;
    constexpr int64_t kBadToken = 77;
    for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE("variant " + std::to_string(variant));
        TransportProblem problem = make_problem(c);
        RankData& bad = problem.ranks[2];
        const int64_t slot = kBadToken * c.top_k + 1;
        if (variant == 0) {
            bad.expert_ids[slot] = c.num_experts;
        } else if (variant == 1) {
            bad.expert_ids[slot - 1] = 3;
            bad.expert_ids[slot] = 3;
        } else {
            bad.expert_ids[slot] = 4;
            bad.router_weights[slot] = std::numeric_limits<float>::quiet_NaN();
        }
        const VirtualHarness h(problem, kTestTimeoutMs, 0);
        const Status status = plan_on_device(h);
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
        EXPECT_NE(status.message().find("rank 2, token 77"), std::string::npos) << status.message();
        const LaunchGroup<VirtualPeers> group = h.group();
        for (int32_t r = 0; r < c.ep_size; ++r) {
            const Status rank_status = status_from_device(download(group.ranks[r].local.status, 1)[0]);
            EXPECT_EQ(rank_status.code(), StatusCode::kInvalidArgument) << "rank " << r;
        }
    }
}

}  // namespace
}  // namespace mok::comm::testing
