#include "reference/direct_formula.hpp"

#include <cmath>

namespace mok::testing {

using reference::ExpertParams;
using reference::Problem;
using reference::RankGrads;
using reference::RankInputs;
namespace {

// One expert's weights: gate and up [width, H], down [H, width], starting at `first` of each tensor.
struct Expert {
    const double* gate;
    const double* up;
    const double* down;
    int64_t width;
};

struct ExpertGradView {
    double* gate;
    double* up;
    double* down;
};

double sigmoid(double g) {
    return 1.0 / (1.0 + std::exp(-g));
}

// Adds weight * FFN(x) to y, and the backward of that term: dx, dW (scaled by `weight`), and returns
// d weight = <dy, FFN(x)>.
double apply_expert(const Expert& e, int64_t hidden, const double* x, const double* dy, double weight, double* y,
                    double* dx, const ExpertGradView& grads) {
    std::vector<double> g(e.width);
    std::vector<double> u(e.width);
    std::vector<double> h(e.width);
    for (int64_t i = 0; i < e.width; ++i) {
        g[i] = 0.0;
        u[i] = 0.0;
        for (int64_t c = 0; c < hidden; ++c) {
            g[i] += e.gate[i * hidden + c] * x[c];
            u[i] += e.up[i * hidden + c] * x[c];
        }
        h[i] = g[i] * sigmoid(g[i]) * u[i];
    }
    double d_weight = 0.0;
    std::vector<double> dh(e.width, 0.0);
    for (int64_t c = 0; c < hidden; ++c) {
        double o = 0.0;
        for (int64_t i = 0; i < e.width; ++i) {
            o += e.down[c * e.width + i] * h[i];
            dh[i] += weight * e.down[c * e.width + i] * dy[c];
            grads.down[c * e.width + i] += weight * dy[c] * h[i];
        }
        y[c] += weight * o;
        d_weight += dy[c] * o;
    }
    for (int64_t i = 0; i < e.width; ++i) {
        const double s = sigmoid(g[i]);
        const double dg = dh[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
        const double du = dh[i] * g[i] * s;
        for (int64_t c = 0; c < hidden; ++c) {
            dx[c] += dg * e.gate[i * hidden + c] + du * e.up[i * hidden + c];
            grads.gate[i * hidden + c] += dg * x[c];
            grads.up[i * hidden + c] += du * x[c];
        }
    }
    return d_weight;
}

ExpertParams zeros_like(const ExpertParams& p) {
    return {std::vector<double>(p.gate.size(), 0.0), std::vector<double>(p.up.size(), 0.0),
            std::vector<double>(p.down.size(), 0.0)};
}

}  // namespace

DirectResult direct_formula(const Problem& problem, const std::vector<std::vector<double>>& dy) {
    const LayerShape& s = problem.shape;
    const int64_t H = s.hidden;
    const int64_t I = s.expert_width;
    const int64_t num_local = s.num_experts / problem.ep_size;
    DirectResult out;
    out.y.assign(problem.ep_size, std::vector<double>(s.tokens_per_rank * H, 0.0));
    out.grads.resize(problem.ep_size);
    for (int r = 0; r < problem.ep_size; ++r) {
        RankGrads& g = out.grads[r];
        g.dx.assign(s.tokens_per_rank * H, 0.0);
        g.d_router_weights.assign(s.tokens_per_rank * s.top_k, 0.0);
        g.d_experts = zeros_like(problem.ranks[r].experts);
        for (const ExpertParams& shared : problem.ranks[r].shared) {
            g.d_shared.push_back(zeros_like(shared));
        }
    }
    for (int r = 0; r < problem.ep_size; ++r) {
        const RankInputs& in = problem.ranks[r];
        for (int64_t t = 0; t < s.tokens_per_rank; ++t) {
            const double* x = &in.x[t * H];
            const double* dy_t = &dy[r][t * H];
            double* y = &out.y[r][t * H];
            double* dx = &out.grads[r].dx[t * H];
            for (size_t e = 0; e < in.shared.size(); ++e) {
                const ExpertParams& w = in.shared[e];
                ExpertParams& d = out.grads[r].d_shared[e];
                apply_expert({w.gate.data(), w.up.data(), w.down.data(), s.shared_expert_widths[e]}, H, x, dy_t, 1.0, y,
                             dx, {d.gate.data(), d.up.data(), d.down.data()});
            }
            for (int64_t j = 0; j < s.top_k; ++j) {
                const int64_t slot = t * s.top_k + j;
                const int32_t id = in.expert_ids[slot];
                if (id < 0) {
                    continue;
                }
                const int owner = static_cast<int>(id / num_local);
                const int64_t local = id % num_local;
                const ExpertParams& w = problem.ranks[owner].experts;
                ExpertParams& d = out.grads[owner].d_experts;
                const Expert expert{&w.gate[local * I * H], &w.up[local * I * H], &w.down[local * H * I], I};
                out.grads[r].d_router_weights[slot] =
                    apply_expert(expert, H, x, dy_t, in.router_weights[slot], y, dx,
                                 {&d.gate[local * I * H], &d.up[local * I * H], &d.down[local * H * I]});
            }
        }
    }
    return out;
}

}  // namespace mok::testing
