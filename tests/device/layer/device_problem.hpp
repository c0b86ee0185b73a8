// An ApiProblem (tests/api/api_problem.hpp) mirrored on the GPU: every tensor of every rank in device memory,
// with views for Backend::kCuda, and copies in both directions so that GPU results land in host tensors that the
// CPU tests' comparisons read.
#pragma once

#include <cstdint>
#include <vector>

#include "api/api_problem.hpp"
#include "mok/mok.hpp"

namespace mok::testing {

// A device tensor of a host tensor's dtype and shape. Its rows may be padded independently of the host's
// (`row_padding` extra elements per row of the innermost dimension); copies convert between the layouts.
class DeviceTensor {
  public:
    DeviceTensor() = default;
    DeviceTensor(const HostTensor& like, int device, int64_t row_padding);
    ~DeviceTensor();
    DeviceTensor(DeviceTensor&& other) noexcept;
    DeviceTensor& operator=(DeviceTensor&& other) noexcept;
    DeviceTensor(const DeviceTensor&) = delete;
    DeviceTensor& operator=(const DeviceTensor&) = delete;

    TensorView view() const { return view_; }
    void upload(const HostTensor& host);
    void download(HostTensor& host) const;
    // Every byte 0xff: NaN as bf16 and fp32, so that an element the layer never wrote shows up.
    void poison();

  private:
    TensorView view_{};
    size_t bytes_ = 0;
};

struct DeviceWeights {
    DeviceTensor gate, up, down;
};

struct DeviceRank {
    DeviceTensor x, expert_ids, router_weights, y, dy, dx, d_router_weights;
    DeviceWeights experts;
    std::vector<DeviceWeights> shared;
    DeviceWeights d_experts_fresh, d_experts_main;
    std::vector<DeviceWeights> d_shared_fresh, d_shared_main;
};

class DeviceProblem {
  public:
    // Uploads the inputs and the current outputs (poison, main_grad) of `host`: every rank, or only rank
    // `only_rank` (a process's one rank of a real EP group). x, y, dy and dx get `activation_padding` extra
    // elements per row; everything else is dense, as the CUDA backend requires.
    DeviceProblem(const ApiProblem& host, int device, int64_t activation_padding = 0, int only_rank = -1);

    // The options of the host problem on the CUDA backend: every rank on this GPU (virtual ranks), or, for a
    // one-rank mirror, that rank with the communicator still to be set.
    LayerOptions options() const;

    std::vector<ForwardArgs> forward_args() const;
    std::vector<RankInputs> inputs() const;
    std::vector<BackwardArgs> backward_args(GradMode mode) const;

    // Copies the host's outputs as they are now (poisoned outputs, main_grad values) to the device.
    void upload_outputs(const ApiProblem& host);
    // Copies every output (y, dx, d_router_weights, both kinds of weight gradients) into `host`.
    void download_outputs(ApiProblem& host) const;
    void poison_outputs();

    // The mirrored ranks, local index 0 being host rank first_rank().
    int num_ranks() const { return static_cast<int>(ranks_.size()); }
    int first_rank() const { return first_rank_; }

  private:
    RankInputs rank_inputs(const DeviceRank& rank) const;

    LayerOptions options_;
    int first_rank_ = 0;
    std::vector<DeviceRank> ranks_;
};

}  // namespace mok::testing
