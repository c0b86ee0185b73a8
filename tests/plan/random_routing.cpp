#include "plan/random_routing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

namespace mok::plan::testing {
namespace {

// Bounds of the drawn shapes. Eight ranks and eight slots cover the EP degrees and top-k of the model presets;
// a few local experts per rank exercise several segments per owner.
constexpr int32_t kMaxRanks = 8;
constexpr int32_t kMaxLocalExperts = 5;
constexpr int32_t kMaxTopK = 8;
// Minibatches of 1..4 row tiles and rings of 1..4 minibatches: small enough that a few hundred rows cross
// several minibatch and lap boundaries.
constexpr int64_t kRowTile = 128;
constexpr int64_t kMaxMinibatchTiles = 4;
constexpr int64_t kMaxRingMinibatches = 4;
// Zipf exponents between mild and steep skew.
constexpr double kMinZipfExponent = 0.5;
constexpr double kMaxZipfExponent = 2.5;
// A few more experts than slots: most experts then get no rows at all.
constexpr int32_t kMaxExtraFewExperts = 2;
// Popularity of the experts that fill a one-rank token's slots past the hot rank's experts: small enough that
// a draw takes every hot expert first.
constexpr double kFillWeight = 1e-9;

using Rng = std::mt19937_64;

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Expert popularity for one skew; zero means "never chosen". At least k experts are positive.
std::vector<double> expert_weights(Rng& rng, const RoutingCase& c) {
    const int32_t num_experts = c.num_experts;
    std::vector<double> weights(num_experts, 1.0);
    switch (c.skew) {
        case Skew::kUniform:
        case Skew::kOneExpert:
            break;
        case Skew::kZipf: {
            const double s = std::uniform_real_distribution<double>(kMinZipfExponent, kMaxZipfExponent)(rng);
            std::vector<int32_t> popularity(num_experts);
            std::iota(popularity.begin(), popularity.end(), 0);
            std::shuffle(popularity.begin(), popularity.end(), rng);
            for (int32_t e = 0; e < num_experts; ++e) {
                weights[e] = 1.0 / std::pow(popularity[e] + 1.0, s);
            }
            break;
        }
        case Skew::kOneRank: {
            const int32_t hot = static_cast<int32_t>(uniform_int(rng, 0, c.ep_size - 1));
            const int32_t local = c.num_local_experts();
            std::fill(weights.begin(), weights.end(), 0.0);
            for (int32_t l = 0; l < local; ++l) {
                weights[hot * local + l] = 1.0;
            }
            // Tokens need k distinct experts: the ones after the hot rank's fill the rest.
            for (int32_t i = 0; i < c.top_k - local; ++i) {
                weights[((hot + 1) * local + i) % num_experts] = kFillWeight;
            }
            break;
        }
        case Skew::kFewExperts: {
            const int32_t extra = static_cast<int32_t>(uniform_int(rng, 0, kMaxExtraFewExperts));
            const int32_t num_chosen = std::min(num_experts, c.top_k + extra);
            std::vector<int32_t> order(num_experts);
            std::iota(order.begin(), order.end(), 0);
            std::shuffle(order.begin(), order.end(), rng);
            std::fill(weights.begin(), weights.end(), 0.0);
            for (int32_t i = 0; i < num_chosen; ++i) {
                weights[order[i]] = 1.0;
            }
            break;
        }
    }
    return weights;
}

// k distinct experts drawn by weight without replacement, in draw order (which is random slot order).
void draw_token(Rng& rng, std::vector<double> weights, int32_t forced_expert, int32_t top_k, double unused_fraction,
                int32_t* ids) {
    int32_t first = 0;
    if (forced_expert >= 0) {
        ids[0] = forced_expert;
        weights[forced_expert] = 0.0;
        first = 1;
    }
    for (int32_t j = first; j < top_k; ++j) {
        std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
        ids[j] = pick(rng);
        weights[ids[j]] = 0.0;
    }
    std::shuffle(ids, ids + top_k, rng);
    std::bernoulli_distribution unused(unused_fraction);
    for (int32_t j = 0; j < top_k; ++j) {
        if (unused(rng)) {
            ids[j] = -1;
        }
    }
}

void draw_ids(Rng& rng, RoutingCase* c) {
    const std::vector<double> weights = expert_weights(rng, *c);
    const int32_t forced =
        c->skew == Skew::kOneExpert ? static_cast<int32_t>(uniform_int(rng, 0, c->num_experts - 1)) : -1;
    c->ids.assign(c->ep_size, std::vector<int32_t>(c->tokens_per_rank * c->top_k));
    for (auto& rank_ids : c->ids) {
        for (int64_t t = 0; t < c->tokens_per_rank; ++t) {
            draw_token(rng, weights, forced, c->top_k, c->unused_fraction, rank_ids.data() + t * c->top_k);
        }
    }
}

void draw_ring(Rng& rng, RoutingCase* c) {
    c->minibatch_rows = kRowTile * uniform_int(rng, 1, kMaxMinibatchTiles);
    c->ring_rows = c->minibatch_rows * uniform_int(rng, 1, kMaxRingMinibatches);
}

}  // namespace

const char* to_string(Skew skew) {
    switch (skew) {
        case Skew::kUniform:
            return "uniform";
        case Skew::kZipf:
            return "zipf";
        case Skew::kOneExpert:
            return "one-expert";
        case Skew::kOneRank:
            return "one-rank";
        case Skew::kFewExperts:
            return "few-experts";
    }
    return "unknown";
}

std::vector<const int32_t*> RoutingCase::id_pointers() const {
    std::vector<const int32_t*> pointers;
    for (const auto& rank_ids : ids) {
        pointers.push_back(rank_ids.data());
    }
    return pointers;
}

std::string RoutingCase::describe() const {
    char buffer[200];
    std::snprintf(buffer, sizeof(buffer),
                  "case seed %llu: R %d, E %d, k %d, T %lld, skew %s, unused %.2f, minibatch %lld, ring %lld",
                  static_cast<unsigned long long>(seed), ep_size, num_experts, top_k,
                  static_cast<long long>(tokens_per_rank), to_string(skew), unused_fraction,
                  static_cast<long long>(minibatch_rows), static_cast<long long>(ring_rows));
    return buffer;
}

RoutingCase random_routing_case(uint64_t seed, int64_t min_tokens, int64_t max_tokens) {
    Rng rng(seed);
    RoutingCase c;
    c.seed = seed;
    c.ep_size = static_cast<int32_t>(uniform_int(rng, 1, kMaxRanks));
    c.num_experts = c.ep_size * static_cast<int32_t>(uniform_int(rng, 1, kMaxLocalExperts));
    c.top_k = static_cast<int32_t>(uniform_int(rng, 1, std::min(c.num_experts, kMaxTopK)));
    c.tokens_per_rank = uniform_int(rng, min_tokens, max_tokens);
    c.skew = static_cast<Skew>(uniform_int(rng, 0, static_cast<int64_t>(Skew::kFewExperts)));
    // Fully used routings twice as often as each of the others; 1.0 gives ranks that send nothing at all.
    constexpr double kUnusedFractions[] = {0.0, 0.0, 0.1, 0.5, 1.0};
    c.unused_fraction = kUnusedFractions[uniform_int(rng, 0, std::size(kUnusedFractions) - 1)];
    draw_ring(rng, &c);
    draw_ids(rng, &c);
    return c;
}

RoutingCase all_to_one_rank_case(uint64_t seed, int32_t ep_size, int32_t num_local_experts, int32_t top_k,
                                 int64_t tokens_per_rank, int32_t hot_rank) {
    Rng rng(seed);
    RoutingCase c;
    c.seed = seed;
    c.skew = Skew::kOneRank;
    c.ep_size = ep_size;
    c.num_experts = ep_size * num_local_experts;
    c.top_k = top_k;
    c.tokens_per_rank = tokens_per_rank;
    draw_ring(rng, &c);
    // The hot rank's experts first, in a random order per token, then the others for the remaining slots.
    c.ids.assign(ep_size, std::vector<int32_t>(tokens_per_rank * top_k));
    std::vector<int32_t> order(c.num_experts);
    for (auto& rank_ids : c.ids) {
        for (int64_t t = 0; t < tokens_per_rank; ++t) {
            std::iota(order.begin(), order.end(), 0);
            std::rotate(order.begin(), order.begin() + hot_rank * num_local_experts, order.end());
            std::shuffle(order.begin(), order.begin() + num_local_experts, rng);
            std::shuffle(order.begin() + num_local_experts, order.end(), rng);
            const auto token_ids = rank_ids.begin() + t * top_k;
            std::copy_n(order.begin(), top_k, token_ids);
            std::shuffle(token_ids, token_ids + top_k, rng);
        }
    }
    return c;
}

}  // namespace mok::plan::testing
