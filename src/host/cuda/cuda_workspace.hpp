// The CUDA backend's Workspace: device memory every layer of a model shares, zeroed once at creation.
//
// With virtual ranks (every EP rank in this process) it is plain device memory. With one rank per process it is
// NCCL memory registered as one symmetric window with the EP group's communicator (collective to create and to
// destroy): the layer's transport window sits at its start, so peers address it through the registration.
//
// Beyond the bytes, a workspace keeps two things its layers share:
//   - the key its persistent transport state was laid out for (the first layer's, TransportStateKey): the state's
//     flags only grow, so a layer whose state would sit elsewhere must not use this workspace;
//   - the current synchronize epoch: every context filled since the last synchronize refers to it, and a
//     synchronize that finds a failure marks it failed, so that backward refuses those contexts.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>

#include "host/comm/nccl_window.hpp"
#include "host/cuda/layer_layout.hpp"
#include "mok/comm.hpp"
#include "mok/layer.hpp"

namespace mok::cuda {

// The calls between two synchronize()s of a workspace's layers.
struct SyncEpoch {
    std::atomic<bool> failed{false};  // set by the synchronize that found a device-side failure in these calls
};

class CudaWorkspace final : public Workspace {
  public:
    // Device memory on `device` (virtual ranks); `communicator` must be null.
    static Status create_local(Device device, size_t bytes, std::shared_ptr<Workspace>* out);
    // An NCCL symmetric window of at least `bytes` registered with `communicator` (a rank per process);
    // collective over the communicator.
    static Status create_shared(Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                                std::shared_ptr<Workspace>* out);
    ~CudaWorkspace() override;
    CudaWorkspace(const CudaWorkspace&) = delete;
    CudaWorkspace& operator=(const CudaWorkspace&) = delete;

    size_t bytes() const override { return bytes_; }
    Backend backend() const override { return Backend::kCuda; }
    Device device() const override { return device_; }
    void* data() override { return base_; }

    char* base() const { return base_; }
    // The registered window (one rank per process), or null for virtual ranks.
    const comm::NcclWindow* nccl_window() const { return window_.get(); }
    const std::shared_ptr<Communicator>& communicator() const { return communicator_; }

    // Ties the persistent state to `key` on first use; a later different key is an invalid "workspace".
    Status bind(const TransportStateKey& key);

    std::shared_ptr<SyncEpoch> epoch() const;
    // Ends the current epoch (marking it failed if `failed`) and starts a new one.
    void close_epoch(bool failed);

  private:
    CudaWorkspace(Device device, size_t bytes, char* base, std::unique_ptr<comm::NcclWindow> window,
                  std::shared_ptr<Communicator> communicator);

    Device device_;
    size_t bytes_;
    char* base_;
    std::unique_ptr<comm::NcclWindow> window_;    // owns base_ when set; otherwise base_ is from cudaMalloc
    std::shared_ptr<Communicator> communicator_;  // outlives window_, which is registered with it
    mutable std::mutex mutex_;
    std::optional<TransportStateKey> key_;
    std::shared_ptr<SyncEpoch> epoch_;
};

}  // namespace mok::cuda
