// A transport problem on virtual ranks: every rank's window, local block and test tensors on the current GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/rank_data.hpp"
#include "comm/transport_problem.hpp"
#include "comm/transport_steps.hpp"
#include "device/comm/transport_launch.hpp"
#include "host/comm/local_workspace.hpp"
#include "host/comm/virtual_window.hpp"
#include "host/plan/host_plan.hpp"

namespace mok::comm::testing {

// Generous enough for any correct run on a busy machine; the timeout tests set their own.
inline constexpr uint64_t kTestTimeoutMs = 10000;
inline constexpr uint64_t kNanosPerMilli = 1000000;

// Output rows of the pipelined runs go round a ring of one tile, the least the push allows: every tile is a lap.
inline constexpr int64_t kPipelinedOutRingRows = 128;

class VirtualHarness {
  public:
    VirtualHarness(const TransportProblem& problem, uint64_t timeout_ms, int64_t out_ring_rows);

    const TransportProblem& problem() const { return problem_; }
    // The launch group of `ranks` (all ranks when empty), and their test tensors in the same order.
    LaunchGroup<VirtualPeers> group(const std::vector<int32_t>& ranks = {}) const;
    std::vector<RankDeviceData*> data(const std::vector<int32_t>& ranks = {}) const;
    RankDeviceData& data_of(int32_t rank) const { return *data_[rank]; }
    // Poisons every output, ring and combine row.
    void poison() const;
    // Rank `rank`'s plan, read back from the device.
    plan::HostPlan download_plan(int32_t rank) const;

  private:
    std::vector<int32_t> all_or(const std::vector<int32_t>& ranks) const;

    TransportProblem problem_;
    layout::SymmetricLayout window_layout_;
    layout::LocalLayout local_layout_;
    uint64_t timeout_ns_;
    std::unique_ptr<VirtualWindows> windows_;
    std::vector<std::unique_ptr<LocalWorkspace>> locals_;
    std::vector<std::unique_ptr<RankDeviceData>> data_;
};

// Runs a forward (and, if asked, a backward) on all ranks of the harness on `stream` and returns the first
// failure any rank recorded.
Status run_step(const VirtualHarness& harness, const StepOptions& options, bool backward, cudaStream_t stream);

}  // namespace mok::comm::testing
