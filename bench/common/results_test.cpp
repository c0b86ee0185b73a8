// The CUDA-free half of the benchmark library: JSON text, statistics, figures and result files. Result files
// are read by bench/report.py and cited by our notes, so their text is pinned down here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common/json.hpp"
#include "bench/common/options.hpp"
#include "bench/common/result.hpp"
#include "bench/common/stats.hpp"

namespace mok::bench {
namespace {

TEST(BenchJson, QuotesEscapesAndControlCharacters) {
    EXPECT_EQ(json_quote("plain"), "\"plain\"");
    EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    EXPECT_EQ(json_quote("line\nnext\ttab"), "\"line\\nnext\\ttab\"");
    EXPECT_EQ(json_quote(std::string("\x01", 1)), "\"\\u0001\"");
    EXPECT_EQ(json_quote("\x1f"), "\"\\u001f\"");
    // UTF-8 passes through byte for byte.
    EXPECT_EQ(json_quote("\xc2\xb5s"), "\"\xc2\xb5s\"");
}

TEST(BenchJson, NumbersRoundTripAndNonFiniteIsNull) {
    EXPECT_EQ(Json(0.1).dump(0), "0.1");
    EXPECT_EQ(Json(751e12).dump(0), "7.51e+14");
    EXPECT_EQ(Json(int64_t{-42}).dump(0), "-42");
    EXPECT_EQ(Json(size_t{1} << 40).dump(0), "1099511627776");
    EXPECT_EQ(Json(std::numeric_limits<double>::quiet_NaN()).dump(0), "null");
    EXPECT_EQ(Json(std::numeric_limits<double>::infinity()).dump(0), "null");
    const double third = 1.0 / 3.0;
    EXPECT_EQ(std::stod(Json(third).dump(0)), third);
}

TEST(BenchJson, ObjectsKeepInsertionOrderAndReplaceInPlace) {
    Json object = Json::object();
    object.set("b", 1).set("a", "x").set("b", true);
    EXPECT_EQ(object.dump(0), "{\"b\":true,\"a\":\"x\"}");
    EXPECT_EQ(object.size(), 2u);
    ASSERT_NE(object.find("a"), nullptr);
    EXPECT_EQ(object.find("missing"), nullptr);

    Json list;
    list.push(1).push(Json::object()).push(Json::array());
    EXPECT_EQ(list.dump(0), "[1,{},[]]");
    EXPECT_EQ(list.dump(2), "[\n  1,\n  {},\n  []\n]\n");
}

TEST(BenchStats, MedianQuartilesAndExtremes) {
    // Sorted: 1 2 3 4 5 -> quartile positions 1, 2, 3 fall on samples exactly.
    const TimingStats odd = summarize({5.0, 1.0, 4.0, 2.0, 3.0});
    EXPECT_EQ(odd.median_ms, 3.0);
    EXPECT_EQ(odd.p25_ms, 2.0);
    EXPECT_EQ(odd.p75_ms, 4.0);
    EXPECT_EQ(odd.min_ms, 1.0);
    EXPECT_EQ(odd.max_ms, 5.0);
    EXPECT_EQ(odd.num_reps(), 5);
    // The samples keep the order they ran in.
    EXPECT_EQ(odd.samples_ms.front(), 5.0);

    // Sorted: 10 20 30 40 -> median halfway between 20 and 30; p25 at position 0.75 -> 17.5.
    const TimingStats even = summarize({40.0, 10.0, 30.0, 20.0});
    EXPECT_DOUBLE_EQ(even.median_ms, 25.0);
    EXPECT_DOUBLE_EQ(even.p25_ms, 17.5);
    EXPECT_DOUBLE_EQ(even.p75_ms, 32.5);

    EXPECT_EQ(summarize({}).num_reps(), 0);
}

TEST(BenchStats, MaxOverRanksIsPerRepetition) {
    const std::vector<double> slowest = max_over_ranks({{1.0, 5.0, 2.0}, {3.0, 4.0, 2.5}});
    EXPECT_EQ(slowest, (std::vector<double>{3.0, 5.0, 2.5}));
    EXPECT_THROW(max_over_ranks({{1.0}, {1.0, 2.0}}), std::invalid_argument);
}

TEST(BenchStats, WarmUpRunsReachTheDuration) {
    // Enough: nothing more.
    EXPECT_EQ(more_warmup_runs(300.0, 3, 300.0), 0);
    EXPECT_EQ(more_warmup_runs(10.0, 3, 0.0), 0);
    // 3 runs of 2 ms toward 300 ms: 147 more at the same length.
    EXPECT_EQ(more_warmup_runs(6.0, 3, 300.0), 147);
    // A fraction of a run rounds up, and a short warm-up always asks for at least one run.
    EXPECT_EQ(more_warmup_runs(299.0, 3, 300.0), 1);
    EXPECT_EQ(more_warmup_runs(9.0, 3, 10.0), 1);
    // No runs yet: one, to learn their length. Runs that took no time: the most a round may ask.
    EXPECT_EQ(more_warmup_runs(0.0, 0, 300.0), 1);
    EXPECT_EQ(more_warmup_runs(0.0, 5, 300.0), kMaxWarmupRunsPerRound);
    // Very short runs are capped per round.
    EXPECT_EQ(more_warmup_runs(1e-6, 1, 300.0), kMaxWarmupRunsPerRound);
}

TEST(BenchFigures, RatioIsTimesBetterThanTheBaseline) {
    const TimingStats stats = summarize({2.0, 4.0, 3.0});
    Figure time = time_figure("time", stats);
    EXPECT_EQ(time.unit, "ms");
    EXPECT_EQ(time.value, 3.0);
    EXPECT_EQ(time.samples, (std::vector<double>{2.0, 4.0, 3.0}));  // in the order they ran
    EXPECT_TRUE(std::isnan(time.ratio()));
    time.against("nccl_pytorch", 6.0);
    EXPECT_DOUBLE_EQ(time.ratio(), 2.0);  // half the baseline's time: twice as good

    // 6 GB per run in 3 ms is 2000 GB/s; the slowest run (4 ms) gives the spread's low end.
    Figure rate = rate_figure("bandwidth", "GB/s", 6.0, stats);
    EXPECT_DOUBLE_EQ(rate.value, 2000.0);
    ASSERT_TRUE(rate.spread.has_value());
    EXPECT_DOUBLE_EQ(rate.spread->min, 1500.0);
    EXPECT_DOUBLE_EQ(rate.spread->max, 3000.0);
    rate.against("peer_copy", 4000.0);
    EXPECT_DOUBLE_EQ(rate.ratio(), 0.5);

    const Figure fraction = fraction_figure("roofline_fraction", rate, "gemm_bf16", 4000.0);
    EXPECT_DOUBLE_EQ(fraction.value, 0.5);
    ASSERT_TRUE(fraction.ceiling.has_value());
    EXPECT_EQ(fraction.ceiling->unit, "GB/s");
    EXPECT_DOUBLE_EQ(fraction.spread->max, 0.75);
}

TEST(BenchFigures, FigureValueByNameAndNanWhereAbsent) {
    Case c;
    c.figures.push_back(value_figure("bandwidth", "GB/s", Better::kHigher, 4500.0));
    c.figures.push_back(value_figure("tflops", "TFLOP/s", Better::kHigher, 800.0));
    EXPECT_EQ(figure_value(c, "tflops"), 800.0);
    EXPECT_EQ(figure_value(c, "bandwidth"), 4500.0);
    EXPECT_TRUE(std::isnan(figure_value(c, "time")));
}

TEST(BenchResult, FileNameAndSlug) {
    EXPECT_EQ(device_slug("NVIDIA H200"), "h200");
    EXPECT_EQ(device_slug("NVIDIA H100 80GB HBM3"), "h100-80gb-hbm3");
    EXPECT_EQ(device_slug(""), "unknown");
    RunInfo run;
    run.benchmark = "ceilings";
    run.device = "NVIDIA H200";
    run.num_gpus = 2;
    run.date = "2026-11-29T20:15:03Z";
    run.commit = "abc123/dirty";
    EXPECT_EQ(result_file_name(run), "ceilings-h200-2gpu-20261129T201503Z-abc123_dirty.json");
    EXPECT_EQ(utc_now().size(), std::string("2026-11-29T20:15:03Z").size());
}

TEST(BenchResult, WritesTheSchema) {
    Result result;
    result.run = RunInfo{"ceilings", "NVIDIA H200", 1, 132, "abc123", "2026-11-29T20:15:03Z", "run-1"};
    result.config.set("reps", 20);
    Case ok;
    ok.name = "gemm_bf16/8192x8192x8192";
    ok.params.set("m", 8192);
    TimingStats stats = summarize({1.0, 2.0});
    stats.num_warmup_runs = 4;
    stats.warmup_ms = 301.5;
    ok.figures.push_back(time_figure("time", stats).against("cublas", 3.0));
    Case skipped;
    skipped.name = "peer_copy/0to1";
    skipped.status = CaseStatus::kSkipped;
    skipped.note = "needs 2 GPUs";
    result.cases = {ok, skipped};

    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "mok_bench_results_test";
    std::filesystem::remove_all(dir);
    const std::filesystem::path path = write_result(result, dir);
    EXPECT_EQ(path.filename().string(), "ceilings-h200-1gpu-20261129T201503Z-abc123.json");
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    EXPECT_EQ(text.str(), result.to_json().dump());
    // A second run with the same name (same benchmark, second and commit) gets a file of its own.
    const std::filesystem::path second = write_result(result, dir);
    EXPECT_EQ(second.filename().string(), "ceilings-h200-1gpu-20261129T201503Z-abc123-2.json");
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(write_result(result, dir).filename().string(), "ceilings-h200-1gpu-20261129T201503Z-abc123-3.json");
    std::filesystem::remove_all(dir);

    const std::string json = result.to_json().dump(0);
    EXPECT_EQ(json.rfind("{\"schema_version\":1,\"benchmark\":\"ceilings\",\"run_id\":\"run-1\"", 0), 0u);
    EXPECT_NE(json.find("\"baseline\":{\"name\":\"cublas\",\"value\":3,\"unit\":\"ms\"},\"ratio\":2"),
              std::string::npos);
    EXPECT_NE(json.find("\"samples\":[1,2],\"warmup\":{\"runs\":4,\"ms\":301.5}"), std::string::npos);
    EXPECT_NE(json.find("\"status\":\"skipped\",\"note\":\"needs 2 GPUs\""), std::string::npos);
    EXPECT_NE(format_summary(result).find("skipped: needs 2 GPUs"), std::string::npos);
}

TEST(BenchOptions, CommonFlagsAndTheRest) {
    std::vector<std::string> args = {"prog", "--quick", "--reps",    "7",           "--model",
                                     "x",    "--out",   "out/bench", "--warmup-ms", "250.5"};
    std::vector<char*> argv;
    for (std::string& arg : args) {
        argv.push_back(arg.data());
    }
    const CommonOptions options = parse_common_options(static_cast<int>(argv.size()), argv.data());
    EXPECT_TRUE(options.quick);
    EXPECT_FALSE(options.full);
    EXPECT_EQ(options.num_reps, 7);
    EXPECT_FALSE(options.num_warmup.has_value());
    EXPECT_EQ(options.min_warmup_ms, 250.5);
    EXPECT_EQ(options.out_dir, std::filesystem::path("out/bench"));
    EXPECT_EQ(options.rest, (std::vector<std::string>{"--model", "x"}));

    for (const char* bad_ms : {"-1", "soon", "nan"}) {
        std::vector<std::string> bad = {"prog", "--warmup-ms", bad_ms};
        std::vector<char*> bad_argv;
        for (std::string& arg : bad) {
            bad_argv.push_back(arg.data());
        }
        EXPECT_THROW(parse_common_options(static_cast<int>(bad_argv.size()), bad_argv.data()), std::invalid_argument)
            << bad_ms;
    }
    std::vector<std::string> bad = {"prog", "--reps", "many"};
    std::vector<char*> bad_argv;
    for (std::string& arg : bad) {
        bad_argv.push_back(arg.data());
    }
    EXPECT_THROW(parse_common_options(static_cast<int>(bad_argv.size()), bad_argv.data()), std::invalid_argument);
    EXPECT_THROW(parse_common_options(2, bad_argv.data()), std::invalid_argument);
}

TEST(BenchOptions, CaseFilterTakesItsFlagAndSelectsByName) {
    std::vector<std::string> rest = {"--model", "x", "--cases", "m4096/dgrad_down", "--y"};
    const CaseFilter filter = CaseFilter::take_from(rest);
    EXPECT_EQ(rest, (std::vector<std::string>{"--model", "x", "--y"}));
    EXPECT_EQ(filter.pattern(), "m4096/dgrad_down");
    EXPECT_TRUE(filter.selects("deepseek-v3/m4096/dgrad_down_swiglu_pingpong"));
    EXPECT_FALSE(filter.selects("deepseek-v3/m128/dgrad_down_swiglu"));
    EXPECT_FALSE(filter.selects("deepseek-v3/m4096/down"));

    std::vector<std::string> none = {"--quick"};
    const CaseFilter every = CaseFilter::take_from(none);
    EXPECT_TRUE(every.pattern().empty());
    EXPECT_TRUE(every.selects("anything/at/all"));
    EXPECT_EQ(none, (std::vector<std::string>{"--quick"}));

    std::vector<std::string> missing = {"--cases"};
    EXPECT_THROW(CaseFilter::take_from(missing), std::invalid_argument);
    std::vector<std::string> malformed = {"--cases", "(gate"};
    EXPECT_THROW(CaseFilter::take_from(malformed), std::invalid_argument);
}

TEST(BenchOptions, SwitchesAreTakenWherever) {
    std::vector<std::string> rest = {"--time-failed", "--model", "x", "--time-failed"};
    EXPECT_TRUE(take_switch(rest, "--time-failed"));
    EXPECT_EQ(rest, (std::vector<std::string>{"--model", "x"}));
    EXPECT_FALSE(take_switch(rest, "--time-failed"));
    EXPECT_EQ(rest, (std::vector<std::string>{"--model", "x"}));
}

TEST(BenchResult, SummaryShowsAFailedCasesFigures) {
    Result result;
    Case failed;
    failed.name = "x/m128/down";
    failed.status = CaseStatus::kFailed;
    failed.note = "correctness check failed: error 1; timed anyway (--time-failed)";
    failed.figures.push_back(time_figure("time", summarize({1.0, 2.0})));
    Case failed_untimed;
    failed_untimed.name = "x/m128/gate_up";
    failed_untimed.status = CaseStatus::kFailed;
    failed_untimed.note = "correctness check failed: error 1";
    result.cases = {failed, failed_untimed};
    const std::string summary = format_summary(result);
    EXPECT_NE(summary.find("x/m128/down  failed: correctness check failed"), std::string::npos) << summary;
    EXPECT_NE(summary.find("x/m128/down  time  1.5 ms"), std::string::npos) << summary;
    EXPECT_NE(summary.find("x/m128/gate_up  failed"), std::string::npos) << summary;
    EXPECT_EQ(summary.find("x/m128/gate_up  time"), std::string::npos) << summary;
}

}  // namespace
}  // namespace mok::bench
