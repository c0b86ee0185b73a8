#include "host/api/validate.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "host/api/backend.hpp"
#include "plan/routing_plan.hpp"

namespace mok {
namespace api {
namespace {

// Rows of bf16 tensors start on 16-byte boundaries: the GPU moves them in 16-byte vectors (TMA and bulk
// copies need it), so H, I and every shared width are multiples of 8 bf16 elements.
constexpr int64_t kRowAlignmentBytes = 16;
constexpr int64_t kWidthMultiple = 8;
constexpr int64_t kMinWidth = 8;
// The plan indexes rows, slots and experts with 32-bit integers (they live in device tables).
constexpr int64_t kMaxPlanIndex = std::numeric_limits<int32_t>::max();

std::string str(int64_t v) {
    return std::to_string(v);
}

std::string index_path(const std::string& base, size_t i) {
    return base + "[" + std::to_string(i) + "]";
}

std::string format_shape(const std::array<int64_t, TensorView::kMaxRank>& shape, int rank) {
    std::string text = "[";
    for (int d = 0; d < rank; ++d) {
        text += (d == 0 ? "" : ", ") + str(shape[d]);
    }
    return text + "]";
}

std::string format_float(float v) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", static_cast<double>(v));
    return buffer;
}

Status check_width(const std::string& path, int64_t width) {
    if (width < kMinWidth || width % kWidthMultiple != 0) {
        return Status::invalid_argument(path,
                                        "a multiple of 8 and at least 8 (16-byte rows of bf16), got " + str(width));
    }
    return Status::ok();
}

Status check_topology(const Topology& t) {
    if (t.ep_size < 1) {
        return Status::invalid_argument("options.topology.ep_size", "at least 1, got " + str(t.ep_size));
    }
    if (t.first_local_rank < 0 || t.first_local_rank >= t.ep_size) {
        return Status::invalid_argument("options.topology.first_local_rank",
                                        "a rank in [0, " + str(t.ep_size) + "), got " + str(t.first_local_rank));
    }
    if (t.num_local_ranks < 1 || t.num_local_ranks > t.ep_size - t.first_local_rank) {
        return Status::invalid_argument("options.topology.num_local_ranks",
                                        "1 to " + str(t.ep_size - t.first_local_rank) + " (ranks from " +
                                            str(t.first_local_rank) + " to ep_size " + str(t.ep_size) + "), got " +
                                            str(t.num_local_ranks));
    }
    return Status::ok();
}

Status check_shape(const LayerShape& s, const Topology& t) {
    if (s.tokens_per_rank < 1) {
        return Status::invalid_argument("options.shape.tokens_per_rank", "at least 1, got " + str(s.tokens_per_rank));
    }
    MOK_RETURN_IF_ERROR(check_width("options.shape.hidden", s.hidden));
    MOK_RETURN_IF_ERROR(check_width("options.shape.expert_width", s.expert_width));
    if (s.num_experts < 1 || s.num_experts % t.ep_size != 0 || s.num_experts > kMaxPlanIndex) {
        return Status::invalid_argument(
            "options.shape.num_experts",
            "a positive multiple of topology.ep_size (" + str(t.ep_size) + ") below 2^31, got " + str(s.num_experts));
    }
    if (s.top_k < 1 || s.top_k > s.num_experts) {
        return Status::invalid_argument("options.shape.top_k",
                                        "1 <= k <= num_experts (" + str(s.num_experts) + "), got " + str(s.top_k));
    }
    for (size_t i = 0; i < s.shared_expert_widths.size(); ++i) {
        MOK_RETURN_IF_ERROR(
            check_width(index_path("options.shape.shared_expert_widths", i), s.shared_expert_widths[i]));
    }
    // Both products are bounded before they are formed: T * k < 2^62 once T < 2^31, and R * T * k < 2^62 once
    // T * k < 2^31.
    if (s.tokens_per_rank > kMaxPlanIndex || s.tokens_per_rank * s.top_k > kMaxPlanIndex) {
        return Status::invalid_argument("options.shape.tokens_per_rank",
                                        "T * k below 2^31 (the plan numbers a rank's slots with 32 bits), got T " +
                                            str(s.tokens_per_rank) + ", k " + str(s.top_k));
    }
    const int64_t worst_case = plan::worst_case_rows(t.ep_size, s.tokens_per_rank, static_cast<int32_t>(s.top_k),
                                                     static_cast<int32_t>(s.num_experts / t.ep_size));
    if (worst_case > kMaxPlanIndex) {
        return Status::invalid_argument("options.shape.tokens_per_rank",
                                        "at most 2^31 - 1 routed rows per rank in the worst case (the plan numbers "
                                        "rows with 32 bits), got " +
                                            str(worst_case) + " for T " + str(s.tokens_per_rank) + " on " +
                                            str(t.ep_size) + " ranks");
    }
    return Status::ok();
}

Status check_config(const Config& c) {
    if (c.num_comm_sms_forward < 0) {
        return Status::invalid_argument("options.config.num_comm_sms_forward",
                                        "at least 0 (0 chooses automatically), got " + str(c.num_comm_sms_forward));
    }
    if (c.num_comm_sms_backward < 0) {
        return Status::invalid_argument("options.config.num_comm_sms_backward",
                                        "at least 0 (0 chooses automatically), got " + str(c.num_comm_sms_backward));
    }
    if (c.minibatch_rows < plan::kExpertRowAlignment || c.minibatch_rows % plan::kExpertRowAlignment != 0) {
        return Status::invalid_argument("options.config.minibatch_rows",
                                        "a positive multiple of " + str(plan::kExpertRowAlignment) +
                                            " (the expert row alignment), got " + str(c.minibatch_rows));
    }
    if (c.ring_rows < c.minibatch_rows || c.ring_rows % c.minibatch_rows != 0) {
        return Status::invalid_argument(
            "options.config.ring_rows",
            "a positive multiple of minibatch_rows (" + str(c.minibatch_rows) + "), got " + str(c.ring_rows));
    }
    if (!std::isfinite(c.schedule_capacity_factor) || c.schedule_capacity_factor < 0.0) {
        return Status::invalid_argument("options.config.schedule_capacity_factor",
                                        "a finite value >= 0 (0 sizes the schedule for the worst case), got " +
                                            std::to_string(c.schedule_capacity_factor));
    }
    if (c.peer_timeout_ms <= 0) {
        return Status::invalid_argument("options.config.peer_timeout_ms",
                                        "a positive time, got " + str(c.peer_timeout_ms));
    }
    const auto combine = static_cast<int>(c.forward_combine);
    if (combine < static_cast<int>(ForwardCombine::kAuto) || combine > static_cast<int>(ForwardCombine::kDownStores)) {
        return Status::invalid_argument("options.config.forward_combine",
                                        "ForwardCombine::kAuto, kPush or kDownStores, got " + str(combine));
    }
    return Status::ok();
}

std::string expectation(const TensorSpec& spec) {
    return format_shape(spec.shape, spec.rank) + " " + spec.symbolic_shape + " " + to_string(spec.dtype) + " on " +
           to_string(spec.device) + spec.note;
}

// Strides: unit in the last dimension; each outer dimension steps past the whole inner block (no two elements
// share memory) in 16-byte steps, or exactly by the inner block for dense tensors. Extent-1 dimensions are
// never stepped along, so their strides are free.
Status check_strides(const TensorView& view, const std::string& path, const TensorSpec& spec) {
    const int last = view.rank - 1;
    if (view.shape[last] > 1 && view.stride[last] != 1) {
        return Status::invalid_argument(path, "unit stride in the last dimension, got " + view.describe());
    }
    const auto element_bytes = static_cast<int64_t>(dtype_size(view.dtype));
    int64_t inner = view.shape[last];
    for (int d = last - 1; d >= 0; --d) {
        if (view.shape[d] == 1) {
            continue;
        }
        if (spec.contiguous && view.stride[d] != inner) {
            return Status::invalid_argument(path, "a dense row-major tensor, got " + view.describe());
        }
        if (view.stride[d] < inner) {
            return Status::invalid_argument(path, "stride of dimension " + str(d) + " at least " + str(inner) +
                                                      " (rows must not overlap), got " + view.describe());
        }
        if ((view.stride[d] * element_bytes) % kRowAlignmentBytes != 0 && !spec.contiguous) {
            return Status::invalid_argument(path, "rows starting 16-byte aligned (stride of dimension " + str(d) +
                                                      " a multiple of " + str(kRowAlignmentBytes / element_bytes) +
                                                      "), got " + view.describe());
        }
        inner = view.stride[d] * view.shape[d];
    }
    return Status::ok();
}

Status check_bf16_matrix(const LayerOptions& options, const TensorView& view, const std::string& path,
                         const char* symbolic_shape, int64_t rows, int64_t cols) {
    TensorSpec spec;
    spec.rank = 2;
    spec.shape = {rows, cols};
    spec.symbolic_shape = symbolic_shape;
    spec.device = options.device;
    return check_tensor(view, path, spec);
}

Status check_routing_tensor(const LayerOptions& options, const TensorView& view, const std::string& path, DType dtype) {
    TensorSpec spec;
    spec.dtype = dtype;
    spec.rank = 2;
    spec.shape = {options.shape.tokens_per_rank, options.shape.top_k};
    spec.symbolic_shape = "[T, k]";
    spec.device = options.device;
    spec.contiguous = true;
    return check_tensor(view, path, spec);
}

// Gate and up [n, I, H], down [n, H, I]: the routed experts (n = E/R, I) or one shared expert (no leading
// dimension, I = I_s). `dtype` and `note` differ between weights and their gradients.
struct WeightTriple {
    const TensorView& gate;
    const TensorView& up;
    const TensorView& down;
};

Status check_weight_triple(const LayerOptions& options, const WeightTriple& w, const std::string& path,
                           int64_t num_experts, int64_t width, DType dtype, const char* note) {
    const int64_t hidden = options.shape.hidden;
    TensorSpec spec;
    spec.dtype = dtype;
    spec.device = options.device;
    spec.note = note;
    if (num_experts > 0) {
        spec.rank = 3;
        spec.shape = {num_experts, width, hidden};
        spec.symbolic_shape = "[E/R, I, H]";
    } else {
        spec.rank = 2;
        spec.shape = {width, hidden};
        spec.symbolic_shape = "[I_s, H]";
    }
    MOK_RETURN_IF_ERROR(check_tensor(w.gate, path + ".gate", spec));
    MOK_RETURN_IF_ERROR(check_tensor(w.up, path + ".up", spec));
    if (num_experts > 0) {
        spec.shape = {num_experts, hidden, width};
        spec.symbolic_shape = "[E/R, H, I]";
    } else {
        spec.shape = {hidden, width};
        spec.symbolic_shape = "[H, I_s]";
    }
    return check_tensor(w.down, path + ".down", spec);
}

template <typename Entry>
Status check_span_length(const LayerOptions& options, std::span<const Entry> entries, const char* name) {
    const auto expected = static_cast<size_t>(options.topology.num_local_ranks);
    if (entries.size() != expected) {
        return Status::invalid_argument(name, str(static_cast<int64_t>(expected)) +
                                                  " entries (one per local rank), got " +
                                                  str(static_cast<int64_t>(entries.size())));
    }
    return Status::ok();
}

Status check_shared_count(const LayerOptions& options, size_t count, const std::string& path) {
    const size_t expected = options.shape.shared_expert_widths.size();
    if (count != expected) {
        return Status::invalid_argument(path, str(static_cast<int64_t>(expected)) +
                                                  " shared experts (one per LayerShape::shared_expert_widths entry), "
                                                  "got " +
                                                  str(static_cast<int64_t>(count)));
    }
    return Status::ok();
}

Status check_grads(const LayerOptions& options, const BackwardArgs& a, const std::string& path) {
    const bool fresh = a.grad_mode == GradMode::kFresh;
    const DType dtype = fresh ? DType::kBF16 : DType::kF32;
    const char* note = fresh ? " (GradMode::kFresh)" : " (GradMode::kAccumulate)";
    const LayerShape& s = options.shape;
    MOK_RETURN_IF_ERROR(check_weight_triple(options, {a.d_experts.gate, a.d_experts.up, a.d_experts.down},
                                            path + ".d_experts", options.topology.num_local_experts(s), s.expert_width,
                                            dtype, note));
    MOK_RETURN_IF_ERROR(check_shared_count(options, a.d_shared.size(), path + ".d_shared"));
    for (size_t i = 0; i < a.d_shared.size(); ++i) {
        const SharedExpertWeightGrads& g = a.d_shared[i];
        MOK_RETURN_IF_ERROR(check_weight_triple(options, {g.gate, g.up, g.down}, index_path(path + ".d_shared", i), 0,
                                                s.shared_expert_widths[i], dtype, note));
    }
    return Status::ok();
}

// The Status for a token that failed plan::check_token, naming the offending element.
Status routing_error(const std::string& path, plan::TokenCheckResult r, int64_t token, const int32_t* token_ids,
                     float weight, int32_t num_experts) {
    std::string element = "[";
    element.append(str(token)).append("][").append(str(r.slot)).append("]");
    const int32_t id = token_ids[r.slot];
    switch (r.check) {
        case plan::TokenCheck::kOk:
            break;
        case plan::TokenCheck::kExpertOutOfRange:
            return Status::invalid_argument(
                path + ".expert_ids" + element,
                "a global expert id in [0, " + str(num_experts) + ") or -1 for an unused slot, got " + str(id));
        case plan::TokenCheck::kRepeatedExpert: {
            int32_t first = 0;
            while (token_ids[first] != id) {
                ++first;
            }
            return Status::invalid_argument(
                path + ".expert_ids" + element,
                "each expert at most once per token, got expert " + str(id) + ", already in slot " + str(first));
        }
        case plan::TokenCheck::kNonFiniteWeight:
            return Status::invalid_argument(path + ".router_weights" + element,
                                            "a finite router weight (the slot is used), got " + format_float(weight));
    }
    return Status::ok();
}

}  // namespace

Status check_tensor(const TensorView& view, const std::string& path, const TensorSpec& spec) {
    if (!view.defined()) {
        return Status::invalid_argument(path, "a tensor " + expectation(spec) + ", got " + view.describe());
    }
    if (view.dtype != spec.dtype) {
        return Status::invalid_argument(
            path, std::string("dtype ") + to_string(spec.dtype) + spec.note + ", got " + view.describe());
    }
    if (view.device != spec.device) {
        return Status::invalid_argument(path, "a tensor on " + to_string(spec.device) + ", got " + view.describe());
    }
    bool same_shape = view.rank == spec.rank;
    for (int d = 0; same_shape && d < spec.rank; ++d) {
        same_shape = view.shape[d] == spec.shape[d];
    }
    if (!same_shape) {
        return Status::invalid_argument(path, "shape " + format_shape(spec.shape, spec.rank) + " " +
                                                  spec.symbolic_shape + ", got " + view.describe());
    }
    MOK_RETURN_IF_ERROR(check_strides(view, path, spec));
    const auto address = reinterpret_cast<uintptr_t>(view.data);
    if (address % kRowAlignmentBytes != 0) {
        char text[64];
        std::snprintf(text, sizeof(text), "%#" PRIxPTR, address);
        return Status::invalid_argument(path, std::string("a 16-byte aligned data pointer, got ") + text);
    }
    return Status::ok();
}

Status check_layer_options(const LayerOptions& options) {
    MOK_RETURN_IF_ERROR(check_topology(options.topology));
    MOK_RETURN_IF_ERROR(check_shape(options.shape, options.topology));
    return check_config(options.config);
}

Status check_rank_inputs(const LayerOptions& options, const RankInputs& in, const std::string& path) {
    const LayerShape& s = options.shape;
    MOK_RETURN_IF_ERROR(check_bf16_matrix(options, in.x, path + ".x", "[T, H]", s.tokens_per_rank, s.hidden));
    MOK_RETURN_IF_ERROR(check_routing_tensor(options, in.expert_ids, path + ".expert_ids", DType::kI32));
    MOK_RETURN_IF_ERROR(check_routing_tensor(options, in.router_weights, path + ".router_weights", DType::kF32));
    MOK_RETURN_IF_ERROR(check_weight_triple(options, {in.experts.gate, in.experts.up, in.experts.down},
                                            path + ".experts", options.topology.num_local_experts(s), s.expert_width,
                                            DType::kBF16, ""));
    MOK_RETURN_IF_ERROR(check_shared_count(options, in.shared.size(), path + ".shared"));
    for (size_t i = 0; i < in.shared.size(); ++i) {
        const SharedExpertWeights& w = in.shared[i];
        MOK_RETURN_IF_ERROR(check_weight_triple(options, {w.gate, w.up, w.down}, index_path(path + ".shared", i), 0,
                                                s.shared_expert_widths[i], DType::kBF16, ""));
    }
    return Status::ok();
}

Status check_forward_args(const LayerOptions& options, std::span<const ForwardArgs> args) {
    MOK_RETURN_IF_ERROR(check_span_length(options, args, "args"));
    const LayerShape& s = options.shape;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string path = index_path("args", i);
        MOK_RETURN_IF_ERROR(check_rank_inputs(options, args[i].inputs, path + ".inputs"));
        MOK_RETURN_IF_ERROR(check_bf16_matrix(options, args[i].y, path + ".y", "[T, H]", s.tokens_per_rank, s.hidden));
    }
    return Status::ok();
}

Status check_recompute_args(const LayerOptions& options, std::span<const RankInputs> inputs) {
    MOK_RETURN_IF_ERROR(check_span_length(options, inputs, "inputs"));
    for (size_t i = 0; i < inputs.size(); ++i) {
        MOK_RETURN_IF_ERROR(check_rank_inputs(options, inputs[i], index_path("inputs", i)));
    }
    return Status::ok();
}

Status check_backward_args(const LayerOptions& options, std::span<const RankInputs> inputs,
                           std::span<const BackwardArgs> args) {
    MOK_RETURN_IF_ERROR(check_recompute_args(options, inputs));
    MOK_RETURN_IF_ERROR(check_span_length(options, args, "args"));
    const LayerShape& s = options.shape;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string path = index_path("args", i);
        const BackwardArgs& a = args[i];
        if (a.grad_mode != GradMode::kFresh && a.grad_mode != GradMode::kAccumulate) {
            return Status::invalid_argument(path + ".grad_mode", "GradMode::kFresh or GradMode::kAccumulate, got " +
                                                                     str(static_cast<int64_t>(a.grad_mode)));
        }
        if (a.grad_mode != args[0].grad_mode) {
            return Status::invalid_argument(path + ".grad_mode", "the GradMode of args[0] (one mode per call)");
        }
        MOK_RETURN_IF_ERROR(check_bf16_matrix(options, a.dy, path + ".dy", "[T, H]", s.tokens_per_rank, s.hidden));
        MOK_RETURN_IF_ERROR(check_bf16_matrix(options, a.dx, path + ".dx", "[T, H]", s.tokens_per_rank, s.hidden));
        MOK_RETURN_IF_ERROR(check_routing_tensor(options, a.d_router_weights, path + ".d_router_weights", DType::kF32));
        MOK_RETURN_IF_ERROR(check_grads(options, a, path));
    }
    return Status::ok();
}

Status check_routing_values(const LayerOptions& options, const RankInputs& in, const std::string& path) {
    const auto top_k = static_cast<int32_t>(options.shape.top_k);
    const auto num_experts = static_cast<int32_t>(options.shape.num_experts);
    const auto* ids = in.expert_ids.data_as<const int32_t>();
    const auto* weights = in.router_weights.data_as<const float>();
    for (int64_t t = 0; t < options.shape.tokens_per_rank; ++t) {
        const plan::TokenCheckResult r = plan::check_token(ids + t * top_k, weights + t * top_k, top_k, num_experts);
        if (r.check != plan::TokenCheck::kOk) {
            return routing_error(path, r, t, ids + t * top_k, weights[t * top_k + r.slot], num_experts);
        }
    }
    return Status::ok();
}

}  // namespace api

Status MoeLayer::validate(const LayerOptions& options) {
    MOK_RETURN_IF_ERROR(api::check_layer_options(options));
    const api::BackendProvider* backend = nullptr;
    MOK_RETURN_IF_ERROR(api::find_backend(options.backend, "options.backend", &backend));
    return backend->check_options(options);
}

}  // namespace mok
