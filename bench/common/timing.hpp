// Timing device work with CUDA events.
//
// Method (docs/benchmarking.md): untimed warm-up runs, then timed repetitions, each bracketed by its own pair of
// events; the L2 cache is flushed before every run (outside the events) unless the caller rotates its inputs
// instead. With several streams -- one per GPU or rank driven from this process -- each repetition's time is
// the slowest stream's, so a multi-GPU figure is the maximum over ranks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "bench/common/stats.hpp"

namespace mok::bench {

// Enough warm-up runs to load modules and fill allocator caches, and enough device time to bring a GPU that was idle
// under its power cap (docs/benchmarking.md, "Warm-up to the steady clock": the cap holds the clock from the first
// tenth of a second of a load, and dips it once some 0.8 s in; benchmarks whose repetitions last long enough to meet
// that dip, the layer's, warm up for two seconds); enough repetitions for a stable median with quartiles. Benchmarks
// with long cases lower them (and say so in their JSON config).
inline constexpr int kDefaultWarmup = 3;
inline constexpr double kDefaultWarmupMs = 300.0;
inline constexpr int kDefaultReps = 20;

struct TimingOptions {
    int num_warmup = kDefaultWarmup;          // at least this many untimed runs
    double min_warmup_ms = kDefaultWarmupMs;  // and at least this much device time in them (0: the count alone)
    int num_reps = kDefaultReps;
    bool flush_l2 = true;  // false when the body rotates its inputs over buffers (num_rotating_buffers)
};

struct StreamOnDevice {
    int device = 0;
    cudaStream_t stream = nullptr;
};

// Evicts a device's L2 by writing a buffer twice the L2's size, so a timed run starts with a cold cache.
class L2Flusher {
  public:
    explicit L2Flusher(int device);
    ~L2Flusher();
    L2Flusher(const L2Flusher&) = delete;
    L2Flusher& operator=(const L2Flusher&) = delete;

    // Enqueues the flush on `stream`, which must belong to this flusher's device.
    void flush(cudaStream_t stream);

  private:
    void* buffer_ = nullptr;
    size_t bytes_ = 0;
    int pattern_ = 0;
};

// A start and a stop event on each of a Timer's streams.
struct EventPairs;

class Timer {
  public:
    // Allocates one L2 flush buffer per stream; make one Timer and reuse it across cases.
    explicit Timer(std::vector<StreamOnDevice> streams);
    ~Timer();
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

    // Runs body(iteration) for iteration = 0, 1, ...: warm-up runs until there have been num_warmup of them and
    // they have taken min_warmup_ms of device time on the slowest stream (measured between rounds of runs, with a
    // host sync), then num_reps runs timed on every stream. The body enqueues its work on the streams (it may block
    // the host too, as host-synchronised baselines do); in_timed_run() tells it which kind of run it is in.
    // Returns the summary of the per-repetition maximum over the streams, with the warm-up's runs and time. The
    // current device is restored afterwards.
    TimingStats time(const std::function<void(int iteration)>& body, const TimingOptions& options = {});

    // True while time() runs the body for a timed repetition.
    bool in_timed_run() const { return in_timed_run_; }

    // The last time() call's samples, per stream (rank), in milliseconds.
    const std::vector<std::vector<double>>& per_stream_samples_ms() const { return per_stream_samples_ms_; }

  private:
    std::vector<StreamOnDevice> streams_;
    std::vector<std::unique_ptr<L2Flusher>> flushers_;
    std::vector<std::vector<double>> per_stream_samples_ms_;
    bool in_timed_run_ = false;

    // One run: the L2 flush where asked, then the body, bracketed by `events` (one pair per stream) if given.
    void run_once(const std::function<void(int)>& body, int iteration, bool flush_l2, const EventPairs* events);
    // Warm-up runs from iteration 0 until both of the options' minimums are met; returns their count and time.
    std::pair<int, double> warm_up(const std::function<void(int)>& body, const TimingOptions& options);
};

// One stream on the current device; a Timer made and dropped for this one measurement.
TimingStats time_cuda(cudaStream_t stream, const std::function<void(int iteration)>& body,
                      const TimingOptions& options = {});

// How many copies of a working set of `working_set_bytes` to cycle through (iteration % count) so that the
// whole cycle covers twice the L2's size: between two uses of a copy, everything else in the cycle has evicted
// it. The alternative to flushing, for bodies too short to hide a flush's cost.
int num_rotating_buffers(size_t working_set_bytes, size_t l2_bytes);

}  // namespace mok::bench
