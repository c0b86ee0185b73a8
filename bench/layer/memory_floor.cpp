#include "bench/layer/memory_floor.hpp"

#include <stdexcept>

namespace mok::bench::layer {
namespace {

constexpr double kBf16Bytes = 2.0;
constexpr double kFp32Bytes = 4.0;
constexpr double kMatricesPerExpert = 3.0;  // W_gate, W_up, W_down, each H x I elements
constexpr double kBytesPerGigabyte = 1e9;
constexpr double kMsPerSecond = 1e3;

// Elements of one expert's three matrices.
double expert_elements(const FloorShape& s, int64_t width) {
    return kMatricesPerExpert * static_cast<double>(s.hidden) * static_cast<double>(width);
}

double shared_elements(const FloorShape& s) {
    double elements = 0.0;
    for (const int64_t width : s.shared_widths) {
        elements += expert_elements(s, width);
    }
    return elements;
}

// One [T, H] bf16 tensor: x, y, dy or dx.
double token_tensor_bytes(const FloorShape& s) {
    return static_cast<double>(s.tokens) * static_cast<double>(s.hidden) * kBf16Bytes;
}

// Elements of the weights a pass touches: those of the experts with rows and of the shared experts.
double touched_elements(const FloorShape& s) {
    return static_cast<double>(s.local_experts_with_rows) * expert_elements(s, s.expert_width) + shared_elements(s);
}

}  // namespace

PassBytes forward_bytes(const FloorShape& s) {
    return {touched_elements(s) * kBf16Bytes + token_tensor_bytes(s), token_tensor_bytes(s)};
}

PassBytes backward_bytes(const FloorShape& s) {
    PassBytes bytes{touched_elements(s) * kBf16Bytes + 2.0 * token_tensor_bytes(s), token_tensor_bytes(s)};
    if (s.accumulate) {
        const double main_grad = touched_elements(s) * kFp32Bytes;
        bytes.read += main_grad;
        bytes.written += main_grad;
    } else {
        bytes.written +=
            (static_cast<double>(s.local_experts) * expert_elements(s, s.expert_width) + shared_elements(s)) *
            kBf16Bytes;
    }
    return bytes;
}

double floor_ms(const PassBytes& bytes, double read_gb_per_s, double write_gb_per_s) {
    if (!(read_gb_per_s > 0.0) || !(write_gb_per_s > 0.0)) {
        throw std::invalid_argument("floor_ms: expected positive read and write ceilings");
    }
    return (bytes.read / read_gb_per_s + bytes.written / write_gb_per_s) / kBytesPerGigabyte * kMsPerSecond;
}

int64_t local_experts_with_rows(const std::vector<std::vector<int32_t>>& ids_of_ranks, int64_t num_experts, int rank) {
    const auto num_ranks = static_cast<int64_t>(ids_of_ranks.size());
    if (num_ranks == 0 || num_experts % num_ranks != 0 || rank < 0 || rank >= num_ranks) {
        throw std::invalid_argument("local_experts_with_rows: expected E a multiple of R ranks and rank in [0, R)");
    }
    const int64_t per_rank = num_experts / num_ranks;
    const int64_t first = rank * per_rank;
    std::vector<bool> has_rows(static_cast<size_t>(per_rank), false);
    for (const std::vector<int32_t>& ids : ids_of_ranks) {
        for (const int32_t e : ids) {
            if (e >= first && e < first + per_rank) {
                has_rows[static_cast<size_t>(e - first)] = true;
            }
        }
    }
    int64_t count = 0;
    for (const bool b : has_rows) {
        count += b ? 1 : 0;
    }
    return count;
}

}  // namespace mok::bench::layer
