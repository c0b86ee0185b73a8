// The reference's only parallelism: independent items spread over threads.
//
// Each item runs on exactly one thread and the items share no output, so a result never depends on how many
// threads there are (tests check it by running with different counts).
#pragma once

#include <cstdint>
#include <functional>

namespace mok::reference {

// Threads parallel_for may use: hardware_concurrency() by default; `count` <= 0 restores the default.
void set_max_threads(int count);
int max_threads();

namespace detail {

// Calls fn(i) for every i in [0, num_items), in contiguous blocks, one block per thread.
void parallel_for(int64_t num_items, const std::function<void(int64_t)>& fn);

}  // namespace detail
}  // namespace mok::reference
