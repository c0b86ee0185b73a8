#include "bench/common/device.hpp"

#include <cuda_runtime_api.h>

#include "bench/common/cuda_check.hpp"

namespace mok::bench {
namespace {

int attribute(cudaDeviceAttr attr, int device) {
    int value = 0;
    MOK_BENCH_CHECK_CUDA(cudaDeviceGetAttribute(&value, attr, device));
    return value;
}

// CUDA encodes versions as 1000 * major + 10 * minor: 13000 -> "13.0".
std::string cuda_version_text(int version) {
    constexpr int kMajorScale = 1000;
    constexpr int kMinorScale = 10;
    return std::to_string(version / kMajorScale) + "." + std::to_string((version % kMajorScale) / kMinorScale);
}

}  // namespace

DeviceInfo query_device(int device) {
    constexpr int kMajorScale = 10;
    cudaDeviceProp prop{};
    MOK_BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    DeviceInfo info;
    info.name = prop.name;
    info.sm_count = prop.multiProcessorCount;
    info.compute_capability = prop.major * kMajorScale + prop.minor;
    info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    info.memory_bytes = prop.totalGlobalMem;
    info.clock_khz = attribute(cudaDevAttrClockRate, device);
    info.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, device);
    return info;
}

int visible_gpu_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        // No driver or no device: clear the sticky error so the caller can report it and go on.
        cudaGetLastError();
        return 0;
    }
    return count;
}

RunInfo collect_run_info(const std::string& benchmark, int num_gpus) {
    const DeviceInfo info = query_device(0);
    RunInfo run;
    run.benchmark = benchmark;
    run.device = info.name;
    run.sm_count = info.sm_count;
    run.num_gpus = num_gpus;
    run.commit = current_commit();
    run.date = utc_now();
    run.run_id = run_id_for(run.date, run.commit);
    return run;
}

Json environment_json(int device) {
    const DeviceInfo info = query_device(device);
    int driver_version = 0;
    int runtime_version = 0;
    MOK_BENCH_CHECK_CUDA(cudaDriverGetVersion(&driver_version));
    MOK_BENCH_CHECK_CUDA(cudaRuntimeGetVersion(&runtime_version));
    Json json = Json::object();
    json.set("compute_capability", info.compute_capability)
        .set("memory_bytes", info.memory_bytes)
        .set("l2_bytes", info.l2_bytes)
        .set("sm_clock_khz", info.clock_khz)
        .set("memory_clock_khz", info.memory_clock_khz)
        .set("cuda_driver", cuda_version_text(driver_version))
        .set("cuda_runtime", cuda_version_text(runtime_version))
        .set("visible_gpus", visible_gpu_count());
    return json;
}

}  // namespace mok::bench
