#include "reference/global_run.hpp"

#include "common/random_problem.hpp"

namespace mok::testing {

using reference::GlobalBatch;
using reference::Precision;
using reference::Problem;
using reference::RankForward;
using reference::RankGrads;

std::optional<GlobalResult> run_global(const GlobalBatch& batch, const std::vector<double>& dy, int ep_size,
                                       Precision precision, const Config& config, std::string* error) {
    const Problem problem = partition(batch, ep_size, config);
    std::vector<RankForward> forward_out;
    std::vector<RankGrads> backward_out;
    if (!forward(problem, precision, &forward_out, error) ||
        !backward(problem, split_rows(dy, ep_size), precision, &backward_out, error)) {
        return std::nullopt;
    }
    GlobalResult result;
    std::vector<std::vector<double>> y;
    std::vector<std::vector<double>> dx;
    std::vector<std::vector<double>> d_router_weights;
    for (int r = 0; r < ep_size; ++r) {
        y.push_back(forward_out[r].y);
        dx.push_back(backward_out[r].dx);
        d_router_weights.push_back(backward_out[r].d_router_weights);
        result.d_shared.push_back(backward_out[r].d_shared);
    }
    result.y = concat_ranks(y);
    result.dx = concat_ranks(dx);
    result.d_router_weights = concat_ranks(d_router_weights);
    result.d_experts = concat_expert_grads(backward_out);
    return result;
}

}  // namespace mok::testing
