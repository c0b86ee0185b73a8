// Error checks for benchmark programs. A benchmark that hits a CUDA error cannot measure anything sound, so
// the check throws; the program's main catches it, records the case as failed and writes what it has.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace mok::bench {

class CudaError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t error, const char* expression, const char* file, int line) {
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expression + ": " +
                    cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

}  // namespace mok::bench

// Throws mok::bench::CudaError, naming the call and where it was made, when `expr` does not return cudaSuccess.
#define MOK_BENCH_CHECK_CUDA(expr)                                                       \
    do {                                                                                 \
        const cudaError_t mok_bench_error_ = (expr);                                     \
        if (mok_bench_error_ != cudaSuccess) {                                           \
            ::mok::bench::throw_cuda_error(mok_bench_error_, #expr, __FILE__, __LINE__); \
        }                                                                                \
    } while (false)
