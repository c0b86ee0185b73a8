// The layer on two real ranks -- one GPU and one thread each, a communicator made by mok from a unique id
// (Communicator::create), the workspace registered collectively -- equals the layer on two virtual ranks of one
// GPU, bit for bit: forward, backward in both gradient modes, and recompute_forward, over several steps.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/api_problem.hpp"
#include "common/test_seed.hpp"
#include "layer/device_problem.hpp"
#include "layer/layer_runs.hpp"

namespace mok::testing {
namespace {

constexpr int kRanks = 2;

ProblemOptions two_rank_problem() {
    ProblemOptions o;
    o.num_tokens = 2 * 333;
    o.hidden = 512;
    o.expert_width = 256;
    o.num_experts = 8;
    o.top_k = 3;
    o.shared_expert_widths = {128};
    o.routing = Routing::kZipf;
    o.unused_slot_fraction = 0.1;
    return o;
}

// The steps both runs make: forward + backward (fresh), forward + backward (accumulate), recompute + backward
// (accumulate); the outputs of the run's ranks after each.
struct StepResults {
    std::vector<std::vector<Named>> outputs;  // [step]
};

const GradMode kModes[] = {GradMode::kFresh, GradMode::kAccumulate, GradMode::kAccumulate};

// What one rank thread brings back to the main thread, where the assertions run.
struct RankOutcome {
    Status status;
    std::string failure;  // an exception from the test's own CUDA calls
};

// The entries of `outputs` that belong to rank `rank`.
std::vector<Named> of_rank(const std::vector<Named>& outputs, int rank) {
    std::vector<Named> out;
    for (const Named& n : outputs) {
        if (n.name.rfind("rank " + std::to_string(rank) + " ", 0) == 0) {
            out.push_back(n);
        }
    }
    return out;
}

Status run_steps(const RandomCase& c, LayerUnderTest& l, DeviceProblem& device, const ApiProblem& host,
                 cudaStream_t stream, StepResults* results) {
    for (size_t step = 0; step < std::size(kModes); ++step) {
        const GradMode mode = kModes[step];
        device.upload_outputs(host);
        if (step < 2) {
            MOK_RETURN_IF_ERROR(l.layer->forward(device.forward_args(), l.context.get(), stream));
        } else {
            MOK_RETURN_IF_ERROR(l.layer->recompute_forward(device.inputs(), l.context.get(), stream));
        }
        MOK_RETURN_IF_ERROR(l.layer->backward(device.inputs(), device.backward_args(mode), *l.context, stream));
        MOK_RETURN_IF_ERROR(l.layer->synchronize(stream));
        ApiProblem result(c.problem, c.dy);
        device.download_outputs(result);
        std::vector<Named> outputs;
        for (int r = device.first_rank(); r < device.first_rank() + device.num_ranks(); ++r) {
            const std::vector<Named> mine = of_rank(outputs_of(result, mode), r);
            outputs.insert(outputs.end(), mine.begin(), mine.end());
        }
        results->outputs.push_back(outputs);
    }
    return Status::ok();
}

TEST(LayerRealRanks, TwoGpusEqualTwoVirtualRanks) {
    MOK_REQUIRE_CUDA_BACKEND();
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < kRanks) {
        GTEST_SKIP() << "needs two CUDA devices, found " << gpus;
    }
    // The machines keep NVLink multicast off; a bare run does too (an explicit setting wins).
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    const RandomCase c = random_case(two_rank_problem(), kRanks, case_seed(40));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(41));

    // Virtual ranks on GPU 0.
    StepResults virtual_results;
    {
        DeviceProblem device(host, kDevice);
        LayerUnderTest l;
        const Status made = make_layer(device.options(), &l);
        ASSERT_TRUE(made.is_ok()) << made.to_string();
        TestStream stream;
        const Status status = run_steps(c, l, device, host, stream.get(), &virtual_results);
        ASSERT_TRUE(status.is_ok()) << status.to_string();
    }

    // Real ranks: rank r on GPU r.
    CommUniqueId id;
    const Status made_id = Communicator::make_unique_id(&id);
    ASSERT_TRUE(made_id.is_ok()) << made_id.to_string();
    std::vector<RankOutcome> outcomes(kRanks);
    std::vector<StepResults> real_results(kRanks);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kRanks; ++rank) {
        threads.emplace_back([&, rank] {
            try {
                RankOutcome& out = outcomes[rank];
                cudaSetDevice(rank);
                std::shared_ptr<Communicator> comm;
                out.status = Communicator::create(id, rank, kRanks, rank, &comm);
                if (!out.status.is_ok()) {
                    return;
                }
                DeviceProblem device(host, rank, 0, rank);
                LayerOptions options = device.options();
                options.communicator = comm;
                size_t bytes = 0;
                out.status = MoeLayer::workspace_bytes(options, &bytes);
                std::shared_ptr<Workspace> workspace;
                if (out.status.is_ok()) {
                    out.status = Workspace::create(Backend::kCuda, options.device, bytes, comm, &workspace);
                }
                LayerUnderTest l;
                if (out.status.is_ok()) {
                    out.status = make_layer(options, &l, workspace);
                }
                if (out.status.is_ok()) {
                    TestStream stream;
                    out.status = run_steps(c, l, device, host, stream.get(), &real_results[rank]);
                }
            } catch (const std::exception& e) {
                outcomes[rank].failure = e.what();
            }
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    for (int rank = 0; rank < kRanks; ++rank) {
        SCOPED_TRACE("real rank " + std::to_string(rank));
        ASSERT_TRUE(outcomes[rank].failure.empty()) << outcomes[rank].failure;
        ASSERT_TRUE(outcomes[rank].status.is_ok()) << outcomes[rank].status.to_string();
        for (size_t step = 0; step < std::size(kModes); ++step) {
            SCOPED_TRACE("step " + std::to_string(step));
            EXPECT_TRUE(same_outputs(real_results[rank].outputs[step], of_rank(virtual_results.outputs[step], rank)));
        }
    }
}

}  // namespace
}  // namespace mok::testing
