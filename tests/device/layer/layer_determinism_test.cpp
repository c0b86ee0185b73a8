// The determinism promise of docs/semantics.md section 7 on the GPU, checked bit for bit: repeated runs, every
// Config value, every virtual EP degree for the same global batch, recompute_forward in place of forward, CUDA
// graph replay, and layers that share one workspace with their forwards and backwards interleaved.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "api/api_problem.hpp"
#include "common/bit_compare.hpp"
#include "common/test_seed.hpp"
#include "device/gemm/grouped_gemm.hpp"
#include "layer/device_problem.hpp"
#include "layer/layer_runs.hpp"
#include "layer/reference_cases.hpp"

namespace mok::testing {
namespace {

// A problem with several tiles in every GEMM dimension and a skewed routing.
ProblemOptions busy_problem() {
    ProblemOptions o = problem_shape(512, 320, 192, 16, 4, {128, 64});
    o.routing = Routing::kZipf;
    o.unused_slot_fraction = 0.1;
    return o;
}

// Runs a step of `c` on a fresh layer of `options` and returns outputs_of the result.
std::vector<Named> run_once(const RandomCase& c, LayerOptions options, GradMode mode, uint64_t output_seed) {
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(output_seed);
    DeviceProblem device(host, kDevice);
    options.backend = Backend::kCuda;
    options.device = Device::cuda(kDevice);
    LayerUnderTest l;
    Status status = make_layer(options, &l);
    TestStream stream;
    if (status.is_ok()) {
        status = run_step(l, device, mode, stream.get());
    }
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    device.download_outputs(host);
    return outputs_of(host, mode);
}

// Runs a fresh-gradient step of `c` under each of `configs` (outputs poisoned from `output_seed`) and expects the
// bits of the first.
void expect_same_bits_for_every_config(const RandomCase& c, const std::vector<Config>& configs, uint64_t output_seed) {
    const ApiProblem host(c.problem, c.dy);
    std::vector<Named> first;
    for (size_t i = 0; i < configs.size(); ++i) {
        LayerOptions options = host.options();
        options.config = configs[i];
        const std::vector<Named> outputs = run_once(c, options, GradMode::kFresh, output_seed);
        if (i == 0) {
            first = outputs;
        } else {
            EXPECT_TRUE(same_outputs(outputs, first)) << "config " << i;
        }
    }
}

TEST(LayerDeterminism, RepeatedRunsGiveTheSameBits) {
    MOK_REQUIRE_CUDA_BACKEND();
    const RandomCase c = random_case(busy_problem(), 4, case_seed(0));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    for (const GradMode mode : {GradMode::kFresh, GradMode::kAccumulate}) {
        ApiProblem host(c.problem, c.dy);
        host.prepare_outputs(case_seed(1));
        DeviceProblem device(host, kDevice);
        LayerUnderTest l;
        MOK_ASSERT_OK(make_layer(device.options(), &l));
        TestStream stream;
        std::vector<Named> first;
        for (int run = 0; run < 3; ++run) {
            // The same starting main_grad and freshly poisoned outputs for every run.
            device.upload_outputs(host);
            MOK_ASSERT_OK(run_step(l, device, mode, stream.get()));
            ApiProblem result(c.problem, c.dy);
            device.download_outputs(result);
            const std::vector<Named> outputs = outputs_of(result, mode);
            if (run == 0) {
                first = outputs;
            } else {
                EXPECT_TRUE(same_outputs(outputs, first)) << "run " << run;
            }
        }
    }
}

TEST(LayerDeterminism, EveryConfigGivesTheSameBits) {
    MOK_REQUIRE_CUDA_BACKEND();
    const RandomCase c = random_case(busy_problem(), 2, case_seed(2));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    std::vector<Config> configs(5);
    configs[1].minibatch_rows = 128;
    configs[1].ring_rows = 256;
    configs[2].schedule_capacity_factor = 3.0;
    configs[2].num_comm_sms_forward = 1;
    configs[2].num_comm_sms_backward = 3;
    configs[3].peer_timeout_ms = 200;
    configs[3].num_comm_sms_forward = 40;
    configs[3].num_comm_sms_backward = 40;
    configs[3].gemm_epilogue_warps = false;  // dgrad_down in ping-pong, the other GEMMs cooperative
    configs[4].schedule_capacity_factor = 1.75;
    configs[4].minibatch_rows = 384;
    configs[4].ring_rows = 384 * 3;
    configs[4].gemm_pingpong = false;
    configs[4].gemm_epilogue_warps = false;
    // The test shape's width makes kAuto (config 0) the push; the down projection's own stores, pipelined (configs
    // 1 and 2) and in order (config 3: too few SMs left beside 40 per rank), must give its bits.
    configs[1].forward_combine = ForwardCombine::kDownStores;
    configs[2].forward_combine = ForwardCombine::kDownStores;
    configs[3].forward_combine = ForwardCombine::kDownStores;
    configs[4].forward_combine = ForwardCombine::kPush;
    // A token's rows pulled once per group: configs 2 to 4 (where config 4's ring of 1152 rows holds fewer rows than a
    // pass, the dispatch pulls every row whatever the option says).
    configs[2].dispatch_token_groups = true;
    configs[3].dispatch_token_groups = true;
    configs[4].dispatch_token_groups = true;
    expect_same_bits_for_every_config(c, configs, case_seed(3));
}

// dgrad_down in each of its arrangements inside the layer: the epilogue warps, which the layer chooses from
// gemm::kDgradDownEpilogueWarpsMinHidden on (the busy problem's H is below it), ping-pong and cooperative.
TEST(LayerDeterminism, DgradDownGivesTheSameBitsInEveryArrangement) {
    MOK_REQUIRE_CUDA_BACKEND();
    ProblemOptions o = problem_shape(256, gemm::kDgradDownEpilogueWarpsMinHidden, 192, 16, 4, {128});
    o.routing = Routing::kZipf;
    const RandomCase c = random_case(o, 2, case_seed(14));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    std::vector<Config> configs(3);
    configs[1].gemm_epilogue_warps = false;  // dgrad_down in ping-pong
    configs[2].gemm_epilogue_warps = false;  // and cooperative
    configs[2].gemm_pingpong = false;
    expect_same_bits_for_every_config(c, configs, case_seed(15));
}

// The same global batch at EP 1, 2, 4 and 8 (virtual ranks): y, dx and the router-weight gradients in global
// token order, and the routed experts' weight gradients in global expert order.
TEST(LayerDeterminism, EveryEpDegreeGivesTheSameBits) {
    MOK_REQUIRE_CUDA_BACKEND();
    const uint64_t seed = case_seed(4);
    std::vector<Named> first;
    // Both ways into the combine (the test shape's width makes kAuto the push): at EP 8 the down projection's
    // stores cross eight virtual ranks' windows.
    for (const ForwardCombine combine : {ForwardCombine::kPush, ForwardCombine::kDownStores}) {
        for (const int ep_size : {1, 2, 4, 8}) {
            const RandomCase c = random_case(busy_problem(), ep_size, seed);
            SCOPED_TRACE(replay_hint() + "; " + c.description);
            ApiProblem host(c.problem, c.dy);
            host.prepare_outputs(case_seed(5));
            DeviceProblem device(host, kDevice);
            LayerOptions options = device.options();
            options.config.forward_combine = combine;
            LayerUnderTest l;
            MOK_ASSERT_OK(make_layer(options, &l));
            TestStream stream;
            MOK_ASSERT_OK(run_step(l, device, GradMode::kFresh, stream.get()));
            device.download_outputs(host);
            const std::vector<Named> outputs = global_outputs(host, GradMode::kFresh);
            if (first.empty()) {
                first = outputs;
            } else {
                EXPECT_TRUE(same_outputs(outputs, first))
                    << "EP " << ep_size << ", forward_combine " << static_cast<int>(combine);
            }
        }
    }
}

TEST(LayerDeterminism, RecomputeThenBackwardEqualsForwardThenBackward) {
    MOK_REQUIRE_CUDA_BACKEND();
    const RandomCase c = random_case(busy_problem(), 2, case_seed(6));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem first(c.problem, c.dy);
    ApiProblem second(c.problem, c.dy);
    first.prepare_outputs(case_seed(7));
    second.prepare_outputs(case_seed(7));
    DeviceProblem a(first, kDevice);
    DeviceProblem b(second, kDevice);
    LayerUnderTest l;
    MOK_ASSERT_OK(make_layer(a.options(), &l));
    TestStream stream;
    MOK_ASSERT_OK(run_step(l, a, GradMode::kAccumulate, stream.get()));

    std::unique_ptr<ForwardContext> recomputed;
    MOK_ASSERT_OK(l.layer->create_context(&recomputed));
    MOK_ASSERT_OK(l.layer->recompute_forward(b.inputs(), recomputed.get(), stream.get()));
    MOK_ASSERT_OK(l.layer->synchronize(stream.get()));
    ASSERT_TRUE(recomputed->ready());
    MOK_ASSERT_OK(l.layer->backward(b.inputs(), b.backward_args(GradMode::kAccumulate), *recomputed, stream.get()));
    MOK_ASSERT_OK(l.layer->synchronize(stream.get()));
    a.download_outputs(first);
    b.download_outputs(second);

    std::vector<Named> want = outputs_of(first, GradMode::kAccumulate);
    std::vector<Named> got = outputs_of(second, GradMode::kAccumulate);
    for (int r = 0; r < 2; ++r) {
        // recompute_forward writes no y: it stays as poisoned.
        for (const double v : second.rank(r).y.values()) {
            ASSERT_TRUE(std::isnan(v)) << "recompute_forward wrote y of rank " << r;
        }
        EXPECT_EQ(recomputed->stats(r).rows_from_rank, l.context->stats(r).rows_from_rank);
    }
    // Everything but y.
    std::erase_if(want, [](const Named& n) { return n.name.ends_with(" y"); });
    std::erase_if(got, [](const Named& n) { return n.name.ends_with(" y"); });
    EXPECT_TRUE(same_outputs(got, want));
}

// A forward and backward captured in a CUDA graph (after an eager step, which allocated the context) replays
// with the eager step's bits, replay after replay: the real row counts and the step numbers live on the device.
TEST(LayerDeterminism, GraphReplayGivesTheSameBits) {
    MOK_REQUIRE_CUDA_BACKEND();
    const RandomCase c = random_case(busy_problem(), 4, case_seed(8));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(9));
    DeviceProblem device(host, kDevice);
    LayerUnderTest l;
    MOK_ASSERT_OK(make_layer(device.options(), &l));
    TestStream stream;
    MOK_ASSERT_OK(run_step(l, device, GradMode::kFresh, stream.get()));
    ApiProblem eager(c.problem, c.dy);
    device.download_outputs(eager);
    const std::vector<Named> want = outputs_of(eager, GradMode::kFresh);

    const std::vector<ForwardArgs> forward_args = device.forward_args();
    const std::vector<RankInputs> inputs = device.inputs();
    const std::vector<BackwardArgs> backward_args = device.backward_args(GradMode::kFresh);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status forward = l.layer->forward(forward_args, l.context.get(), stream.get());
    const Status backward = l.layer->backward(inputs, backward_args, *l.context, stream.get());
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    MOK_ASSERT_OK(forward);
    MOK_ASSERT_OK(backward);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 3; ++replay) {
        device.poison_outputs();
        ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
        MOK_ASSERT_OK(l.layer->synchronize(stream.get()));
        ApiProblem replayed(c.problem, c.dy);
        device.download_outputs(replayed);
        EXPECT_TRUE(same_outputs(outputs_of(replayed, GradMode::kFresh), want)) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}

// Two layers of one model share a workspace. Each layer's results with the calls interleaved (forward A, forward
// B, recompute A, backward B, backward A) equal its results alone: nothing a backward needs lives in the
// workspace, and every pass's flags carry a number of its own.
TEST(LayerDeterminism, LayersSharingAWorkspaceGiveTheirOwnBits) {
    MOK_REQUIRE_CUDA_BACKEND();
    const RandomCase ca = random_case(busy_problem(), 2, case_seed(10));
    ProblemOptions other = busy_problem();
    other.expert_width = 96;
    other.shared_expert_widths = {256};
    other.routing = Routing::kUniform;
    const RandomCase cb = random_case(other, 2, case_seed(11));
    SCOPED_TRACE(replay_hint() + "; A: " + ca.description + "; B: " + cb.description);
    const std::vector<Named> alone_a =
        run_once(ca, ApiProblem(ca.problem, ca.dy).options(), GradMode::kAccumulate, case_seed(12));
    Config config_b;
    config_b.schedule_capacity_factor = 2.0;
    LayerOptions options_b = ApiProblem(cb.problem, cb.dy).options();
    options_b.config = config_b;
    const std::vector<Named> alone_b = run_once(cb, options_b, GradMode::kAccumulate, case_seed(13));

    ApiProblem host_a(ca.problem, ca.dy);
    ApiProblem host_b(cb.problem, cb.dy);
    host_a.prepare_outputs(case_seed(12));
    host_b.prepare_outputs(case_seed(13));
    DeviceProblem a(host_a, kDevice);
    DeviceProblem b(host_b, kDevice);
    options_b.backend = Backend::kCuda;
    options_b.device = Device::cuda(kDevice);
    // One workspace of the larger size serves both.
    size_t bytes_a = 0;
    size_t bytes_b = 0;
    MOK_ASSERT_OK(MoeLayer::workspace_bytes(a.options(), &bytes_a));
    MOK_ASSERT_OK(MoeLayer::workspace_bytes(options_b, &bytes_b));
    std::shared_ptr<Workspace> workspace;
    MOK_ASSERT_OK(Workspace::create(Backend::kCuda, Device::cuda(kDevice), std::max(bytes_a, bytes_b), &workspace));
    LayerUnderTest la;
    LayerUnderTest lb;
    MOK_ASSERT_OK(make_layer(a.options(), &la, workspace));
    MOK_ASSERT_OK(make_layer(options_b, &lb, workspace));
    std::unique_ptr<ForwardContext> recomputed_a;
    MOK_ASSERT_OK(la.layer->create_context(&recomputed_a));
    TestStream stream;
    const GradMode mode = GradMode::kAccumulate;
    MOK_ASSERT_OK(la.layer->forward(a.forward_args(), la.context.get(), stream.get()));
    MOK_ASSERT_OK(lb.layer->forward(b.forward_args(), lb.context.get(), stream.get()));
    MOK_ASSERT_OK(la.layer->recompute_forward(a.inputs(), recomputed_a.get(), stream.get()));
    MOK_ASSERT_OK(lb.layer->backward(b.inputs(), b.backward_args(mode), *lb.context, stream.get()));
    MOK_ASSERT_OK(la.layer->backward(a.inputs(), a.backward_args(mode), *recomputed_a, stream.get()));
    MOK_ASSERT_OK(la.layer->synchronize(stream.get()));
    a.download_outputs(host_a);
    b.download_outputs(host_b);
    EXPECT_TRUE(same_outputs(outputs_of(host_a, mode), alone_a));
    EXPECT_TRUE(same_outputs(outputs_of(host_b, mode), alone_b));
}

// Recording stage times (Config::record_stage_times) changes no bit, and names every stage of the kernel
// sequence with a positive time: the transport's stages once per step, each GEMM once per virtual rank.
TEST(LayerDeterminism, StageTimesChangeNoBitsAndNameTheStages) {
    MOK_REQUIRE_CUDA_BACKEND();
    constexpr int kRanks = 2;
    const RandomCase c = random_case(busy_problem(), kRanks, case_seed(12));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    const GradMode mode = GradMode::kFresh;
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(13));
    DeviceProblem device(host, kDevice);
    std::vector<Named> plain;
    std::vector<Named> recorded;
    for (const bool record : {false, true}) {
        LayerOptions options = device.options();
        options.config.record_stage_times = record;
        LayerUnderTest l;
        MOK_ASSERT_OK(make_layer(options, &l));
        TestStream stream;
        device.upload_outputs(host);
        MOK_ASSERT_OK(run_step(l, device, mode, stream.get()));
        ApiProblem result(c.problem, c.dy);
        device.download_outputs(result);
        (record ? recorded : plain) = outputs_of(result, mode);
        const std::vector<StageTime> times = l.layer->stage_times();
        if (!record) {
            EXPECT_TRUE(times.empty());
            continue;
        }
        const struct {
            const char* stage;
            int64_t count;
        } expected[] = {{"forward/dispatch", 1},
                        {"forward/gate_up_swiglu", kRanks},
                        {"forward/push", 1},
                        {"forward/combine", 1},
                        {"backward/dispatch", 1},
                        {"backward/dgrad_down", kRanks},
                        {"backward/weight_grad_gate_up", kRanks},
                        {"backward/combine", 1}};
        for (const auto& e : expected) {
            const auto it =
                std::find_if(times.begin(), times.end(), [&](const StageTime& t) { return t.stage == e.stage; });
            ASSERT_NE(it, times.end()) << e.stage;
            EXPECT_EQ(it->count, e.count) << e.stage;
            EXPECT_GT(it->total_ms, 0.0) << e.stage;
        }
    }
    EXPECT_TRUE(same_outputs(recorded, plain));
}

}  // namespace
}  // namespace mok::testing
