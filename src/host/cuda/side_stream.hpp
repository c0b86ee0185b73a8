// A second stream for work that needs none of the main stream's recent results, so that it can run on the SMs
// the main stream's communication kernels leave idle (docs/layer.md, "Kernel sequence"). fork() makes the side
// stream wait for everything enqueued on the main stream so far; join() makes the main stream wait for
// everything enqueued on the side stream. Both are event records and waits: no host synchronisation, and a
// capture of the main stream takes the side stream's work into the graph.
#pragma once

#include <cuda_runtime.h>

#include "mok/status.hpp"

namespace mok::cuda {

class SideStream {
  public:
    // Creates the stream and its two events on the current device.
    static Status create(SideStream* out);
    SideStream() = default;
    ~SideStream();
    SideStream(const SideStream&) = delete;
    SideStream& operator=(const SideStream&) = delete;
    SideStream(SideStream&& other) noexcept;
    SideStream& operator=(SideStream&& other) noexcept;

    cudaStream_t stream() const { return stream_; }
    Status fork(cudaStream_t main);
    Status join(cudaStream_t main);

  private:
    void destroy();

    cudaStream_t stream_ = nullptr;
    cudaEvent_t forked_ = nullptr;  // recorded on the main stream, waited on by the side stream
    cudaEvent_t joined_ = nullptr;  // recorded on the side stream, waited on by the main stream
};

}  // namespace mok::cuda
