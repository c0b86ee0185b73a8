// One layer through the public API, as both of mok-run's backends create it: its workspace, the layer and one
// forward context.
#pragma once

#include <cstddef>
#include <memory>

#include "mok/mok.hpp"

namespace mok::run {

struct LayerInstance {
    size_t workspace_bytes = 0;
    std::shared_ptr<Workspace> workspace;
    std::unique_ptr<MoeLayer> layer;
    std::unique_ptr<ForwardContext> context;
};

Status create_layer_instance(const LayerOptions& options, LayerInstance* out);

}  // namespace mok::run
