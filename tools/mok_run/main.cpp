// mok-run: the main job. One MoE layer's forward and backward through the public API, with a report of the
// routing, the time per pass and checksums of the outputs.
//
//   mok-run --model deepseek-v3 --tokens 4096 --ep 8
//
// The CPU reference runs a reduced H, I and T by default (E, k and R are kept, and so is the routing's
// structure); --full-size runs the requested shape. The CUDA backend (--backend cuda) always runs the requested
// shape, every EP rank on GPU 0, and times each pass over several steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "layer_data.hpp"
#include "layer_instance.hpp"
#include "mok/mok.hpp"
#if MOK_RUN_WITH_CUDA
#include "gpu_run.hpp"
#endif
#include "report.hpp"
#include "run_options.hpp"

namespace mok::run {
namespace {

// The CPU reference is a naive loop nest in fp64: these bounds keep a full model's E, k and R within seconds.
constexpr int64_t kReducedTokens = 128;
constexpr int64_t kReducedHidden = 128;
constexpr int64_t kReducedWidth = 64;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

LayerShape reduced_shape(const LayerShape& requested) {
    LayerShape shape = requested;
    shape.tokens_per_rank = std::min(requested.tokens_per_rank, kReducedTokens);
    shape.hidden = std::min(requested.hidden, kReducedHidden);
    shape.expert_width = std::min(requested.expert_width, kReducedWidth);
    for (int64_t& width : shape.shared_expert_widths) {
        width = std::min(width, kReducedWidth);
    }
    return shape;
}

bool equal_shapes(const LayerShape& a, const LayerShape& b) {
    return a.tokens_per_rank == b.tokens_per_rank && a.hidden == b.hidden && a.expert_width == b.expert_width &&
           a.num_experts == b.num_experts && a.top_k == b.top_k && a.shared_expert_widths == b.shared_expert_widths;
}

template <typename Fn>
Status timed(const char* pass, Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    MOK_RETURN_IF_ERROR(fn());
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    std::printf("  %-9s %10.3f ms\n", pass, elapsed.count());
    return Status::ok();
}

Status run(const RunOptions& options, const LayerShape& shape) {
    LayerOptions layer_options;
    layer_options.shape = shape;
    layer_options.topology = {options.ep_size, 0, options.ep_size};
    layer_options.backend = options.backend;
    const bool gpu = options.backend == Backend::kCuda;
    layer_options.device = gpu ? Device::cuda(0) : Device::cpu();
    layer_options.config.schedule_capacity_factor =
        options.capacity_factor >= 0.0 ? options.capacity_factor : (gpu ? kDefaultCudaCapacityFactor : 0.0);
    MOK_RETURN_IF_ERROR(MoeLayer::validate(layer_options));
    if (gpu) {
#if MOK_RUN_WITH_CUDA
        const auto start = std::chrono::steady_clock::now();
        LayerData data(shape, options.ep_size, options);
        const std::chrono::duration<double> generated = std::chrono::steady_clock::now() - start;
        std::printf("  inputs     generated on the host in %.1f s\n", generated.count());
        MOK_RETURN_IF_ERROR(run_on_gpu(layer_options, options.iterations, data));
        print_checksums(data);
        return Status::ok();
#else
        return {StatusCode::kNotSupported, "Backend::kCuda: this mok-run was built without CUDA"};
#endif
    }

    LayerInstance instance;
    MOK_RETURN_IF_ERROR(create_layer_instance(layer_options, &instance));
    MoeLayer* layer = instance.layer.get();
    ForwardContext* context = instance.context.get();

    LayerData data(shape, options.ep_size, options);
    const std::vector<ForwardArgs> forward_args = data.forward_args();
    const std::vector<RankInputs> inputs = data.inputs();
    const std::vector<BackwardArgs> backward_args = data.backward_args();
    std::printf("time per pass:\n");
    MOK_RETURN_IF_ERROR(timed("forward", [&] { return layer->forward(forward_args, context); }));
    MOK_RETURN_IF_ERROR(timed("backward", [&] { return layer->backward(inputs, backward_args, *context); }));
    print_routing(*context, options.ep_size);
    print_checksums(data);
    return Status::ok();
}

int run_main(int argc, char** argv) {
    // Line-buffered even into a pipe or a log file: a full-size layer on the GPU takes tens of seconds to set up,
    // and each phase's line should be there as the phase ends, also when the run is stopped early.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    RunOptions options;
    if (const Status status = parse_run_options(argc, argv, &options); !status) {
        std::fprintf(stderr, "mok-run: %s\n\n%s", status.to_string().c_str(), usage().c_str());
        return kExitUsage;
    }
    if (options.help) {
        std::printf("%s", usage().c_str());
        return 0;
    }
    if (options.list_models) {
        print_models();
        return 0;
    }
    const bool reduce = options.backend == Backend::kCpuReference && !options.full_size;
    const LayerShape shape = reduce ? reduced_shape(options.requested) : options.requested;
    const bool reduced = !equal_shapes(shape, options.requested);
    std::printf("mok-run: %s layer on the %s backend\n", options.model_name.c_str(),
                options.backend == Backend::kCuda ? "CUDA" : "CPU reference");
    std::printf("  requested  %s\n", describe_shape(options.requested, options.ep_size).c_str());
    std::printf("  run        %s%s\n", describe_shape(shape, options.ep_size).c_str(),
                reduced
                    ? "\n             (H, I and T reduced for the CPU reference; --full-size runs the requested shape)"
                    : "");
    std::printf("  routing    %s, seed %llu\n", describe_routing(options).c_str(),
                static_cast<unsigned long long>(options.seed));
    if (options.capacity_factor >= 0.0 || options.backend == Backend::kCuda) {
        std::printf("  capacity   schedule_capacity_factor %g\n",
                    options.capacity_factor >= 0.0 ? options.capacity_factor : kDefaultCudaCapacityFactor);
    }
    if (const Status status = run(options, shape); !status) {
        std::fflush(stdout);
        std::fprintf(stderr, "mok-run: %s\n", status.to_string().c_str());
        return kExitError;
    }
    return 0;
}

}  // namespace
}  // namespace mok::run

int main(int argc, char** argv) {
    return mok::run::run_main(argc, argv);
}
