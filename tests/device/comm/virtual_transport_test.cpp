// The transport on virtual ranks (R ranks sharing one GPU): plans, dispatched rows and combined outputs bit for
// bit equal to the CPU's, for EP 1, 2, 4 and 8, skewed and empty routing, rings that take several laps, rows of
// every copy geometry, repeated runs (of steps, and of a pass within its step) and CUDA-graph replay.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/device_buffer.hpp"
#include "comm/transport_checks.hpp"
#include "comm/transport_problem.hpp"
#include "comm/transport_steps.hpp"
#include "comm/virtual_harness.hpp"
#include "host/comm/device_status.hpp"

namespace mok::comm::testing {
namespace {

bool have_gpu() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count >= 1;
}

#define MOK_REQUIRE_GPU()                        \
    if (!have_gpu()) {                           \
        GTEST_SKIP() << "needs one CUDA device"; \
    }

class Stream {
  public:
    Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
    ~Stream() { cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }

  private:
    cudaStream_t stream_ = nullptr;
};

TransportCase base_case(int32_t ep_size, uint64_t seed) {
    TransportCase c;
    c.ep_size = ep_size;
    // Across several 64-token plan chunks and 16-token combine blocks, ending in partial ones.
    c.tokens_per_rank = 301;
    c.hidden = 256;
    c.top_k = 4;
    c.num_experts = 3 * ep_size + (ep_size == 1 ? 3 : 0);
    c.unused_fraction = 0.1;
    c.seed = seed;
    return c;
}

// Checks a forward against the CPU: every rank's plan and y, and the rows its consumer received (unless a
// backward ran since, which reuses the consumer's copy).
void expect_forward_matches(const VirtualHarness& h, bool check_dispatched = true) {
    const std::vector<plan::HostPlan> plans = host_plans(h.problem());
    const std::vector<RankExpectation> expected = expected_results(h.problem());
    for (int32_t r = 0; r < h.problem().c.ep_size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_TRUE(plans_equal(h.download_plan(r), plans[r]));
        if (check_dispatched) {
            EXPECT_TRUE(dispatched_rows_match(h.problem(), plans[r], h.data_of(r).captured.download(), false));
        }
        EXPECT_TRUE(bits_equal(h.data_of(r).y.download(), expected[r].y, "y"));
    }
}

void expect_backward_matches(const VirtualHarness& h) {
    const std::vector<plan::HostPlan> plans = host_plans(h.problem());
    const std::vector<RankExpectation> expected = expected_results(h.problem());
    for (int32_t r = 0; r < h.problem().c.ep_size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_TRUE(dispatched_rows_match(h.problem(), plans[r], h.data_of(r).captured.download(), true));
        EXPECT_TRUE(bits_equal(h.data_of(r).dx.download(), expected[r].dx, "dx"));
        EXPECT_TRUE(bits_equal(h.data_of(r).d_weights.download(), expected[r].d_weights, "d router weights"));
    }
}

// A forward, checked, then a backward, checked; outputs poisoned before each. `pull`: how the dispatch pulls a
// token's rows (it pulls each row on its own wherever the ring is shorter than the pass's rows).
void run_and_check(const TransportCase& c, const StepOptions& options, DispatchPull pull = DispatchPull::kEveryRow) {
    SCOPED_TRACE(c.describe());
    const int64_t out_ring = options.path == DataPath::kPipelined ? kPipelinedOutRingRows : 0;
    const VirtualHarness h(make_problem(c), kTestTimeoutMs, out_ring);
    const Stream stream;
    h.poison();
    LaunchGroup<VirtualPeers> group = h.group();
    group.dispatch_pull = pull;
    const std::vector<RankDeviceData*> data = h.data();
    ASSERT_TRUE(enqueue_forward(group, data, options, stream.get()).is_ok());
    const Status forward = read_device_status(status_records(group), stream.get());
    ASSERT_TRUE(forward.is_ok()) << forward.to_string();
    expect_forward_matches(h);
    ASSERT_TRUE(enqueue_backward(group, data, options, stream.get()).is_ok());
    const Status backward = read_device_status(status_records(group), stream.get());
    ASSERT_TRUE(backward.is_ok()) << backward.to_string();
    expect_backward_matches(h);
}

TEST(VirtualTransport, MatchesCpuForEveryEpDegreeAndRouting) {
    MOK_REQUIRE_GPU();
    const Routing routings[] = {Routing::kUniform, Routing::kOneExpert, Routing::kOneRank, Routing::kQuietRank};
    uint64_t seed = 100;
    for (const int32_t ep_size : {1, 2, 4, 8}) {
        for (const Routing routing : routings) {
            TransportCase c = base_case(ep_size, ++seed);
            c.routing = routing;
            c.hot = routing == Routing::kOneExpert ? c.num_experts - 1 : ep_size - 1;
            c.num_shared = static_cast<int32_t>(seed % 3);
            run_and_check(c, StepOptions{});
        }
    }
}

// A token's rows on one rank pulled once per group of kMaxRowFanout (dispatch.cuh): top_k 9 over ten experts per
// rank gives a token up to nine rows on a rank (groups of four, four and one), skewed routings put every token's
// rows on one rank or one expert, and teams split by rows that cross and rows that stay count one tile's rows from
// both. Each case also runs with every row pulled on its own; both must give the CPU's bits.
TEST(VirtualTransport, TokenRowsPulledOncePerGroup) {
    MOK_REQUIRE_GPU();
    uint64_t seed = 1000;
    for (const int32_t ep_size : {1, 2, 4}) {
        for (const Routing routing : {Routing::kUniform, Routing::kOneRank, Routing::kOneExpert}) {
            for (const DispatchPull pull : {DispatchPull::kTokenGroups, DispatchPull::kEveryRow}) {
                TransportCase c = base_case(ep_size, ++seed);
                c.top_k = 9;
                c.num_experts = 10 * ep_size;
                c.routing = routing;
                c.hot = routing == Routing::kOneExpert ? c.num_experts - 1 : ep_size - 1;
                c.num_shared = 1;
                StepOptions options;
                options.dispatch_blocks = 1 + static_cast<int32_t>(seed % 3);
                options.local_blocks = static_cast<int32_t>(seed % 2);
                SCOPED_TRACE(pull == DispatchPull::kTokenGroups ? "token groups" : "every row");
                run_and_check(c, options, pull);
            }
        }
    }
}

// Rings of one, two and three tiles while each rank owns many times as many rows, with up to three blocks per
// role: dispatch waits for ring slots, the consumer for output slots, and every lap boundary is crossed.
TEST(VirtualTransport, SmallRingsTakeSeveralLaps) {
    MOK_REQUIRE_GPU();
    uint64_t seed = 200;
    for (const int32_t ep_size : {1, 2, 4, 8}) {
        for (const int64_t ring_rows : {128, 256, 384}) {
            TransportCase c = base_case(ep_size, ++seed);
            c.tokens_per_rank = 517;
            c.ring_rows = ring_rows;
            c.num_shared = 1;
            StepOptions options;
            options.path = DataPath::kPipelined;
            options.dispatch_blocks = 1 + static_cast<int32_t>(seed % 3);
            options.consumer_blocks = 2;
            options.push_blocks = 1 + static_cast<int32_t>(seed % 2);
            run_and_check(c, options);
        }
    }
}

// Tiles split between a team for the rows that cross to peers and a team for the rows that stay local, in both
// data paths, for every EP degree (at EP 1 every row is local) and for routings that leave one team idle.
TEST(VirtualTransport, LocalRowsOnTheirOwnBlocks) {
    MOK_REQUIRE_GPU();
    uint64_t seed = 900;
    for (const int32_t ep_size : {1, 2, 4, 8}) {
        for (const Routing routing : {Routing::kUniform, Routing::kOneRank}) {
            for (const DataPath path : {DataPath::kStandalone, DataPath::kPipelined}) {
                TransportCase c = base_case(ep_size, ++seed);
                c.routing = routing;
                c.hot = ep_size - 1;
                c.num_shared = 1;
                c.ring_rows = path == DataPath::kPipelined ? 128 : 0;
                StepOptions options;
                options.path = path;
                options.local_blocks = 1 + static_cast<int32_t>(seed % 2);
                run_and_check(c, options);
            }
        }
    }
}

// Everything on one rank's experts with a one-tile ring: the hot owner takes many laps, the others none.
TEST(VirtualTransport, SkewedRoutingThroughASmallRing) {
    MOK_REQUIRE_GPU();
    TransportCase c = base_case(4, 300);
    c.routing = Routing::kOneRank;
    c.hot = 2;
    c.ring_rows = 128;
    StepOptions options;
    options.path = DataPath::kPipelined;
    run_and_check(c, options);
}

// Row sizes that cut differently into the bulk copy's pieces and stages (copy_geometry.hpp): rows far shorter than a
// stage (H 64: 128 bytes, sixteen stages per issuer), the model rows of one piece each (H 7168, DeepSeek-V3: three
// stages; H 4096: six), and rows of two pieces whose second is 16 bytes long (H 8200).
TEST(VirtualTransport, EveryCopyGeometry) {
    MOK_REQUIRE_GPU();
    uint64_t seed = 400;
    for (const int64_t hidden : {64, 7168, 4096, 8200}) {
        for (const DataPath path : {DataPath::kStandalone, DataPath::kPipelined}) {
            TransportCase c = base_case(2, ++seed);
            c.hidden = hidden;
            c.tokens_per_rank = 150;
            c.ring_rows = path == DataPath::kPipelined ? 256 : 0;
            StepOptions options;
            options.path = path;
            run_and_check(c, options);
        }
    }
}

// One token, one slot; and a routing in which no rank sends anything (y is the shared experts' sum alone).
TEST(VirtualTransport, TinyAndEmptyRouting) {
    MOK_REQUIRE_GPU();
    TransportCase tiny = base_case(2, 500);
    tiny.tokens_per_rank = 1;
    tiny.top_k = 1;
    tiny.unused_fraction = 0.0;
    run_and_check(tiny, StepOptions{});
    TransportCase empty = base_case(4, 501);
    empty.unused_fraction = 1.0;
    empty.num_shared = 2;
    run_and_check(empty, StepOptions{});
}

// Three steps in a row give the same bits as the CPU each time (flags only grow: nothing is reset between steps,
// and the routing buffers alternate by step parity), with 0, 1 and 2 blocks for the rows that stay local: the
// split tiles' join counters start from zero at every step.
TEST(VirtualTransport, RepeatedStepsGiveIdenticalBits) {
    MOK_REQUIRE_GPU();
    TransportCase c = base_case(4, 600);
    c.num_shared = 1;
    c.ring_rows = 256;
    const VirtualHarness h(make_problem(c), kTestTimeoutMs, kPipelinedOutRingRows);
    const Stream stream;
    StepOptions options;
    options.path = DataPath::kPipelined;
    for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        options.local_blocks = step;
        h.poison();
        const Status status = run_step(h, options, true, stream.get());
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        expect_forward_matches(h, false);
        expect_backward_matches(h);
    }
}

// Fills every claim word of every rank (row_copy.cuh, TileQueue) with claims under a tag no pass of the test has.
void leave_stale_claims(const LaunchGroup<VirtualPeers>& group) {
    constexpr uint64_t kStaleTag = 0xabcd;
    constexpr uint64_t kStaleClaims = 3;
    const std::vector<uint64_t> stale(layout::kClaimWordsPerRole, (kStaleTag << 32) | kStaleClaims);
    const size_t bytes = stale.size() * sizeof(uint64_t);
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        const layout::LocalBuffers& local = group.ranks[slot].local;
        for (uint64_t* words : {local.ring_claims[0], local.ring_claims[1], local.push_claims}) {
            check_cuda(cudaMemcpy(words, stale.data(), bytes, cudaMemcpyHostToDevice), "stale claims");
        }
    }
}

// The copy teams claim tiles from a word per copy role. A pass run again within its step (a benchmark repeats
// one) copies every row again: the pass's last claim clears the word. A word left with claims of another pass (as
// a failed run leaves it) counts as none. With and without teams for the local rows, whose claims have a word of
// their own, and with both ways of pulling a token's rows.
TEST(VirtualTransport, RepeatedPassesAndStaleClaimsCopyEveryRow) {
    MOK_REQUIRE_GPU();
    TransportCase c = base_case(2, 800);
    c.num_shared = 1;
    const VirtualHarness h(make_problem(c), kTestTimeoutMs, 0);
    const Stream stream;
    LaunchGroup<VirtualPeers> group = h.group();
    const std::vector<RankDeviceData*> data = h.data();
    StepOptions options;
    options.dispatch_blocks = 3;
    options.push_blocks = 3;
    h.poison();
    ASSERT_TRUE(enqueue_forward(group, data, options, stream.get()).is_ok());
    const Status forward = read_device_status(status_records(group), stream.get());
    ASSERT_TRUE(forward.is_ok()) << forward.to_string();
    expect_forward_matches(h);
    for (int run = 0; run < 4; ++run) {
        SCOPED_TRACE("backward run " + std::to_string(run));
        options.local_blocks = run % 2;
        // The last two runs pull a token's rows once per group: their landed-row counts start from zero every pass.
        group.dispatch_pull = run < 2 ? DispatchPull::kEveryRow : DispatchPull::kTokenGroups;
        h.poison();
        if (run == 3) {
            leave_stale_claims(group);
        }
        ASSERT_TRUE(enqueue_backward(group, data, options, stream.get()).is_ok());
        const Status backward = read_device_status(status_records(group), stream.get());
        ASSERT_TRUE(backward.is_ok()) << backward.to_string();
        expect_backward_matches(h);
    }
}

// The whole step, captured once in a CUDA graph and replayed: no host synchronisation inside it, and the step
// counter advances on the device.
TEST(VirtualTransport, CapturedStepReplays) {
    MOK_REQUIRE_GPU();
    TransportCase c = base_case(2, 700);
    c.num_shared = 1;
    const VirtualHarness h(make_problem(c), kTestTimeoutMs, 0);
    const Stream stream;
    const LaunchGroup<VirtualPeers> group = h.group();
    const std::vector<RankDeviceData*> data = h.data();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), "begin capture");
    const Status forward = enqueue_forward(group, data, StepOptions{}, stream.get());
    const Status backward = enqueue_backward(group, data, StepOptions{}, stream.get());
    check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
    ASSERT_TRUE(forward.is_ok()) << forward.to_string();
    ASSERT_TRUE(backward.is_ok()) << backward.to_string();
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int replay = 0; replay < 2; ++replay) {
        SCOPED_TRACE("replay " + std::to_string(replay));
        h.poison();
        check_cuda(cudaGraphLaunch(exec, stream.get()), "graph launch");
        const Status status = read_device_status(status_records(group), stream.get());
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        expect_forward_matches(h, false);
        expect_backward_matches(h);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mok::comm::testing
