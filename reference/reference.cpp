// The reference's entry points: input checks, the plan shape, the precision dispatch, and partition().
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "reference/arithmetic.hpp"
#include "reference/group_simulation.hpp"

namespace mok::reference {
namespace {

// Checks the sizes of every tensor against the shape and the routing of every token; a Problem that fails
// here would make the plan index out of range.
bool check_problem(const Problem& p, std::string* error) {
    const LayerShape& s = p.shape;
    const auto fail = [&](const std::string& what) {
        *error = what;
        return false;
    };
    if (p.ep_size < 1 || static_cast<int64_t>(p.ranks.size()) != p.ep_size) {
        return fail("ranks: expected ep_size (" + std::to_string(p.ep_size) + ") entries, got " +
                    std::to_string(p.ranks.size()));
    }
    if (s.tokens_per_rank < 1 || s.hidden < 1 || s.expert_width < 1 || s.num_experts < 1 || s.top_k < 1 ||
        s.top_k > s.num_experts || s.num_experts % p.ep_size != 0) {
        return fail("shape: expected T, H, I >= 1, 1 <= k <= E and E a multiple of ep_size");
    }
    const int64_t num_local = s.num_experts / p.ep_size;
    const int64_t T = s.tokens_per_rank;
    const int64_t H = s.hidden;
    const int64_t I = s.expert_width;
    for (int r = 0; r < p.ep_size; ++r) {
        const RankInputs& in = p.ranks[r];
        const std::string where = "ranks[" + std::to_string(r) + "].";
        if (static_cast<int64_t>(in.x.size()) != T * H || static_cast<int64_t>(in.expert_ids.size()) != T * s.top_k ||
            static_cast<int64_t>(in.router_weights.size()) != T * s.top_k) {
            return fail(where + "x, expert_ids, router_weights: expected [T, H], [T, k], [T, k]");
        }
        if (static_cast<int64_t>(in.experts.gate.size()) != num_local * I * H ||
            static_cast<int64_t>(in.experts.up.size()) != num_local * I * H ||
            static_cast<int64_t>(in.experts.down.size()) != num_local * H * I) {
            return fail(where + "experts: expected [E/R, I, H] gate and up, [E/R, H, I] down");
        }
        if (in.shared.size() != s.shared_expert_widths.size()) {
            return fail(where + "shared: expected one entry per shape.shared_expert_widths entry");
        }
        for (size_t e = 0; e < in.shared.size(); ++e) {
            const int64_t n = s.shared_expert_widths[e] * H;
            if (static_cast<int64_t>(in.shared[e].gate.size()) != n ||
                static_cast<int64_t>(in.shared[e].up.size()) != n ||
                static_cast<int64_t>(in.shared[e].down.size()) != n) {
                return fail(where + "shared[" + std::to_string(e) + "]: expected [I_s, H] gate and up, [H, I_s] down");
            }
        }
        std::vector<float> weights(s.top_k);
        for (int64_t t = 0; t < T; ++t) {
            const int64_t first = t * s.top_k;
            for (int64_t j = 0; j < s.top_k; ++j) {
                weights[j] = static_cast<float>(in.router_weights[first + j]);
            }
            const plan::TokenCheckResult check =
                plan::check_token(&in.expert_ids[first], weights.data(), static_cast<int32_t>(s.top_k),
                                  static_cast<int32_t>(s.num_experts));
            if (check.check != plan::TokenCheck::kOk) {
                return fail(where + "expert_ids / router_weights: token " + std::to_string(t) + " slot " +
                            std::to_string(check.slot) +
                            " has an id out of [-1, E), a repeated id, or a non-finite weight");
            }
        }
    }
    return true;
}

template <typename A>
bool run_forward(const Problem& problem, std::vector<RankForward>* out, std::string* error) {
    detail::GroupSimulation<A> group(problem);
    if (!group.build_plans(error)) {
        return false;
    }
    group.forward(out);
    return true;
}

template <typename A>
bool run_backward(const Problem& problem, const std::vector<std::vector<double>>& dy, std::vector<RankGrads>* out,
                  std::string* error) {
    detail::GroupSimulation<A> group(problem);
    if (!group.build_plans(error)) {
        return false;
    }
    group.backward(dy, out);
    return true;
}

}  // namespace

plan::PlanShape plan_shape(const Problem& problem, int rank) {
    const LayerShape& s = problem.shape;
    plan::PlanShape shape;
    shape.ep_size = problem.ep_size;
    shape.rank = rank;
    shape.tokens_per_rank = s.tokens_per_rank;
    shape.top_k = static_cast<int32_t>(s.top_k);
    shape.num_experts = static_cast<int32_t>(s.num_experts);
    shape.capacity_rows =
        plan::schedule_capacity_rows(shape.ep_size, shape.tokens_per_rank, shape.top_k, shape.num_local_experts(),
                                     problem.config.schedule_capacity_factor);
    shape.minibatch_rows = problem.config.minibatch_rows;
    shape.ring_rows = problem.config.ring_rows;
    return shape;
}

bool forward(const Problem& problem, Precision precision, std::vector<RankForward>* out, std::string* error) {
    if (!check_problem(problem, error)) {
        return false;
    }
    return precision == Precision::kOracle ? run_forward<detail::OracleArithmetic>(problem, out, error)
                                           : run_forward<detail::DeviceArithmetic>(problem, out, error);
}

bool backward(const Problem& problem, const std::vector<std::vector<double>>& dy, Precision precision,
              std::vector<RankGrads>* out, std::string* error) {
    if (!check_problem(problem, error)) {
        return false;
    }
    const int64_t rows = problem.shape.tokens_per_rank * problem.shape.hidden;
    if (static_cast<int64_t>(dy.size()) != problem.ep_size ||
        std::any_of(dy.begin(), dy.end(),
                    [&](const std::vector<double>& d) { return static_cast<int64_t>(d.size()) != rows; })) {
        *error = "dy: expected ep_size tensors of [T, H]";
        return false;
    }
    return precision == Precision::kOracle ? run_backward<detail::OracleArithmetic>(problem, dy, out, error)
                                           : run_backward<detail::DeviceArithmetic>(problem, dy, out, error);
}

Problem partition(const GlobalBatch& batch, int ep_size, const Config& config) {
    const LayerShape& s = batch.shape;
    if (ep_size < 1 || batch.num_tokens % ep_size != 0 || s.num_experts % ep_size != 0) {
        throw std::invalid_argument("partition: ep_size must divide the token count and the expert count");
    }
    Problem problem;
    problem.shape = s;
    problem.shape.tokens_per_rank = batch.num_tokens / ep_size;
    problem.config = config;
    problem.ep_size = ep_size;
    const int64_t T = problem.shape.tokens_per_rank;
    const int64_t H = s.hidden;
    const int64_t k = s.top_k;
    const int64_t expert_matrix = s.expert_width * H;
    const int64_t experts_per_rank = s.num_experts / ep_size;
    const auto slice = [](const std::vector<double>& v, int64_t begin, int64_t count) {
        return std::vector<double>(v.begin() + begin, v.begin() + begin + count);
    };
    for (int r = 0; r < ep_size; ++r) {
        RankInputs rank;
        rank.x = slice(batch.x, r * T * H, T * H);
        rank.expert_ids.assign(batch.expert_ids.begin() + r * T * k, batch.expert_ids.begin() + (r + 1) * T * k);
        rank.router_weights = slice(batch.router_weights, r * T * k, T * k);
        const int64_t first = r * experts_per_rank * expert_matrix;
        const int64_t count = experts_per_rank * expert_matrix;
        rank.experts = {slice(batch.experts.gate, first, count), slice(batch.experts.up, first, count),
                        slice(batch.experts.down, first, count)};
        rank.shared = batch.shared;
        problem.ranks.push_back(std::move(rank));
    }
    return problem;
}

}  // namespace mok::reference
