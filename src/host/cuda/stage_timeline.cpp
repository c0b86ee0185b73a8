#include "host/cuda/stage_timeline.hpp"

#include <algorithm>

namespace mok::cuda {
namespace {

bool capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return status != cudaStreamCaptureStatusNone;
}

}  // namespace

StageTimeline::~StageTimeline() {
    for (std::vector<Mark>& pass : pending_) {
        for (Mark& m : pass) {
            cudaEventDestroy(m.event);
        }
    }
    for (cudaEvent_t e : free_events_) {
        cudaEventDestroy(e);
    }
}

cudaEvent_t StageTimeline::take_event() {
    if (!free_events_.empty()) {
        cudaEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    // Default flags: the event keeps its timestamp (no cudaEventDisableTiming).
    if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return e;
}

void StageTimeline::begin(const char* pass, cudaStream_t stream) {
    recording_ = enabled_ && !capturing(stream);
    if (!recording_) {
        return;
    }
    pass_ = pass;
    pending_.emplace_back();
    mark("", stream);
}

void StageTimeline::mark(const char* stage, cudaStream_t stream) {
    if (!recording_) {
        return;
    }
    cudaEvent_t e = take_event();
    if (e == nullptr || cudaEventRecord(e, stream) != cudaSuccess) {
        // Timing is best effort: a pass that cannot be recorded is dropped, never an error of the step.
        cudaGetLastError();
        if (e != nullptr) {
            free_events_.push_back(e);
        }
        recording_ = false;
        return;
    }
    const std::string name = stage[0] == '\0' ? std::string() : pass_ + "/" + stage;
    pending_.back().push_back({name, e});
}

bool StageTimeline::fold(std::vector<Mark>& pass) {
    for (const Mark& m : pass) {
        if (cudaEventQuery(m.event) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
    }
    for (size_t i = 1; i < pass.size(); ++i) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, pass[i - 1].event, pass[i].event) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        auto it =
            std::find_if(sums_.begin(), sums_.end(), [&](const StageTime& t) { return t.stage == pass[i].stage; });
        if (it == sums_.end()) {
            sums_.push_back({pass[i].stage, 0.0, 0});
            it = sums_.end() - 1;
        }
        it->total_ms += ms;
        it->count += 1;
    }
    for (const Mark& m : pass) {
        free_events_.push_back(m.event);
    }
    pass.clear();
    return true;
}

std::vector<StageTime> StageTimeline::totals() {
    std::vector<std::vector<Mark>> still_pending;
    for (std::vector<Mark>& pass : pending_) {
        if (!fold(pass)) {
            still_pending.push_back(std::move(pass));
        }
    }
    pending_ = std::move(still_pending);
    return sums_;
}

}  // namespace mok::cuda
