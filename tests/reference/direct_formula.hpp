// The layer's formulas (docs/semantics.md, section 3) evaluated token by token in fp64, with no routing plan,
// no ranks exchanging rows and no combine buffers: an independent check that the reference's plan-driven
// simulation puts every row where it belongs. It computes the router-weight gradient as <dy, FFN(x)> rather
// than the reference's <W_d^T dy, h>, so that identity is checked too.
#pragma once

#include <vector>

#include "reference/reference.hpp"

namespace mok::testing {

struct DirectResult {
    std::vector<std::vector<double>> y;       // [R][T, H]
    std::vector<reference::RankGrads> grads;  // [R]
};

DirectResult direct_formula(const reference::Problem& problem, const std::vector<std::vector<double>>& dy);

}  // namespace mok::testing
