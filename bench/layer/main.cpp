// mok-bench-layer: the MoE layer on the GPU (Backend::kCuda) through the public API, forward and backward, at
// EP 1 (GPU 0) and EP 2 (GPUs 0 and 1, one rank per GPU driven from this process), for the model presets.
//
// Case names match bench/baselines/layer_baseline.py's ("<model>/ep<R>/t<T>/<routing>/<pass>"), so the report
// pairs each with the NCCL+PyTorch layer measured in the same run. Figures per case: time (the slower rank's),
// the rate of the pass's expert FLOPs per rank, that rate as a fraction of the same-run dense cuBLAS rate (the
// compute roofline), the time the bytes any implementation must move take at the same-run one-way DRAM ceilings
// and its fraction of the pass's time (the memory roofline, memory_floor.hpp), and the device memory in use on the
// rank (weights, gradients, activations, workspace).
//
// The files: layer_case.hpp (the cases, their routings and the flags), rank.hpp (one rank's data and layers),
// memory_floor.hpp (the memory floor), routing.hpp (balanced routing); this file times the cases and writes the result.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"
#include "bench/layer/layer_case.hpp"
#include "bench/layer/memory_floor.hpp"
#include "bench/layer/rank.hpp"
#include "mok/mok.hpp"

namespace mok::bench::layer {
namespace {

constexpr double kFlopsPerTflop = 1e12;
// Long cases: fewer repetitions than the library default (the JSON config records them). The warm-up lasts two
// seconds of device time, longer than the library's default: the layer's GEMMs run at the board's power cap, and the
// cap's controller, which follows a power averaged over about a second, drops the clock to 0.8-1.1 GHz for a pass or
// two some 0.8 s after a load starts (a clock trace, docs/benchmarking.md, "Warm-up to the steady clock"). With two
// passes of warm-up the timed ones ran at an idle GPU's clock (DeepSeek-V3's EP 2 forward 6.3-6.4 ms, then 7.2 ms);
// with 0.3 s the repetitions of some cases met that dip.
constexpr int kReps = 10;
constexpr double kWarmupMs = 2000.0;
constexpr int kQuickReps = 4;
// The compute ceiling: a dense bf16 GEMM of this size, timed by cuBLAS in the same run.
constexpr int64_t kCeilingGemmSize = 8192;
// The one-way DRAM ceilings' buffer: far beyond the 50 MB L2, as mok-bench-gemm's.
constexpr size_t kDramCeilingBytes = size_t{4} << 30;
constexpr double kMsPerSecond = 1e3;
// Steps of the stage-recording layer whose stage times are averaged.
constexpr int kProfiledSteps = 3;

// The same run's one-way DRAM ceilings (GB/s) the memory floors divide by.
struct DramCeilings {
    double read_gb_per_s = 0.0;
    double write_gb_per_s = 0.0;
};

// The slowest rank's memory floor of each pass, in ms: the rank whose experts with rows are the most.
struct PassFloors {
    double forward_ms = 0.0;
    double backward_ms = 0.0;
};

// NaN where a ceiling did not measure (the cases then go without their floor figures).
PassFloors memory_floors(const LayerCase& c, const DramCeilings& dram) {
    if (!(dram.read_gb_per_s > 0.0) || !(dram.write_gb_per_s > 0.0)) {
        return {NAN, NAN};
    }
    std::vector<std::vector<int32_t>> ids(c.ep);
    for (int r = 0; r < c.ep; ++r) {
        ids[r] = make_expert_ids(c, r, 0);
    }
    FloorShape shape;
    shape.tokens = c.tokens;
    shape.hidden = c.model->hidden;
    shape.expert_width = c.model->expert_width;
    shape.local_experts = c.model->num_experts / c.ep;
    shape.shared_widths.assign(c.model->shared_expert_widths.begin(), c.model->shared_expert_widths.end());
    shape.accumulate = c.grad_mode == GradMode::kAccumulate;
    PassFloors floors;
    for (int r = 0; r < c.ep; ++r) {
        shape.local_experts_with_rows = local_experts_with_rows(ids, c.model->num_experts, r);
        floors.forward_ms =
            std::max(floors.forward_ms, floor_ms(forward_bytes(shape), dram.read_gb_per_s, dram.write_gb_per_s));
        floors.backward_ms =
            std::max(floors.backward_ms, floor_ms(backward_bytes(shape), dram.read_gb_per_s, dram.write_gb_per_s));
    }
    return floors;
}

// Host wall time of the timed bodies: how long the host takes to enqueue a pass, against which the GPU's time
// says whether the host keeps ahead of the GPU (if it did not, the timed figures would be the host's pace).
class HostClock {
  public:
    // Times its own lifetime into `clock` when `counted` (the timed repetitions, not the warm-up).
    class Scope {
      public:
        Scope(HostClock& clock, bool counted) : clock_(clock), counted_(counted), start_(Clock::now()) {}
        ~Scope() {
            if (counted_) {
                clock_.samples_ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
            }
        }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

      private:
        HostClock& clock_;
        bool counted_;
        std::chrono::steady_clock::time_point start_;
    };

    TimingStats stats() const { return summarize(samples_ms_); }

  private:
    using Clock = std::chrono::steady_clock;
    std::vector<double> samples_ms_;
};

// Rank 0's stage times of `pass` per step ("stage:<stage>" figures, ms): where the pass's time goes.
void add_stage_figures(const std::vector<StageTime>& stages, const char* pass, Case& out) {
    const std::string prefix = std::string(pass) + "/";
    for (const StageTime& t : stages) {
        if (t.stage.rfind(prefix, 0) == 0 && t.count > 0) {
            const double per_step = t.total_ms / static_cast<double>(kProfiledSteps);
            out.figures.push_back(
                value_figure("stage:" + t.stage.substr(prefix.size()), "ms", Better::kLower, per_step));
        }
    }
}

void add_pass_case(const LayerCase& c, const char* pass, double flops, double cublas_tflops, double floor_ms,
                   const TimingStats& stats, const TimingStats& host_enqueue, double memory_gib,
                   const std::vector<StageTime>& stages, std::vector<Case>& cases) {
    Case out;
    out.name = c.name(pass);
    out.params.set("model", std::string(c.model->name))
        .set("ep", c.ep)
        .set("tokens_per_rank", c.tokens)
        .set("routing", c.routing)
        .set("comm_sms", c.comm_sms)
        .set("one_stream", c.one_stream)
        .set("gemm_pingpong", c.gemm_arrangements && Config{}.gemm_pingpong)
        .set("gemm_epilogue_warps", c.gemm_arrangements && Config{}.gemm_epilogue_warps)
        .set("forward_combine", c.combine_name())
        .set("dispatch_token_groups", c.token_groups)
        .set("grad_mode", c.grad_mode_name())
        .set("pass", std::string(pass));
    out.figures.push_back(time_figure("time", stats));
    Figure rate = rate_figure("tflops", "TFLOP/s", flops / kFlopsPerTflop, stats);
    out.figures.push_back(fraction_figure("roofline_fraction", rate, "cublas_bf16_dense", cublas_tflops));
    out.figures.push_back(std::move(rate));
    if (std::isfinite(floor_ms)) {
        out.figures.push_back(value_figure("memory_floor", "ms", Better::kLower, floor_ms));
        // floor / time: a rate of "floor seconds per run" over the run's seconds, with the times' spread.
        out.figures.push_back(rate_figure("memory_floor_fraction", "fraction", floor_ms / kMsPerSecond, stats));
    }
    out.figures.push_back(value_figure("peak_memory", "GiB", Better::kLower, memory_gib));
    out.figures.push_back(time_figure("host_enqueue", host_enqueue));
    add_stage_figures(stages, pass, out);
    out.note =
        "peak_memory: device memory in use on the rank after the pass (the layer allocates nothing during a "
        "step); roofline: expert FLOPs over the same-run cuBLAS rate; memory_floor: the bytes any implementation "
        "moves at least (weights with rows, gradients, the token tensors) at the same-run one-way DRAM ceilings, the "
        "slowest rank's, and memory_floor_fraction that over the time; stage:* figures: rank 0's GPU time per "
        "step of each stage, from a second layer on the workspace that records them (Config::record_stage_times), "
        "its steps enqueued behind a HostGate so that they hold no host time; host_enqueue: host time to enqueue one "
        "pass on every rank from one thread (the timed figures are the GPU's while it stays below time)";
    cases.push_back(std::move(out));
}

// One forward and backward on every rank, checked, with routing `variant`'s expert ids (make_expert_ids). Without
// prior routings the case's ids are already in place and nothing is uploaded.
void checked_step(const LayerCase& c, std::vector<std::unique_ptr<Rank>>& ranks, int variant) {
    if (c.prior_routings > 0) {
        for (int r = 0; r < c.ep; ++r) {
            ranks[r]->upload_ids(make_expert_ids(c, r, variant));
        }
    }
    for (auto& r : ranks) {
        r->forward();
    }
    for (auto& r : ranks) {
        r->backward();
    }
    for (auto& r : ranks) {
        r->check_results();
    }
}

void run_case(const LayerCase& c, double cublas_tflops, const DramCeilings& dram, const TimingOptions& timing,
              std::vector<Case>& cases) {
    std::vector<std::unique_ptr<Rank>> ranks = make_ranks(c);
    std::vector<StreamOnDevice> streams;
    for (const auto& r : ranks) {
        streams.push_back(r->stream());
    }
    Timer timer(streams);
    // Steps with other routings write their rows where the case's plan has padding (every rank takes part in each).
    for (int variant = 1; variant <= c.prior_routings; ++variant) {
        checked_step(c, ranks, variant);
    }
    // Correctness first: one forward and backward of the case's routing, checked, before anything is timed.
    checked_step(c, ranks, 0);
    const double flops = forward_flops(c);
    const PassFloors floors = memory_floors(c, dram);
    // Times `pass` on every rank, its host enqueue time into `enqueue`, then checks the ranks' results.
    const auto time_pass = [&](void (Rank::*pass)(), HostClock& enqueue) {
        const TimingStats stats = timer.time(
            [&](int) {
                const HostClock::Scope scope(enqueue, timer.in_timed_run());
                for (auto& r : ranks) {
                    ((*r).*pass)();
                }
            },
            timing);
        for (auto& r : ranks) {
            r->check_results();
        }
        return stats;
    };
    // An accumulate case's forward is the fresh case's: only its backward is timed.
    const bool times_forward = c.grad_mode == GradMode::kFresh;
    HostClock forward_enqueue;
    const TimingStats forward = times_forward ? time_pass(&Rank::forward, forward_enqueue) : TimingStats{};
    double memory = 0.0;
    for (const auto& r : ranks) {
        memory = std::max(memory, r->memory_in_use_gib());
    }
    // The profiled steps run behind a gate: enqueued from one thread, rank 0's kernels would otherwise start
    // before rank 1's are enqueued and wait for them at the routing exchange, and that wait would count as the
    // plan's stage time.
    HostGate gate(streams);
    gate.hold();
    for (int step = 0; step < kProfiledSteps; ++step) {
        for (auto& r : ranks) {
            r->profiled_step();
        }
    }
    gate.release();
    const std::vector<StageTime> stages = ranks[0]->stage_times();
    for (size_t r = 1; r < ranks.size(); ++r) {
        ranks[r]->stage_times();  // synchronizes and reports the other ranks' failures
    }
    gate.check();
    if (times_forward) {
        add_pass_case(c, "forward", flops, cublas_tflops, floors.forward_ms, forward, forward_enqueue.stats(), memory,
                      stages, cases);
    }
    // Backward reuses the last forward's context: it reads it and leaves it intact.
    HostClock backward_enqueue;
    const TimingStats backward = time_pass(&Rank::backward, backward_enqueue);
    add_pass_case(c, "backward", 2.0 * flops, cublas_tflops, floors.backward_ms, backward, backward_enqueue.stats(),
                  memory, stages, cases);
}

int run(const CommonOptions& options) {
    const LayerFlags flags = parse_flags(options.rest);
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kDefaultWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? kQuickReps : kReps);
    const int visible = visible_gpu_count();
    if (visible == 0) {
        std::fprintf(stderr, "mok-bench-layer: no CUDA device visible\n");
        return 1;
    }
    Result result;
    result.run = collect_run_info("layer", std::min(visible, 2));
    result.config.set("warmup", timing.num_warmup)
        .set("warmup_ms", timing.min_warmup_ms)
        .set("reps", timing.num_reps)
        .set("flush_l2", timing.flush_l2)
        .set("quick", options.quick)
        .set("full", options.full)
        .set("prior_routings", flags.prior_routings)
        .set("environment", environment_json(0));
    const Case ceiling = ceilings::gemm_case({kCeilingGemmSize, kCeilingGemmSize, kCeilingGemmSize}, timing);
    const double cublas_tflops = figure_value(ceiling, "tflops");
    result.cases.push_back(ceiling);
    const Case read_ceiling = ceilings::device_read_case(kDramCeilingBytes, timing);
    const Case write_ceiling = ceilings::device_write_case(kDramCeilingBytes, timing);
    const DramCeilings dram{figure_value(read_ceiling, "bandwidth"), figure_value(write_ceiling, "bandwidth")};
    result.cases.push_back(read_ceiling);
    result.cases.push_back(write_ceiling);
    for (const LayerCase& c : sweep(options, flags, visible)) {
        try {
            run_case(c, cublas_tflops, dram, timing, result.cases);
        } catch (const std::exception& error) {
            Case failed;
            failed.name = c.name("setup");
            failed.status = CaseStatus::kFailed;
            failed.note = error.what();
            result.cases.push_back(std::move(failed));
        }
        std::fflush(stdout);
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::layer

int main(int argc, char** argv) {
    using namespace mok::bench;
    // run() reads --comm-sms, --one-stream and --gemm-cooperative from the flags the common parser leaves.
    return run_benchmark_main(argc, argv, "mok-bench-layer", layer::print_usage, layer::run, OtherFlags::kPass);
}
