#include "layer_data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/bf16.hpp"
#include "parallel.hpp"

namespace mok::run {
namespace {

using Rng = std::mt19937_64;

// Random tensors are filled in parallel from a counter-based generator: element i of the tensor numbered
// `tensor` (in creation order) is a function of (seed, tensor, i) alone, so the values do not depend on the number
// of threads. A full-size layer has billions of weights (DeepSeek-V3 at EP 1: 11 billion), which one sequential
// generator took minutes to draw.
class TensorSource {
  public:
    explicit TensorSource(uint64_t seed) : seed_(seed) {}

    // `count` bf16 values uniform in [-scale, scale).
    std::vector<uint16_t> uniform_bf16(int64_t count, double scale) {
        const uint64_t key = mix(seed_ ^ mix(next_tensor_++));
        std::vector<uint16_t> bits(static_cast<size_t>(count));
        const auto fill = [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                // The top 24 bits of a 64-bit hash: a float in [0, 1) with every value exactly representable.
                const double unit = static_cast<double>(mix(key + static_cast<uint64_t>(i)) >> 40) * 0x1p-24;
                bits[static_cast<size_t>(i)] = round_to_bf16_bits(static_cast<float>((2.0 * unit - 1.0) * scale));
            }
        };
        parallel_ranges(count, kMinChunk, fill);
        return bits;
    }

  private:
    // Elements per thread at least: below that a thread costs more than it saves.
    static constexpr int64_t kMinChunk = int64_t{1} << 20;

    // SplitMix64's finaliser: a bijection of 64-bit words whose outputs pass as independent uniform bits.
    static uint64_t mix(uint64_t z) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    uint64_t seed_;
    uint64_t next_tensor_ = 0;
};

// Weights scaled by 1/sqrt(fan in), as in a trained layer, so that activations stay of order one.
ExpertBuffers random_expert(TensorSource& source, int64_t num_experts, int64_t width, int64_t hidden) {
    const int64_t count = num_experts * width * hidden;
    return {source.uniform_bf16(count, 1.0 / std::sqrt(static_cast<double>(hidden))),
            source.uniform_bf16(count, 1.0 / std::sqrt(static_cast<double>(hidden))),
            source.uniform_bf16(count, 1.0 / std::sqrt(static_cast<double>(width)))};
}

ExpertBuffers zero_grads(int64_t num_experts, int64_t width, int64_t hidden) {
    const auto count = static_cast<size_t>(num_experts * width * hidden);
    return {std::vector<uint16_t>(count), std::vector<uint16_t>(count), std::vector<uint16_t>(count)};
}

// Expert popularity: 1 / (p + 1)^s over a random order p of the experts for zipf, equal otherwise.
std::vector<double> popularity(Rng& rng, const RunOptions& options, int64_t num_experts) {
    std::vector<double> weights(num_experts, 1.0);
    if (options.routing == RoutingKind::kZipf) {
        std::vector<int64_t> order(num_experts);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t e = 0; e < num_experts; ++e) {
            weights[e] = 1.0 / std::pow(static_cast<double>(order[e] + 1), options.zipf_exponent);
        }
    }
    return weights;
}

// Draws `count` distinct experts by weight, zeroing the weight of each one drawn.
void draw_distinct(Rng& rng, std::vector<double>& weights, int64_t count, int32_t* ids) {
    for (int64_t j = 0; j < count; ++j) {
        std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
        ids[j] = pick(rng);
        weights[ids[j]] = 0.0;
    }
}

// One token's k distinct experts: one-expert names expert 0 first, one-rank takes min(k, E/R) of rank 0's
// experts first; the remaining slots are drawn by popularity. Slots come out in random order.
void route_token(Rng& rng, const RunOptions& options, std::vector<double> weights, int64_t num_local_experts,
                 int64_t top_k, int32_t* ids) {
    int64_t first_free = 0;
    if (options.routing == RoutingKind::kOneExpert) {
        ids[first_free++] = 0;
        weights[0] = 0.0;
    } else if (options.routing == RoutingKind::kOneRank) {
        std::vector<double> rank_zero(weights.size(), 0.0);
        std::copy_n(weights.begin(), num_local_experts, rank_zero.begin());
        first_free = std::min(num_local_experts, top_k);
        draw_distinct(rng, rank_zero, first_free, ids);
        for (int64_t j = 0; j < first_free; ++j) {
            weights[ids[j]] = 0.0;
        }
    }
    draw_distinct(rng, weights, top_k - first_free, ids + first_free);
    std::shuffle(ids, ids + top_k, rng);
}

// Expert ids of the routing kind; router weights uniform in (0, 1], normalised per token.
void random_routing(Rng& rng, const LayerShape& shape, int ep_size, const RunOptions& options, RankBuffers* rank) {
    const int64_t k = shape.top_k;
    const std::vector<double> weights = popularity(rng, options, shape.num_experts);
    std::uniform_real_distribution<float> weight(0.0f, 1.0f);
    rank->expert_ids.resize(shape.tokens_per_rank * k);
    rank->router_weights.resize(shape.tokens_per_rank * k);
    for (int64_t t = 0; t < shape.tokens_per_rank; ++t) {
        route_token(rng, options, weights, shape.num_experts / ep_size, k, rank->expert_ids.data() + t * k);
        float* w = rank->router_weights.data() + t * k;
        float total = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
            w[j] = 1.0f - weight(rng);  // in (0, 1]
            total += w[j];
        }
        for (int64_t j = 0; j < k; ++j) {
            w[j] /= total;
        }
    }
}

TensorView view2(std::vector<uint16_t>& data, int64_t rows, int64_t cols) {
    return TensorView::contiguous(data.data(), DType::kBF16, {rows, cols});
}

}  // namespace

LayerData::LayerData(const LayerShape& shape, int ep_size, const RunOptions& options) : shape_(shape) {
    Rng rng(options.seed);  // the routing: small, drawn in order
    TensorSource source(options.seed);
    const int64_t T = shape.tokens_per_rank;
    const int64_t H = shape.hidden;
    const int64_t I = shape.expert_width;
    const int64_t k = shape.top_k;
    const int64_t local = shape.num_experts / ep_size;
    ranks_.resize(ep_size);
    for (RankBuffers& rank : ranks_) {
        rank.x = source.uniform_bf16(T * H, 1.0);
        random_routing(rng, shape, ep_size, options, &rank);
        rank.experts = random_expert(source, local, I, H);
        rank.d_experts = zero_grads(local, I, H);
        for (int64_t width : shape.shared_expert_widths) {
            rank.shared.push_back(random_expert(source, 1, width, H));
            rank.d_shared.push_back(zero_grads(1, width, H));
        }
        rank.dy = source.uniform_bf16(T * H, 1.0);
        rank.y.assign(T * H, 0);
        rank.dx.assign(T * H, 0);
        rank.d_router_weights.assign(T * k, 0.0f);
    }
}

RankInputs LayerData::rank_inputs(RankBuffers& rank) {
    const int64_t T = shape_.tokens_per_rank;
    const int64_t H = shape_.hidden;
    const int64_t I = shape_.expert_width;
    const int64_t k = shape_.top_k;
    const int64_t local = static_cast<int64_t>(rank.experts.gate.size()) / (I * H);
    RankInputs in;
    in.x = view2(rank.x, T, H);
    in.expert_ids = TensorView::contiguous(rank.expert_ids.data(), DType::kI32, {T, k});
    in.router_weights = TensorView::contiguous(rank.router_weights.data(), DType::kF32, {T, k});
    in.experts.gate = TensorView::contiguous(rank.experts.gate.data(), DType::kBF16, {local, I, H});
    in.experts.up = TensorView::contiguous(rank.experts.up.data(), DType::kBF16, {local, I, H});
    in.experts.down = TensorView::contiguous(rank.experts.down.data(), DType::kBF16, {local, H, I});
    for (size_t s = 0; s < rank.shared.size(); ++s) {
        const int64_t width = shape_.shared_expert_widths[s];
        in.shared.push_back({view2(rank.shared[s].gate, width, H), view2(rank.shared[s].up, width, H),
                             view2(rank.shared[s].down, H, width)});
    }
    return in;
}

std::vector<ForwardArgs> LayerData::forward_args() {
    std::vector<ForwardArgs> args;
    for (RankBuffers& rank : ranks_) {
        args.push_back({rank_inputs(rank), view2(rank.y, shape_.tokens_per_rank, shape_.hidden)});
    }
    return args;
}

std::vector<RankInputs> LayerData::inputs() {
    std::vector<RankInputs> inputs;
    for (RankBuffers& rank : ranks_) {
        inputs.push_back(rank_inputs(rank));
    }
    return inputs;
}

std::vector<BackwardArgs> LayerData::backward_args() {
    const int64_t T = shape_.tokens_per_rank;
    const int64_t H = shape_.hidden;
    const int64_t I = shape_.expert_width;
    std::vector<BackwardArgs> args;
    for (RankBuffers& rank : ranks_) {
        BackwardArgs a;
        a.dy = view2(rank.dy, T, H);
        a.dx = view2(rank.dx, T, H);
        a.d_router_weights = TensorView::contiguous(rank.d_router_weights.data(), DType::kF32, {T, shape_.top_k});
        const int64_t local = static_cast<int64_t>(rank.d_experts.gate.size()) / (I * H);
        a.d_experts.gate = TensorView::contiguous(rank.d_experts.gate.data(), DType::kBF16, {local, I, H});
        a.d_experts.up = TensorView::contiguous(rank.d_experts.up.data(), DType::kBF16, {local, I, H});
        a.d_experts.down = TensorView::contiguous(rank.d_experts.down.data(), DType::kBF16, {local, H, I});
        for (size_t s = 0; s < rank.d_shared.size(); ++s) {
            const int64_t width = shape_.shared_expert_widths[s];
            a.d_shared.push_back({view2(rank.d_shared[s].gate, width, H), view2(rank.d_shared[s].up, width, H),
                                  view2(rank.d_shared[s].down, H, width)});
        }
        a.grad_mode = GradMode::kFresh;
        args.push_back(std::move(a));
    }
    return args;
}

}  // namespace mok::run
