// mok-bench-layer's cases and flags (layer_case.hpp): the flags' parsing and errors, the sweep they select, the case
// names the report pairs with the baseline's, the expert ids of each routing and the FLOPs the rates divide.
#include "bench/layer/layer_case.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace mok::bench::layer {
namespace {

// The message of the std::invalid_argument `parse_flags(args)` throws; fails the test where it throws none.
std::string flag_error(const std::vector<std::string>& args) {
    try {
        parse_flags(args);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    ADD_FAILURE() << "no error for '" << args.front() << "'";
    return "";
}

const ModelPreset& preset(const char* name) {
    const ModelPreset* p = find_model_preset(name);
    EXPECT_NE(p, nullptr) << name;
    return *p;
}

LayerCase deepseek_case(const char* routing, int64_t tokens) {
    LayerCase c;
    c.model = &preset("deepseek-v3");
    c.tokens = tokens;
    c.routing = routing;
    return c;
}

TEST(LayerFlags, DefaultsWithoutFlags) {
    const LayerFlags flags = parse_flags({});
    EXPECT_EQ(flags.comm_sms, std::vector<int>{0});
    EXPECT_TRUE(flags.tokens.empty());
    EXPECT_TRUE(flags.shapes.empty());
    EXPECT_TRUE(flags.routings.empty());
    EXPECT_EQ(flags.forward_combine, std::vector<ForwardCombine>{ForwardCombine::kAuto});
    EXPECT_EQ(flags.grad_modes, std::vector<GradMode>{GradMode::kFresh});
    EXPECT_FALSE(flags.one_stream);
    EXPECT_FALSE(flags.gemm_cooperative);
    EXPECT_FALSE(flags.token_groups);
    EXPECT_EQ(flags.prior_routings, 0);
}

TEST(LayerFlags, EveryFlagReadsItsValue) {
    const LayerFlags flags = parse_flags({"--one-stream", "--gemm-cooperative", "--token-groups", "--comm-sms", "0,16",
                                          "--tokens", "2048,12288", "--shapes", "glm-5.2,qwen3-235b-a22b", "--routings",
                                          "balanced,zipf", "--forward-combine", "push,down_stores", "--prior-routings",
                                          "3", "--grad-modes", "accumulate,fresh"});
    EXPECT_TRUE(flags.one_stream);
    EXPECT_TRUE(flags.gemm_cooperative);
    EXPECT_TRUE(flags.token_groups);
    EXPECT_EQ(flags.comm_sms, (std::vector<int>{0, 16}));
    EXPECT_EQ(flags.tokens, (std::vector<int64_t>{2048, 12288}));
    EXPECT_EQ(flags.shapes, (std::vector<std::string>{"glm-5.2", "qwen3-235b-a22b"}));
    EXPECT_EQ(flags.routings, (std::vector<std::string>{"balanced", "zipf"}));
    EXPECT_EQ(flags.forward_combine, (std::vector<ForwardCombine>{ForwardCombine::kPush, ForwardCombine::kDownStores}));
    EXPECT_EQ(flags.prior_routings, 3);
    EXPECT_EQ(flags.grad_modes, (std::vector<GradMode>{GradMode::kAccumulate, GradMode::kFresh}));
}

TEST(LayerFlags, ErrorsNameTheFlag) {
    EXPECT_NE(flag_error({"--bogus"}).find("'--bogus'"), std::string::npos);
    EXPECT_NE(flag_error({"--tokens"}).find("missing value"), std::string::npos);
    EXPECT_NE(flag_error({"--tokens", "0"}).find("--tokens"), std::string::npos);
    EXPECT_NE(flag_error({"--tokens", "4096x"}).find("--tokens"), std::string::npos);
    EXPECT_NE(flag_error({"--comm-sms", "-1"}).find("--comm-sms"), std::string::npos);
    EXPECT_NE(flag_error({"--shapes", "gpt-moe"}).find("--shapes"), std::string::npos);
    EXPECT_NE(flag_error({"--shapes", ""}).find("--shapes"), std::string::npos);
    EXPECT_NE(flag_error({"--routings", "skewed"}).find("--routings"), std::string::npos);
    EXPECT_NE(flag_error({"--forward-combine", "pull"}).find("--forward-combine"), std::string::npos);
    EXPECT_NE(flag_error({"--prior-routings", "1,2"}).find("--prior-routings"), std::string::npos);
    EXPECT_NE(flag_error({"--grad-modes", "bf16"}).find("--grad-modes"), std::string::npos);
}

TEST(LayerSweep, DefaultQuickAndFull) {
    const LayerFlags none;
    CommonOptions options;
    const std::vector<LayerCase> one_gpu = sweep(options, none, 1);
    ASSERT_EQ(one_gpu.size(), 4u);  // DeepSeek-V3 and Qwen3.5 at 4096 tokens, uniform and Zipf, EP 1
    EXPECT_EQ(one_gpu[0].name("forward"), "deepseek-v3/ep1/t4096/uniform/forward");
    EXPECT_EQ(one_gpu[1].name("forward"), "deepseek-v3/ep1/t4096/zipf/forward");
    EXPECT_EQ(one_gpu[3].name("backward"), "qwen3.5-397b-a17b/ep1/t4096/zipf/backward");
    const std::vector<LayerCase> two_gpus = sweep(options, none, 2);
    ASSERT_EQ(two_gpus.size(), 8u);
    EXPECT_EQ(two_gpus[2].name("forward"), "deepseek-v3/ep2/t4096/uniform/forward");

    options.quick = true;
    const std::vector<LayerCase> quick = sweep(options, none, 1);
    ASSERT_EQ(quick.size(), 1u);
    EXPECT_EQ(quick[0].name("forward"), "deepseek-v3/ep1/t4096/uniform/forward");

    options.quick = false;
    options.full = true;
    const size_t presets = model_presets().size();
    EXPECT_EQ(sweep(options, none, 2).size(), presets * 3 * 2 * 2);  // tokens, EP degrees, routings
}

TEST(LayerSweep, FlagsReplaceTheSweepAndAddVariantsAfterEachCase) {
    const LayerFlags flags = parse_flags(
        {"--tokens", "2048", "--shapes", "glm-5.2", "--routings", "balanced", "--gemm-cooperative", "--token-groups"});
    const std::vector<LayerCase> cases = sweep(CommonOptions{}, flags, 1);
    ASSERT_EQ(cases.size(), 3u);
    EXPECT_EQ(cases[0].name("forward"), "glm-5.2/ep1/t2048/balanced/forward");
    EXPECT_EQ(cases[1].name("forward"), "glm-5.2/ep1/t2048/balanced/cooperative/forward");
    EXPECT_EQ(cases[2].name("forward"), "glm-5.2/ep1/t2048/balanced/token-groups/forward");
}

TEST(LayerCase, KnobsAddTheirNamesInAFixedOrder) {
    LayerCase c = deepseek_case("uniform", 4096);
    c.ep = 2;
    c.comm_sms = 24;
    c.one_stream = true;
    c.gemm_arrangements = false;
    c.forward_combine = ForwardCombine::kPush;
    c.token_groups = true;
    c.grad_mode = GradMode::kAccumulate;
    EXPECT_EQ(c.name("backward"),
              "deepseek-v3/ep2/t4096/uniform/comm24/one-stream/cooperative/push/token-groups/accumulate/backward");
}

// Every token's k experts distinct and in range; the same call gives the same ids.
void expect_valid_ids(const LayerCase& c, int rank, int variant) {
    const std::vector<int32_t> ids = make_expert_ids(c, rank, variant);
    const int64_t k = c.model->top_k;
    ASSERT_EQ(ids.size(), static_cast<size_t>(c.tokens * k));
    for (int64_t t = 0; t < c.tokens; ++t) {
        const std::set<int32_t> experts(ids.begin() + t * k, ids.begin() + (t + 1) * k);
        EXPECT_EQ(experts.size(), static_cast<size_t>(k)) << c.routing << " token " << t;
        EXPECT_GE(*experts.begin(), 0);
        EXPECT_LT(*experts.rbegin(), c.model->num_experts);
    }
    EXPECT_EQ(ids, make_expert_ids(c, rank, variant)) << c.routing;
}

TEST(LayerExpertIds, DistinctSeededAndDrawnAnewPerRankAndVariant) {
    for (const char* routing : {"uniform", "zipf", "balanced"}) {
        const LayerCase c = deepseek_case(routing, 512);
        expect_valid_ids(c, 0, 0);
        expect_valid_ids(c, 1, 0);
        expect_valid_ids(c, 0, 2);
    }
    const LayerCase uniform = deepseek_case("uniform", 512);
    EXPECT_NE(make_expert_ids(uniform, 0, 0), make_expert_ids(uniform, 1, 0));
    EXPECT_NE(make_expert_ids(uniform, 0, 0), make_expert_ids(uniform, 0, 1));
    // Balanced routing draws nothing: a prior routing's variant is the case's own.
    const LayerCase balanced = deepseek_case("balanced", 512);
    EXPECT_EQ(make_expert_ids(balanced, 0, 0), make_expert_ids(balanced, 0, 1));
}

// The most rows any one expert receives.
int64_t busiest_expert_rows(const LayerCase& c) {
    std::vector<int64_t> rows(c.model->num_experts, 0);
    for (const int32_t e : make_expert_ids(c, 0, 0)) {
        ++rows[e];
    }
    return *std::max_element(rows.begin(), rows.end());
}

TEST(LayerExpertIds, ZipfConcentratesRowsOnFewExperts) {
    // 4096 tokens x 8 slots over 256 experts: 128 rows each under uniform routing, exactly so under balanced.
    EXPECT_EQ(busiest_expert_rows(deepseek_case("balanced", 4096)), 128);
    const int64_t uniform = busiest_expert_rows(deepseek_case("uniform", 4096));
    EXPECT_LT(uniform, 256);
    EXPECT_GT(busiest_expert_rows(deepseek_case("zipf", 4096)), 4 * uniform);
}

TEST(LayerFlops, RoutedAndSharedExpertsThreeGemmsEach) {
    const LayerCase deepseek = deepseek_case("uniform", 1000);
    // 1000 tokens x (8 routed + 1 shared expert of width 2048) x 3 GEMMs x 2 H I.
    EXPECT_DOUBLE_EQ(forward_flops(deepseek), 1000.0 * 9 * 3 * 2 * 7168 * 2048);
    LayerCase qwen3 = deepseek;
    qwen3.model = &preset("qwen3-235b-a22b");  // no shared expert
    EXPECT_DOUBLE_EQ(forward_flops(qwen3), 1000.0 * 8 * 3 * 2 * 4096 * 1536);
}

}  // namespace
}  // namespace mok::bench::layer
