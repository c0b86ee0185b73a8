// The CPU reference of the whole expert-parallel MoE layer: forward and backward for an EP group of R ranks
// simulated in one process. Plain C++, no CUDA; naive on purpose, so that it is obviously right.
//
// It follows the contract in docs/semantics.md step by step, as the GPU does:
//   1. every rank's expert ids are "all-gathered"; each rank builds its routing plan with the shared plan code
//      (src/plan/routing_plan.hpp, driven by src/host/plan/host_plan.hpp);
//   2. each owner gathers ("pulls") its rows from the source ranks' x in canonical order (source rank, token,
//      slot) and runs each local expert's SwiGLU FFN over them;
//   3. each output row is "pushed" into its source rank's combine buffer, one private row per (token, slot);
//   4. each source combines in the fixed order: shared experts first (in order), then slots 0..k-1.
// The backward mirrors it (pull dy, push dx and the router-weight gradients).
//
// Two precisions:
//   kOracle  fp64 everywhere, nothing rounded: the "true" function of the given inputs, used for
//            finite-difference checks and as the yardstick of every error measurement.
//   kDevice  rounds exactly where the GPU rounds (docs/semantics.md, "Where results are rounded"): fp32
//            accumulation in canonical order, bf16 intermediates, the shared fp32 SwiGLU (src/common/swiglu.hpp).
//            On inputs whose GEMM sums are exact in fp32 (small integers times powers of two), a GPU result
//            must equal it bit for bit; otherwise it is the same-precision reference of the tolerance model
//            (reference/tolerance.hpp).
// Inputs are doubles so that the oracle can be perturbed for finite differences. kDevice reads them as the GPU
// receives them: x, dy and the weights as bf16 (rounded to nearest even), router weights as fp32; inputs that
// already hold such values are read unchanged.
//
// Arithmetic (reference/arithmetic.hpp): a GEMM or dot-product step is acc + a * b, computed in kDevice as one
// fp32 fma (exactly add(acc, mul(a, b)) when a and b are bf16 values, as all GEMM operands are). Independent
// rows and weight-gradient rows run on threads (reference/parallel.hpp); every output element has one writer
// and a sequential sum, so the bits do not depend on the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/plan/host_plan.hpp"
#include "mok/config.hpp"

namespace mok::reference {

enum class Precision { kOracle, kDevice };

// The weights of n experts of width `width`: gate and up [n, width, H], down [n, H, width], row-major.
struct ExpertParams {
    std::vector<double> gate;
    std::vector<double> up;
    std::vector<double> down;
};

// What one simulated rank holds.
struct RankInputs {
    std::vector<double> x;               // [T, H]
    std::vector<int32_t> expert_ids;     // [T, k], -1 = unused slot
    std::vector<double> router_weights;  // [T, k]
    ExpertParams experts;                // the rank's E/R local experts: [E/R, I, H], [E/R, H, I]
    std::vector<ExpertParams> shared;    // one per shared expert (n = 1): [I_s, H], [H, I_s]
};

struct Problem {
    LayerShape shape;  // tokens_per_rank is T, per rank
    Config config;     // minibatch, ring and capacity only shape the plan; results never depend on them
    int ep_size = 1;
    std::vector<RankInputs> ranks;  // [R]
};

struct RankForward {
    std::vector<double> y;  // [T, H]; bf16 values in kDevice mode
    plan::HostPlan plan;    // this rank's routing plan
};

struct RankGrads {
    std::vector<double> dx;                // [T, H]; bf16 values in kDevice mode
    std::vector<double> d_router_weights;  // [T, k]; fp32 values in kDevice mode; 0 for unused slots
    ExpertParams d_experts;                // like RankInputs::experts; fp32 sums in kDevice mode (before the
                                           // caller's bf16 rounding or main_grad accumulation)
    std::vector<ExpertParams> d_shared;    // like RankInputs::shared: this rank's tokens' share only
};

// The plan shape of rank `rank` for this problem (capacity from Config::schedule_capacity_factor).
plan::PlanShape plan_shape(const Problem& problem, int rank);

// Forward of every rank. Fails (returns false, `error` set) when a rank's schedule overflows (the error names
// the first such rank, the padded rows it needs and the capacity), or when the problem is malformed (a tensor
// of the wrong size, an id outside [-1, E) or repeated in a token, a non-finite router weight).
bool forward(const Problem& problem, Precision precision, std::vector<RankForward>* out, std::string* error);

// Backward of every rank from dy ([R][T, H]). Same failure as forward.
bool backward(const Problem& problem, const std::vector<std::vector<double>>& dy, Precision precision,
              std::vector<RankGrads>* out, std::string* error);

// ---- A global batch, independent of the EP degree, for EP-invariance checks. ----

// N = R * T tokens and all E experts; partition() cuts it into R ranks of T tokens and E/R experts each.
struct GlobalBatch {
    LayerShape shape;  // tokens_per_rank is ignored; num_tokens is N
    int64_t num_tokens = 0;
    std::vector<double> x;               // [N, H]
    std::vector<int32_t> expert_ids;     // [N, k]
    std::vector<double> router_weights;  // [N, k]
    ExpertParams experts;                // [E, I, H], [E, H, I]
    std::vector<ExpertParams> shared;    // replicated on every rank
};

// Rank r gets tokens [r T, (r + 1) T) and experts [r E/R, (r + 1) E/R); shared experts are replicated.
// Throws std::invalid_argument unless ep_size divides both N and E.
Problem partition(const GlobalBatch& batch, int ep_size, const Config& config = {});

}  // namespace mok::reference
