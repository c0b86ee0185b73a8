#include "device/gemm/gemm_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "common/fp32_ops.hpp"
#include "reference/tolerance.hpp"

namespace mok::test {
namespace {

constexpr int32_t kTileRows = 128;  // the plan's row alignment and the GEMM's BLOCK_M

}  // namespace

int32_t RowSpace::expert_of(int32_t row) const {
    if (row < 0 || row >= padded_rows) {
        return -1;
    }
    return tile_expert[row / kTileRows];
}

bool RowSpace::holds_data(int32_t row) const {
    const int32_t e = expert_of(row);
    return e >= 0 && row - segment_begin[e] < rows_per_expert[e];
}

RowSpace make_row_space(const std::vector<int32_t>& rows_per_expert, int32_t spare_tiles) {
    RowSpace rows;
    rows.rows_per_expert = rows_per_expert;
    int32_t running = 0;
    for (size_t e = 0; e < rows_per_expert.size(); ++e) {
        rows.segment_begin.push_back(running);
        const int32_t padded = (rows_per_expert[e] + kTileRows - 1) / kTileRows * kTileRows;
        for (int32_t t = 0; t < padded / kTileRows; ++t) {
            rows.tile_expert.push_back(static_cast<int32_t>(e));
        }
        running += padded;
    }
    rows.padded_rows = running;
    rows.capacity_rows = running + spare_tiles * kTileRows;
    for (int32_t t = 0; t < spare_tiles; ++t) {
        rows.tile_expert.push_back(-1);
    }
    return rows;
}

DeviceRowSpace::DeviceRowSpace(const RowSpace& rows)
    : num_padded_rows(std::vector<int32_t>{rows.padded_rows}),
      tile_expert(rows.tile_expert),
      segment_begin(rows.segment_begin),
      segment_rows(rows.rows_per_expert),
      capacity_rows(rows.capacity_rows),
      num_experts(rows.num_experts()) {}

gemm::GroupedRowSpace DeviceRowSpace::view() const {
    return {{num_padded_rows.get(), tile_expert.get(), segment_begin.get(), segment_rows.get()},
            capacity_rows,
            num_experts};
}

std::vector<Bf16> random_bf16(size_t count, Values values, int64_t fan_in, std::mt19937_64& rng) {
    std::vector<Bf16> out(count);
    if (values == Values::kExact) {
        // Integers in [-4, 4] times 2^-3: products are multiples of 2^-6 below 2^-2, so a sum of up to 2^20 of
        // them needs at most 20 + 6 + 2 bits -- exact in fp32's 24.
        constexpr float kScale = 0.125f;
        std::uniform_int_distribution<int> pick(-4, 4);
        for (auto& v : out) {
            int n = pick(rng);
            if (n == 0) {
                n = 1;  // keep data free of zeros, so an unwritten output cannot pass for a computed one
            }
            v = Bf16::from_float(static_cast<float>(n) * kScale);
        }
    } else {
        std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
        for (auto& v : out) {
            v = Bf16::from_float(pick(rng) * scale);
        }
    }
    return out;
}

std::vector<Bf16> random_rows(const RowSpace& rows, int64_t cols, Values values, int64_t fan_in, std::mt19937_64& rng) {
    std::vector<Bf16> out = random_bf16(static_cast<size_t>(rows.capacity_rows) * cols, values, fan_in, rng);
    const Bf16 nan{0x7fc0};
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        if (!rows.holds_data(r)) {
            std::fill_n(out.begin() + static_cast<int64_t>(r) * cols, cols, nan);
        }
    }
    return out;
}

std::vector<float> random_weights(const RowSpace& rows, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> pick(-1.5f, 1.5f);
    std::vector<float> out(rows.capacity_rows);
    for (int32_t r = 0; r < rows.capacity_rows; ++r) {
        // Every seventh row gets weight 0: its dx and dW contributions vanish, its router gradient must not.
        out[r] = !rows.holds_data(r) ? NAN : (r % 7 == 3 ? 0.0f : pick(rng));
    }
    return out;
}

std::vector<int32_t> rows_to_check(const RowSpace& rows, int64_t work_per_row, std::mt19937_64& rng) {
    constexpr int64_t kFullCheckWork = int64_t{1} << 31;  // multiply-adds the CPU references do in a second or so
    constexpr int kSampledRowsPerExpert = 12;
    std::set<int32_t> picked;
    int64_t total = 0;
    for (int32_t e = 0; e < rows.num_experts(); ++e) {
        total += rows.rows_per_expert[e];
    }
    const bool all = total * work_per_row <= kFullCheckWork;
    for (int32_t e = 0; e < rows.num_experts(); ++e) {
        const int32_t n = rows.rows_per_expert[e];
        if (n == 0) {
            continue;
        }
        const int32_t begin = rows.segment_begin[e];
        if (all) {
            for (int32_t r = 0; r < n; ++r) {
                picked.insert(begin + r);
            }
            continue;
        }
        picked.insert(begin);
        picked.insert(begin + n - 1);
        std::uniform_int_distribution<int32_t> pick(0, n - 1);
        for (int i = 0; i < kSampledRowsPerExpert; ++i) {
            picked.insert(begin + pick(rng));
        }
    }
    return {picked.begin(), picked.end()};
}

double dot_f64(const Bf16* a, int64_t a_stride, const Bf16* b, int64_t b_stride, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        sum += static_cast<double>(a[i * a_stride].to_float()) * static_cast<double>(b[i * b_stride].to_float());
    }
    return sum;
}

float dot_f32(const Bf16* a, int64_t a_stride, const Bf16* b, int64_t b_stride, int64_t n, float init) {
    float sum = init;
    for (int64_t i = 0; i < n; ++i) {
        sum = fp32::fma(a[i * a_stride].to_float(), b[i * b_stride].to_float(), sum);
    }
    return sum;
}

void Comparison::add(double got, double same_precision, double oracle) {
    got_.push_back(got);
    same_.push_back(same_precision);
    oracle_.push_back(oracle);
}

void Comparison::resize(size_t n) {
    got_.resize(n);
    same_.resize(n);
    oracle_.resize(n);
}

void Comparison::set(size_t i, double got, double same_precision, double oracle) {
    got_[i] = got;
    same_[i] = same_precision;
    oracle_[i] = oracle;
}

void Comparison::expect_bitwise() const {
    ASSERT_FALSE(got_.empty()) << what_ << ": nothing was compared";
    size_t mismatches = 0;
    size_t first = got_.size();
    for (size_t i = 0; i < got_.size(); ++i) {
        if (std::memcmp(&got_[i], &same_[i], sizeof(double)) != 0) {
            if (mismatches++ == 0) {
                first = i;
            }
        }
    }
    EXPECT_EQ(mismatches, 0u) << what_ << ": " << mismatches << " of " << got_.size() << " elements differ; first at "
                              << first << ": got " << (first < got_.size() ? got_[first] : 0.0) << ", expected "
                              << (first < got_.size() ? same_[first] : 0.0);
}

void Comparison::expect_within_tolerance() const {
    ASSERT_FALSE(got_.empty()) << what_ << ": nothing was compared";
    const tolerance::Verdict v = tolerance::judge(got_, same_, oracle_);
    EXPECT_TRUE(v.pass) << what_ << ": " << v.describe();
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
    const int64_t num_threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), n));
    std::vector<std::thread> threads;
    for (int64_t t = 0; t < num_threads; ++t) {
        threads.emplace_back([&, t] {
            for (int64_t i = t; i < n; i += num_threads) {
                body(i);
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
}

bool is_poison(Bf16 v) {
    return v.bits == 0xffff;
}

std::vector<GemmShape> test_shapes(int32_t narrow_width) {
    const std::vector<int32_t> odd_rows = {0, 1, 77, 128, 129, 300, 5};
    const std::vector<int32_t> model_rows = {130, 0, 1, 257};
    return {
        {200, 136, odd_rows},     {72, narrow_width, {3, 0, 129}}, {7168, 2048, model_rows}, {6144, 2048, model_rows},
        {4096, 1024, model_rows}, {7168, 3072, model_rows},        {4096, 1536, model_rows},
    };
}

void expect_agreement(Values values, std::initializer_list<const Comparison*> comparisons) {
    for (const Comparison* c : comparisons) {
        values == Values::kExact ? c->expect_bitwise() : c->expect_within_tolerance();
    }
}

void for_each_shape_and_values(int32_t narrow_width,
                               const std::function<void(const GemmShape&, Values, uint64_t)>& check) {
    uint64_t seed = std::random_device{}();
    for (const GemmShape& shape : test_shapes(narrow_width)) {
        for (Values values : {Values::kExact, Values::kRandom}) {
            check(shape, values, seed++);
        }
    }
}

std::string describe(const GemmShape& shape, Values values) {
    return "H " + std::to_string(shape.hidden) + " I " + std::to_string(shape.width) +
           (values == Values::kExact ? " exact" : " random");
}

const char* name_of(gemm::Arrangement arrangement) {
    switch (arrangement) {
        case gemm::Arrangement::kCooperative:
            return "cooperative";
        case gemm::Arrangement::kPingPong:
            return "ping-pong";
        case gemm::Arrangement::kEpilogueWarps:
            return "epilogue warps";
    }
    return "unknown arrangement";
}

void for_each_other_arrangement(const std::function<void(gemm::Arrangement, int)>& run_and_check) {
    const auto each = [&](gemm::Arrangement arrangement, const auto& sm_counts) {
        for (const int num_sms : sm_counts) {
            SCOPED_TRACE(std::string(name_of(arrangement)) + " on " + std::to_string(num_sms) + " SMs");
            run_and_check(arrangement, num_sms);
        }
    };
    each(gemm::Arrangement::kPingPong, kPingPongSmCounts);
    each(gemm::Arrangement::kEpilogueWarps, kEpilogueWarpsSmCounts);
}

void expect_same_bits_on_other_grids(int few_sms, const std::function<void(int, gemm::Arrangement)>& run,
                                     const std::function<void()>& expect_first_bits) {
    run(few_sms, gemm::Arrangement::kCooperative);
    expect_first_bits();
    for_each_other_arrangement([&](gemm::Arrangement arrangement, int num_sms) {
        run(num_sms, arrangement);
        expect_first_bits();
    });
}

gemm::LaunchConfig launch_with(DeviceStatus* status, int num_sms, gemm::Arrangement arrangement) {
    // One word for the whole test program: its launches run one after another on the default stream.
    static uint32_t* const wave_counter = [] {
        void* word = nullptr;
        if (cudaMalloc(&word, sizeof(uint32_t)) != cudaSuccess) {
            ADD_FAILURE() << "cudaMalloc of the tests' wave counter failed";
            return static_cast<uint32_t*>(nullptr);
        }
        return static_cast<uint32_t*>(word);
    }();
    gemm::LaunchConfig launch;
    launch.status = status;
    launch.num_sms = num_sms;
    launch.wave_counter = num_sms == 0 ? wave_counter : nullptr;
    launch.arrangement = arrangement;
    return launch;
}

}  // namespace mok::test
