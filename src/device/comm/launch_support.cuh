// Helpers shared by the transport's launch functions (the .cu files of device/comm and device/plan).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "device/comm/rank_set.hpp"
#include "device/comm/transport_launch.hpp"
#include "device/comm/transport_params.cuh"
#include "host/cuda/cuda_status.hpp"
#include "mok/status.hpp"

namespace mok::comm {

// Fills a RankSet with make(slot) for every rank of the group.
template <typename Params, typename Peers, typename MakeFn>
RankSet<Params> rank_set(const LaunchGroup<Peers>& group, int32_t blocks_per_rank, MakeFn&& make) {
    RankSet<Params> set{};
    set.num_ranks = group.num_ranks;
    set.blocks_per_rank = blocks_per_rank;
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        set.ranks[slot] = make(slot);
    }
    return set;
}

// Load the kernels of each transport .cu file (host/cuda/kernel_attributes.hpp); validate_group calls them all.
Status load_exchange_kernels();
Status load_row_kernels();
Status load_plan_kernels();

inline Status launch_status(const char* kernel) {
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError, std::string(kernel) + ": " + cudaGetErrorString(error)};
    }
    return Status::ok();
}

using host::cuda_status;

}  // namespace mok::comm
