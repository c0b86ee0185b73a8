// mok-bench-gemm's problems (problem.hpp).
#include "bench/gemm/problem.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "bench/common/data.hpp"

namespace mok::bench::gemm_bench {
namespace {

// The groups of a point: the local experts of a full node (EP 8), at most kMaxRows rows in all.
constexpr int32_t kEpForGroups = 8;
constexpr int32_t kMaxRows = 65536;
constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;

}  // namespace

int32_t groups_for(const ModelPreset& shape, int32_t rows_per_expert) {
    const int32_t local_experts = static_cast<int32_t>(shape.num_experts) / kEpForGroups;
    return std::max(1, std::min(local_experts, kMaxRows / rows_per_expert));
}

void check_status(const Status& s) {
    if (!s.is_ok()) {
        throw std::runtime_error(s.to_string());
    }
}

Problem::Problem(const ModelPreset& shape, int32_t rows_per_expert, cudaStream_t stream)
    : hidden(static_cast<int32_t>(shape.hidden)),
      width(static_cast<int32_t>(shape.expert_width)),
      num_experts(groups_for(shape, rows_per_expert)),
      rows(num_experts * rows_per_expert),
      x(0, static_cast<size_t>(rows) * hidden),
      dy(0, static_cast<size_t>(rows) * hidden),
      dys(0, static_cast<size_t>(rows) * hidden),
      out(0, static_cast<size_t>(rows) * hidden),
      gu(0, static_cast<size_t>(rows) * 2 * width),
      dgu(0, static_cast<size_t>(rows) * 2 * width),
      h(0, static_cast<size_t>(rows) * width),
      w_gate(0, static_cast<size_t>(num_experts) * width * hidden),
      w_up(0, static_cast<size_t>(num_experts) * width * hidden),
      w_down(0, static_cast<size_t>(num_experts) * hidden * width),
      fresh(0, static_cast<size_t>(num_experts) * width * hidden),
      fresh_up(0, static_cast<size_t>(num_experts) * width * hidden),
      d_gate(0, static_cast<size_t>(num_experts) * width * hidden),
      d_up(0, static_cast<size_t>(num_experts) * width * hidden),
      d_down(0, static_cast<size_t>(num_experts) * hidden * width),
      row_weight(0, rows),
      partials(0, static_cast<size_t>(rows) * gemm::router_partial_tiles(width)),
      d_router(0, rows),
      tables(0, 1 + rows / kRowAlignment + 2 * num_experts),
      status(0, 1),
      wave_counter(0, 1) {
    const float input_scale = 1.0f / std::sqrt(static_cast<float>(hidden));
    const float width_scale = 1.0f / std::sqrt(static_cast<float>(width));
    uint64_t seed = kSeed;
    fill_uniform(x.get(), x.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(dy.get(), dy.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(gu.get(), gu.count(), -2.0f, 2.0f, seed++, stream);
    fill_uniform(dgu.get(), dgu.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(h.get(), h.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(dys.get(), dys.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(w_gate.get(), w_gate.count(), -input_scale, input_scale, seed++, stream);
    fill_uniform(w_up.get(), w_up.count(), -input_scale, input_scale, seed++, stream);
    fill_uniform(w_down.get(), w_down.count(), -width_scale, width_scale, seed++, stream);
    fill_uniform(d_gate.get(), d_gate.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(d_up.get(), d_up.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(d_down.get(), d_down.count(), -1.0f, 1.0f, seed++, stream);
    fill_uniform(row_weight.get(), row_weight.count(), -1.0f, 1.0f, seed++, stream);
    // The row space: num_experts segments of rows_per_expert rows each (a multiple of 128: no padding).
    std::vector<int32_t> host_tables(tables.count());
    host_tables[0] = rows;
    for (int32_t t = 0; t < rows / kRowAlignment; ++t) {
        host_tables[1 + t] = t * kRowAlignment / rows_per_expert;
    }
    for (int32_t e = 0; e < num_experts; ++e) {
        host_tables[1 + rows / kRowAlignment + e] = e * rows_per_expert;
        host_tables[1 + rows / kRowAlignment + num_experts + e] = rows_per_expert;
    }
    MOK_BENCH_CHECK_CUDA(cudaMemcpy(tables.get(), host_tables.data(), tables.bytes(), cudaMemcpyHostToDevice));
    MOK_BENCH_CHECK_CUDA(cudaMemset(status.get(), 0, status.bytes()));
    MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    const int32_t* t = tables.get();
    space = {{t, t + 1, t + 1 + rows / kRowAlignment, t + 1 + rows / kRowAlignment + num_experts}, rows, num_experts};
}

}  // namespace mok::bench::gemm_bench
