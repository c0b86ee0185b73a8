// Typed device pointers into the regions of layer_layout.hpp, one struct per kind of memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "common/device_status.hpp"
#include "device/layout/transport_layout.hpp"
#include "host/cuda/layer_layout.hpp"
#include "plan/routing_plan.hpp"

namespace mok::cuda {

template <typename T>
T* at(void* base, const Region& region) {
    return reinterpret_cast<T*>(static_cast<char*>(base) + region.offset);
}

struct ScratchBuffers {
    __nv_bfloat16* dense_x;
    __nv_bfloat16* dense_dy;
    __nv_bfloat16* grad_rows;
    __nv_bfloat16* out_rows;
    __nv_bfloat16* dgu;
    float* partials;
    float* d_row_weight;
    std::vector<__nv_bfloat16*> shared_out;
    std::vector<__nv_bfloat16*> shared_dgu;
    float* shared_partials;
    int32_t* gate_rows;
    int32_t* gate_segment_rows;
    uint32_t* wave_counters;
    uint64_t* ready_sequence;
    uint32_t* out_tile_counts;

    static ScratchBuffers bind(const ScratchLayout& l, void* base) {
        ScratchBuffers b;
        b.dense_x = at<__nv_bfloat16>(base, l.dense_x);
        b.dense_dy = at<__nv_bfloat16>(base, l.dense_dy);
        b.grad_rows = at<__nv_bfloat16>(base, l.grad_rows);
        b.out_rows = at<__nv_bfloat16>(base, l.out_rows);
        b.dgu = at<__nv_bfloat16>(base, l.dgu);
        b.partials = at<float>(base, l.partials);
        b.d_row_weight = at<float>(base, l.d_row_weight);
        for (const Region& region : l.shared_out) {
            b.shared_out.push_back(at<__nv_bfloat16>(base, region));
        }
        for (const Region& region : l.shared_dgu) {
            b.shared_dgu.push_back(at<__nv_bfloat16>(base, region));
        }
        b.shared_partials = at<float>(base, l.shared_partials);
        b.gate_rows = at<int32_t>(base, l.gate_rows);
        b.gate_segment_rows = at<int32_t>(base, l.gate_segment_rows);
        b.wave_counters = at<uint32_t>(base, l.wave_counters);
        b.ready_sequence = at<uint64_t>(base, l.ready_sequence);
        b.out_tile_counts = at<uint32_t>(base, l.out_tile_counts);
        return b;
    }
};

struct ContextBuffers {
    plan::PlanTables plan;
    float* row_weight;
    __nv_bfloat16* x_rows;
    __nv_bfloat16* gu;
    __nv_bfloat16* h;
    std::vector<__nv_bfloat16*> shared_gu;
    std::vector<__nv_bfloat16*> shared_h;

    static ContextBuffers bind(const ContextLayout& l, void* base) {
        ContextBuffers b;
        b.plan = l.plan_tables.bind(base);
        b.row_weight = at<float>(base, l.row_weight);
        b.x_rows = at<__nv_bfloat16>(base, l.x_rows);
        b.gu = at<__nv_bfloat16>(base, l.gu);
        b.h = at<__nv_bfloat16>(base, l.h);
        for (size_t s = 0; s < l.shared_gu.size(); ++s) {
            b.shared_gu.push_back(at<__nv_bfloat16>(base, l.shared_gu[s]));
            b.shared_h.push_back(at<__nv_bfloat16>(base, l.shared_h[s]));
        }
        return b;
    }
};

}  // namespace mok::cuda
