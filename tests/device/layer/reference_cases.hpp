// Comparing the CUDA backend with the CPU backend (reference::Precision::kDevice) on one problem: within the
// tolerance model on random inputs, bit for bit on inputs whose every GEMM sum is exact (exact_problem.hpp).
// Outputs are poisoned (and main_grad filled at random) before each run, identically on both sides, so anything
// the layer fails to write fails the comparison.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/random_problem.hpp"
#include "mok/mok.hpp"

namespace mok::testing {

struct ReferenceCase {
    std::string name;
    ProblemOptions options;
    int ep_size = 1;
    int64_t activation_padding = 0;  // extra elements per row of x, y, dy and dx on the device
    bool exact = false;              // values of exact_problem.hpp, compared bit for bit
    std::vector<GradMode> modes = {GradMode::kFresh, GradMode::kAccumulate};
};

inline void PrintTo(const ReferenceCase& c, std::ostream* os) {
    *os << c.name;
}

// A fresh problem of the case (seeded from the run's base seed and the case's name) on a fresh GPU layer, in
// each of the case's gradient modes, against the CPU backend; gtest failures name the output that differs.
void expect_matches_cpu(const ReferenceCase& c);

}  // namespace mok::testing
