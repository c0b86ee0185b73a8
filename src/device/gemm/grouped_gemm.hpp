// The grouped GEMM engine: host entry points of the expert FFN GEMMs (contract of src/device/gemm).
//
// Every form runs over an expert-major row space laid out by the routing plan (RowGroups, in device memory,
// read by the kernel -- no host sync): each local expert's rows form a segment padded to 128 rows; padding
// rows are never read as data and never written. Tensors are row-major bf16 with the shapes given per field;
// `rows` is the capacity of the row space (the plan's capacity_rows). Widths (H, I) are multiples of 8.
//
// Determinism: each output element is computed by one CTA with a K loop in a fixed order, so results are
// bitwise identical from run to run and for any LaunchConfig::num_sms.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/device_status.hpp"
#include "device/gemm/row_groups.hpp"
#include "device/gemm/row_tile_publish.hpp"
#include "mok/status.hpp"

namespace mok::gemm {

// How a launch shares work out among a CTA's warps (docs/gemm.md, "Next: overlapping the epilogue"). The results
// are the same bits either way. A form an arrangement does not serve runs cooperatively under kPingPong (the weight
// gradients) and is refused under kEpilogueWarps.
enum class Arrangement : int {
    kCooperative = 0,  // both consumer warpgroups of a CTA on one 128 x 256 tile
    kPingPong = 1,     // clusters of two CTAs, one row half each; a CTA's warpgroups take tiles in turn
    // The consumers hand each tile's bf16 results to the producer warpgroup's idle warps, which finish the epilogue
    // during the next K loop (three stages instead of four). gate_up_swiglu, down_projection, dgrad_down,
    // dgrad_gate_up and the weight gradients in fresh mode.
    kEpilogueWarps = 2,
};

// dgrad_down's epilogue warps carry the whole SwiGLU backward of a 128 x 256 tile; where the K loop (H / 64 blocks)
// is shorter than that they hold the tensor cores up, and the ping-pong arrangement is faster. With the activations
// straight-line (docs/gemm.md, "The SwiGLU's activations without a branch per value") they win from H = 4096, the
// narrowest model of the brief, at 512 rows per expert and more (1.05-1.10x ping-pong) and in the layer; below that
// H nothing was measured. The smallest H for which a caller should choose kEpilogueWarps for dgrad_down.
inline constexpr int32_t kDgradDownEpilogueWarpsMinHidden = 4096;
// dgrad_down in the epilogue warps: rows of each consumer warp's 16 that the consumers run the SwiGLU backward of
// themselves, in the tiles whose epilogue would outlast the next K loop (full tiles where H <= 5120), where they would
// otherwise wait for their hand-off buffer (docs/gemm.md, "dgrad_down: the consumers' rows"). Same bits whoever runs a
// row. Four measured best (two, three and six gained less). They pay where an expert's rows fill several tiles: 1.04x
// at 512 rows per expert and 1.07x from 2048 at H = 4096, nothing at 128, and 0.96x in the layer's dgrad_down at 160
// (Qwen3.5 at EP 2, a full tile and a short one per expert); hence the layer's rule below.
inline constexpr int32_t kDgradDownConsumerRows = 4;
// The most consumer rows a launch may ask for: with three left in each 16-row slice, a step of the three epilogue
// warps' walk over their rows crosses at most one slice (epilogue::ConsumerRowSplit::kMaxConsumerRows).
inline constexpr int32_t kDgradDownMaxConsumerRows = 13;
// The fewest rows per expert, on average, for which the layer asks for the consumers' rows.
inline constexpr int64_t kDgradDownConsumerRowsMinRowsPerExpert = 512;

struct LaunchConfig {
    cudaStream_t stream = nullptr;
    int num_sms = 0;                 // CTAs of the persistent grid; 0 = every SM of the device
    DeviceStatus* status = nullptr;  // error record (device memory), required
    int32_t rank = 0;                // EP rank, for error reports
    uint64_t timeout_ns = 5'000'000'000ull;
    // A device word the launch zeroes (stream-ordered) and WaveSync counts in, aligning the persistent grid's
    // waves so that CTAs sharing a weight tile read it from L2 (docs/gemm.md, "Waves"); nullptr leaves them
    // unaligned. Changes no result. Launches that may run at the same time need words of their own.
    uint32_t* wave_counter = nullptr;
    Arrangement arrangement = Arrangement::kCooperative;
};

struct GroupedRowSpace {
    RowGroups groups;       // device tables from the routing plan
    int32_t capacity_rows;  // rows of every row-space tensor below, a multiple of 128
    int32_t num_experts;    // local experts
};

// Forward gate/up with SwiGLU: gu[r] = (bf16(x[r] W_gate^T), bf16(x[r] W_up^T)), h[r] = bf16(swiglu(g, u)).
struct GateUpArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* x;       // [rows, H]
    const __nv_bfloat16* w_gate;  // [E, I, H]
    const __nv_bfloat16* w_up;    // [E, I, H]
    __nv_bfloat16* gu;            // [rows, 2, I]
    __nv_bfloat16* h;             // [rows, I]
    int32_t hidden;
    int32_t width;
};
Status gate_up_swiglu(const GateUpArgs& args, const LaunchConfig& launch);

// Forward down projection: out[row_map[r]] = bf16(h[r] W_down^T) (row_map nullptr: out[r]); or, with
// to_sources set, each data row straight into its token's combine row on the rank that owns the token.
struct SourceTargets {
    const plan::RowSource* sources = nullptr;   // [rows] the plan's; nullptr: rows go to out
    __nv_bfloat16* const* rank_rows = nullptr;  // [R] device memory: each rank's combine rows (out_ld apart)
    uint64_t* const* rank_flags = nullptr;      // [R] device memory: each rank's combine flags, one per row
    const DeviceStatus* step_status = nullptr;  // [1] the step's error record: once claimed, no flag is stored
};
struct DownArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* h;       // [rows, I]
    const __nv_bfloat16* w_down;  // [E, H, I]
    __nv_bfloat16* out;           // rows of out_ld elements; unused (may be null) with to_sources
    int64_t out_ld;
    const int32_t* row_map;  // [rows] or nullptr; a negative entry skips the row
    int32_t hidden;
    int32_t width;
    RowTilePublish publish{};  // with tile_ready set: publish each finished row tile (row_tile_publish.hpp)
    // With sources set: rows go to their sources and each finished row tile's flags are stored there; needs
    // publish.tile_counts and publish.sequence (publish.tile_ready may be null).
    SourceTargets to_sources{};
};
Status down_projection(const DownArgs& args, const LaunchConfig& launch);

// Backward through down and SwiGLU: dh' = bf16(dy[r] W_down); dgu[r] = bf16(swiglu_backward(g, u, w[r] dh'));
// router_partials[r][n] = <dh', h> over N tile n's columns (reduce_router_partials adds them in order).
struct DgradDownArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* dy;      // [rows, H]
    const __nv_bfloat16* w_down;  // [E, H, I]
    const __nv_bfloat16* gu;      // [rows, 2, I] from gate_up_swiglu
    const float* row_weight;      // [rows]
    __nv_bfloat16* dgu;           // [rows, 2, I]
    float* router_partials;       // [rows, router_partial_tiles(I)]
    int32_t hidden;
    int32_t width;
    // Epilogue-warps arrangement: rows of each consumer warp's 16 the consumers take in the tiles whose epilogue would
    // outlast the K loop, in [0, kDgradDownMaxConsumerRows]; the other arrangements ignore it. Changes no result.
    int32_t consumer_rows = kDgradDownConsumerRows;
};
Status dgrad_down(const DgradDownArgs& args, const LaunchConfig& launch);
int32_t router_partial_tiles(int32_t width);

// Backward to the input: out[row_map[r]] = bf16(dg[r] W_gate + du[r] W_up), one fp32 accumulation.
struct DgradGateUpArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* dgu;     // [rows, 2, I]
    const __nv_bfloat16* w_gate;  // [E, I, H]
    const __nv_bfloat16* w_up;    // [E, I, H]
    __nv_bfloat16* out;           // rows of out_ld elements
    int64_t out_ld;
    const int32_t* row_map;  // [rows] or nullptr
    int32_t hidden;
    int32_t width;
};
Status dgrad_gate_up(const DgradGateUpArgs& args, const LaunchConfig& launch);

enum class WeightGradMode { kFresh, kAccumulate };

// How accumulate mode adds a tile's fp32 sum to main_grad; both ways give the same bits (one fp32 addition per
// element, rounded to nearest, subnormals kept), so the choice is a matter of speed (docs/gemm.md, "Accumulate mode
// by TMA reductions"). kLoadAddStore loads main_grad while the K loop runs, adds in shared memory and stores it back:
// the faster way at a few hundred rows per expert, where main_grad's traffic bounds the kernel. kReduction hands
// the sums to TMA reductions: the faster way from about 2048 rows per expert, where the loads hold up the epilogue.
// Fresh mode ignores it.
enum class MainGradUpdate { kLoadAddStore, kReduction };
// The fewest rows per expert, on average, for which the layer asks for kReduction. Measured against kLoadAddStore
// in the same run over every model shape: 1.02-1.07x at 2048 and 4096 rows per expert, 0.93-0.98x at 512, 0.80-0.81x
// at 128; the crossover lies between 512 and 2048, and this is the smallest size measured to gain. Since the loads
// keep four boxes in flight (docs/gemm.md, "Accumulate mode: four boxes in flight") the reductions run 0.98-1.06x
// at 2048 rows and 1.01-1.05x at 4096 (DeepSeek-V3 and Qwen3.5), so the rule stands.
inline constexpr int64_t kMainGradReductionMinRowsPerExpert = 2048;

// dW_gate,e = sum over e's rows of dg^T x; dW_up,e likewise with du. Fresh: bf16 [E, I, H] overwritten;
// accumulate: fp32 [E, I, H] += the sum.
struct WeightGradGateUpArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* dgu;  // [rows, 2, I]
    const __nv_bfloat16* x;    // [rows, H]
    void* d_gate;              // [E, I, H]
    void* d_up;                // [E, I, H]
    WeightGradMode mode;
    int32_t hidden;
    int32_t width;
    MainGradUpdate main_grad_update = MainGradUpdate::kLoadAddStore;
};
Status weight_grad_gate_up(const WeightGradGateUpArgs& args, const LaunchConfig& launch);

// dW_down,e = sum over e's rows of dys^T h, dys = scale_rows(dy).
struct WeightGradDownArgs {
    GroupedRowSpace rows;
    const __nv_bfloat16* dys;  // [rows, H]
    const __nv_bfloat16* h;    // [rows, I]
    void* d_down;              // [E, H, I]
    WeightGradMode mode;
    int32_t hidden;
    int32_t width;
    MainGradUpdate main_grad_update = MainGradUpdate::kLoadAddStore;
};
Status weight_grad_down(const WeightGradDownArgs& args, const LaunchConfig& launch);

// dys[r] = bf16(row_weight[r] * dy[r]) for every data row (the down weight gradient's operand). dys may be dy
// (in place): each element is read and then written by the same thread.
Status scale_rows(const GroupedRowSpace& rows, const __nv_bfloat16* dy, const float* row_weight, __nv_bfloat16* dys,
                  int32_t hidden, cudaStream_t stream);

// d_router_weight[r] = the router partials of row r added in N-tile order, for every data row.
Status reduce_router_partials(const GroupedRowSpace& rows, const float* router_partials, int32_t num_tiles,
                              float* d_router_weight, cudaStream_t stream);

// Loads every kernel of the engine (each form, and the row ops above) on the current device and sets their
// shared-memory limits, once per device. Each entry point calls it; a caller that enqueues a GEMM which waits on
// work it enqueues later (RowGroups::tile_ready) must have called it before: a kernel's first launch may
// otherwise load its code and synchronise the context while the waiting GEMM runs (host/cuda/kernel_attributes.hpp).
Status load_kernels();
Status load_row_op_kernels();  // the row ops' part of load_kernels

}  // namespace mok::gemm
