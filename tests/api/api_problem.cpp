#include "api/api_problem.hpp"

#include <random>

namespace mok::testing {
namespace {

WeightTensors weight_tensors(DType dtype, int64_t num_experts, int64_t width, int64_t hidden, int64_t padding) {
    if (num_experts == 0) {
        return {HostTensor(dtype, {width, hidden}, padding), HostTensor(dtype, {width, hidden}, padding),
                HostTensor(dtype, {hidden, width}, padding)};
    }
    return {HostTensor(dtype, {num_experts, width, hidden}, padding),
            HostTensor(dtype, {num_experts, width, hidden}, padding),
            HostTensor(dtype, {num_experts, hidden, width}, padding)};
}

void assign(WeightTensors& w, const reference::ExpertParams& p) {
    w.gate.assign(p.gate);
    w.up.assign(p.up);
    w.down.assign(p.down);
}

ExpertWeights expert_views(const WeightTensors& w) {
    return {w.gate.view(), w.up.view(), w.down.view()};
}

void poison(WeightTensors& w) {
    w.gate.poison();
    w.up.poison();
    w.down.poison();
}

// Random fp32 main_grad values, as a training step would have accumulated them so far.
void fill_random(WeightTensors& w, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    for (HostTensor* t : {&w.gate, &w.up, &w.down}) {
        for (int64_t n = 0; n < t->numel(); ++n) {
            t->set(n, value(rng));
        }
    }
}

}  // namespace

RandomCase random_case(const ProblemOptions& options, int ep_size, uint64_t seed, const Config& config) {
    RandomCase c;
    const reference::GlobalBatch batch = random_global_batch(options, seed);
    c.problem = reference::partition(batch, ep_size, config);
    c.dy = split_rows(random_output_grad(options.num_tokens, options.hidden, options.values, seed + 1), ep_size);
    c.description = options.describe() + ", R " + std::to_string(ep_size) + ", seed " + std::to_string(seed);
    return c;
}

ProblemOptions problem_shape(int64_t tokens, int64_t hidden, int64_t width, int64_t experts, int64_t top_k,
                             std::vector<int64_t> shared) {
    ProblemOptions o;
    o.num_tokens = tokens;
    o.hidden = hidden;
    o.expert_width = width;
    o.num_experts = experts;
    o.top_k = top_k;
    o.shared_expert_widths = std::move(shared);
    return o;
}

ApiProblem::ApiProblem(const reference::Problem& problem, const std::vector<std::vector<double>>& dy,
                       int64_t row_padding)
    : problem_(problem) {
    const LayerShape& s = problem.shape;
    const int64_t T = s.tokens_per_rank;
    const int64_t local = s.num_experts / problem.ep_size;
    for (int r = 0; r < problem.ep_size; ++r) {
        const reference::RankInputs& in = problem.ranks[r];
        ApiRank& rank = ranks_.emplace_back();
        rank.x = HostTensor(DType::kBF16, {T, s.hidden}, row_padding);
        rank.x.assign(in.x);
        rank.expert_ids = HostTensor(DType::kI32, {T, s.top_k});
        rank.expert_ids.assign(in.expert_ids);
        rank.router_weights = HostTensor(DType::kF32, {T, s.top_k});
        rank.router_weights.assign(in.router_weights);
        rank.experts = weight_tensors(DType::kBF16, local, s.expert_width, s.hidden, row_padding);
        assign(rank.experts, in.experts);
        rank.d_experts_fresh = weight_tensors(DType::kBF16, local, s.expert_width, s.hidden, row_padding);
        rank.d_experts_main = weight_tensors(DType::kF32, local, s.expert_width, s.hidden, row_padding);
        for (size_t i = 0; i < s.shared_expert_widths.size(); ++i) {
            const int64_t width = s.shared_expert_widths[i];
            rank.shared.push_back(weight_tensors(DType::kBF16, 0, width, s.hidden, row_padding));
            assign(rank.shared.back(), in.shared[i]);
            rank.d_shared_fresh.push_back(weight_tensors(DType::kBF16, 0, width, s.hidden, row_padding));
            rank.d_shared_main.push_back(weight_tensors(DType::kF32, 0, width, s.hidden, row_padding));
        }
        rank.y = HostTensor(DType::kBF16, {T, s.hidden}, row_padding);
        rank.dy = HostTensor(DType::kBF16, {T, s.hidden}, row_padding);
        rank.dy.assign(dy[r]);
        rank.dx = HostTensor(DType::kBF16, {T, s.hidden}, row_padding);
        rank.d_router_weights = HostTensor(DType::kF32, {T, s.top_k});
    }
}

LayerOptions ApiProblem::options() const {
    LayerOptions options;
    options.shape = problem_.shape;
    options.topology = {problem_.ep_size, 0, problem_.ep_size};
    options.config = problem_.config;
    return options;
}

RankInputs ApiProblem::rank_inputs(const ApiRank& rank) const {
    RankInputs in;
    in.x = rank.x.view();
    in.expert_ids = rank.expert_ids.view();
    in.router_weights = rank.router_weights.view();
    in.experts = expert_views(rank.experts);
    for (const WeightTensors& w : rank.shared) {
        in.shared.push_back({w.gate.view(), w.up.view(), w.down.view()});
    }
    return in;
}

std::vector<ForwardArgs> ApiProblem::forward_args() const {
    std::vector<ForwardArgs> args;
    for (const ApiRank& rank : ranks_) {
        args.push_back({rank_inputs(rank), rank.y.view()});
    }
    return args;
}

std::vector<RankInputs> ApiProblem::inputs() const {
    std::vector<RankInputs> inputs;
    for (const ApiRank& rank : ranks_) {
        inputs.push_back(rank_inputs(rank));
    }
    return inputs;
}

std::vector<BackwardArgs> ApiProblem::backward_args(GradMode mode) const {
    const bool fresh = mode == GradMode::kFresh;
    std::vector<BackwardArgs> args;
    for (const ApiRank& rank : ranks_) {
        BackwardArgs a;
        a.dy = rank.dy.view();
        a.dx = rank.dx.view();
        a.d_router_weights = rank.d_router_weights.view();
        const WeightTensors& d = fresh ? rank.d_experts_fresh : rank.d_experts_main;
        a.d_experts = {d.gate.view(), d.up.view(), d.down.view()};
        for (const WeightTensors& w : fresh ? rank.d_shared_fresh : rank.d_shared_main) {
            a.d_shared.push_back({w.gate.view(), w.up.view(), w.down.view()});
        }
        a.grad_mode = mode;
        args.push_back(std::move(a));
    }
    return args;
}

void ApiProblem::prepare_outputs(uint64_t seed, bool fill_main_grad) {
    std::mt19937_64 rng(seed);
    for (ApiRank& rank : ranks_) {
        rank.y.poison();
        rank.dx.poison();
        rank.d_router_weights.poison();
        poison(rank.d_experts_fresh);
        if (fill_main_grad) {
            fill_random(rank.d_experts_main, rng);
        }
        for (size_t i = 0; i < rank.d_shared_fresh.size(); ++i) {
            poison(rank.d_shared_fresh[i]);
            if (fill_main_grad) {
                fill_random(rank.d_shared_main[i], rng);
            }
        }
    }
}

}  // namespace mok::testing
