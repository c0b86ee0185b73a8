// The GPU layer's memory layouts (CPU): regions aligned and disjoint, the persistent part fixed by the
// TransportStateKey alone, and the DeepSeek-V3 context and workspace sizes that docs/layer.md quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "host/cuda/layer_layout.hpp"
#include "mok/models.hpp"

namespace mok::cuda {
namespace {

LayerOptions model_options(const char* name, int64_t tokens, int ep_size, int num_local_ranks, double capacity_factor) {
    LayerOptions o;
    o.shape = find_model_preset(name)->layer_shape(tokens);
    o.topology = {ep_size, 0, num_local_ranks};
    o.config.schedule_capacity_factor = capacity_factor;
    return o;
}

::testing::AssertionResult aligned_and_disjoint(std::vector<Region> regions, uint64_t end, const std::string& what) {
    std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.offset < b.offset; });
    for (size_t i = 0; i < regions.size(); ++i) {
        if (regions[i].offset % layout::kRegionAlignment != 0) {
            return ::testing::AssertionFailure() << what << ": region at " << regions[i].offset << " is misaligned";
        }
        const uint64_t next = i + 1 < regions.size() ? regions[i + 1].offset : end;
        if (regions[i].end() > next) {
            return ::testing::AssertionFailure() << what << ": region at " << regions[i].offset << " overlaps";
        }
    }
    return ::testing::AssertionSuccess();
}

TEST(LayerLayout, RegionsAreAlignedAndDisjoint) {
    for (const ModelPreset& preset : model_presets()) {
        const LayerDims d = LayerDims::of(model_options(std::string(preset.name).c_str(), 4096, 8, 8, 1.25));
        const ScratchLayout s = ScratchLayout::make(d);
        std::vector<Region> scratch = {
            s.dense_x,       s.dense_dy,       s.grad_rows,       s.out_rows,  s.dgu,
            s.partials,      s.d_row_weight,   s.shared_partials, s.gate_rows, s.gate_segment_rows,
            s.wave_counters, s.ready_sequence, s.out_tile_counts};
        scratch.insert(scratch.end(), s.shared_out.begin(), s.shared_out.end());
        scratch.insert(scratch.end(), s.shared_dgu.begin(), s.shared_dgu.end());
        EXPECT_TRUE(aligned_and_disjoint(scratch, s.bytes, std::string(preset.name) + " scratch"));
        const ContextLayout c = ContextLayout::make(d);
        const auto plan_tables = c.plan_tables.all();
        std::vector<Region> context(plan_tables.begin(), plan_tables.end());
        context.insert(context.end(), {c.row_weight, c.x_rows, c.gu, c.h});
        context.insert(context.end(), c.shared_gu.begin(), c.shared_gu.end());
        context.insert(context.end(), c.shared_h.begin(), c.shared_h.end());
        EXPECT_TRUE(aligned_and_disjoint(context, c.bytes, std::string(preset.name) + " context"));
        const WorkspaceLayout w = WorkspaceLayout::make(d);
        EXPECT_EQ(w.state_offset(0), 8 * w.window.window_bytes);
        EXPECT_EQ(w.scratch_offset(0), w.persistent_bytes);
        EXPECT_EQ(w.total_bytes, w.persistent_bytes + 8 * s.bytes);
    }
}

// Layers that differ in I, the shared experts or Config have the same key and the same persistent layout, so
// they may share a workspace; any other T, H, k, E/R or topology gives another key.
TEST(LayerLayout, PersistentPartDependsOnTheKeyAlone) {
    LayerOptions a = model_options("deepseek-v3", 1024, 4, 4, 0.0);
    LayerOptions b = a;
    b.shape.expert_width = 512;
    b.shape.shared_expert_widths = {};
    b.config.schedule_capacity_factor = 1.5;
    b.config.minibatch_rows = 128;
    const LayerDims da = LayerDims::of(a);
    const LayerDims db = LayerDims::of(b);
    EXPECT_TRUE(TransportStateKey::of(da) == TransportStateKey::of(db));
    const WorkspaceLayout wa = WorkspaceLayout::make(da);
    const WorkspaceLayout wb = WorkspaceLayout::make(db);
    EXPECT_EQ(wa.persistent_bytes, wb.persistent_bytes);
    EXPECT_EQ(wa.state_offset(3), wb.state_offset(3));
    EXPECT_EQ(wa.state.local.ring_ready[1].offset, wb.state.local.ring_ready[1].offset);
    EXPECT_EQ(wa.state.local.status.offset, wb.state.local.status.offset);
    EXPECT_NE(wa.scratch.bytes, wb.scratch.bytes);
    for (auto change :
         {+[](LayerOptions& o) { o.shape.tokens_per_rank = 512; }, +[](LayerOptions& o) { o.shape.hidden = 4096; },
          +[](LayerOptions& o) { o.shape.top_k = 4; }, +[](LayerOptions& o) { o.shape.num_experts = 128; },
          +[](LayerOptions& o) {
              o.topology = {4, 2, 1};
          }}) {
        LayerOptions c = a;
        change(c);
        EXPECT_FALSE(TransportStateKey::of(LayerDims::of(c)) == TransportStateKey::of(da))
            << TransportStateKey::of(LayerDims::of(c)).describe();
    }
}

// The figures of docs/layer.md: DeepSeek-V3 at 4096 tokens per rank, one rank per process at EP 8, capacity
// factor 1.25.
TEST(LayerLayout, DeepSeekV3Sizes) {
    const LayerDims d = LayerDims::of(model_options("deepseek-v3", 4096, 8, 1, 1.25));
    EXPECT_EQ(d.capacity_rows, 45056);
    const ContextLayout c = ContextLayout::make(d);
    const WorkspaceLayout w = WorkspaceLayout::make(d);
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    EXPECT_NEAR(static_cast<double>(c.bytes) / kGiB, 1.166, 0.001);
    EXPECT_NEAR(static_cast<double>(w.total_bytes) / kGiB, 2.302, 0.001);
}

}  // namespace
}  // namespace mok::cuda
