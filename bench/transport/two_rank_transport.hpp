// The transport set up on GPUs 0 and 1 over NCCL for the benchmark: each rank's symmetric window, local block,
// routing, x rows and expert-output rows, with its routing exchanged and its plan built once (the timed runs
// repeat the dispatch and the push of that plan).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/comm/transport_launch.hpp"
#include "host/comm/local_workspace.hpp"
#include "host/comm/nccl_communicator.hpp"
#include "host/comm/nccl_window.hpp"
#include "host/plan/host_plan.hpp"

namespace mok::bench::transport {

inline constexpr int32_t kRanks = 2;

struct ModelShape {
    std::string name;
    int64_t hidden = 0;
    int32_t num_experts = 0;
    int32_t top_k = 0;
};

enum class RoutingKind : uint8_t { kUniform, kZipf };

struct TransportSetup {
    ModelShape model;
    int64_t tokens_per_rank = 0;
    RoutingKind routing = RoutingKind::kUniform;
    uint64_t seed = 0;
};

// Device memory of one rank beyond the transport's own: its routing, x rows, output rows and combine output.
struct RankTensors {
    int32_t* expert_ids = nullptr;    // [T, k]
    float* router_weights = nullptr;  // [T, k]
    uint16_t* x = nullptr;            // [T, H] bf16
    uint16_t* out_rows = nullptr;     // [capacity, H] bf16: the stand-in expert outputs the push sends
    uint16_t* y = nullptr;            // [T, H] bf16
};

class TwoRankTransport {
  public:
    // Builds everything on GPUs 0 and 1 (threads for NCCL's collective calls), exchanges the routing and plans;
    // throws on failure.
    explicit TwoRankTransport(const TransportSetup& setup);
    ~TwoRankTransport();
    TwoRankTransport(const TwoRankTransport&) = delete;
    TwoRankTransport& operator=(const TwoRankTransport&) = delete;

    const comm::LaunchGroup<comm::NcclPeers>& group(int32_t rank) const { return groups_[rank]; }
    cudaStream_t stream(int32_t rank) const { return streams_[rank]; }
    ncclComm_t comm(int32_t rank) const { return comms_[rank]; }
    const RankTensors& tensors(int32_t rank) const { return tensors_[rank]; }
    const plan::HostPlan& plan(int32_t rank) const { return plans_[rank]; }
    const std::vector<uint16_t>& host_x(int32_t rank) const { return host_x_[rank]; }
    const TransportSetup& setup() const { return setup_; }

    // Rows of `rank`'s row space that come from the other rank: what its dispatch pulls over NVLink, and what
    // its push sends back.
    int64_t remote_rows(int32_t rank) const;
    // Of them, the rows a dispatch that pulls a token's rows once per group (comm::DispatchPull::kTokenGroups) loads
    // over NVLink: one per group of up to kMaxRowFanout rows of one source token.
    int64_t remote_pulled_rows(int32_t rank) const;
    uint64_t row_bytes() const { return static_cast<uint64_t>(setup_.model.hidden) * 2; }

    // Throws unless every rank's DeviceStatus is clear (after its stream completes).
    void check_status() const;

  private:
    void build_rank(int32_t rank);
    void free_rank(int32_t rank);

    TransportSetup setup_;
    std::array<ncclComm_t, kRanks> comms_{};
    std::array<std::unique_ptr<comm::NcclCommunicator>, kRanks> communicators_;
    std::array<std::unique_ptr<comm::NcclWindow>, kRanks> windows_;
    std::array<std::unique_ptr<comm::LocalWorkspace>, kRanks> locals_;
    std::array<comm::LaunchGroup<comm::NcclPeers>, kRanks> groups_;
    std::array<cudaStream_t, kRanks> streams_{};
    std::array<RankTensors, kRanks> tensors_{};
    std::array<std::vector<int32_t>, kRanks> host_ids_;
    std::array<std::vector<uint16_t>, kRanks> host_x_;
    std::array<plan::HostPlan, kRanks> plans_;
};

}  // namespace mok::bench::transport
