#include "comm/transport_problem.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "comm/test_transforms.hpp"
#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"

namespace mok::comm::testing {
namespace {

using Rng = std::mt19937_64;

// Router weights: uniform in [-1, 1], with this fraction exactly zero (a weight the combine must still honour).
constexpr double kZeroWeightFraction = 0.1;

uint16_t random_bf16(Rng& rng) {
    return round_to_bf16_bits(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
}

std::vector<uint16_t> random_rows(Rng& rng, int64_t count) {
    std::vector<uint16_t> rows(count);
    for (auto& v : rows) {
        v = random_bf16(rng);
    }
    return rows;
}

// k distinct experts from `candidates` first (in random order), then from the rest; a forced expert goes first.
void draw_token(Rng& rng, const TransportCase& c, int32_t rank, int32_t* ids) {
    std::vector<int32_t> all(c.num_experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int32_t local = c.num_experts / c.ep_size;
    auto preferred = [&](int32_t e) {
        switch (c.routing) {
            case Routing::kOneExpert:
                return e == c.hot;
            case Routing::kOneRank:
                return e / local == c.hot;
            default:
                return false;
        }
    };
    std::stable_partition(all.begin(), all.end(), preferred);
    std::copy(all.begin(), all.begin() + c.top_k, ids);
    std::shuffle(ids, ids + c.top_k, rng);
    std::bernoulli_distribution unused(c.unused_fraction);
    for (int32_t j = 0; j < c.top_k; ++j) {
        if ((c.routing == Routing::kQuietRank && rank == c.hot) || unused(rng)) {
            ids[j] = plan::kUnusedSlot;
        }
    }
}

}  // namespace

const char* to_string(Routing routing) {
    switch (routing) {
        case Routing::kUniform:
            return "uniform";
        case Routing::kOneExpert:
            return "one-expert";
        case Routing::kOneRank:
            return "one-rank";
        case Routing::kQuietRank:
            return "quiet-rank";
    }
    return "unknown";
}

int64_t TransportCase::capacity() const {
    if (capacity_rows > 0) {
        return capacity_rows;
    }
    return plan::worst_case_rows(ep_size, tokens_per_rank, top_k, num_experts / ep_size);
}

int64_t TransportCase::ring() const {
    return ring_rows > 0 ? ring_rows : capacity();
}

plan::PlanShape TransportCase::plan_shape(int32_t rank) const {
    plan::PlanShape s;
    s.ep_size = ep_size;
    s.rank = rank;
    s.tokens_per_rank = tokens_per_rank;
    s.top_k = top_k;
    s.num_experts = num_experts;
    s.capacity_rows = capacity();
    s.minibatch_rows = plan::kExpertRowAlignment;
    s.ring_rows = ring();
    return s;
}

std::string TransportCase::describe() const {
    std::ostringstream out;
    out << "seed " << seed << ": R " << ep_size << ", T " << tokens_per_rank << ", H " << hidden << ", k " << top_k
        << ", E " << num_experts << ", shared " << num_shared << ", routing " << to_string(routing) << " (hot " << hot
        << "), unused " << unused_fraction << ", capacity " << capacity() << ", ring " << ring();
    return out.str();
}

TransportProblem make_problem(const TransportCase& c) {
    TransportProblem problem{c, {}};
    Rng rng(c.seed);
    const int64_t rows = c.tokens_per_rank * c.hidden;
    for (int32_t r = 0; r < c.ep_size; ++r) {
        RankData d;
        d.expert_ids.resize(c.tokens_per_rank * c.top_k);
        d.router_weights.resize(d.expert_ids.size());
        for (int64_t t = 0; t < c.tokens_per_rank; ++t) {
            draw_token(rng, c, r, d.expert_ids.data() + t * c.top_k);
        }
        std::bernoulli_distribution zero(kZeroWeightFraction);
        for (float& w : d.router_weights) {
            w = zero(rng) ? 0.0f : std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
        }
        d.x = random_rows(rng, rows);
        d.dy = random_rows(rng, rows);
        for (int32_t s = 0; s < c.num_shared; ++s) {
            d.shared_out.push_back(random_rows(rng, rows));
            d.shared_dx.push_back(random_rows(rng, rows));
        }
        problem.ranks.push_back(std::move(d));
    }
    return problem;
}

std::vector<plan::HostPlan> host_plans(const TransportProblem& problem) {
    std::vector<const int32_t*> ids;
    for (const RankData& d : problem.ranks) {
        ids.push_back(d.expert_ids.data());
    }
    std::vector<plan::HostPlan> plans(problem.ranks.size());
    for (int32_t r = 0; r < problem.c.ep_size; ++r) {
        plan::build_host_plan(problem.c.plan_shape(r), ids, &plans[r]);
    }
    return plans;
}

// docs/semantics.md section 6, with the stand-in experts: shared outputs first, then the used slots in order.
std::vector<RankExpectation> expected_results(const TransportProblem& problem) {
    const TransportCase& c = problem.c;
    std::vector<RankExpectation> out(c.ep_size);
    for (int32_t r = 0; r < c.ep_size; ++r) {
        const RankData& d = problem.ranks[r];
        RankExpectation& e = out[r];
        e.y.resize(c.tokens_per_rank * c.hidden);
        e.dx.resize(e.y.size());
        e.d_weights.assign(d.expert_ids.size(), 0.0f);
        for (int64_t t = 0; t < c.tokens_per_rank; ++t) {
            for (int64_t h = 0; h < c.hidden; ++h) {
                const int64_t at = t * c.hidden + h;
                float y = 0.0f;
                float dx = 0.0f;
                for (int32_t s = 0; s < c.num_shared; ++s) {
                    y = fp32::add(y, bf16_bits_to_float(d.shared_out[s][at]));
                    dx = fp32::add(dx, bf16_bits_to_float(d.shared_dx[s][at]));
                }
                for (int32_t j = 0; j < c.top_k; ++j) {
                    const int64_t slot = t * c.top_k + j;
                    const int32_t expert = d.expert_ids[slot];
                    if (expert == plan::kUnusedSlot) {
                        continue;
                    }
                    const float o = bf16_bits_to_float(forward_output(d.x[at], expert));
                    y = fp32::fma(d.router_weights[slot], o, y);
                    dx = fp32::add(dx, bf16_bits_to_float(backward_output(d.dy[at], expert)));
                }
                e.y[at] = round_to_bf16_bits(y);
                e.dx[at] = round_to_bf16_bits(dx);
            }
            for (int32_t j = 0; j < c.top_k; ++j) {
                const int64_t slot = t * c.top_k + j;
                if (d.expert_ids[slot] != plan::kUnusedSlot) {
                    e.d_weights[slot] = weight_grad(d.dy[t * c.hidden], d.expert_ids[slot]);
                }
            }
        }
    }
    return out;
}

std::vector<uint16_t> expected_dispatched_row(const TransportProblem& problem, const plan::HostPlan& plan, int64_t row,
                                              bool grads) {
    const plan::RowSource source = plan.row_source[row];
    if (source.is_padding()) {
        return {};
    }
    const RankData& d = problem.ranks[source.src_rank];
    const int64_t token = source.token_slot / problem.c.top_k;
    const std::vector<uint16_t>& rows = grads ? d.dy : d.x;
    const auto first = rows.begin() + token * problem.c.hidden;
    return std::vector<uint16_t>(first, first + problem.c.hidden);
}

}  // namespace mok::comm::testing
