// mok-bench-layer: the MoE layer on the GPU (Backend::kCuda) through the public API, forward and backward, at
// EP 1 (GPU 0) and EP 2 (GPUs 0 and 1, one rank per GPU driven from this process), for the model presets.
//
// Case names match bench/baselines/layer_baseline.py's ("<model>/ep<R>/t<T>/<routing>/<pass>"), so the report
// pairs each with the NCCL+PyTorch layer measured in the same run. Figures per case: time (the slower rank's),
// the rate of the pass's expert FLOPs per rank, that rate as a fraction of the same-run dense cuBLAS rate (the
// compute roofline), the time the bytes any implementation must move take at the same-run one-way DRAM ceilings
// and its fraction of the pass's time (the memory roofline, memory_floor.hpp), and the device memory in use on the
// rank (weights, gradients, activations, workspace).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"
#include "bench/common/buffers.hpp"
#include "bench/layer/memory_floor.hpp"
#include "bench/layer/routing.hpp"
#include "mok/mok.hpp"

namespace mok::bench::layer {
namespace {

constexpr uint64_t kSeed = 20261129;
constexpr double kZipfExponent = 1.2;  // as the baselines (docs/benchmarking.md)
constexpr double kBytesPerGiB = 1073741824.0;
constexpr double kFlopsPerTflop = 1e12;
// Values of x, dy and the weights: small, so that sums over thousands of terms stay well inside bf16's range.
constexpr float kActivationScale = 1.0f;
constexpr float kWeightScale = 0.02f;
// Starting values of fp32 main_grad in accumulate mode: of the order of a few steps' gradients.
constexpr float kMainGradScale = 0.01f;
// Long cases: fewer repetitions than the library default (the JSON config records them). The warm-up lasts two
// seconds of device time, longer than the library's default: the layer's GEMMs run at the board's power cap, and the
// cap's controller, which follows a power averaged over about a second, drops the clock to 0.8-1.1 GHz for a pass or
// two some 0.8 s after a load starts (a clock trace, docs/benchmarking.md, "Warm-up to the steady clock"). With two
// passes of warm-up the timed ones ran at an idle GPU's clock (DeepSeek-V3's EP 2 forward 6.3-6.4 ms, then 7.2 ms);
// with 0.3 s the repetitions of some cases met that dip.
constexpr int kReps = 10;
constexpr double kWarmupMs = 2000.0;
constexpr int kQuickReps = 4;
// The compute ceiling: a dense bf16 GEMM of this size, timed by cuBLAS in the same run.
constexpr int64_t kCeilingGemmSize = 8192;
// The one-way DRAM ceilings' buffer: far beyond the 50 MB L2, as mok-bench-gemm's.
constexpr size_t kDramCeilingBytes = size_t{4} << 30;
constexpr double kMsPerSecond = 1e3;
// Steps of the stage-recording layer whose stage times are averaged.
constexpr int kProfiledSteps = 3;
// Seeds of the routings run before a case's own (--prior-routings): far from the case's kSeed + rank.
constexpr uint64_t kPriorRoutingSeedStride = 1000;

struct LayerCase {
    const ModelPreset* model = nullptr;
    int64_t tokens = 0;
    int ep = 1;
    std::string routing;      // "uniform", "zipf" or "balanced" (make_expert_ids)
    int comm_sms = 0;         // Config::num_comm_sms_forward and _backward; 0: the library's choice
    bool one_stream = false;  // the timed layer runs the one-stream order too (--one-stream)
    // Config::gemm_pingpong and gemm_epilogue_warps at their defaults, or both off (--gemm-cooperative adds cases
    // with every GEMM in the cooperative arrangement).
    bool gemm_arrangements = true;
    ForwardCombine forward_combine = ForwardCombine::kAuto;  // Config::forward_combine (--forward-combine)
    // Steps with other routings before the case's first step (--prior-routings), so that the rows the case's plan
    // leaves as padding hold an earlier step's data, as in training, rather than the zeros of a fresh workspace.
    int prior_routings = 0;
    // How backward writes the weight gradients (--grad-modes): fresh bf16 tensors, or added into fp32 main_grad. An
    // accumulate case times the backward alone: its forward is the fresh case's.
    GradMode grad_mode = GradMode::kFresh;
    // Config::dispatch_token_groups (--token-groups adds cases with it on).
    bool token_groups = false;

    // A case at the library's choices keeps the name its same-run baseline pairs with; others say theirs.
    std::string name(const char* pass) const {
        const std::string sms = comm_sms > 0 ? "/comm" + std::to_string(comm_sms) : "";
        const std::string order = one_stream ? "/one-stream" : "";
        const std::string arrangement = gemm_arrangements ? "" : "/cooperative";
        const std::string combine = forward_combine == ForwardCombine::kAuto ? "" : "/" + combine_name();
        const std::string grads = grad_mode == GradMode::kFresh ? "" : "/" + grad_mode_name();
        const std::string pull = token_groups ? "/token-groups" : "";
        return std::string(model->name) + "/ep" + std::to_string(ep) + "/t" + std::to_string(tokens) + "/" + routing +
               sms + order + arrangement + combine + pull + grads + "/" + pass;
    }

    std::string grad_mode_name() const { return grad_mode == GradMode::kFresh ? "fresh" : "accumulate"; }

    std::string combine_name() const { return to_string(forward_combine); }
};

void check(const Status& status, const std::string& what) {
    if (!status.is_ok()) {
        throw std::runtime_error(what + ": " + status.to_string());
    }
}

// Expert ids [T, k] of one rank: k distinct experts per token, uniform or Zipf-skewed over a seeded order, or
// balanced (routing.hpp: every expert the same rows, the padding-free reference for uniform routing). `variant` 0 is
// the case's routing; others are the prior routings', with the same skew and other draws (balanced draws nothing).
std::vector<int32_t> make_expert_ids(const LayerCase& c, int rank, int variant) {
    const int64_t num_experts = c.model->num_experts;
    const int64_t k = c.model->top_k;
    if (c.routing == "balanced") {
        return balanced_expert_ids(c.tokens, k, num_experts, rank);
    }
    std::mt19937_64 rng(kSeed + kPriorRoutingSeedStride * static_cast<uint64_t>(variant) + static_cast<uint64_t>(rank));
    std::vector<double> weights(num_experts, 1.0);
    if (c.routing == "zipf") {
        std::vector<int64_t> order(num_experts);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937_64(kSeed));
        for (int64_t e = 0; e < num_experts; ++e) {
            weights[e] = 1.0 / std::pow(static_cast<double>(order[e] + 1), kZipfExponent);
        }
    }
    std::vector<int32_t> ids(c.tokens * k);
    for (int64_t t = 0; t < c.tokens; ++t) {
        std::vector<double> w = weights;
        for (int64_t s = 0; s < k; ++s) {
            std::discrete_distribution<int32_t> pick(w.begin(), w.end());
            const int32_t e = pick(rng);
            ids[t * k + s] = e;
            w[e] = 0.0;  // distinct experts per token
        }
    }
    return ids;
}

// Expert FLOPs of one rank's forward: three GEMMs of 2 H I per routed (token, slot) and per shared expert row.
double forward_flops(const LayerCase& c) {
    const double h = static_cast<double>(c.model->hidden);
    double flops = static_cast<double>(c.tokens) * c.model->top_k * 6.0 * h * c.model->expert_width;
    for (const int64_t width : c.model->shared_expert_widths) {
        flops += static_cast<double>(c.tokens) * 6.0 * h * width;
    }
    return flops;
}

// The same run's one-way DRAM ceilings (GB/s) the memory floors divide by.
struct DramCeilings {
    double read_gb_per_s = 0.0;
    double write_gb_per_s = 0.0;
};

// The slowest rank's memory floor of each pass, in ms: the rank whose experts with rows are the most.
struct PassFloors {
    double forward_ms = 0.0;
    double backward_ms = 0.0;
};

// NaN where a ceiling did not measure (the cases then go without their floor figures).
PassFloors memory_floors(const LayerCase& c, const DramCeilings& dram) {
    if (!(dram.read_gb_per_s > 0.0) || !(dram.write_gb_per_s > 0.0)) {
        return {NAN, NAN};
    }
    std::vector<std::vector<int32_t>> ids(c.ep);
    for (int r = 0; r < c.ep; ++r) {
        ids[r] = make_expert_ids(c, r, 0);
    }
    FloorShape shape;
    shape.tokens = c.tokens;
    shape.hidden = c.model->hidden;
    shape.expert_width = c.model->expert_width;
    shape.local_experts = c.model->num_experts / c.ep;
    shape.shared_widths.assign(c.model->shared_expert_widths.begin(), c.model->shared_expert_widths.end());
    shape.accumulate = c.grad_mode == GradMode::kAccumulate;
    PassFloors floors;
    for (int r = 0; r < c.ep; ++r) {
        shape.local_experts_with_rows = local_experts_with_rows(ids, c.model->num_experts, r);
        floors.forward_ms =
            std::max(floors.forward_ms, floor_ms(forward_bytes(shape), dram.read_gb_per_s, dram.write_gb_per_s));
        floors.backward_ms =
            std::max(floors.backward_ms, floor_ms(backward_bytes(shape), dram.read_gb_per_s, dram.write_gb_per_s));
    }
    return floors;
}

// Everything one rank owns: its data, weights, gradients, layer and context, on its own device and stream.
class Rank {
  public:
    Rank(const LayerCase& c, int rank, std::shared_ptr<Communicator> communicator)
        : rank_(rank), device_(rank), stream_(device_) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        const LayerShape shape = c.model->layer_shape(c.tokens);
        const int64_t t = shape.tokens_per_rank;
        const int64_t h = shape.hidden;
        const int64_t i = shape.expert_width;
        const int64_t k = shape.top_k;
        const int64_t local = shape.num_experts / c.ep;
        const Device dev = Device::cuda(device_);
        auto bf16 = [&](int64_t count) { return std::make_unique<DeviceBuffer<__nv_bfloat16>>(device_, count); };
        x_ = bf16(t * h);
        y_ = bf16(t * h);
        dy_ = bf16(t * h);
        dx_ = bf16(t * h);
        weights_ = bf16(3 * local * i * h);
        ids_ = std::make_unique<DeviceBuffer<int32_t>>(device_, t * k);
        router_ = std::make_unique<DeviceBuffer<float>>(device_, t * k);
        d_router_ = std::make_unique<DeviceBuffer<float>>(device_, t * k);
        int64_t shared_elems = 0;
        for (const int64_t w : shape.shared_expert_widths) {
            shared_elems += 3 * w * h;
        }
        shared_weights_ = bf16(std::max<int64_t>(shared_elems, 1));
        // One buffer for every weight gradient, routed then shared: bf16 when fresh, fp32 main_grad when accumulating.
        const bool accumulate = c.grad_mode == GradMode::kAccumulate;
        const DType grad_dtype = accumulate ? DType::kF32 : DType::kBF16;
        const int64_t grad_elems = 3 * local * i * h + shared_elems;
        const size_t grad_bytes = accumulate ? sizeof(float) : sizeof(__nv_bfloat16);
        grads_ = std::make_unique<DeviceBuffer<uint8_t>>(device_, grad_elems * grad_bytes);

        const uint64_t seed = kSeed + 100 * static_cast<uint64_t>(rank);
        const cudaStream_t s = stream_.get();
        fill_uniform(x_->get(), x_->count(), -kActivationScale, kActivationScale, seed + 1, s);
        fill_uniform(dy_->get(), dy_->count(), -kActivationScale, kActivationScale, seed + 2, s);
        fill_uniform(router_->get(), router_->count(), 0.0f, 1.0f, seed + 3, s);
        fill_uniform(weights_->get(), weights_->count(), -kWeightScale, kWeightScale, kSeed + 10 + rank, s);
        fill_uniform(shared_weights_->get(), shared_weights_->count(), -kWeightScale, kWeightScale, kSeed + 20, s);
        if (accumulate) {
            // main_grad as a training step finds it: earlier steps' sums, not zeros.
            fill_uniform(reinterpret_cast<float*>(grads_->get()), grad_elems, -kMainGradScale, kMainGradScale, seed + 4,
                         s);
        }
        upload_ids(make_expert_ids(c, rank, 0));

        const auto view = [&](void* data, DType dtype, std::initializer_list<int64_t> dims) {
            return TensorView::contiguous(data, dtype, dims, dev);
        };
        inputs_.x = view(x_->get(), DType::kBF16, {t, h});
        inputs_.expert_ids = view(ids_->get(), DType::kI32, {t, k});
        inputs_.router_weights = view(router_->get(), DType::kF32, {t, k});
        __nv_bfloat16* w = weights_->get();
        inputs_.experts = {view(w, DType::kBF16, {local, i, h}), view(w + local * i * h, DType::kBF16, {local, i, h}),
                           view(w + 2 * local * i * h, DType::kBF16, {local, h, i})};
        // The gradient of `offset` elements into the grads buffer, in its dtype.
        const auto grad = [&](int64_t offset, std::initializer_list<int64_t> dims) {
            return view(grads_->get() + offset * grad_bytes, grad_dtype, dims);
        };
        backward_.d_experts = {grad(0, {local, i, h}), grad(local * i * h, {local, i, h}),
                               grad(2 * local * i * h, {local, h, i})};
        __nv_bfloat16* sw = shared_weights_->get();
        int64_t sg = 3 * local * i * h;
        for (const int64_t width : shape.shared_expert_widths) {
            inputs_.shared.push_back({view(sw, DType::kBF16, {width, h}),
                                      view(sw + width * h, DType::kBF16, {width, h}),
                                      view(sw + 2 * width * h, DType::kBF16, {h, width})});
            backward_.d_shared.push_back(
                {grad(sg, {width, h}), grad(sg + width * h, {width, h}), grad(sg + 2 * width * h, {h, width})});
            sw += 3 * width * h;
            sg += 3 * width * h;
        }
        forward_.inputs = inputs_;
        forward_.y = view(y_->get(), DType::kBF16, {t, h});
        backward_.dy = view(dy_->get(), DType::kBF16, {t, h});
        backward_.dx = view(dx_->get(), DType::kBF16, {t, h});
        backward_.d_router_weights = view(d_router_->get(), DType::kF32, {t, k});
        backward_.grad_mode = c.grad_mode;

        LayerOptions options;
        options.shape = shape;
        options.topology = Topology{c.ep, rank, 1};
        options.backend = Backend::kCuda;
        options.device = dev;
        options.communicator = std::move(communicator);
        options.config.num_comm_sms_forward = c.comm_sms;
        options.config.num_comm_sms_backward = c.comm_sms;
        // Recording stage times puts a layer on the one-stream order (docs/layer.md, section 2).
        options.config.record_stage_times = c.one_stream;
        if (!c.gemm_arrangements) {
            options.config.gemm_pingpong = false;
            options.config.gemm_epilogue_warps = false;
        }
        options.config.forward_combine = c.forward_combine;
        options.config.dispatch_token_groups = c.token_groups;
        size_t bytes = 0;
        check(MoeLayer::workspace_bytes(options, &bytes), "workspace_bytes");
        check(Workspace::create(Backend::kCuda, dev, bytes, options.communicator, &workspace_), "Workspace::create");
        check(MoeLayer::create(options, workspace_, &layer_), "MoeLayer::create");
        check(layer_->create_context(&context_), "create_context");
        // A second layer on the same workspace records its stage times; the timed one records nothing, so the
        // events cost the timed figures nothing.
        options.config.record_stage_times = true;
        check(MoeLayer::create(options, workspace_, &profiled_), "MoeLayer::create (stage times)");
        check(profiled_->create_context(&profiled_context_), "create_context (stage times)");
    }

    // Makes `ids` the expert ids of the following steps (the copy is synchronous: `ids` may go right after).
    void upload_ids(const std::vector<int32_t>& ids) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        MOK_BENCH_CHECK_CUDA(cudaMemcpyAsync(ids_->get(), ids.data(), ids.size() * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream_.get()));
        stream_.synchronize();
    }

    // One forward and backward of the stage-recording layer.
    void profiled_step() {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        check(profiled_->forward({&forward_, 1}, profiled_context_.get(), stream_.get()), "forward (stage times)");
        check(profiled_->backward({&inputs_, 1}, {&backward_, 1}, *profiled_context_, stream_.get()),
              "backward (stage times)");
    }

    std::vector<StageTime> stage_times() {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        check(profiled_->synchronize(stream_.get()), "rank " + std::to_string(rank_) + " (stage times)");
        return profiled_->stage_times();
    }

    void forward() {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        check(layer_->forward({&forward_, 1}, context_.get(), stream_.get()), "forward");
    }

    void backward() {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        check(layer_->backward({&inputs_, 1}, {&backward_, 1}, *context_, stream_.get()), "backward");
    }

    // Waits and reports device-side failures, and checks that y and dx hold finite values (a sampled check:
    // the GPU tests hold the layer to the CPU reference; here a broken build must not produce a figure).
    void check_results() {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        check(layer_->synchronize(stream_.get()), "rank " + std::to_string(rank_));
        for (const DeviceBuffer<__nv_bfloat16>* out : {y_.get(), dx_.get()}) {
            std::vector<__nv_bfloat16> host(std::min<size_t>(out->count(), 1 << 16));
            MOK_BENCH_CHECK_CUDA(cudaMemcpy(host.data(), out->get(), host.size() * 2, cudaMemcpyDeviceToHost));
            for (const __nv_bfloat16 v : host) {
                if (!std::isfinite(__bfloat162float(v))) {
                    throw std::runtime_error("rank " + std::to_string(rank_) + ": non-finite output");
                }
            }
        }
    }

    double memory_in_use_gib() const {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
        size_t free_bytes = 0;
        size_t total_bytes = 0;
        MOK_BENCH_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
        return static_cast<double>(total_bytes - free_bytes) / kBytesPerGiB;
    }

    StreamOnDevice stream() const { return {device_, stream_.get()}; }

  private:
    int rank_;
    int device_;
    Stream stream_;
    std::unique_ptr<DeviceBuffer<__nv_bfloat16>> x_, y_, dy_, dx_, weights_, shared_weights_;
    std::unique_ptr<DeviceBuffer<uint8_t>> grads_;  // every weight gradient, bf16 or fp32 (LayerCase::grad_mode)
    std::unique_ptr<DeviceBuffer<int32_t>> ids_;
    std::unique_ptr<DeviceBuffer<float>> router_, d_router_;
    RankInputs inputs_;
    ForwardArgs forward_;
    BackwardArgs backward_;
    std::shared_ptr<Workspace> workspace_;
    std::unique_ptr<MoeLayer> layer_;
    std::unique_ptr<ForwardContext> context_;
    std::unique_ptr<MoeLayer> profiled_;
    std::unique_ptr<ForwardContext> profiled_context_;
};

// The ranks of a case. EP 2 creates its communicator and workspaces collectively, one thread per rank.
std::vector<std::unique_ptr<Rank>> make_ranks(const LayerCase& c) {
    std::vector<std::unique_ptr<Rank>> ranks(c.ep);
    if (c.ep == 1) {
        ranks[0] = std::make_unique<Rank>(c, 0, nullptr);
        return ranks;
    }
    CommUniqueId id;
    check(Communicator::make_unique_id(&id), "make_unique_id");
    std::vector<std::string> errors(c.ep);
    std::vector<std::thread> threads;
    for (int r = 0; r < c.ep; ++r) {
        threads.emplace_back([&, r] {
            try {
                std::shared_ptr<Communicator> comm;
                check(Communicator::create(id, r, c.ep, r, &comm), "Communicator::create");
                ranks[r] = std::make_unique<Rank>(c, r, std::move(comm));
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    for (int r = 0; r < c.ep; ++r) {
        if (!errors[r].empty()) {
            throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
        }
    }
    return ranks;
}

// Host wall time of the timed bodies: how long the host takes to enqueue a pass, against which the GPU's time
// says whether the host keeps ahead of the GPU (if it did not, the timed figures would be the host's pace).
class HostClock {
  public:
    // Times its own lifetime into `clock` when `counted` (the timed repetitions, not the warm-up).
    class Scope {
      public:
        Scope(HostClock& clock, bool counted) : clock_(clock), counted_(counted), start_(Clock::now()) {}
        ~Scope() {
            if (counted_) {
                clock_.samples_ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
            }
        }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

      private:
        HostClock& clock_;
        bool counted_;
        std::chrono::steady_clock::time_point start_;
    };

    TimingStats stats() const { return summarize(samples_ms_); }

  private:
    using Clock = std::chrono::steady_clock;
    std::vector<double> samples_ms_;
};

// Rank 0's stage times of `pass` per step ("stage:<stage>" figures, ms): where the pass's time goes.
void add_stage_figures(const std::vector<StageTime>& stages, const char* pass, Case& out) {
    const std::string prefix = std::string(pass) + "/";
    for (const StageTime& t : stages) {
        if (t.stage.rfind(prefix, 0) == 0 && t.count > 0) {
            const double per_step = t.total_ms / static_cast<double>(kProfiledSteps);
            out.figures.push_back(
                value_figure("stage:" + t.stage.substr(prefix.size()), "ms", Better::kLower, per_step));
        }
    }
}

void add_pass_case(const LayerCase& c, const char* pass, double flops, double cublas_tflops, double floor_ms,
                   const TimingStats& stats, const TimingStats& host_enqueue, double memory_gib,
                   const std::vector<StageTime>& stages, std::vector<Case>& cases) {
    Case out;
    out.name = c.name(pass);
    out.params.set("model", std::string(c.model->name))
        .set("ep", c.ep)
        .set("tokens_per_rank", c.tokens)
        .set("routing", c.routing)
        .set("comm_sms", c.comm_sms)
        .set("one_stream", c.one_stream)
        .set("gemm_pingpong", c.gemm_arrangements && Config{}.gemm_pingpong)
        .set("gemm_epilogue_warps", c.gemm_arrangements && Config{}.gemm_epilogue_warps)
        .set("forward_combine", c.combine_name())
        .set("dispatch_token_groups", c.token_groups)
        .set("grad_mode", c.grad_mode_name())
        .set("pass", std::string(pass));
    out.figures.push_back(time_figure("time", stats));
    Figure rate = rate_figure("tflops", "TFLOP/s", flops / kFlopsPerTflop, stats);
    out.figures.push_back(fraction_figure("roofline_fraction", rate, "cublas_bf16_dense", cublas_tflops));
    out.figures.push_back(std::move(rate));
    if (std::isfinite(floor_ms)) {
        out.figures.push_back(value_figure("memory_floor", "ms", Better::kLower, floor_ms));
        // floor / time: a rate of "floor seconds per run" over the run's seconds, with the times' spread.
        out.figures.push_back(rate_figure("memory_floor_fraction", "fraction", floor_ms / kMsPerSecond, stats));
    }
    out.figures.push_back(value_figure("peak_memory", "GiB", Better::kLower, memory_gib));
    out.figures.push_back(time_figure("host_enqueue", host_enqueue));
    add_stage_figures(stages, pass, out);
    out.note =
        "peak_memory: device memory in use on the rank after the pass (the layer allocates nothing during a "
        "step); roofline: expert FLOPs over the same-run cuBLAS rate; memory_floor: the bytes any implementation "
        "moves at least (weights with rows, gradients, the token tensors) at the same-run one-way DRAM ceilings, the "
        "slowest rank's, and memory_floor_fraction that over the time; stage:* figures: rank 0's GPU time per "
        "step of each stage, from a second layer on the workspace that records them (Config::record_stage_times), "
        "its steps enqueued behind a HostGate so that they hold no host time; host_enqueue: host time to enqueue one "
        "pass on every rank from one thread (the timed figures are the GPU's while it stays below time)";
    cases.push_back(std::move(out));
}

// One forward and backward on every rank, checked, with routing `variant`'s expert ids (make_expert_ids). Without
// prior routings the case's ids are already in place and nothing is uploaded.
void checked_step(const LayerCase& c, std::vector<std::unique_ptr<Rank>>& ranks, int variant) {
    if (c.prior_routings > 0) {
        for (int r = 0; r < c.ep; ++r) {
            ranks[r]->upload_ids(make_expert_ids(c, r, variant));
        }
    }
    for (auto& r : ranks) {
        r->forward();
    }
    for (auto& r : ranks) {
        r->backward();
    }
    for (auto& r : ranks) {
        r->check_results();
    }
}

void run_case(const LayerCase& c, double cublas_tflops, const DramCeilings& dram, const TimingOptions& timing,
              std::vector<Case>& cases) {
    std::vector<std::unique_ptr<Rank>> ranks = make_ranks(c);
    std::vector<StreamOnDevice> streams;
    for (const auto& r : ranks) {
        streams.push_back(r->stream());
    }
    Timer timer(streams);
    // Steps with other routings write their rows where the case's plan has padding (every rank takes part in each).
    for (int variant = 1; variant <= c.prior_routings; ++variant) {
        checked_step(c, ranks, variant);
    }
    // Correctness first: one forward and backward of the case's routing, checked, before anything is timed.
    checked_step(c, ranks, 0);
    const double flops = forward_flops(c);
    const PassFloors floors = memory_floors(c, dram);
    // Times `pass` on every rank, its host enqueue time into `enqueue`, then checks the ranks' results.
    const auto time_pass = [&](void (Rank::*pass)(), HostClock& enqueue) {
        const TimingStats stats = timer.time(
            [&](int) {
                const HostClock::Scope scope(enqueue, timer.in_timed_run());
                for (auto& r : ranks) {
                    ((*r).*pass)();
                }
            },
            timing);
        for (auto& r : ranks) {
            r->check_results();
        }
        return stats;
    };
    // An accumulate case's forward is the fresh case's: only its backward is timed.
    const bool times_forward = c.grad_mode == GradMode::kFresh;
    HostClock forward_enqueue;
    const TimingStats forward = times_forward ? time_pass(&Rank::forward, forward_enqueue) : TimingStats{};
    double memory = 0.0;
    for (const auto& r : ranks) {
        memory = std::max(memory, r->memory_in_use_gib());
    }
    // The profiled steps run behind a gate: enqueued from one thread, rank 0's kernels would otherwise start
    // before rank 1's are enqueued and wait for them at the routing exchange, and that wait would count as the
    // plan's stage time.
    HostGate gate(streams);
    gate.hold();
    for (int step = 0; step < kProfiledSteps; ++step) {
        for (auto& r : ranks) {
            r->profiled_step();
        }
    }
    gate.release();
    const std::vector<StageTime> stages = ranks[0]->stage_times();
    for (size_t r = 1; r < ranks.size(); ++r) {
        ranks[r]->stage_times();  // synchronizes and reports the other ranks' failures
    }
    gate.check();
    if (times_forward) {
        add_pass_case(c, "forward", flops, cublas_tflops, floors.forward_ms, forward, forward_enqueue.stats(), memory,
                      stages, cases);
    }
    // Backward reuses the last forward's context: it reads it and leaves it intact.
    HostClock backward_enqueue;
    const TimingStats backward = time_pass(&Rank::backward, backward_enqueue);
    add_pass_case(c, "backward", 2.0 * flops, cublas_tflops, floors.backward_ms, backward, backward_enqueue.stats(),
                  memory, stages, cases);
}

// The flags of this benchmark, from the arguments the common parser left.
struct LayerFlags {
    std::vector<int> comm_sms{0};
    std::vector<int64_t> tokens;        // empty: the sweep's own
    std::vector<std::string> shapes;    // model presets; empty: the sweep's own
    std::vector<std::string> routings;  // "uniform", "zipf", "balanced"; empty: the sweep's own
    std::vector<ForwardCombine> forward_combine{ForwardCombine::kAuto};
    bool one_stream = false;
    bool gemm_cooperative = false;
    bool token_groups = false;
    int prior_routings = 0;
    std::vector<GradMode> grad_modes{GradMode::kFresh};
};

std::vector<LayerCase> sweep(const CommonOptions& options, const LayerFlags& flags, int visible) {
    std::vector<std::string> models = {"deepseek-v3", "qwen3.5-397b-a17b"};
    std::vector<int64_t> tokens = {4096};
    std::vector<std::string> routings = {"uniform", "zipf"};
    if (options.quick) {
        models = {"deepseek-v3"};
        routings = {"uniform"};
    }
    if (options.full) {
        models.clear();
        for (const ModelPreset& preset : model_presets()) {
            models.emplace_back(preset.name);
        }
        tokens = {2048, 4096, 16384};
    }
    if (!flags.tokens.empty()) {
        tokens = flags.tokens;
    }
    if (!flags.shapes.empty()) {
        models = flags.shapes;
    }
    if (!flags.routings.empty()) {
        routings = flags.routings;
    }
    std::vector<int> eps = {1};
    if (visible >= 2) {
        eps.push_back(2);
    }
    std::vector<LayerCase> out;
    for (const std::string& name : models) {
        const ModelPreset* model = find_model_preset(name);
        for (const int64_t t : tokens) {
            for (const int ep : eps) {
                for (const std::string& routing : routings) {
                    for (const int sms : flags.comm_sms) {
                        for (const ForwardCombine combine : flags.forward_combine) {
                            for (const GradMode mode : flags.grad_modes) {
                                out.push_back({model, t, ep, routing, sms, flags.one_stream, true, combine,
                                               flags.prior_routings, mode});
                                if (flags.gemm_cooperative) {
                                    out.push_back({model, t, ep, routing, sms, flags.one_stream, false, combine,
                                                   flags.prior_routings, mode});
                                }
                                if (flags.token_groups) {
                                    out.push_back({model, t, ep, routing, sms, flags.one_stream, true, combine,
                                                   flags.prior_routings, mode, true});
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return out;
}

void print_usage() {
    std::printf(
        "usage: mok-bench-layer [flags]\n"
        "The MoE layer (forward, backward) at EP 1 and EP 2: DeepSeek-V3 and Qwen3.5 at 4096 tokens per rank,\n"
        "uniform and Zipf routing (--quick: DeepSeek-V3 uniform; --full: every preset at 2048, 4096, 16384\n"
        "tokens). Pairs with bench/baselines/layer_baseline.py in the same run. Writes one JSON result.\n%s"
        "  --comm-sms LIST   comma list of communication SM counts to run each case at (Config::num_comm_sms_*;\n"
        "                    0, the default, is the library's choice; other counts add /comm<N> to the case name)\n"
        "  --one-stream      time the one-stream order instead of the pipelined one (every kernel after the one\n"
        "                    before it): for profilers that serialise kernels, under which a GEMM waiting for\n"
        "                    the dispatch's rows would time out; adds /one-stream to the case names\n"
        "  --gemm-cooperative  also time each case with Config::gemm_pingpong and gemm_epilogue_warps off\n"
        "                      (every GEMM in the cooperative arrangement, docs/gemm.md); those cases carry\n"
        "                      /cooperative in their names\n"
        "  --token-groups    also time each case with Config::dispatch_token_groups on (the dispatch pulls a\n"
        "                    token's rows once per group of four); those cases carry /token-groups in their names\n"
        "  --tokens LIST     comma list of tokens per rank, in place of the sweep's\n"
        "  --shapes LIST     comma list of model presets (the names of layer_baseline.py --shapes), in place of\n"
        "                    the sweep's\n"
        "  --routings LIST   comma list of uniform, zipf, balanced, in place of the sweep's; balanced gives every\n"
        "                    expert the same rows (no padding where that count is a multiple of 128) and has no\n"
        "                    baseline case to pair with\n"
        "  --forward-combine LIST  comma list of auto, push, down_stores (Config::forward_combine); cases other\n"
        "                    than auto carry /push or /down_stores in their names\n"
        "  --prior-routings N  before each case, N steps with other routings of the same skew, so that the rows\n"
        "                    its plan leaves as padding hold earlier data, as in training (default 0: a fresh,\n"
        "                    zeroed workspace)\n"
        "  --grad-modes LIST  comma list of fresh, accumulate (BackwardArgs::grad_mode; default fresh): accumulate\n"
        "                    adds the weight gradients into fp32 main_grad and times the backward alone (its\n"
        "                    forward is fresh's); those cases carry /accumulate in their names\n",
        common_options_help().c_str());
}

// A comma list of counts of at least `min` for `flag`.
std::vector<int64_t> parse_counts(const std::string& flag, const std::string& text, int64_t min) {
    std::vector<int64_t> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        size_t used = 0;
        int64_t value = 0;
        try {
            value = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || value < min) {
            throw std::invalid_argument(flag + ": a comma list of counts >= " + std::to_string(min) + ", got '" + text +
                                        "'");
        }
        out.push_back(value);
    }
    return out;
}

// A comma list of fresh, accumulate.
std::vector<GradMode> parse_grad_modes(const std::string& text) {
    std::vector<GradMode> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        if (item != "fresh" && item != "accumulate") {
            throw std::invalid_argument("--grad-modes: a comma list of fresh, accumulate, got '" + text + "'");
        }
        out.push_back(item == "fresh" ? GradMode::kFresh : GradMode::kAccumulate);
    }
    if (out.empty()) {
        throw std::invalid_argument("--grad-modes: expected at least one of fresh, accumulate");
    }
    return out;
}

std::vector<ForwardCombine> parse_combines(const std::string& text) {
    std::vector<ForwardCombine> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        ForwardCombine c = ForwardCombine::kAuto;
        if (!parse_forward_combine(item, &c)) {
            throw std::invalid_argument("--forward-combine: a comma list of auto, push, down_stores, got '" + text +
                                        "'");
        }
        out.push_back(c);
    }
    return out;
}

// A comma list of model preset names.
std::vector<std::string> parse_shapes(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        const ModelPreset* preset = nullptr;
        if (const Status s = lookup_model_preset(item, &preset); !s.is_ok()) {
            throw std::invalid_argument("--shapes: " + s.message());
        }
        out.push_back(item);
    }
    if (out.empty()) {
        throw std::invalid_argument("--shapes: expected at least one model preset");
    }
    return out;
}

// A comma list of uniform, zipf, balanced.
std::vector<std::string> parse_routings(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        if (item != "uniform" && item != "zipf" && item != "balanced") {
            throw std::invalid_argument("--routings: a comma list of uniform, zipf, balanced, got '" + text + "'");
        }
        out.push_back(item);
    }
    if (out.empty()) {
        throw std::invalid_argument("--routings: expected at least one of uniform, zipf, balanced");
    }
    return out;
}

// The flags the common parser left; throws std::invalid_argument on anything else.
LayerFlags parse_flags(const std::vector<std::string>& rest) {
    LayerFlags flags;
    for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] == "--one-stream") {
            flags.one_stream = true;
            continue;
        }
        if (rest[i] == "--gemm-cooperative") {
            flags.gemm_cooperative = true;
            continue;
        }
        if (rest[i] == "--token-groups") {
            flags.token_groups = true;
            continue;
        }
        if (i + 1 >= rest.size() ||
            (rest[i] != "--comm-sms" && rest[i] != "--tokens" && rest[i] != "--forward-combine" &&
             rest[i] != "--shapes" && rest[i] != "--routings" && rest[i] != "--prior-routings" &&
             rest[i] != "--grad-modes")) {
            throw std::invalid_argument("unknown flag or missing value: '" + rest[i] + "' (see --help)");
        }
        const std::string& flag = rest[i];
        const std::string& value = rest[++i];
        if (flag == "--tokens") {
            flags.tokens = parse_counts(flag, value, 1);
        } else if (flag == "--forward-combine") {
            flags.forward_combine = parse_combines(value);
        } else if (flag == "--shapes") {
            flags.shapes = parse_shapes(value);
        } else if (flag == "--routings") {
            flags.routings = parse_routings(value);
        } else if (flag == "--grad-modes") {
            flags.grad_modes = parse_grad_modes(value);
        } else if (flag == "--prior-routings") {
            const std::vector<int64_t> counts = parse_counts(flag, value, 0);
            if (counts.size() != 1) {
                throw std::invalid_argument("--prior-routings: expected one count, got '" + value + "'");
            }
            flags.prior_routings = static_cast<int>(counts[0]);
        } else {
            const std::vector<int64_t> sms = parse_counts(flag, value, 0);
            flags.comm_sms.assign(sms.begin(), sms.end());
        }
    }
    return flags;
}

int run(const CommonOptions& options) {
    const LayerFlags flags = parse_flags(options.rest);
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kDefaultWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? kQuickReps : kReps);
    const int visible = visible_gpu_count();
    if (visible == 0) {
        std::fprintf(stderr, "mok-bench-layer: no CUDA device visible\n");
        return 1;
    }
    Result result;
    result.run = collect_run_info("layer", std::min(visible, 2));
    result.config.set("warmup", timing.num_warmup)
        .set("warmup_ms", timing.min_warmup_ms)
        .set("reps", timing.num_reps)
        .set("flush_l2", timing.flush_l2)
        .set("quick", options.quick)
        .set("full", options.full)
        .set("prior_routings", flags.prior_routings)
        .set("environment", environment_json(0));
    const Case ceiling = ceilings::gemm_case({kCeilingGemmSize, kCeilingGemmSize, kCeilingGemmSize}, timing);
    const double cublas_tflops = figure_value(ceiling, "tflops");
    result.cases.push_back(ceiling);
    const Case read_ceiling = ceilings::device_read_case(kDramCeilingBytes, timing);
    const Case write_ceiling = ceilings::device_write_case(kDramCeilingBytes, timing);
    const DramCeilings dram{figure_value(read_ceiling, "bandwidth"), figure_value(write_ceiling, "bandwidth")};
    result.cases.push_back(read_ceiling);
    result.cases.push_back(write_ceiling);
    for (const LayerCase& c : sweep(options, flags, visible)) {
        try {
            run_case(c, cublas_tflops, dram, timing, result.cases);
        } catch (const std::exception& error) {
            Case failed;
            failed.name = c.name("setup");
            failed.status = CaseStatus::kFailed;
            failed.note = error.what();
            result.cases.push_back(std::move(failed));
        }
        std::fflush(stdout);
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::layer

int main(int argc, char** argv) {
    using namespace mok::bench;
    // run() reads --comm-sms, --one-stream and --gemm-cooperative from the flags the common parser leaves.
    return run_benchmark_main(argc, argv, "mok-bench-layer", layer::print_usage, layer::run, OtherFlags::kPass);
}
