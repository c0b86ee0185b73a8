#include "host/comm/transport_memory.hpp"

#include <string>

namespace mok::comm {

TransportMemory transport_memory(const layout::SymmetricLayout& window, const layout::LocalLayout& local) {
    TransportMemory m;
    m.symmetric_bytes = window.window_bytes;
    m.symmetric_rows_bytes = window.tokens.bytes + window.grads.bytes;
    m.symmetric_combine_bytes = window.combine_rows.bytes;
    m.local_bytes = local.total_bytes;
    for (int32_t ring = 0; ring < layout::kNumRings; ++ring) {
        m.local_ring_bytes += local.ring_rows[ring].bytes;
    }
    m.local_plan_bytes = local.plan_tables.span_bytes();
    return m;
}

Status stage_rows(char* window, const layout::SymmetricLayout& layout, SourceRows which, const void* rows,
                  int64_t row_stride, cudaStream_t stream) {
    const int64_t hidden = layout.shape.hidden;
    if (rows == nullptr || row_stride < hidden || row_stride % 8 != 0) {
        return Status::invalid_argument("staged rows", "[T, H] bf16 rows with a stride of at least H, a multiple of 8");
    }
    const layout::Region& region = which == SourceRows::kTokens ? layout.tokens : layout.grads;
    const size_t row_bytes = static_cast<size_t>(layout.shape.row_bytes());
    const cudaError_t error =
        cudaMemcpy2DAsync(window + region.offset, row_bytes, rows, static_cast<size_t>(row_stride) * 2, row_bytes,
                          static_cast<size_t>(layout.shape.tokens_per_rank), cudaMemcpyDeviceToDevice, stream);
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError, std::string("staging rows into the window: ") + cudaGetErrorString(error)};
    }
    return Status::ok();
}

}  // namespace mok::comm
