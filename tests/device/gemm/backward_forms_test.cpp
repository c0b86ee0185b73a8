// GPU tests of the backward GEMM forms: down dgrad with the SwiGLU-backward and router-gradient epilogue
// (plus the in-order partial reduction), gate/up dgrad into one accumulator, and the scaled-dy companion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"
#include "device/gemm/gemm_test_support.hpp"
#include "reference/arithmetic.hpp"
#include "reference/expert_ffn.hpp"

namespace mok::test {
namespace {

double silu64(double g) {
    return g / (1.0 + std::exp(-g));
}

void check_dgrad_down(const GemmShape& shape, Values values, uint64_t seed) {
    SCOPED_TRACE(describe(shape, values) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    const int32_t num_tiles = gemm::router_partial_tiles(shape.width);
    const std::vector<Bf16> dy = random_rows(rows, H, values, H, rng);
    const std::vector<Bf16> w_down = random_bf16(E * H * I, values, H, rng);
    const std::vector<Bf16> gu = random_rows(rows, 2 * I, Values::kRandom, 1, rng);  // pre-activations ~ U(-1, 1)
    const std::vector<float> weight = random_weights(rows, rng);

    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dy(dy), d_w(w_down), d_gu(gu);
    DeviceBuffer<float> d_weight(weight);
    DeviceBuffer<Bf16> d_dgu(static_cast<size_t>(rows.capacity_rows) * 2 * I);
    DeviceBuffer<float> d_partials(static_cast<size_t>(rows.capacity_rows) * num_tiles);
    DeviceBuffer<float> d_dw(rows.capacity_rows);
    DeviceStatusRecord status;
    auto run = [&](int num_sms, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative,
                   int32_t consumer_rows = gemm::kDgradDownConsumerRows) {
        d_dgu.fill_bytes(kPoisonByte);
        d_partials.fill_bytes(kPoisonByte);
        d_dw.fill_bytes(kPoisonByte);
        gemm::DgradDownArgs args{d_rows.view(),  as_device_bf16(d_dy),  as_device_bf16(d_w), as_device_bf16(d_gu),
                                 d_weight.get(), as_device_bf16(d_dgu), d_partials.get(),    shape.hidden,
                                 shape.width,    consumer_rows};
        Status s = gemm::dgrad_down(args, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        s = gemm::reduce_router_partials(d_rows.view(), d_partials.get(), num_tiles, d_dw.get(), nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
    };
    run(0);
    const std::vector<Bf16> dgu = d_dgu.download();
    const std::vector<float> dw = d_dw.download();
    const std::vector<int32_t> check = rows_to_check(rows, I * H, rng);
    std::vector<double> dhp64(check.size() * I);
    std::vector<float> dhp32(check.size() * I);
    parallel_for(static_cast<int64_t>(check.size()), [&](int64_t c) {
        const int32_t r = check[c];
        const int32_t e = rows.expert_of(r);
        for (int64_t i = 0; i < I; ++i) {
            dhp64[c * I + i] = dot_f64(&dy[r * H], 1, &w_down[e * H * I + i], I, H);
            // The contract rounds dh' to bf16 before the SwiGLU backward (docs/semantics.md, section 5).
            dhp32[c * I + i] = round_to_bf16(dot_f32(&dy[r * H], 1, &w_down[e * H * I + i], I, H));
        }
    });
    Comparison cmp_dg("dg"), cmp_du("du"), cmp_dw("router gradient");
    std::vector<float> h_row(I);
    for (size_t c = 0; c < check.size(); ++c) {
        const int64_t r = check[c];
        const float w = weight[r];
        double dw_oracle = 0.0;
        for (int64_t col = 0; col < I; ++col) {
            const float g = gu[r * 2 * I + col].to_float();
            const float u = gu[r * 2 * I + I + col].to_float();
            const float dhp = dhp32[c * I + col];
            const swiglu::Activation act = swiglu::activation(g);
            h_row[col] = round_to_bf16(swiglu::forward(u, act));
            const swiglu::Grads grads = swiglu::backward(g, u, fp32::mul(w, dhp), act);
            const double d = dhp64[c * I + col];
            const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(g)));
            const double dh = static_cast<double>(w) * d;
            dw_oracle += d * silu64(g) * u;
            cmp_dg.add(dgu[r * 2 * I + col].to_float(), round_to_bf16(grads.dg), dh * u * s * (1.0 + g * (1.0 - s)));
            cmp_du.add(dgu[r * 2 * I + I + col].to_float(), round_to_bf16(grads.du), dh * silu64(g));
        }
        // The contract's order of the router-weight dot product, as the CPU reference sums it.
        const float dw_same =
            reference::detail::router_weight_dot<reference::detail::DeviceArithmetic>(&dhp32[c * I], h_row.data(), I);
        cmp_dw.add(dw[r], dw_same, dw_oracle);
    }
    // Exact values: dh' is exact; everything after it is the shared fp32 code in the same order.
    expect_agreement(values, {&cmp_dg, &cmp_du, &cmp_dw});
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        if (!rows.holds_data(r)) {
            ASSERT_TRUE(is_poison(dgu[static_cast<int64_t>(r) * 2 * I])) << "row " << r << " was written";
            ASSERT_TRUE(std::isnan(dw[r])) << "row " << r << " got a router gradient";
        }
    }
    // Every grid and arrangement gives these bits, the router gradient's included (bytes, so that a NaN compares).
    const auto expect_same_bits = [&] {
        EXPECT_EQ(d_dgu.download(), dgu);
        const std::vector<float> dw_again = d_dw.download();
        EXPECT_EQ(0, std::memcmp(dw_again.data(), dw.data(), dw.size() * sizeof(float)));
    };
    expect_same_bits_on_other_grids(3, run, expect_same_bits);
    // So does every split of the epilogue-warps arrangement's rows between its consumers and its epilogue warps
    // (where a tile's epilogue would outlast its K loop: here the shapes with H <= 5120).
    for (const int32_t consumer_rows : {0, 1, gemm::kDgradDownMaxConsumerRows}) {
        SCOPED_TRACE("consumer rows " + std::to_string(consumer_rows));
        run(0, gemm::Arrangement::kEpilogueWarps, consumer_rows);
        expect_same_bits();
    }
}

TEST(GroupedGemmBackward, DgradDownRefusesConsumerRowsOutOfRange) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    const GemmShape shape = test_shapes(264)[1];
    std::mt19937_64 rng(12);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t I = shape.width;
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dy(random_rows(rows, shape.hidden, Values::kExact, 1, rng));
    DeviceBuffer<Bf16> d_w(random_bf16(rows.num_experts() * shape.hidden * I, Values::kExact, 1, rng));
    DeviceBuffer<Bf16> d_gu(random_rows(rows, 2 * I, Values::kExact, 1, rng));
    DeviceBuffer<float> d_weight(std::vector<float>(static_cast<size_t>(rows.capacity_rows), 1.0f));
    DeviceBuffer<Bf16> d_dgu(static_cast<size_t>(rows.capacity_rows) * 2 * I);
    DeviceBuffer<float> d_partials(static_cast<size_t>(rows.capacity_rows) * gemm::router_partial_tiles(shape.width));
    d_dgu.fill_bytes(kPoisonByte);
    DeviceStatusRecord status;
    for (const int32_t consumer_rows : {-1, gemm::kDgradDownMaxConsumerRows + 1}) {
        const Status s = gemm::dgrad_down(
            {d_rows.view(), as_device_bf16(d_dy), as_device_bf16(d_w), as_device_bf16(d_gu), d_weight.get(),
             as_device_bf16(d_dgu), d_partials.get(), shape.hidden, shape.width, consumer_rows},
            launch_with(status.get(), 0, gemm::Arrangement::kEpilogueWarps));
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
        EXPECT_NE(s.message().find("consumer_rows"), std::string::npos) << s.to_string();
    }
    // Nothing ran: every output row still holds the poison.
    MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<Bf16> dgu = d_dgu.download();
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        ASSERT_TRUE(is_poison(dgu[static_cast<int64_t>(r) * 2 * I])) << "row " << r << " was written";
    }
}

TEST(GroupedGemmBackward, DgradDownWithRouterGradient) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    for_each_shape_and_values(264, check_dgrad_down);
}

void check_dgrad_gate_up(const GemmShape& shape, Values values, uint64_t seed) {
    SCOPED_TRACE(describe(shape, values) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    const std::vector<Bf16> dgu = random_rows(rows, 2 * I, values, I, rng);
    const std::vector<Bf16> w_gate = random_bf16(E * I * H, values, 2 * I, rng);
    const std::vector<Bf16> w_up = random_bf16(E * I * H, values, 2 * I, rng);
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dgu(dgu), d_gate(w_gate), d_up(w_up);
    DeviceBuffer<Bf16> d_out(static_cast<size_t>(rows.capacity_rows) * H);
    DeviceStatusRecord status;
    auto run = [&](int num_sms, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        d_out.fill_bytes(kPoisonByte);
        gemm::DgradGateUpArgs args{d_rows.view(),
                                   as_device_bf16(d_dgu),
                                   as_device_bf16(d_gate),
                                   as_device_bf16(d_up),
                                   as_device_bf16(d_out),
                                   H,
                                   nullptr,
                                   shape.hidden,
                                   shape.width};
        const Status s = gemm::dgrad_gate_up(args, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
    };
    run(0);
    const std::vector<Bf16> out = d_out.download();
    const std::vector<int32_t> check = rows_to_check(rows, 2 * I * H, rng);
    std::vector<double> o64(check.size() * H);
    std::vector<float> o32(check.size() * H);
    parallel_for(static_cast<int64_t>(check.size()), [&](int64_t c) {
        const int32_t r = check[c];
        const int32_t e = rows.expert_of(r);
        for (int64_t n = 0; n < H; ++n) {
            o64[c * H + n] = dot_f64(&dgu[r * 2 * I], 1, &w_gate[e * I * H + n], H, I) +
                             dot_f64(&dgu[r * 2 * I + I], 1, &w_up[e * I * H + n], H, I);
            const float g_part = dot_f32(&dgu[r * 2 * I], 1, &w_gate[e * I * H + n], H, I);
            o32[c * H + n] = dot_f32(&dgu[r * 2 * I + I], 1, &w_up[e * I * H + n], H, I, g_part);
        }
    });
    Comparison cmp("dx rows");
    for (size_t c = 0; c < check.size(); ++c) {
        for (int64_t n = 0; n < H; ++n) {
            cmp.add(out[check[c] * H + n].to_float(), round_to_bf16(o32[c * H + n]), o64[c * H + n]);
        }
    }
    expect_agreement(values, {&cmp});
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        if (!rows.holds_data(r)) {
            ASSERT_TRUE(is_poison(out[static_cast<int64_t>(r) * H])) << "row " << r << " was written";
        }
    }
    expect_same_bits_on_other_grids(11, run, [&] { EXPECT_EQ(d_out.download(), out); });
}

TEST(GroupedGemmBackward, DgradGateUpOneAccumulator) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    for_each_shape_and_values(264, check_dgrad_gate_up);
}

// dys[r] = bf16(w[r] dy[r]) on data rows only, into a separate buffer and in place (the layer scales its dy rows
// in place once dgrad_down has read them).
void check_scale_rows(bool in_place) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE(std::string(in_place ? "in place" : "into another buffer") + ", seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space({0, 1, 77, 300});
    const int64_t H = 264;
    const std::vector<Bf16> dy = random_rows(rows, H, Values::kRandom, 1, rng);
    const std::vector<float> weight = random_weights(rows, rng);
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dy(dy), d_dys(dy.size());
    DeviceBuffer<float> d_weight(weight);
    d_dys.fill_bytes(kPoisonByte);
    DeviceBuffer<Bf16>& out = in_place ? d_dy : d_dys;
    const Status s = gemm::scale_rows(d_rows.view(), as_device_bf16(d_dy), d_weight.get(), as_device_bf16(out),
                                      static_cast<int32_t>(H), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<Bf16> dys = out.download();
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        for (int64_t n = 0; n < H; ++n) {
            const Bf16 got = dys[r * H + n];
            if (rows.holds_data(r)) {
                ASSERT_EQ(got.bits, round_to_bf16_bits(fp32::mul(weight[r], dy[r * H + n].to_float())))
                    << "row " << r << " column " << n;
            } else if (in_place) {
                ASSERT_EQ(got.bits, dy[r * H + n].bits) << "row " << r << " was written";
            } else {
                ASSERT_TRUE(is_poison(got)) << "row " << r << " was written";
            }
        }
    }
}

TEST(GroupedGemmBackward, ScaleRows) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    check_scale_rows(false);
    check_scale_rows(true);
}

}  // namespace
}  // namespace mok::test
