// The expert-parallel MoE layer: mok's public entry point.
//
// Life cycle (the validate -> workspace size -> initialise -> run shape):
//   MoeLayer::validate(options)                  checks shapes, topology and Config; touches no memory
//   MoeLayer::workspace_bytes(options, &bytes)   scratch the layer needs; one Workspace serves many layers
//   Workspace::create(...)                       allocates it once per model
//   MoeLayer::create(options, workspace, &layer) binds the layer to the workspace
//   layer->create_context(&ctx)                  storage for what forward saves for backward
//   layer->forward / backward / recompute_forward, once per step
//
// Every argument that crosses this boundary is checked before any work starts; a violation comes back as
// StatusCode::kInvalidArgument naming the argument and what was expected. docs/semantics.md is the contract:
// shapes, dtypes, strides, the math of forward and backward, and the determinism promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mok/comm.hpp"
#include "mok/config.hpp"
#include "mok/status.hpp"
#include "mok/tensor.hpp"

namespace mok {

enum class Backend : uint8_t {
    kCpuReference,  // the CPU oracle with simulated ranks (all ranks local); bf16 rounding as on the GPU
    kCuda,          // the sm_90a kernels
};

// How backward writes weight gradients.
enum class GradMode : uint8_t {
    kFresh,       // grads are bf16 tensors shaped like the weights, overwritten
    kAccumulate,  // grads are fp32 "main_grad" tensors shaped like the weights; the gradient is added in place
};

// The routed experts one rank owns: local expert l is global expert rank * E/R + l.
struct ExpertWeights {
    TensorView gate;  // [E/R, I, H] bf16, contiguous rows
    TensorView up;    // [E/R, I, H] bf16
    TensorView down;  // [E/R, H, I] bf16
};

struct SharedExpertWeights {
    TensorView gate;  // [I_s, H] bf16
    TensorView up;    // [I_s, H] bf16
    TensorView down;  // [H, I_s] bf16
};

// What one rank feeds the layer; forward, backward and recompute_forward all take it.
struct RankInputs {
    TensorView x;               // [T, H] bf16
    TensorView expert_ids;      // [T, k] int32, global expert ids; -1 marks an unused slot
    TensorView router_weights;  // [T, k] fp32, any finite value (zero and negative included)
    ExpertWeights experts;
    std::vector<SharedExpertWeights> shared;  // one per LayerShape::shared_expert_widths entry
};

struct ForwardArgs {
    RankInputs inputs;
    TensorView y;  // [T, H] bf16, written
};

struct ExpertWeightGrads {
    TensorView gate;  // like ExpertWeights::gate; bf16 for GradMode::kFresh, fp32 for kAccumulate
    TensorView up;
    TensorView down;
};

struct SharedExpertWeightGrads {
    TensorView gate;  // like SharedExpertWeights::gate; dtype as for ExpertWeightGrads
    TensorView up;
    TensorView down;
};

struct BackwardArgs {
    TensorView dy;                // [T, H] bf16
    TensorView dx;                // [T, H] bf16, written
    TensorView d_router_weights;  // [T, k] fp32, written; 0 for unused slots
    ExpertWeightGrads d_experts;
    std::vector<SharedExpertWeightGrads> d_shared;
    GradMode grad_mode = GradMode::kFresh;
};

struct LayerOptions {
    LayerShape shape;
    Topology topology;
    Config config;
    Backend backend = Backend::kCpuReference;
    Device device = Device::cpu();  // where tensors live: the CPU, or the GPU of this process
    // The EP group's communicator (mok/comm.hpp): required for Backend::kCuda when ranks live in other processes
    // (num_local_ranks < ep_size; then num_local_ranks is 1 and first_local_rank is the communicator's rank);
    // null otherwise.
    std::shared_ptr<Communicator> communicator;
};

// Row counts of one rank's routing plan, for reports and load-balance monitoring.
struct RoutingStats {
    std::vector<int64_t> rows_per_local_expert;  // [E/R] routed (token, slot) rows each local expert got
    std::vector<int64_t> rows_from_rank;         // [R] rows this rank received from each source rank
    int64_t padded_rows = 0;                     // rows after padding each expert to the row alignment
};

// GPU time of one stage of the layer's steps, summed over the steps recorded (Config::record_stage_times).
struct StageTime {
    std::string stage;      // "<pass>/<stage>", e.g. "forward/dispatch", "backward/dgrad_down"
    double total_ms = 0.0;  // from the end of the previous stage to the end of this one, summed
    int64_t count = 0;      // steps that ran it
};

// Scratch memory shared by every layer of a model. Create it once with the largest workspace_bytes().
class Workspace {
  public:
    static Status create(Backend backend, Device device, size_t bytes, std::shared_ptr<Workspace>* out);
    // With ranks in other processes: also allocates the symmetric memory the transport shares with the peers and
    // registers it with `communicator`. Collective: every rank calls it with the same `bytes`.
    static Status create(Backend backend, Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                         std::shared_ptr<Workspace>* out);
    virtual ~Workspace() = default;
    virtual size_t bytes() const = 0;
    virtual Backend backend() const = 0;
    virtual Device device() const = 0;
    virtual void* data() = 0;
};

// What forward saves for backward: each local rank's routing plan and the activations the backward reuses.
class ForwardContext {
  public:
    virtual ~ForwardContext() = default;
    // True once forward or recompute_forward has filled it.
    virtual bool ready() const = 0;
    // On Backend::kCuda the counts are read back from the GPU (a blocking copy): call it after synchronize().
    virtual const RoutingStats& stats(int local_rank) const = 0;
};

class MoeLayer {
  public:
    static Status validate(const LayerOptions& options);
    static Status workspace_bytes(const LayerOptions& options, size_t* bytes);
    static Status create(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                         std::unique_ptr<MoeLayer>* out);
    virtual ~MoeLayer() = default;

    virtual const LayerOptions& options() const = 0;
    virtual Status create_context(std::unique_ptr<ForwardContext>* out) const = 0;

    // args[i] belongs to rank topology.first_local_rank + i; one entry per local rank.
    // `stream` is the cudaStream_t to run on for Backend::kCuda (nullptr: the default stream); ignored on the CPU.
    virtual Status forward(std::span<const ForwardArgs> args, ForwardContext* context, void* stream = nullptr) = 0;
    // Rebuilds the context from the inputs without writing y (activation checkpointing).
    virtual Status recompute_forward(std::span<const RankInputs> inputs, ForwardContext* context,
                                     void* stream = nullptr) = 0;
    // `inputs` must be the inputs the context was made from.
    virtual Status backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                            const ForwardContext& context, void* stream = nullptr) = 0;

    // forward, backward and recompute_forward only enqueue work on Backend::kCuda: failures found on the GPU
    // (schedule overflow, a peer that timed out) are recorded there. synchronize waits for `stream`, then returns
    // the first such failure of this layer's calls since the last synchronize and clears it, so that the next
    // step runs normally. Always ok on the CPU reference, whose calls report everything themselves. On
    // Backend::kCuda the failure records belong to the Workspace, so a synchronize reports (and clears) those of
    // every layer sharing it, and backward refuses a context whose filling step failed (docs/layer.md).
    virtual Status synchronize(void* stream = nullptr) = 0;

    // With Config::record_stage_times, the stage times of this layer's completed steps so far (call it after
    // synchronize); empty otherwise, and on the CPU reference.
    virtual std::vector<StageTime> stage_times() = 0;
};

}  // namespace mok
