// The transport on two real ranks: one process drives two GPUs (one host thread per GPU), with NCCL symmetric
// windows and ncclGetLsaPointer peer pointers. The same checks as on virtual ranks: results bit for bit equal to
// the CPU's, laps through small rings, a late rank, a rank that never launches; and a communicator that mok builds
// itself from a unique id passed through the caller's bootstrap.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_buffer.hpp"
#include "comm/rank_data.hpp"
#include "comm/transport_checks.hpp"
#include "comm/transport_problem.hpp"
#include "comm/transport_steps.hpp"
#include "comm/virtual_harness.hpp"
#include "host/comm/device_status.hpp"
#include "host/comm/local_workspace.hpp"
#include "host/comm/nccl_communicator.hpp"
#include "host/comm/nccl_window.hpp"

namespace mok::comm::testing {
namespace {

constexpr int32_t kRanks = 2;
constexpr uint64_t kShortTimeoutMs = 300;
constexpr auto kMaxFailureTime = std::chrono::milliseconds(4 * kShortTimeoutMs + 2000);
constexpr auto kDelay = std::chrono::milliseconds(200);

bool have_two_gpus() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count >= kRanks;
}

// The machines keep NVLink multicast off; make sure a bare run does too (an explicit setting wins).
void keep_multicast_off() {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
}

// What one rank's thread brings back to the main thread, where the assertions run.
struct RankOutcome {
    Status setup;
    Status forward;
    Status backward;
    plan::HostPlan plan;
    std::vector<uint16_t> captured;  // after the forward
    std::vector<uint16_t> y;
    std::vector<uint16_t> dx;
    std::vector<float> d_weights;
    std::chrono::steady_clock::duration forward_time{};
};

// One rank's share of a run: its window, local block and tensors on its own GPU, driven by its own thread.
class NcclRank {
  public:
    NcclRank(const TransportProblem& problem, const NcclCommunicator& comm, uint64_t timeout_ms, int64_t out_ring)
        : problem_(problem), rank_(comm.rank()) {
        const TransportCase& c = problem.c;
        layout::TransportShape shape{c.ep_size, c.tokens_per_rank, c.hidden, c.top_k};
        group_.window = layout::SymmetricLayout::make(shape);
        group_.local = layout::LocalLayout::make(c.plan_shape(rank_), c.hidden);
        group_.timeout_ns = timeout_ms * kNanosPerMilli;
        setup_ = NcclWindow::create(comm, group_.window, &window_);
        if (setup_.is_ok()) {
            setup_ = LocalWorkspace::create(group_.local, &local_);
        }
        if (!setup_.is_ok()) {
            return;
        }
        data_.upload(problem, rank_, out_ring > 0 ? out_ring : c.capacity());
        data_.poison();
        group_.num_ranks = 1;
        group_.ranks[0] = RankEndpoint<NcclPeers>{window_->peers(), window_->window(), local_->buffers()};
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~NcclRank() {
        if (stream_ != nullptr) {
            cudaStreamDestroy(stream_);
        }
    }

    const Status& setup() const { return setup_; }
    void set_dispatch_pull(DispatchPull pull) { group_.dispatch_pull = pull; }

    Status forward(const StepOptions& options) {
        RankDeviceData* data[] = {&data_};
        MOK_RETURN_IF_ERROR(enqueue_forward(group_, data, options, stream_));
        return read_device_status(status_records(group_), stream_);
    }
    Status backward(const StepOptions& options) {
        RankDeviceData* data[] = {&data_};
        MOK_RETURN_IF_ERROR(enqueue_backward(group_, data, options, stream_));
        return read_device_status(status_records(group_), stream_);
    }

    plan::HostPlan download_plan() const {
        return testing::download_plan(local_->buffers().plan, problem_.c.plan_shape(rank_));
    }
    const RankDeviceData& data() const { return data_; }

  private:
    const TransportProblem& problem_;
    int32_t rank_;
    Status setup_;
    LaunchGroup<NcclPeers> group_;
    std::unique_ptr<NcclWindow> window_;
    std::unique_ptr<LocalWorkspace> local_;
    RankDeviceData data_;
    cudaStream_t stream_ = nullptr;
};

using RankBody = std::function<void(int32_t rank, NcclRank& nccl_rank, RankOutcome& outcome)>;

// Runs a rank thread's work; an exception (a failed CUDA call in the test's own code) becomes the rank's setup
// failure instead of ending the process.
template <typename Fn>
void capture_failure(RankOutcome& outcome, Fn&& fn) {
    try {
        fn();
    } catch (const std::exception& error) {
        outcome.setup = Status(StatusCode::kInternal, error.what());
    }
}

// Runs `body` on both GPUs, one thread each, over communicators from ncclCommInitAll.
std::vector<RankOutcome> run_on_two_gpus(const TransportProblem& problem, uint64_t timeout_ms, int64_t out_ring,
                                         const RankBody& body) {
    keep_multicast_off();
    ncclComm_t comms[kRanks] = {};
    const int devices[kRanks] = {0, 1};
    std::vector<RankOutcome> outcomes(kRanks);
    const Status init = nccl_status(ncclCommInitAll(comms, kRanks, devices), "ncclCommInitAll");
    if (!init.is_ok()) {
        outcomes[0].setup = init;
        return outcomes;
    }
    std::vector<std::thread> threads;
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        threads.emplace_back([&, rank] {
            capture_failure(outcomes[rank], [&] {
                check_cuda(cudaSetDevice(rank), "cudaSetDevice");
                const std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::borrow(comms[rank]);
                NcclRank nccl_rank(problem, *comm, timeout_ms, out_ring);
                outcomes[rank].setup = nccl_rank.setup();
                if (nccl_rank.setup().is_ok()) {
                    body(rank, nccl_rank, outcomes[rank]);
                }
            });
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    for (ncclComm_t comm : comms) {
        ncclCommDestroy(comm);
    }
    return outcomes;
}

// The standard body: forward, then backward, recording everything for the main thread's checks.
void forward_and_backward(const StepOptions& options, NcclRank& r, RankOutcome& out) {
    out.forward = r.forward(options);
    out.plan = r.download_plan();
    out.captured = r.data().captured.download();
    out.y = r.data().y.download();
    if (out.forward.is_ok()) {
        out.backward = r.backward(options);
        out.dx = r.data().dx.download();
        out.d_weights = r.data().d_weights.download();
    }
}

void expect_matches_cpu(const TransportProblem& problem, const std::vector<RankOutcome>& outcomes) {
    const std::vector<plan::HostPlan> plans = host_plans(problem);
    const std::vector<RankExpectation> expected = expected_results(problem);
    for (int32_t r = 0; r < kRanks; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const RankOutcome& o = outcomes[r];
        ASSERT_TRUE(o.setup.is_ok()) << o.setup.to_string();
        ASSERT_TRUE(o.forward.is_ok()) << o.forward.to_string();
        ASSERT_TRUE(o.backward.is_ok()) << o.backward.to_string();
        EXPECT_TRUE(plans_equal(o.plan, plans[r]));
        EXPECT_TRUE(dispatched_rows_match(problem, plans[r], o.captured, false));
        EXPECT_TRUE(bits_equal(o.y, expected[r].y, "y"));
        EXPECT_TRUE(bits_equal(o.dx, expected[r].dx, "dx"));
        EXPECT_TRUE(bits_equal(o.d_weights, expected[r].d_weights, "d router weights"));
    }
}

TransportCase two_ranks(uint64_t seed) {
    TransportCase c;
    c.ep_size = kRanks;
    c.tokens_per_rank = 333;
    c.hidden = 512;
    c.top_k = 4;
    c.num_experts = 8;
    c.num_shared = 1;
    c.unused_fraction = 0.1;
    c.seed = seed;
    return c;
}

#define MOK_REQUIRE_TWO_GPUS()                    \
    if (!have_two_gpus()) {                       \
        GTEST_SKIP() << "needs two CUDA devices"; \
    }

TEST(NcclTransport, MatchesCpuForEveryRouting) {
    MOK_REQUIRE_TWO_GPUS();
    uint64_t seed = 900;
    for (const Routing routing : {Routing::kUniform, Routing::kOneExpert, Routing::kOneRank, Routing::kQuietRank}) {
        TransportCase c = two_ranks(++seed);
        c.routing = routing;
        c.hot = routing == Routing::kOneExpert ? 5 : 1;
        SCOPED_TRACE(c.describe());
        const TransportProblem problem = make_problem(c);
        const auto outcomes = run_on_two_gpus(problem, kTestTimeoutMs, 0, [](int32_t, NcclRank& r, RankOutcome& o) {
            forward_and_backward(StepOptions{}, r, o);
        });
        expect_matches_cpu(problem, outcomes);
    }
}

// Two real ranks whose dispatch pulls a token's rows once per group (dispatch.cuh): top_k 9 over ten experts per rank
// gives a token up to nine rows on a rank, in groups of four, four and one; the same bits as the CPU.
TEST(NcclTransport, TokenRowsPulledOncePerGroup) {
    MOK_REQUIRE_TWO_GPUS();
    uint64_t seed = 1100;
    for (const Routing routing : {Routing::kUniform, Routing::kOneRank}) {
        TransportCase c = two_ranks(++seed);
        c.top_k = 9;
        c.num_experts = 20;
        c.routing = routing;
        c.hot = 1;
        SCOPED_TRACE(c.describe());
        const TransportProblem problem = make_problem(c);
        const auto outcomes = run_on_two_gpus(problem, kTestTimeoutMs, 0, [](int32_t, NcclRank& r, RankOutcome& o) {
            r.set_dispatch_pull(DispatchPull::kTokenGroups);
            forward_and_backward(StepOptions{}, r, o);
        });
        expect_matches_cpu(problem, outcomes);
    }
}

TEST(NcclTransport, SmallRingsTakeSeveralLaps) {
    MOK_REQUIRE_TWO_GPUS();
    TransportCase c = two_ranks(950);
    c.hidden = 7168;
    c.ring_rows = 256;
    SCOPED_TRACE(c.describe());
    const TransportProblem problem = make_problem(c);
    StepOptions options;
    options.path = DataPath::kPipelined;
    const auto outcomes =
        run_on_two_gpus(problem, kTestTimeoutMs, kPipelinedOutRingRows,
                        [&](int32_t, NcclRank& r, RankOutcome& o) { forward_and_backward(options, r, o); });
    expect_matches_cpu(problem, outcomes);
}

// Two real ranks with each tile split between the remote-row and local-row teams: standalone kernels, and the
// pipelined path through one-tile rings.
TEST(NcclTransport, LocalRowsOnTheirOwnBlocks) {
    MOK_REQUIRE_TWO_GPUS();
    for (const DataPath path : {DataPath::kStandalone, DataPath::kPipelined}) {
        TransportCase c = two_ranks(955);
        c.ring_rows = path == DataPath::kPipelined ? 128 : 0;
        SCOPED_TRACE(c.describe());
        const TransportProblem problem = make_problem(c);
        StepOptions options;
        options.path = path;
        options.local_blocks = 2;
        const int64_t out_ring = path == DataPath::kPipelined ? kPipelinedOutRingRows : 0;
        const auto outcomes =
            run_on_two_gpus(problem, kTestTimeoutMs, out_ring,
                            [&](int32_t, NcclRank& r, RankOutcome& o) { forward_and_backward(options, r, o); });
        expect_matches_cpu(problem, outcomes);
    }
}

TEST(NcclTransport, LateRankChangesNoBits) {
    MOK_REQUIRE_TWO_GPUS();
    const TransportCase c = two_ranks(960);
    const TransportProblem problem = make_problem(c);
    const auto outcomes = run_on_two_gpus(problem, kTestTimeoutMs, 0, [](int32_t rank, NcclRank& r, RankOutcome& o) {
        if (rank == 1) {
            std::this_thread::sleep_for(kDelay);
        }
        forward_and_backward(StepOptions{}, r, o);
    });
    expect_matches_cpu(problem, outcomes);
}

TEST(NcclTransport, RankThatNeverLaunchesEndsTheStepWithAnError) {
    MOK_REQUIRE_TWO_GPUS();
    const TransportProblem problem = make_problem(two_ranks(970));
    // Rank 1 sets up (window registration is collective) and tears down after rank 0 gave up, but never runs
    // the step.
    std::latch rank0_done(1);
    const auto outcomes = run_on_two_gpus(problem, kShortTimeoutMs, 0, [&](int32_t rank, NcclRank& r, RankOutcome& o) {
        if (rank == 0) {
            const auto start = std::chrono::steady_clock::now();
            o.forward = r.forward(StepOptions{});
            o.forward_time = std::chrono::steady_clock::now() - start;
            rank0_done.count_down();
        } else {
            rank0_done.wait();
        }
    });
    ASSERT_TRUE(outcomes[0].setup.is_ok()) << outcomes[0].setup.to_string();
    EXPECT_EQ(outcomes[0].forward.code(), StatusCode::kPeerTimeout) << outcomes[0].forward.to_string();
    EXPECT_NE(outcomes[0].forward.message().find("rank 0"), std::string::npos) << outcomes[0].forward.message();
    EXPECT_LT(outcomes[0].forward_time, kMaxFailureTime);
}

// The caller's bootstrap (here: two threads sharing memory) carries the unique id; mok builds the communicator.
class ThreadBootstrap : public Bootstrap {
  public:
    Status broadcast(void* data, size_t bytes, int root) override {
        if (rank_of_caller() == root) {
            shared_.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
        }
        barrier_.arrive_and_wait();
        if (rank_of_caller() != root) {
            std::memcpy(data, shared_.data(), bytes);
        }
        barrier_.arrive_and_wait();
        return Status::ok();
    }

    static int& rank_of_caller() {
        thread_local int rank = 0;
        return rank;
    }

  private:
    std::vector<char> shared_;
    std::barrier<> barrier_{kRanks};
};

TEST(NcclTransport, CommunicatorFromCallerBootstrap) {
    MOK_REQUIRE_TWO_GPUS();
    keep_multicast_off();
    const TransportProblem problem = make_problem(two_ranks(980));
    ThreadBootstrap bootstrap;
    std::vector<RankOutcome> outcomes(kRanks);
    std::vector<std::thread> threads;
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        threads.emplace_back([&, rank] {
            capture_failure(outcomes[rank], [&] {
                ThreadBootstrap::rank_of_caller() = rank;
                check_cuda(cudaSetDevice(rank), "cudaSetDevice");
                std::unique_ptr<NcclCommunicator> comm;
                outcomes[rank].setup = NcclCommunicator::create(bootstrap, rank, kRanks, &comm);
                if (!outcomes[rank].setup.is_ok()) {
                    return;
                }
                // The window goes before the communicator it is registered with.
                NcclRank r(problem, *comm, kTestTimeoutMs, 0);
                outcomes[rank].setup = r.setup();
                if (r.setup().is_ok()) {
                    forward_and_backward(StepOptions{}, r, outcomes[rank]);
                }
            });
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    expect_matches_cpu(problem, outcomes);
}

}  // namespace
}  // namespace mok::comm::testing
