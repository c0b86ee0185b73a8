// GPU tests of the forward GEMM forms: gate/up with SwiGLU, and down (in place and scattered).
// Each checks data rows against the CPU references (bitwise on exact inputs, the tolerance model on random
// ones), that padding and spare rows are never written, and that any grid size gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"
#include "device/gemm/gemm_test_support.hpp"

namespace mok::test {
namespace {

// Runs gate/up on one shape and checks gu and h; returns the outputs for the determinism check.
void check_gate_up(const GemmShape& shape, Values values, uint64_t seed) {
    SCOPED_TRACE(describe(shape, values) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    const std::vector<Bf16> x = random_rows(rows, H, values, H, rng);
    const std::vector<Bf16> w_gate = random_bf16(E * I * H, values, H, rng);
    const std::vector<Bf16> w_up = random_bf16(E * I * H, values, H, rng);

    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_x(x), d_gate(w_gate), d_up(w_up);
    DeviceBuffer<Bf16> d_gu(static_cast<size_t>(rows.capacity_rows) * 2 * I);
    DeviceBuffer<Bf16> d_h(static_cast<size_t>(rows.capacity_rows) * I);
    DeviceStatusRecord status;

    auto run = [&](int num_sms, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        d_gu.fill_bytes(kPoisonByte);
        d_h.fill_bytes(kPoisonByte);
        gemm::GateUpArgs args{d_rows.view(),        as_device_bf16(d_x), as_device_bf16(d_gate), as_device_bf16(d_up),
                              as_device_bf16(d_gu), as_device_bf16(d_h), shape.hidden,           shape.width};
        const Status s = gemm::gate_up_swiglu(args, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
    };
    run(0);
    const std::vector<Bf16> gu = d_gu.download();
    const std::vector<Bf16> h = d_h.download();

    Comparison cmp_g("g"), cmp_u("u"), cmp_h("h");
    const std::vector<int32_t> check = rows_to_check(rows, 2 * I * H, rng);
    std::vector<double> g64(check.size() * I), u64(check.size() * I);
    std::vector<float> g32(check.size() * I), u32(check.size() * I);
    parallel_for(static_cast<int64_t>(check.size()), [&](int64_t c) {
        const int32_t r = check[c];
        const int32_t e = rows.expert_of(r);
        for (int64_t i = 0; i < I; ++i) {
            const Bf16* xr = &x[r * H];
            g64[c * I + i] = dot_f64(xr, 1, &w_gate[(e * I + i) * H], 1, H);
            u64[c * I + i] = dot_f64(xr, 1, &w_up[(e * I + i) * H], 1, H);
            g32[c * I + i] = dot_f32(xr, 1, &w_gate[(e * I + i) * H], 1, H);
            u32[c * I + i] = dot_f32(xr, 1, &w_up[(e * I + i) * H], 1, H);
        }
    });
    for (size_t c = 0; c < check.size(); ++c) {
        const int64_t r = check[c];
        for (int64_t i = 0; i < I; ++i) {
            const float gb = round_to_bf16(g32[c * I + i]);
            const float ub = round_to_bf16(u32[c * I + i]);
            cmp_g.add(gu[r * 2 * I + i].to_float(), gb, g64[c * I + i]);
            cmp_u.add(gu[r * 2 * I + I + i].to_float(), ub, u64[c * I + i]);
            const double g = g64[c * I + i];
            const double oracle_h = g / (1.0 + std::exp(-g)) * u64[c * I + i];
            cmp_h.add(h[r * I + i].to_float(), round_to_bf16(swiglu::forward(gb, ub)), oracle_h);
        }
    }
    expect_agreement(values, {&cmp_g, &cmp_u, &cmp_h});
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        if (!rows.holds_data(r)) {
            ASSERT_TRUE(is_poison(h[static_cast<int64_t>(r) * I])) << "row " << r << " is not data but was written";
            ASSERT_TRUE(is_poison(gu[static_cast<int64_t>(r) * 2 * I])) << "row " << r << " was written";
        }
    }
    // Any grid and every other arrangement give the same bits, poison included: none writes what the cooperative
    // kernel leaves alone.
    expect_same_bits_on_other_grids(7, run, [&] {
        EXPECT_EQ(d_gu.download(), gu);
        EXPECT_EQ(d_h.download(), h);
    });
}

TEST(GroupedGemmForward, GateUpSwiglu) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    for_each_shape_and_values(8, check_gate_up);
}

void check_down(const GemmShape& shape, Values values, bool scatter, uint64_t seed) {
    SCOPED_TRACE(describe(shape, values) + (scatter ? " scattered" : " in place") + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    const std::vector<Bf16> h = random_rows(rows, I, values, I, rng);
    const std::vector<Bf16> w_down = random_bf16(E * H * I, values, I, rng);
    // Scatter: data rows go to a permutation of [0, rows) in an output with extra room and a padded stride.
    const int64_t out_ld = H + 8;
    std::vector<int32_t> row_map(rows.capacity_rows, -1);
    int64_t num_out_rows = rows.capacity_rows;
    if (scatter) {
        std::vector<int32_t> targets;
        for (int32_t r = 0; r < rows.capacity_rows; ++r) {
            if (rows.holds_data(r)) {
                targets.push_back(static_cast<int32_t>(targets.size()));
            }
        }
        std::shuffle(targets.begin(), targets.end(), rng);
        size_t next = 0;
        for (int32_t r = 0; r < rows.capacity_rows; ++r) {
            if (rows.holds_data(r)) {
                row_map[r] = targets[next++];
            }
        }
        num_out_rows = static_cast<int64_t>(targets.size()) + 1;
    }
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_h(h), d_w(w_down);
    DeviceBuffer<int32_t> d_map(row_map);
    DeviceBuffer<Bf16> d_out(static_cast<size_t>(num_out_rows) * out_ld);
    DeviceStatusRecord status;
    auto run = [&](int num_sms, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        d_out.fill_bytes(kPoisonByte);
        gemm::DownArgs args{d_rows.view(),
                            as_device_bf16(d_h),
                            as_device_bf16(d_w),
                            as_device_bf16(d_out),
                            out_ld,
                            scatter ? d_map.get() : nullptr,
                            shape.hidden,
                            shape.width};
        const Status s = gemm::down_projection(args, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
    };
    run(0);
    const std::vector<Bf16> out = d_out.download();

    const std::vector<int32_t> check = rows_to_check(rows, I * H, rng);
    std::vector<double> o64(check.size() * H);
    std::vector<float> o32(check.size() * H);
    parallel_for(static_cast<int64_t>(check.size()), [&](int64_t c) {
        const int32_t r = check[c];
        const int32_t e = rows.expert_of(r);
        for (int64_t n = 0; n < H; ++n) {
            o64[c * H + n] = dot_f64(&h[r * I], 1, &w_down[(e * H + n) * I], 1, I);
            o32[c * H + n] = dot_f32(&h[r * I], 1, &w_down[(e * H + n) * I], 1, I);
        }
    });
    Comparison cmp("down output");
    for (size_t c = 0; c < check.size(); ++c) {
        const int64_t dest = scatter ? row_map[check[c]] : check[c];
        for (int64_t n = 0; n < H; ++n) {
            cmp.add(out[dest * out_ld + n].to_float(), round_to_bf16(o32[c * H + n]), o64[c * H + n]);
        }
    }
    expect_agreement(values, {&cmp});
    // Nothing but data rows' first H columns was written: the stride's gap and every other row stay poison.
    std::vector<bool> written(num_out_rows, false);
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        if (rows.holds_data(r)) {
            written[scatter ? row_map[r] : r] = true;
        }
    }
    for (int64_t row = 0; row < num_out_rows; ++row) {
        ASSERT_TRUE(is_poison(out[row * out_ld + H])) << "row " << row << ": the stride gap was written";
        if (!written[row]) {
            ASSERT_TRUE(is_poison(out[row * out_ld])) << "row " << row << " should not have been written";
        }
    }
    expect_same_bits_on_other_grids(5, run, [&] { EXPECT_EQ(d_out.download(), out); });
}

TEST(GroupedGemmForward, DownInPlace) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    for_each_shape_and_values(
        8, [](const GemmShape& shape, Values values, uint64_t seed) { check_down(shape, values, false, seed); });
}

TEST(GroupedGemmForward, DownScattered) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    uint64_t seed = std::random_device{}();
    const std::vector<GemmShape> shapes = test_shapes(8);
    for (size_t i = 0; i < 3; ++i) {
        check_down(shapes[i], Values::kExact, true, seed++);
    }
}

}  // namespace
}  // namespace mok::test
