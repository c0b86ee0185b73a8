// Shared pieces of the grouped GEMM tests: expert row spaces, operand generation, CPU references of each form
// in fp64 (the oracle) and in the contract's precision (fp32 accumulation, bf16 storage), and comparisons
// through the one tolerance model (reference/tolerance.hpp).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "device/common/device_buffer.hpp"
#include "device/gemm/grouped_gemm.hpp"

namespace mok::test {

// The expert-major row space of a grouped GEMM: segments padded to 128 rows, then `spare_tiles` unused tiles
// (the kernels must leave them alone).
struct RowSpace {
    std::vector<int32_t> rows_per_expert;
    std::vector<int32_t> segment_begin;
    std::vector<int32_t> tile_expert;
    int32_t padded_rows = 0;
    int32_t capacity_rows = 0;

    int32_t num_experts() const { return static_cast<int32_t>(rows_per_expert.size()); }
    // The local expert whose segment holds `row`, or -1 past the used rows.
    int32_t expert_of(int32_t row) const;
    bool holds_data(int32_t row) const;
};

RowSpace make_row_space(const std::vector<int32_t>& rows_per_expert, int32_t spare_tiles = 1);

// The row space's tables in device memory.
struct DeviceRowSpace {
    explicit DeviceRowSpace(const RowSpace& rows);
    gemm::GroupedRowSpace view() const;

    DeviceBuffer<int32_t> num_padded_rows;
    DeviceBuffer<int32_t> tile_expert;
    DeviceBuffer<int32_t> segment_begin;
    DeviceBuffer<int32_t> segment_rows;
    int32_t capacity_rows;
    int32_t num_experts;
};

// How operands are drawn.
enum class Values {
    kExact,   // small integers times 2^-3: every product and every fp32 sum of a test GEMM is exact
    kRandom,  // uniform bf16 scaled by 1/sqrt(fan_in), as real activations and weights are
};

std::vector<Bf16> random_bf16(size_t count, Values values, int64_t fan_in, std::mt19937_64& rng);
// Row-space operand: data rows drawn at random, every other row NaN (they must never be read as data).
std::vector<Bf16> random_rows(const RowSpace& rows, int64_t cols, Values values, int64_t fan_in, std::mt19937_64& rng);
std::vector<float> random_weights(const RowSpace& rows, std::mt19937_64& rng);  // router weights, both signs

inline const __nv_bfloat16* as_device_bf16(const DeviceBuffer<Bf16>& b) {
    return reinterpret_cast<const __nv_bfloat16*>(b.get());
}
inline __nv_bfloat16* as_device_bf16(DeviceBuffer<Bf16>& b) {
    return reinterpret_cast<__nv_bfloat16*>(b.get());
}

// The rows a test checks: every data row when the problem is small, else each expert's first and last rows
// and a random sample (rows are independent in the grouped forms, so a sample checks the same code paths).
std::vector<int32_t> rows_to_check(const RowSpace& rows, int64_t work_per_row, std::mt19937_64& rng);

// Dot products over n elements with strides, in fp64 and in sequential fp32 fma (the same-precision reference).
double dot_f64(const Bf16* a, int64_t a_stride, const Bf16* b, int64_t b_stride, int64_t n);
float dot_f32(const Bf16* a, int64_t a_stride, const Bf16* b, int64_t b_stride, int64_t n, float init = 0.0f);

// Collects (got, same-precision reference, oracle) triples and judges them with reference/tolerance.hpp, or
// demands bitwise equality of got and the same-precision reference (exact inputs).
class Comparison {
  public:
    explicit Comparison(std::string what) : what_(std::move(what)) {}
    void add(double got, double same_precision, double oracle);
    // For checks that fill their elements from several threads: grow to `n` elements, then set each index once.
    void resize(size_t n);
    void set(size_t i, double got, double same_precision, double oracle);
    // Exact inputs: every got must equal its same-precision reference bit for bit.
    void expect_bitwise() const;
    void expect_within_tolerance() const;
    size_t size() const { return got_.size(); }

  private:
    std::string what_;
    std::vector<double> got_;
    std::vector<double> same_;
    std::vector<double> oracle_;
};

// Judges each comparison as its inputs allow: bit for bit on exact values, by the tolerance model on random ones.
void expect_agreement(Values values, std::initializer_list<const Comparison*> comparisons);

// Runs `body` on `num_threads` threads over [0, n): keeps the CPU references of large shapes quick.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

bool is_poison(Bf16 v);

// A grouped GEMM problem of the tests: widths and the rows of each local expert.
struct GemmShape {
    int32_t hidden;
    int32_t width;
    std::vector<int32_t> rows_per_expert;
};

// Odd sizes -- K and N not multiples of the tiles, empty and one-row experts, a two-tile expert with one row in
// its second tile, a narrow problem of width `narrow_width` -- and every (H, I) of the model table with small
// row counts.
std::vector<GemmShape> test_shapes(int32_t narrow_width);

std::string describe(const GemmShape& shape, Values values);

// Calls `check(shape, values, seed)` for every shape of test_shapes(narrow_width), on exact and on random values,
// each call with its own seed (consecutive from a fresh random one, named by each check's trace).
void for_each_shape_and_values(int32_t narrow_width,
                               const std::function<void(const GemmShape&, Values, uint64_t)>& check);

// A launch on `num_sms` SMs (0: all) reporting to `status`. On all SMs it aligns its waves (a wave counter, as
// the layer's launches do); on a given number it does not, so every "any grid gives the same bits" check also
// compares wave alignment on and off. `arrangement` picks the M-grouped forms' kernel: the tests run both and
// compare their bits.
gemm::LaunchConfig launch_with(DeviceStatus* status, int num_sms,
                               gemm::Arrangement arrangement = gemm::Arrangement::kCooperative);

// The ping-pong launches each check makes after the cooperative ones, on all SMs and on a few. A launch on fewer
// SMs than the device has leaves one per GPC to other kernels: on 5 it runs one cluster, whose warpgroups then take
// many turns each.
inline constexpr int kPingPongSmCounts[] = {0, 5};

// The epilogue-warps launches each check makes: on all SMs (waves aligned) and on a few, where each CTA hands off
// many tiles.
inline constexpr int kEpilogueWarpsSmCounts[] = {0, 3};

// Every arrangement; gate/up, down and dgrad_gate_up run in all of them.
inline constexpr gemm::Arrangement kAllArrangements[] = {gemm::Arrangement::kCooperative, gemm::Arrangement::kPingPong,
                                                         gemm::Arrangement::kEpilogueWarps};

const char* name_of(gemm::Arrangement arrangement);

// Calls `run_and_check(arrangement, num_sms)` for the ping-pong arrangement on kPingPongSmCounts and the epilogue
// warps on kEpilogueWarpsSmCounts, each under a trace naming both: the checks that a form gives the cooperative
// kernel's bits in every other arrangement that serves it.
void for_each_other_arrangement(const std::function<void(gemm::Arrangement, int)>& run_and_check);

// After a form's first run on all SMs (cooperative): runs it again on `few_sms` SMs, then in every other
// arrangement (for_each_other_arrangement), and after each run calls `expect_first_bits`, which compares the outputs
// with the first run's: any grid and any arrangement give the same bits.
void expect_same_bits_on_other_grids(int few_sms, const std::function<void(int, gemm::Arrangement)>& run,
                                     const std::function<void()>& expect_first_bits);

}  // namespace mok::test
