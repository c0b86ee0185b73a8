// The SwiGLU activation and its backward in fp32, one fixed sequence of correctly rounded operations.
//
// The GEMM epilogues and the CPU reference's device-rounding mode both call these, so given the same bf16
// pre-activations they produce the same bits (docs/semantics.md, "Where results are rounded").
//   forward:  s = 1 / (1 + e^-g),  silu = g * s,  h = silu * u
//   backward: du = dh * silu,  dg = (dh * u) * s * (1 + g * (1 - s))
#pragma once

#include "common/fp32_ops.hpp"
#include "common/host_device.hpp"

namespace mok::swiglu {

MOK_HOST_DEVICE MOK_INLINE float sigmoid(float g) {
    return fp32::div(1.0f, fp32::add(1.0f, fp32::exp(-g)));
}

// sigmoid(g) and silu(g) = g * sigmoid(g): what both directions derive from g.
struct Activation {
    float s;
    float silu;
};

MOK_HOST_DEVICE MOK_INLINE Activation activation(float g) {
    const float s = sigmoid(g);
    return {s, fp32::mul(g, s)};
}

// h = silu(g) * u, before its rounding to bf16.
MOK_HOST_DEVICE MOK_INLINE float forward(float u, const Activation& a) {
    return fp32::mul(a.silu, u);
}
MOK_HOST_DEVICE MOK_INLINE float forward(float g, float u) {
    return forward(u, activation(g));
}

struct Grads {
    float dg;
    float du;
};

// Gradients of h = silu(g) * u given dh, before their rounding to bf16.
MOK_HOST_DEVICE MOK_INLINE Grads backward(float g, float u, float dh, const Activation& a) {
    const float dsilu = fp32::mul(a.s, fp32::add(1.0f, fp32::mul(g, fp32::sub(1.0f, a.s))));
    return {fp32::mul(fp32::mul(dh, u), dsilu), fp32::mul(dh, a.silu)};
}
MOK_HOST_DEVICE MOK_INLINE Grads backward(float g, float u, float dh) {
    return backward(g, u, dh, activation(g));
}

}  // namespace mok::swiglu
