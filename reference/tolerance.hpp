// The one tolerance model of mok's tests and benchmarks. No test tunes its own tolerance.
//
// Model: a result computed at the contract's precision (bf16 storage, fp32 accumulation) is accepted when its
// error against the fp64 oracle is at most kErrorRatio times the error of the same-precision CPU reference
// (reference::Precision::kDevice) against that oracle, plus a floor for the case where the reference happens
// to be exact. Errors are relative Frobenius norms, ||got - oracle|| / ||oracle|| (FlashAttention-3 checks its
// kernels the same way against a same-precision PyTorch run).
//   kErrorRatio = 2: the GPU and the reference round at the same places but may sum a GEMM's K in another
//                    order; reordering an fp32 sum perturbs it by about as much as its own rounding, so the two
//                    errors are of one size, and twice the reference's leaves room without hiding a bug (a
//                    wrong element or a dropped row shows up as an error of order 1, not 1e-3).
//   kErrorFloor = 2^-16: two fp32 roundings' worth of relative error at bf16 output precision; covers a
//                    reference error of zero, where any reordering would otherwise fail.
// A NaN or infinity anywhere in the result never passes.
#pragma once

#include <cmath>
#include <cstdio>
#include <span>
#include <string>

namespace mok::tolerance {

inline constexpr double kErrorRatio = 2.0;
inline constexpr double kErrorFloor = 1.0 / 65536.0;

// ||a - b|| / ||b||, or ||a|| when b is all zeros; infinity if a holds a NaN or an infinity.
inline double relative_error(std::span<const double> a, std::span<const double> b) {
    double diff = 0.0;
    double norm = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) {
            return INFINITY;
        }
        const double d = a[i] - b[i];
        diff += d * d;
        norm += b[i] * b[i];
    }
    return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

struct Verdict {
    bool pass = false;
    double error = 0.0;            // of the result under test, against the oracle
    double reference_error = 0.0;  // of the same-precision reference, against the oracle
    double bound = 0.0;

    std::string describe() const {
        char buffer[160];
        std::snprintf(buffer, sizeof(buffer), "error %.3e vs bound %.3e (same-precision reference error %.3e)", error,
                      bound, reference_error);
        return buffer;
    }
};

// Judges `got` against the oracle, given the same-precision reference's result.
inline Verdict judge(std::span<const double> got, std::span<const double> same_precision,
                     std::span<const double> oracle) {
    Verdict v;
    if (got.size() != oracle.size() || same_precision.size() != oracle.size()) {
        return v;
    }
    v.error = relative_error(got, oracle);
    v.reference_error = relative_error(same_precision, oracle);
    v.bound = kErrorRatio * v.reference_error + kErrorFloor;
    v.pass = v.error <= v.bound;
    return v;
}

}  // namespace mok::tolerance
