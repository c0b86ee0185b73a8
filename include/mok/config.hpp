// The layer's shape, its expert-parallel topology, and the tuning knobs.
//
// LayerShape and Topology say *what* is computed and where each expert lives; Config says only *how*. The
// determinism contract (docs/semantics.md) promises identical bits for every value of every Config field.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace mok {

struct LayerShape {
    int64_t tokens_per_rank = 0;  // T: token rows of x on each rank (the same on every rank)
    int64_t hidden = 0;           // H: model width; a multiple of 8 (16-byte rows)
    int64_t expert_width = 0;     // I: routed expert intermediate width; a multiple of 8
    int64_t num_experts = 0;      // E: routed experts in the whole EP group; a multiple of the EP size
    int64_t top_k = 0;            // k: routing slots per token, 1 <= k <= E
    // Zero or more shared experts, each with its own intermediate width (multiples of 8). Every token goes
    // through every shared expert; their weights are replicated on each rank.
    std::vector<int64_t> shared_expert_widths;
};

// Which EP ranks this process drives. One process per GPU drives one rank; the CPU reference and the
// "virtual ranks" GPU mode drive all of them from one process.
struct Topology {
    int ep_size = 1;  // R: ranks in the expert-parallel group
    int first_local_rank = 0;
    int num_local_ranks = 1;  // ranks [first_local_rank, first_local_rank + num_local_ranks) run here

    int num_local_experts(const LayerShape& shape) const { return static_cast<int>(shape.num_experts / ep_size); }
};

// How the forward's routed expert outputs reach the ranks that own their tokens (docs/layer.md, "Kernel sequence").
enum class ForwardCombine : int {
    // kDownStores where the down projection's K loop (the expert width I) is at least kDownStoresMinWidth, else
    // kPush: the measured choice for the brief's shapes (docs/layer.md, section 9).
    kAuto = 0,
    // The down projection stores its rows on this rank and the push kernel sends them, row tile by row tile, on the
    // communication SMs.
    kPush = 1,
    // The down projection stores each row straight into its token's combine row on the owning rank (over NVLink for
    // another GPU) and flags it there; no push kernel, and, pipelined, the down projection runs on every SM once the
    // dispatch is done. Its stores scatter over the whole combine buffer, which costs a short K loop more than the
    // push saves.
    kDownStores = 2,
};
// kAuto's threshold: from I = 2048 (32 K blocks) the down projection's K loop hides the scattered stores.
inline constexpr int64_t kDownStoresMinWidth = 2048;

// "auto", "push" or "down_stores": the names the Python binding and the benchmarks use (an out-of-range value
// reads "auto"; validation rejects it).
const char* to_string(ForwardCombine c);
// The ForwardCombine named `name`; false for any other name.
bool parse_forward_combine(std::string_view name, ForwardCombine* out);

struct Config {
    // SMs given to communication CTAs in the fused forward and backward kernels; 0 chooses automatically
    // (16 forward, 16 backward on an H200: the SM copy kernels saturate NVLink at 12-16 SMs).
    int num_comm_sms_forward = 0;
    int num_comm_sms_backward = 0;
    // Routed rows per signalling unit between dispatch and the GEMMs. A multiple of the expert row alignment
    // (kExpertRowAlignment, 128 rows).
    int64_t minibatch_rows = 4096;
    // Rows in the ring of routed-token buffers reused cyclically; a multiple of minibatch_rows.
    int64_t ring_rows = 131072;
    // Capacity of the schedule table, as a multiple of the balanced load (tokens_per_rank * top_k rows per
    // rank). 0 sizes it for the worst case (every token of every rank on one rank), which never overflows.
    // Routing that needs more rows than the capacity fails with StatusCode::kScheduleOverflow.
    double schedule_capacity_factor = 0.0;
    // A wait on a peer rank that lasts longer than this fails with StatusCode::kPeerTimeout.
    int64_t peer_timeout_ms = 5000;
    // Records a CUDA event after each stage of every step (the transport's kernels, each expert GEMM), so that
    // MoeLayer::stage_times can say where the time goes. Costs an event record per stage; changes no result.
    bool record_stage_times = false;
    // Where dgrad_down does not run in the epilogue warps (gemm_epilogue_warps off, or H below 4096): runs the
    // routed and shared experts' dgrad through down in the ping-pong arrangement, clusters of two CTAs, each consumer
    // warpgroup a tile of its own, so that one tile's SwiGLU-backward epilogue overlaps the next one's K loop
    // (docs/gemm.md: 1.00-1.10x the cooperative arrangement for that GEMM). false runs it cooperatively like every
    // other GEMM. Changes no result.
    bool gemm_pingpong = true;
    // Runs the routed and shared experts' gate/up, down, dgrad_gate_up and fresh weight gradients, and dgrad_down
    // where H >= 4096, in the epilogue-warps arrangement: the consumers hand each tile to the producer warpgroup's
    // idle warps, which store it (and, for gate/up and dgrad_down, run the SwiGLU or its backward) while the next
    // tile's K loop runs (docs/gemm.md). false runs them cooperatively, and dgrad_down as gemm_pingpong says.
    // Changes no result.
    bool gemm_epilogue_warps = true;
    // How the forward's routed expert outputs reach the combine (ForwardCombine below). Changes no result.
    ForwardCombine forward_combine = ForwardCombine::kAuto;
    // The dispatch pulls a source token's rows on a rank once per group of up to four, storing each load to every
    // row of its group, where the token ring holds every row of the pass (with the default ring_rows it does); false
    // pulls every row on its own. Fewer rows cross NVLink (about a third of them for DeepSeek-V3 at EP 2); at EP 1,
    // where no row does, it measured 2-7% slower in the dispatch (docs/transport.md, section 15). Changes no result.
    bool dispatch_token_groups = false;
};

}  // namespace mok
