// Host-side fan-out for mok-run's passes over full-size tensors (random inputs, output checksums): a full-size
// layer has billions of elements, which one thread takes minutes to go through.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mok::run {

// Calls fn(begin, end) on disjoint ranges covering [0, count), one per thread, each at least `min_per_thread`
// long (the last may be shorter), and returns once all are done. How [0, count) is split depends on the machine's
// thread count, so callers make each element's result a function of its index alone.
template <typename Fn>
void parallel_ranges(int64_t count, int64_t min_per_thread, Fn&& fn) {
    constexpr int64_t kMaxThreads = 64;
    const int64_t num_threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
    const int64_t per_thread = std::max<int64_t>(min_per_thread, (count + num_threads - 1) / num_threads);
    std::vector<std::thread> threads;
    for (int64_t begin = per_thread; begin < count; begin += per_thread) {
        threads.emplace_back(fn, begin, std::min(count, begin + per_thread));
    }
    fn(int64_t{0}, std::min(count, per_thread));
    for (std::thread& t : threads) {
        t.join();
    }
}

}  // namespace mok::run
