// Runs the reference on a GlobalBatch at one EP degree and gathers the results back to global order, so that
// runs at different degrees (or configs, or precisions) can be compared element by element.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace mok::testing {

struct GlobalResult {
    std::vector<double> y;                                       // [N, H]
    std::vector<double> dx;                                      // [N, H]
    std::vector<double> d_router_weights;                        // [N, k]
    reference::ExpertParams d_experts;                           // [E, I, H], [E, H, I]
    std::vector<std::vector<reference::ExpertParams>> d_shared;  // [R][shared]: each rank's share
};

// Forward and backward of `batch` cut into `ep_size` ranks, from the global output gradient dy [N, H].
// Empty (with `error` set) when the reference fails.
std::optional<GlobalResult> run_global(const reference::GlobalBatch& batch, const std::vector<double>& dy, int ep_size,
                                       reference::Precision precision, const Config& config, std::string* error);

}  // namespace mok::testing
