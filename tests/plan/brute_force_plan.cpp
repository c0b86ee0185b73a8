#include "plan/brute_force_plan.hpp"

#include <algorithm>
#include <tuple>

namespace mok::plan::testing {
namespace {

bool canonical_less(const ExpectedRow& a, const ExpectedRow& b) {
    return std::tie(a.src_rank, a.token, a.slot) < std::tie(b.src_rank, b.token, b.slot);
}

int64_t padded(int64_t rows) {
    return (rows + kBruteForceSegmentPadding - 1) / kBruteForceSegmentPadding * kBruteForceSegmentPadding;
}

}  // namespace

BruteForcePlan brute_force_plan(const RoutingCase& routing) {
    const int32_t num_ranks = routing.ep_size;
    const int32_t num_experts = routing.num_experts;
    const int32_t num_local = routing.num_local_experts();
    const int32_t top_k = routing.top_k;
    const int64_t num_slots = routing.tokens_per_rank * top_k;
    BruteForcePlan p;

    // Every used slot of every rank, filed under its expert, then sorted: the canonical order by definition.
    p.expert_rows.assign(num_experts, {});
    p.rows_from_rank.assign(num_experts, std::vector<int64_t>(num_ranks, 0));
    for (int32_t src = 0; src < num_ranks; ++src) {
        for (int64_t i = 0; i < num_slots; ++i) {
            const int32_t e = routing.ids[src][i];
            if (e >= 0) {
                p.expert_rows[e].push_back({src, i / top_k, static_cast<int32_t>(i % top_k)});
                ++p.rows_from_rank[e][src];
            }
        }
    }
    for (auto& rows : p.expert_rows) {
        std::sort(rows.begin(), rows.end(), canonical_less);
    }

    p.segment_begin.assign(num_experts, 0);
    p.padded_rows.assign(num_ranks, 0);
    p.row_source.assign(num_ranks, {});
    p.tile_local_expert.assign(num_ranks, {});
    p.slot_location.assign(num_ranks, std::vector<ExpectedLocation>(num_slots));
    for (int32_t owner = 0; owner < num_ranks; ++owner) {
        auto& table = p.row_source[owner];
        for (int32_t l = 0; l < num_local; ++l) {
            const int32_t e = owner * num_local + l;
            p.segment_begin[e] = static_cast<int64_t>(table.size());
            for (const ExpectedRow& row : p.expert_rows[e]) {
                p.slot_location[row.src_rank][row.token * top_k + row.slot] = {owner,
                                                                               static_cast<int64_t>(table.size())};
                table.push_back(row);
            }
            table.resize(padded(static_cast<int64_t>(table.size())));
            p.tile_local_expert[owner].resize(table.size() / kBruteForceSegmentPadding, l);
        }
        p.padded_rows[owner] = static_cast<int64_t>(table.size());
    }
    return p;
}

}  // namespace mok::plan::testing
