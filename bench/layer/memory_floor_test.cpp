// The layer benchmark's memory floor (memory_floor.hpp) against byte counts written out by hand.
#include "bench/layer/memory_floor.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace mok::bench::layer {
namespace {

// DeepSeek-V3 at EP 1 and 4096 tokens: 256 experts of I = 2048 and one shared expert of 2048, H = 7168.
FloorShape deepseek_v3(int64_t experts_with_rows) {
    FloorShape s;
    s.tokens = 4096;
    s.hidden = 7168;
    s.expert_width = 2048;
    s.local_experts = 256;
    s.local_experts_with_rows = experts_with_rows;
    s.shared_widths = {2048};
    return s;
}

constexpr double kExpertBf16Bytes = 3.0 * 7168 * 2048 * 2;  // one expert's three bf16 matrices
constexpr double kTokenTensorBytes = 4096.0 * 7168 * 2;     // x, y, dy or dx

TEST(MemoryFloor, ForwardReadsTheWeightsWithRowsAndX) {
    const PassBytes b = forward_bytes(deepseek_v3(200));
    EXPECT_DOUBLE_EQ(b.read, (200 + 1) * kExpertBf16Bytes + kTokenTensorBytes);
    EXPECT_DOUBLE_EQ(b.written, kTokenTensorBytes);
}

TEST(MemoryFloor, FreshBackwardWritesEveryLocalExpertsGradient) {
    const PassBytes b = backward_bytes(deepseek_v3(200));
    EXPECT_DOUBLE_EQ(b.read, (200 + 1) * kExpertBf16Bytes + 2 * kTokenTensorBytes);
    EXPECT_DOUBLE_EQ(b.written, (256 + 1) * kExpertBf16Bytes + kTokenTensorBytes);
}

TEST(MemoryFloor, AccumulateBackwardReadsAndWritesMainGradOfExpertsWithRows) {
    FloorShape s = deepseek_v3(200);
    s.accumulate = true;
    const PassBytes b = backward_bytes(s);
    const double main_grad = (200 + 1) * kExpertBf16Bytes * 2;  // fp32: twice the bf16 bytes
    EXPECT_DOUBLE_EQ(b.read, (200 + 1) * kExpertBf16Bytes + 2 * kTokenTensorBytes + main_grad);
    EXPECT_DOUBLE_EQ(b.written, kTokenTensorBytes + main_grad);
}

TEST(MemoryFloor, NoSharedExpertsNoRows) {
    FloorShape s = deepseek_v3(0);
    s.shared_widths.clear();
    EXPECT_DOUBLE_EQ(forward_bytes(s).read, kTokenTensorBytes);
    EXPECT_DOUBLE_EQ(backward_bytes(s).written, 256 * kExpertBf16Bytes + kTokenTensorBytes);
}

TEST(MemoryFloor, TimesOfTheTwoDirectionsAdd) {
    // 4.5 GB read at 4500 GB/s and 2.16 GB written at 4320 GB/s: 1 ms + 0.5 ms.
    EXPECT_DOUBLE_EQ(floor_ms({4.5e9, 2.16e9}, 4500.0, 4320.0), 1.5);
    EXPECT_THROW(floor_ms({1.0, 1.0}, 0.0, 1.0), std::invalid_argument);
    EXPECT_THROW(floor_ms({1.0, 1.0}, 1.0, -1.0), std::invalid_argument);
}

TEST(MemoryFloor, ExpertsWithRowsCountsEachRanksOwnExpertsFromEveryRanksIds) {
    // E = 8 over R = 2: rank 0 owns 0-3, rank 1 owns 4-7. Expert 2 twice, unused slots, expert 7 only in rank 1's.
    const std::vector<std::vector<int32_t>> ids = {{0, 2, 5, -1}, {2, 7, -1, 6}};
    EXPECT_EQ(local_experts_with_rows(ids, 8, 0), 2);  // 0 and 2
    EXPECT_EQ(local_experts_with_rows(ids, 8, 1), 3);  // 5, 6 and 7
    EXPECT_EQ(local_experts_with_rows({{-1, -1}}, 4, 0), 0);
    EXPECT_THROW(local_experts_with_rows(ids, 7, 0), std::invalid_argument);
    EXPECT_THROW(local_experts_with_rows(ids, 8, 2), std::invalid_argument);
    EXPECT_THROW(local_experts_with_rows({}, 8, 0), std::invalid_argument);
}

}  // namespace
}  // namespace mok::bench::layer
