// mok's benchmark library (CMake target mok_bench; mok_bench_results is its CUDA-free part).
//
// Every benchmark program is built on it so that every figure is measured and recorded the same way
// (docs/benchmarking.md is the method). The pieces, each in its own header:
//
//   options.hpp    parse_common_options(argc, argv): --out, --quick, --full, --warmup, --warmup-ms, --reps, --help;
//                  the rest of argv is left for the program.
//   timing.hpp     Timer(streams).time(body, {num_warmup, min_warmup_ms, num_reps, flush_l2}) -> TimingStats.
//                  body(iteration) enqueues one run; warm-up runs last a count and a device time; each timed
//                  repetition has its own CUDA event pair; the L2 is flushed before
//                  every run unless the body rotates its inputs (num_rotating_buffers). With several streams
//                  (one per GPU/rank) a repetition's time is the slowest stream's. time_cuda(stream, body) for
//                  a single stream.
//   host_gate.hpp  HostGate(streams): hold() every stream, enqueue a batch, release(), then check(): the
//                  batch runs back to back, so figures recorded inside it (stage events) hold no host time.
//   stats.hpp      TimingStats {samples, median, min, max, p25, p75}; summarize(samples); max_over_ranks(...)
//                  for programs that collect per-rank samples themselves.
//   data.hpp       fill_uniform(ptr, count, lo, hi, seed, stream) for bf16 and fp32 (seeded, never zeros);
//                  count_differences(a, b, bytes, stream) for exact checks before timing.
//   device.hpp     query_device(d) -> DeviceInfo; collect_run_info(benchmark, num_gpus) -> RunInfo (device,
//                  SM count, commit from MOK_COMMIT or configure time, UTC date, run id from MOK_BENCH_RUN_ID);
//                  environment_json(d) for the config block.
//   result.hpp     Result {run, config, cases}; Case {name, params, figures, status, note}; Figure {name, unit,
//                  better, value, spread, reps, baseline -> ratio, ceiling}; time_figure, rate_figure,
//                  value_figure, fraction_figure; write_result(result, out_dir) writes
//                  <out_dir>/<benchmark>-<device>-<n>gpu-<date>-<commit>.json; format_summary for stdout.
//   json.hpp       the JSON value the result is written through.
//   buffers.hpp    DeviceBuffer<T>(device, count) and Stream(device): owning handles, freed on any exit.
//   cuda_check.hpp MOK_BENCH_CHECK_CUDA(call): throws CudaError naming the call.
//
// Same-run ceilings next to a benchmark's own figures (cuBLAS GEMM, device copy, peer copy) come from the
// mok_bench_ceilings target, bench/ceilings/ceilings.hpp.
//
// A program, in short:
//
//   auto options = mok::bench::parse_common_options(argc, argv);
//   mok::bench::Result result;
//   result.run = mok::bench::collect_run_info("gemm", 1);
//   mok::bench::Timer timer({{0, stream}});
//   // ... check the output against a reference first, then:
//   auto stats = timer.time([&](int iteration) { launch(buffers[iteration % n], stream); },
//                           {.num_warmup = 3, .num_reps = 20, .flush_l2 = false});
//   mok::bench::Case c{.name = "deepseek-v3/m4096/gate_up"};
//   c.figures.push_back(mok::bench::time_figure("time", stats).against("torch_grouped_mm", baseline_ms));
//   c.figures.push_back(mok::bench::rate_figure("tflops", "TFLOP/s", flops / 1e12, stats));
//   result.cases.push_back(std::move(c));
//   mok::bench::write_result(result, options.out_dir);
#pragma once

#include "bench/common/buffers.hpp"
#include "bench/common/cuda_check.hpp"
#include "bench/common/data.hpp"
#include "bench/common/device.hpp"
#include "bench/common/host_gate.hpp"
#include "bench/common/json.hpp"
#include "bench/common/options.hpp"
#include "bench/common/result.hpp"
#include "bench/common/stats.hpp"
#include "bench/common/timing.hpp"
