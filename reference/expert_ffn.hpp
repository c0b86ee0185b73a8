// One expert's SwiGLU FFN on a set of rows, forward and backward, in one of the two arithmetics
// (reference/arithmetic.hpp). Routed and shared experts both run through here; a shared expert's rows carry
// router weight 1.
//
// Orders (docs/semantics.md, section 6): every GEMM output element is one sequential sum in index order --
// over H for g, u and dh', over I for o and the router-weight gradient, over 2I (all of the gate half, then
// all of the up half) for a dx row -- and every weight-gradient element is one sequential sum over the
// expert's rows in the order given, which the caller makes the canonical order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/parallel.hpp"

namespace mok::reference::detail {

// One expert's weights in the working precision.
template <typename V>
struct ExpertWeights {
    const V* gate;  // (width, H)
    const V* up;    // (width, H)
    const V* down;  // (H, width)
    int64_t width;  // I or I_s
    int64_t hidden;
};

// The activations of a set of rows of one width: an owner's whole row space (all its local experts have
// width I) or one rank's tokens for a shared expert. A row whose expert is -1 is padding and never touched.
template <typename V>
struct RowActivations {
    int64_t num_rows = 0;
    int64_t hidden = 0;
    int64_t width = 0;
    std::vector<int32_t> expert;  // (rows)         expert of the row, an index into the caller's weights; -1 = padding
    std::vector<V> x;             // (rows, H)      gathered input rows
    std::vector<V> weight;        // (rows)         router weight; 1 for a shared expert
    std::vector<V> dy;            // (rows, H)      gathered output gradients (backward)
    std::vector<V> g;             // (rows, width)  gate pre-activation, stored (bf16 in kDevice)
    std::vector<V> u;             // (rows, width)  up pre-activation, stored
    std::vector<V> h;             // (rows, width)  swiglu(g, u), stored
    std::vector<V> dg;            // (rows, width)  backward, stored
    std::vector<V> du;            // (rows, width)  backward, stored
    std::vector<V> dy_scaled;     // (rows, H)      weight * dy, stored (backward)
    std::vector<V> out;           // (rows, H)      the expert output o (forward) or the row's dx (backward)
    std::vector<V> d_weight;      // (rows)         router-weight gradient (backward)

    RowActivations(int64_t rows, int64_t hidden_size, int64_t expert_width)
        : num_rows(rows),
          hidden(hidden_size),
          width(expert_width),
          expert(rows, -1),
          x(rows * hidden_size),
          weight(rows),
          dy(rows * hidden_size),
          g(rows * expert_width),
          u(rows * expert_width),
          h(rows * expert_width),
          dg(rows * expert_width),
          du(rows * expert_width),
          dy_scaled(rows * hidden_size),
          out(rows * hidden_size),
          d_weight(rows) {}
};

// g = W_g x, u = W_u x and h = swiglu(g, u) of row `row`, each stored.
template <typename A>
void gate_up_row(const ExpertWeights<typename A::Value>& w, int64_t row, RowActivations<typename A::Value>* a) {
    using V = typename A::Value;
    const V* x = &a->x[row * w.hidden];
    for (int64_t i = 0; i < w.width; ++i) {
        V g = 0;
        V u = 0;
        for (int64_t k = 0; k < w.hidden; ++k) {
            g = A::madd(w.gate[i * w.hidden + k], x[k], g);
            u = A::madd(w.up[i * w.hidden + k], x[k], u);
        }
        const int64_t at = row * w.width + i;
        a->g[at] = A::store_bf16(g);
        a->u[at] = A::store_bf16(u);
        a->h[at] = A::store_bf16(A::swiglu_forward(a->g[at], a->u[at]));
    }
}

// o = W_d h of row `row`, stored into out.
template <typename A>
void down_row(const ExpertWeights<typename A::Value>& w, int64_t row, RowActivations<typename A::Value>* a) {
    using V = typename A::Value;
    const V* h = &a->h[row * w.width];
    for (int64_t k = 0; k < w.hidden; ++k) {
        V o = 0;
        for (int64_t i = 0; i < w.width; ++i) {
            o = A::madd(w.down[k * w.width + i], h[i], o);
        }
        a->out[row * w.hidden + k] = A::store_bf16(o);
    }
}

// The router-weight gradient's dot product <dh', h> over a row's `width` columns, in the contract's order
// (docs/semantics.md, section 6): per tile of 256 columns, each column pair p of a group of eight (columns
// a = 8 i + 2 p and a + 1) gives the leaf madd(dh'_{a+1}, h_{a+1}, madd(dh'_a, h_a, 0)); a block of four groups
// adds a pair's leaves as (0 + 1) + (2 + 3); the tile's eight blocks add in order; its four pairs as (0 + 1) + (2 + 3);
// the tiles' sums add in order from 0. A pair past `width` (a multiple of 8, so a pair is all in or all out) is a
// leaf of +0, as on the GPU, whose zero-filled columns give fma(0, 0, fma(0, 0, 0)).
template <typename A>
typename A::Value router_weight_dot(const typename A::Value* dh, const typename A::Value* h, int64_t width) {
    using V = typename A::Value;
    constexpr int64_t kTileCols = 256;
    constexpr int64_t kGroupCols = 8;
    constexpr int kPairs = 4;
    constexpr int kBlockGroups = 4;
    constexpr int64_t kBlocks = kTileCols / (kGroupCols * kBlockGroups);
    V total = 0;
    for (int64_t tile = 0; tile * kTileCols < width; ++tile) {
        V pair_sum[kPairs];
        for (int p = 0; p < kPairs; ++p) {
            for (int64_t block = 0; block < kBlocks; ++block) {
                V leaf[kBlockGroups];
                for (int i = 0; i < kBlockGroups; ++i) {
                    const int64_t a = tile * kTileCols + (block * kBlockGroups + i) * kGroupCols + 2 * p;
                    leaf[i] = a < width ? A::madd(dh[a + 1], h[a + 1], A::madd(dh[a], h[a], V{0})) : V{0};
                }
                const V sum = A::add(A::add(leaf[0], leaf[1]), A::add(leaf[2], leaf[3]));
                pair_sum[p] = block == 0 ? sum : A::add(pair_sum[p], sum);
            }
        }
        total = A::add(total, A::add(A::add(pair_sum[0], pair_sum[1]), A::add(pair_sum[2], pair_sum[3])));
    }
    return total;
}

// Backward of row `row` from its dy and router weight, after gate_up_row: the router-weight gradient
// <W_d^T dy, h>, (dg, du), weight * dy, and the row's dx = W_g^T dg + W_u^T du into out.
template <typename A>
void backward_row(const ExpertWeights<typename A::Value>& w, int64_t row, RowActivations<typename A::Value>* a) {
    using V = typename A::Value;
    const V* dy = &a->dy[row * w.hidden];
    const V weight = a->weight[row];
    std::vector<V> dh_unscaled(w.width);  // dh' = W_d^T dy, rounded to bf16 but never stored
    for (int64_t i = 0; i < w.width; ++i) {
        V dot = 0;
        for (int64_t k = 0; k < w.hidden; ++k) {
            dot = A::madd(w.down[k * w.width + i], dy[k], dot);
        }
        dh_unscaled[i] = A::store_bf16(dot);
        const int64_t at = row * w.width + i;
        const auto grads = A::swiglu_backward(a->g[at], a->u[at], A::mul(weight, dh_unscaled[i]));
        a->dg[at] = A::store_bf16(grads.dg);
        a->du[at] = A::store_bf16(grads.du);
    }
    a->d_weight[row] = router_weight_dot<A>(dh_unscaled.data(), &a->h[row * w.width], w.width);
    const V* dg = &a->dg[row * w.width];
    const V* du = &a->du[row * w.width];
    for (int64_t k = 0; k < w.hidden; ++k) {
        a->dy_scaled[row * w.hidden + k] = A::store_bf16(A::mul(weight, dy[k]));
        V dx = 0;
        for (int64_t i = 0; i < w.width; ++i) {
            dx = A::madd(dg[i], w.gate[i * w.hidden + k], dx);
        }
        for (int64_t i = 0; i < w.width; ++i) {
            dx = A::madd(du[i], w.up[i * w.hidden + k], dx);
        }
        a->out[row * w.hidden + k] = A::store_bf16(dx);
    }
}

// Forward of every non-padding row, each with its own expert's weights.
template <typename A>
void forward_rows(std::span<const ExpertWeights<typename A::Value>> experts, RowActivations<typename A::Value>* a) {
    parallel_for(a->num_rows, [&](int64_t row) {
        if (a->expert[row] >= 0) {
            gate_up_row<A>(experts[a->expert[row]], row, a);
            down_row<A>(experts[a->expert[row]], row, a);
        }
    });
}

// Backward of every non-padding row (the forward's g, u, h are recomputed first, as the GPU's backward does
// for rows whose forward activations it did not keep; the values are the same either way).
template <typename A>
void backward_rows(std::span<const ExpertWeights<typename A::Value>> experts, RowActivations<typename A::Value>* a) {
    parallel_for(a->num_rows, [&](int64_t row) {
        if (a->expert[row] >= 0) {
            gate_up_row<A>(experts[a->expert[row]], row, a);
            backward_row<A>(experts[a->expert[row]], row, a);
        }
    });
}

// Weight gradients of n experts of one width in the working precision: gate and up (n, width, H), down
// (n, H, width).
template <typename V>
struct ExpertGrads {
    std::vector<V> gate;
    std::vector<V> up;
    std::vector<V> down;
};

// A run of rows [begin, end) of RowActivations holding one expert's rows in canonical order (padding rows
// inside it are skipped).
struct Segment {
    int64_t begin;
    int64_t end;
};

// Every expert's weight gradients: expert e's element is one sequential sum over segments[e]'s rows in order.
// One item per output row of one weight-gradient matrix, so each element has exactly one writer.
template <typename A>
ExpertGrads<typename A::Value> weight_grads(std::span<const Segment> segments,
                                            const RowActivations<typename A::Value>& a) {
    using V = typename A::Value;
    const int64_t num_experts = static_cast<int64_t>(segments.size());
    const int64_t hidden = a.hidden;
    const int64_t width = a.width;
    ExpertGrads<V> grads{std::vector<V>(num_experts * width * hidden, V{0}),
                         std::vector<V>(num_experts * width * hidden, V{0}),
                         std::vector<V>(num_experts * hidden * width, V{0})};
    // Items per expert: width rows of dW_gate, width rows of dW_up, H rows of dW_down.
    const int64_t items_per_expert = 2 * width + hidden;
    parallel_for(num_experts * items_per_expert, [&](int64_t item) {
        const int64_t e = item / items_per_expert;
        const int64_t local = item % items_per_expert;
        for (int64_t row = segments[e].begin; row < segments[e].end; ++row) {
            if (a.expert[row] < 0) {
                continue;
            }
            if (local < 2 * width) {
                // dW_gate[i, :] += dg[i] x^T, dW_up[i, :] += du[i] x^T
                const bool is_gate = local < width;
                const int64_t i = is_gate ? local : local - width;
                const V d = is_gate ? a.dg[row * width + i] : a.du[row * width + i];
                V* out = (is_gate ? grads.gate.data() : grads.up.data()) + (e * width + i) * hidden;
                for (int64_t k = 0; k < hidden; ++k) {
                    out[k] = A::madd(d, a.x[row * hidden + k], out[k]);
                }
            } else {
                // dW_down[k, :] += (weight dy)[k] h^T
                const int64_t k = local - 2 * width;
                const V d = a.dy_scaled[row * hidden + k];
                V* out = grads.down.data() + (e * hidden + k) * width;
                for (int64_t i = 0; i < width; ++i) {
                    out[i] = A::madd(d, a.h[row * width + i], out[i]);
                }
            }
        }
    });
    return grads;
}

}  // namespace mok::reference::detail
