#include <stdexcept>

#include "bench/common/cuda_check.hpp"
#include "bench/common/host_gate.hpp"
#include "device/ptx/timer.cuh"

namespace mok::bench {
namespace {

constexpr int kReleaseWord = 0;
constexpr int kTimeoutWord = 1;
constexpr int kNumWords = 2;
// Between polls of host memory across PCIe: short against any batch, long enough not to flood the bus.
constexpr unsigned kPollIntervalNs = 1000;

// One thread: waits until the release word reaches `generation`. The word guards no data (the batch behind
// the hold reads nothing the host writes), so plain volatile reads suffice and no fence is needed.
__global__ void hold_kernel(volatile uint32_t* words, uint32_t generation, uint64_t timeout_ns) {
    const uint64_t start = ptx::global_timer_ns();
    while (words[kReleaseWord] < generation) {
        if (ptx::global_timer_ns() - start > timeout_ns) {
            atomicAdd(const_cast<uint32_t*>(words + kTimeoutWord), 1u);
            return;
        }
        __nanosleep(kPollIntervalNs);
    }
}

}  // namespace

HostGate::HostGate(std::vector<StreamOnDevice> streams) : streams_(std::move(streams)) {
    if (streams_.empty()) {
        throw std::invalid_argument("HostGate: expected at least one stream");
    }
    void* words = nullptr;
    // Portable: every device of the process may read it; mapped: through the same address (unified addressing).
    MOK_BENCH_CHECK_CUDA(
        cudaHostAlloc(&words, kNumWords * sizeof(uint32_t), cudaHostAllocPortable | cudaHostAllocMapped));
    words_ = static_cast<volatile uint32_t*>(words);
    words_[kReleaseWord] = 0;
    words_[kTimeoutWord] = 0;
}

HostGate::~HostGate() {
    cudaFreeHost(const_cast<uint32_t*>(words_));
}

void HostGate::hold() {
    ++generation_;
    int saved = 0;
    MOK_BENCH_CHECK_CUDA(cudaGetDevice(&saved));
    for (const StreamOnDevice& s : streams_) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(s.device));
        hold_kernel<<<1, 1, 0, s.stream>>>(words_, generation_, kHoldTimeoutNs);
        MOK_BENCH_CHECK_CUDA(cudaGetLastError());
    }
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(saved));
}

void HostGate::release() {
    words_[kReleaseWord] = generation_;
}

void HostGate::check() const {
    if (words_[kTimeoutWord] != 0) {
        throw std::runtime_error(
            "HostGate: a hold ran out before the host released it (the batch took longer than 10 s to enqueue, or "
            "filled the launch queue); the figures of that batch include host time");
    }
}

}  // namespace mok::bench
