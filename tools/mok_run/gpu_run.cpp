#include "gpu_run.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

#include "host/cuda/cuda_status.hpp"
#include "layer_instance.hpp"
#include "report.hpp"

namespace mok::run {
namespace {

using host::cuda_status;

// A device copy of one host vector.
class DeviceArray {
  public:
    DeviceArray() = default;
    ~DeviceArray() { cudaFree(data_); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    template <typename T>
    Status upload(const std::vector<T>& host) {
        bytes_ = host.size() * sizeof(T);
        MOK_RETURN_IF_ERROR(cuda_status(cudaMalloc(&data_, bytes_ > 0 ? bytes_ : 1), "cudaMalloc"));
        return cuda_status(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "copying inputs to the GPU");
    }
    template <typename T>
    Status download(std::vector<T>& host) const {
        return cuda_status(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost),
                           "copying results from the GPU");
    }
    void* data() const { return data_; }

  private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

struct DeviceExperts {
    DeviceArray gate, up, down;

    Status upload(const ExpertBuffers& host) {
        MOK_RETURN_IF_ERROR(gate.upload(host.gate));
        MOK_RETURN_IF_ERROR(up.upload(host.up));
        return down.upload(host.down);
    }
    Status download(ExpertBuffers& host) const {
        MOK_RETURN_IF_ERROR(gate.download(host.gate));
        MOK_RETURN_IF_ERROR(up.download(host.up));
        return down.download(host.down);
    }
};

// One rank's tensors on the GPU, shaped like RankBuffers.
struct DeviceRank {
    DeviceArray x, expert_ids, router_weights, dy, y, dx, d_router_weights;
    DeviceExperts experts, d_experts;
    std::vector<std::unique_ptr<DeviceExperts>> shared, d_shared;

    Status upload(const RankBuffers& host) {
        for (auto [device, vector] :
             {std::pair{&x, &host.x}, std::pair{&dy, &host.dy}, std::pair{&y, &host.y}, std::pair{&dx, &host.dx}}) {
            MOK_RETURN_IF_ERROR(device->upload(*vector));
        }
        MOK_RETURN_IF_ERROR(expert_ids.upload(host.expert_ids));
        MOK_RETURN_IF_ERROR(router_weights.upload(host.router_weights));
        MOK_RETURN_IF_ERROR(d_router_weights.upload(host.d_router_weights));
        MOK_RETURN_IF_ERROR(experts.upload(host.experts));
        MOK_RETURN_IF_ERROR(d_experts.upload(host.d_experts));
        for (size_t s = 0; s < host.shared.size(); ++s) {
            shared.push_back(std::make_unique<DeviceExperts>());
            d_shared.push_back(std::make_unique<DeviceExperts>());
            MOK_RETURN_IF_ERROR(shared.back()->upload(host.shared[s]));
            MOK_RETURN_IF_ERROR(d_shared.back()->upload(host.d_shared[s]));
        }
        return Status::ok();
    }

    Status download_outputs(RankBuffers& host) const {
        MOK_RETURN_IF_ERROR(y.download(host.y));
        MOK_RETURN_IF_ERROR(dx.download(host.dx));
        MOK_RETURN_IF_ERROR(d_router_weights.download(host.d_router_weights));
        MOK_RETURN_IF_ERROR(d_experts.download(host.d_experts));
        for (size_t s = 0; s < d_shared.size(); ++s) {
            MOK_RETURN_IF_ERROR(d_shared[s]->download(host.d_shared[s]));
        }
        return Status::ok();
    }
};

TensorView gpu_view(const DeviceArray& a, DType dtype, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(a.data(), dtype, shape, Device::cuda(0));
}

// The API's arguments over the device copies, for every rank.
struct GpuArgs {
    std::vector<ForwardArgs> forward;
    std::vector<RankInputs> inputs;
    std::vector<BackwardArgs> backward;
};

GpuArgs gpu_args(const LayerShape& shape, int ep_size, const std::vector<DeviceRank>& ranks) {
    const int64_t T = shape.tokens_per_rank;
    const int64_t H = shape.hidden;
    const int64_t I = shape.expert_width;
    const int64_t k = shape.top_k;
    const int64_t local = shape.num_experts / ep_size;
    GpuArgs args;
    for (const DeviceRank& rank : ranks) {
        RankInputs in;
        in.x = gpu_view(rank.x, DType::kBF16, {T, H});
        in.expert_ids = gpu_view(rank.expert_ids, DType::kI32, {T, k});
        in.router_weights = gpu_view(rank.router_weights, DType::kF32, {T, k});
        in.experts = {gpu_view(rank.experts.gate, DType::kBF16, {local, I, H}),
                      gpu_view(rank.experts.up, DType::kBF16, {local, I, H}),
                      gpu_view(rank.experts.down, DType::kBF16, {local, H, I})};
        BackwardArgs b;
        b.dy = gpu_view(rank.dy, DType::kBF16, {T, H});
        b.dx = gpu_view(rank.dx, DType::kBF16, {T, H});
        b.d_router_weights = gpu_view(rank.d_router_weights, DType::kF32, {T, k});
        b.d_experts = {gpu_view(rank.d_experts.gate, DType::kBF16, {local, I, H}),
                       gpu_view(rank.d_experts.up, DType::kBF16, {local, I, H}),
                       gpu_view(rank.d_experts.down, DType::kBF16, {local, H, I})};
        b.grad_mode = GradMode::kFresh;
        for (size_t s = 0; s < rank.shared.size(); ++s) {
            const int64_t W = shape.shared_expert_widths[s];
            in.shared.push_back({gpu_view(rank.shared[s]->gate, DType::kBF16, {W, H}),
                                 gpu_view(rank.shared[s]->up, DType::kBF16, {W, H}),
                                 gpu_view(rank.shared[s]->down, DType::kBF16, {H, W})});
            b.d_shared.push_back({gpu_view(rank.d_shared[s]->gate, DType::kBF16, {W, H}),
                                  gpu_view(rank.d_shared[s]->up, DType::kBF16, {W, H}),
                                  gpu_view(rank.d_shared[s]->down, DType::kBF16, {H, W})});
        }
        args.forward.push_back({in, gpu_view(rank.y, DType::kBF16, {T, H})});
        args.inputs.push_back(in);
        args.backward.push_back(std::move(b));
    }
    return args;
}

struct PassTimes {
    std::vector<float> forward_ms;
    std::vector<float> backward_ms;
};

void print_times(const char* pass, std::vector<float> ms) {
    std::sort(ms.begin(), ms.end());
    const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
    std::printf("  %-9s %10.3f ms median, %10.3f ms min, %10.3f ms mean over %zu steps\n", pass, ms[ms.size() / 2],
                ms.front(), mean, ms.size());
}

}  // namespace

Status run_on_gpu(const LayerOptions& layer_options, int iterations, LayerData& data) {
    MOK_RETURN_IF_ERROR(cuda_status(cudaSetDevice(layer_options.device.index), "cudaSetDevice"));
    cudaDeviceProp properties{};
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaGetDeviceProperties(&properties, layer_options.device.index), "device properties"));
    LayerInstance instance;
    MOK_RETURN_IF_ERROR(create_layer_instance(layer_options, &instance));
    std::printf("  device     %s, workspace %.3f GiB\n", properties.name,
                static_cast<double>(instance.workspace_bytes) / (1024.0 * 1024.0 * 1024.0));
    MoeLayer* layer = instance.layer.get();
    ForwardContext* context = instance.context.get();

    const int ep_size = layer_options.topology.ep_size;
    std::vector<DeviceRank> ranks(static_cast<size_t>(ep_size));
    const auto upload_start = std::chrono::steady_clock::now();
    for (int r = 0; r < ep_size; ++r) {
        MOK_RETURN_IF_ERROR(ranks[r].upload(data.ranks()[r]));
    }
    const std::chrono::duration<double> uploaded = std::chrono::steady_clock::now() - upload_start;
    std::printf("  inputs     copied to the GPU in %.1f s; warm-up step, then %d timed steps\n", uploaded.count(),
                iterations);
    const GpuArgs args = gpu_args(data.shape(), ep_size, ranks);

    cudaStream_t stream = nullptr;
    MOK_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    cudaEvent_t marks[3] = {};
    for (cudaEvent_t& mark : marks) {
        MOK_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&mark), "cudaEventCreate"));
    }
    PassTimes times;
    Status status = Status::ok();
    // Step 0 warms up (it allocates the context and sets kernel attributes) and is not timed.
    for (int step = 0; step <= iterations && status.is_ok(); ++step) {
        status = cuda_status(cudaEventRecord(marks[0], stream), "cudaEventRecord");
        if (status.is_ok()) {
            status = layer->forward(args.forward, context, stream);
        }
        if (status.is_ok()) {
            status = cuda_status(cudaEventRecord(marks[1], stream), "cudaEventRecord");
        }
        if (status.is_ok()) {
            status = layer->backward(args.inputs, args.backward, *context, stream);
        }
        if (status.is_ok()) {
            status = cuda_status(cudaEventRecord(marks[2], stream), "cudaEventRecord");
        }
        if (status.is_ok()) {
            // Waits for the step and reports what failed on the GPU (schedule overflow, a timeout).
            status = layer->synchronize(stream);
        }
        float forward_ms = 0.0f;
        float backward_ms = 0.0f;
        if (status.is_ok() && step > 0) {
            status = cuda_status(cudaEventElapsedTime(&forward_ms, marks[0], marks[1]), "cudaEventElapsedTime");
            times.forward_ms.push_back(forward_ms);
        }
        if (status.is_ok() && step > 0) {
            status = cuda_status(cudaEventElapsedTime(&backward_ms, marks[1], marks[2]), "cudaEventElapsedTime");
            times.backward_ms.push_back(backward_ms);
        }
    }
    for (cudaEvent_t mark : marks) {
        cudaEventDestroy(mark);
    }
    cudaStreamDestroy(stream);
    MOK_RETURN_IF_ERROR(status);
    std::printf("time per pass (GPU time between events on the layer's stream):\n");
    print_times("forward", times.forward_ms);
    print_times("backward", times.backward_ms);
    for (int r = 0; r < ep_size; ++r) {
        MOK_RETURN_IF_ERROR(ranks[r].download_outputs(data.ranks()[r]));
    }
    print_routing(*context, ep_size);
    return Status::ok();
}

}  // namespace mok::run
