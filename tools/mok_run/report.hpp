// mok-run's report: the shapes, the routing's row counts and imbalance, time per pass and output checksums.
#pragma once

#include <string>

#include "layer_data.hpp"
#include "mok/mok.hpp"
#include "run_options.hpp"

namespace mok::run {

std::string describe_shape(const LayerShape& shape, int ep_size);
void print_models();
void print_routing(const ForwardContext& context, int ep_size);
// Sum of the values and an FNV-1a hash of the bits of y, dx, d_router_weights and the weight gradients, every
// rank in order: equal runs print equal lines.
void print_checksums(const LayerData& data);

}  // namespace mok::run
