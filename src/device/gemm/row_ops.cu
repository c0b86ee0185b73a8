// Row-wise companions of the GEMMs: the scaled dy operand of the down weight gradient, and the in-order sum
// of the router-gradient partials.
#include <string>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "device/gemm/gemm_config.cuh"
#include "device/gemm/grouped_gemm.hpp"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::gemm {
namespace {

constexpr int kThreadsPerBlock = 256;

// True if `row` of the row space holds a routed row (not padding, not past the used rows).
__device__ bool row_holds_data(const RowGroups& g, int32_t row) {
    if (row >= *g.num_padded_rows) {
        return false;
    }
    const int32_t expert = g.tile_expert[row / BLOCK_M];
    return row - g.segment_begin[expert] < g.segment_rows[expert];
}

// One warp per row: 16-byte loads and stores of 8 bf16.
__global__ void scale_rows_kernel(RowGroups groups, int32_t capacity_rows, const __nv_bfloat16* dy,
                                  const float* row_weight, __nv_bfloat16* dys, int32_t hidden) {
    constexpr int kVector = 8;
    const int32_t warps = static_cast<int32_t>(gridDim.x * blockDim.x / 32);
    const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
    for (int32_t row = static_cast<int32_t>((blockIdx.x * blockDim.x + threadIdx.x) / 32); row < capacity_rows;
         row += warps) {
        if (!row_holds_data(groups, row)) {
            continue;
        }
        const float w = row_weight[row];
        const int64_t base = static_cast<int64_t>(row) * hidden;
        for (int32_t col = lane * kVector; col < hidden; col += 32 * kVector) {
            const uint4 in = *reinterpret_cast<const uint4*>(dy + base + col);
            const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&in);
            uint4 out;
            __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
            for (int i = 0; i < kVector; ++i) {
                o[i] = __float2bfloat16_rn(fp32::mul(w, __bfloat162float(v[i])));
            }
            *reinterpret_cast<uint4*>(dys + base + col) = out;
        }
    }
}

__global__ void reduce_router_partials_kernel(RowGroups groups, int32_t capacity_rows, const float* partials,
                                              int32_t num_tiles, float* out) {
    for (int32_t row = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); row < capacity_rows;
         row += static_cast<int32_t>(gridDim.x * blockDim.x)) {
        if (!row_holds_data(groups, row)) {
            continue;
        }
        float sum = 0.0f;
        for (int32_t tile = 0; tile < num_tiles; ++tile) {
            sum = fp32::add(sum, partials[static_cast<int64_t>(row) * num_tiles + tile]);
        }
        out[row] = sum;
    }
}

Status launched(const char* what) {
    const cudaError_t error = cudaGetLastError();
    return error == cudaSuccess ? Status::ok()
                                : Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(error));
}

int blocks_for(int64_t threads) {
    constexpr int64_t kMaxBlocks = 4096;  // enough to fill any GPU; the kernels stride over the rest
    const int64_t blocks = (threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
    return static_cast<int>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

}  // namespace

Status load_row_op_kernels() {
    return host::load_kernels<scale_rows_kernel, reduce_router_partials_kernel>("GEMM row-op");
}

Status scale_rows(const GroupedRowSpace& rows, const __nv_bfloat16* dy, const float* row_weight, __nv_bfloat16* dys,
                  int32_t hidden, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(load_row_op_kernels());
    scale_rows_kernel<<<blocks_for(static_cast<int64_t>(rows.capacity_rows) * 32), kThreadsPerBlock, 0, stream>>>(
        rows.groups, rows.capacity_rows, dy, row_weight, dys, hidden);
    return launched("scale_rows");
}

Status reduce_router_partials(const GroupedRowSpace& rows, const float* router_partials, int32_t num_tiles,
                              float* d_router_weight, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(load_row_op_kernels());
    reduce_router_partials_kernel<<<blocks_for(rows.capacity_rows), kThreadsPerBlock, 0, stream>>>(
        rows.groups, rows.capacity_rows, router_partials, num_tiles, d_router_weight);
    return launched("reduce_router_partials");
}

}  // namespace mok::gemm
