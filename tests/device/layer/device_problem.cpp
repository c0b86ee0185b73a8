#include "layer/device_problem.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace mok::testing {
namespace {

// Byte pattern that makes every bf16 and fp32 element a NaN.
constexpr int kPoisonByte = 0xff;

void check(cudaError_t error, const char* what) {
    if (error != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
    }
}

// A tensor as rows of its innermost dimension: how many, how wide, and the elements between them.
struct Rows {
    int64_t count;
    int64_t width;
    int64_t pitch;
};

Rows rows_of(const TensorView& v) {
    const int64_t width = v.shape[v.rank - 1];
    const int64_t count = width > 0 ? v.numel() / width : 0;
    const int64_t pitch = v.rank >= 2 && v.shape[v.rank - 2] > 1 ? v.stride[v.rank - 2] : width;
    return {count, width, pitch};
}

DeviceWeights device_weights(const WeightTensors& w, int device) {
    return {DeviceTensor(w.gate, device, 0), DeviceTensor(w.up, device, 0), DeviceTensor(w.down, device, 0)};
}

void upload(DeviceWeights& d, const WeightTensors& h) {
    d.gate.upload(h.gate);
    d.up.upload(h.up);
    d.down.upload(h.down);
}

void download(const DeviceWeights& d, WeightTensors& h) {
    d.gate.download(h.gate);
    d.up.download(h.up);
    d.down.download(h.down);
}

template <typename Views>
Views views(const DeviceWeights& w) {
    return {w.gate.view(), w.up.view(), w.down.view()};
}

}  // namespace

DeviceTensor::DeviceTensor(const HostTensor& like, int device, int64_t row_padding) {
    const TensorView host = like.view();
    view_.dtype = host.dtype;
    view_.device = Device::cuda(device);
    view_.rank = host.rank;
    view_.shape = host.shape;
    const int64_t width = host.shape[host.rank - 1];
    const int64_t pitch = width + row_padding;
    int64_t step = 1;
    for (int d = host.rank - 1; d >= 0; --d) {
        view_.stride[d] = step;
        step = d == host.rank - 1 ? pitch : step * host.shape[d];
    }
    const int64_t rows = width > 0 ? host.numel() / width : 0;
    bytes_ = static_cast<size_t>(rows * pitch) * dtype_size(host.dtype);
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaMalloc(&view_.data, bytes_ > 0 ? bytes_ : 1), "cudaMalloc");
}

DeviceTensor::~DeviceTensor() {
    if (view_.data != nullptr) {
        cudaFree(view_.data);
    }
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept {
    *this = std::move(other);
}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
    std::swap(view_, other.view_);
    std::swap(bytes_, other.bytes_);
    return *this;
}

void DeviceTensor::upload(const HostTensor& host) {
    const Rows src = rows_of(host.view());
    const Rows dst = rows_of(view_);
    const size_t element = dtype_size(view_.dtype);
    if (src.count == 0) {
        return;
    }
    check(cudaMemcpy2D(view_.data, dst.pitch * element, host.view().data, src.pitch * element, src.width * element,
                       src.count, cudaMemcpyHostToDevice),
          "upload");
}

void DeviceTensor::download(HostTensor& host) const {
    const Rows dst = rows_of(host.view());
    const Rows src = rows_of(view_);
    const size_t element = dtype_size(view_.dtype);
    if (src.count == 0) {
        return;
    }
    check(cudaMemcpy2D(host.view().data, dst.pitch * element, view_.data, src.pitch * element, src.width * element,
                       src.count, cudaMemcpyDeviceToHost),
          "download");
}

void DeviceTensor::poison() {
    check(cudaMemset(view_.data, kPoisonByte, bytes_), "poison");
    check(cudaDeviceSynchronize(), "poison");
}

DeviceProblem::DeviceProblem(const ApiProblem& host, int device, int64_t activation_padding, int only_rank)
    : options_(host.options()), first_rank_(only_rank >= 0 ? only_rank : 0) {
    options_.backend = Backend::kCuda;
    options_.device = Device::cuda(device);
    const int count = only_rank >= 0 ? 1 : host.ep_size();
    if (only_rank >= 0) {
        options_.topology = {host.ep_size(), only_rank, 1};
    }
    for (int r = first_rank_; r < first_rank_ + count; ++r) {
        const ApiRank& h = host.rank(r);
        DeviceRank& d = ranks_.emplace_back();
        d.x = DeviceTensor(h.x, device, activation_padding);
        d.x.upload(h.x);
        d.expert_ids = DeviceTensor(h.expert_ids, device, 0);
        d.expert_ids.upload(h.expert_ids);
        d.router_weights = DeviceTensor(h.router_weights, device, 0);
        d.router_weights.upload(h.router_weights);
        d.y = DeviceTensor(h.y, device, activation_padding);
        d.dy = DeviceTensor(h.dy, device, activation_padding);
        d.dy.upload(h.dy);
        d.dx = DeviceTensor(h.dx, device, activation_padding);
        d.d_router_weights = DeviceTensor(h.d_router_weights, device, 0);
        d.experts = device_weights(h.experts, device);
        testing::upload(d.experts, h.experts);
        d.d_experts_fresh = device_weights(h.d_experts_fresh, device);
        d.d_experts_main = device_weights(h.d_experts_main, device);
        for (size_t s = 0; s < h.shared.size(); ++s) {
            d.shared.push_back(device_weights(h.shared[s], device));
            testing::upload(d.shared.back(), h.shared[s]);
            d.d_shared_fresh.push_back(device_weights(h.d_shared_fresh[s], device));
            d.d_shared_main.push_back(device_weights(h.d_shared_main[s], device));
        }
    }
    upload_outputs(host);
}

LayerOptions DeviceProblem::options() const {
    return options_;
}

RankInputs DeviceProblem::rank_inputs(const DeviceRank& rank) const {
    RankInputs in;
    in.x = rank.x.view();
    in.expert_ids = rank.expert_ids.view();
    in.router_weights = rank.router_weights.view();
    in.experts = views<ExpertWeights>(rank.experts);
    for (const DeviceWeights& w : rank.shared) {
        in.shared.push_back(views<SharedExpertWeights>(w));
    }
    return in;
}

std::vector<ForwardArgs> DeviceProblem::forward_args() const {
    std::vector<ForwardArgs> args;
    for (const DeviceRank& rank : ranks_) {
        args.push_back({rank_inputs(rank), rank.y.view()});
    }
    return args;
}

std::vector<RankInputs> DeviceProblem::inputs() const {
    std::vector<RankInputs> inputs;
    for (const DeviceRank& rank : ranks_) {
        inputs.push_back(rank_inputs(rank));
    }
    return inputs;
}

std::vector<BackwardArgs> DeviceProblem::backward_args(GradMode mode) const {
    const bool fresh = mode == GradMode::kFresh;
    std::vector<BackwardArgs> args;
    for (const DeviceRank& rank : ranks_) {
        BackwardArgs a;
        a.dy = rank.dy.view();
        a.dx = rank.dx.view();
        a.d_router_weights = rank.d_router_weights.view();
        a.d_experts = views<ExpertWeightGrads>(fresh ? rank.d_experts_fresh : rank.d_experts_main);
        for (const DeviceWeights& w : fresh ? rank.d_shared_fresh : rank.d_shared_main) {
            a.d_shared.push_back(views<SharedExpertWeightGrads>(w));
        }
        a.grad_mode = mode;
        args.push_back(std::move(a));
    }
    return args;
}

void DeviceProblem::upload_outputs(const ApiProblem& host) {
    for (int r = 0; r < num_ranks(); ++r) {
        const ApiRank& h = host.rank(first_rank_ + r);
        DeviceRank& d = ranks_[r];
        d.y.upload(h.y);
        d.dx.upload(h.dx);
        d.d_router_weights.upload(h.d_router_weights);
        testing::upload(d.d_experts_fresh, h.d_experts_fresh);
        testing::upload(d.d_experts_main, h.d_experts_main);
        for (size_t s = 0; s < d.shared.size(); ++s) {
            testing::upload(d.d_shared_fresh[s], h.d_shared_fresh[s]);
            testing::upload(d.d_shared_main[s], h.d_shared_main[s]);
        }
    }
}

void DeviceProblem::download_outputs(ApiProblem& host) const {
    for (int r = 0; r < num_ranks(); ++r) {
        ApiRank& h = host.rank(first_rank_ + r);
        const DeviceRank& d = ranks_[r];
        d.y.download(h.y);
        d.dx.download(h.dx);
        d.d_router_weights.download(h.d_router_weights);
        testing::download(d.d_experts_fresh, h.d_experts_fresh);
        testing::download(d.d_experts_main, h.d_experts_main);
        for (size_t s = 0; s < d.shared.size(); ++s) {
            testing::download(d.d_shared_fresh[s], h.d_shared_fresh[s]);
            testing::download(d.d_shared_main[s], h.d_shared_main[s]);
        }
    }
}

void DeviceProblem::poison_outputs() {
    for (DeviceRank& d : ranks_) {
        for (DeviceTensor* t : {&d.y, &d.dx, &d.d_router_weights, &d.d_experts_fresh.gate, &d.d_experts_fresh.up,
                                &d.d_experts_fresh.down}) {
            t->poison();
        }
        for (DeviceWeights& w : d.d_shared_fresh) {
            w.gate.poison();
            w.up.poison();
            w.down.poison();
        }
    }
}

}  // namespace mok::testing
