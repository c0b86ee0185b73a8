#include "bench/common/timing.hpp"

#include <algorithm>
#include <stdexcept>

#include "bench/common/cuda_check.hpp"

namespace mok::bench {
namespace {

// Writing twice the L2's size leaves none of the previous contents resident whatever the replacement policy
// keeps; rotation sizes its buffer sets by the same factor.
constexpr size_t kL2CoverFactor = 2;
// Alternating the fill byte makes every flush write changed data (a memset of identical bytes could, in
// principle, be elided by a compressing cache).
constexpr int kFlushPatterns = 2;

class CurrentDevice {
  public:
    CurrentDevice() { MOK_BENCH_CHECK_CUDA(cudaGetDevice(&saved_)); }
    ~CurrentDevice() { cudaSetDevice(saved_); }
    CurrentDevice(const CurrentDevice&) = delete;
    CurrentDevice& operator=(const CurrentDevice&) = delete;

  private:
    int saved_ = 0;
};

// A warm-up whose runs keep getting shorter could ask for round after round; a few rounds reach any duration
// (each round aims at the rest of it from the runs' mean length so far).
constexpr int kMaxWarmupRounds = 8;

void synchronize(const std::vector<StreamOnDevice>& streams) {
    for (const StreamOnDevice& s : streams) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(s.device));
        MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(s.stream));
    }
}

// Sets a flag for its lifetime, so that it is cleared even when the body throws.
class TimedRunFlag {
  public:
    explicit TimedRunFlag(bool& flag) : flag_(flag) { flag_ = true; }
    ~TimedRunFlag() { flag_ = false; }
    TimedRunFlag(const TimedRunFlag&) = delete;
    TimedRunFlag& operator=(const TimedRunFlag&) = delete;

  private:
    bool& flag_;
};

}  // namespace

struct EventPairs {
    explicit EventPairs(const std::vector<StreamOnDevice>& streams) {
        for (const StreamOnDevice& s : streams) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(s.device));
            devices.push_back(s.device);
            starts.push_back(nullptr);
            stops.push_back(nullptr);
            MOK_BENCH_CHECK_CUDA(cudaEventCreate(&starts.back()));
            MOK_BENCH_CHECK_CUDA(cudaEventCreate(&stops.back()));
        }
    }
    ~EventPairs() {
        for (size_t s = 0; s < devices.size(); ++s) {
            cudaSetDevice(devices[s]);
            cudaEventDestroy(starts[s]);
            cudaEventDestroy(stops[s]);
        }
    }
    EventPairs(const EventPairs&) = delete;
    EventPairs& operator=(const EventPairs&) = delete;

    // The caller has made stream s's device current.
    void record_start(size_t s, cudaStream_t stream) const { MOK_BENCH_CHECK_CUDA(cudaEventRecord(starts[s], stream)); }
    void record_stop(size_t s, cudaStream_t stream) const { MOK_BENCH_CHECK_CUDA(cudaEventRecord(stops[s], stream)); }
    // Per stream, once both events have completed.
    std::vector<double> elapsed_ms() const {
        std::vector<double> ms;
        for (size_t s = 0; s < devices.size(); ++s) {
            float value = 0.0f;
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(devices[s]));
            MOK_BENCH_CHECK_CUDA(cudaEventElapsedTime(&value, starts[s], stops[s]));
            ms.push_back(value);
        }
        return ms;
    }

    std::vector<int> devices;
    std::vector<cudaEvent_t> starts;
    std::vector<cudaEvent_t> stops;
};

L2Flusher::L2Flusher(int device) {
    int l2_bytes = 0;
    MOK_BENCH_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    bytes_ = kL2CoverFactor * static_cast<size_t>(l2_bytes);
    CurrentDevice restore;
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(device));
    MOK_BENCH_CHECK_CUDA(cudaMalloc(&buffer_, bytes_));
}

L2Flusher::~L2Flusher() {
    cudaFree(buffer_);
}

void L2Flusher::flush(cudaStream_t stream) {
    pattern_ = (pattern_ + 1) % kFlushPatterns;
    MOK_BENCH_CHECK_CUDA(cudaMemsetAsync(buffer_, pattern_, bytes_, stream));
}

Timer::Timer(std::vector<StreamOnDevice> streams) : streams_(std::move(streams)) {
    if (streams_.empty()) {
        throw std::invalid_argument("Timer: expected at least one stream");
    }
    for (const StreamOnDevice& s : streams_) {
        flushers_.push_back(std::make_unique<L2Flusher>(s.device));
    }
}

Timer::~Timer() = default;

TimingStats Timer::time(const std::function<void(int iteration)>& body, const TimingOptions& options) {
    if (options.num_reps <= 0 || options.num_warmup < 0 || !(options.min_warmup_ms >= 0.0)) {
        throw std::invalid_argument("Timer::time: expected num_reps > 0, num_warmup >= 0 and min_warmup_ms >= 0");
    }
    CurrentDevice restore;
    const auto [num_warmup_runs, warmup_ms] = warm_up(body, options);
    std::vector<std::unique_ptr<EventPairs>> reps;
    for (int rep = 0; rep < options.num_reps; ++rep) {
        reps.push_back(std::make_unique<EventPairs>(streams_));
    }
    {
        const TimedRunFlag timed(in_timed_run_);
        for (int rep = 0; rep < options.num_reps; ++rep) {
            run_once(body, num_warmup_runs + rep, options.flush_l2, reps[rep].get());
        }
    }
    per_stream_samples_ms_.assign(streams_.size(), {});
    synchronize(streams_);
    for (const auto& pairs : reps) {
        const std::vector<double> ms = pairs->elapsed_ms();
        for (size_t s = 0; s < streams_.size(); ++s) {
            per_stream_samples_ms_[s].push_back(ms[s]);
        }
    }
    TimingStats stats = summarize(max_over_ranks(per_stream_samples_ms_));
    stats.num_warmup_runs = num_warmup_runs;
    stats.warmup_ms = warmup_ms;
    return stats;
}

void Timer::run_once(const std::function<void(int)>& body, int iteration, bool flush_l2, const EventPairs* events) {
    for (size_t s = 0; s < streams_.size(); ++s) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
        if (flush_l2) {
            flushers_[s]->flush(streams_[s].stream);
        }
        if (events != nullptr) {
            events->record_start(s, streams_[s].stream);
        }
    }
    body(iteration);
    for (size_t s = 0; s < streams_.size() && events != nullptr; ++s) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
        events->record_stop(s, streams_[s].stream);
    }
}

std::pair<int, double> Timer::warm_up(const std::function<void(int)>& body, const TimingOptions& options) {
    const bool by_duration = options.min_warmup_ms > 0.0;
    int num_runs = 0;
    double elapsed_ms = 0.0;
    int next = std::max(options.num_warmup, by_duration ? 1 : 0);
    for (int round = 0; next > 0 && round < kMaxWarmupRounds; ++round) {
        // One event pair around the whole round: its device time, flushes included, is what heats the GPU.
        const EventPairs span(streams_);
        for (size_t s = 0; s < streams_.size(); ++s) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
            span.record_start(s, streams_[s].stream);
        }
        for (int i = 0; i < next; ++i) {
            run_once(body, num_runs + i, options.flush_l2, nullptr);
        }
        for (size_t s = 0; s < streams_.size(); ++s) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
            span.record_stop(s, streams_[s].stream);
        }
        synchronize(streams_);
        const std::vector<double> ms = span.elapsed_ms();
        elapsed_ms += *std::max_element(ms.begin(), ms.end());
        num_runs += next;
        next = by_duration ? more_warmup_runs(elapsed_ms, num_runs, options.min_warmup_ms) : 0;
    }
    return {num_runs, elapsed_ms};
}

TimingStats time_cuda(cudaStream_t stream, const std::function<void(int iteration)>& body,
                      const TimingOptions& options) {
    int device = 0;
    MOK_BENCH_CHECK_CUDA(cudaGetDevice(&device));
    Timer timer({StreamOnDevice{device, stream}});
    return timer.time(body, options);
}

int num_rotating_buffers(size_t working_set_bytes, size_t l2_bytes) {
    if (working_set_bytes == 0) {
        return 1;
    }
    // Between two uses of a byte the whole cycle of copies is touched, so the cycle must cover the L2 twice.
    const size_t cover = kL2CoverFactor * l2_bytes;
    return static_cast<int>(std::max<size_t>(1, (cover + working_set_bytes - 1) / working_set_bytes));
}

}  // namespace mok::bench
