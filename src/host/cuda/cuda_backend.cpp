#include "host/cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <string>

#include "device/comm/copy_geometry.hpp"
#include "device/comm/rank_set.hpp"
#include "host/comm/communicator.hpp"
#include "host/cuda/cuda_layer.hpp"
#include "host/cuda/cuda_workspace.hpp"
#include "host/cuda/layer_layout.hpp"

namespace mok::cuda {
namespace {

// The device planner's count kernel keeps a [chunks][E] int32 histogram in shared memory, one chunk per block
// at least: E * 4 bytes must fit a block's opt-in shared memory on Hopper (227 KiB), with room to spare.
constexpr int64_t kMaxExperts = 32768;
// The transport's source-rank masks are 64-bit words (comm::kMaxEpRanks in device/comm/dispatch.cuh, a device
// header): its launches refuse larger groups, so the options do too.
constexpr int32_t kMaxEpGroup = 64;
// The kernels are built for sm_90a only.
constexpr int kComputeMajor = 9;
constexpr int kComputeMinor = 0;

std::string str(int64_t v) {
    return std::to_string(v);
}

Status check_device(Device device, const char* path) {
    if (device.type != DeviceType::kCuda) {
        return Status::invalid_argument(path, "a CUDA device for Backend::kCuda, got " + to_string(device));
    }
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
        cudaGetLastError();
        return {StatusCode::kNotSupported,
                std::string("Backend::kCuda: no CUDA device is visible (") + cudaGetErrorString(error) + ")"};
    }
    if (device.index < 0 || device.index >= count) {
        return Status::invalid_argument(
            path, "a CUDA device in cuda:0..cuda:" + str(count - 1) + ", got " + to_string(device));
    }
    int major = 0;
    int minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index) != cudaSuccess) {
        cudaGetLastError();
        return {StatusCode::kCudaError, "reading the compute capability of " + to_string(device)};
    }
    if (major != kComputeMajor || minor != kComputeMinor) {
        return {StatusCode::kNotSupported, "Backend::kCuda runs sm_90a kernels (compute capability 9.0); " +
                                               to_string(device) + " has " + str(major) + "." + str(minor)};
    }
    return Status::ok();
}

Status check_topology(const LayerOptions& options) {
    const Topology& t = options.topology;
    const bool all_local = t.num_local_ranks == t.ep_size;
    if (all_local) {
        if (t.ep_size > comm::kMaxLaunchRanks) {
            return {StatusCode::kNotSupported,
                    "options.topology.ep_size: with every rank on one GPU (virtual ranks) "
                    "Backend::kCuda drives at most " +
                        str(comm::kMaxLaunchRanks) + " ranks, got " + str(t.ep_size)};
        }
        if (options.communicator != nullptr) {
            return Status::invalid_argument("options.communicator",
                                            "null when every EP rank is local (num_local_ranks == ep_size)");
        }
        return Status::ok();
    }
    if (t.num_local_ranks != 1) {
        return {StatusCode::kNotSupported,
                "options.topology.num_local_ranks: Backend::kCuda drives every rank (virtual ranks, " + str(t.ep_size) +
                    ") or one rank per process (1), got " + str(t.num_local_ranks)};
    }
    if (t.ep_size > kMaxEpGroup) {
        return {StatusCode::kNotSupported, "options.topology.ep_size: Backend::kCuda supports EP groups of at most " +
                                               str(kMaxEpGroup) + " ranks, got " + str(t.ep_size)};
    }
    const comm::EpCommunicator* comm = comm::as_ep_communicator(options.communicator.get());
    if (options.communicator == nullptr) {
        return Status::invalid_argument("options.communicator",
                                        "the EP group's communicator when ranks live in other processes "
                                        "(num_local_ranks 1 < ep_size " +
                                            str(t.ep_size) + "), got null");
    }
    if (comm == nullptr) {
        return Status::invalid_argument("options.communicator",
                                        "a Communicator made by Communicator::create or Communicator::borrow");
    }
    if (comm->size() != t.ep_size) {
        return Status::invalid_argument(
            "options.communicator", "a communicator of ep_size " + str(t.ep_size) + " ranks, got " + str(comm->size()));
    }
    if (comm->rank() != t.first_local_rank) {
        return Status::invalid_argument(
            "options.topology.first_local_rank",
            "the communicator's rank " + str(comm->rank()) + ", got " + str(t.first_local_rank));
    }
    if (comm->device() != options.device.index) {
        return Status::invalid_argument("options.device", "the communicator's device cuda:" + str(comm->device()) +
                                                              ", got " + to_string(options.device));
    }
    return Status::ok();
}

class CudaBackend final : public api::BackendProvider {
  public:
    Status check_options(const LayerOptions& options) const override {
        MOK_RETURN_IF_ERROR(check_device(options.device, "options.device"));
        MOK_RETURN_IF_ERROR(check_topology(options));
        const LayerShape& s = options.shape;
        if (s.hidden * 2 > static_cast<int64_t>(comm::kMaxCopyRowBytes)) {
            return {StatusCode::kNotSupported, "options.shape.hidden: the transport moves rows of at most " +
                                                   str(comm::kMaxCopyRowBytes) + " bytes, got " + str(s.hidden) +
                                                   " bf16 elements"};
        }
        if (s.num_experts > kMaxExperts) {
            return {StatusCode::kNotSupported, "options.shape.num_experts: the device planner handles at most " +
                                                   str(kMaxExperts) + " experts, got " + str(s.num_experts)};
        }
        return Status::ok();
    }

    size_t workspace_bytes(const LayerOptions& options) const override {
        return static_cast<size_t>(WorkspaceLayout::make(LayerDims::of(options)).total_bytes);
    }

    Status create_workspace(Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                            std::shared_ptr<Workspace>* out) const override {
        MOK_RETURN_IF_ERROR(check_device(device, "device"));
        if (communicator == nullptr) {
            return CudaWorkspace::create_local(device, bytes, out);
        }
        return CudaWorkspace::create_shared(device, bytes, std::move(communicator), out);
    }

    Status create_layer(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                        std::unique_ptr<MoeLayer>* out) const override {
        return CudaLayer::create(options, std::move(workspace), out);
    }
};

}  // namespace

const api::BackendProvider& backend() {
    static const CudaBackend provider;
    return provider;
}

}  // namespace mok::cuda
