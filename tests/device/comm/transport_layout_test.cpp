// The transport's buffer layouts: the documented memory budget, and regions that are disjoint, aligned and inside
// their block for any shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "device/layout/transport_layout.hpp"
#include "plan/routing_plan.hpp"

namespace mok::layout {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TransportShape shape_of(int32_t ep_size, int64_t tokens, int64_t hidden, int32_t top_k) {
    TransportShape s;
    s.ep_size = ep_size;
    s.tokens_per_rank = tokens;
    s.hidden = hidden;
    s.top_k = top_k;
    return s;
}

std::vector<Region> window_regions(const SymmetricLayout& l) {
    return {l.tokens,      l.grads,        l.route_ids,     l.route_weights, l.route_ready,
            l.grads_ready, l.combine_rows, l.combine_ready, l.weight_grads,  l.barrier_inbox};
}

std::vector<Region> local_regions(const LocalLayout& l) {
    const auto plan_tables = l.plan_tables.all();
    std::vector<Region> regions(plan_tables.begin(), plan_tables.end());
    regions.push_back(l.push_parts);
    regions.push_back(l.push_claims);
    regions.push_back(l.combine_targets);
    regions.push_back(l.control);
    regions.push_back(l.status);
    for (int32_t ring = 0; ring < kNumRings; ++ring) {
        regions.push_back(l.ring_rows[ring]);
        regions.push_back(l.ring_ready[ring]);
        regions.push_back(l.ring_free[ring]);
        regions.push_back(l.ring_parts[ring]);
        regions.push_back(l.ring_claims[ring]);
    }
    return regions;
}

::testing::AssertionResult disjoint_aligned_inside(std::vector<Region> regions, uint64_t total) {
    std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.offset < b.offset; });
    for (size_t i = 0; i < regions.size(); ++i) {
        if (regions[i].offset % kRegionAlignment != 0) {
            return ::testing::AssertionFailure() << "region at " << regions[i].offset << " is not aligned";
        }
        if (regions[i].end() > total) {
            return ::testing::AssertionFailure() << "region ending at " << regions[i].end() << " exceeds " << total;
        }
        if (i > 0 && regions[i - 1].end() > regions[i].offset) {
            return ::testing::AssertionFailure()
                   << "regions at " << regions[i - 1].offset << " and " << regions[i].offset << " overlap";
        }
    }
    return ::testing::AssertionSuccess();
}

// DeepSeek-V3 (H 7168, k 8) at 4096 tokens per rank: forward and backward buffers together under 1 GiB, because
// one [T k, H] buffer serves the forward combine rows and the backward dx rows.
TEST(TransportLayout, DeepSeekV3WindowFitsOneGiB) {
    for (const int32_t ep_size : {2, 4, 8, 64}) {
        const SymmetricLayout l = SymmetricLayout::make(shape_of(ep_size, 4096, 7168, 8));
        EXPECT_LT(l.window_bytes, kGiB) << "EP " << ep_size;
        // x, dy and one combine-row buffer are the bulk of it; the rest is the routing ids and weights of every
        // rank (double-buffered), a flag and a weight gradient per slot, and alignment.
        const uint64_t slots = 4096ull * 8;
        const uint64_t rows = 2ull * 4096 * 7168 * 2 + slots * 7168 * 2;
        const uint64_t routing = kRouteBuffers * static_cast<uint64_t>(ep_size) * slots * 8;
        const uint64_t per_slot = slots * (8 + 4);
        const uint64_t slack = 64u << 10;
        EXPECT_GE(l.window_bytes, rows + routing + per_slot);
        EXPECT_LE(l.window_bytes, rows + routing + per_slot + slack) << "EP " << ep_size;
    }
}

TEST(TransportLayout, Qwen35WindowFitsOneGiB) {
    const SymmetricLayout l = SymmetricLayout::make(shape_of(8, 4096, 4096, 10));
    EXPECT_LT(l.window_bytes, kGiB);
}

TEST(TransportLayout, WindowRegionsAreDisjointAlignedAndInside) {
    std::mt19937_64 rng(20261129);
    for (int trial = 0; trial < 500; ++trial) {
        const int32_t ep_size = std::uniform_int_distribution<int32_t>(1, 64)(rng);
        const int64_t tokens = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
        const int64_t hidden = 8 * std::uniform_int_distribution<int64_t>(1, 2048)(rng);
        const int32_t top_k = std::uniform_int_distribution<int32_t>(1, 16)(rng);
        const SymmetricLayout l = SymmetricLayout::make(shape_of(ep_size, tokens, hidden, top_k));
        ASSERT_EQ(l.window_bytes % kWindowGranularity, 0u);
        ASSERT_TRUE(disjoint_aligned_inside(window_regions(l), l.window_bytes))
            << "R " << ep_size << " T " << tokens << " H " << hidden << " k " << top_k;
        // The per-entry offsets stay inside their regions.
        const int64_t last_slot = tokens * top_k - 1;
        ASSERT_LE(l.token_row(tokens - 1) + l.shape.row_bytes(), l.tokens.end());
        ASSERT_LE(l.grad_row(tokens - 1) + l.shape.row_bytes(), l.grads.end());
        ASSERT_LE(l.route_ids_of(kRouteBuffers - 1, ep_size - 1) + (last_slot + 1) * 4, l.route_ids.end());
        ASSERT_LE(l.route_weights_of(kRouteBuffers - 1, ep_size - 1) + (last_slot + 1) * 4, l.route_weights.end());
        ASSERT_LE(l.route_ready_of(kRouteBuffers - 1, ep_size - 1) + 8, l.route_ready.end());
        ASSERT_LE(l.grads_ready_of(ep_size - 1) + 8, l.grads_ready.end());
        ASSERT_LE(l.combine_row(last_slot) + l.shape.row_bytes(), l.combine_rows.end());
        ASSERT_LE(l.combine_ready_of(last_slot) + 8, l.combine_ready.end());
        ASSERT_LE(l.weight_grad_of(last_slot) + 4, l.weight_grads.end());
        ASSERT_LE(l.barrier_inbox_of(ep_size - 1) + 8, l.barrier_inbox.end());
        // Bulk copies need 16-byte aligned rows.
        ASSERT_EQ(l.token_row(tokens - 1) % 16, 0u);
        ASSERT_EQ(l.combine_row(last_slot) % 16, 0u);
    }
}

TEST(TransportLayout, LocalRegionsAreDisjointAlignedAndInside) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 500; ++trial) {
        plan::PlanShape p;
        p.ep_size = std::uniform_int_distribution<int32_t>(1, 8)(rng);
        p.num_experts = p.ep_size * std::uniform_int_distribution<int32_t>(1, 64)(rng);
        p.top_k = std::uniform_int_distribution<int32_t>(1, std::min(p.num_experts, 16))(rng);
        p.tokens_per_rank = std::uniform_int_distribution<int64_t>(1, 4096)(rng);
        p.capacity_rows = plan::kExpertRowAlignment * std::uniform_int_distribution<int64_t>(1, 600)(rng);
        p.minibatch_rows = plan::kExpertRowAlignment;
        p.ring_rows = plan::kExpertRowAlignment * std::uniform_int_distribution<int64_t>(2, 600)(rng);
        const int64_t hidden = 8 * std::uniform_int_distribution<int64_t>(1, 1024)(rng);
        const LocalLayout l = LocalLayout::make(p, hidden);
        ASSERT_TRUE(disjoint_aligned_inside(local_regions(l), l.total_bytes));
        const plan::PlanTableSizes n = plan::table_sizes(p);
        ASSERT_EQ(l.plan_tables.row_source.bytes, n.rows * sizeof(plan::RowSource));
        // A ring longer than the row table is cut to it: the rows past it could never be used.
        const int64_t ring_rows = std::min(p.ring_rows, p.capacity_rows);
        ASSERT_EQ(l.plan.ring_rows, ring_rows);
        ASSERT_EQ(l.ring_rows[0].bytes, static_cast<uint64_t>(ring_rows * hidden * 2));
        ASSERT_EQ(l.ring_ready[1].bytes, n.tiles * sizeof(uint64_t));
        // bind() hands out exactly these offsets.
        char* base = reinterpret_cast<char*>(uintptr_t{1} << 40);
        const LocalBuffers b = LocalBuffers::bind(l, base);
        ASSERT_EQ(reinterpret_cast<char*>(b.plan.row_source), base + l.plan_tables.row_source.offset);
        ASSERT_EQ(reinterpret_cast<char*>(b.plan.status), base + l.plan_tables.status.offset);
        ASSERT_EQ(reinterpret_cast<char*>(b.ring_free[1]), base + l.ring_free[1].offset);
        ASSERT_EQ(reinterpret_cast<char*>(b.ring_claims[1]), base + l.ring_claims[1].offset);
        ASSERT_EQ(reinterpret_cast<char*>(b.push_claims), base + l.push_claims.offset);
        ASSERT_EQ(l.push_claims.bytes, kClaimWordsPerRole * sizeof(uint64_t));
        ASSERT_EQ(reinterpret_cast<char*>(b.status), base + l.status.offset);
        // The combine-target table: every rank's rows, then every rank's flags, R pointers each, inside its region.
        ASSERT_EQ(l.combine_targets.bytes, 2 * static_cast<uint64_t>(p.ep_size) * sizeof(void*));
        ASSERT_EQ(reinterpret_cast<char*>(b.combine_rank_rows), base + l.combine_targets.offset);
        ASSERT_EQ(reinterpret_cast<char*>(b.combine_rank_flags),
                  reinterpret_cast<char*>(b.combine_rank_rows + p.ep_size));
    }
}

// Flags from an earlier pass must always read smaller than any later pass's number, and every pass's number
// must exceed the zero a flag starts at.
TEST(TransportLayout, PassSequencesGrowStrictly) {
    const TransportPass passes[] = {TransportPass::kForward, TransportPass::kBackwardGrads,
                                    TransportPass::kBackwardReplay};
    uint64_t previous = 0;
    for (uint64_t step = 1; step < 1000; ++step) {
        for (const TransportPass pass : passes) {
            const uint64_t sequence = pass_sequence(step, pass);
            ASSERT_GT(sequence, previous) << "step " << step;
            previous = sequence;
        }
    }
}

}  // namespace
}  // namespace mok::layout
