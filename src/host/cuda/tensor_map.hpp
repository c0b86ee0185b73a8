// TMA tensor maps with 128-byte swizzling: bf16 operand tiles, and the fp32 main_grad boxes of the weight
// gradients' accumulate epilogue.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>

#include "mok/status.hpp"

namespace mok::host {

// A tensor of rank 2 to 4 as TMA sees it: dims innermost first, strides in bytes of dims 1.., and the box
// (the tile one load copies) innermost first. The innermost box dimension must span at most 128 bytes (the
// swizzle width); elements outside the tensor load as zeros. The strides of dims 1.. need not grow with the
// dimension: a view whose outer dimension steps through a row in 128-byte chunks is one (grouped_gemm.cu).
inline constexpr int kMaxTensorMapRank = 4;

struct TensorMapSpec {
    const void* base = nullptr;
    int rank = 2;
    uint64_t dims[kMaxTensorMapRank] = {};
    uint64_t strides_bytes[kMaxTensorMapRank - 1] = {};
    uint32_t box[kMaxTensorMapRank] = {};
};

enum class TensorElement {
    kBf16,
    kFp32,
};

inline uint64_t element_bytes(TensorElement element) {
    return element == TensorElement::kBf16 ? sizeof(uint16_t) : sizeof(float);  // bf16: 16 bits
}

Status encode_tensor_map(const TensorMapSpec& spec, TensorElement element, CUtensorMap* out);

inline Status encode_bf16_tensor_map(const TensorMapSpec& spec, CUtensorMap* out) {
    return encode_tensor_map(spec, TensorElement::kBf16, out);
}

}  // namespace mok::host
