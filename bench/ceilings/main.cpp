// mok-bench-ceilings: the hardware ceilings of this machine, measured the way every other figure is
// (docs/benchmarking.md), written as JSON. Every roofline fraction mok reports divides by a ceiling from the
// same run.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"

namespace mok::bench::ceilings {
namespace {

// The dense GEMM ceiling the brief quotes, then the two GEMMs of a DeepSeek-V3 expert at 4096 rows
// (gate and up together: N = 2I = 4096, K = H = 7168; down: N = H = 7168, K = I = 2048).
const std::vector<GemmShape> kGemmShapes = {{8192, 8192, 8192}, {4096, 4096, 7168}, {4096, 7168, 2048}};
// 1 GiB: seventeen times the H200's L2, so the copy streams from and to HBM.
constexpr size_t kDeviceCopyBytes = size_t{1} << 30;
// 512 MiB: the size at which the NCCL all-to-all reference figure (docs/benchmarking.md) was taken.
constexpr size_t kPeerCopyBytes = size_t{512} << 20;
// GPUs 0 and 1: the pair every two-GPU figure runs on.
constexpr int kPeerPairSize = 2;
// These cases take about a millisecond each, so many repetitions cost nothing; --quick keeps a few.
constexpr int kWarmup = 5;
constexpr int kReps = 30;
constexpr int kQuickReps = 10;

struct NamedCase {
    std::string name;
    std::function<Case()> run;
};

std::vector<NamedCase> plan_cases(const CommonOptions& options, const TimingOptions& timing, int num_gpus) {
    std::vector<NamedCase> cases;
    const size_t num_shapes = options.quick ? 1 : kGemmShapes.size();
    for (size_t i = 0; i < num_shapes; ++i) {
        const GemmShape shape = kGemmShapes[i];
        cases.push_back({"gemm_bf16", [=] { return gemm_case(shape, timing); }});
    }
    cases.push_back({"device_copy", [=] { return device_copy_case(kDeviceCopyBytes, timing); }});
    cases.push_back({"device_read", [=] { return device_read_case(kDeviceCopyBytes, timing); }});
    cases.push_back({"device_write", [=] { return device_write_case(kDeviceCopyBytes, timing); }});
    if (num_gpus >= kPeerPairSize) {
        cases.push_back({"peer_copy/0to1", [=] { return peer_copy_case(0, 1, kPeerCopyBytes, timing); }});
        cases.push_back({"peer_copy/1to0", [=] { return peer_copy_case(1, 0, kPeerCopyBytes, timing); }});
        cases.push_back({"peer_copy/both", [=] { return peer_copy_both_case(kPeerCopyBytes, timing); }});
    }
    return cases;
}

Case skipped_peer_case(int num_gpus) {
    Case skipped;
    skipped.name = "peer_copy";
    skipped.status = CaseStatus::kSkipped;
    skipped.note = "needs 2 GPUs, " + std::to_string(num_gpus) + " visible";
    return skipped;
}

void print_usage() {
    std::printf(
        "usage: mok-bench-ceilings [flags]\n"
        "Measures the dense bf16 GEMM rate (cuBLAS), the device copy, read-only and write-only bandwidths and,\n"
        "with two GPUs, the peer copy bandwidth between GPUs 0 and 1 (each way and both at once). Writes one JSON\n"
        "result.\n%s",
        common_options_help().c_str());
}

int run(const CommonOptions& options) {
    const int visible = visible_gpu_count();
    if (visible == 0) {
        std::fprintf(stderr, "mok-bench-ceilings: no CUDA device visible\n");
        return 1;
    }
    const int num_gpus = std::min(visible, kPeerPairSize);
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kDefaultWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? kQuickReps : kReps);

    Result result;
    result.run = collect_run_info("ceilings", num_gpus);
    result.config.set("warmup", timing.num_warmup)
        .set("warmup_ms", timing.min_warmup_ms)
        .set("reps", timing.num_reps)
        .set("flush_l2", timing.flush_l2)
        .set("quick", options.quick)
        .set("environment", environment_json(0));

    for (const NamedCase& named : plan_cases(options, timing, num_gpus)) {
        try {
            result.cases.push_back(named.run());
        } catch (const std::exception& error) {
            Case failed;
            failed.name = named.name;
            failed.status = CaseStatus::kFailed;
            failed.note = error.what();
            result.cases.push_back(std::move(failed));
        }
    }
    if (num_gpus < kPeerPairSize) {
        result.cases.push_back(skipped_peer_case(num_gpus));
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::ceilings

int main(int argc, char** argv) {
    using namespace mok::bench;
    return run_benchmark_main(argc, argv, "mok-bench-ceilings", ceilings::print_usage, ceilings::run);
}
