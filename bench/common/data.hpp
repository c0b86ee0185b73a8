// Device data for benchmarks: seeded random fills (never zeros: a zero operand can make hardware take shortcuts
// and makes a wrong result look right) and an exact comparison of two device buffers for correctness checks
// before timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mok::bench {

// data[i] = a value drawn uniformly from [lo, hi), a pure function of (seed, i): the same seed gives the same
// data on every device and at every launch configuration. Enqueued on `stream`.
void fill_uniform(__nv_bfloat16* data, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream);
void fill_uniform(float* data, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream);

// Bytes that differ between device buffers a and b (either may be a peer device's memory with peer access
// enabled). Runs on the current device and waits for it: for checks before timing, not inside timed loops.
uint64_t count_differences(const void* a, const void* b, size_t bytes, cudaStream_t stream);

}  // namespace mok::bench
