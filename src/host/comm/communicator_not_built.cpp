// Communicator's factories in a build without the CUDA backend: there is nothing to communicate for.
#include "mok/comm.hpp"

namespace mok {
namespace {

Status not_built() {
    return {StatusCode::kNotSupported, "mok::Communicator: the CUDA backend (and NCCL) is not built in"};
}

}  // namespace

Status Communicator::make_unique_id(CommUniqueId* /*out*/) {
    return not_built();
}

Status Communicator::create(const CommUniqueId& /*id*/, int /*rank*/, int /*num_ranks*/, int /*device*/,
                            std::shared_ptr<Communicator>* /*out*/) {
    return not_built();
}

Status Communicator::borrow(void* /*nccl_comm*/, int /*device*/, std::shared_ptr<Communicator>* /*out*/) {
    return not_built();
}

}  // namespace mok
