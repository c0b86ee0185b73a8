// Running the layer in the GPU tests and judging what it wrote: the GPU layer and its context, a step on a
// stream, the CPU backend's results of the same problem, the fp64 oracle, and comparisons -- bit for bit, or
// through the one tolerance model (reference/tolerance.hpp).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "api/api_problem.hpp"
#include "layer/device_problem.hpp"
#include "mok/mok.hpp"
#include "reference/reference.hpp"

namespace mok::testing {

inline constexpr int kDevice = 0;

// Fails the test (and returns from it) when `expr`, a Status, is not ok, with its message.
#define MOK_ASSERT_OK(expr)                                          \
    do {                                                             \
        const ::mok::Status mok_status_ = (expr);                    \
        ASSERT_TRUE(mok_status_.is_ok()) << mok_status_.to_string(); \
    } while (false)

// Skips the test on a machine without a GPU the CUDA backend runs on, saying why.
#define MOK_REQUIRE_CUDA_BACKEND()                                                          \
    do {                                                                                    \
        const ::mok::Status mok_ready_ = ::mok::testing::cuda_backend_ready();              \
        if (!mok_ready_.is_ok()) {                                                          \
            GTEST_SKIP() << "the CUDA backend cannot run here: " << mok_ready_.to_string(); \
        }                                                                                   \
    } while (false)

Status cuda_backend_ready();

struct LayerUnderTest {
    std::shared_ptr<Workspace> workspace;
    std::unique_ptr<MoeLayer> layer;
    std::unique_ptr<ForwardContext> context;
};

// A layer of `options` with its own workspace of the size it asks for, or on `workspace` when given.
Status make_layer(const LayerOptions& options, LayerUnderTest* out, std::shared_ptr<Workspace> workspace = nullptr);

// A stream of its own for a test, destroyed with it.
class TestStream {
  public:
    TestStream();
    ~TestStream();
    TestStream(const TestStream&) = delete;
    TestStream& operator=(const TestStream&) = delete;
    cudaStream_t get() const { return stream_; }

  private:
    cudaStream_t stream_ = nullptr;
};

// forward, synchronize, backward, synchronize: the first failure.
Status run_step(LayerUnderTest& l, const DeviceProblem& problem, GradMode mode, cudaStream_t stream);

// The CPU backend's forward and backward of the same problem, written into `api`'s outputs.
Status run_cpu_backend(ApiProblem& api, GradMode mode);

// One output tensor's values.
struct Named {
    std::string name;
    std::vector<double> values;
};

// Every output of every rank in a fixed order: y, dx, d_router_weights, the routed experts' gradients and each
// shared expert's, from the tensors of `mode` (bf16 fresh or fp32 main_grad).
std::vector<Named> outputs_of(const ApiProblem& api, GradMode mode);
// The main_grad tensors of every rank, in the order of outputs_of's gradients (before a run adds to them).
std::vector<Named> main_grads_of(const ApiProblem& api);

// The fp64 reference of a case (reference::Precision::kOracle), run once for both gradient modes.
struct Oracle {
    std::vector<reference::RankForward> forward;
    std::vector<reference::RankGrads> grads;
};
Oracle run_oracle(const RandomCase& c);

// The oracle's values of outputs_of's tensors (main_grad_before + the sums, in accumulate mode).
std::vector<Named> oracle_outputs(const Oracle& oracle, GradMode mode, const std::vector<Named>& main_grad_before);

// Each tensor of `got` equal to `want`'s bit for bit.
::testing::AssertionResult same_outputs(const std::vector<Named>& got, const std::vector<Named>& want);
// Each tensor of `got` within the tolerance model, given the same-precision results and the oracle.
::testing::AssertionResult outputs_within_tolerance(const std::vector<Named>& got, const std::vector<Named>& same,
                                                    const std::vector<Named>& oracle);

// y, dx and d_router_weights of all ranks in global token order, and the routed experts' weight gradients in
// global expert order: what is the same at every EP degree (docs/semantics.md section 7).
std::vector<Named> global_outputs(const ApiProblem& api, GradMode mode);

}  // namespace mok::testing
