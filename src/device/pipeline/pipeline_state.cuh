// Position in a ring of pipeline stages: the stage index and the phase parity of its barriers.
#pragma once

#include <cstdint>

namespace mok::pipeline {

template <int kStages>
struct PipelineState {
    uint32_t index = 0;  // stage in [0, kStages)
    uint32_t phase = 0;  // parity of the barrier phase this pass round the ring waits for

    // Moves to the next stage; wrapping round the ring flips the phase.
    __device__ __forceinline__ void advance() {
        if (++index == kStages) {
            index = 0;
            phase ^= 1;
        }
    }

    // Moves `n` stages on: over K blocks that another warpgroup consumes (the ping-pong arrangement).
    __device__ __forceinline__ void advance_by(uint32_t n) {
        const uint32_t total = index + n;
        index = total % kStages;
        phase ^= (total / kStages) & 1u;
    }
};

}  // namespace mok::pipeline
