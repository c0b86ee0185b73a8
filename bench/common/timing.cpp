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

struct EventPair {
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
};

}  // namespace

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
    if (options.num_reps <= 0 || options.num_warmup < 0) {
        throw std::invalid_argument("Timer::time: expected num_reps > 0 and num_warmup >= 0");
    }
    CurrentDevice restore;
    const size_t num_streams = streams_.size();
    std::vector<std::vector<EventPair>> events(num_streams, std::vector<EventPair>(options.num_reps));
    for (size_t s = 0; s < num_streams; ++s) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
        for (EventPair& pair : events[s]) {
            MOK_BENCH_CHECK_CUDA(cudaEventCreate(&pair.start));
            MOK_BENCH_CHECK_CUDA(cudaEventCreate(&pair.stop));
        }
    }
    const int num_runs = options.num_warmup + options.num_reps;
    for (int iteration = 0; iteration < num_runs; ++iteration) {
        const int rep = iteration - options.num_warmup;
        for (size_t s = 0; s < num_streams; ++s) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
            if (options.flush_l2) {
                flushers_[s]->flush(streams_[s].stream);
            }
            if (rep >= 0) {
                MOK_BENCH_CHECK_CUDA(cudaEventRecord(events[s][rep].start, streams_[s].stream));
            }
        }
        body(iteration);
        for (size_t s = 0; s < num_streams && rep >= 0; ++s) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
            MOK_BENCH_CHECK_CUDA(cudaEventRecord(events[s][rep].stop, streams_[s].stream));
        }
    }
    per_stream_samples_ms_.assign(num_streams, {});
    for (size_t s = 0; s < num_streams; ++s) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(streams_[s].device));
        MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(streams_[s].stream));
        for (const EventPair& pair : events[s]) {
            float ms = 0.0f;
            MOK_BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, pair.start, pair.stop));
            per_stream_samples_ms_[s].push_back(ms);
            MOK_BENCH_CHECK_CUDA(cudaEventDestroy(pair.start));
            MOK_BENCH_CHECK_CUDA(cudaEventDestroy(pair.stop));
        }
    }
    return summarize(max_over_ranks(per_stream_samples_ms_));
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
