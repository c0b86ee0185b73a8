// Random routings for the plan's property tests: every rank's [T, k] expert ids, with the shapes and skews
// the plan must handle (one rank or eight, T across chunk boundaries, unused slots, hot experts, a hot rank,
// experts that get no rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mok::plan::testing {

enum class Skew : uint8_t {
    kUniform,     // every expert equally likely
    kZipf,        // expert popularity falls off as 1 / rank^s
    kOneExpert,   // one expert in every token
    kOneRank,     // a token's experts all on one owner rank where k allows
    kFewExperts,  // only a handful of experts ever chosen: most get zero rows
};

const char* to_string(Skew skew);

struct RoutingCase {
    uint64_t seed = 0;
    Skew skew = Skew::kUniform;
    int32_t ep_size = 1;          // R
    int32_t num_experts = 1;      // E, a multiple of R
    int32_t top_k = 1;            // k
    int64_t tokens_per_rank = 0;  // T
    double unused_fraction = 0.0;
    int64_t minibatch_rows = 0;             // a multiple of 128
    int64_t ring_rows = 0;                  // a multiple of minibatch_rows
    std::vector<std::vector<int32_t>> ids;  // [R][T * k], -1 for an unused slot

    int32_t num_local_experts() const { return num_experts / ep_size; }
    std::vector<const int32_t*> id_pointers() const;
    // "seed 17: R 4, E 12, k 3, T 130, skew zipf, unused 0.1, minibatch 256, ring 512", for failure messages.
    std::string describe() const;
};

// Sizes drawn from the ranges above, T in [min_tokens, max_tokens] (small bounds keep a suite of thousands
// of cases quick).
RoutingCase random_routing_case(uint64_t seed, int64_t min_tokens, int64_t max_tokens);

// A routing where every token of every rank picks min(k, E/R) experts of rank `hot_rank`: the most rows any
// owner can receive.
RoutingCase all_to_one_rank_case(uint64_t seed, int32_t ep_size, int32_t num_local_experts, int32_t top_k,
                                 int64_t tokens_per_rank, int32_t hot_rank);

}  // namespace mok::plan::testing
