#include "comm/virtual_harness.hpp"

#include <numeric>
#include <stdexcept>

#include "comm/device_buffer.hpp"
#include "comm/rank_data.hpp"
#include "host/comm/device_status.hpp"

namespace mok::comm::testing {
namespace {

void check(const Status& status) {
    if (!status.is_ok()) {
        throw std::runtime_error(status.to_string());
    }
}

}  // namespace

VirtualHarness::VirtualHarness(const TransportProblem& problem, uint64_t timeout_ms, int64_t out_ring_rows)
    : problem_(problem), timeout_ns_(timeout_ms * kNanosPerMilli) {
    const TransportCase& c = problem.c;
    layout::TransportShape shape;
    shape.ep_size = c.ep_size;
    shape.tokens_per_rank = c.tokens_per_rank;
    shape.hidden = c.hidden;
    shape.top_k = c.top_k;
    window_layout_ = layout::SymmetricLayout::make(shape);
    local_layout_ = layout::LocalLayout::make(c.plan_shape(0), c.hidden);
    check(VirtualWindows::create(window_layout_, c.ep_size, &windows_));
    for (int32_t r = 0; r < c.ep_size; ++r) {
        locals_.emplace_back();
        check(LocalWorkspace::create(local_layout_, &locals_.back()));
        data_.push_back(std::make_unique<RankDeviceData>());
        data_.back()->upload(problem, r, out_ring_rows > 0 ? out_ring_rows : c.capacity());
    }
}

std::vector<int32_t> VirtualHarness::all_or(const std::vector<int32_t>& ranks) const {
    if (!ranks.empty()) {
        return ranks;
    }
    std::vector<int32_t> all(problem_.c.ep_size);
    std::iota(all.begin(), all.end(), 0);
    return all;
}

LaunchGroup<VirtualPeers> VirtualHarness::group(const std::vector<int32_t>& ranks) const {
    LaunchGroup<VirtualPeers> g;
    g.window = window_layout_;
    g.local = local_layout_;
    g.timeout_ns = timeout_ns_;
    for (const int32_t r : all_or(ranks)) {
        RankEndpoint<VirtualPeers>& endpoint = g.ranks[g.num_ranks++];
        endpoint.peers = windows_->peers(r);
        endpoint.window = windows_->window(r);
        endpoint.local = locals_[r]->buffers();
    }
    return g;
}

std::vector<RankDeviceData*> VirtualHarness::data(const std::vector<int32_t>& ranks) const {
    std::vector<RankDeviceData*> out;
    for (const int32_t r : all_or(ranks)) {
        out.push_back(data_[r].get());
    }
    return out;
}

void VirtualHarness::poison() const {
    for (const auto& d : data_) {
        d->poison();
    }
    poison_transport(group());
}

plan::HostPlan VirtualHarness::download_plan(int32_t rank) const {
    return testing::download_plan(locals_[rank]->buffers().plan, problem_.c.plan_shape(rank));
}

Status run_step(const VirtualHarness& harness, const StepOptions& options, bool backward, cudaStream_t stream) {
    const LaunchGroup<VirtualPeers> group = harness.group();
    const std::vector<RankDeviceData*> data = harness.data();
    MOK_RETURN_IF_ERROR(enqueue_forward(group, data, options, stream));
    if (backward) {
        MOK_RETURN_IF_ERROR(enqueue_backward(group, data, options, stream));
    }
    return read_device_status(status_records(group), stream);
}

}  // namespace mok::comm::testing
