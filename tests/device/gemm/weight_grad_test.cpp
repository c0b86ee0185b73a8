// GPU tests of the weight-gradient forms: dW_gate|up = dG|dU^T X and dW_down = dYs^T H per expert, fresh
// (bf16) and accumulated (fp32 main_grad, added in place), with experts of zero, one and odd row counts and
// NaN in every row outside the experts' segments (the K-tail masking must keep them out of the sums).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "device/gemm/gemm_test_support.hpp"

namespace mok::test {
namespace {

// Output elements a test checks: all of them for small gradients, else a random sample per expert plus the
// corners of every expert's matrix.
std::vector<std::pair<int64_t, int64_t>> elements_to_check(int64_t num_rows, int64_t num_cols, int64_t work,
                                                           std::mt19937_64& rng) {
    constexpr int64_t kFullCheckWork = int64_t{1} << 30;
    constexpr int kSamples = 400;
    std::vector<std::pair<int64_t, int64_t>> out;
    if (num_rows * num_cols * work <= kFullCheckWork) {
        for (int64_t m = 0; m < num_rows; ++m) {
            for (int64_t n = 0; n < num_cols; ++n) {
                out.emplace_back(m, n);
            }
        }
        return out;
    }
    out = {{0, 0}, {0, num_cols - 1}, {num_rows - 1, 0}, {num_rows - 1, num_cols - 1}};
    std::uniform_int_distribution<int64_t> pick_m(0, num_rows - 1), pick_n(0, num_cols - 1);
    for (int i = 0; i < kSamples; ++i) {
        out.emplace_back(pick_m(rng), pick_n(rng));
    }
    return out;
}

// One gradient: the test's view of dW_e[m][n] = sum over e's rows r of a[r][m] * b[r][n].
struct GradCase {
    const char* name;
    const std::vector<Bf16>* a;  // rows of a_stride elements; column m at a_offset + m
    int64_t a_stride;
    int64_t a_offset;
    const std::vector<Bf16>* b;  // rows of b_stride elements
    int64_t b_stride;
    int64_t num_rows;  // M of dW
    int64_t num_cols;  // N of dW
};

void check_grad(const GradCase& g, const RowSpace& rows, gemm::WeightGradMode mode, Values values,
                const std::vector<uint16_t>& got_fresh, const std::vector<float>& got_acc,
                const std::vector<float>& initial, std::mt19937_64& rng) {
    // Experts with few rows are checked whole: millions of elements for the model shapes, which the threads share
    // in chunks (the sample of larger experts is drawn first, in expert order, so it does not depend on them).
    constexpr int64_t kChunks = 64;
    Comparison cmp(g.name);
    std::atomic<int64_t> untouched_changed{0};  // accumulate mode: elements of experts without rows whose bits changed
    for (int32_t e = 0; e < rows.num_experts(); ++e) {
        const int64_t first = rows.segment_begin[e];
        const int64_t count = rows.rows_per_expert[e];
        const auto elements = elements_to_check(g.num_rows, g.num_cols, count, rng);
        const size_t base = cmp.size();
        cmp.resize(base + elements.size());
        const auto num_elements = static_cast<int64_t>(elements.size());
        parallel_for(kChunks, [&](int64_t chunk) {
            int64_t changed = 0;
            for (int64_t i = chunk * num_elements / kChunks; i < (chunk + 1) * num_elements / kChunks; ++i) {
                const auto [m, n] = elements[static_cast<size_t>(i)];
                const Bf16* a = g.a->data() + first * g.a_stride + g.a_offset + m;
                const Bf16* b = g.b->data() + first * g.b_stride + n;
                const double oracle = dot_f64(a, g.a_stride, b, g.b_stride, count);
                const float same = dot_f32(a, g.a_stride, b, g.b_stride, count);
                const int64_t index = (e * g.num_rows + m) * g.num_cols + n;
                const size_t at = base + static_cast<size_t>(i);
                if (mode == gemm::WeightGradMode::kFresh) {
                    cmp.set(at, Bf16{got_fresh[index]}.to_float(), round_to_bf16(same), oracle);
                } else {
                    // main_grad += sum: the sum rounds to fp32 once, then one fp32 addition; an expert with no rows
                    // leaves main_grad's bits untouched.
                    const float expected = count == 0 ? initial[index] : fp32::add(initial[index], same);
                    cmp.set(at, got_acc[index], expected, static_cast<double>(initial[index]) + oracle);
                    // Bit for bit, which the comparison above is not for random values: -0.0 must stay -0.0.
                    changed += count == 0 && std::memcmp(&got_acc[index], &initial[index], sizeof(float)) != 0;
                }
            }
            untouched_changed += changed;
        });
    }
    expect_agreement(values, {&cmp});
    EXPECT_EQ(untouched_changed.load(), 0) << g.name << ": main_grad elements of experts without rows changed";
}

void check_weight_grads(const GemmShape& shape, Values values, gemm::WeightGradMode mode, uint64_t seed) {
    SCOPED_TRACE(describe(shape, values) + (mode == gemm::WeightGradMode::kFresh ? " fresh" : " accumulate") +
                 " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    const std::vector<Bf16> dgu = random_rows(rows, 2 * I, values, 1, rng);
    const std::vector<Bf16> x = random_rows(rows, H, values, 1, rng);
    const std::vector<Bf16> dys = random_rows(rows, H, values, 1, rng);
    const std::vector<Bf16> h = random_rows(rows, I, values, 1, rng);
    // main_grad's starting values (accumulate mode only). On exact operands the tile's sum is exact, so the one fp32
    // addition to main_grad is all that rounds: arbitrary starting values let the bitwise comparison see that it
    // rounds to nearest, and subnormal ones (one in kSubnormalEvery) that it keeps them where a sum cancels to zero.
    // One in kNegativeZeroEvery is -0.0, which an expert without rows must leave as it is (adding +0.0 would not).
    const bool fresh = mode == gemm::WeightGradMode::kFresh;
    const size_t num_grad = fresh ? 0 : static_cast<size_t>(E * I * H);
    std::vector<float> initial_gate(num_grad), initial_up(num_grad), initial_down(num_grad);
    std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
    constexpr size_t kNegativeZeroEvery = 16;
    constexpr size_t kSubnormalEvery = 16;
    constexpr size_t kSubnormalPhase = 1;
    constexpr int kSubnormalExponent = -130;  // below fp32's smallest normal, 2^-126
    for (auto* v : {&initial_gate, &initial_up, &initial_down}) {
        for (size_t i = 0; i < v->size(); ++i) {
            const float drawn = pick(rng);
            (*v)[i] = i % kNegativeZeroEvery == 0              ? -0.0f
                      : i % kSubnormalEvery == kSubnormalPhase ? std::ldexp(drawn, kSubnormalExponent)
                                                               : drawn;
        }
    }

    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dgu(dgu), d_x(x), d_dys(dys), d_h(h);
    const size_t num_fresh = fresh ? static_cast<size_t>(E * I * H) : 0;
    DeviceBuffer<uint16_t> d_gate16(num_fresh), d_up16(num_fresh), d_down16(num_fresh);
    DeviceBuffer<float> d_gate32(initial_gate), d_up32(initial_up), d_down32(initial_down);
    DeviceStatusRecord status;
    auto run = [&](int num_sms, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative,
                   gemm::MainGradUpdate update = gemm::MainGradUpdate::kLoadAddStore) {
        if (fresh) {
            d_gate16.fill_bytes(kPoisonByte);
            d_up16.fill_bytes(kPoisonByte);
            d_down16.fill_bytes(kPoisonByte);
        } else {
            d_gate32.upload(initial_gate);
            d_up32.upload(initial_up);
            d_down32.upload(initial_down);
        }
        gemm::WeightGradGateUpArgs gate_up{d_rows.view(),
                                           as_device_bf16(d_dgu),
                                           as_device_bf16(d_x),
                                           fresh ? static_cast<void*>(d_gate16.get()) : d_gate32.get(),
                                           fresh ? static_cast<void*>(d_up16.get()) : d_up32.get(),
                                           mode,
                                           shape.hidden,
                                           shape.width,
                                           update};
        Status s = gemm::weight_grad_gate_up(gate_up, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        gemm::WeightGradDownArgs down{d_rows.view(),
                                      as_device_bf16(d_dys),
                                      as_device_bf16(d_h),
                                      fresh ? static_cast<void*>(d_down16.get()) : d_down32.get(),
                                      mode,
                                      shape.hidden,
                                      shape.width,
                                      update};
        s = gemm::weight_grad_down(down, launch_with(status.get(), num_sms, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
    };
    run(0);
    const auto gate16 = d_gate16.download(), up16 = d_up16.download(), down16 = d_down16.download();
    const auto gate32 = d_gate32.download(), up32 = d_up32.download(), down32 = d_down32.download();

    check_grad({"dW_gate", &dgu, 2 * I, 0, &x, H, I, H}, rows, mode, values, gate16, gate32, initial_gate, rng);
    check_grad({"dW_up", &dgu, 2 * I, I, &x, H, I, H}, rows, mode, values, up16, up32, initial_up, rng);
    check_grad({"dW_down", &dys, H, 0, &h, I, H, I}, rows, mode, values, down16, down32, initial_down, rng);

    run(9);
    if (fresh) {
        EXPECT_EQ(d_gate16.download(), gate16);
        EXPECT_EQ(d_up16.download(), up16);
        EXPECT_EQ(d_down16.download(), down16);
        // The epilogue-warps arrangement: the cooperative kernel's bits, on all SMs and on a few.
        for (const int num_sms : kEpilogueWarpsSmCounts) {
            SCOPED_TRACE(std::string("epilogue warps on ") + std::to_string(num_sms) + " SMs");
            run(num_sms, gemm::Arrangement::kEpilogueWarps);
            EXPECT_EQ(d_gate16.download(), gate16);
            EXPECT_EQ(d_up16.download(), up16);
            EXPECT_EQ(d_down16.download(), down16);
        }
    } else {
        const auto expect_same_bits = [&]() {
            const auto again = d_down32.download();
            EXPECT_EQ(0, std::memcmp(again.data(), down32.data(), again.size() * sizeof(float)));
            const auto gate_again = d_gate32.download();
            EXPECT_EQ(0, std::memcmp(gate_again.data(), gate32.data(), gate_again.size() * sizeof(float)));
            const auto up_again = d_up32.download();
            EXPECT_EQ(0, std::memcmp(up_again.data(), up32.data(), up_again.size() * sizeof(float)));
        };
        expect_same_bits();
        // main_grad updated by TMA reductions: the loads' bits, on all SMs and on a few.
        for (const int num_sms : {0, 9}) {
            SCOPED_TRACE(std::string("reductions on ") + std::to_string(num_sms) + " SMs");
            run(num_sms, gemm::Arrangement::kCooperative, gemm::MainGradUpdate::kReduction);
            expect_same_bits();
        }
    }
}

TEST(GroupedGemmWeightGrad, Fresh) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    for_each_shape_and_values(264, [](const GemmShape& shape, Values values, uint64_t seed) {
        check_weight_grads(shape, values, gemm::WeightGradMode::kFresh, seed);
    });
}

// The K loops of the shapes above are at most five blocks (300 rows). One expert of 1030 rows makes one of seventeen,
// whose tiles wrap the stage ring several times and end in a partial block, beside empty, odd and two-tile experts;
// both modes, on all SMs (waves aligned) and on a few.
TEST(GroupedGemmWeightGrad, LongKLoop) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    constexpr int32_t kLongRows = 1030;
    const GemmShape shape{200, 136, {77, kLongRows, 0, 129}};
    uint64_t seed = std::random_device{}();
    for (const gemm::WeightGradMode mode : {gemm::WeightGradMode::kFresh, gemm::WeightGradMode::kAccumulate}) {
        for (const Values values : {Values::kExact, Values::kRandom}) {
            check_weight_grads(shape, values, mode, seed++);
        }
    }
}

// Accumulate mode's fp32 slice does not fit a hand-off buffer: asked for the epilogue warps, both weight gradients
// refuse, naming the argument, and leave main_grad as it was.
TEST(GroupedGemmWeightGrad, EpilogueWarpsRefuseAccumulateMode) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    const GemmShape shape = test_shapes(264)[1];
    std::mt19937_64 rng(11);
    const RowSpace rows = make_row_space(shape.rows_per_expert);
    const int64_t H = shape.hidden;
    const int64_t I = shape.width;
    const int64_t E = rows.num_experts();
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dgu(random_rows(rows, 2 * I, Values::kExact, 1, rng));
    DeviceBuffer<Bf16> d_x(random_rows(rows, H, Values::kExact, 1, rng));
    DeviceBuffer<Bf16> d_h(random_rows(rows, I, Values::kExact, 1, rng));
    const std::vector<float> initial(static_cast<size_t>(E * I * H), 0.25f);
    DeviceBuffer<float> d_gate(initial), d_up(initial), d_down(initial);
    DeviceStatusRecord status;
    const gemm::LaunchConfig launch = launch_with(status.get(), 0, gemm::Arrangement::kEpilogueWarps);
    Status s = gemm::weight_grad_gate_up({d_rows.view(), as_device_bf16(d_dgu), as_device_bf16(d_x), d_gate.get(),
                                          d_up.get(), gemm::WeightGradMode::kAccumulate, shape.hidden, shape.width},
                                         launch);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("launch.arrangement"), std::string::npos) << s.to_string();
    s = gemm::weight_grad_down({d_rows.view(), as_device_bf16(d_x), as_device_bf16(d_h), d_down.get(),
                                gemm::WeightGradMode::kAccumulate, shape.hidden, shape.width},
                               launch);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("launch.arrangement"), std::string::npos) << s.to_string();
    MOK_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(d_gate.download(), initial);
    EXPECT_EQ(d_up.download(), initial);
    EXPECT_EQ(d_down.download(), initial);
}

// The addition to main_grad, bit for bit: one expert of two rows whose dW_down sums cancel to exactly zero in the
// even columns and double in the odd ones, over starting values that are arbitrary, subnormal or -0.0. The result
// must be fp32::add(start, sum) in every element: rounded to nearest, subnormals kept (start + 0 is start), and
// -0.0 + 0 the +0.0 that IEEE addition gives.
TEST(GroupedGemmWeightGrad, AccumulateAddsOnceRoundingToNearest) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    constexpr int64_t H = 128;
    constexpr int64_t I = 64;
    constexpr int kSubnormalExponent = -130;  // below fp32's smallest normal, 2^-126
    std::mt19937_64 rng(std::random_device{}());
    const RowSpace rows = make_row_space({2});
    std::vector<Bf16> dys = random_rows(rows, H, Values::kExact, 1, rng);
    std::vector<Bf16> h = random_rows(rows, I, Values::kExact, 1, rng);
    const int64_t first = rows.segment_begin[0];
    for (int64_t c = 0; c < H; ++c) {
        dys[(first + 1) * H + c] = dys[first * H + c];
    }
    for (int64_t c = 0; c < I; ++c) {
        const float v = h[first * I + c].to_float();
        h[(first + 1) * I + c] = Bf16::from_float(c % 2 == 0 ? -v : v);
    }
    std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
    std::vector<float> start(static_cast<size_t>(H * I));
    for (size_t i = 0; i < start.size(); ++i) {
        const float drawn = pick(rng);
        start[i] = i % 3 == 0 ? std::ldexp(drawn, kSubnormalExponent) : i % 7 == 0 ? -0.0f : drawn;
    }
    DeviceRowSpace d_rows(rows);
    DeviceBuffer<Bf16> d_dys(dys), d_h(h);
    DeviceStatusRecord status;
    for (const gemm::MainGradUpdate update : {gemm::MainGradUpdate::kLoadAddStore, gemm::MainGradUpdate::kReduction}) {
        SCOPED_TRACE(update == gemm::MainGradUpdate::kReduction ? "reductions" : "loads and stores");
        DeviceBuffer<float> d_down(start);
        const Status s = gemm::weight_grad_down({d_rows.view(), as_device_bf16(d_dys), as_device_bf16(d_h),
                                                 d_down.get(), gemm::WeightGradMode::kAccumulate, H, I, update},
                                                launch_with(status.get(), 0));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        MOK_ASSERT_CUDA(cudaDeviceSynchronize());
        ASSERT_EQ(status.read().code, 0);
        const std::vector<float> got = d_down.download();
        int64_t mismatches = 0;
        int64_t subnormals_kept = 0;
        for (int64_t row = 0; row < H; ++row) {
            for (int64_t col = 0; col < I; ++col) {
                const size_t at = static_cast<size_t>(row * I + col);
                const float sum = dys[first * H + row].to_float() * h[first * I + col].to_float() +
                                  dys[(first + 1) * H + row].to_float() * h[(first + 1) * I + col].to_float();
                const float expected = fp32::add(start[at], sum);
                mismatches += std::memcmp(&got[at], &expected, sizeof(float)) != 0;
                subnormals_kept += std::fpclassify(expected) == FP_SUBNORMAL;
            }
        }
        EXPECT_EQ(mismatches, 0) << "main_grad elements that are not fp32::add(start, sum)";
        EXPECT_GT(subnormals_kept, 0) << "the test has no subnormal result to check";
    }
}

TEST(GroupedGemmWeightGrad, AccumulateIntoMainGrad) {
    if (!has_gpu()) {
        GTEST_SKIP() << "needs a GPU";
    }
    uint64_t seed = std::random_device{}();
    const std::vector<GemmShape> shapes = test_shapes(264);
    for (size_t i = 0; i < 3; ++i) {
        for (Values values : {Values::kExact, Values::kRandom}) {
            check_weight_grads(shapes[i], values, gemm::WeightGradMode::kAccumulate, seed++);
        }
    }
}

}  // namespace
}  // namespace mok::test
