// The CPU reference backend: MoeLayer on the CPU oracle (reference/), every rank simulated in this process.
//
// It runs the reference in its device precision (reference::Precision::kDevice), which rounds where the GPU
// rounds (docs/semantics.md section 5), so its results are the GPU's expected bits on exactly representable
// inputs. Tensors live in host memory; all EP ranks must be local (topology.num_local_ranks == ep_size).
#pragma once

#include "host/api/backend.hpp"

namespace mok::cpu {

const api::BackendProvider& backend();

}  // namespace mok::cpu
