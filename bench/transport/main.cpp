// mok-bench-transport: the transport's dispatch (pull) and combine (push) bandwidth on two GPUs, against
// baselines measured in the same run on the same bytes: a plain SM copy kernel on the same SMs, cudaMemcpyPeer
// (both directions at once) and an NCCL all-to-all (ncclSend/ncclRecv per peer, as all_to_all_single does).
//
// Bandwidth = bytes of routed rows that cross NVLink, per rank (rows whose source is the other rank, times
// 2H bytes), over the slower rank's time; both ranks move their rows at once, as in a real step. The dispatch
// pulls a token's rows once per group (comm::DispatchPull), so fewer bytes cross than it delivers: each case
// records the rows a dispatch that pulls a token's rows once per group loads over NVLink (pulled_nvlink_rows_*), and
// dispatch_token_groups times that dispatch beside the default one, which pulls every row.
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"
#include "bench/common/buffers.hpp"
#include "bench/transport/sm_copy.hpp"
#include "bench/transport/two_rank_transport.hpp"
#include "device/comm/copy_geometry.hpp"
#include "host/comm/nccl_communicator.hpp"
#include "host/comm/transport_memory.hpp"

namespace mok::bench::transport {
namespace {

constexpr int64_t kTokensPerRank = 4096;
// The brief's budget: the transport must reach its bandwidth with at most 16 SMs per rank.
constexpr int32_t kDefaultSms = 16;
// --full also runs 24 and 32 SMs, beyond the budget: where the rate stops growing with SMs shows whether the SMs'
// copy throughput or the link is the limit (docs/transport.md, section 12).
const std::vector<int32_t> kSmSweep = {8, 12, 16, 24, 32};
// SMs for the rows that stay on the GPU (comm::CopyBlocks::local), besides the NVLink SMs: 0 (the NVLink SMs copy
// every row), 8 and 16.
const std::vector<int32_t> kLocalRowSms = {0, 8, 16};
constexpr uint64_t kSeed = 20261129;
constexpr double kBytesPerGigabyte = 1e9;
constexpr double kBytesPerGiB = 1073741824.0;
// Rows of each rank checked bit for bit after the first dispatch and push (sampled: the full check would
// download gigabytes).
constexpr int kCheckedRows = 512;
constexpr int kWarmup = 3;
constexpr int kReps = 20;
constexpr int kQuickReps = 5;

const ModelShape kDeepSeekV3{"deepseek-v3", 7168, 256, 8};
const ModelShape kQwen35{"qwen3.5-397b-a17b", 4096, 512, 10};

// Average over the ranks of the bytes each pulls (dispatch) or pushes (combine) over NVLink.
double nvlink_gigabytes(const TwoRankTransport& t) {
    double bytes = 0.0;
    for (int32_t r = 0; r < kRanks; ++r) {
        bytes += static_cast<double>(t.remote_rows(r)) * static_cast<double>(t.row_bytes());
    }
    return bytes / kRanks / kBytesPerGigabyte;
}

size_t nvlink_bytes_rounded(const TwoRankTransport& t) {
    const double bytes = nvlink_gigabytes(t) * kBytesPerGigabyte;
    return static_cast<size_t>(bytes) / 16 * 16;
}

Timer make_timer(const TwoRankTransport& t) {
    return Timer({StreamOnDevice{0, t.stream(0)}, StreamOnDevice{1, t.stream(1)}});
}

void check_dispatch(const TwoRankTransport& t) {
    std::mt19937_64 rng(kSeed);
    for (int32_t r = 0; r < kRanks; ++r) {
        const plan::HostPlan& p = t.plan(r);
        const layout::LocalBuffers& local = t.group(r).ranks[0].local;
        const int64_t hidden = t.setup().model.hidden;
        std::vector<uint16_t> row(hidden);
        for (int i = 0; i < kCheckedRows; ++i) {
            const int64_t at = std::uniform_int_distribution<int64_t>(0, p.padded_rows() - 1)(rng);
            const plan::RowSource s = p.row_source[at];
            if (s.is_padding()) {
                continue;
            }
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(r));
            MOK_BENCH_CHECK_CUDA(
                cudaMemcpy(row.data(), local.ring_rows[0] + at * hidden, hidden * 2, cudaMemcpyDeviceToHost));
            const int64_t token = s.token_slot / t.setup().model.top_k;
            if (!std::equal(row.begin(), row.end(), t.host_x(s.src_rank).begin() + token * hidden)) {
                throw std::runtime_error("dispatch check: rank " + std::to_string(r) + " row " + std::to_string(at) +
                                         " differs from its source row");
            }
        }
    }
}

void check_push(const TwoRankTransport& t) {
    std::mt19937_64 rng(kSeed + 1);
    const int64_t hidden = t.setup().model.hidden;
    std::vector<uint16_t> sent(hidden);
    std::vector<uint16_t> landed(hidden);
    for (int32_t owner = 0; owner < kRanks; ++owner) {
        const plan::HostPlan& p = t.plan(owner);
        for (int i = 0; i < kCheckedRows; ++i) {
            const int64_t at = std::uniform_int_distribution<int64_t>(0, p.padded_rows() - 1)(rng);
            const plan::RowSource s = p.row_source[at];
            if (s.is_padding()) {
                continue;
            }
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(owner));
            MOK_BENCH_CHECK_CUDA(
                cudaMemcpy(sent.data(), t.tensors(owner).out_rows + at * hidden, hidden * 2, cudaMemcpyDeviceToHost));
            const auto& source = t.group(s.src_rank);
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(s.src_rank));
            MOK_BENCH_CHECK_CUDA(cudaMemcpy(landed.data(),
                                            source.ranks[0].window + source.window.combine_row(s.token_slot),
                                            hidden * 2, cudaMemcpyDeviceToHost));
            if (sent != landed) {
                throw std::runtime_error("push check: owner " + std::to_string(owner) + " row " + std::to_string(at) +
                                         " did not land in its source's combine row");
            }
        }
    }
}

// Enqueues `body(rank)` for both ranks, each on its own device and stream.
void both(const std::function<void(int32_t)>& body) {
    for (int32_t r = 0; r < kRanks; ++r) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(r));
        body(r);
    }
}

void throw_unless_ok(const Status& status) {
    if (!status.is_ok()) {
        throw std::runtime_error(status.to_string());
    }
}

struct Baselines {
    double sm_copy_gbs = 0.0;
    double memcpy_peer_gbs = 0.0;
};

// "deepseek-v3/t4096[/zipf][/<what>][/sm<n>]": the names docs/benchmarking.md pairs mok's cases and the
// baselines' by ("nccl_all_to_all/deepseek-v3/t4096" is the baselines-a2a case of the same bytes).
std::string case_name(const TransportSetup& s, const std::string& what, int32_t sms, bool sweep) {
    std::string name = s.model.name + "/t" + std::to_string(s.tokens_per_rank);
    if (s.routing == RoutingKind::kZipf) {
        name += "/zipf";
    }
    if (!what.empty()) {
        name += "/" + what;
    }
    return sweep ? name + "/sm" + std::to_string(sms) : name;
}

// Which of a rank's dispatched rows a gather case copies: those it pulls from the other rank, or its own.
enum class RowOrigin { kRemote, kLocal };

// The tokens of the x rows of `origin` that `rank`'s dispatch copies, in row-space order.
std::vector<int64_t> row_tokens(const TwoRankTransport& t, int32_t rank, RowOrigin origin) {
    std::vector<int64_t> tokens;
    const plan::HostPlan& p = t.plan(rank);
    for (int64_t row = 0; row < p.padded_rows(); ++row) {
        const plan::RowSource s = p.row_source[row];
        if (!s.is_padding() && (s.src_rank == rank) == (origin == RowOrigin::kLocal)) {
            tokens.push_back(s.token_slot / t.setup().model.top_k);
        }
    }
    return tokens;
}

// Rows of the gather copy checked against their source after the timed runs.
constexpr int kCheckedGatherRows = 64;

// The SM copy kernel's loop over the dispatch's remote rows (sm_copy.hpp), densely into a buffer of the case's.
// `bulk_issuers` > 0: the rows move by bulk copies through shared memory, issued by that many threads per block
// (enqueue_sm_bulk_gather_copy). RowOrigin::kLocal (bulk only): the rank's own rows instead, HBM to HBM: what an SM
// copies of the rows that do not cross NVLink, which the dispatch's SMs copy beside the remote ones.
Case gather_case(const TwoRankTransport& t, int32_t sms, const TimingOptions& timing, bool sweep, Timer& timer,
                 double sm_copy_gbs, int32_t bulk_issuers, RowOrigin origin = RowOrigin::kRemote) {
    const bool bulk = bulk_issuers > 0;
    const bool local = origin == RowOrigin::kLocal;
    if (local && !bulk) {
        throw std::invalid_argument("gather_case: the local rows are measured by bulk copies only");
    }
    Case gather;
    gather.name = std::string(local  ? "sm_bulk_gather_local/"
                              : bulk ? "sm_bulk_gather/"
                                     : "sm_gather/") +
                  case_name(t.setup(), "", sms, sweep);
    gather.params.set("sms", sms)
        .set("method", local  ? "bulk copies of the dispatch's local rows (HBM to HBM), scattered by token, "
                                "through shared-memory stages"
                       : bulk ? "bulk-copy pull of the dispatch's remote rows, scattered by "
                                "token, through shared-memory stages"
                              : "SM pull copy of the dispatch's remote rows, scattered by token");
    std::vector<std::unique_ptr<DeviceBuffer<uint64_t>>> offsets;
    std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> landed;  // each rank's copied rows, densely
    std::vector<int64_t> rows;
    std::vector<std::vector<int64_t>> tokens;
    for (int32_t r = 0; r < kRanks; ++r) {
        tokens.push_back(row_tokens(t, r, origin));
        std::vector<uint64_t> host;
        for (const int64_t token : tokens.back()) {
            host.push_back(t.group(r).window.token_row(token));
        }
        offsets.push_back(std::make_unique<DeviceBuffer<uint64_t>>(r, std::max<size_t>(host.size(), 1)));
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(r));
        MOK_BENCH_CHECK_CUDA(
            cudaMemcpy(offsets.back()->get(), host.data(), host.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
        rows.push_back(static_cast<int64_t>(host.size()));
        landed.push_back(std::make_unique<DeviceBuffer<uint8_t>>(r, std::max<size_t>(host.size(), 1) * t.row_bytes()));
    }
    const TimingStats stats = timer.time(
        [&](int) {
            both([&](int32_t r) {
                if (bulk) {
                    const comm::LaunchGroup<comm::NcclPeers>& g = t.group(r);
                    enqueue_sm_bulk_gather_copy(g.ranks[0].peers, local ? r : 1 - r, offsets[r]->get(), rows[r],
                                                static_cast<uint32_t>(t.row_bytes()), landed[r]->get(), sms,
                                                bulk_issuers, g.ranks[0].local.status, r, g.timeout_ns, t.stream(r));
                } else {
                    enqueue_sm_gather_copy(t.group(r).ranks[0].peers, 1 - r, offsets[r]->get(), rows[r],
                                           static_cast<uint32_t>(t.row_bytes()), landed[r]->get(), sms, t.stream(r));
                }
            });
        },
        timing);
    t.check_status();  // a bulk row that did not land within the budget
    // What landed is the source rank's x rows (the other rank's, or this one's for the local rows), in order
    // (sampled).
    const int64_t hidden = t.setup().model.hidden;
    std::vector<uint16_t> row(hidden);
    for (int32_t r = 0; r < kRanks; ++r) {
        for (int64_t i = 0; i < rows[r]; i += std::max<int64_t>(rows[r] / kCheckedGatherRows, 1)) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(r));
            MOK_BENCH_CHECK_CUDA(
                cudaMemcpy(row.data(), landed[r]->get() + i * t.row_bytes(), t.row_bytes(), cudaMemcpyDeviceToHost));
            if (!std::equal(row.begin(), row.end(), t.host_x(local ? r : 1 - r).begin() + tokens[r][i] * hidden)) {
                throw std::runtime_error("gather copy check: rank " + std::to_string(r) + " row " + std::to_string(i) +
                                         " differs from its source row");
            }
        }
    }
    gather.figures.push_back(time_figure("time", stats));
    // Per rank, averaged: the rows this case copied.
    const double gigabytes =
        static_cast<double>(rows[0] + rows[1]) * static_cast<double>(t.row_bytes()) / kRanks / kBytesPerGigabyte;
    Figure bandwidth = rate_figure("bandwidth", "GB/s", gigabytes, stats);
    bandwidth.against("sm_copy", sm_copy_gbs);
    gather.figures.push_back(std::move(bandwidth));
    return gather;
}

// The SM copy kernel and cudaMemcpyPeer, both directions at once, on the bytes the transport moves.
void baseline_cases(const TwoRankTransport& t, int32_t sms, const TimingOptions& timing, bool sweep,
                    std::vector<Case>& cases, Baselines& out) {
    const size_t bytes = nvlink_bytes_rounded(t);
    const double gigabytes = static_cast<double>(bytes) / kBytesPerGigabyte;
    Timer timer = make_timer(t);
    DeviceBuffer<uint8_t> scratch0(0, bytes);
    DeviceBuffer<uint8_t> scratch1(1, bytes);
    uint8_t* scratch[kRanks] = {scratch0.get(), scratch1.get()};

    Case copy;
    copy.name = "sm_copy/" + case_name(t.setup(), "", sms, sweep);
    copy.params.set("bytes_per_rank", bytes).set("sms", sms).set("method", "SM pull copy, 16-byte loads, 1024 threads");
    const TimingStats copy_stats = timer.time(
        [&](int) {
            both([&](int32_t r) {
                // Reads the peer's combine-row region: any bytes of its window will do.
                const auto& g = t.group(r);
                enqueue_sm_pull_copy(g.ranks[0].peers, 1 - r, g.window.combine_rows.offset, scratch[r], bytes, sms,
                                     t.stream(r));
            });
        },
        timing);
    copy.figures.push_back(time_figure("time", copy_stats));
    copy.figures.push_back(rate_figure("bandwidth", "GB/s", gigabytes, copy_stats));
    out.sm_copy_gbs = copy.figures.back().value;
    cases.push_back(std::move(copy));
    // The plain gather, and the bulk gather with as many issuers per block as the row copy's teams have.
    cases.push_back(gather_case(t, sms, timing, sweep, timer, out.sm_copy_gbs, 0));
    cases.push_back(
        gather_case(t, sms, timing, sweep, timer, out.sm_copy_gbs, static_cast<int32_t>(comm::kBulkIssuers)));
    cases.push_back(gather_case(t, sms, timing, sweep, timer, out.sm_copy_gbs, static_cast<int32_t>(comm::kBulkIssuers),
                                RowOrigin::kLocal));

    const bool peer_access = ceilings::enable_peer_access(0, 1);
    Case peer;
    peer.name = "memcpy_peer/" + case_name(t.setup(), "", sms, sweep);
    peer.params.set("bytes_per_rank", bytes).set("method", "cudaMemcpyPeerAsync both directions at once");
    peer.params.set("peer_access", peer_access);
    DeviceBuffer<uint8_t> target0(0, bytes);
    DeviceBuffer<uint8_t> target1(1, bytes);
    const TimingStats peer_stats = timer.time(
        [&](int) {
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
            MOK_BENCH_CHECK_CUDA(cudaMemcpyPeerAsync(target1.get(), 1, scratch0.get(), 0, bytes, t.stream(0)));
            MOK_BENCH_CHECK_CUDA(cudaSetDevice(1));
            MOK_BENCH_CHECK_CUDA(cudaMemcpyPeerAsync(target0.get(), 0, scratch1.get(), 1, bytes, t.stream(1)));
        },
        timing);
    peer.figures.push_back(time_figure("time", peer_stats));
    peer.figures.push_back(rate_figure("bandwidth", "GB/s", gigabytes, peer_stats));
    out.memcpy_peer_gbs = peer.figures.back().value;
    cases.push_back(std::move(peer));

    // all_to_all_single of [2 chunks] per rank: one chunk stays, one crosses NVLink, as the dispatch's rows do.
    Case a2a;
    a2a.name = "nccl_all_to_all/" + case_name(t.setup(), "", sms, sweep);
    a2a.params.set("bytes_leaving_each_rank", bytes).set("method", "ncclSend/ncclRecv to every rank in one group");
    DeviceBuffer<uint8_t> send0(0, 2 * bytes);
    DeviceBuffer<uint8_t> send1(1, 2 * bytes);
    DeviceBuffer<uint8_t> recv0(0, 2 * bytes);
    DeviceBuffer<uint8_t> recv1(1, 2 * bytes);
    uint8_t* send[kRanks] = {send0.get(), send1.get()};
    uint8_t* recv[kRanks] = {recv0.get(), recv1.get()};
    const TimingStats a2a_stats = timer.time(
        [&](int) {
            throw_unless_ok(comm::nccl_status(ncclGroupStart(), "ncclGroupStart"));
            for (int32_t r = 0; r < kRanks; ++r) {
                for (int32_t peer_rank = 0; peer_rank < kRanks; ++peer_rank) {
                    throw_unless_ok(comm::nccl_status(
                        ncclSend(send[r] + peer_rank * bytes, bytes, ncclUint8, peer_rank, t.comm(r), t.stream(r)),
                        "ncclSend"));
                    throw_unless_ok(comm::nccl_status(
                        ncclRecv(recv[r] + peer_rank * bytes, bytes, ncclUint8, peer_rank, t.comm(r), t.stream(r)),
                        "ncclRecv"));
                }
            }
            throw_unless_ok(comm::nccl_status(ncclGroupEnd(), "ncclGroupEnd"));
        },
        timing);
    a2a.figures.push_back(time_figure("time", a2a_stats));
    a2a.figures.push_back(rate_figure("bandwidth", "GB/s", gigabytes, a2a_stats));
    cases.push_back(std::move(a2a));
}

Case transport_case(const TwoRankTransport& t, const std::string& what, int32_t sms, int32_t local_sms,
                    const TimingOptions& timing, bool sweep, const Baselines& baselines,
                    const std::function<void(int32_t)>& enqueue) {
    Case c;
    c.name = case_name(t.setup(), what, sms, sweep);
    const comm::TransportMemory memory = comm::transport_memory(t.group(0).window, t.group(0).local);
    c.params.set("model", t.setup().model.name)
        .set("tokens_per_rank", t.setup().tokens_per_rank)
        .set("ep", kRanks)
        .set("sms_per_rank", sms)
        .set("local_row_sms_per_rank", local_sms)
        .set("routing", t.setup().routing == RoutingKind::kZipf ? "zipf" : "uniform")
        .set("seed", t.setup().seed)
        .set("nvlink_rows_rank0", t.remote_rows(0))
        .set("nvlink_rows_rank1", t.remote_rows(1))
        .set("pulled_nvlink_rows_rank0", t.remote_pulled_rows(0))
        .set("pulled_nvlink_rows_rank1", t.remote_pulled_rows(1));
    Timer timer = make_timer(t);
    const TimingStats stats = timer.time([&](int) { both(enqueue); }, timing);
    t.check_status();
    c.figures.push_back(time_figure("time", stats));
    Figure bandwidth = rate_figure("bandwidth", "GB/s", nvlink_gigabytes(t), stats);
    bandwidth.against("sm_copy", baselines.sm_copy_gbs);
    c.figures.push_back(fraction_figure("memcpy_peer_fraction", bandwidth, "memcpy_peer", baselines.memcpy_peer_gbs));
    c.figures.push_back(std::move(bandwidth));
    c.figures.push_back(value_figure("sms", "SMs", Better::kLower, sms));
    c.figures.push_back(value_figure("local_row_sms", "SMs", Better::kLower, local_sms));
    c.figures.push_back(value_figure("symmetric_memory", "GiB", Better::kLower, memory.symmetric_bytes / kBytesPerGiB));
    c.figures.push_back(value_figure("local_memory", "GiB", Better::kLower, memory.local_bytes / kBytesPerGiB));
    return c;
}

void shape_cases(const TransportSetup& setup, const std::vector<int32_t>& sms_list, const TimingOptions& timing,
                 std::vector<Case>& cases) {
    const TwoRankTransport t(setup);
    const bool sweep = sms_list.size() > 1;
    // Correctness first: one dispatch and one push, checked on sampled rows.
    both([&](int32_t r) {
        throw_unless_ok(comm::enqueue_dispatch(t.group(r), layout::TransportPass::kForward, layout::RingId::kTokens,
                                               kDefaultSms, t.stream(r)));
    });
    t.check_status();
    check_dispatch(t);
    const auto push_source = [&](int32_t r) {
        comm::PushSource source;
        source.out_rows = t.tensors(r).out_rows;
        source.out_ring_rows = t.group(r).local.plan.capacity_rows;
        return source;
    };
    both([&](int32_t r) {
        const comm::PushSource source = push_source(r);
        throw_unless_ok(
            comm::enqueue_push(t.group(r), layout::TransportPass::kForward, &source, kDefaultSms, t.stream(r)));
    });
    t.check_status();
    check_push(t);

    // The dispatch that pulls a token's rows once per group (comm::DispatchPull::kTokenGroups), against the default
    // that pulls every row on its own: the same ring bytes, fewer of them over NVLink.
    std::array<comm::LaunchGroup<comm::NcclPeers>, kRanks> token_groups = {t.group(0), t.group(1)};
    for (auto& g : token_groups) {
        g.dispatch_pull = comm::DispatchPull::kTokenGroups;
    }
    for (const int32_t sms : sms_list) {
        Baselines baselines;
        baseline_cases(t, sms, timing, sweep, cases, baselines);
        cases.push_back(transport_case(t, "dispatch_token_groups", sms, 0, timing, sweep, baselines, [&](int32_t r) {
            throw_unless_ok(comm::enqueue_dispatch(token_groups[r], layout::TransportPass::kForward,
                                                   layout::RingId::kTokens, comm::CopyBlocks{sms, 0}, t.stream(r)));
        }));
        // local 0: the NVLink SMs copy every row; otherwise the rows that stay on the GPU go to other SMs.
        for (const int32_t local : kLocalRowSms) {
            const std::string suffix = local == 0 ? "" : "_local" + std::to_string(local);
            const comm::CopyBlocks blocks{sms, local};
            cases.push_back(
                transport_case(t, "dispatch" + suffix, sms, local, timing, sweep, baselines, [&](int32_t r) {
                    throw_unless_ok(comm::enqueue_dispatch(t.group(r), layout::TransportPass::kForward,
                                                           layout::RingId::kTokens, blocks, t.stream(r)));
                }));
            cases.push_back(transport_case(t, "combine" + suffix, sms, local, timing, sweep, baselines, [&](int32_t r) {
                const comm::PushSource source = push_source(r);
                throw_unless_ok(
                    comm::enqueue_push(t.group(r), layout::TransportPass::kForward, &source, blocks, t.stream(r)));
            }));
        }
    }
}

void print_usage() {
    std::printf(
        "usage: mok-bench-transport [flags]\n"
        "Dispatch and combine bandwidth of mok's transport on GPUs 0 and 1 (DeepSeek-V3 and Qwen3.5 shapes, 4096\n"
        "tokens per rank, 16 SMs per rank; --full sweeps 8 to 32 SMs and adds Zipf routing), against an SM\n"
        "copy kernel, cudaMemcpyPeer and an NCCL all-to-all of the same bytes. Writes one JSON result.\n%s",
        common_options_help().c_str());
}

int run(const CommonOptions& options) {
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kDefaultWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? kQuickReps : kReps);
    const int visible = visible_gpu_count();
    if (visible == 0) {
        std::fprintf(stderr, "mok-bench-transport: no CUDA device visible\n");
        return 1;
    }
    Result result;
    result.run = collect_run_info("transport", std::min(visible, static_cast<int>(kRanks)));
    result.config.set("warmup", timing.num_warmup)
        .set("warmup_ms", timing.min_warmup_ms)
        .set("reps", timing.num_reps)
        .set("flush_l2", timing.flush_l2)
        .set("quick", options.quick)
        .set("full", options.full);
    if (visible < kRanks) {
        Case skipped;
        skipped.name = "transport";
        skipped.status = CaseStatus::kSkipped;
        skipped.note = "needs 2 GPUs, " + std::to_string(visible) + " visible";
        result.cases.push_back(std::move(skipped));
    } else {
        result.config.set("environment", environment_json(0));
        std::vector<TransportSetup> setups = {{kDeepSeekV3, kTokensPerRank, RoutingKind::kUniform, kSeed}};
        if (!options.quick) {
            setups.push_back({kQwen35, kTokensPerRank, RoutingKind::kUniform, kSeed});
        }
        if (options.full) {
            setups.push_back({kDeepSeekV3, kTokensPerRank, RoutingKind::kZipf, kSeed});
        }
        const std::vector<int32_t> sms_list = options.full ? kSmSweep : std::vector<int32_t>{kDefaultSms};
        for (const TransportSetup& setup : setups) {
            try {
                shape_cases(setup, sms_list, timing, result.cases);
            } catch (const std::exception& error) {
                Case failed;
                failed.name = case_name(setup, "setup", kDefaultSms, false);
                failed.status = CaseStatus::kFailed;
                failed.note = error.what();
                result.cases.push_back(std::move(failed));
            }
        }
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::transport

int main(int argc, char** argv) {
    using namespace mok::bench;
    return run_benchmark_main(argc, argv, "mok-bench-transport", transport::print_usage, transport::run);
}
