#include "reference/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace mok::reference {
namespace {

// Fewer items than this per thread cost more in thread start-up than they save: an item is one row of an
// expert FFN or one row of a weight gradient, a few microseconds of work at test sizes.
constexpr int64_t kMinItemsPerThread = 16;

std::atomic<int> g_max_threads{0};

int default_threads() {
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware > 0 ? static_cast<int>(hardware) : 1;
}

}  // namespace

void set_max_threads(int count) {
    g_max_threads.store(count > 0 ? count : 0, std::memory_order_relaxed);
}

int max_threads() {
    const int set = g_max_threads.load(std::memory_order_relaxed);
    return set > 0 ? set : default_threads();
}

namespace detail {

void parallel_for(int64_t num_items, const std::function<void(int64_t)>& fn) {
    const int64_t by_work = num_items / kMinItemsPerThread;
    const int64_t num_threads = std::max<int64_t>(1, std::min<int64_t>(max_threads(), by_work));
    const auto run_block = [&](int64_t block) {
        const int64_t begin = num_items * block / num_threads;
        const int64_t end = num_items * (block + 1) / num_threads;
        for (int64_t i = begin; i < end; ++i) {
            fn(i);
        }
    };
    if (num_threads == 1) {
        run_block(0);
        return;
    }
    std::vector<std::thread> workers;
    workers.reserve(num_threads - 1);
    for (int64_t block = 1; block < num_threads; ++block) {
        workers.emplace_back(run_block, block);
    }
    run_block(0);
    for (std::thread& worker : workers) {
        worker.join();
    }
}

}  // namespace detail
}  // namespace mok::reference
