// mok-bench-gemm: the grouped GEMM engine's forms on every (H, I) of the model table at 128, 512, 2048 and
// 4096 rows per expert, against dense cuBLAS of the same (M, N, K) measured in this run (and, through the run
// id, torch._grouped_mm measured by bench/baselines in the same runner invocation).
//
// Each case runs its form once and checks sampled outputs against a CPU fp64 dot product through the
// tolerance model before timing (sampled_checks.hpp). The experts of a case are the local experts of EP 8 (E / 8),
// capped at 65536 rows in all -- the same groups as the torch._grouped_mm baseline, whose cases pair with these by
// name (problem.hpp). This file holds the forms, their timing and the result.
#include <cuda_bf16.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"
#include "bench/gemm/problem.hpp"
#include "bench/gemm/sampled_checks.hpp"
#include "common/device_status.hpp"
#include "device/gemm/grouped_gemm.hpp"
#include "reference/tolerance.hpp"

namespace mok::bench::gemm_bench {
namespace {

constexpr double kFlopsPerMultiplyAdd = 2.0;
// Accumulate mode reads and writes each fp32 main_grad element once: the traffic its bandwidth figure counts,
// comparable with the device copy's (read + write).
constexpr double kMainGradBytesMoved = 2.0 * sizeof(float);
constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;

// Which way a form's weight bytes move, and so which same-run bandwidth ceiling its 128-row points are held against.
enum class WeightTraffic {
    kRead,       // the forward and dgrad forms read the weights: device_read
    kWrite,      // the fresh weight gradients write a tensor the weights' size: device_write
    kReadWrite,  // accumulate mode reads and writes fp32 main_grad: device_copy
};

struct Form {
    std::string name;
    double flops;               // per run
    double weight_bytes;        // weight bytes moved per run: weights read, or weight gradients written (fresh) or
                                // read and written (accumulate)
    ceilings::GemmShape dense;  // the dense GEMM of the same (M, N, K): the same-run cuBLAS point
    std::function<void(cudaStream_t)> run;
    std::function<tolerance::Verdict()> check;
    WeightTraffic traffic = WeightTraffic::kRead;
};

// The same run's bandwidth ceilings, one per WeightTraffic.
struct BandwidthCeilings {
    Case copy;
    Case read;
    Case write;

    // The ceiling of the direction a form's weight bytes move (the copy's, which moves as many bytes each way, for
    // accumulate mode).
    const Case& of(WeightTraffic traffic) const {
        switch (traffic) {
            case WeightTraffic::kRead:
                return read;
            case WeightTraffic::kWrite:
                return write;
            case WeightTraffic::kReadWrite:
                break;
        }
        return copy;
    }
};

std::vector<Form> forms(Problem& p) {
    const double m = p.rows;
    const double hh = p.hidden;
    const double ii = p.width;
    const double e = p.num_experts;
    auto launch = [&p](cudaStream_t stream, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        gemm::LaunchConfig l;
        l.stream = stream;
        l.status = p.status.get();
        l.wave_counter = p.wave_counter.get();
        l.arrangement = arrangement;
        return l;
    };
    std::vector<Form> out;
    // The M-grouped forms in every arrangement that serves them (the cases of the others carry its suffix), each
    // checked after a run of its own arrangement.
    for (const gemm::Arrangement arrangement :
         {gemm::Arrangement::kCooperative, gemm::Arrangement::kPingPong, gemm::Arrangement::kEpilogueWarps}) {
        const std::string suffix = arrangement == gemm::Arrangement::kPingPong        ? "_pingpong"
                                   : arrangement == gemm::Arrangement::kEpilogueWarps ? "_epilogue_warps"
                                                                                      : "";
        out.push_back({"gate_up_swiglu" + suffix,
                       kFlopsPerMultiplyAdd * m * 2 * ii * hh,
                       e * 2 * ii * hh * 2,
                       {p.rows, 2 * p.width, p.hidden},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::gate_up_swiglu({p.space, p.x.get(), p.w_gate.get(), p.w_up.get(),
                                                              p.gu.get(), p.h.get(), p.hidden, p.width},
                                                             launch(s, arrangement)));
                       },
                       [&p]() {
                           return check_rows_against_weights(p, p.x.get(), p.w_gate.get(), p.gu.get(), 2 * p.width,
                                                             p.width, p.hidden);
                       }});
        out.push_back({"down" + suffix,
                       kFlopsPerMultiplyAdd * m * hh * ii,
                       e * hh * ii * 2,
                       {p.rows, p.hidden, p.width},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::down_projection(
                               {p.space, p.h.get(), p.w_down.get(), p.out.get(), p.hidden, nullptr, p.hidden, p.width},
                               launch(s, arrangement)));
                       },
                       [&p]() {
                           return check_rows_against_weights(p, p.h.get(), p.w_down.get(), p.out.get(), p.hidden,
                                                             p.hidden, p.width);
                       }});
        out.push_back({"dgrad_down_swiglu" + suffix,
                       kFlopsPerMultiplyAdd * m * ii * hh,
                       e * hh * ii * 2,
                       {p.rows, p.width, p.hidden},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(
                               gemm::dgrad_down({p.space, p.dy.get(), p.w_down.get(), p.gu.get(), p.row_weight.get(),
                                                 p.dgu.get(), p.partials.get(), p.hidden, p.width},
                                                launch(s, arrangement)));
                           check_status(gemm::reduce_router_partials(
                               p.space, p.partials.get(), gemm::router_partial_tiles(p.width), p.d_router.get(), s));
                       },
                       [&p]() { return check_dgrad_down(p); }});
        out.push_back({"dgrad_gate_up" + suffix,
                       kFlopsPerMultiplyAdd * m * hh * 2 * ii,
                       e * 2 * ii * hh * 2,
                       {p.rows, p.hidden, 2 * p.width},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::dgrad_gate_up({p.space, p.dgu.get(), p.w_gate.get(), p.w_up.get(),
                                                             p.out.get(), p.hidden, nullptr, p.hidden, p.width},
                                                            launch(s, arrangement)));
                       },
                       [&p]() { return check_dgrad_gate_up(p); }});
    }
    // Weight gradients accumulating into fp32 main_grad (loaded, added and stored; then by TMA reductions, the cases
    // with _reduction), then fresh into bf16 (the layer's default): the difference is the cost of reading and writing
    // main_grad. Fresh mode runs in both arrangements that serve it (the epilogue warps' cases carry its suffix). Every
    // case is checked by a fresh-mode run of its arrangement.
    auto check_gate_up = [&p, launch](gemm::Arrangement arrangement) {
        return std::function<tolerance::Verdict()>([&p, launch, arrangement]() {
            check_status(gemm::weight_grad_gate_up({p.space, p.dgu.get(), p.x.get(), p.fresh.get(), p.fresh_up.get(),
                                                    gemm::WeightGradMode::kFresh, p.hidden, p.width},
                                                   launch(nullptr, arrangement)));
            MOK_BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            return check_weight_grad(p, p.dgu.get(), 2 * p.width, 0, p.x.get(), p.width, p.hidden, p.fresh.get());
        });
    };
    auto check_down = [&p, launch](gemm::Arrangement arrangement) {
        return std::function<tolerance::Verdict()>([&p, launch, arrangement]() {
            check_status(gemm::weight_grad_down(
                {p.space, p.dys.get(), p.h.get(), p.fresh.get(), gemm::WeightGradMode::kFresh, p.hidden, p.width},
                launch(nullptr, arrangement)));
            MOK_BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            return check_weight_grad(p, p.dys.get(), p.hidden, 0, p.h.get(), p.hidden, p.width, p.fresh.get());
        });
    };
    struct WeightGradCase {
        gemm::WeightGradMode mode;
        gemm::MainGradUpdate update;
        gemm::Arrangement arrangement;
        const char* suffix;
    };
    constexpr gemm::MainGradUpdate kLoads = gemm::MainGradUpdate::kLoadAddStore;
    for (const WeightGradCase& w :
         {WeightGradCase{gemm::WeightGradMode::kAccumulate, kLoads, gemm::Arrangement::kCooperative, ""},
          WeightGradCase{gemm::WeightGradMode::kAccumulate, gemm::MainGradUpdate::kReduction,
                         gemm::Arrangement::kCooperative, "_reduction"},
          WeightGradCase{gemm::WeightGradMode::kFresh, kLoads, gemm::Arrangement::kCooperative, "_fresh"},
          WeightGradCase{gemm::WeightGradMode::kFresh, kLoads, gemm::Arrangement::kEpilogueWarps,
                         "_fresh_epilogue_warps"}}) {
        const bool fresh = w.mode == gemm::WeightGradMode::kFresh;
        const gemm::WeightGradMode mode = w.mode;
        const gemm::MainGradUpdate update = w.update;
        const gemm::Arrangement arrangement = w.arrangement;
        const double grad_bytes = fresh ? static_cast<double>(sizeof(__nv_bfloat16)) : kMainGradBytesMoved;
        const WeightTraffic traffic = fresh ? WeightTraffic::kWrite : WeightTraffic::kReadWrite;
        void* d_gate = fresh ? static_cast<void*>(p.fresh.get()) : p.d_gate.get();
        void* d_up = fresh ? static_cast<void*>(p.fresh_up.get()) : p.d_up.get();
        void* d_down = fresh ? static_cast<void*>(p.fresh.get()) : p.d_down.get();
        out.push_back({std::string("wgrad_gate_up") + w.suffix,
                       kFlopsPerMultiplyAdd * m * 2 * ii * hh,
                       e * 2 * ii * hh * grad_bytes,
                       {2 * p.width, p.hidden, p.rows},
                       [&p, launch, mode, update, arrangement, d_gate, d_up](cudaStream_t s) {
                           check_status(gemm::weight_grad_gate_up(
                               {p.space, p.dgu.get(), p.x.get(), d_gate, d_up, mode, p.hidden, p.width, update},
                               launch(s, arrangement)));
                       },
                       check_gate_up(arrangement),
                       traffic});
        out.push_back({std::string("wgrad_down") + w.suffix,
                       kFlopsPerMultiplyAdd * m * hh * ii,
                       e * hh * ii * grad_bytes,
                       {p.hidden, p.width, p.rows},
                       [&p, launch, mode, update, arrangement, d_down](cudaStream_t s) {
                           check_status(gemm::weight_grad_down(
                               {p.space, p.dys.get(), p.h.get(), d_down, mode, p.hidden, p.width, update},
                               launch(s, arrangement)));
                       },
                       check_down(arrangement),
                       traffic});
    }
    return out;
}

// A form's case name: model/m<rows per expert>/form.
std::string case_name(const ModelPreset& shape, int32_t rows_per_expert, const Form& form) {
    return std::string(shape.name) + "/m" + std::to_string(rows_per_expert) + "/" + form.name;
}

// A case whose correctness check fails is not timed, unless `time_failed` (--time-failed): a diagnostic build that
// computes wrong results on purpose, to time what it leaves out, still gets its figures, and the case stays failed.
Case time_form(const ModelPreset& shape, int32_t rows_per_expert, Form& form, cudaStream_t stream, Timer& timer,
               const TimingOptions& timing, double dense_tflops, const BandwidthCeilings& ceilings, bool time_failed) {
    Case c;
    c.name = case_name(shape, rows_per_expert, form);
    c.params = Json::object();
    c.params.set("hidden", Json(shape.hidden));
    c.params.set("width", Json(shape.expert_width));
    c.params.set("rows_per_expert", Json(rows_per_expert));
    c.params.set("num_experts", Json(groups_for(shape, rows_per_expert)));
    c.params.set("form", Json(form.name));
    form.run(stream);
    MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    if (form.check) {
        const tolerance::Verdict v = form.check();
        if (!v.pass) {
            c.status = CaseStatus::kFailed;
            c.note = "correctness check failed: " + v.describe();
            if (!time_failed) {
                return c;
            }
            c.note += "; timed anyway (--time-failed)";
        } else {
            c.note = "checked before timing: " + v.describe();
        }
    }
    const TimingStats stats = timer.time([&](int) { form.run(stream); }, timing);
    c.figures.push_back(time_figure("time", stats));
    Figure rate = rate_figure("tflops", "TFLOP/s", form.flops / kTera, stats);
    rate.against("cublas_dense_bf16", dense_tflops);
    c.figures.push_back(rate);
    c.figures.push_back(fraction_figure("fraction_of_cublas", rate, "cublas_dense_bf16", dense_tflops));
    if (rows_per_expert <= kRowAlignment) {
        Figure bw = rate_figure("weight_read_bandwidth", "GB/s", form.weight_bytes / kGiga, stats);
        c.figures.push_back(bw);
        c.figures.push_back(
            fraction_figure("fraction_of_copy", bw, "device_copy", figure_value(ceilings.copy, "bandwidth")));
        const Case& one_way = ceilings.of(form.traffic);
        c.figures.push_back(fraction_figure("fraction_of_one_way", bw, one_way.name.substr(0, one_way.name.find('/')),
                                            figure_value(one_way, "bandwidth")));
    }
    return c;
}

void usage() {
    std::printf("mok-bench-gemm: grouped GEMM forms vs same-run dense cuBLAS\n%s", common_options_help().c_str());
    std::printf(
        "  --cases REGEX  only the cases whose name (model/m<rows per expert>/form) matches, e.g. 'dgrad_down'\n"
        "  --time-failed  time a case whose correctness check fails too (it stays failed): for diagnostic builds\n");
}

int run(const CommonOptions& options) {
    std::vector<std::string> rest = options.rest;
    const CaseFilter filter = CaseFilter::take_from(rest);
    const bool time_failed = take_switch(rest, "--time-failed");
    if (!rest.empty()) {
        throw std::invalid_argument("unknown flag '" + rest.front() + "' (see --help)");
    }
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kDefaultWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kDefaultWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? 5 : 10);
    // --quick: the baseline's quick subset (DeepSeek-V3 and Qwen3.5 at 128 and 4096 rows per expert).
    const std::vector<int32_t> rows_points =
        options.quick ? std::vector<int32_t>{128, 4096} : std::vector<int32_t>{128, 512, 2048, 4096};
    std::vector<const ModelPreset*> shapes;
    for (const ModelPreset& preset : model_presets()) {
        if (!options.quick || preset.name == "deepseek-v3" || preset.name == "qwen3.5-397b-a17b") {
            shapes.push_back(&preset);
        }
    }
    Result result;
    result.run = collect_run_info("gemm", 1);
    result.config.set("groups", Json(std::string("min(E / 8, 65536 / rows per expert)")));
    result.config.set("num_reps", Json(timing.num_reps));
    result.config.set("warmup", Json(timing.num_warmup));
    result.config.set("warmup_ms", Json(timing.min_warmup_ms));
    result.config.set("flush_l2", Json(timing.flush_l2));
    if (!filter.pattern().empty()) {
        result.config.set("cases", Json(filter.pattern()));
    }
    if (time_failed) {
        result.config.set("time_failed", Json(true));
    }
    Stream stream(0);
    Timer timer({{0, stream.get()}});

    const size_t ceiling_bytes = size_t{4} << 30;
    const BandwidthCeilings bandwidth{ceilings::device_copy_case(ceiling_bytes, timing),
                                      ceilings::device_read_case(ceiling_bytes, timing),
                                      ceilings::device_write_case(ceiling_bytes, timing)};
    for (const Case* ceiling : {&bandwidth.copy, &bandwidth.read, &bandwidth.write}) {
        result.cases.push_back(*ceiling);
    }
    for (const ModelPreset* preset : shapes) {
        const ModelPreset& shape = *preset;
        for (int32_t rows_per_expert : rows_points) {
            Problem problem(shape, rows_per_expert, stream.get());
            for (Form& form : forms(problem)) {
                if (!filter.selects(case_name(shape, rows_per_expert, form))) {
                    continue;
                }
                const Case dense = ceilings::gemm_case(form.dense, timing);
                const double dense_tflops = figure_value(dense, "tflops");
                Case c = time_form(shape, rows_per_expert, form, stream.get(), timer, timing, dense_tflops, bandwidth,
                                   time_failed);
                result.cases.push_back(std::move(c));
                std::fflush(stdout);
            }
            DeviceStatus status{};
            MOK_BENCH_CHECK_CUDA(cudaMemcpy(&status, problem.status.get(), sizeof(status), cudaMemcpyDeviceToHost));
            if (status.code != 0) {
                throw std::runtime_error("a GEMM kernel reported device error " + std::to_string(status.code));
            }
        }
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::gemm_bench

int main(int argc, char** argv) {
    return mok::bench::run_benchmark_main(argc, argv, "mok-bench-gemm", mok::bench::gemm_bench::usage,
                                          mok::bench::gemm_bench::run, mok::bench::OtherFlags::kPass);
}
