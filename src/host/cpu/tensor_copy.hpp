// Copies between host tensor views (any strides) and the dense row-major vectors of the CPU reference.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "mok/tensor.hpp"

namespace mok::cpu {

// Calls fn(n, offset) for the n-th element of `view` in row-major order, at `offset` elements from its data.
template <typename Fn>
void for_each_element(const TensorView& view, Fn&& fn) {
    std::array<int64_t, TensorView::kMaxRank> index{};
    const int64_t count = view.numel();
    for (int64_t n = 0; n < count; ++n) {
        int64_t offset = 0;
        for (int d = 0; d < view.rank; ++d) {
            offset += index[d] * view.stride[d];
        }
        fn(n, offset);
        for (int d = view.rank - 1; d >= 0 && ++index[d] == view.shape[d]; --d) {
            index[d] = 0;
        }
    }
}

inline std::vector<double> read_bf16(const TensorView& view) {
    std::vector<double> values(view.numel());
    const auto* data = view.data_as<const uint16_t>();
    for_each_element(view, [&](int64_t n, int64_t offset) { values[n] = bf16_bits_to_float(data[offset]); });
    return values;
}

inline std::vector<double> read_f32(const TensorView& view) {
    std::vector<double> values(view.numel());
    const auto* data = view.data_as<const float>();
    for_each_element(view, [&](int64_t n, int64_t offset) { values[n] = data[offset]; });
    return values;
}

inline std::vector<int32_t> read_i32(const TensorView& view) {
    std::vector<int32_t> values(view.numel());
    const auto* data = view.data_as<const int32_t>();
    for_each_element(view, [&](int64_t n, int64_t offset) { values[n] = data[offset]; });
    return values;
}

// Values that are fp32 numbers (the reference's kDevice results), rounded to bf16 once. Values that are
// already bf16 numbers (y, dx) pass unchanged.
inline void write_bf16(const TensorView& view, std::span<const double> values) {
    auto* data = view.data_as<uint16_t>();
    for_each_element(
        view, [&](int64_t n, int64_t offset) { data[offset] = round_to_bf16_bits(static_cast<float>(values[n])); });
}

// Values that are fp32 numbers, stored exactly.
inline void write_f32(const TensorView& view, std::span<const double> values) {
    auto* data = view.data_as<float>();
    for_each_element(view, [&](int64_t n, int64_t offset) { data[offset] = static_cast<float>(values[n]); });
}

// main_grad = fp32(main_grad + sum): each finished fp32 sum added once, in one rounding.
inline void accumulate_f32(const TensorView& view, std::span<const double> sums) {
    auto* data = view.data_as<float>();
    for_each_element(
        view, [&](int64_t n, int64_t offset) { data[offset] = fp32::add(data[offset], static_cast<float>(sums[n])); });
}

}  // namespace mok::cpu
