#include "host/cpu/cpu_backend.hpp"

#include <cstddef>
#include <new>
#include <string>
#include <vector>

#include "host/api/validate.hpp"
#include "host/cpu/tensor_copy.hpp"
#include "host/plan/host_plan.hpp"
#include "reference/reference.hpp"

namespace mok::cpu {
namespace {

// Host workspaces are aligned as cudaMalloc aligns device memory, so that the same layout carves both.
constexpr size_t kWorkspaceAlignment = 256;

class HostWorkspace final : public Workspace {
  public:
    explicit HostWorkspace(size_t bytes)
        : bytes_(bytes), data_(bytes > 0 ? ::operator new (bytes, std::align_val_t{kWorkspaceAlignment}) : nullptr) {}
    ~HostWorkspace() override {
        if (data_ != nullptr) {
            ::operator delete (data_, std::align_val_t{kWorkspaceAlignment});
        }
    }
    HostWorkspace(const HostWorkspace&) = delete;
    HostWorkspace& operator=(const HostWorkspace&) = delete;

    size_t bytes() const override { return bytes_; }
    Backend backend() const override { return Backend::kCpuReference; }
    Device device() const override { return Device::cpu(); }
    void* data() override { return data_; }

  private:
    size_t bytes_;
    void* data_;
};

// Every rank's plan (all ranks are local), the row counts reported through stats(), and the expert ids the
// plans were built from, so that backward can refuse inputs other than the context's.
class CpuContext final : public api::ContextBase {
  public:
    using ContextBase::ContextBase;

    bool ready() const override { return ready_; }
    const RoutingStats& stats(int local_rank) const override {
        static const RoutingStats kNoStats;
        return local_rank >= 0 && local_rank < static_cast<int>(stats_.size()) ? stats_[local_rank] : kNoStats;
    }

    void reset() {
        ready_ = false;
        plans_.clear();
        stats_.clear();
        expert_ids_.clear();
    }
    void fill(std::vector<plan::HostPlan> plans, std::vector<std::vector<int32_t>> expert_ids);
    const std::vector<int32_t>& expert_ids(int rank) const { return expert_ids_[rank]; }

  private:
    bool ready_ = false;
    std::vector<plan::HostPlan> plans_;             // [R]
    std::vector<RoutingStats> stats_;               // [R]
    std::vector<std::vector<int32_t>> expert_ids_;  // [R][T * k]
};

RoutingStats routing_stats(const plan::HostPlan& plan) {
    const plan::PlanShape& s = plan.shape;
    RoutingStats stats;
    stats.rows_from_rank.assign(s.ep_size, 0);
    for (int32_t l = 0; l < s.num_local_experts(); ++l) {
        stats.rows_per_local_expert.push_back(plan.local_expert_rows(l));
        const int32_t expert = s.rank * s.num_local_experts() + l;
        for (int32_t src = 0; src < s.ep_size; ++src) {
            for (int32_t c = 0; c < s.num_chunks(); ++c) {
                stats.rows_from_rank[src] += plan.chunk_counts[s.chunk_index(expert, src, c)];
            }
        }
    }
    stats.padded_rows = plan.padded_rows();
    return stats;
}

void CpuContext::fill(std::vector<plan::HostPlan> plans, std::vector<std::vector<int32_t>> expert_ids) {
    plans_ = std::move(plans);
    expert_ids_ = std::move(expert_ids);
    stats_.clear();
    for (const plan::HostPlan& plan : plans_) {
        stats_.push_back(routing_stats(plan));
    }
    ready_ = true;
}

std::string rank_path(const char* base, size_t rank, const char* member) {
    return std::string(base) + "[" + std::to_string(rank) + "]" + member;
}

reference::ExpertParams read_weights(const TensorView& gate, const TensorView& up, const TensorView& down) {
    return {read_bf16(gate), read_bf16(up), read_bf16(down)};
}

// The reference's problem: the layer's shape and config with every rank's inputs (only shape, config and
// ep_size when `inputs` is empty, which is all the plan needs).
reference::Problem make_problem(const LayerOptions& options, const std::vector<const RankInputs*>& inputs) {
    reference::Problem problem;
    problem.shape = options.shape;
    problem.config = options.config;
    problem.ep_size = options.topology.ep_size;
    for (const RankInputs* in : inputs) {
        reference::RankInputs& rank = problem.ranks.emplace_back();
        rank.x = read_bf16(in->x);
        rank.expert_ids = read_i32(in->expert_ids);
        rank.router_weights = read_f32(in->router_weights);
        rank.experts = read_weights(in->experts.gate, in->experts.up, in->experts.down);
        for (const SharedExpertWeights& shared : in->shared) {
            rank.shared.push_back(read_weights(shared.gate, shared.up, shared.down));
        }
    }
    return problem;
}

class CpuLayer final : public api::CheckedLayer {
  public:
    CpuLayer(const LayerOptions& options, std::shared_ptr<Workspace> workspace)
        : CheckedLayer(options, std::move(workspace)) {}

    Status create_context(std::unique_ptr<ForwardContext>* out) const override {
        if (out == nullptr) {
            return Status::invalid_argument("out", "a non-null pointer");
        }
        *out = std::make_unique<CpuContext>(id());
        return Status::ok();
    }

  protected:
    Status run_forward(std::span<const ForwardArgs> args, api::ContextBase& context, void* stream) override;
    Status run_recompute_forward(std::span<const RankInputs> inputs, api::ContextBase& context, void* stream) override;
    Status run_backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                        const api::ContextBase& context, void* stream) override;

  private:
    Status check_routing(const std::vector<const RankInputs*>& inputs, const char* base, const char* member) const;
    Status build_plans(const std::vector<const RankInputs*>& inputs, CpuContext* context) const;
};

Status CpuLayer::check_routing(const std::vector<const RankInputs*>& inputs, const char* base,
                               const char* member) const {
    for (size_t r = 0; r < inputs.size(); ++r) {
        MOK_RETURN_IF_ERROR(api::check_routing_values(options(), *inputs[r], rank_path(base, r, member)));
    }
    return Status::ok();
}

// Every rank's plan, as every rank builds it from the all-gathered ids; the first rank whose experts need
// more rows than the schedule holds fails the call before any output is written.
Status CpuLayer::build_plans(const std::vector<const RankInputs*>& inputs, CpuContext* context) const {
    const reference::Problem skeleton = make_problem(options(), {});
    std::vector<std::vector<int32_t>> ids;
    std::vector<const int32_t*> id_pointers;
    for (const RankInputs* in : inputs) {
        ids.push_back(read_i32(in->expert_ids));
        id_pointers.push_back(ids.back().data());
    }
    std::vector<plan::HostPlan> plans(inputs.size());
    for (size_t r = 0; r < inputs.size(); ++r) {
        plan::build_host_plan(reference::plan_shape(skeleton, static_cast<int>(r)), id_pointers, &plans[r]);
        if (plans[r].plan_status() != plan::PlanStatus::kOk) {
            return {StatusCode::kScheduleOverflow,
                    "rank " + std::to_string(r) + ": its experts need " + std::to_string(plans[r].padded_rows()) +
                        " padded rows, the schedule holds " + std::to_string(plans[r].shape.capacity_rows) +
                        " (Config::schedule_capacity_factor " +
                        std::to_string(options().config.schedule_capacity_factor) + "; 0 sizes it for the worst case)"};
        }
    }
    context->fill(std::move(plans), std::move(ids));
    return Status::ok();
}

std::vector<const RankInputs*> pointers_to(std::span<const RankInputs> inputs) {
    std::vector<const RankInputs*> pointers;
    for (const RankInputs& in : inputs) {
        pointers.push_back(&in);
    }
    return pointers;
}

Status CpuLayer::run_forward(std::span<const ForwardArgs> args, api::ContextBase& context, void* /*stream*/) {
    auto& ctx = static_cast<CpuContext&>(context);
    ctx.reset();
    std::vector<const RankInputs*> inputs;
    for (const ForwardArgs& a : args) {
        inputs.push_back(&a.inputs);
    }
    MOK_RETURN_IF_ERROR(check_routing(inputs, "args", ".inputs"));
    MOK_RETURN_IF_ERROR(build_plans(inputs, &ctx));
    std::vector<reference::RankForward> out;
    std::string error;
    if (!reference::forward(make_problem(options(), inputs), reference::Precision::kDevice, &out, &error)) {
        ctx.reset();
        return {StatusCode::kInternal, "the CPU reference refused checked inputs: " + error};
    }
    for (size_t r = 0; r < args.size(); ++r) {
        write_bf16(args[r].y, out[r].y);
    }
    return Status::ok();
}

Status CpuLayer::run_recompute_forward(std::span<const RankInputs> inputs, api::ContextBase& context,
                                       void* /*stream*/) {
    // The reference's backward recomputes the activations from the inputs, so the context needs only the plans.
    auto& ctx = static_cast<CpuContext&>(context);
    ctx.reset();
    const std::vector<const RankInputs*> pointers = pointers_to(inputs);
    MOK_RETURN_IF_ERROR(check_routing(pointers, "inputs", ""));
    return build_plans(pointers, &ctx);
}

Status CpuLayer::run_backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                              const api::ContextBase& context, void* /*stream*/) {
    const auto& ctx = static_cast<const CpuContext&>(context);
    const std::vector<const RankInputs*> pointers = pointers_to(inputs);
    MOK_RETURN_IF_ERROR(check_routing(pointers, "inputs", ""));
    for (size_t r = 0; r < inputs.size(); ++r) {
        if (read_i32(inputs[r].expert_ids) != ctx.expert_ids(static_cast<int>(r))) {
            return Status::invalid_argument(rank_path("inputs", r, ".expert_ids"),
                                            "the expert ids the context was made from (the inputs of its forward or "
                                            "recompute_forward)");
        }
    }
    std::vector<std::vector<double>> dy;
    for (const BackwardArgs& a : args) {
        dy.push_back(read_bf16(a.dy));
    }
    std::vector<reference::RankGrads> grads;
    std::string error;
    if (!reference::backward(make_problem(options(), pointers), dy, reference::Precision::kDevice, &grads, &error)) {
        return {StatusCode::kInternal, "the CPU reference refused checked inputs: " + error};
    }
    for (size_t r = 0; r < args.size(); ++r) {
        const BackwardArgs& a = args[r];
        const reference::RankGrads& g = grads[r];
        write_bf16(a.dx, g.dx);
        write_f32(a.d_router_weights, g.d_router_weights);
        // Fresh: the fp32 sum rounded to bf16 once; accumulate: added to main_grad in one fp32 rounding.
        const auto store = a.grad_mode == GradMode::kFresh ? write_bf16 : accumulate_f32;
        store(a.d_experts.gate, g.d_experts.gate);
        store(a.d_experts.up, g.d_experts.up);
        store(a.d_experts.down, g.d_experts.down);
        for (size_t s = 0; s < a.d_shared.size(); ++s) {
            store(a.d_shared[s].gate, g.d_shared[s].gate);
            store(a.d_shared[s].up, g.d_shared[s].up);
            store(a.d_shared[s].down, g.d_shared[s].down);
        }
    }
    return Status::ok();
}

class CpuBackend final : public api::BackendProvider {
  public:
    Status check_options(const LayerOptions& options) const override {
        if (options.device != Device::cpu()) {
            return Status::invalid_argument("options.device",
                                            "cpu for Backend::kCpuReference, got " + to_string(options.device));
        }
        if (options.communicator != nullptr) {
            return Status::invalid_argument("options.communicator",
                                            "null for Backend::kCpuReference, which simulates every rank locally");
        }
        if (options.topology.num_local_ranks != options.topology.ep_size) {
            return {StatusCode::kNotSupported,
                    "Backend::kCpuReference simulates the whole EP group in one process: topology.num_local_ranks "
                    "must equal ep_size (" +
                        std::to_string(options.topology.ep_size) + "), got " +
                        std::to_string(options.topology.num_local_ranks)};
        }
        return Status::ok();
    }

    // The reference keeps its scratch in its own containers.
    size_t workspace_bytes(const LayerOptions& /*options*/) const override { return 0; }

    Status create_workspace(Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                            std::shared_ptr<Workspace>* out) const override {
        if (device != Device::cpu()) {
            return Status::invalid_argument("device", "cpu for Backend::kCpuReference, got " + to_string(device));
        }
        if (communicator != nullptr) {
            return Status::invalid_argument("communicator",
                                            "null for Backend::kCpuReference, which simulates every rank locally");
        }
        *out = std::make_shared<HostWorkspace>(bytes);
        return Status::ok();
    }

    Status create_layer(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                        std::unique_ptr<MoeLayer>* out) const override {
        *out = std::make_unique<CpuLayer>(options, std::move(workspace));
        return Status::ok();
    }
};

}  // namespace

const api::BackendProvider& backend() {
    static const CpuBackend provider;
    return provider;
}

}  // namespace mok::cpu
