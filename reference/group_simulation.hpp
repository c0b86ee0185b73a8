// The EP group simulated rank by rank, in one of the two arithmetics (reference/arithmetic.hpp); the body of
// reference::forward and reference::backward.
//
// Each SimRank holds only what that rank holds on the GPU (its inputs, its plan, and as a source the buffers its
// peers push into); an owner reads a peer's x, dy and router weights only through the peer's SimRank (the
// "pull") and writes only into the peer's combine buffers (the "push").
#pragma once

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "reference/expert_ffn.hpp"
#include "reference/reference.hpp"

namespace mok::reference::detail {

// What one rank holds, in the working precision V.
template <typename V>
struct SimRank {
    std::vector<V> x;                                                 // (T, H)
    std::vector<V> router_weights;                                    // (T, k)
    std::vector<V> dy;                                                // (T, H), backward only
    std::vector<V> gate;                                              // (E/R, I, H)
    std::vector<V> up;                                                // (E/R, I, H)
    std::vector<V> down;                                              // (E/R, H, I)
    std::vector<std::vector<V>> shared_gate, shared_up, shared_down;  // per shared expert
    plan::HostPlan plan;
    // As a source: one private row per (token, slot), pushed by the slot's owner. Poisoned with NaN before
    // every pass, so a slot nobody pushed shows up in the combined result.
    std::vector<V> pushed_rows;       // (T * k, H): expert outputs (forward) or dx rows (backward)
    std::vector<V> pushed_d_weights;  // (T * k): router-weight gradients (backward)
};

template <typename A>
std::vector<typename A::Value> to_bf16(const std::vector<double>& values) {
    std::vector<typename A::Value> out(values.size());
    std::transform(values.begin(), values.end(), out.begin(), [](double v) { return A::input_bf16(v); });
    return out;
}

template <typename V>
std::vector<double> to_double(const std::vector<V>& values) {
    return std::vector<double>(values.begin(), values.end());
}

template <typename A>
class GroupSimulation {
  public:
    using V = typename A::Value;

    explicit GroupSimulation(const Problem& problem) : p_(problem), ranks_(problem.ep_size) {
        for (int r = 0; r < p_.ep_size; ++r) {
            const RankInputs& in = p_.ranks[r];
            SimRank<V>& rank = ranks_[r];
            rank.x = to_bf16<A>(in.x);
            rank.router_weights.resize(in.router_weights.size());
            std::transform(in.router_weights.begin(), in.router_weights.end(), rank.router_weights.begin(),
                           [](double v) { return A::input_fp32(v); });
            rank.gate = to_bf16<A>(in.experts.gate);
            rank.up = to_bf16<A>(in.experts.up);
            rank.down = to_bf16<A>(in.experts.down);
            for (const ExpertParams& shared : in.shared) {
                rank.shared_gate.push_back(to_bf16<A>(shared.gate));
                rank.shared_up.push_back(to_bf16<A>(shared.up));
                rank.shared_down.push_back(to_bf16<A>(shared.down));
            }
        }
    }

    // Every rank builds its plan from every rank's ids (the all-gather). False on the first overflowing rank.
    bool build_plans(std::string* error) {
        std::vector<const int32_t*> all_ids(p_.ep_size);
        for (int r = 0; r < p_.ep_size; ++r) {
            all_ids[r] = p_.ranks[r].expert_ids.data();
        }
        for (int r = 0; r < p_.ep_size; ++r) {
            plan::HostPlan& plan = ranks_[r].plan;
            plan::build_host_plan(plan_shape(p_, r), all_ids, &plan);
            if (plan.plan_status() == plan::PlanStatus::kScheduleOverflow) {
                *error = "schedule overflow on rank " + std::to_string(r) + ": its experts need " +
                         std::to_string(plan.padded_rows()) + " padded rows, the schedule capacity is " +
                         std::to_string(plan.shape.capacity_rows) + " rows (Config::schedule_capacity_factor " +
                         std::to_string(p_.config.schedule_capacity_factor) + ")";
                return false;
            }
        }
        return true;
    }

    void forward(std::vector<RankForward>* out) {
        poison_pushed_rows();
        for (int owner = 0; owner < p_.ep_size; ++owner) {
            RowActivations<V> rows = gather_routed_rows(owner, /*with_dy=*/false);
            forward_rows<A>(local_experts(owner), &rows);
            push_routed_rows(rows, owner, /*with_d_weight=*/false);
        }
        out->assign(p_.ep_size, RankForward{});
        for (int r = 0; r < p_.ep_size; ++r) {
            std::vector<std::vector<V>> shared_out;
            for (size_t s = 0; s < p_.shape.shared_expert_widths.size(); ++s) {
                RowActivations<V> rows = own_token_rows(r, s, /*with_dy=*/false);
                forward_rows<A>(shared_expert(r, s), &rows);
                shared_out.push_back(std::move(rows.out));
            }
            (*out)[r].y = to_double(combine(r, shared_out, /*weighted=*/true));
            (*out)[r].plan = ranks_[r].plan;
        }
    }

    void backward(const std::vector<std::vector<double>>& dy, std::vector<RankGrads>* out) {
        for (int r = 0; r < p_.ep_size; ++r) {
            ranks_[r].dy = to_bf16<A>(dy[r]);
        }
        poison_pushed_rows();
        out->assign(p_.ep_size, RankGrads{});
        for (int owner = 0; owner < p_.ep_size; ++owner) {
            RowActivations<V> rows = gather_routed_rows(owner, /*with_dy=*/true);
            backward_rows<A>(local_experts(owner), &rows);
            push_routed_rows(rows, owner, /*with_d_weight=*/true);
            (*out)[owner].d_experts = to_params(weight_grads<A>(local_segments(owner), rows));
        }
        for (int r = 0; r < p_.ep_size; ++r) {
            RankGrads& grads = (*out)[r];
            std::vector<std::vector<V>> shared_dx;
            for (size_t s = 0; s < p_.shape.shared_expert_widths.size(); ++s) {
                RowActivations<V> rows = own_token_rows(r, s, /*with_dy=*/true);
                backward_rows<A>(shared_expert(r, s), &rows);
                const Segment all_tokens{0, p_.shape.tokens_per_rank};
                grads.d_shared.push_back(to_params(weight_grads<A>({&all_tokens, 1}, rows)));
                shared_dx.push_back(std::move(rows.out));
            }
            grads.dx = to_double(combine(r, shared_dx, /*weighted=*/false));
            grads.d_router_weights = collect_d_weights(r);
        }
    }

  private:
    int64_t hidden() const { return p_.shape.hidden; }
    int64_t top_k() const { return p_.shape.top_k; }
    int64_t num_local_experts() const { return p_.shape.num_experts / p_.ep_size; }

    void poison_pushed_rows() {
        const V poison = std::numeric_limits<V>::quiet_NaN();
        for (SimRank<V>& rank : ranks_) {
            rank.pushed_rows.assign(p_.shape.tokens_per_rank * top_k() * hidden(), poison);
            rank.pushed_d_weights.assign(p_.shape.tokens_per_rank * top_k(), poison);
        }
    }

    std::vector<ExpertWeights<V>> local_experts(int owner) const {
        const SimRank<V>& rank = ranks_[owner];
        const int64_t I = p_.shape.expert_width;
        const int64_t matrix = I * hidden();
        std::vector<ExpertWeights<V>> experts;
        for (int64_t l = 0; l < num_local_experts(); ++l) {
            experts.push_back({&rank.gate[l * matrix], &rank.up[l * matrix], &rank.down[l * matrix], I, hidden()});
        }
        return experts;
    }

    std::vector<ExpertWeights<V>> shared_expert(int r, size_t s) const {
        const SimRank<V>& rank = ranks_[r];
        return {{rank.shared_gate[s].data(), rank.shared_up[s].data(), rank.shared_down[s].data(),
                 p_.shape.shared_expert_widths[s], hidden()}};
    }

    // The owner's segments in its row space, local-expert order, each to its padded end.
    std::vector<Segment> local_segments(int owner) const {
        const plan::HostPlan& plan = ranks_[owner].plan;
        std::vector<Segment> segments;
        for (int32_t l = 0; l < num_local_experts(); ++l) {
            const int64_t begin = plan.local_expert_begin(l);
            segments.push_back({begin, begin + plan::round_up(plan.local_expert_rows(l), plan::kExpertRowAlignment)});
        }
        return segments;
    }

    // The owner pulls its rows, in its plan's row order, from the source ranks: x, the router weight and
    // (backward) dy. A row's expert is its M tile's, as the GEMM sees it; padding rows stay -1.
    RowActivations<V> gather_routed_rows(int owner, bool with_dy) const {
        const plan::HostPlan& plan = ranks_[owner].plan;
        RowActivations<V> rows(plan.padded_rows(), hidden(), p_.shape.expert_width);
        for (int64_t row = 0; row < rows.num_rows; ++row) {
            const plan::RowSource source = plan.row_source[row];
            if (source.is_padding()) {
                continue;
            }
            const SimRank<V>& src = ranks_[source.src_rank];
            const int64_t token = source.token_slot / top_k();
            rows.expert[row] = plan.tile_expert[row / plan::kExpertRowAlignment];
            rows.weight[row] = src.router_weights[source.token_slot];
            std::copy_n(&src.x[token * hidden()], hidden(), &rows.x[row * hidden()]);
            if (with_dy) {
                std::copy_n(&src.dy[token * hidden()], hidden(), &rows.dy[row * hidden()]);
            }
        }
        return rows;
    }

    // The owner pushes each row's output (and, backward, its router-weight gradient) into the row's source
    // rank, at (token, slot).
    void push_routed_rows(const RowActivations<V>& rows, int owner, bool with_d_weight) {
        const plan::HostPlan& plan = ranks_[owner].plan;
        for (int64_t row = 0; row < rows.num_rows; ++row) {
            const plan::RowSource source = plan.row_source[row];
            if (source.is_padding()) {
                continue;
            }
            SimRank<V>& dst = ranks_[source.src_rank];
            std::copy_n(&rows.out[row * hidden()], hidden(), &dst.pushed_rows[source.token_slot * hidden()]);
            if (with_d_weight) {
                dst.pushed_d_weights[source.token_slot] = rows.d_weight[row];
            }
        }
    }

    // Rank r's own tokens as the rows of shared expert s, router weight 1.
    RowActivations<V> own_token_rows(int r, size_t s, bool with_dy) const {
        const SimRank<V>& rank = ranks_[r];
        RowActivations<V> rows(p_.shape.tokens_per_rank, hidden(), p_.shape.shared_expert_widths[s]);
        std::fill(rows.expert.begin(), rows.expert.end(), 0);
        std::fill(rows.weight.begin(), rows.weight.end(), V{1});
        rows.x = rank.x;
        if (with_dy) {
            rows.dy = rank.dy;
        }
        return rows;
    }

    // The source's fixed-order combine (docs/semantics.md, section 6): shared experts in order, then the used
    // slots 0..k-1, weighted by the router weight (forward) or not (backward, dx); one bf16 rounding.
    std::vector<V> combine(int r, const std::vector<std::vector<V>>& shared_rows, bool weighted) const {
        const SimRank<V>& rank = ranks_[r];
        const std::vector<int32_t>& ids = p_.ranks[r].expert_ids;
        const int64_t T = p_.shape.tokens_per_rank;
        std::vector<V> out(T * hidden());
        parallel_for(T, [&](int64_t t) {
            for (int64_t c = 0; c < hidden(); ++c) {
                V acc = 0;
                for (const std::vector<V>& shared : shared_rows) {
                    acc = A::add(acc, shared[t * hidden() + c]);
                }
                for (int64_t j = 0; j < top_k(); ++j) {
                    const int64_t slot = t * top_k() + j;
                    if (ids[slot] == plan::kUnusedSlot) {
                        continue;
                    }
                    const V row_value = rank.pushed_rows[slot * hidden() + c];
                    acc = weighted ? A::madd(rank.router_weights[slot], row_value, acc) : A::add(acc, row_value);
                }
                out[t * hidden() + c] = A::store_bf16(acc);
            }
        });
        return out;
    }

    std::vector<double> collect_d_weights(int r) const {
        const std::vector<int32_t>& ids = p_.ranks[r].expert_ids;
        std::vector<double> out(ids.size(), 0.0);
        for (size_t slot = 0; slot < ids.size(); ++slot) {
            if (ids[slot] != plan::kUnusedSlot) {
                out[slot] = ranks_[r].pushed_d_weights[slot];
            }
        }
        return out;
    }

    static ExpertParams to_params(const ExpertGrads<V>& grads) {
        return {to_double(grads.gate), to_double(grads.up), to_double(grads.down)};
    }

    const Problem& p_;
    std::vector<SimRank<V>> ranks_;
};

}  // namespace mok::reference::detail
