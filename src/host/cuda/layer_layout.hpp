// Where the GPU layer keeps everything, as byte offsets: the workspace (shared by every layer of a model), each
// rank's persistent transport state and scratch inside it, and a ForwardContext's own memory.
//
// Workspace, for the num_local_ranks ranks this process drives (docs/layer.md, "Memory"):
//   [window of each local rank]   SymmetricLayout: peers read and write it. With virtual ranks these are the R
//                                 consecutive windows VirtualPeers addresses; with one rank per process it is the
//                                 start of the NCCL window, which spans the whole workspace.
//   [state of each local rank]    RankStateLayout: control words, DeviceStatus, ring flags and counters.
//                                 Persistent: flags only grow, so every layer bound to the workspace must see them
//                                 at the same offsets.
//   [scratch of each local rank]  ScratchLayout: what a call needs only while it runs.
// The windows and states depend only on the TransportStateKey; layers with the same key share a workspace.
//
// ForwardContext, per local rank (ContextLayout): the plan tables, the dispatched x rows, the router weight of
// each row, and the activations the backward reuses (g|u and h of the routed and the shared experts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/layout/transport_layout.hpp"
#include "mok/layer.hpp"
#include "plan/routing_plan.hpp"

namespace mok::cuda {

using layout::Region;

// The sizes every buffer is made from.
struct LayerDims {
    int32_t ep_size = 1;                 // R
    int32_t num_local_ranks = 1;         // ranks this process drives: R (virtual ranks) or 1 (a rank per process)
    int32_t first_local_rank = 0;        // global rank of local rank 0
    int64_t tokens = 0;                  // T
    int64_t padded_tokens = 0;           // T rounded up to the 128-row tile: the shared experts' row space
    int64_t hidden = 0;                  // H
    int64_t width = 0;                   // I
    int32_t num_experts = 0;             // E
    int32_t num_local_experts = 0;       // E / R
    int32_t top_k = 0;                   // k
    std::vector<int64_t> shared_widths;  // I_s, one per shared expert
    int64_t capacity_rows = 0;           // C: rows of the plan's row table (Config::schedule_capacity_factor)
    int64_t worst_case_rows = 0;         // the row table at any factor at most this: sizes the persistent ring flags

    static LayerDims of(const LayerOptions& options);

    int32_t num_shared() const { return static_cast<int32_t>(shared_widths.size()); }
    int64_t max_shared_width() const;
    layout::TransportShape transport_shape() const;
    // The plan of global rank `rank`. The ring holds every row of the table (the standalone path: no laps).
    plan::PlanShape plan_shape(int32_t rank, int64_t minibatch_rows) const;
};

// What fixes the persistent part of a workspace: layers whose keys are equal may share one.
struct TransportStateKey {
    int32_t ep_size = 0;
    int32_t num_local_ranks = 0;
    int32_t first_local_rank = 0;
    int64_t tokens = 0;
    int64_t hidden = 0;
    int32_t top_k = 0;
    int32_t num_local_experts = 0;

    static TransportStateKey of(const LayerDims& dims);
    bool operator==(const TransportStateKey&) const = default;
    // "T 4096, H 7168, k 8, E/R 32, EP 8 (local ranks 0..7)", for error messages.
    std::string describe() const;
};

// One rank's persistent transport state besides its window: a transport local block (layout::LocalLayout) made
// for the worst-case row table, so that its flags and counters cover every layer with this key. Only its control
// words, DeviceStatus, ring flags and copy counters are used: each call binds the plan tables in the context and
// the rings to the context's x rows and the scratch's dy rows, so its plan tables and its one-tile rings stay
// idle (a few MiB at most). Taking the whole block keeps it in step with whatever the transport keeps there.
struct RankStateLayout {
    layout::LocalLayout local;
    // [W / 128] u64: the pipelined down projection's per-row-tile readiness, the push's load gate
    // (gemm::RowTilePublish). Persistent like the transport's flags: it only grows, by pass sequence.
    Region out_ready;
    uint64_t bytes = 0;

    static RankStateLayout make(const LayerDims& dims);
};

// One rank's scratch: live only during one call.
struct ScratchLayout {
    Region dense_x;                  // [T_pad, H] bf16: the shared experts' x (the A operand needs 128-row tiles)
    Region dense_dy;                 // [T_pad, H] bf16: the shared experts' dy
    Region grad_rows;                // [C, H] bf16: the dispatched dy rows (the kGrads ring), then, once dgrad_down
                                     // has read them, bf16(w dy) in their place (weight_grad_down's operand)
    Region out_rows;                 // [C, H] bf16: forward expert outputs by owner row; backward the dx rows
    Region dgu;                      // [C, 2, I] bf16: dg|du of the routed experts
    Region partials;                 // [C, N tiles of I] fp32: router-gradient partials of the routed dgrad_down
    Region d_row_weight;             // [C] fp32: d router weight of each owner row (pushed with the dx rows)
    std::vector<Region> shared_out;  // [T_pad, H] bf16 per shared expert: output (forward) or dx rows (backward)
    // The shared experts' dgrads may run beside the routed experts' GEMMs (docs/layer.md, "Kernel sequence"), so
    // they write buffers of their own; their weight gradients read shared_dgu[s] after the routed GEMMs.
    std::vector<Region> shared_dgu;  // [T_pad, 2, I_s] bf16 per shared expert: its dg|du
    Region shared_partials;          // [T_pad, N tiles of max I_s] fp32: written by the shared dgrad_down, never read
                                     // (the shared experts' router weight is the constant 1)
    Region gate_rows;                // [kGateWords] int32: the row gate's counts (device/layer/row_gate.hpp)
    Region wave_counters;            // [kWaveCounters] uint32: the GEMMs' wave counters (gemm::LaunchConfig), one
                                     // per stream, since GEMMs on the side stream may run beside the main stream's
    Region ready_sequence;           // [1] u64: the row gate's ring-flag number for the pipelined GEMM's waits
    Region out_tile_counts;          // [C / 128] u32: N tiles the pipelined down projection stored per row tile
    Region gate_segment_rows;        // [E/R] int32: the routed experts' segment rows for the GEMMs
    uint64_t bytes = 0;

    // Words of gate_rows: the routed row count, the shared experts' padded rows and their segment rows.
    static constexpr int kGateRoutedRows = 0;
    static constexpr int kGateSharedRows = 1;
    static constexpr int kGateSharedSegmentRows = 2;
    static constexpr int kGateWords = 4;
    // Words of wave_counters: the main stream's GEMMs, the side stream's.
    static constexpr int kMainWaveCounter = 0;
    static constexpr int kSideWaveCounter = 1;
    static constexpr int kWaveCounters = 2;

    static ScratchLayout make(const LayerDims& dims);
};

// One rank's part of a ForwardContext.
struct ContextLayout {
    layout::PlanRegions plan_tables;  // the plan of the step that made the context
    Region row_weight;                // [C] fp32: router weight of each owner row
    Region x_rows;                    // [C, H] bf16: the dispatched x rows (the kTokens ring), A of dW_gate|up
    Region gu;                        // [C, 2, I] bf16
    Region h;                         // [C, I] bf16
    std::vector<Region> shared_gu;    // [T_pad, 2, I_s] bf16 per shared expert
    std::vector<Region> shared_h;     // [T_pad, I_s] bf16 per shared expert
    uint64_t bytes = 0;

    static ContextLayout make(const LayerDims& dims);
};

// The workspace as a whole.
struct WorkspaceLayout {
    layout::SymmetricLayout window;  // every rank's window (the same on every rank)
    RankStateLayout state;
    ScratchLayout scratch;
    uint64_t persistent_bytes = 0;  // windows and states: what TransportStateKey fixes
    uint64_t total_bytes = 0;

    static WorkspaceLayout make(const LayerDims& dims);

    uint64_t window_offset(int32_t local_rank) const { return static_cast<uint64_t>(local_rank) * window.window_bytes; }
    uint64_t state_offset(int32_t local_rank) const;
    uint64_t scratch_offset(int32_t local_rank) const;

  private:
    uint64_t states_offset_ = 0;
};

}  // namespace mok::cuda
