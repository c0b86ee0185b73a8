// The registry of layers, communicators, shared workspaces and pooled forward contexts (registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensor_views.hpp"

namespace mok::torch_binding {

Registry& Registry::get() {
    static auto* registry = new Registry;
    return *registry;
}

int64_t Registry::add_layer(const LayerOptions& options) {
    const int64_t id = next_id_++;
    layers_[id].options = options;
    return id;
}

LayerEntry& Registry::layer(const char* op, int64_t id) {
    auto it = layers_.find(id);
    if (it == layers_.end()) {
        invalid(op, "layer", "the id of a live mok layer (made by mok::create_layer), got " + std::to_string(id));
    }
    return it->second;
}

int64_t Registry::add_communicator(std::shared_ptr<Communicator> communicator) {
    const int64_t id = next_id_++;
    communicators_[id] = std::move(communicator);
    return id;
}

std::shared_ptr<Communicator> Registry::communicator(const char* op, int64_t id) {
    auto it = communicators_.find(id);
    if (it == communicators_.end()) {
        invalid(
            op, "communicator",
            "0 (none) or the id of a live communicator (made by mok::create_communicator), got " + std::to_string(id));
    }
    return it->second;
}

Instance& Registry::instance(const char* op, LayerEntry& entry, int64_t tokens) {
    LayerOptions options = entry.options;
    options.shape.tokens_per_rank = tokens;
    size_t bytes = 0;
    check(op, MoeLayer::workspace_bytes(options, &bytes));
    std::shared_ptr<Workspace>& shared = workspaces_[WorkspaceKey::of(options)];
    if (shared == nullptr || shared->bytes() < bytes) {
        std::shared_ptr<Workspace> grown;
        check(op, Workspace::create(options.backend, options.device,
                                    std::max(bytes, shared == nullptr ? size_t{0} : shared->bytes()),
                                    options.communicator, &grown));
        if (shared != nullptr && options.communicator != nullptr) {
            // Freeing a workspace registered with a communicator is collective, and the one replaced here
            // would go with its last layer, at a moment Python's garbage collector picks on each rank.
            retired_.push_back(shared);
        }
        shared = std::move(grown);
    }
    auto it = entry.instances.find(tokens);
    if (it != entry.instances.end() && it->second.workspace != shared && !it->second.in_flight()) {
        // Its contexts belong to the old layer object: they go with it.
        entry.instances.erase(it);
        it = entry.instances.end();
    }
    if (it == entry.instances.end()) {
        Instance made;
        check(op, MoeLayer::create(options, shared, &made.layer));
        made.workspace = shared;
        it = entry.instances.emplace(tokens, std::move(made)).first;
    }
    return it->second;
}

std::pair<at::Tensor, ForwardContext*> Registry::acquire(const char* op, int64_t layer_id, int64_t tokens,
                                                         Instance& instance) {
    auto free = std::find_if(instance.slots.begin(), instance.slots.end(), [](const Slot& s) { return !s.in_use; });
    if (free == instance.slots.end()) {
        free = instance.slots.emplace(instance.slots.end());
    }
    if (free->context == nullptr) {
        check(op, instance.layer->create_context(&free->context));
    }
    free->in_use = true;
    free->generation = ++last_generation_;
    const ContextRef ref{layer_id, tokens, free - instance.slots.begin(), free->generation};
    auto* data = new int64_t[kContextFields]{ref.layer, ref.tokens, ref.slot, ref.generation};
    at::Tensor tensor = at::from_blob(
        data, {kContextFields},
        [ref](void* p) {
            delete[] static_cast<int64_t*>(p);
            Registry::get().release(ref);
        },
        at::TensorOptions().dtype(at::kLong));
    return {std::move(tensor), free->context.get()};
}

ForwardContext& Registry::context(const char* op, int64_t layer_id, LayerEntry& entry, const at::Tensor& context,
                                  Instance** instance_out) {
    const std::string expected =
        "the context tensor that mok::forward or mok::recompute_forward of this layer returned";
    if (!context.defined() || !context.is_cpu() || context.scalar_type() != at::kLong ||
        context.numel() != kContextFields || !context.is_contiguous()) {
        invalid(op, "context", expected + ", got a tensor of shape " + shape_text(context));
    }
    const int64_t* data = context.data_ptr<int64_t>();
    const ContextRef ref{data[0], data[1], data[2], data[3]};
    if (ref.layer != layer_id) {
        invalid(op, "context", expected + ", got one of layer " + std::to_string(ref.layer));
    }
    auto it = entry.instances.find(ref.tokens);
    if (it == entry.instances.end() || ref.slot < 0 || ref.slot >= static_cast<int64_t>(it->second.slots.size())) {
        invalid(op, "context", expected + ", got one this layer never made");
    }
    Slot& slot = it->second.slots[ref.slot];
    if (!slot.in_use || slot.generation != ref.generation) {
        invalid(op, "context",
                expected + ", got one whose context was released (a copy of the tensor outlived the original)");
    }
    *instance_out = &it->second;
    return *slot.context;
}

void Registry::release(const ContextRef& ref) {
    const std::lock_guard lock(mutex);
    auto layer = layers_.find(ref.layer);
    if (layer == layers_.end()) {
        return;
    }
    auto instance = layer->second.instances.find(ref.tokens);
    if (instance == layer->second.instances.end()) {
        return;
    }
    std::vector<Slot>& slots = instance->second.slots;
    if (ref.slot < static_cast<int64_t>(slots.size()) && slots[ref.slot].generation == ref.generation) {
        slots[ref.slot].in_use = false;
    }
}

void Registry::release_free_contexts(LayerEntry& entry) {
    for (auto& [tokens, instance] : entry.instances) {
        for (Slot& slot : instance.slots) {
            if (!slot.in_use) {
                slot.context.reset();
            }
        }
    }
}

}  // namespace mok::torch_binding
