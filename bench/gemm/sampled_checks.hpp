// The checks mok-bench-gemm runs on each form before timing it: a few sampled output elements against a CPU dot
// product in fp64 (the oracle) and in fp32 with the kernel's rounding (the same-precision reference), judged by the
// tolerance model (reference/tolerance.hpp). The GPU tests check every element; these catch a broken build or a
// form that fails only at a benchmark's full size.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "bench/gemm/problem.hpp"
#include "reference/tolerance.hpp"

namespace mok::bench::gemm_bench {

// out[r][j] = sum_k a[r][k] * w_e[j][k] (w_e: [n, k] per expert) at sampled rows r: gate/up (its g half) and down.
tolerance::Verdict check_rows_against_weights(const Problem& p, const __nv_bfloat16* a, const __nv_bfloat16* w,
                                              const __nv_bfloat16* out, int64_t out_stride, int64_t n, int64_t k);

// dx rows: out[r][j] = sum_i dg[r][i] W_gate[i][j] + du[r][i] W_up[i][j].
tolerance::Verdict check_dgrad_gate_up(const Problem& p);

// du = bf16(w * dh' * silu(g)), dh' = bf16(W_down^T dy): the dgrad epilogue's u-half output.
tolerance::Verdict check_dgrad_down(const Problem& p);

// A weight gradient run fresh (bf16) into `fresh`, at sampled (m, n) of one expert: the sum over the expert's
// rows of a[r][m] * b[r][n], a: [rows, a_stride] from column a_offset, b: [rows, n_extent].
tolerance::Verdict check_weight_grad(const Problem& p, const __nv_bfloat16* a, int64_t a_stride, int64_t a_offset,
                                     const __nv_bfloat16* b, int64_t m_extent, int64_t n_extent,
                                     const __nv_bfloat16* fresh);

}  // namespace mok::bench::gemm_bench
