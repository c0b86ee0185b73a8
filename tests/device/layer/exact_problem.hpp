// Layer problems on which the GPU must equal the CPU bit for bit: every GEMM sum of the forward and the backward
// is exact in fp32, so the order in which the tensor cores add does not matter.
//
// tests/common's exact values (Values::kExactArithmetic) make the gate/up sums exact, but the later GEMMs take
// SwiGLU outputs, whose bits spread over many binades. Here the gate is driven far positive instead: x in
// {1/4, 1/2} and W_gate in {6, 8} give g in [24, 64] (H = 16), where fp32's sigmoid is exactly 1, so silu(g) = g
// and silu'(g) = 1. Then with W_up, W_down in +-{1/16, 1/8}, dy in +-{1/8, 1/4, 1/2} and router weights in
// {0, +-1/4, +-1/2, +-1}, every value is a multiple of a small power of two and bounded, and every sum below
// needs at most 24 significant bits (I = 8, shared widths of at most 16, at most 64 rows per expert):
//   g, u: 2^-1 and 2^-6 steps; h = bf16(g u) in 2^-7 steps, |h| <= 64; o: 18 bits; dh': 7 bits; d w: 23 bits;
//   dx rows: 22 bits; dW_gate: 22 bits; dW_up, dW_down: 23 bits.
// Roundings to bf16 (h, dh', dg, du, o, y, dx, fresh gradients) are the same correctly rounded operations on both
// sides, so they need no exactness.
#pragma once

#include <cstdint>

#include "api/api_problem.hpp"
#include "common/random_problem.hpp"

namespace mok::testing {

inline constexpr int64_t kExactHidden = 16;
inline constexpr int64_t kExactWidth = 8;
inline constexpr int64_t kExactMaxTokens = 64;

// `options` fixes the routing (and N, E, k, the shared widths); its H, I and value mode are replaced by the
// exact ones above. Shared widths must be at most 16 and N at most kExactMaxTokens.
RandomCase exact_case(ProblemOptions options, int ep_size, uint64_t seed, const Config& config = {});

}  // namespace mok::testing
