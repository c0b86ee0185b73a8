// mok-run's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mok/mok.hpp"

namespace mok::run {

enum class RoutingKind : uint8_t {
    kUniform,    // k distinct experts uniformly at random
    kZipf,       // expert popularity 1 / (p + 1)^s over a random order p of the experts
    kOneExpert,  // every token names expert 0 in one of its slots
    kOneRank,    // every token takes min(k, E/R) of its experts from rank 0
};

struct RunOptions {
    std::string model_name;  // display name of the preset, or "custom"
    LayerShape requested;    // the shape asked for
    int ep_size = 1;
    RoutingKind routing = RoutingKind::kUniform;
    double zipf_exponent = 0.0;
    uint64_t seed = 1;
    Backend backend = Backend::kCpuReference;
    bool full_size = false;  // the CPU reference runs a reduced shape unless this is set
    // Config::schedule_capacity_factor; unset: 0 (the worst case) on the CPU, kDefaultCudaCapacityFactor on the
    // GPU, where worst-case buffers of a full model do not fit (a routing that needs more fails with
    // kScheduleOverflow and says so).
    double capacity_factor = -1.0;
    int iterations = 5;  // timed steps after one warm-up step (the CUDA backend)
    bool help = false;
    bool list_models = false;
};

inline constexpr double kDefaultCudaCapacityFactor = 2.0;

// Parses argv; a bad flag or value is a kInvalidArgument Status naming it.
Status parse_run_options(int argc, char** argv, RunOptions* out);

std::string usage();
std::string describe_routing(const RunOptions& options);

}  // namespace mok::run
