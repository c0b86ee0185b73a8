#include "layer_instance.hpp"

namespace mok::run {

Status create_layer_instance(const LayerOptions& options, LayerInstance* out) {
    MOK_RETURN_IF_ERROR(MoeLayer::workspace_bytes(options, &out->workspace_bytes));
    MOK_RETURN_IF_ERROR(Workspace::create(options.backend, options.device, out->workspace_bytes, &out->workspace));
    MOK_RETURN_IF_ERROR(MoeLayer::create(options, out->workspace, &out->layer));
    return out->layer->create_context(&out->context);
}

}  // namespace mok::run
