// The memory side of a layer pass's roofline: the bytes one rank's pass must move through device memory whatever
// the implementation, and the time the same run's one-way DRAM ceilings need for them.
//
// Why: the compute side (the pass's expert FLOPs at the same-run cuBLAS rate, `roofline_fraction`) says little
// where an expert gets fewer rows than the GPU's ridge point. At EP 1 and 4096 tokens per rank every preset's
// experts see 64-256 rows, so a pass is bound by reading (and, backward, writing) the experts' weights, and a
// speed-up target over the baseline can ask for less time than those bytes take (docs/layer.md, "The floors at
// EP 1").
//
// Counted, per rank (bf16 tensors two bytes an element, fp32 four):
//   forward   read:    the weights of every local expert with at least one row, every shared expert's, and x;
//             written: y.
//   backward  read:    the same weights (both input gradients need them), dy and x (the weight gradients' operand);
//             written: dx and the weight gradients: in fresh mode every local expert's (the ones without rows as
//             zeros) and every shared expert's; in accumulate mode the fp32 main_grad of the experts with rows and
//             of the shared experts, which is read as well.
// Not counted, so that the floor stays a lower bound for any implementation: what the contract lets one recompute
// or keep on chip (g, u, h, dh, the dispatched rows), the routing tensors, and anything read twice.
#pragma once

#include <cstdint>
#include <vector>

namespace mok::bench::layer {

struct FloorShape {
    int64_t tokens = 0;         // T, the rank's tokens
    int64_t hidden = 0;         // H
    int64_t expert_width = 0;   // I
    int64_t local_experts = 0;  // E / R
    int64_t local_experts_with_rows = 0;
    std::vector<int64_t> shared_widths;  // I_s of each shared expert
    bool accumulate = false;             // the backward adds into fp32 main_grad instead of writing fresh bf16
};

struct PassBytes {
    double read = 0.0;
    double written = 0.0;
};

PassBytes forward_bytes(const FloorShape& shape);
PassBytes backward_bytes(const FloorShape& shape);

// Milliseconds to read and write `bytes` at the one-way ceilings (GB/s, 1e9 bytes): the two directions share the
// DRAM interface, so their times add.
double floor_ms(const PassBytes& bytes, double read_gb_per_s, double write_gb_per_s);

// The local experts with at least one row: expert ids [T, k] of every rank (-1 for an unused slot), the experts
// of rank `rank` being [rank E / R, (rank + 1) E / R).
int64_t local_experts_with_rows(const std::vector<std::vector<int32_t>>& ids_of_ranks, int64_t num_experts, int rank);

}  // namespace mok::bench::layer
