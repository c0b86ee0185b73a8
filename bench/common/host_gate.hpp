// HostGate: holds streams until the host has enqueued a batch of work, so that the GPU's timings of that batch
// are the GPU's alone.
//
// Without it, a batch enqueued on an idle GPU starts as soon as its first kernel is launched and then runs at
// the host's enqueue pace wherever the host is slower than the GPU; worse, with several ranks enqueued from one
// thread, a rank that waits on another (the layer's routing exchange) waits for the host to reach that rank's
// launches. Figures recorded inside such a batch (the layer's per-stage event times) then hold host time. The
// gate is a one-thread kernel per stream that polls a flag in pinned host memory (as nvbench's blocking kernel):
//
//   HostGate gate({{0, stream0}, {1, stream1}});
//   gate.hold();                      // every stream waits from here
//   ... enqueue the batch on each stream ...
//   gate.release();                   // the batch runs back to back
//   ... synchronize, then gate.check() throws if a hold ran out before release()
//
// A hold never hangs: after kHoldTimeoutNs it lets its stream go and records that it did, and check() turns that
// into an error (the batch's figures would then include host time). The batch must fit the launch queue, or
// the host blocks on a full queue until the hold runs out; the layer's few profiled steps (a few hundred
// launches per stream) are far below it.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/common/timing.hpp"

namespace mok::bench {

class HostGate {
  public:
    // Long enough for any batch a benchmark enqueues, short enough that a mistake ends the program promptly.
    static constexpr uint64_t kHoldTimeoutNs = 10'000'000'000ull;

    explicit HostGate(std::vector<StreamOnDevice> streams);
    ~HostGate();
    HostGate(const HostGate&) = delete;
    HostGate& operator=(const HostGate&) = delete;

    // Enqueues the hold on every stream. Call release() before synchronizing any of them.
    void hold();
    // Lets every held stream go.
    void release();
    // After the streams have been synchronized: throws if a hold ran out before release().
    void check() const;

  private:
    std::vector<StreamOnDevice> streams_;
    // Pinned, mapped host words: [0] the release flag (written by the host), [1] the number of holds that ran out
    // (written by the device).
    volatile uint32_t* words_ = nullptr;
    uint32_t generation_ = 0;
};

}  // namespace mok::bench
