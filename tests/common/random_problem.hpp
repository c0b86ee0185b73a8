// Random layer problems for the tests, CPU and GPU alike (plain C++, no CUDA): a GlobalBatch of N tokens and
// E experts drawn from a seed, which reference::partition cuts into any EP degree that divides N and E.
//
// What the options cover: shapes, shared experts of their own widths, routing (uniform, Zipf-skewed, all
// tokens on a chosen range of experts), unused slots, experts that get no tokens, router weights of both
// signs with exact zeros, and two value modes (random bf16, or exact arithmetic).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace mok::testing {

enum class Routing : uint8_t {
    kUniform,   // each token picks k distinct experts uniformly at random
    kZipf,      // expert popularity falls off as 1 / (p + 1)^zipf_exponent, p a random permutation of the experts
    kHotRange,  // each token picks only from experts [hot_first_expert, hot_first_expert + num_hot_experts);
                // slots beyond num_hot_experts stay unused. One expert with k = 1 sends every token to that
                // expert; the E/R experts of one rank send every token to that rank.
};

enum class Values : uint8_t {
    // Uniform in [-1, 1] rounded to bf16; weights scaled by 1/sqrt(fan in) as in a trained layer, so that
    // activations stay of order one; router weights uniform fp32 in [-1, 1].
    kRandomBf16,
    // Small integers times powers of two (x = n/4, gate/up/down weights = n/16, dy = n/8, router weights =
    // n/4, |n| <= 8): bf16 values whose products are exact and whose gate/up GEMM sums are exact in fp32 for
    // any H below 2^18 (each product a multiple of 2^-6 of magnitude at most 1). Later stages take swiglu
    // outputs and are exact only by chance.
    kExactArithmetic,
};

struct ProblemOptions {
    int64_t num_tokens = 32;    // N, all ranks together
    int64_t hidden = 16;        // H
    int64_t expert_width = 16;  // I
    int64_t num_experts = 8;    // E
    int64_t top_k = 2;          // k
    std::vector<int64_t> shared_expert_widths;
    Routing routing = Routing::kUniform;
    double zipf_exponent = 1.2;
    int32_t hot_first_expert = 0;
    int32_t num_hot_experts = 1;
    double unused_slot_fraction = 0.0;    // each used slot independently made unused (-1) with this probability
    std::vector<int32_t> idle_experts;    // experts no token picks
    double zero_weight_fraction = 0.125;  // router weights exactly 0, independently per slot
    Values values = Values::kRandomBf16;

    // "N 32, H 16, I 16, E 8, k 2, shared {8, 24}, routing zipf(1.2), unused 0.1, idle {3}, zero weights 0.125,
    // values bf16", for failure messages.
    std::string describe() const;
};

reference::GlobalBatch random_global_batch(const ProblemOptions& options, uint64_t seed);

// An output gradient [rows, H] in the given value mode (uniform bf16 in [-1, 1], or n/8 with |n| <= 8).
std::vector<double> random_output_grad(int64_t rows, int64_t hidden, Values values, uint64_t seed);

// [N, H] (or [N, k]) cut into ep_size consecutive [T, H] blocks, rank order.
std::vector<std::vector<double>> split_rows(const std::vector<double>& global, int ep_size);

// Per-rank tensors concatenated in rank order: per-rank [T, H] to global [N, H].
std::vector<double> concat_ranks(const std::vector<std::vector<double>>& per_rank);

// The routed experts' weight gradients of every rank, in global expert order: [E, I, H] and [E, H, I].
reference::ExpertParams concat_expert_grads(const std::vector<reference::RankGrads>& grads);

}  // namespace mok::testing
