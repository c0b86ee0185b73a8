#include "layer/layer_runs.hpp"

#include <stdexcept>
#include <utility>

#include "common/bf16.hpp"
#include "common/bit_compare.hpp"
#include "reference/reference.hpp"
#include "reference/tolerance.hpp"

namespace mok::testing {
namespace {

std::string rank_name(int r, const std::string& what) {
    return "rank " + std::to_string(r) + " " + what;
}

void add_weights(std::vector<Named>& out, const std::string& name, const WeightTensors& w) {
    out.push_back({name + ".gate", w.gate.values()});
    out.push_back({name + ".up", w.up.values()});
    out.push_back({name + ".down", w.down.values()});
}

void add_sums(std::vector<Named>& out, const std::string& name, const reference::ExpertParams& p) {
    out.push_back({name + ".gate", p.gate});
    out.push_back({name + ".up", p.up});
    out.push_back({name + ".down", p.down});
}

std::string shared_name(size_t s) {
    return "d_shared[" + std::to_string(s) + "]";
}

}  // namespace

Status cuda_backend_ready() {
    LayerOptions probe;
    probe.shape = {8, 8, 8, 1, 1, {}};
    probe.backend = Backend::kCuda;
    probe.device = Device::cuda(kDevice);
    return MoeLayer::validate(probe);
}

Status make_layer(const LayerOptions& options, LayerUnderTest* out, std::shared_ptr<Workspace> workspace) {
    if (workspace == nullptr) {
        size_t bytes = 0;
        MOK_RETURN_IF_ERROR(MoeLayer::workspace_bytes(options, &bytes));
        MOK_RETURN_IF_ERROR(Workspace::create(options.backend, options.device, bytes, &workspace));
    }
    out->workspace = workspace;
    MOK_RETURN_IF_ERROR(MoeLayer::create(options, std::move(workspace), &out->layer));
    return out->layer->create_context(&out->context);
}

TestStream::TestStream() {
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
        throw std::runtime_error("cudaStreamCreateWithFlags failed");
    }
}

TestStream::~TestStream() {
    cudaStreamDestroy(stream_);
}

Status run_step(LayerUnderTest& l, const DeviceProblem& problem, GradMode mode, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(l.layer->forward(problem.forward_args(), l.context.get(), stream));
    MOK_RETURN_IF_ERROR(l.layer->synchronize(stream));
    MOK_RETURN_IF_ERROR(l.layer->backward(problem.inputs(), problem.backward_args(mode), *l.context, stream));
    return l.layer->synchronize(stream);
}

Status run_cpu_backend(ApiProblem& api, GradMode mode) {
    LayerOptions options = api.options();
    size_t bytes = 0;
    MOK_RETURN_IF_ERROR(MoeLayer::workspace_bytes(options, &bytes));
    std::shared_ptr<Workspace> workspace;
    MOK_RETURN_IF_ERROR(Workspace::create(options.backend, options.device, bytes, &workspace));
    std::unique_ptr<MoeLayer> layer;
    MOK_RETURN_IF_ERROR(MoeLayer::create(options, workspace, &layer));
    std::unique_ptr<ForwardContext> context;
    MOK_RETURN_IF_ERROR(layer->create_context(&context));
    MOK_RETURN_IF_ERROR(layer->forward(api.forward_args(), context.get()));
    return layer->backward(api.inputs(), api.backward_args(mode), *context);
}

std::vector<Named> outputs_of(const ApiProblem& api, GradMode mode) {
    const bool fresh = mode == GradMode::kFresh;
    std::vector<Named> out;
    for (int r = 0; r < api.ep_size(); ++r) {
        const ApiRank& rank = api.rank(r);
        out.push_back({rank_name(r, "y"), rank.y.values()});
        out.push_back({rank_name(r, "dx"), rank.dx.values()});
        out.push_back({rank_name(r, "d_router_weights"), rank.d_router_weights.values()});
        add_weights(out, rank_name(r, "d_experts"), fresh ? rank.d_experts_fresh : rank.d_experts_main);
        for (size_t s = 0; s < rank.shared.size(); ++s) {
            add_weights(out, rank_name(r, shared_name(s)), fresh ? rank.d_shared_fresh[s] : rank.d_shared_main[s]);
        }
    }
    return out;
}

std::vector<Named> main_grads_of(const ApiProblem& api) {
    std::vector<Named> out;
    for (int r = 0; r < api.ep_size(); ++r) {
        const ApiRank& rank = api.rank(r);
        add_weights(out, rank_name(r, "d_experts"), rank.d_experts_main);
        for (size_t s = 0; s < rank.shared.size(); ++s) {
            add_weights(out, rank_name(r, shared_name(s)), rank.d_shared_main[s]);
        }
    }
    return out;
}

Oracle run_oracle(const RandomCase& c) {
    Oracle o;
    std::string error;
    if (!reference::forward(c.problem, reference::Precision::kOracle, &o.forward, &error) ||
        !reference::backward(c.problem, c.dy, reference::Precision::kOracle, &o.grads, &error)) {
        throw std::runtime_error("the fp64 oracle refused the problem: " + error);
    }
    return o;
}

std::vector<Named> oracle_outputs(const Oracle& oracle, GradMode mode, const std::vector<Named>& main_grad_before) {
    const std::vector<reference::RankForward>& forward = oracle.forward;
    const std::vector<reference::RankGrads>& grads = oracle.grads;
    std::vector<Named> out;
    size_t next_before = 0;  // main_grad_before lists the gradients in the order they are appended below
    for (size_t r = 0; r < grads.size(); ++r) {
        out.push_back({rank_name(static_cast<int>(r), "y"), forward[r].y});
        const int rank = static_cast<int>(r);
        out.push_back({rank_name(rank, "dx"), grads[r].dx});
        out.push_back({rank_name(rank, "d_router_weights"), grads[r].d_router_weights});
        const size_t first_grad = out.size();
        add_sums(out, rank_name(rank, "d_experts"), grads[r].d_experts);
        for (size_t s = 0; s < grads[r].d_shared.size(); ++s) {
            add_sums(out, rank_name(rank, shared_name(s)), grads[r].d_shared[s]);
        }
        if (mode == GradMode::kAccumulate) {
            for (size_t i = first_grad; i < out.size(); ++i) {
                const Named& before = main_grad_before.at(next_before++);
                for (size_t n = 0; n < out[i].values.size(); ++n) {
                    out[i].values[n] += before.values.at(n);
                }
            }
        }
    }
    return out;
}

::testing::AssertionResult same_outputs(const std::vector<Named>& got, const std::vector<Named>& want) {
    if (got.size() != want.size()) {
        return ::testing::AssertionFailure() << got.size() << " outputs, expected " << want.size();
    }
    for (size_t i = 0; i < got.size(); ++i) {
        if (auto result = same_bits(got[i].name, got[i].values, want[i].values); !result) {
            return result;
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult outputs_within_tolerance(const std::vector<Named>& got, const std::vector<Named>& same,
                                                    const std::vector<Named>& oracle) {
    if (got.size() != same.size() || got.size() != oracle.size()) {
        return ::testing::AssertionFailure() << "output lists differ in length";
    }
    for (size_t i = 0; i < got.size(); ++i) {
        const tolerance::Verdict v = tolerance::judge(got[i].values, same[i].values, oracle[i].values);
        if (!v.pass) {
            return ::testing::AssertionFailure() << got[i].name << ": " << v.describe();
        }
    }
    return ::testing::AssertionSuccess();
}

std::vector<Named> global_outputs(const ApiProblem& api, GradMode mode) {
    const bool fresh = mode == GradMode::kFresh;
    std::vector<Named> out = {{"y", {}},
                              {"dx", {}},
                              {"d_router_weights", {}},
                              {"d_experts.gate", {}},
                              {"d_experts.up", {}},
                              {"d_experts.down", {}}};
    for (int r = 0; r < api.ep_size(); ++r) {
        const ApiRank& rank = api.rank(r);
        const WeightTensors& d = fresh ? rank.d_experts_fresh : rank.d_experts_main;
        const HostTensor* parts[] = {&rank.y, &rank.dx, &rank.d_router_weights, &d.gate, &d.up, &d.down};
        for (size_t p = 0; p < out.size(); ++p) {
            const std::vector<double> values = parts[p]->values();
            out[p].values.insert(out[p].values.end(), values.begin(), values.end());
        }
    }
    return out;
}

}  // namespace mok::testing
