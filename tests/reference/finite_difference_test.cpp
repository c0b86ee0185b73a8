// Every gradient of the fp64 oracle against central finite differences of its own forward, through the loss
// L = sum over ranks of <dy, y> with a random dy.
//
// Step 2^-17 (about 7.6e-6): a power of two, so x +- step is exact for the bf16-valued inputs. Error of a
// central difference: truncation step^2 / 6 |L'''| ~ 1e-11 (third derivatives of order one), plus
// cancellation ~ 2^-53 |L| / step ~ 1e-10 for |L| of order ten. Gradients are of order 0.01 to 1, so the
// relative error of a tensor's sampled gradients is ~ 1e-9 (as observed); the bound 1e-6 leaves a factor of
// 1000 while any wrong term (a missing slot, a wrong weight, a sign) gives an error of order one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/random_problem.hpp"
#include "common/test_seed.hpp"
#include "reference/reference.hpp"
#include "reference/tolerance.hpp"

namespace mok::reference {
namespace {

constexpr double kStep = 0x1.0p-17;
constexpr double kFiniteDifferenceBound = 1e-6;
// Sampled elements per weight tensor of each expert, and of x over all ranks (every router weight is checked).
constexpr int kSamplesPerWeight = 4;
constexpr int kSamplesOfX = 16;

struct FdCase {
    const char* name;
    int ep_size;
    mok::testing::ProblemOptions options;
};

void PrintTo(const FdCase& c, std::ostream* os) {
    *os << c.name;
}

// One parameter: where it lives in the Problem, and its analytic gradient.
struct Parameter {
    std::string tensor;
    std::function<double&(Problem&)> element;
    double analytic;
};

double loss(const Problem& problem, const std::vector<std::vector<double>>& dy) {
    std::vector<RankForward> out;
    std::string error;
    if (!forward(problem, Precision::kOracle, &out, &error)) {
        ADD_FAILURE() << error;
        return NAN;
    }
    double sum = 0.0;
    for (int r = 0; r < problem.ep_size; ++r) {
        for (size_t i = 0; i < dy[r].size(); ++i) {
            sum += dy[r][i] * out[r].y[i];
        }
    }
    return sum;
}

using TensorOf = std::function<std::vector<double>&(Problem&)>;

class ParameterSampler {
  public:
    explicit ParameterSampler(uint64_t seed) : engine_(seed) {}

    // `count` random elements of [begin, end) of the tensor `tensor_of(problem)`, whose gradient is `grad`.
    void sample(const std::string& name, int64_t begin, int64_t end, int count, const TensorOf& tensor_of,
                const std::vector<double>& grad) {
        for (int n = 0; n < count; ++n) {
            add(name, begin + static_cast<int64_t>(engine_() % static_cast<uint64_t>(end - begin)), tensor_of, grad);
        }
    }

    void add(const std::string& name, int64_t i, const TensorOf& tensor_of, const std::vector<double>& grad) {
        parameters_.push_back({name, [tensor_of, i](Problem& p) -> double& { return tensor_of(p)[i]; }, grad[i]});
    }

    const std::vector<Parameter>& parameters() const { return parameters_; }

  private:
    std::mt19937_64 engine_;
    std::vector<Parameter> parameters_;
};

// The parameters to check: some of x, every router weight, some of every expert's weights (idle experts
// included) and of every rank's copy of the shared experts (a shared expert's gradient on rank r is rank r's
// share, and perturbing rank r's copy of the replicated weights changes only rank r's tokens).
std::vector<Parameter> parameters_to_check(const Problem& problem, const std::vector<RankGrads>& grads, uint64_t seed) {
    ParameterSampler sampler(seed);
    const LayerShape& s = problem.shape;
    const int64_t matrix = s.expert_width * s.hidden;
    const int64_t num_local = s.num_experts / problem.ep_size;
    for (int r = 0; r < problem.ep_size; ++r) {
        const RankGrads& g = grads[r];
        sampler.sample(
            "x", 0, s.tokens_per_rank * s.hidden, kSamplesOfX / problem.ep_size,
            [r](Problem& p) -> std::vector<double>& { return p.ranks[r].x; }, g.dx);
        for (int64_t slot = 0; slot < s.tokens_per_rank * s.top_k; ++slot) {
            sampler.add(
                "router_weights", slot, [r](Problem& p) -> std::vector<double>& { return p.ranks[r].router_weights; },
                g.d_router_weights);
        }
        for (int64_t l = 0; l < num_local; ++l) {
            sampler.sample(
                "experts.gate", l * matrix, (l + 1) * matrix, kSamplesPerWeight,
                [r](Problem& p) -> std::vector<double>& { return p.ranks[r].experts.gate; }, g.d_experts.gate);
            sampler.sample(
                "experts.up", l * matrix, (l + 1) * matrix, kSamplesPerWeight,
                [r](Problem& p) -> std::vector<double>& { return p.ranks[r].experts.up; }, g.d_experts.up);
            sampler.sample(
                "experts.down", l * matrix, (l + 1) * matrix, kSamplesPerWeight,
                [r](Problem& p) -> std::vector<double>& { return p.ranks[r].experts.down; }, g.d_experts.down);
        }
        for (size_t e = 0; e < s.shared_expert_widths.size(); ++e) {
            const int64_t n = s.shared_expert_widths[e] * s.hidden;
            const std::string name = "shared[" + std::to_string(e) + "].";
            sampler.sample(
                name + "gate", 0, n, kSamplesPerWeight,
                [r, e](Problem& p) -> std::vector<double>& { return p.ranks[r].shared[e].gate; }, g.d_shared[e].gate);
            sampler.sample(
                name + "up", 0, n, kSamplesPerWeight,
                [r, e](Problem& p) -> std::vector<double>& { return p.ranks[r].shared[e].up; }, g.d_shared[e].up);
            sampler.sample(
                name + "down", 0, n, kSamplesPerWeight,
                [r, e](Problem& p) -> std::vector<double>& { return p.ranks[r].shared[e].down; }, g.d_shared[e].down);
        }
    }
    return sampler.parameters();
}

// Exact zeros where a parameter has no effect: unused slots' router weights and idle experts' weights.
void expect_exact_zeros(const Problem& problem, const std::vector<RankGrads>& grads, int32_t idle_expert) {
    const LayerShape& s = problem.shape;
    const int64_t num_local = s.num_experts / problem.ep_size;
    const int64_t matrix = s.expert_width * s.hidden;
    for (int r = 0; r < problem.ep_size; ++r) {
        for (size_t slot = 0; slot < problem.ranks[r].expert_ids.size(); ++slot) {
            if (problem.ranks[r].expert_ids[slot] == plan::kUnusedSlot) {
                EXPECT_EQ(grads[r].d_router_weights[slot], 0.0) << "rank " << r << " unused slot " << slot;
            }
        }
    }
    const int owner = static_cast<int>(idle_expert / num_local);
    const int64_t first = (idle_expert % num_local) * matrix;
    const ExpertParams& d = grads[owner].d_experts;
    for (int64_t i = first; i < first + matrix; ++i) {
        ASSERT_EQ(d.gate[i], 0.0) << "idle expert " << idle_expert << " gate grad " << i - first;
        ASSERT_EQ(d.up[i], 0.0) << "idle expert " << idle_expert << " up grad " << i - first;
        ASSERT_EQ(d.down[i], 0.0) << "idle expert " << idle_expert << " down grad " << i - first;
    }
}

class FiniteDifference : public ::testing::TestWithParam<FdCase> {};

TEST_P(FiniteDifference, OracleGradientsMatchCentralDifferences) {
    const FdCase& c = GetParam();
    const uint64_t seed = mok::testing::case_seed(std::hash<std::string>{}(c.name));
    SCOPED_TRACE(mok::testing::replay_hint() + "; " + c.options.describe() + ", R " + std::to_string(c.ep_size));
    const GlobalBatch batch = mok::testing::random_global_batch(c.options, seed);
    Problem problem = partition(batch, c.ep_size);
    const std::vector<std::vector<double>> dy = mok::testing::split_rows(
        mok::testing::random_output_grad(c.options.num_tokens, c.options.hidden, c.options.values, seed + 1),
        c.ep_size);
    std::vector<RankGrads> grads;
    std::string error;
    ASSERT_TRUE(backward(problem, dy, Precision::kOracle, &grads, &error)) << error;
    expect_exact_zeros(problem, grads, c.options.idle_experts.front());

    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_tensor;  // (fd, analytic)
    for (const Parameter& p : parameters_to_check(problem, grads, seed + 2)) {
        double& value = p.element(problem);
        const double original = value;
        value = original + kStep;
        const double plus = loss(problem, dy);
        value = original - kStep;
        const double minus = loss(problem, dy);
        value = original;
        by_tensor[p.tensor].first.push_back((plus - minus) / (2.0 * kStep));
        by_tensor[p.tensor].second.push_back(p.analytic);
    }
    for (const auto& [tensor, values] : by_tensor) {
        const double error_norm = tolerance::relative_error(values.first, values.second);
        EXPECT_LE(error_norm, kFiniteDifferenceBound) << tensor << ": " << values.first.size() << " elements";
    }
}

mok::testing::ProblemOptions fd_options(int64_t top_k, std::vector<int64_t> shared) {
    mok::testing::ProblemOptions o;
    o.num_tokens = 8;
    o.hidden = 16;
    o.expert_width = 16;
    o.num_experts = 4;
    o.top_k = top_k;
    o.shared_expert_widths = std::move(shared);
    o.unused_slot_fraction = 0.25;
    o.zero_weight_fraction = 0.25;
    o.idle_experts = {2};
    return o;
}

INSTANTIATE_TEST_SUITE_P(Reference, FiniteDifference,
                         ::testing::Values(FdCase{"R1_k2_two_shared", 1, fd_options(2, {8, 24})},
                                           FdCase{"R2_k2_two_shared", 2, fd_options(2, {24, 8})},
                                           FdCase{"R2_k1_no_shared", 2, fd_options(1, {})},
                                           FdCase{"R4_k3_one_shared", 4, fd_options(3, {32})}),
                         [](const ::testing::TestParamInfo<FdCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mok::reference
