// The CUDA backend: MoeLayer on the sm_90a kernels, with EP ranks either all on this GPU ("virtual ranks",
// topology.num_local_ranks == ep_size) or one per process (num_local_ranks == 1 < ep_size, through
// options.communicator). docs/layer.md describes the kernel sequence, the memory and the error model.
#pragma once

#include "host/api/backend.hpp"

namespace mok::cuda {

const api::BackendProvider& backend();

}  // namespace mok::cuda
