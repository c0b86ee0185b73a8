// Seeds of the tests: fresh every run, reproducible from the failure message.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace mok::testing {

// The run's base seed: MOK_TEST_SEED when set (to replay a failure), otherwise a fresh random one.
inline uint64_t base_seed() {
    static const uint64_t seed = [] {
        if (const char* text = std::getenv("MOK_TEST_SEED")) {
            return static_cast<uint64_t>(std::strtoull(text, nullptr, 0));
        }
        std::random_device device;
        return (static_cast<uint64_t>(device()) << 32) ^ device();
    }();
    return seed;
}

// Case `index` of a run: a distinct seed per case, derived from the base seed with splitmix64's mixing step,
// so that neighbouring indices give unrelated streams.
inline uint64_t case_seed(uint64_t index) {
    uint64_t z = base_seed() + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// For SCOPED_TRACE: how to replay this run.
inline std::string replay_hint() {
    return "base seed " + std::to_string(base_seed()) + " (replay with MOK_TEST_SEED=" + std::to_string(base_seed()) +
           ")";
}

}  // namespace mok::testing
