// mok's PyTorch binding: torch.library custom ops in the `mok` namespace over the public C++ API.
//
// Python creates a layer once (mok::create_layer) and refers to it by an integer id; the compute ops take tensors
// plus that id. The C++ objects live in a registry (registry.hpp): the layers, the workspaces they share, and the
// pools of ForwardContexts that the "context" tensors of forward and recompute_forward name.
//
// Per-rank tensors are stacked over the layer's local ranks: x is [L, T, H], expert_ids [L, T, k], the routed
// weights [L, E/R, I, H], each shared expert's weights [L, I_s, H]; L = topology.num_local_ranks (1 with one
// process per rank; the CPU reference and virtual ranks drive several). Shapes, dtypes, devices and strides are
// checked by the C++ API; its Status becomes a Python exception carrying the message, which names the argument
// (tensor_views.hpp says which exception each code becomes and what the binding checks itself).
//
// CUDA work runs on torch's current stream of the layer's device.
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mok/comm.hpp"
#include "mok/mok.hpp"
#include "registry.hpp"
#include "tensor_views.hpp"

namespace mok::torch_binding {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Arguments

// The inputs every compute op takes, stacked over the local ranks.
struct StackedInputs {
    const at::Tensor& x;               // [L, T, H] bf16
    const at::Tensor& expert_ids;      // [L, T, k] int32
    const at::Tensor& router_weights;  // [L, T, k] fp32
    const at::Tensor& expert_gate;     // [L, E/R, I, H] bf16
    const at::Tensor& expert_up;       // [L, E/R, I, H] bf16
    const at::Tensor& expert_down;     // [L, E/R, H, I] bf16
    at::TensorList shared;             // (gate [L, I_s, H], up [L, I_s, H], down [L, H, I_s]) per shared expert
};

std::string item(const char* list, size_t i) {
    return std::string(list) + "[" + std::to_string(i) + "]";
}

void check_triples(const char* op, const char* name, at::TensorList list) {
    if (list.size() % 3 != 0) {
        invalid(op, name,
                "(gate, up, down) for each shared expert, a multiple of 3 tensors, got " + std::to_string(list.size()));
    }
}

// T, from x ([L, T, H]): it picks the MoeLayer, whose validation then checks every other size.
int64_t tokens_of(const char* op, const LayerEntry& entry, const at::Tensor& x) {
    if (x.dim() != 3) {
        invalid(op, "x",
                "[L, T, H] with L = " + std::to_string(entry.options.topology.num_local_ranks) +
                    " local ranks, got shape " + shape_text(x));
    }
    return x.size(1);
}

std::vector<RankInputs> rank_inputs(const char* op, const LayerEntry& entry, const StackedInputs& in) {
    const int64_t num_local_ranks = entry.options.topology.num_local_ranks;
    const Stacked stacked(op, num_local_ranks);
    check_triples(op, "shared", in.shared);
    std::vector<RankInputs> ranks(num_local_ranks);
    for (int64_t r = 0; r < num_local_ranks; ++r) {
        RankInputs& rank = ranks[r];
        rank.x = stacked.view("x", in.x, r);
        rank.expert_ids = stacked.view("expert_ids", in.expert_ids, r);
        rank.router_weights = stacked.view("router_weights", in.router_weights, r);
        rank.experts = {stacked.view("expert_gate", in.expert_gate, r), stacked.view("expert_up", in.expert_up, r),
                        stacked.view("expert_down", in.expert_down, r)};
        for (size_t i = 0; i < in.shared.size(); i += 3) {
            rank.shared.push_back({stacked.view(item("shared", i), in.shared[i], r),
                                   stacked.view(item("shared", i + 1), in.shared[i + 1], r),
                                   stacked.view(item("shared", i + 2), in.shared[i + 2], r)});
        }
    }
    return ranks;
}

at::TensorOptions output_options(const LayerEntry& entry, at::ScalarType dtype) {
    return at::TensorOptions().dtype(dtype).device(torch_device(entry.options.device));
}

// Weight-gradient tensors shaped like the weights: routed [L, E/R, I, H] x2 and [L, E/R, H, I], then each shared
// expert's [L, I_s, H] x2 and [L, H, I_s].
std::vector<at::Tensor> weight_grads(const LayerEntry& entry, at::ScalarType dtype) {
    const LayerShape& s = entry.options.shape;
    const int64_t num_local_ranks = entry.options.topology.num_local_ranks;
    const int64_t local_experts = entry.options.topology.num_local_experts(s);
    const at::TensorOptions options = output_options(entry, dtype);
    std::vector<at::Tensor> grads = {at::empty({num_local_ranks, local_experts, s.expert_width, s.hidden}, options),
                                     at::empty({num_local_ranks, local_experts, s.expert_width, s.hidden}, options),
                                     at::empty({num_local_ranks, local_experts, s.hidden, s.expert_width}, options)};
    for (const int64_t width : s.shared_expert_widths) {
        grads.push_back(at::empty({num_local_ranks, width, s.hidden}, options));
        grads.push_back(at::empty({num_local_ranks, width, s.hidden}, options));
        grads.push_back(at::empty({num_local_ranks, s.hidden, width}, options));
    }
    return grads;
}

// One rank's BackwardArgs from the stacked outputs; `grads` as weight_grads lays them out.
BackwardArgs backward_args(const Stacked& stacked, int64_t r, const at::Tensor& dy, const at::Tensor& dx,
                           const at::Tensor& d_router_weights, const std::vector<at::Tensor>& grads,
                           const std::vector<std::string>& grad_names, GradMode mode) {
    BackwardArgs a;
    a.dy = stacked.view("dy", dy, r);
    a.dx = stacked.view("dx", dx, r);
    a.d_router_weights = stacked.view("d_router_weights", d_router_weights, r);
    a.d_experts = {stacked.view(grad_names[0], grads[0], r), stacked.view(grad_names[1], grads[1], r),
                   stacked.view(grad_names[2], grads[2], r)};
    for (size_t i = 3; i + 2 < grads.size(); i += 3) {
        a.d_shared.push_back({stacked.view(grad_names[i], grads[i], r),
                              stacked.view(grad_names[i + 1], grads[i + 1], r),
                              stacked.view(grad_names[i + 2], grads[i + 2], r)});
    }
    a.grad_mode = mode;
    return a;
}

// ---------------------------------------------------------------------------------------------------------------
// Compute ops

// The forward shared by mok::forward and mok::recompute_forward, with the registry locked: fills a fresh context
// of the layer for this token count and returns the tensor that names it. With `y`, a full forward writing the
// layer's output there ([R, T, H] bf16, allocated here); without, a recompute (no outputs).
at::Tensor run_forward(const char* op, int64_t layer, const StackedInputs& in, at::Tensor* y) {
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    LayerEntry& entry = registry.layer(op, layer);
    const int64_t tokens = tokens_of(op, entry, in.x);
    const std::vector<RankInputs> inputs = rank_inputs(op, entry, in);
    Instance& instance = registry.instance(op, entry, tokens);
    auto [context, ctx] = registry.acquire(op, layer, tokens, instance);
    const DeviceScope scope(entry.options.device);
    if (y == nullptr) {
        check(op, instance.layer->recompute_forward(inputs, ctx, scope.stream()));
        return context;
    }
    const LayerShape& s = entry.options.shape;
    const int64_t num_local_ranks = entry.options.topology.num_local_ranks;
    *y = at::empty({num_local_ranks, tokens, s.hidden}, output_options(entry, at::kBFloat16));
    const Stacked stacked(op, num_local_ranks);
    std::vector<ForwardArgs> args(num_local_ranks);
    for (int64_t r = 0; r < num_local_ranks; ++r) {
        args[r].inputs = inputs[r];
        args[r].y = stacked.view("y", *y, r);
    }
    check(op, instance.layer->forward(args, ctx, scope.stream()));
    return context;
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& expert_ids,
                                           const at::Tensor& router_weights, const at::Tensor& expert_gate,
                                           const at::Tensor& expert_up, const at::Tensor& expert_down,
                                           at::TensorList shared, int64_t layer) {
    at::Tensor y;
    at::Tensor context = run_forward("mok::forward", layer,
                                     {x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared}, &y);
    return {y, context};
}

at::Tensor recompute_forward(const at::Tensor& x, const at::Tensor& expert_ids, const at::Tensor& router_weights,
                             const at::Tensor& expert_gate, const at::Tensor& expert_up, const at::Tensor& expert_down,
                             at::TensorList shared, int64_t layer) {
    return run_forward("mok::recompute_forward", layer,
                       {x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared}, nullptr);
}

// The backward shared by both gradient modes, with the registry locked: `grads` receive the weight gradients
// (fresh bf16 tensors, or the caller's fp32 main_grads), named `grad_names` in errors.
std::tuple<at::Tensor, at::Tensor> run_backward(const char* op, Registry& registry, LayerEntry& entry, int64_t layer,
                                                const at::Tensor& dy, const StackedInputs& in,
                                                const std::vector<at::Tensor>& grads,
                                                const std::vector<std::string>& grad_names, GradMode mode,
                                                const at::Tensor& context) {
    const std::vector<RankInputs> inputs = rank_inputs(op, entry, in);
    Instance* instance = nullptr;
    const ForwardContext& ctx = registry.context(op, layer, entry, context, &instance);

    const LayerShape& s = entry.options.shape;
    const int64_t num_local_ranks = entry.options.topology.num_local_ranks;
    const int64_t tokens = instance->layer->options().shape.tokens_per_rank;
    at::Tensor dx = at::empty({num_local_ranks, tokens, s.hidden}, output_options(entry, at::kBFloat16));
    at::Tensor d_router_weights = at::empty({num_local_ranks, tokens, s.top_k}, output_options(entry, at::kFloat));
    const Stacked stacked(op, num_local_ranks);
    std::vector<BackwardArgs> args;
    for (int64_t r = 0; r < num_local_ranks; ++r) {
        args.push_back(backward_args(stacked, r, dy, dx, d_router_weights, grads, grad_names, mode));
    }
    const DeviceScope scope(entry.options.device);
    check(op, instance->layer->backward(inputs, args, ctx, scope.stream()));
    return {dx, d_router_weights};
}

std::vector<std::string> grad_names(const char* routed_prefix, const char* shared_list, size_t num_grads) {
    std::vector<std::string> names = {std::string(routed_prefix) + "gate", std::string(routed_prefix) + "up",
                                      std::string(routed_prefix) + "down"};
    for (size_t i = 0; i + 3 < num_grads; ++i) {
        names.push_back(item(shared_list, i));
    }
    return names;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<at::Tensor>> backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& expert_ids, const at::Tensor& router_weights,
    const at::Tensor& expert_gate, const at::Tensor& expert_up, const at::Tensor& expert_down, at::TensorList shared,
    int64_t layer, const at::Tensor& context) {
    constexpr const char* kOp = "mok::backward";
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    LayerEntry& entry = registry.layer(kOp, layer);
    const StackedInputs in{x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared};
    const std::vector<at::Tensor> grads = weight_grads(entry, at::kBFloat16);
    auto [dx, d_router_weights] =
        run_backward(kOp, registry, entry, layer, dy, in, grads, grad_names("d_expert_", "d_shared", grads.size()),
                     GradMode::kFresh, context);
    std::vector<at::Tensor> d_shared(grads.begin() + 3, grads.end());
    return {dx, d_router_weights, grads[0], grads[1], grads[2], std::move(d_shared)};
}

std::tuple<at::Tensor, at::Tensor> backward_accumulate(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& expert_ids, const at::Tensor& router_weights,
    const at::Tensor& expert_gate, const at::Tensor& expert_up, const at::Tensor& expert_down, at::TensorList shared,
    const at::Tensor& main_grad_expert_gate, const at::Tensor& main_grad_expert_up,
    const at::Tensor& main_grad_expert_down, at::TensorList main_grad_shared, int64_t layer,
    const at::Tensor& context) {
    constexpr const char* kOp = "mok::backward_accumulate";
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    LayerEntry& entry = registry.layer(kOp, layer);
    check_triples(kOp, "main_grad_shared", main_grad_shared);
    const StackedInputs in{x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared};
    std::vector<at::Tensor> grads = {main_grad_expert_gate, main_grad_expert_up, main_grad_expert_down};
    grads.insert(grads.end(), main_grad_shared.begin(), main_grad_shared.end());
    return run_backward(kOp, registry, entry, layer, dy, in, grads,
                        grad_names("main_grad_expert_", "main_grad_shared", grads.size()), GradMode::kAccumulate,
                        context);
}

// ---------------------------------------------------------------------------------------------------------------
// Layers, communicators, synchronisation

Backend parse_backend(const char* op, const std::string& backend) {
    if (backend == "cpu") {
        return Backend::kCpuReference;
    }
    if (backend == "cuda") {
        return Backend::kCuda;
    }
    invalid(op, "backend", "'cpu' (the CPU reference) or 'cuda', got '" + backend + "'");
}

// Config::forward_combine by its name (mok.Config.forward_combine).
ForwardCombine parse_forward_combine(const char* op, const std::string& name) {
    ForwardCombine c = ForwardCombine::kAuto;
    if (!mok::parse_forward_combine(name, &c)) {
        invalid(op, "forward_combine", "'auto', 'push' or 'down_stores', got '" + name + "'");
    }
    return c;
}

Device parse_device(const char* op, const c10::Device& device) {
    if (device.is_cpu()) {
        return Device::cpu();
    }
    if (device.is_cuda() && device.has_index()) {
        return Device::cuda(device.index());
    }
    invalid(op, "device", "'cpu' or a CUDA device with its index ('cuda:0'), got '" + device.str() + "'");
}

int64_t create_layer(int64_t hidden, int64_t expert_width, int64_t num_experts, int64_t top_k,
                     std::vector<int64_t> shared_expert_widths, int64_t ep_size, int64_t first_local_rank,
                     int64_t num_local_ranks, int64_t num_comm_sms_forward, int64_t num_comm_sms_backward,
                     int64_t minibatch_rows, int64_t ring_rows, double schedule_capacity_factor,
                     int64_t peer_timeout_ms, bool gemm_pingpong, bool gemm_epilogue_warps,
                     const std::string& forward_combine, bool dispatch_token_groups, const std::string& backend,
                     c10::Device device, int64_t communicator) {
    constexpr const char* kOp = "mok::create_layer";
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    LayerOptions options;
    // T is each call's; 1 stands in for it so that validation checks everything else now.
    options.shape = {1, hidden, expert_width, num_experts, top_k, std::move(shared_expert_widths)};
    options.topology = {static_cast<int>(ep_size), static_cast<int>(first_local_rank),
                        static_cast<int>(num_local_ranks)};
    options.config.num_comm_sms_forward = static_cast<int>(num_comm_sms_forward);
    options.config.num_comm_sms_backward = static_cast<int>(num_comm_sms_backward);
    options.config.minibatch_rows = minibatch_rows;
    options.config.ring_rows = ring_rows;
    options.config.schedule_capacity_factor = schedule_capacity_factor;
    options.config.peer_timeout_ms = peer_timeout_ms;
    options.config.gemm_pingpong = gemm_pingpong;
    options.config.gemm_epilogue_warps = gemm_epilogue_warps;
    options.config.forward_combine = parse_forward_combine(kOp, forward_combine);
    options.config.dispatch_token_groups = dispatch_token_groups;
    options.backend = parse_backend(kOp, backend);
    options.device = parse_device(kOp, device);
    if (communicator != 0) {
        options.communicator = registry.communicator(kOp, communicator);
    }
    check(kOp, MoeLayer::validate(options));
    return registry.add_layer(options);
}

void destroy_layer(int64_t layer) {
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    registry.remove_layer(layer);
}

void release_contexts(int64_t layer) {
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    registry.release_free_contexts(registry.layer("mok::release_contexts", layer));
}

void synchronize(int64_t layer) {
    constexpr const char* kOp = "mok::synchronize";
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    LayerEntry& entry = registry.layer(kOp, layer);
    const DeviceScope scope(entry.options.device);
    // Every MoeLayer reports (and clears) its own failures; the first one is raised after all are cleared.
    Status first;
    for (auto& [tokens, instance] : entry.instances) {
        const Status status = instance.layer->synchronize(scope.stream());
        if (first.is_ok() && !status.is_ok()) {
            first = status;
        }
    }
    check(kOp, first);
}

std::tuple<int64_t, int64_t, int64_t, int64_t, double, int64_t, bool, bool, std::string, bool> default_config() {
    const Config c;
    return std::make_tuple(int64_t{c.num_comm_sms_forward}, int64_t{c.num_comm_sms_backward}, c.minibatch_rows,
                           c.ring_rows, c.schedule_capacity_factor, c.peer_timeout_ms, c.gemm_pingpong,
                           c.gemm_epilogue_warps, std::string(to_string(c.forward_combine)), c.dispatch_token_groups);
}

at::Tensor make_unique_id() {
    CommUniqueId id;
    check("mok::make_unique_id", Communicator::make_unique_id(&id));
    at::Tensor bytes = at::empty({static_cast<int64_t>(CommUniqueId::kBytes)}, at::kByte);
    std::copy(id.bytes.begin(), id.bytes.end(), bytes.data_ptr<uint8_t>());
    return bytes;
}

int64_t create_communicator(const at::Tensor& unique_id, int64_t rank, int64_t num_ranks, int64_t device) {
    constexpr const char* kOp = "mok::create_communicator";
    if (!unique_id.is_cpu() || unique_id.scalar_type() != at::kByte || unique_id.dim() != 1 ||
        unique_id.numel() != static_cast<int64_t>(CommUniqueId::kBytes) || !unique_id.is_contiguous()) {
        invalid(kOp, "unique_id",
                "the " + std::to_string(CommUniqueId::kBytes) +
                    "-byte CPU uint8 tensor that mok::make_unique_id returned on rank 0, got shape " +
                    shape_text(unique_id));
    }
    CommUniqueId id;
    std::copy_n(unique_id.data_ptr<uint8_t>(), CommUniqueId::kBytes, id.bytes.begin());
    std::shared_ptr<Communicator> communicator;
    check(kOp, Communicator::create(id, static_cast<int>(rank), static_cast<int>(num_ranks), static_cast<int>(device),
                                    &communicator));
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    return registry.add_communicator(std::move(communicator));
}

void destroy_communicator(int64_t communicator) {
    Registry& registry = Registry::get();
    const std::lock_guard lock(registry.mutex);
    registry.remove_communicator(communicator);
}

void register_compute_kernels(torch::Library& m) {
    m.impl("forward", TORCH_FN(forward));
    m.impl("recompute_forward", TORCH_FN(recompute_forward));
    m.impl("backward", TORCH_FN(backward));
    m.impl("backward_accumulate", TORCH_FN(backward_accumulate));
}

}  // namespace
}  // namespace mok::torch_binding

TORCH_LIBRARY(mok, m) {
    using namespace mok::torch_binding;
    // The fake (shape-only) kernels that torch.compile traces with are Python's.
    m.set_python_module("mok.ops");

    // The layer, stacked over its L local ranks (see the top of this file).
    m.def(
        "forward(Tensor x, Tensor expert_ids, Tensor router_weights, Tensor expert_gate, Tensor expert_up, "
        "Tensor expert_down, Tensor[] shared, int layer) -> (Tensor y, Tensor context)");
    m.def(
        "recompute_forward(Tensor x, Tensor expert_ids, Tensor router_weights, Tensor expert_gate, "
        "Tensor expert_up, Tensor expert_down, Tensor[] shared, int layer) -> Tensor context");
    m.def(
        "backward(Tensor dy, Tensor x, Tensor expert_ids, Tensor router_weights, Tensor expert_gate, "
        "Tensor expert_up, Tensor expert_down, Tensor[] shared, int layer, Tensor context) -> (Tensor dx, "
        "Tensor d_router_weights, Tensor d_expert_gate, Tensor d_expert_up, Tensor d_expert_down, "
        "Tensor[] d_shared)");
    m.def(
        "backward_accumulate(Tensor dy, Tensor x, Tensor expert_ids, Tensor router_weights, Tensor expert_gate, "
        "Tensor expert_up, Tensor expert_down, Tensor[] shared, Tensor(a!) main_grad_expert_gate, "
        "Tensor(b!) main_grad_expert_up, Tensor(c!) main_grad_expert_down, Tensor(d!)[] main_grad_shared, "
        "int layer, Tensor context) -> (Tensor dx, Tensor d_router_weights)");

    // Layers and communicators, made once from Python, outside any traced region.
    m.def(
        "create_layer(int hidden, int expert_width, int num_experts, int top_k, int[] shared_expert_widths, "
        "int ep_size, int first_local_rank, int num_local_ranks, int num_comm_sms_forward, "
        "int num_comm_sms_backward, int minibatch_rows, int ring_rows, float schedule_capacity_factor, "
        "int peer_timeout_ms, bool gemm_pingpong, bool gemm_epilogue_warps, str forward_combine, "
        "bool dispatch_token_groups, str backend, Device device, int communicator) -> int",
        TORCH_FN(create_layer));
    m.def("destroy_layer(int layer) -> ()", TORCH_FN(destroy_layer));
    m.def("release_contexts(int layer) -> ()", TORCH_FN(release_contexts));
    m.def("synchronize(int layer) -> ()", TORCH_FN(synchronize));
    m.def("default_config() -> (int, int, int, int, float, int, bool, bool, str, bool)", TORCH_FN(default_config));
    m.def("make_unique_id() -> Tensor", TORCH_FN(make_unique_id));
    m.def("create_communicator(Tensor unique_id, int rank, int num_ranks, int device) -> int",
          TORCH_FN(create_communicator));
    m.def("destroy_communicator(int communicator) -> ()", TORCH_FN(destroy_communicator));
}

TORCH_LIBRARY_IMPL(mok, CPU, m) {
    mok::torch_binding::register_compute_kernels(m);
}

TORCH_LIBRARY_IMPL(mok, CUDA, m) {
    mok::torch_binding::register_compute_kernels(m);
}
