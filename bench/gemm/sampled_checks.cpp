// mok-bench-gemm's sampled checks (sampled_checks.hpp).
#include "bench/gemm/sampled_checks.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "common/bf16.hpp"

namespace mok::bench::gemm_bench {
namespace {

// Rows of a point whose every output element is checked (the weight gradients sample kSamples elements instead).
constexpr int kCheckedRows = 3;

float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

std::vector<float> host_floats(const __nv_bfloat16* device, size_t offset, size_t count) {
    const std::vector<__nv_bfloat16> raw = download(device, offset, count);
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
        out[i] = to_float(raw[i]);
    }
    return out;
}

// Sampled check: collects the GPU value, the fp32-accumulated same-precision value and the fp64 oracle of each
// sampled element, and judges them with the tolerance model.
class SampledCheck {
  public:
    void add(double got, double same, double oracle) {
        got_.push_back(got);
        same_.push_back(same);
        oracle_.push_back(oracle);
    }
    tolerance::Verdict verdict() const { return tolerance::judge(got_, same_, oracle_); }

  private:
    std::vector<double> got_, same_, oracle_;
};

struct Dot {
    double oracle = 0.0;
    float same = 0.0f;
    void add(float a, float b) {
        oracle += static_cast<double>(a) * b;
        same = std::fma(a, b, same);
    }
};

std::vector<int32_t> sample_rows(const Problem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.hidden * 131 + p.width));
    std::uniform_int_distribution<int32_t> pick(0, p.rows - 1);
    std::vector<int32_t> rows;
    for (int i = 0; i < kCheckedRows; ++i) {
        rows.push_back(pick(rng));
    }
    return rows;
}

int32_t expert_of(const Problem& p, int32_t row) {
    return row / (p.rows / p.num_experts);
}

}  // namespace

tolerance::Verdict check_rows_against_weights(const Problem& p, const __nv_bfloat16* a, const __nv_bfloat16* w,
                                              const __nv_bfloat16* out, int64_t out_stride, int64_t n, int64_t k) {
    SampledCheck check;
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> a_row = host_floats(a, static_cast<size_t>(r) * k, k);
        const std::vector<float> w_e = host_floats(w, static_cast<size_t>(expert_of(p, r)) * n * k, n * k);
        const std::vector<float> got = host_floats(out, static_cast<size_t>(r) * out_stride, n);
        for (int64_t j = 0; j < n; ++j) {
            Dot d;
            for (int64_t i = 0; i < k; ++i) {
                d.add(a_row[i], w_e[j * k + i]);
            }
            check.add(got[j], round_to_bf16(d.same), d.oracle);
        }
    }
    return check.verdict();
}

tolerance::Verdict check_dgrad_gate_up(const Problem& p) {
    SampledCheck check;
    const int64_t H = p.hidden, I = p.width;
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> dgu = host_floats(p.dgu.get(), static_cast<size_t>(r) * 2 * I, 2 * I);
        const size_t e = expert_of(p, r);
        const std::vector<float> wg = host_floats(p.w_gate.get(), e * I * H, I * H);
        const std::vector<float> wu = host_floats(p.w_up.get(), e * I * H, I * H);
        const std::vector<float> got = host_floats(p.out.get(), static_cast<size_t>(r) * H, H);
        for (int64_t j = 0; j < H; ++j) {
            Dot d;
            for (int64_t i = 0; i < I; ++i) {
                d.add(dgu[i], wg[i * H + j]);
            }
            for (int64_t i = 0; i < I; ++i) {
                d.add(dgu[I + i], wu[i * H + j]);
            }
            check.add(got[j], round_to_bf16(d.same), d.oracle);
        }
    }
    return check.verdict();
}

tolerance::Verdict check_dgrad_down(const Problem& p) {
    SampledCheck check;
    const int64_t H = p.hidden, I = p.width;
    const std::vector<float> weight = download(p.row_weight.get(), 0, p.rows);
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> dy = host_floats(p.dy.get(), static_cast<size_t>(r) * H, H);
        const std::vector<float> gu = host_floats(p.gu.get(), static_cast<size_t>(r) * 2 * I, 2 * I);
        const std::vector<float> wd = host_floats(p.w_down.get(), static_cast<size_t>(expert_of(p, r)) * H * I, H * I);
        const std::vector<float> got = host_floats(p.dgu.get(), static_cast<size_t>(r) * 2 * I + I, I);
        for (int64_t j = 0; j < I; ++j) {
            Dot d;
            for (int64_t i = 0; i < H; ++i) {
                d.add(dy[i], wd[i * I + j]);
            }
            const double g = gu[j];
            const double silu = g / (1.0 + std::exp(-g));
            check.add(got[j], round_to_bf16(weight[r] * round_to_bf16(d.same) * static_cast<float>(silu)),
                      weight[r] * d.oracle * silu);
        }
    }
    return check.verdict();
}

tolerance::Verdict check_weight_grad(const Problem& p, const __nv_bfloat16* a, int64_t a_stride, int64_t a_offset,
                                     const __nv_bfloat16* b, int64_t m_extent, int64_t n_extent,
                                     const __nv_bfloat16* fresh) {
    constexpr int kSamples = 48;
    SampledCheck check;
    std::mt19937 rng(static_cast<uint32_t>(m_extent * 7 + n_extent));
    const int32_t rows_per_expert = p.rows / p.num_experts;
    const int64_t e = std::uniform_int_distribution<int64_t>(0, p.num_experts - 1)(rng);
    const std::vector<float> a_rows = host_floats(a, static_cast<size_t>(e) * rows_per_expert * a_stride,
                                                  static_cast<size_t>(rows_per_expert) * a_stride);
    const std::vector<float> b_rows = host_floats(b, static_cast<size_t>(e) * rows_per_expert * n_extent,
                                                  static_cast<size_t>(rows_per_expert) * n_extent);
    for (int s = 0; s < kSamples; ++s) {
        const int64_t m = std::uniform_int_distribution<int64_t>(0, m_extent - 1)(rng);
        const int64_t n = std::uniform_int_distribution<int64_t>(0, n_extent - 1)(rng);
        Dot d;
        for (int32_t r = 0; r < rows_per_expert; ++r) {
            d.add(a_rows[r * a_stride + a_offset + m], b_rows[r * n_extent + n]);
        }
        check.add(host_floats(fresh, (e * m_extent + m) * n_extent + n, 1)[0], round_to_bf16(d.same), d.oracle);
    }
    return check.verdict();
}

}  // namespace mok::bench::gemm_bench
