// The device-rounding precision against the fp64 oracle: close within a bound derived from where the contract
// rounds, holding the dtypes the contract stores, and exact where the arithmetic is.
//
// Error model for the relative (Frobenius) error of each result tensor: every stored intermediate is rounded
// to bf16, a relative error of at most half the bf16 spacing, 2^-8 (8 significant bits). A result passes
// through at most six such roundings on its way from the inputs (g, u -> h -> o -> y; or g, u -> h, dh ->
// dg, du -> dx row -> dx; the weight gradients through dg, du or weight * dy and h). The rounding errors of
// the terms of a sum are independent, so they grow with the sum as the terms do, and the relative error of a
// sum is about that of its terms; fp32 accumulation adds 2^-24 per step, nothing of that order. Hence at most
// 6 * 2^-8 ~ 0.023 (observed: about 0.004); the bound is 2^-5 ~ 0.031, while a wrong term, weight or order
// gives an error of order one. (Where the rounding happens is checked bit for bit below and by the GPU tests.)
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "common/random_problem.hpp"
#include "common/test_seed.hpp"
#include "reference/arithmetic.hpp"
#include "reference/expert_ffn.hpp"
#include "reference/global_run.hpp"
#include "reference/reference.hpp"
#include "reference/tolerance.hpp"

namespace mok::reference {
namespace {

using mok::testing::GlobalResult;
using mok::testing::ProblemOptions;
using mok::testing::Routing;
using mok::testing::Values;

constexpr double kDeviceErrorBound = 0x1.0p-5;

struct PrecisionCase {
    const char* name;
    int ep_size;
    ProblemOptions options;
};

void PrintTo(const PrecisionCase& c, std::ostream* os) {
    *os << c.name;
}

ProblemOptions precision_options(Routing routing, Values values) {
    ProblemOptions o;
    o.num_tokens = 64;
    o.hidden = 64;
    o.expert_width = 32;
    o.num_experts = 8;
    o.top_k = 2;
    o.shared_expert_widths = {16, 48};
    o.routing = routing;
    o.unused_slot_fraction = 0.1;
    o.values = values;
    return o;
}

PrecisionCase hot_case(const char* name, int32_t first, int32_t count, int64_t top_k) {
    PrecisionCase c{name, 4, precision_options(Routing::kHotRange, Values::kRandomBf16)};
    c.options.hot_first_expert = first;
    c.options.num_hot_experts = count;
    c.options.top_k = top_k;
    return c;
}

class DeviceVsOracle : public ::testing::TestWithParam<PrecisionCase> {
  protected:
    void SetUp() override {
        const PrecisionCase& c = GetParam();
        const uint64_t seed = mok::testing::case_seed(std::hash<std::string>{}(c.name));
        const GlobalBatch batch = mok::testing::random_global_batch(c.options, seed);
        const std::vector<double> dy =
            mok::testing::random_output_grad(c.options.num_tokens, c.options.hidden, c.options.values, seed + 1);
        std::string error;
        auto device = mok::testing::run_global(batch, dy, c.ep_size, Precision::kDevice, Config{}, &error);
        ASSERT_TRUE(device.has_value()) << error;
        auto oracle = mok::testing::run_global(batch, dy, c.ep_size, Precision::kOracle, Config{}, &error);
        ASSERT_TRUE(oracle.has_value()) << error;
        device_ = std::move(*device);
        oracle_ = std::move(*oracle);
    }

    std::string trace() const { return mok::testing::replay_hint() + "; " + GetParam().options.describe(); }

    GlobalResult device_;
    GlobalResult oracle_;
};

TEST_P(DeviceVsOracle, WithinTheRoundingModel) {
    SCOPED_TRACE(trace());
    const auto expect_close = [](const std::string& what, const std::vector<double>& got,
                                 const std::vector<double>& oracle) {
        EXPECT_LE(tolerance::relative_error(got, oracle), kDeviceErrorBound) << what;
    };
    expect_close("y", device_.y, oracle_.y);
    expect_close("dx", device_.dx, oracle_.dx);
    expect_close("d_router_weights", device_.d_router_weights, oracle_.d_router_weights);
    expect_close("d_experts.gate", device_.d_experts.gate, oracle_.d_experts.gate);
    expect_close("d_experts.up", device_.d_experts.up, oracle_.d_experts.up);
    expect_close("d_experts.down", device_.d_experts.down, oracle_.d_experts.down);
    for (size_t r = 0; r < device_.d_shared.size(); ++r) {
        for (size_t s = 0; s < device_.d_shared[r].size(); ++s) {
            const std::string name = "rank " + std::to_string(r) + " d_shared[" + std::to_string(s) + "].";
            expect_close(name + "gate", device_.d_shared[r][s].gate, oracle_.d_shared[r][s].gate);
            expect_close(name + "up", device_.d_shared[r][s].up, oracle_.d_shared[r][s].up);
            expect_close(name + "down", device_.d_shared[r][s].down, oracle_.d_shared[r][s].down);
        }
    }
}

// y and dx are stored in bf16, the router-weight and weight gradients are fp32 sums.
TEST_P(DeviceVsOracle, ResultsHoldTheirDtypes) {
    SCOPED_TRACE(trace());
    const auto expect_bf16 = [](const std::string& what, const std::vector<double>& values) {
        for (size_t i = 0; i < values.size(); ++i) {
            const auto narrow = static_cast<float>(values[i]);
            ASSERT_TRUE(narrow == values[i] && round_to_bf16(narrow) == narrow)
                << what << "[" << i << "] = " << values[i];
        }
    };
    const auto expect_fp32 = [](const std::string& what, const std::vector<double>& values) {
        for (size_t i = 0; i < values.size(); ++i) {
            ASSERT_EQ(static_cast<double>(static_cast<float>(values[i])), values[i]) << what << "[" << i << "]";
        }
    };
    expect_bf16("y", device_.y);
    expect_bf16("dx", device_.dx);
    expect_fp32("d_router_weights", device_.d_router_weights);
    expect_fp32("d_experts.gate", device_.d_experts.gate);
    expect_fp32("d_experts.down", device_.d_experts.down);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, DeviceVsOracle,
    ::testing::Values(PrecisionCase{"uniform_R2", 2, precision_options(Routing::kUniform, Values::kRandomBf16)},
                      PrecisionCase{"zipf_R4", 4, precision_options(Routing::kZipf, Values::kRandomBf16)},
                      PrecisionCase{"exact_R1", 1, precision_options(Routing::kUniform, Values::kExactArithmetic)},
                      hot_case("all_tokens_one_expert", 3, 1, 1), hot_case("all_tokens_one_rank", 6, 2, 2)),
    [](const ::testing::TestParamInfo<PrecisionCase>& info) { return std::string(info.param.name); });

// With exact-arithmetic inputs the gate and up sums are exact in fp32, so the device's stored g and u are the
// oracle's exact values rounded once to bf16 -- bit for bit, whatever order a GPU sums them in.
TEST(DeviceRounding, ExactInputsGiveRoundedOracleGateAndUp) {
    ProblemOptions o = precision_options(Routing::kUniform, Values::kExactArithmetic);
    const uint64_t seed = mok::testing::case_seed(3);
    SCOPED_TRACE(mok::testing::replay_hint());
    const GlobalBatch batch = mok::testing::random_global_batch(o, seed);
    const auto rows_in = [&]<typename A>(A) {
        using V = typename A::Value;
        detail::RowActivations<V> rows(o.num_tokens, o.hidden, o.expert_width);
        std::transform(batch.x.begin(), batch.x.end(), rows.x.begin(), [](double v) { return A::input_bf16(v); });
        return rows;
    };
    const auto weights_of = [&]<typename A>(A, int64_t expert) {
        using V = typename A::Value;
        const int64_t n = o.expert_width * o.hidden;
        std::vector<V> out(3 * n);
        for (int64_t i = 0; i < n; ++i) {
            out[i] = A::input_bf16(batch.experts.gate[expert * n + i]);
            out[n + i] = A::input_bf16(batch.experts.up[expert * n + i]);
            out[2 * n + i] = A::input_bf16(batch.experts.down[expert * n + i]);
        }
        return out;
    };
    auto device_rows = rows_in(detail::DeviceArithmetic{});
    auto oracle_rows = rows_in(detail::OracleArithmetic{});
    for (int64_t expert = 0; expert < o.num_experts; ++expert) {
        const std::vector<float> device_w = weights_of(detail::DeviceArithmetic{}, expert);
        const std::vector<double> oracle_w = weights_of(detail::OracleArithmetic{}, expert);
        const int64_t n = o.expert_width * o.hidden;
        const detail::ExpertWeights<float> dw{&device_w[0], &device_w[n], &device_w[2 * n], o.expert_width, o.hidden};
        const detail::ExpertWeights<double> ow{&oracle_w[0], &oracle_w[n], &oracle_w[2 * n], o.expert_width, o.hidden};
        for (int64_t row = 0; row < o.num_tokens; ++row) {
            detail::gate_up_row<detail::DeviceArithmetic>(dw, row, &device_rows);
            detail::gate_up_row<detail::OracleArithmetic>(ow, row, &oracle_rows);
        }
        for (size_t i = 0; i < device_rows.g.size(); ++i) {
            ASSERT_EQ(device_rows.g[i], round_to_bf16(static_cast<float>(oracle_rows.g[i])))
                << "expert " << expert << " g element " << i;
            ASSERT_EQ(device_rows.u[i], round_to_bf16(static_cast<float>(oracle_rows.u[i])))
                << "expert " << expert << " u element " << i;
        }
    }
}

}  // namespace
}  // namespace mok::reference
