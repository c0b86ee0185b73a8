#include "host/cuda/cuda_layer.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "device/gemm/grouped_gemm.hpp"
#include "device/layer/row_gate.hpp"
#include "host/comm/device_status.hpp"
#include "host/cuda/cuda_arguments.hpp"
#include "host/cuda/cuda_status.hpp"
#include "host/cuda/device_guard.hpp"

namespace mok::cuda {
namespace {

cudaStream_t as_stream(void* stream) {
    return static_cast<cudaStream_t>(stream);
}

// True unless `stream` is being captured into a CUDA graph (see cuda_arguments.hpp); a failed query counts as
// not capturing, so the full checks run.
bool eager(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return status == cudaStreamCaptureStatusNone;
}

}  // namespace

CudaLayer::CudaLayer(const LayerOptions& options, std::shared_ptr<Workspace> workspace)
    : CheckedLayer(options, std::move(workspace)),
      dims_(LayerDims::of(options)),
      layout_(WorkspaceLayout::make(dims_)),
      context_layout_(ContextLayout::make(dims_)) {}

Status CudaLayer::create(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                         std::unique_ptr<MoeLayer>* out) {
    auto* cuda_workspace = dynamic_cast<CudaWorkspace*>(workspace.get());
    if (cuda_workspace == nullptr) {
        return {StatusCode::kInternal, "a Backend::kCuda workspace that is not the CUDA backend's"};
    }
    const bool real_ranks = options.topology.num_local_ranks < options.topology.ep_size;
    if (real_ranks &&
        (cuda_workspace->nccl_window() == nullptr || cuda_workspace->communicator() != options.communicator)) {
        return Status::invalid_argument("workspace",
                                        "a Workspace created with options.communicator (Workspace::create with the "
                                        "communicator, collectively), since the EP ranks live in other processes");
    }
    if (!real_ranks && cuda_workspace->nccl_window() != nullptr) {
        return Status::invalid_argument("workspace",
                                        "a Workspace created without a communicator, since every EP rank is local");
    }
    std::unique_ptr<CudaLayer> layer(new CudaLayer(options, std::move(workspace)));
    MOK_RETURN_IF_ERROR(cuda_workspace->bind(TransportStateKey::of(layer->dims_)));
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(options.device.index));
    // The pipelined steps enqueue GEMMs that wait for a later dispatch: every kernel they launch is loaded now,
    // before the first step (host/cuda/kernel_attributes.hpp says why).
    MOK_RETURN_IF_ERROR(gemm::load_kernels());
    MOK_RETURN_IF_ERROR(layer::load_row_gate_kernel());
    std::vector<ScratchBuffers> scratch;
    for (int32_t local = 0; local < layer->dims_.num_local_ranks; ++local) {
        scratch.push_back(ScratchBuffers::bind(layer->layout_.scratch,
                                               cuda_workspace->base() + layer->layout_.scratch_offset(local)));
    }
    MOK_RETURN_IF_ERROR(LayerConstants::create(layer->dims_, scratch, &layer->constants_));
    layer->timeline_ = std::make_unique<StageTimeline>(options.config.record_stage_times);
    MOK_RETURN_IF_ERROR(SideStream::create(&layer->side_stream_));
    int num_sms = 0;
    const cudaError_t error = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, options.device.index);
    MOK_RETURN_IF_ERROR(host::cuda_status(error, "reading the device's SM count"));
    StepsSetup setup{layer->dims_,       options.config,         layer->layout_,       cuda_workspace,
                     &layer->constants_, layer->timeline_.get(), &layer->side_stream_, num_sms};
    layer->steps_ = real_ranks ? make_nccl_steps(setup) : make_virtual_steps(setup);
    *out = std::move(layer);
    return Status::ok();
}

Status CudaLayer::create_context(std::unique_ptr<ForwardContext>* out) const {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    *out = std::make_unique<CudaContext>(id(), dims_, context_layout_, options().device);
    return Status::ok();
}

Status CudaLayer::fill_context(std::span<const RankInputs* const> inputs, std::span<const TensorView* const> y,
                               CudaContext& context, cudaStream_t stream) {
    context.begin_fill();
    MOK_RETURN_IF_ERROR(context.ensure_allocated());
    MOK_RETURN_IF_ERROR(steps_->forward(inputs, y, context, stream));
    context.end_fill(cuda_workspace().epoch());
    return Status::ok();
}

Status CudaLayer::run_forward(std::span<const ForwardArgs> args, api::ContextBase& context, void* stream) {
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(options().device.index));
    MOK_RETURN_IF_ERROR(check_forward_tensors(options(), args, eager(as_stream(stream))));
    std::vector<const RankInputs*> inputs;
    std::vector<const TensorView*> y;
    for (const ForwardArgs& a : args) {
        inputs.push_back(&a.inputs);
        y.push_back(&a.y);
    }
    return fill_context(inputs, y, static_cast<CudaContext&>(context), as_stream(stream));
}

Status CudaLayer::run_recompute_forward(std::span<const RankInputs> inputs, api::ContextBase& context, void* stream) {
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(options().device.index));
    MOK_RETURN_IF_ERROR(check_recompute_tensors(options(), inputs, eager(as_stream(stream))));
    std::vector<const RankInputs*> pointers;
    for (const RankInputs& in : inputs) {
        pointers.push_back(&in);
    }
    return fill_context(pointers, {}, static_cast<CudaContext&>(context), as_stream(stream));
}

Status CudaLayer::run_backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                               const api::ContextBase& context, void* stream) {
    const auto& ctx = static_cast<const CudaContext&>(context);
    if (ctx.fill_failed()) {
        return Status::invalid_argument("context",
                                        "a context whose forward or recompute_forward succeeded; synchronize reported "
                                        "that the step that filled this one failed (fill it again)");
    }
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(options().device.index));
    MOK_RETURN_IF_ERROR(check_backward_tensors(options(), inputs, args, eager(as_stream(stream))));
    return steps_->backward(inputs, args, ctx, as_stream(stream));
}

std::vector<StageTime> CudaLayer::run_stage_times() {
    DeviceGuard guard;
    if (!guard.use(options().device.index).is_ok()) {
        return {};
    }
    return timeline_->totals();
}

Status CudaLayer::run_synchronize(void* stream) {
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(options().device.index));
    const std::vector<DeviceStatus*> records = steps_->status_records();
    // Waits for the stream, then reports the first recorded failure in local-rank order.
    const Status first = comm::read_device_status(records, as_stream(stream));
    // Every record is cleared, whichever failed, so that the next step starts clean on every rank.
    Status cleared = comm::clear_device_status(records, as_stream(stream));
    if (cleared.is_ok()) {
        const cudaError_t error = cudaStreamSynchronize(as_stream(stream));
        cleared = host::cuda_status(error, "clearing the DeviceStatus records");
    }
    cuda_workspace().close_epoch(!first.is_ok() || !cleared.is_ok());
    return first.is_ok() ? cleared : first;
}

}  // namespace mok::cuda
