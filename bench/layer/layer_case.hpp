// The cases of mok-bench-layer: what one case runs (LayerCase), the expert ids of each of its ranks, its FLOPs,
// and the sweep of cases the program's flags select (LayerFlags). Plain C++, tested without a GPU
// (layer_case_test.cpp); the program's GPU side (rank.hpp, main.cpp) takes the cases as they come from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/options.hpp"
#include "mok/mok.hpp"

namespace mok::bench::layer {

// The seed of every random draw of a case: its routing (plus the rank) and its data (rank.cpp).
constexpr uint64_t kSeed = 20261129;

struct LayerCase {
    const ModelPreset* model = nullptr;
    int64_t tokens = 0;
    int ep = 1;
    std::string routing;      // "uniform", "zipf" or "balanced" (make_expert_ids)
    int comm_sms = 0;         // Config::num_comm_sms_forward and _backward; 0: the library's choice
    bool one_stream = false;  // the timed layer runs the one-stream order too (--one-stream)
    // Config::gemm_pingpong and gemm_epilogue_warps at their defaults, or both off (--gemm-cooperative adds cases
    // with every GEMM in the cooperative arrangement).
    bool gemm_arrangements = true;
    ForwardCombine forward_combine = ForwardCombine::kAuto;  // Config::forward_combine (--forward-combine)
    // Steps with other routings before the case's first step (--prior-routings), so that the rows the case's plan
    // leaves as padding hold an earlier step's data, as in training, rather than the zeros of a fresh workspace.
    int prior_routings = 0;
    // How backward writes the weight gradients (--grad-modes): fresh bf16 tensors, or added into fp32 main_grad. An
    // accumulate case times the backward alone: its forward is the fresh case's.
    GradMode grad_mode = GradMode::kFresh;
    // Config::dispatch_token_groups (--token-groups adds cases with it on).
    bool token_groups = false;

    // "<model>/ep<R>/t<T>/<routing>[/<knobs>]/<pass>": a case at the library's choices keeps the name its same-run
    // baseline (bench/baselines/layer_baseline.py) pairs with; others say theirs.
    std::string name(const char* pass) const;
    std::string grad_mode_name() const;
    std::string combine_name() const;
};

// Expert ids [T, k] of one rank: k distinct experts per token, uniform or Zipf-skewed over a seeded order, or
// balanced (routing.hpp: every expert the same rows, the padding-free reference for uniform routing). `variant` 0 is
// the case's routing; others are the prior routings', with the same skew and other draws (balanced draws nothing).
std::vector<int32_t> make_expert_ids(const LayerCase& c, int rank, int variant);

// Expert FLOPs of one rank's forward: three GEMMs of 2 H I per routed (token, slot) and per shared expert row.
double forward_flops(const LayerCase& c);

// The flags of mok-bench-layer, from the arguments the common parser left.
struct LayerFlags {
    std::vector<int> comm_sms{0};
    std::vector<int64_t> tokens;        // empty: the sweep's own
    std::vector<std::string> shapes;    // model presets; empty: the sweep's own
    std::vector<std::string> routings;  // "uniform", "zipf", "balanced"; empty: the sweep's own
    std::vector<ForwardCombine> forward_combine{ForwardCombine::kAuto};
    bool one_stream = false;
    bool gemm_cooperative = false;
    bool token_groups = false;
    int prior_routings = 0;
    std::vector<GradMode> grad_modes{GradMode::kFresh};
};

// Throws std::invalid_argument naming the flag on an unknown flag, a missing value or a malformed one.
LayerFlags parse_flags(const std::vector<std::string>& rest);

// The cases to run, in order: models, then tokens, EP degrees (1, and 2 where `visible_gpus` >= 2), routings, comm
// SM counts, combines and gradient modes, each with its --gemm-cooperative and --token-groups variants after it.
std::vector<LayerCase> sweep(const CommonOptions& options, const LayerFlags& flags, int visible_gpus);

void print_usage();

}  // namespace mok::bench::layer
