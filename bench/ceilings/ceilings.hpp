// The ceilings every mok figure is divided by, measured in the same run as the figures: the dense bf16 GEMM
// rate (cuBLAS), the device copy bandwidth, the read-only and write-only bandwidths, and the peer-to-peer copy
// bandwidth between GPUs 0 and 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/common/result.hpp"
#include "bench/common/timing.hpp"

namespace mok::bench::ceilings {

// Row-major C[m, n] = A[m, k] B[n, k]^T: the layout of an expert GEMM against a [out, in] weight.
struct GemmShape {
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;
};

// cuBLAS bf16 GEMM with fp32 accumulation on device 0, checked against a host dot product on sampled entries
// (tolerance model: reference/tolerance.hpp) before it is timed. Figures: time, tflops.
Case gemm_case(const GemmShape& shape, const TimingOptions& timing);

// cudaMemcpyAsync within device 0 of `bytes`; the bandwidth counts read and write (2 * bytes per run).
Case device_copy_case(size_t bytes, const TimingOptions& timing);

// One-way DRAM ceilings on device 0 (stream_ceiling.cu): a kernel that only reads `bytes` (16-byte loads, summed
// and checked against the host's sum of the pattern) and one that only writes them (16-byte stores, checked by
// that sum). The bandwidth counts the one direction.
Case device_read_case(size_t bytes, const TimingOptions& timing);
Case device_write_case(size_t bytes, const TimingOptions& timing);

// cudaMemcpyPeerAsync from device `src` to device `dst` of `bytes`, on a stream of the source device.
Case peer_copy_case(int src, int dst, size_t bytes, const TimingOptions& timing);

// Devices 0 and 1 copy `bytes` to each other at once; each repetition takes the slower direction's time.
// Figures: the bandwidth each way and both ways together.
Case peer_copy_both_case(size_t bytes, const TimingOptions& timing);

// Enables peer access from each of devices a, b to the other; false when the hardware cannot (the copies then
// go through the host and the figures say so in their note).
bool enable_peer_access(int a, int b);

}  // namespace mok::bench::ceilings
