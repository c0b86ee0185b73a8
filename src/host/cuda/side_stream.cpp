#include "host/cuda/side_stream.hpp"

#include <utility>

#include "host/cuda/cuda_status.hpp"

namespace mok::cuda {
namespace {

using host::cuda_status;

}  // namespace

Status SideStream::create(SideStream* out) {
    SideStream s;
    // Non-blocking: the side stream must not wait on the legacy default stream the caller may use elsewhere.
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking), "creating a side stream"));
    // The events only order the streams; they time nothing.
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(&s.forked_, cudaEventDisableTiming), "creating a fork event"));
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(&s.joined_, cudaEventDisableTiming), "creating a join event"));
    *out = std::move(s);
    return Status::ok();
}

SideStream::~SideStream() {
    destroy();
}

SideStream::SideStream(SideStream&& other) noexcept {
    *this = std::move(other);
}

SideStream& SideStream::operator=(SideStream&& other) noexcept {
    std::swap(stream_, other.stream_);
    std::swap(forked_, other.forked_);
    std::swap(joined_, other.joined_);
    return *this;
}

void SideStream::destroy() {
    if (joined_ != nullptr) {
        cudaEventDestroy(joined_);
    }
    if (forked_ != nullptr) {
        cudaEventDestroy(forked_);
    }
    if (stream_ != nullptr) {
        cudaStreamDestroy(stream_);
    }
}

Status SideStream::fork(cudaStream_t main) {
    MOK_RETURN_IF_ERROR(cuda_status(cudaEventRecord(forked_, main), "recording the side stream's fork"));
    return cuda_status(cudaStreamWaitEvent(stream_, forked_, 0), "waiting for the fork on the side stream");
}

Status SideStream::join(cudaStream_t main) {
    MOK_RETURN_IF_ERROR(cuda_status(cudaEventRecord(joined_, stream_), "recording the side stream's join"));
    return cuda_status(cudaStreamWaitEvent(main, joined_, 0), "waiting for the side stream on the main stream");
}

}  // namespace mok::cuda
