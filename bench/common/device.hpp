// What a result records about the machine: the device, its size, how many GPUs the run used.
#pragma once

#include <cstddef>
#include <string>

#include "bench/common/json.hpp"
#include "bench/common/result.hpp"

namespace mok::bench {

struct DeviceInfo {
    std::string name;  // "NVIDIA H200"
    int sm_count = 0;
    int compute_capability = 0;  // major * 10 + minor: 90 on Hopper
    size_t l2_bytes = 0;
    size_t memory_bytes = 0;
    int clock_khz = 0;         // peak SM clock
    int memory_clock_khz = 0;  // peak memory clock
};

// Throws CudaError if the device cannot be queried.
DeviceInfo query_device(int device);
// GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 when there is no driver or device.
int visible_gpu_count();

// RunInfo for `benchmark` run on `num_gpus` GPUs, device 0 describing them all (the machines are homogeneous):
// device name and SM count, commit (current_commit), date (utc_now) and run id (run_id_for).
RunInfo collect_run_info(const std::string& benchmark, int num_gpus);

// Device and software facts worth keeping next to the figures: compute capability, memory, L2, clocks,
// driver and runtime versions, visible GPU count.
Json environment_json(int device);

}  // namespace mok::bench
