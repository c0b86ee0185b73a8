// The two arithmetics of the CPU reference (reference.hpp, Precision). The FFN and the simulation are written
// once, as templates over one of these policies, so the two precisions cannot differ in anything but rounding.
//
// Every operation the contract names (docs/semantics.md, sections 5 and 6) is one call here:
//   input_bf16 / input_fp32  the value a tensor of that dtype holds on the GPU
//   madd(a, b, acc)          one step of a sequential GEMM or dot-product sum, acc + a * b
//   add, mul                 the combine's and the backward's scalar operations
//   store_bf16               a place where the contract rounds to bf16
//   swiglu_forward/backward  the activation
#pragma once

#include <cmath>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"

namespace mok::reference::detail {

template <typename V>
struct SwigluGrads {
    V dg;
    V du;
};

// fp64, nothing rounded: the "true" function of the inputs.
struct OracleArithmetic {
    using Value = double;

    static Value input_bf16(double v) { return v; }
    static Value input_fp32(double v) { return v; }
    static Value madd(Value a, Value b, Value acc) { return acc + a * b; }
    static Value add(Value a, Value b) { return a + b; }
    static Value mul(Value a, Value b) { return a * b; }
    static Value store_bf16(Value v) { return v; }

    static Value sigmoid(Value g) { return 1.0 / (1.0 + std::exp(-g)); }
    static Value swiglu_forward(Value g, Value u) { return g * sigmoid(g) * u; }
    static SwigluGrads<Value> swiglu_backward(Value g, Value u, Value dh) {
        const Value s = sigmoid(g);
        return {dh * u * s * (1.0 + g * (1.0 - s)), dh * g * s};
    }
};

// fp32 arithmetic rounded where the GPU rounds.
struct DeviceArithmetic {
    using Value = float;

    // A bf16 tensor holds the input rounded to nearest even; inputs that already are bf16 values pass unchanged.
    static Value input_bf16(double v) { return round_to_bf16(static_cast<float>(v)); }
    static Value input_fp32(double v) { return static_cast<float>(v); }
    // fma: when a and b are bf16 values (every GEMM operand, and the bf16 dh' and h of the router-weight dot
    // product) their product is exact in fp32, so this equals add(acc, mul(a, b)) and the sum rounds once per step,
    // as a tensor-core accumulation does; for the router-weight dot product it is what the epilogue computes.
    static Value madd(Value a, Value b, Value acc) { return fp32::fma(a, b, acc); }
    static Value add(Value a, Value b) { return fp32::add(a, b); }
    static Value mul(Value a, Value b) { return fp32::mul(a, b); }
    static Value store_bf16(Value v) { return round_to_bf16(v); }

    static Value swiglu_forward(Value g, Value u) { return swiglu::forward(g, u); }
    static SwigluGrads<Value> swiglu_backward(Value g, Value u, Value dh) {
        const swiglu::Grads grads = swiglu::backward(g, u, dh);
        return {grads.dg, grads.du};
    }
};

}  // namespace mok::reference::detail
