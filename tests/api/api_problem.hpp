// A reference::Problem (tests/common/random_problem.hpp) laid out as the public API's tensors, for every rank:
// the inputs, dy, and the outputs and gradients the layer writes, with views for forward, recompute_forward
// and backward. Tests compare what the API writes here with the reference called directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/host_tensor.hpp"
#include "common/random_problem.hpp"
#include "mok/mok.hpp"
#include "reference/reference.hpp"

namespace mok::testing {

// A random problem cut into `ep_size` ranks, with an output gradient for the backward.
struct RandomCase {
    reference::Problem problem;
    std::vector<std::vector<double>> dy;  // [R][T, H]
    std::string description;              // the options, R and the seed, for failure messages
};

RandomCase random_case(const ProblemOptions& options, int ep_size, uint64_t seed, const Config& config = {});

// Options of a problem of these sizes, every other option at its default.
ProblemOptions problem_shape(int64_t tokens, int64_t hidden, int64_t width, int64_t experts, int64_t top_k,
                             std::vector<int64_t> shared);

struct WeightTensors {
    HostTensor gate;  // [n, I, H] or [I_s, H]
    HostTensor up;
    HostTensor down;  // [n, H, I] or [H, I_s]
};

struct ApiRank {
    HostTensor x, expert_ids, router_weights, y, dy, dx, d_router_weights;
    WeightTensors experts;
    std::vector<WeightTensors> shared;
    WeightTensors d_experts_fresh;  // bf16
    WeightTensors d_experts_main;   // fp32 main_grad
    std::vector<WeightTensors> d_shared_fresh;
    std::vector<WeightTensors> d_shared_main;
};

class ApiProblem {
  public:
    // `row_padding` extra elements at the end of every row of the [.., H] and [.., I] tensors (a multiple of 8
    // keeps rows 16-byte aligned).
    ApiProblem(const reference::Problem& problem, const std::vector<std::vector<double>>& dy, int64_t row_padding = 0);

    // The layer options of the problem, CPU reference backend, all ranks local.
    LayerOptions options() const;

    std::vector<ForwardArgs> forward_args() const;
    std::vector<RankInputs> inputs() const;
    std::vector<BackwardArgs> backward_args(GradMode mode) const;

    // Poisons y, dx, d_router_weights and the fresh gradients; fills main_grad with random fp32 values, unless
    // `fill_main_grad` is false (a fresh-gradient step never reads it, and at the model presets' sizes the fill
    // takes seconds).
    void prepare_outputs(uint64_t seed, bool fill_main_grad = true);

    ApiRank& rank(int r) { return ranks_[r]; }
    const ApiRank& rank(int r) const { return ranks_[r]; }
    int ep_size() const { return static_cast<int>(ranks_.size()); }

  private:
    RankInputs rank_inputs(const ApiRank& rank) const;

    reference::Problem problem_;
    std::vector<ApiRank> ranks_;
};

}  // namespace mok::testing
