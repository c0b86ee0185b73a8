#include "mok/status.hpp"

#include "common/device_status.hpp"

namespace mok {

const char* to_string(StatusCode code) {
    switch (code) {
        case StatusCode::kOk:
            return "ok";
        case StatusCode::kInvalidArgument:
            return "invalid argument";
        case StatusCode::kScheduleOverflow:
            return "schedule overflow";
        case StatusCode::kPeerTimeout:
            return "peer timeout";
        case StatusCode::kNotSupported:
            return "not supported";
        case StatusCode::kCudaError:
            return "CUDA error";
        case StatusCode::kNcclError:
            return "NCCL error";
        case StatusCode::kInternal:
            return "internal error";
    }
    return "unknown status code";
}

Status Status::invalid_argument(const std::string& argument, const std::string& expected) {
    return {StatusCode::kInvalidArgument, "argument '" + argument + "': expected " + expected};
}

std::string Status::to_string() const {
    if (is_ok()) {
        return mok::to_string(code_);
    }
    return std::string(mok::to_string(code_)) + ": " + message_;
}

const char* to_string(WaitSite site) {
    switch (site) {
        case WaitSite::kNone:
            return "nothing";
        case WaitSite::kPipelineFull:
            return "a GEMM pipeline stage to fill (TMA load)";
        case WaitSite::kPipelineEmpty:
            return "a GEMM pipeline stage to be freed";
        case WaitSite::kRowsReady:
            return "dispatched rows";
        case WaitSite::kRingSlotFree:
            return "a token-ring slot to be freed by its previous occupant";
        case WaitSite::kCombineArrivals:
            return "expert outputs to arrive for the combine";
        case WaitSite::kRoutingExchange:
            return "the peers' expert ids";
        case WaitSite::kPeerBarrier:
            return "a barrier across ranks";
        case WaitSite::kBulkCopy:
            return "a bulk copy to complete";
        case WaitSite::kEpilogueLoad:
            return "main_grad to load for a weight-gradient epilogue";
        case WaitSite::kWarpgroupTurn:
            return "the other warpgroup's K loop in a ping-pong GEMM";
        case WaitSite::kEpilogueHandoff:
            return "a tile handed between a GEMM's consumers and its epilogue warpgroup";
        case WaitSite::kRowsLanded:
            return "a dispatched tile's rows stored with their token's first row by other copy teams";
    }
    return "an unknown wait site";
}

}  // namespace mok
