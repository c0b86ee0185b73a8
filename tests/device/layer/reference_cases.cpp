#include "layer/reference_cases.hpp"

#include <functional>

#include <gtest/gtest.h>

#include "api/api_problem.hpp"
#include "common/test_seed.hpp"
#include "layer/device_problem.hpp"
#include "layer/exact_problem.hpp"
#include "layer/layer_runs.hpp"

namespace mok::testing {

void expect_matches_cpu(const ReferenceCase& param) {
    const uint64_t seed = case_seed(std::hash<std::string>{}(param.name));
    const RandomCase c =
        param.exact ? exact_case(param.options, param.ep_size, seed) : random_case(param.options, param.ep_size, seed);
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    const Oracle oracle = param.exact ? Oracle{} : run_oracle(c);

    ApiProblem gpu(c.problem, c.dy);
    DeviceProblem device(gpu, kDevice, param.activation_padding);
    LayerUnderTest l;
    const Status made = make_layer(device.options(), &l);
    ASSERT_TRUE(made.is_ok()) << made.to_string();
    TestStream stream;

    for (const GradMode mode : param.modes) {
        SCOPED_TRACE(mode == GradMode::kFresh ? "GradMode::kFresh" : "GradMode::kAccumulate");
        const uint64_t output_seed = seed + 2 + static_cast<uint64_t>(mode);
        // main_grad matters only to an accumulating step: a fresh one neither reads nor compares it, and at the
        // model presets' sizes filling and copying it takes most of a minute.
        const bool accumulate = mode == GradMode::kAccumulate;
        ApiProblem cpu(c.problem, c.dy);
        cpu.prepare_outputs(output_seed, accumulate);
        gpu.prepare_outputs(output_seed, accumulate);
        const std::vector<Named> before = accumulate ? main_grads_of(cpu) : std::vector<Named>{};
        const Status cpu_status = run_cpu_backend(cpu, mode);
        ASSERT_TRUE(cpu_status.is_ok()) << cpu_status.to_string();

        device.upload_outputs(gpu);
        const Status status = run_step(l, device, mode, stream.get());
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        device.download_outputs(gpu);

        const std::vector<Named> got = outputs_of(gpu, mode);
        const std::vector<Named> want = outputs_of(cpu, mode);
        if (param.exact) {
            EXPECT_TRUE(same_outputs(got, want));
        } else {
            EXPECT_TRUE(outputs_within_tolerance(got, want, oracle_outputs(oracle, mode, before)));
        }
    }
}

}  // namespace mok::testing
