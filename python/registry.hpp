// The C++ objects behind the layer ids, communicator ids and context tensors that Python holds, and when each is
// made and freed. They cannot simply follow Python's objects: a MoeLayer fixes its token count where a PyTorch batch
// does not, a workspace registered with a communicator is freed collectively, and a forward's saved state must
// outlive the op that made it. The registry holds:
//   - a layer entry per id: its LayerOptions without a token count, and one MoeLayer per token count it has seen
//     (LayerShape fixes T, a PyTorch batch does not);
//   - one Workspace per (backend, device, communicator, and what a CUDA workspace's transport state depends on:
//     WorkspaceKey), shared by every layer on it and grown when a layer needs more; a layer made with a smaller
//     one is remade with the new one once none of its contexts is in flight. The registry keeps each key's
//     workspace for the process's lifetime, and with a communicator the ones growth replaced too: freeing those
//     is collective, and Python frees objects at no moment the ranks agree on;
//   - a pool of ForwardContexts per MoeLayer. forward and recompute_forward take a free one and return a
//     "context" tensor, a CPU int64 tensor naming it ([layer, tokens, slot, generation]); the context goes back to
//     the pool when that tensor is freed. Autograd keeps the tensor alive exactly as long as the backward may
//     need it, and torch.compile passes it from the forward graph to the backward graph as data, so the ordering
//     and lifetime need no Python-side bookkeeping.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mok/comm.hpp"
#include "mok/mok.hpp"

namespace mok::torch_binding {

// Layers share a workspace when they run on the same backend, device and communicator, and when they agree on
// what a CUDA workspace lays its persistent transport state out for (CudaWorkspace::bind): the token count,
// hidden size, top-k, local experts and topology. Within a key the workspace grows to the largest layer.
struct WorkspaceKey {
    Backend backend;
    DeviceType device_type;
    int device_index;
    const Communicator* communicator;
    int64_t tokens;
    int64_t hidden;
    int64_t top_k;
    int64_t num_local_experts;
    int ep_size;
    int first_local_rank;
    int num_local_ranks;

    static WorkspaceKey of(const LayerOptions& o) {
        const Topology& t = o.topology;
        return {o.backend,
                o.device.type,
                o.device.index,
                o.communicator.get(),
                o.shape.tokens_per_rank,
                o.shape.hidden,
                o.shape.top_k,
                t.num_local_experts(o.shape),
                t.ep_size,
                t.first_local_rank,
                t.num_local_ranks};
    }
    auto operator<=>(const WorkspaceKey&) const = default;
};

struct Slot {
    std::unique_ptr<ForwardContext> context;  // null after release_contexts; remade on the next use
    bool in_use = false;
    // The use's number, unique in the process, so that a context tensor outliving its use (a copy of it) is
    // refused, even after its layer object was remade.
    int64_t generation = 0;
};

// The MoeLayer of one token count.
struct Instance {
    std::unique_ptr<MoeLayer> layer;
    std::shared_ptr<Workspace> workspace;  // the workspace it was made with
    std::vector<Slot> slots;

    bool in_flight() const {
        return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.in_use; });
    }
};

struct LayerEntry {
    LayerOptions options;  // shape.tokens_per_rank is each instance's own
    std::map<int64_t, Instance> instances;
};

// What a context tensor holds.
struct ContextRef {
    int64_t layer = 0;
    int64_t tokens = 0;
    int64_t slot = 0;
    int64_t generation = 0;
};
constexpr int64_t kContextFields = 4;

class Registry {
  public:
    // Never destroyed: context tensors may be freed during interpreter shutdown, after static destructors ran.
    static Registry& get();

    // Recursive: a context tensor freed while an op holds the lock (an op that fails after taking a slot) releases
    // its slot from inside that op.
    std::recursive_mutex mutex;

    int64_t add_layer(const LayerOptions& options);
    void remove_layer(int64_t id) { layers_.erase(id); }

    LayerEntry& layer(const char* op, int64_t id);

    int64_t add_communicator(std::shared_ptr<Communicator> communicator);
    void remove_communicator(int64_t id) { communicators_.erase(id); }

    std::shared_ptr<Communicator> communicator(const char* op, int64_t id);

    // The layer's MoeLayer for `tokens` tokens per rank, made (and the shared workspace grown) when needed.
    Instance& instance(const char* op, LayerEntry& entry, int64_t tokens);

    // A free context of `instance`, marked in use, and the tensor that names it; freeing the tensor returns the
    // context to the pool.
    std::pair<at::Tensor, ForwardContext*> acquire(const char* op, int64_t layer_id, int64_t tokens,
                                                   Instance& instance);

    // The context that `context` (a tensor from acquire) names, which must be in use by layer `layer_id`.
    ForwardContext& context(const char* op, int64_t layer_id, LayerEntry& entry, const at::Tensor& context,
                            Instance** instance_out);

    void release(const ContextRef& ref);

    // Frees the pooled contexts that no forward is using.
    void release_free_contexts(LayerEntry& entry);

  private:
    Registry() = default;

    int64_t next_id_ = 1;  // 0 means "none" where an id is optional
    std::map<int64_t, LayerEntry> layers_;
    std::map<int64_t, std::shared_ptr<Communicator>> communicators_;
    std::map<WorkspaceKey, std::shared_ptr<Workspace>> workspaces_;
    std::vector<std::shared_ptr<Workspace>> retired_;  // replaced, kept for the process's lifetime
    int64_t last_generation_ = 0;
};

}  // namespace mok::torch_binding
