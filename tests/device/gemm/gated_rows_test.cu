// The pipelined path's gate on the rows a GEMM reads (RowGroups::tile_ready, docs/layer.md "Kernel sequence"):
// gate/up over rows whose 128-row tiles are published one by one, in an order the test chooses, gives the bits of
// the ungated run; flags that carry an earlier step's number never open it, and the launch then ends with a
// timeout naming the site instead of hanging.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/gemm/gemm_config.cuh"
#include "device/gemm/gemm_test_support.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/timer.cuh"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::test {
namespace {

// The number this step's flags carry; flags of an earlier step hold less.
constexpr uint64_t kSequence = 7;
// Time between two published tiles: long enough that the GEMM's CTAs reach tiles that are not there yet.
constexpr uint64_t kPublishGapNs = 20'000;
// SMs left to the publisher beside the GEMM's persistent grid.
constexpr int kPublisherSms = 2;

// A stand-in dispatch: publishes tile order[i] after i gaps, each with a release store (as the dispatch does
// once a tile's rows are stored).
__global__ void publish_tiles(uint64_t* ready, const int32_t* order, int32_t num_tiles, uint64_t sequence,
                              uint64_t gap_ns) {
    if (threadIdx.x != 0) {
        return;
    }
    for (int32_t i = 0; i < num_tiles; ++i) {
        const uint64_t until = ptx::global_timer_ns() + gap_ns;
        while (ptx::global_timer_ns() < until) {
        }
        ptx::st_release_gpu(&ready[order[i]], sequence);
    }
}

class GatedRows : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!has_gpu()) {
            GTEST_SKIP() << "no GPU";
        }
        std::mt19937_64 rng(kSeed);
        rows_ = make_row_space({200, 0, 129, 300, 1});
        x_ = random_rows(rows_, kHidden, Values::kRandom, kHidden, rng);
        const int64_t weights = static_cast<int64_t>(rows_.num_experts()) * kWidth * kHidden;
        gate_ = random_bf16(weights, Values::kRandom, kHidden, rng);
        up_ = random_bf16(weights, Values::kRandom, kHidden, rng);
        num_tiles_ = rows_.capacity_rows / 128;
    }

    struct Outputs {
        std::vector<Bf16> gu;
        std::vector<Bf16> h;
    };

    // Runs gate/up; with `ready`, gated on those flags while `publish` (if any) runs on a second stream.
    Outputs run(const DeviceRowSpace& d_rows, const DeviceBuffer<uint64_t>* ready, const std::vector<int32_t>* order,
                DeviceStatusRecord& status, uint64_t timeout_ns,
                gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        DeviceBuffer<Bf16> d_x(x_), d_gate(gate_), d_up(up_);
        DeviceBuffer<Bf16> d_gu(static_cast<size_t>(rows_.capacity_rows) * 2 * kWidth);
        DeviceBuffer<Bf16> d_h(static_cast<size_t>(rows_.capacity_rows) * kWidth);
        d_gu.fill_bytes(kPoisonByte);
        d_h.fill_bytes(kPoisonByte);
        DeviceBuffer<uint64_t> sequence(std::vector<uint64_t>{kSequence});
        // Allocated, and the publisher loaded, before the GEMM starts: either may wait for the device to go idle
        // (host/cuda/kernel_attributes.hpp), and the GEMM waits for the publisher launched after it.
        DeviceBuffer<int32_t> d_order(order != nullptr ? *order : std::vector<int32_t>{});
        EXPECT_TRUE(host::load_kernels<publish_tiles>("test publisher").is_ok());
        gemm::GroupedRowSpace space = d_rows.view();
        if (ready != nullptr) {
            space.groups.tile_ready = ready->get();
            space.groups.ready_sequence = sequence.get();
        }
        int num_sms = 0;
        EXPECT_EQ(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
        cudaStream_t gemm_stream = nullptr;
        cudaStream_t publish_stream = nullptr;
        EXPECT_EQ(cudaStreamCreateWithFlags(&gemm_stream, cudaStreamNonBlocking), cudaSuccess);
        EXPECT_EQ(cudaStreamCreateWithFlags(&publish_stream, cudaStreamNonBlocking), cudaSuccess);
        gemm::LaunchConfig launch = launch_with(status.get(), num_sms - kPublisherSms, arrangement);
        launch.stream = gemm_stream;
        launch.timeout_ns = timeout_ns;
        const gemm::GateUpArgs args{space,
                                    as_device_bf16(d_x),
                                    as_device_bf16(d_gate),
                                    as_device_bf16(d_up),
                                    as_device_bf16(d_gu),
                                    as_device_bf16(d_h),
                                    kHidden,
                                    kWidth};
        const Status s = gemm::gate_up_swiglu(args, launch);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        if (order != nullptr) {
            publish_tiles<<<1, 32, 0, publish_stream>>>(ready->get(), d_order.get(),
                                                        static_cast<int32_t>(order->size()), kSequence, kPublishGapNs);
            EXPECT_EQ(cudaGetLastError(), cudaSuccess);
        }
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaStreamDestroy(gemm_stream);
        cudaStreamDestroy(publish_stream);
        return {d_gu.download(), d_h.download()};
    }

    // The down projection's hand-off to the push (gemm::RowTilePublish): every used row tile ends published with
    // this step's number after all of its parts were stored (its N tiles; in the ping-pong arrangement each N tile's
    // two row halves), tiles past the used rows stay untouched, and the outputs are the bits of a run that publishes
    // nothing.
    void check_publication(gemm::Arrangement arrangement) {
        SCOPED_TRACE(name_of(arrangement));
        const DeviceRowSpace d_rows(rows_);
        std::mt19937_64 rng(kSeed + 1);
        constexpr int32_t kOutCols = 600;  // H: three N tiles, the last one partial
        const std::vector<Bf16> h = random_rows(rows_, kWidth, Values::kRandom, kWidth, rng);
        const std::vector<Bf16> w_down =
            random_bf16(static_cast<int64_t>(rows_.num_experts()) * kOutCols * kWidth, Values::kRandom, kWidth, rng);
        DeviceBuffer<Bf16> d_h(h), d_w(w_down);
        DeviceStatusRecord status;
        auto run = [&](const gemm::RowTilePublish& publish) {
            DeviceBuffer<Bf16> out(static_cast<size_t>(rows_.capacity_rows) * kOutCols);
            out.fill_bytes(kPoisonByte);
            const gemm::DownArgs args{d_rows.view(),
                                      as_device_bf16(d_h),
                                      as_device_bf16(d_w),
                                      as_device_bf16(out),
                                      kOutCols,
                                      nullptr,
                                      kOutCols,
                                      kWidth,
                                      publish};
            const Status s = gemm::down_projection(args, launch_with(status.get(), 0, arrangement));
            EXPECT_TRUE(s.is_ok()) << s.to_string();
            EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            return out.download();
        };
        const std::vector<Bf16> want = run({});
        // Counts start as garbage (the launch zeroes them); flags start at an earlier step's number.
        DeviceBuffer<uint32_t> counts(std::vector<uint32_t>(static_cast<size_t>(num_tiles_), 0xdeadbeefu));
        DeviceBuffer<uint64_t> ready(std::vector<uint64_t>(static_cast<size_t>(num_tiles_), kSequence - 1));
        DeviceBuffer<uint64_t> sequence(std::vector<uint64_t>{kSequence});
        const std::vector<Bf16> got = run({counts.get(), ready.get(), sequence.get()});
        ASSERT_EQ(status.read().code, 0);
        EXPECT_EQ(got, want);
        const std::vector<uint64_t> flags = ready.download();
        const std::vector<uint32_t> stored = counts.download();
        constexpr uint32_t kNTiles = (kOutCols + 255) / 256;
        const uint32_t parts =
            arrangement == gemm::Arrangement::kPingPong ? kNTiles * gemm::kPingPongClusterSize : kNTiles;
        for (int32_t t = 0; t < num_tiles_; ++t) {
            const bool used = t < rows_.padded_rows / 128;
            EXPECT_EQ(flags[t], used ? kSequence : kSequence - 1) << "row tile " << t;
            EXPECT_EQ(stored[t], used ? parts : 0u) << "row tile " << t;
        }
    }

    // The down projection storing straight into its rows' sources (gemm::SourceTargets, ForwardCombine::kDownStores):
    // every data row lands in its (rank, token * k + slot) combine row with the bits of the plain store, nothing
    // else of any rank's combine rows is written, and each data row's flag carries this step's number while the
    // other flags keep an earlier one. Three ranks' buffers on this GPU stand in for peer windows. With
    // `step_failed` the step's record (not the launch's, which stays clean so that the GEMM runs to the end) is
    // claimed before the launch: the rows may land, but no flag may be stored.
    void check_source_stores(gemm::Arrangement arrangement, bool step_failed) {
        SCOPED_TRACE(name_of(arrangement) + std::string(step_failed ? ", failed step" : ""));
        const DeviceRowSpace d_rows(rows_);
        std::mt19937_64 rng(kSeed + 2);
        constexpr int32_t kOutCols = 600;  // H: three N tiles, the last one partial
        constexpr int32_t kRanks = 3;
        const std::vector<Bf16> h = random_rows(rows_, kWidth, Values::kRandom, kWidth, rng);
        const std::vector<Bf16> w_down =
            random_bf16(static_cast<int64_t>(rows_.num_experts()) * kOutCols * kWidth, Values::kRandom, kWidth, rng);
        DeviceBuffer<Bf16> d_h(h), d_w(w_down);
        DeviceStatusRecord status;

        // Each data row goes to a random rank, at a slot of that rank's own shuffled numbering; slots past a rank's
        // rows stay unwritten, and so do the padding rows.
        std::vector<plan::RowSource> sources(static_cast<size_t>(rows_.capacity_rows), plan::RowSource::padding());
        std::vector<int32_t> slots_of(kRanks, 0);
        for (int32_t r = 0; r < rows_.capacity_rows; ++r) {
            if (rows_.holds_data(r)) {
                const auto rank = static_cast<int32_t>(rng() % kRanks);
                sources[r] = {rank, slots_of[rank]++};
            }
        }
        const int32_t num_slots = *std::max_element(slots_of.begin(), slots_of.end()) + 1;
        for (int32_t rank = 0; rank < kRanks; ++rank) {
            std::vector<int32_t> permutation(static_cast<size_t>(slots_of[rank]));
            std::iota(permutation.begin(), permutation.end(), 0);
            std::shuffle(permutation.begin(), permutation.end(), rng);
            for (plan::RowSource& s : sources) {
                if (s.src_rank == rank) {
                    s.token_slot = permutation[s.token_slot];
                }
            }
        }
        DeviceBuffer<plan::RowSource> d_sources(sources);

        DeviceBuffer<Bf16> plain(static_cast<size_t>(rows_.capacity_rows) * kOutCols);
        const gemm::DownArgs plain_args{
            d_rows.view(), as_device_bf16(d_h), as_device_bf16(d_w), as_device_bf16(plain), kOutCols, nullptr, kOutCols,
            kWidth};
        ASSERT_TRUE(gemm::down_projection(plain_args, launch_with(status.get(), 0, arrangement)).is_ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<Bf16> want = plain.download();

        std::vector<std::unique_ptr<DeviceBuffer<Bf16>>> rank_rows;
        std::vector<std::unique_ptr<DeviceBuffer<uint64_t>>> rank_flags;
        std::vector<__nv_bfloat16*> row_ptrs;
        std::vector<uint64_t*> flag_ptrs;
        for (int32_t rank = 0; rank < kRanks; ++rank) {
            rank_rows.push_back(std::make_unique<DeviceBuffer<Bf16>>(static_cast<size_t>(num_slots) * kOutCols));
            rank_rows.back()->fill_bytes(kPoisonByte);
            rank_flags.push_back(std::make_unique<DeviceBuffer<uint64_t>>(
                std::vector<uint64_t>(static_cast<size_t>(num_slots), kSequence - 1)));
            row_ptrs.push_back(as_device_bf16(*rank_rows.back()));
            flag_ptrs.push_back(rank_flags.back()->get());
        }
        DeviceBuffer<__nv_bfloat16*> d_row_ptrs(row_ptrs);
        DeviceBuffer<uint64_t*> d_flag_ptrs(flag_ptrs);
        DeviceBuffer<uint32_t> counts(std::vector<uint32_t>(static_cast<size_t>(num_tiles_), 0xdeadbeefu));
        DeviceBuffer<uint64_t> sequence(std::vector<uint64_t>{kSequence});
        gemm::DownArgs args = plain_args;
        args.out = nullptr;
        args.publish = {counts.get(), nullptr, sequence.get()};
        DeviceBuffer<DeviceStatus> step_status(std::vector<DeviceStatus>{
            {static_cast<int32_t>(step_failed ? DeviceErrorCode::kTimeout : DeviceErrorCode::kNone), 0, 0, 0, 0, 0}});
        args.to_sources = {d_sources.get(), d_row_ptrs.get(), d_flag_ptrs.get(), step_status.get()};
        const Status s = gemm::down_projection(args, launch_with(status.get(), 0, arrangement));
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(status.read().code, 0);

        std::vector<std::vector<Bf16>> got_rows;
        std::vector<std::vector<uint64_t>> got_flags;
        for (int32_t rank = 0; rank < kRanks; ++rank) {
            got_rows.push_back(rank_rows[rank]->download());
            got_flags.push_back(rank_flags[rank]->download());
        }
        std::vector<std::vector<bool>> written(kRanks, std::vector<bool>(static_cast<size_t>(num_slots), false));
        for (int32_t r = 0; r < rows_.capacity_rows; ++r) {
            const plan::RowSource src = sources[r];
            if (src.is_padding()) {
                continue;
            }
            written[src.src_rank][src.token_slot] = true;
            if (step_failed) {
                continue;
            }
            const auto got = got_rows[src.src_rank].begin() + static_cast<int64_t>(src.token_slot) * kOutCols;
            const auto expected = want.begin() + static_cast<int64_t>(r) * kOutCols;
            EXPECT_TRUE(std::equal(expected, expected + kOutCols, got)) << "row " << r;
        }
        const Bf16 poison{static_cast<uint16_t>(kPoisonByte << 8 | kPoisonByte)};
        for (int32_t rank = 0; rank < kRanks; ++rank) {
            for (int32_t slot = 0; slot < num_slots; ++slot) {
                const bool data = written[rank][slot];
                EXPECT_EQ(got_flags[rank][slot], data && !step_failed ? kSequence : kSequence - 1)
                    << "rank " << rank << " slot " << slot;
                if (!data) {
                    const auto row = got_rows[rank].begin() + static_cast<int64_t>(slot) * kOutCols;
                    EXPECT_TRUE(std::all_of(row, row + kOutCols, [&](Bf16 v) { return v == poison; }))
                        << "rank " << rank << " slot " << slot << " was written";
                }
            }
        }
    }

    static constexpr uint64_t kSeed = 0x6a7ed5ull;
    static constexpr int32_t kHidden = 384;
    static constexpr int32_t kWidth = 264;
    RowSpace rows_;
    std::vector<Bf16> x_, gate_, up_;
    int32_t num_tiles_ = 0;
};

TEST_F(GatedRows, TilesPublishedInAnyOrderGiveTheUngatedBits) {
    const DeviceRowSpace d_rows(rows_);
    DeviceStatusRecord status;
    const Outputs want = run(d_rows, nullptr, nullptr, status, gemm::LaunchConfig{}.timeout_ns);
    ASSERT_EQ(status.read().code, 0);

    std::vector<int32_t> reversed(static_cast<size_t>(num_tiles_));
    std::iota(reversed.rbegin(), reversed.rend(), 0);
    std::vector<int32_t> shuffled = reversed;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(kSeed));
    for (gemm::Arrangement arrangement : kAllArrangements) {
        for (const std::vector<int32_t>* order : {&reversed, &shuffled}) {
            SCOPED_TRACE(name_of(arrangement));
            // Flags of an earlier step must not count: the tiles start one number short.
            DeviceBuffer<uint64_t> ready(std::vector<uint64_t>(static_cast<size_t>(num_tiles_), kSequence - 1));
            status.reset();
            const Outputs got = run(d_rows, &ready, order, status, gemm::LaunchConfig{}.timeout_ns, arrangement);
            EXPECT_EQ(status.read().code, 0);
            EXPECT_EQ(got.gu, want.gu);
            EXPECT_EQ(got.h, want.h);
        }
    }
}

TEST_F(GatedRows, FlagsOfAnEarlierStepEndTheLaunchWithATimeout) {
    const DeviceRowSpace d_rows(rows_);
    DeviceStatusRecord status;
    DeviceBuffer<uint64_t> ready(std::vector<uint64_t>(static_cast<size_t>(num_tiles_), kSequence - 1));
    constexpr uint64_t kTimeoutNs = 50'000'000;  // 50 ms: the test waits for it once per arrangement
    // The ping-pong arrangement's cluster barriers and cross-CTA stage releases must end the launch too, and so must
    // the epilogue warps, which wait for consumers that gave up.
    for (gemm::Arrangement arrangement : kAllArrangements) {
        SCOPED_TRACE(name_of(arrangement));
        status.reset();
        run(d_rows, &ready, nullptr, status, kTimeoutNs, arrangement);
        const DeviceStatus record = status.read();
        EXPECT_EQ(record.code, static_cast<int32_t>(DeviceErrorCode::kTimeout));
        EXPECT_EQ(record.site, static_cast<int32_t>(WaitSite::kRowsReady));
        EXPECT_EQ(record.expected, static_cast<int64_t>(kSequence));
        EXPECT_EQ(record.observed, static_cast<int64_t>(kSequence - 1));
    }
}

TEST_F(GatedRows, DownProjectionStoresRowsAtTheirSources) {
    for (const gemm::Arrangement arrangement : kAllArrangements) {
        check_source_stores(arrangement, false);
    }
}

TEST_F(GatedRows, DownProjectionStoresNoFlagsForAFailedStep) {
    for (const gemm::Arrangement arrangement : kAllArrangements) {
        check_source_stores(arrangement, true);
    }
}

TEST_F(GatedRows, DownProjectionPublishesEveryRowTileOnceStored) {
    for (const gemm::Arrangement arrangement : kAllArrangements) {
        check_publication(arrangement);
    }
}

}  // namespace
}  // namespace mok::test
