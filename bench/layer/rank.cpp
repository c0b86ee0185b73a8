// One rank of a mok-bench-layer case (rank.hpp).
#include "bench/layer/rank.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

namespace mok::bench::layer {
namespace {

constexpr double kBytesPerGiB = 1073741824.0;
// Values of x, dy and the weights: small, so that sums over thousands of terms stay well inside bf16's range.
constexpr float kActivationScale = 1.0f;
constexpr float kWeightScale = 0.02f;
// Starting values of fp32 main_grad in accumulate mode: of the order of a few steps' gradients.
constexpr float kMainGradScale = 0.01f;
// Elements of y and dx that check_results reads back: enough to catch a broken build, cheap next to a pass.
constexpr size_t kCheckedElements = size_t{1} << 16;

}  // namespace

void check(const Status& status, const std::string& what) {
    if (!status.is_ok()) {
        throw std::runtime_error(what + ": " + status.to_string());
    }
}

Rank::Rank(const LayerCase& c, int rank, std::shared_ptr<Communicator> communicator)
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
        fill_uniform(reinterpret_cast<float*>(grads_->get()), grad_elems, -kMainGradScale, kMainGradScale, seed + 4, s);
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
        inputs_.shared.push_back({view(sw, DType::kBF16, {width, h}), view(sw + width * h, DType::kBF16, {width, h}),
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

void Rank::upload_ids(const std::vector<int32_t>& ids) {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    MOK_BENCH_CHECK_CUDA(
        cudaMemcpyAsync(ids_->get(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_.get()));
    stream_.synchronize();
}

void Rank::profiled_step() {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    check(profiled_->forward({&forward_, 1}, profiled_context_.get(), stream_.get()), "forward (stage times)");
    check(profiled_->backward({&inputs_, 1}, {&backward_, 1}, *profiled_context_, stream_.get()),
          "backward (stage times)");
}

std::vector<StageTime> Rank::stage_times() {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    check(profiled_->synchronize(stream_.get()), "rank " + std::to_string(rank_) + " (stage times)");
    return profiled_->stage_times();
}

void Rank::forward() {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    check(layer_->forward({&forward_, 1}, context_.get(), stream_.get()), "forward");
}

void Rank::backward() {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    check(layer_->backward({&inputs_, 1}, {&backward_, 1}, *context_, stream_.get()), "backward");
}

void Rank::check_results() {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    check(layer_->synchronize(stream_.get()), "rank " + std::to_string(rank_));
    for (const DeviceBuffer<__nv_bfloat16>* out : {y_.get(), dx_.get()}) {
        std::vector<__nv_bfloat16> host(std::min(out->count(), kCheckedElements));
        MOK_BENCH_CHECK_CUDA(
            cudaMemcpy(host.data(), out->get(), host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
        for (const __nv_bfloat16 v : host) {
            if (!std::isfinite(__bfloat162float(v))) {
                throw std::runtime_error("rank " + std::to_string(rank_) + ": non-finite output");
            }
        }
    }
}

double Rank::memory_in_use_gib() const {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device_));
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    MOK_BENCH_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<double>(total_bytes - free_bytes) / kBytesPerGiB;
}

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

}  // namespace mok::bench::layer
