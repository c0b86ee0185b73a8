// Arithmetic instructions without a CUDA intrinsic of their exact semantics.
#pragma once

namespace mok::ptx {

// rcp.approx.ftz.f32: 1/x within one ulp (PTX ISA), subnormal inputs and results flushed to zero, one MUFU.RCP and no
// branch. The intrinsic __frcp_rn rounds correctly but checks for the inputs its fast path cannot take and branches
// for them; callers that know their range use this and refine it (epilogue/swiglu_activations.cuh). Not volatile:
// a pure function of its input, which the compiler may move and schedule like any arithmetic.
__device__ __forceinline__ float rcp_approx_ftz(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace mok::ptx
