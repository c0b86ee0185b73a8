// One rank of a mok-bench-layer case: its data, weights, gradients, layers and contexts, on its own device and
// stream (rank r runs on GPU r), and the ranks of a case created together.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/bench.hpp"
#include "bench/layer/layer_case.hpp"
#include "mok/mok.hpp"

namespace mok::bench::layer {

// Throws std::runtime_error "<what>: <status>" unless `status` is ok.
void check(const Status& status, const std::string& what);

// Two layers share the rank's workspace: the timed one records nothing, and a second one records its stage times
// (Config::record_stage_times), so that the events cost the timed figures nothing.
class Rank {
  public:
    // Fills x, dy, the router weights and the weights from the case's seeds and uploads the case's expert ids
    // (make_expert_ids, variant 0); `communicator` is null at EP 1.
    Rank(const LayerCase& c, int rank, std::shared_ptr<Communicator> communicator);

    // Makes `ids` the expert ids of the following steps (the copy is synchronous: `ids` may go right after).
    void upload_ids(const std::vector<int32_t>& ids);

    // One forward and backward of the stage-recording layer.
    void profiled_step();
    // Waits for the stage-recording layer and returns its stage times.
    std::vector<StageTime> stage_times();

    void forward();
    void backward();

    // Waits and reports device-side failures, and checks that y and dx hold finite values (a sampled check:
    // the GPU tests hold the layer to the CPU reference; here a broken build must not produce a figure).
    void check_results();

    // Device memory in use on the rank's GPU (every allocation on it, not only this rank's).
    double memory_in_use_gib() const;

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
std::vector<std::unique_ptr<Rank>> make_ranks(const LayerCase& c);

}  // namespace mok::bench::layer
