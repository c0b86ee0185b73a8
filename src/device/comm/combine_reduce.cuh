// The source's combine: every token's output from its shared experts and its slots' pushed rows, summed in the
// contract's order (docs/semantics.md, section 6) with correctly rounded fp32 operations, rounded to bf16 once.
//
//   forward:  acc = 0; acc += o_s for each shared expert s in order; acc = fma(w_tj, o_tj, acc) for j = 0..k-1
//             with a used slot; y_t = bf16(acc)
//   backward: acc = 0; acc += dx_s for each shared expert; acc += dx_tj for j = 0..k-1 with a used slot;
//             dx_t = bf16(acc); d_router_weights[t, j] = the pushed gradient, 0 for an unused slot
//
// The arithmetic is src/common/fp32_ops.hpp and src/common/bf16.hpp, the functions the CPU reference uses, so the
// bits match it. One thread owns each (token, 8-element column group): one writer per output element.
// Before reading a slot's row the block waits for its flag (combine_ready >= this pass's sequence; acquire loads at
// system scope, by the thread that polls; the block barrier then extends the order to every thread).
#pragma once

#include <cstdint>

#include "common/bf16.hpp"
#include "common/device_status.hpp"
#include "common/fp32_ops.hpp"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/layout/transport_layout.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// Tokens per combine block: 16 tokens x k slots of flags to poll, 16 x H/8 column groups to sum.
inline constexpr int32_t kCombineTokensPerBlock = 16;
inline constexpr int32_t kCombineThreads = 256;
// Elements per vector access: 8 bf16 = 16 bytes, the row alignment the contract guarantees.
inline constexpr int32_t kCombineVector = 8;

struct CombineParams {
    const char* window;                  // this rank's symmetric window (local address)
    layout::SymmetricLayout layout;      // its offsets
    layout::TransportPass pass;          // kForward (y) or kBackwardGrads (dx and d router weights)
    const int32_t* expert_ids;           // [T, k] this rank's ids
    const float* router_weights;         // [T, k]
    const uint16_t* const* shared_rows;  // [num_shared] device pointers to [T, H] bf16 outputs (or dx rows) of
                                         // the shared experts, in shared-expert order
    int32_t num_shared;
    int64_t shared_row_stride;  // elements between rows of each shared tensor
    uint16_t* out;              // [T, H] bf16: y (forward) or dx (backward)
    int64_t out_row_stride;     // elements
    float* weight_grads_out;    // [T, k] backward: d router weights; unused in the forward
    const layout::TransportControl* control;
    device::WaitContext ctx;
};

struct alignas(16) Bf16x8 {
    uint16_t bits[kCombineVector];
};

// Waits for the pushed rows of tokens [token_begin, token_end); block-wide, every thread must call it.
__device__ __forceinline__ bool wait_combine_rows(const CombineParams& p, uint64_t sequence, int64_t token_begin,
                                                  int64_t token_end) {
    const int32_t k = p.layout.shape.top_k;
    bool ok = true;
    for (int64_t slot = token_begin * k + threadIdx.x; ok && slot < token_end * k; slot += blockDim.x) {
        if (p.expert_ids[slot] != plan::kUnusedSlot) {
            const auto* flag = reinterpret_cast<const uint64_t*>(p.window + p.layout.combine_ready_of(slot));
            ok = wait_flag_sys(p.ctx, WaitSite::kCombineArrivals, flag, sequence);
        }
    }
    return __syncthreads_and(ok) != 0;
}

// Slots whose rows one thread loads before it adds any of them. The adds run in slot order whatever the batch;
// loading a batch first keeps kSlotBatch loads in flight instead of one latency per slot.
inline constexpr int32_t kSlotBatch = 8;

// Sums one token's 8-column group in the contract's order.
__device__ __forceinline__ Bf16x8 combine_group(const CombineParams& p, int64_t token, int64_t column) {
    const int32_t k = p.layout.shape.top_k;
    const bool forward = p.pass == layout::TransportPass::kForward;
    float acc[kCombineVector];
    for (int32_t e = 0; e < kCombineVector; ++e) {
        acc[e] = 0.0f;
    }
    for (int32_t s = 0; s < p.num_shared; ++s) {
        const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p.shared_rows[s] + token * p.shared_row_stride + column);
        for (int32_t e = 0; e < kCombineVector; ++e) {
            acc[e] = fp32::add(acc[e], bf16_bits_to_float(v.bits[e]));
        }
    }
    for (int32_t first = 0; first < k; first += kSlotBatch) {
        Bf16x8 rows[kSlotBatch];
        float weights[kSlotBatch];
        bool used[kSlotBatch];
#pragma unroll
        for (int32_t b = 0; b < kSlotBatch; ++b) {
            const int64_t slot = token * k + first + b;
            used[b] = first + b < k && p.expert_ids[slot] != plan::kUnusedSlot;
            if (used[b]) {
                rows[b] = *reinterpret_cast<const Bf16x8*>(p.window + p.layout.combine_row(slot) +
                                                           column * layout::kRowElementBytes);
                weights[b] = p.router_weights[slot];
            }
        }
#pragma unroll
        for (int32_t b = 0; b < kSlotBatch; ++b) {
            if (!used[b]) {
                continue;
            }
            for (int32_t e = 0; e < kCombineVector; ++e) {
                const float o = bf16_bits_to_float(rows[b].bits[e]);
                acc[e] = forward ? fp32::fma(weights[b], o, acc[e]) : fp32::add(acc[e], o);
            }
        }
    }
    Bf16x8 out;
    for (int32_t e = 0; e < kCombineVector; ++e) {
        out.bits[e] = round_to_bf16_bits(acc[e]);
    }
    return out;
}

// Combines tokens [token_begin, token_end) of this rank; block-wide. False when a wait gave up.
__device__ __forceinline__ bool combine_tokens(const CombineParams& p, int64_t token_begin, int64_t token_end) {
    const uint64_t sequence = layout::pass_sequence(p.control->step, p.pass);
    if (!wait_combine_rows(p, sequence, token_begin, token_end)) {
        return false;
    }
    const int64_t groups = p.layout.shape.hidden / kCombineVector;
    const int64_t items = (token_end - token_begin) * groups;
    for (int64_t item = threadIdx.x; item < items; item += blockDim.x) {
        const int64_t token = token_begin + item / groups;
        const int64_t column = item % groups * kCombineVector;
        *reinterpret_cast<Bf16x8*>(p.out + token * p.out_row_stride + column) = combine_group(p, token, column);
    }
    if (p.pass == layout::TransportPass::kBackwardGrads) {
        const int32_t k = p.layout.shape.top_k;
        for (int64_t slot = token_begin * k + threadIdx.x; slot < token_end * k; slot += blockDim.x) {
            const bool used = p.expert_ids[slot] != plan::kUnusedSlot;
            p.weight_grads_out[slot] =
                used ? *reinterpret_cast<const float*>(p.window + p.layout.weight_grad_of(slot)) : 0.0f;
        }
    }
    return true;
}

}  // namespace mok::comm
