// What the CUDA backend refuses and how a failed step reports itself: the CUDA-specific argument rules (tensors
// in device memory of the layer's device, dense weights), topology and workspace rules, and device-side failures
// -- a schedule overflow and invalid routing -- which synchronize reports, after which the next step runs
// correctly on the same layer, workspace and context.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "api/api_problem.hpp"
#include "api/status_matchers.hpp"
#include "common/bit_compare.hpp"
#include "common/test_seed.hpp"
#include "layer/device_problem.hpp"
#include "layer/layer_runs.hpp"
#include "layer/reference_cases.hpp"

namespace mok::testing {
namespace {

bool all_nan(const HostTensor& t) {
    for (const double v : t.values()) {
        if (!std::isnan(v)) {
            return false;
        }
    }
    return true;
}

// The next step after a failure: uniform routing of the same shape, checked against the CPU backend.
void expect_next_step_correct(LayerUnderTest& l, const ProblemOptions& options, const Config& config, uint64_t seed,
                              cudaStream_t stream) {
    ProblemOptions uniform = options;
    uniform.routing = Routing::kUniform;
    const RandomCase c = random_case(uniform, 2, seed, config);
    SCOPED_TRACE("the next step: " + c.description);
    ApiProblem cpu(c.problem, c.dy);
    ApiProblem gpu(c.problem, c.dy);
    cpu.prepare_outputs(seed + 1);
    gpu.prepare_outputs(seed + 1);
    const std::vector<Named> before = main_grads_of(cpu);
    MOK_ASSERT_OK(run_cpu_backend(cpu, GradMode::kAccumulate));
    DeviceProblem device(gpu, kDevice);
    MOK_ASSERT_OK(run_step(l, device, GradMode::kAccumulate, stream));
    device.download_outputs(gpu);
    EXPECT_TRUE(outputs_within_tolerance(outputs_of(gpu, GradMode::kAccumulate), outputs_of(cpu, GradMode::kAccumulate),
                                         oracle_outputs(run_oracle(c), GradMode::kAccumulate, before)));
}

// Every token on one expert of rank 1 needs 896 padded rows there; capacity factor 0.5 holds 768 (256 for the
// balanced load plus a tile per local expert). A uniform routing of the same shape fits.
TEST(LayerFailure, ScheduleOverflowSurfacesFromSynchronizeAndTheNextStepRuns) {
    MOK_REQUIRE_CUDA_BACKEND();
    ProblemOptions hot = problem_shape(800, 16, 16, 8, 1, {8});
    hot.routing = Routing::kHotRange;
    hot.hot_first_expert = 5;
    hot.num_hot_experts = 1;
    Config config;
    config.schedule_capacity_factor = 0.5;
    const RandomCase c = random_case(hot, 2, case_seed(20), config);
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(21));
    DeviceProblem device(host, kDevice);
    LayerUnderTest l;
    MOK_ASSERT_OK(make_layer(device.options(), &l));
    TestStream stream;

    // Both calls only enqueue: the overflow is found on the GPU, and the backward's kernels skip.
    MOK_ASSERT_OK(l.layer->forward(device.forward_args(), l.context.get(), stream.get()));
    MOK_ASSERT_OK(
        l.layer->backward(device.inputs(), device.backward_args(GradMode::kAccumulate), *l.context, stream.get()));
    EXPECT_TRUE(has_code(l.layer->synchronize(stream.get()), StatusCode::kScheduleOverflow, "rank 1 needs"));
    // The failure was cleared: the next synchronize is clean.
    MOK_ASSERT_OK(l.layer->synchronize(stream.get()));

    ApiProblem after(c.problem, c.dy);
    device.download_outputs(after);
    for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(all_nan(after.rank(r).y)) << "rank " << r << " y was written";
        EXPECT_TRUE(all_nan(after.rank(r).dx)) << "rank " << r << " dx was written";
    }
    // A failed step adds nothing to main_grad, the shared experts' included.
    EXPECT_TRUE(same_outputs(main_grads_of(after), main_grads_of(host)));
    // The context of the failed step is refused.
    EXPECT_TRUE(is_invalid_argument(
        l.layer->backward(device.inputs(), device.backward_args(GradMode::kFresh), *l.context, stream.get()), "context",
        "synchronize reported"));

    expect_next_step_correct(l, hot, config, case_seed(22), stream.get());
}

// An expert id out of range passes the host checks (the CUDA backend reads no ids on the host); the GPU planner
// finds it, synchronize names the rank, token and slot, and the next step runs.
TEST(LayerFailure, InvalidRoutingSurfacesFromSynchronizeAndTheNextStepRuns) {
    MOK_REQUIRE_CUDA_BACKEND();
    const ProblemOptions options = problem_shape(64, 16, 16, 4, 2, {});
    const RandomCase c = random_case(options, 2, case_seed(23));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(24));
    // Rank 1, token 5, slot 1 names expert E.
    host.rank(1).expert_ids.set(5 * 2 + 1, 4);
    DeviceProblem device(host, kDevice);
    LayerUnderTest l;
    MOK_ASSERT_OK(make_layer(device.options(), &l));
    TestStream stream;
    MOK_ASSERT_OK(l.layer->forward(device.forward_args(), l.context.get(), stream.get()));
    const Status status = l.layer->synchronize(stream.get());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
    EXPECT_NE(status.message().find("rank 1, token 5, slot 1"), std::string::npos) << status.message();
    expect_next_step_correct(l, options, Config{}, case_seed(25), stream.get());
}

class LayerArguments : public ::testing::Test {
  protected:
    void SetUp() override {
        MOK_REQUIRE_CUDA_BACKEND();
        const RandomCase c = random_case(problem_shape(32, 16, 16, 4, 2, {8}), 2, case_seed(30));
        host_ = std::make_unique<ApiProblem>(c.problem, c.dy);
        host_->prepare_outputs(case_seed(31));
        device_ = std::make_unique<DeviceProblem>(*host_, kDevice);
        const Status made = make_layer(device_->options(), &layer_);
        ASSERT_TRUE(made.is_ok()) << made.to_string();
        stream_ = std::make_unique<TestStream>();
    }

    Status forward(const std::vector<ForwardArgs>& args) {
        return layer_.layer->forward(args, layer_.context.get(), stream());
    }
    cudaStream_t stream() const { return stream_->get(); }

    std::unique_ptr<ApiProblem> host_;
    std::unique_ptr<DeviceProblem> device_;
    LayerUnderTest layer_;
    std::unique_ptr<TestStream> stream_;
};

TEST_F(LayerArguments, TensorsInHostMemoryAreNamed) {
    std::vector<ForwardArgs> args = device_->forward_args();
    args[1].inputs.x.data = host_->rank(1).x.view().data;
    EXPECT_TRUE(is_invalid_argument(forward(args), "args[1].inputs.x", "got host memory"));
    args = device_->forward_args();
    args[0].y.data = host_->rank(0).y.view().data;
    EXPECT_TRUE(is_invalid_argument(forward(args), "args[0].y", "device memory of cuda:0"));
    std::vector<BackwardArgs> backward = device_->backward_args(GradMode::kFresh);
    backward[0].d_shared[0].up.data = host_->rank(0).d_shared_fresh[0].up.view().data;
    MOK_ASSERT_OK(forward(device_->forward_args()));
    EXPECT_TRUE(is_invalid_argument(layer_.layer->backward(device_->inputs(), backward, *layer_.context, stream()),
                                    "args[0].d_shared[0].up", "got host memory"));
    MOK_ASSERT_OK(layer_.layer->synchronize(stream()));
}

TEST_F(LayerArguments, WeightsWithPaddedRowsAreNamed) {
    std::vector<ForwardArgs> args = device_->forward_args();
    // Rows of H + 8 elements: valid for the API (16-byte aligned rows), not for the GEMMs' tensor maps.
    TensorView& gate = args[0].inputs.experts.gate;
    gate.stride[1] = gate.shape[2] + 8;
    gate.stride[0] = gate.shape[1] * gate.stride[1];
    EXPECT_TRUE(is_invalid_argument(forward(args), "args[0].inputs.experts.gate", "a dense row-major tensor"));
}

TEST(LayerOptionsForCuda, TopologyWorkspaceAndCommunicatorRules) {
    MOK_REQUIRE_CUDA_BACKEND();
    LayerOptions o;
    o.shape = {32, 16, 16, 8, 2, {}};
    o.backend = Backend::kCuda;
    o.device = Device::cuda(kDevice);
    o.topology = {4, 0, 2};
    EXPECT_TRUE(has_code(MoeLayer::validate(o), StatusCode::kNotSupported, "options.topology.num_local_ranks"));
    o.shape.num_experts = 16;
    o.topology = {16, 0, 16};
    EXPECT_TRUE(has_code(MoeLayer::validate(o), StatusCode::kNotSupported, "at most 8 ranks"));
    o.topology = {2, 1, 1};
    EXPECT_TRUE(is_invalid_argument(MoeLayer::validate(o), "options.communicator", "got null"));

    // A layer of another T on a workspace laid out for the first one is refused.
    o.topology = {2, 0, 2};
    size_t bytes = 0;
    MOK_ASSERT_OK(MoeLayer::workspace_bytes(o, &bytes));
    std::shared_ptr<Workspace> workspace;
    MOK_ASSERT_OK(Workspace::create(Backend::kCuda, o.device, 4 * bytes, &workspace));
    std::unique_ptr<MoeLayer> first;
    MOK_ASSERT_OK(MoeLayer::create(o, workspace, &first));
    LayerOptions other = o;
    other.shape.tokens_per_rank = 16;
    std::unique_ptr<MoeLayer> second;
    EXPECT_TRUE(is_invalid_argument(MoeLayer::create(other, workspace, &second), "workspace", "T 16"));
    // Another width and config share it.
    other = o;
    other.shape.expert_width = 8;
    other.config.schedule_capacity_factor = 2.0;
    MOK_ASSERT_OK(MoeLayer::create(other, workspace, &second));
}

}  // namespace
}  // namespace mok::testing
