#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/buffers.hpp"
#include "bench/common/cuda_check.hpp"
#include "bench/common/data.hpp"
#include "common/bf16.hpp"
#include "reference/tolerance.hpp"

namespace mok::bench::ceilings {
namespace {

// Entries checked against the host: enough that the relative Frobenius error of the sample is stable (its
// spread shrinks as one over the square root of the count), few enough to take milliseconds.
constexpr int kNumCheckedEntries = 512;
constexpr uint64_t kSeedA = 0x6a09e667f3bcc908ull;
constexpr uint64_t kSeedB = 0xbb67ae8584caa73bull;
constexpr uint64_t kSeedSamples = 0x3c6ef372fe94f82bull;
// Operands in [-1, 1): products stay well inside bf16 and fp32 range at any k.
constexpr float kOperandLo = -1.0f;
constexpr float kOperandHi = 1.0f;
// cuBLAS's recommended workspace on Hopper: its faster kernels need one.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr double kFlopsPerMultiplyAdd = 2.0;
constexpr double kFlopsPerTeraflop = 1e12;

void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(status));
    }
}

class CublasHandle {
  public:
    explicit CublasHandle(cudaStream_t stream) : workspace_(0, kCublasWorkspaceBytes) {
        check_cublas(cublasCreate(&handle_), "cublasCreate");
        check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
        check_cublas(cublasSetWorkspace(handle_, workspace_.get(), kCublasWorkspaceBytes), "cublasSetWorkspace");
    }
    ~CublasHandle() { cublasDestroy(handle_); }
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    cublasHandle_t get() const { return handle_; }

  private:
    DeviceBuffer<unsigned char> workspace_;
    cublasHandle_t handle_ = nullptr;
};

// cuBLAS is column-major: the row-major C[m, n] is C^T[n, m] column-major, and C^T = B A^T with B[n, k] read
// transposed and A[m, k] as it is ("TN", the fastest layout).
void run_gemm(cublasHandle_t handle, const GemmShape& shape, const __nv_bfloat16* a, const __nv_bfloat16* b,
              __nv_bfloat16* c) {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(shape.n), static_cast<int>(shape.m),
                              static_cast<int>(shape.k), &alpha, b, CUDA_R_16BF, static_cast<int>(shape.k), a,
                              CUDA_R_16BF, static_cast<int>(shape.k), &beta, c, CUDA_R_16BF, static_cast<int>(shape.n),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

std::vector<float> copy_to_host(const __nv_bfloat16* values_on_device, int64_t count) {
    std::vector<Bf16> bits(static_cast<size_t>(count));
    MOK_BENCH_CHECK_CUDA(cudaMemcpy(bits.data(), values_on_device, count * sizeof(Bf16), cudaMemcpyDeviceToHost));
    std::vector<float> values;
    values.reserve(bits.size());
    for (const Bf16 b : bits) {
        values.push_back(b.to_float());
    }
    return values;
}

// Sampled entries of C against the fp64 oracle, judged by the project's tolerance model with a same-precision
// host computation (fp32 sum of the exact bf16 products in index order, one bf16 rounding) as the yardstick.
tolerance::Verdict check_gemm(const GemmShape& shape, const __nv_bfloat16* a, const __nv_bfloat16* b,
                              const __nv_bfloat16* c) {
    std::mt19937_64 rng(kSeedSamples);
    std::uniform_int_distribution<int64_t> pick_row(0, shape.m - 1);
    std::uniform_int_distribution<int64_t> pick_col(0, shape.n - 1);
    std::vector<double> got;
    std::vector<double> same_precision;
    std::vector<double> oracle;
    for (int sample = 0; sample < kNumCheckedEntries; ++sample) {
        const int64_t i = pick_row(rng);
        const int64_t j = pick_col(rng);
        const std::vector<float> a_row = copy_to_host(a + i * shape.k, shape.k);
        const std::vector<float> b_row = copy_to_host(b + j * shape.k, shape.k);
        double exact = 0.0;
        float sum = 0.0f;
        for (int64_t p = 0; p < shape.k; ++p) {
            exact += static_cast<double>(a_row[p]) * b_row[p];
            sum = std::fma(a_row[p], b_row[p], sum);
        }
        got.push_back(copy_to_host(c + i * shape.n + j, 1).front());
        same_precision.push_back(round_to_bf16(sum));
        oracle.push_back(exact);
    }
    return tolerance::judge(got, same_precision, oracle);
}

std::string shape_name(const GemmShape& shape) {
    return std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" + std::to_string(shape.k);
}

}  // namespace

Case gemm_case(const GemmShape& shape, const TimingOptions& timing) {
    Case result;
    result.name = "gemm_bf16/" + shape_name(shape);
    result.params.set("m", shape.m).set("n", shape.n).set("k", shape.k);
    result.params.set("layout", "row-major C[m,n] = A[m,k] B[n,k]^T").set("accumulate", "fp32");
    result.params.set("library", "cuBLAS " + std::to_string(CUBLAS_VERSION));

    MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
    const Stream stream(0);
    const CublasHandle handle(stream.get());
    const DeviceBuffer<__nv_bfloat16> a(0, static_cast<size_t>(shape.m * shape.k));
    const DeviceBuffer<__nv_bfloat16> b(0, static_cast<size_t>(shape.n * shape.k));
    const DeviceBuffer<__nv_bfloat16> c(0, static_cast<size_t>(shape.m * shape.n));
    fill_uniform(a.get(), a.count(), kOperandLo, kOperandHi, kSeedA, stream.get());
    fill_uniform(b.get(), b.count(), kOperandLo, kOperandHi, kSeedB, stream.get());
    run_gemm(handle.get(), shape, a.get(), b.get(), c.get());
    stream.synchronize();

    const tolerance::Verdict verdict = check_gemm(shape, a.get(), b.get(), c.get());
    result.params.set("check", verdict.describe());
    if (verdict.pass) {
        Timer timer({StreamOnDevice{0, stream.get()}});
        const TimingStats stats =
            timer.time([&](int) { run_gemm(handle.get(), shape, a.get(), b.get(), c.get()); }, timing);
        const double tera_flops =
            kFlopsPerMultiplyAdd * static_cast<double>(shape.m) * shape.n * shape.k / kFlopsPerTeraflop;
        result.figures.push_back(time_figure("time", stats));
        result.figures.push_back(rate_figure("tflops", "TFLOP/s", tera_flops, stats));
    } else {
        result.status = CaseStatus::kFailed;
        result.note = "result check failed: " + verdict.describe();
    }
    return result;
}

}  // namespace mok::bench::ceilings
