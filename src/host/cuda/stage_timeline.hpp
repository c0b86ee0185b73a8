// Where a step's GPU time goes: a CUDA event after each stage of the layer's kernel sequence (docs/layer.md,
// "Kernel sequence"), when Config::record_stage_times asks for it.
//
// A pass (a forward, a recompute, a backward) begins with an event and charges the time up to each mark to the
// stage the mark names; in a stream-ordered pipeline that is the stage's GPU time, gaps between kernels
// included. Events are only recorded; nothing waits for them until totals(), which the caller runs after the
// stream completed (MoeLayer::synchronize) and which folds every completed pass into per-stage sums. Nothing is
// recorded while the stream is being captured into a CUDA graph (an event recorded there would time the
// capture, not a replay).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mok/layer.hpp"

namespace mok::cuda {

class StageTimeline {
  public:
    explicit StageTimeline(bool enabled) : enabled_(enabled) {}
    ~StageTimeline();
    StageTimeline(const StageTimeline&) = delete;
    StageTimeline& operator=(const StageTimeline&) = delete;

    // Starts a pass called `pass` ("forward", ...) on `stream`; its marks' stages are "<pass>/<stage>".
    void begin(const char* pass, cudaStream_t stream);
    // The work enqueued on `stream` since the previous mark (or the pass's beginning) belongs to `stage`.
    void mark(const char* stage, cudaStream_t stream);
    // Marks `stage` when `enqueued` (the status of enqueueing it) is ok, and returns `enqueued`:
    // MOK_RETURN_IF_ERROR(timeline.record("plan", stream, enqueue_plan(...))).
    Status record(const char* stage, cudaStream_t stream, Status enqueued) {
        if (enqueued.is_ok()) {
            mark(stage, stream);
        }
        return enqueued;
    }
    // Whether passes are timed at all (Config::record_stage_times).
    bool enabled() const { return enabled_; }
    // Folds every pass whose events completed into the sums and returns them, in order of first appearance.
    std::vector<StageTime> totals();

  private:
    struct Mark {
        std::string stage;  // empty for the pass's first event
        cudaEvent_t event;
    };

    cudaEvent_t take_event();
    // Adds a completed pass to the sums and returns its events to the pool; false if it has not completed.
    bool fold(std::vector<Mark>& pass);

    bool enabled_;
    bool recording_ = false;  // false during a capture, and between passes
    std::string pass_;
    std::vector<std::vector<Mark>> pending_;
    std::vector<cudaEvent_t> free_events_;
    std::vector<StageTime> sums_;
};

}  // namespace mok::cuda
