#include "host/cuda/tensor_map.hpp"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

namespace mok::host {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, found through the runtime so that mok links no driver library directly.
EncodeTiledFn encoder() {
    static EncodeTiledFn fn = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
        void* entry = nullptr;
        cudaDriverEntryPointQueryResult result{};
        constexpr int kDriverApiVersion = 12000;  // the first ABI of cuTensorMapEncodeTiled we rely on
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, kDriverApiVersion, cudaEnableDefault,
                                             &result) == cudaSuccess &&
            result == cudaDriverEntryPointSuccess) {
            fn = reinterpret_cast<EncodeTiledFn>(entry);
        }
    });
    return fn;
}

}  // namespace

Status encode_tensor_map(const TensorMapSpec& spec, TensorElement element, CUtensorMap* out) {
    constexpr uint64_t kAlignment = 16;
    if (reinterpret_cast<uintptr_t>(spec.base) % kAlignment != 0) {
        return Status::invalid_argument("tensor map base", "a 16-byte aligned address");
    }
    if (spec.rank < 2 || spec.rank > kMaxTensorMapRank) {
        return Status::invalid_argument("tensor map rank", "2 to " + std::to_string(kMaxTensorMapRank));
    }
    for (int d = 0; d + 1 < spec.rank; ++d) {
        if (spec.strides_bytes[d] % kAlignment != 0) {
            return Status::invalid_argument("tensor map stride " + std::to_string(d + 1), "a multiple of 16 bytes");
        }
    }
    EncodeTiledFn encode = encoder();
    if (encode == nullptr) {
        return {StatusCode::kCudaError, "cuTensorMapEncodeTiled is not available from the CUDA driver"};
    }
    const cuuint32_t element_strides[kMaxTensorMapRank] = {1, 1, 1, 1};
    const CUresult result = encode(
        out, element == TensorElement::kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        static_cast<cuuint32_t>(spec.rank), const_cast<void*>(spec.base), spec.dims, spec.strides_bytes, spec.box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS) {
        return {StatusCode::kCudaError, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(result)};
    }
    return Status::ok();
}

}  // namespace mok::host
