#include "bench/transport/two_rank_transport.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

#include "bench/common/cuda_check.hpp"
#include "bench/common/data.hpp"
#include "common/bf16.hpp"
#include "device/comm/copy_geometry.hpp"
#include "host/comm/device_status.hpp"
#include "host/comm/transport_memory.hpp"
#include "plan/routing_plan.hpp"

namespace mok::bench::transport {
namespace {

// docs/benchmarking.md: Zipf-skewed expert popularity with this exponent over a seeded order of the experts.
constexpr double kZipfExponent = 1.2;
// Timeout of the benchmark's waits: generous, a correct run never comes near it.
constexpr uint64_t kTimeoutNs = 10'000'000'000ull;
constexpr float kValueLo = -1.0f;
constexpr float kValueHi = 1.0f;

void check(const Status& status, const char* what) {
    if (!status.is_ok()) {
        throw std::runtime_error(std::string(what) + ": " + status.to_string());
    }
}

// Runs fn(rank) on one thread per rank (NCCL's collective calls need both ranks at once); rethrows the first
// failure.
template <typename Fn>
void on_both_ranks(Fn&& fn) {
    std::exception_ptr failures[kRanks];
    std::thread threads[kRanks];
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        threads[rank] = std::thread([&, rank] {
            try {
                fn(rank);
            } catch (...) {
                failures[rank] = std::current_exception();
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    for (const auto& failure : failures) {
        if (failure) {
            std::rethrow_exception(failure);
        }
    }
}

std::vector<double> expert_popularity(const TransportSetup& s, std::mt19937_64& rng) {
    std::vector<double> weights(s.model.num_experts, 1.0);
    if (s.routing == RoutingKind::kZipf) {
        std::vector<int32_t> order(s.model.num_experts);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int32_t e = 0; e < s.model.num_experts; ++e) {
            weights[e] = 1.0 / std::pow(order[e] + 1.0, kZipfExponent);
        }
    }
    return weights;
}

// k distinct experts per token, drawn by popularity without replacement.
std::vector<int32_t> draw_ids(const TransportSetup& s, std::mt19937_64& rng) {
    const std::vector<double> popularity = expert_popularity(s, rng);
    std::vector<int32_t> ids(s.tokens_per_rank * s.model.top_k);
    for (int64_t t = 0; t < s.tokens_per_rank; ++t) {
        std::vector<double> weights = popularity;
        for (int32_t j = 0; j < s.model.top_k; ++j) {
            std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
            ids[t * s.model.top_k + j] = pick(rng);
            weights[ids[t * s.model.top_k + j]] = 0.0;
        }
    }
    return ids;
}

plan::PlanShape plan_shape(const TransportSetup& s, int32_t rank) {
    plan::PlanShape p;
    p.ep_size = kRanks;
    p.rank = rank;
    p.tokens_per_rank = s.tokens_per_rank;
    p.top_k = s.model.top_k;
    p.num_experts = s.model.num_experts;
    p.capacity_rows = plan::worst_case_rows(kRanks, s.tokens_per_rank, s.model.top_k, s.model.num_experts / kRanks);
    p.minibatch_rows = plan::kExpertRowAlignment;
    // The ring holds every row: the benchmark times dispatch and push without a consumer in between.
    p.ring_rows = p.capacity_rows;
    return p;
}

template <typename T>
T* device_alloc(size_t count) {
    void* data = nullptr;
    MOK_BENCH_CHECK_CUDA(cudaMalloc(&data, count * sizeof(T)));
    return static_cast<T*>(data);
}

}  // namespace

TwoRankTransport::TwoRankTransport(const TransportSetup& setup) : setup_(setup) {
    // The machines keep NVLink multicast off; a bare run does too (an explicit setting wins).
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    std::mt19937_64 rng(setup.seed);
    std::vector<const int32_t*> all_ids;
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        host_ids_[rank] = draw_ids(setup, rng);
        host_x_[rank].resize(setup.tokens_per_rank * setup.model.hidden);
        std::uniform_real_distribution<float> value(kValueLo, kValueHi);
        for (uint16_t& v : host_x_[rank]) {
            v = round_to_bf16_bits(value(rng));
        }
        all_ids.push_back(host_ids_[rank].data());
    }
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        plan::build_host_plan(plan_shape(setup, rank), all_ids, &plans_[rank]);
    }
    const int devices[kRanks] = {0, 1};
    check(comm::nccl_status(ncclCommInitAll(comms_.data(), kRanks, devices), "ncclCommInitAll"), "communicators");
    on_both_ranks([&](int32_t rank) { build_rank(rank); });
}

void TwoRankTransport::build_rank(int32_t rank) {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(rank));
    const ModelShape& m = setup_.model;
    const int64_t tokens = setup_.tokens_per_rank;
    const plan::PlanShape shape = plan_shape(setup_, rank);
    comm::LaunchGroup<comm::NcclPeers>& g = groups_[rank];
    g.window = layout::SymmetricLayout::make({kRanks, tokens, m.hidden, m.top_k});
    g.local = layout::LocalLayout::make(shape, m.hidden);
    g.timeout_ns = kTimeoutNs;
    communicators_[rank] = comm::NcclCommunicator::borrow(comms_[rank]);
    check(comm::NcclWindow::create(*communicators_[rank], g.window, &windows_[rank]), "symmetric window");
    check(comm::LocalWorkspace::create(g.local, &locals_[rank]), "local block");
    g.num_ranks = 1;
    g.ranks[0] = comm::RankEndpoint<comm::NcclPeers>{windows_[rank]->peers(), windows_[rank]->window(),
                                                     locals_[rank]->buffers()};

    RankTensors& t = tensors_[rank];
    const size_t slots = static_cast<size_t>(tokens * m.top_k);
    t.expert_ids = device_alloc<int32_t>(slots);
    t.router_weights = device_alloc<float>(slots);
    t.x = device_alloc<uint16_t>(tokens * m.hidden);
    t.out_rows = device_alloc<uint16_t>(shape.capacity_rows * m.hidden);
    t.y = device_alloc<uint16_t>(tokens * m.hidden);
    MOK_BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&streams_[rank], cudaStreamNonBlocking));
    const cudaStream_t stream = streams_[rank];
    MOK_BENCH_CHECK_CUDA(
        cudaMemcpyAsync(t.expert_ids, host_ids_[rank].data(), slots * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    MOK_BENCH_CHECK_CUDA(cudaMemcpyAsync(t.x, host_x_[rank].data(), host_x_[rank].size() * sizeof(uint16_t),
                                         cudaMemcpyHostToDevice, stream));
    fill_uniform(t.router_weights, slots, kValueLo, kValueHi, setup_.seed + 2 * rank, stream);
    fill_uniform(reinterpret_cast<__nv_bfloat16*>(t.out_rows), shape.capacity_rows * m.hidden, kValueLo, kValueHi,
                 setup_.seed + 2 * rank + 1, stream);

    // One routing exchange and plan; the timed runs reuse them.
    const std::vector<DeviceStatus*> records = {g.ranks[0].local.status};
    check(comm::clear_device_status(records, stream), "clear status");
    check(comm::stage_rows(g.ranks[0].window, g.window, comm::SourceRows::kTokens, t.x, m.hidden, stream), "stage x");
    const comm::RankRouting routing{t.expert_ids, t.router_weights};
    check(comm::enqueue_routing_exchange(g, &routing, stream), "routing exchange");
    check(comm::enqueue_plan(g, stream), "plan");
    check(comm::read_device_status(records, stream), "plan");
    // The device plan must be the host's before anything is timed.
    const std::vector<plan::RowSource> rows = [&] {
        std::vector<plan::RowSource> out(shape.capacity_rows);
        MOK_BENCH_CHECK_CUDA(cudaMemcpy(out.data(), g.ranks[0].local.plan.row_source,
                                        out.size() * sizeof(plan::RowSource), cudaMemcpyDeviceToHost));
        return out;
    }();
    for (int64_t row = 0; row < shape.capacity_rows; ++row) {
        const plan::RowSource& got = rows[row];
        const plan::RowSource& expected = plans_[rank].row_source[row];
        if (got.src_rank != expected.src_rank || got.token_slot != expected.token_slot) {
            throw std::runtime_error("rank " + std::to_string(rank) + ": device plan differs from the host's at row " +
                                     std::to_string(row));
        }
    }
}

void TwoRankTransport::free_rank(int32_t rank) {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(rank));
    MOK_BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    RankTensors& t = tensors_[rank];
    for (void* p : {static_cast<void*>(t.expert_ids), static_cast<void*>(t.router_weights), static_cast<void*>(t.x),
                    static_cast<void*>(t.out_rows), static_cast<void*>(t.y)}) {
        cudaFree(p);
    }
    if (streams_[rank] != nullptr) {
        cudaStreamDestroy(streams_[rank]);
    }
    // Deregistration is collective: both ranks' threads get here.
    windows_[rank].reset();
    locals_[rank].reset();
}

TwoRankTransport::~TwoRankTransport() {
    try {
        on_both_ranks([&](int32_t rank) { free_rank(rank); });
    } catch (const std::exception&) {
        // Teardown after a failed case: nothing more can be done than releasing what remains below.
    }
    for (ncclComm_t comm : comms_) {
        if (comm != nullptr) {
            ncclCommDestroy(comm);
        }
    }
}

int64_t TwoRankTransport::remote_rows(int32_t rank) const {
    const plan::HostPlan& p = plans_[rank];
    int64_t count = 0;
    for (int64_t row = 0; row < p.padded_rows(); ++row) {
        const plan::RowSource s = p.row_source[row];
        count += !s.is_padding() && s.src_rank != rank ? 1 : 0;
    }
    return count;
}

int64_t TwoRankTransport::remote_pulled_rows(int32_t rank) const {
    const plan::HostPlan& p = plans_[rank];
    const int64_t slots = p.shape.slots_per_rank();
    int64_t count = 0;
    for (int32_t src = 0; src < kRanks; ++src) {
        if (src == rank) {
            continue;
        }
        for (int64_t token = 0; token < p.shape.tokens_per_rank; ++token) {
            int64_t rows = 0;
            for (int32_t slot = 0; slot < p.shape.top_k; ++slot) {
                rows += p.owned_slot_rows[src * slots + token * p.shape.top_k + slot] >= 0 ? 1 : 0;
            }
            count += plan::ceil_div(rows, comm::kMaxRowFanout);
        }
    }
    return count;
}

void TwoRankTransport::check_status() const {
    for (int32_t rank = 0; rank < kRanks; ++rank) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(rank));
        const std::vector<DeviceStatus*> records = {groups_[rank].ranks[0].local.status};
        check(comm::read_device_status(records, streams_[rank]), "transport");
    }
}

}  // namespace mok::bench::transport
