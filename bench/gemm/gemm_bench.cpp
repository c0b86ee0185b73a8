// mok-bench-gemm: the grouped GEMM engine's forms on every (H, I) of the model table at 128, 512, 2048 and
// 4096 rows per expert, against dense cuBLAS of the same (M, N, K) measured in this run (and, through the run
// id, torch._grouped_mm measured by bench/baselines in the same runner invocation).
//
// Each case runs its form once and checks sampled outputs against a CPU fp64 dot product through the
// tolerance model before timing. The experts of a case are the local experts of EP 8 (E / 8), capped at
// kMaxRows rows in all -- the same groups as the torch._grouped_mm baseline, whose cases pair with these by name.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/bench.hpp"
#include "bench/common/buffers.hpp"
#include "common/bf16.hpp"
#include "common/device_status.hpp"
#include "device/gemm/grouped_gemm.hpp"
#include "reference/tolerance.hpp"

namespace mok::bench::gemm_bench {
namespace {

// The groups of a case: the local experts of a full node (EP 8), at most kMaxRows rows in all.
constexpr int32_t kEpForGroups = 8;
constexpr int32_t kMaxRows = 65536;
constexpr int32_t kRowAlignment = 128;
constexpr double kFlopsPerMultiplyAdd = 2.0;
// Accumulate mode reads and writes each fp32 main_grad element once: the traffic its bandwidth figure counts,
// comparable with the device copy's (read + write).
constexpr double kMainGradBytesMoved = 2.0 * sizeof(float);
constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr int kCheckedRows = 3;
constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;

struct ModelShape {
    std::string name;
    int32_t num_experts;  // E, of the whole model
    int32_t hidden;
    int32_t width;
};

// The model table of the brief.
std::vector<ModelShape> model_shapes() {
    return {{"kimi-k2.7-code", 384, 7168, 2048},    {"glm-5.2", 256, 6144, 2048},
            {"qwen3.5-397b-a17b", 512, 4096, 1024}, {"deepseek-v4-pro", 384, 7168, 3072},
            {"deepseek-v3", 256, 7168, 2048},       {"qwen3-235b-a22b", 128, 4096, 1536}};
}

int32_t groups_for(const ModelShape& shape, int32_t rows_per_expert) {
    return std::max(1, std::min(shape.num_experts / kEpForGroups, kMaxRows / rows_per_expert));
}

void check_status(const Status& s) {
    if (!s.is_ok()) {
        throw std::runtime_error(s.to_string());
    }
}

template <typename T>
std::vector<T> download(const T* device, size_t offset, size_t count) {
    std::vector<T> host(count);
    MOK_BENCH_CHECK_CUDA(cudaMemcpy(host.data(), device + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

// All buffers of one (shape, rows per expert) point.
struct Problem {
    Problem(const ModelShape& shape, int32_t rows_per_expert, cudaStream_t stream)
        : hidden(shape.hidden),
          width(shape.width),
          num_experts(groups_for(shape, rows_per_expert)),
          rows(num_experts * rows_per_expert),
          x(0, static_cast<size_t>(rows) * hidden),
          dy(0, static_cast<size_t>(rows) * hidden),
          dys(0, static_cast<size_t>(rows) * hidden),
          out(0, static_cast<size_t>(rows) * hidden),
          gu(0, static_cast<size_t>(rows) * 2 * width),
          dgu(0, static_cast<size_t>(rows) * 2 * width),
          h(0, static_cast<size_t>(rows) * width),
          w_gate(0, static_cast<size_t>(num_experts) * width * hidden),
          w_up(0, static_cast<size_t>(num_experts) * width * hidden),
          w_down(0, static_cast<size_t>(num_experts) * hidden * width),
          fresh(0, static_cast<size_t>(num_experts) * width * hidden),
          fresh_up(0, static_cast<size_t>(num_experts) * width * hidden),
          d_gate(0, static_cast<size_t>(num_experts) * width * hidden),
          d_up(0, static_cast<size_t>(num_experts) * width * hidden),
          d_down(0, static_cast<size_t>(num_experts) * hidden * width),
          row_weight(0, rows),
          partials(0, static_cast<size_t>(rows) * gemm::router_partial_tiles(width)),
          d_router(0, rows),
          tables(0, 1 + rows / kRowAlignment + 2 * num_experts),
          status(0, 1),
          wave_counter(0, 1) {
        const float input_scale = 1.0f / std::sqrt(static_cast<float>(hidden));
        const float width_scale = 1.0f / std::sqrt(static_cast<float>(width));
        uint64_t seed = kSeed;
        fill_uniform(x.get(), x.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(dy.get(), dy.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(gu.get(), gu.count(), -2.0f, 2.0f, seed++, stream);
        fill_uniform(dgu.get(), dgu.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(h.get(), h.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(dys.get(), dys.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(w_gate.get(), w_gate.count(), -input_scale, input_scale, seed++, stream);
        fill_uniform(w_up.get(), w_up.count(), -input_scale, input_scale, seed++, stream);
        fill_uniform(w_down.get(), w_down.count(), -width_scale, width_scale, seed++, stream);
        fill_uniform(d_gate.get(), d_gate.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(d_up.get(), d_up.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(d_down.get(), d_down.count(), -1.0f, 1.0f, seed++, stream);
        fill_uniform(row_weight.get(), row_weight.count(), -1.0f, 1.0f, seed++, stream);
        // The row space: num_experts segments of rows_per_expert rows each (a multiple of 128: no padding).
        std::vector<int32_t> host_tables(tables.count());
        host_tables[0] = rows;
        for (int32_t t = 0; t < rows / kRowAlignment; ++t) {
            host_tables[1 + t] = t * kRowAlignment / rows_per_expert;
        }
        for (int32_t e = 0; e < num_experts; ++e) {
            host_tables[1 + rows / kRowAlignment + e] = e * rows_per_expert;
            host_tables[1 + rows / kRowAlignment + num_experts + e] = rows_per_expert;
        }
        MOK_BENCH_CHECK_CUDA(cudaMemcpy(tables.get(), host_tables.data(), tables.bytes(), cudaMemcpyHostToDevice));
        MOK_BENCH_CHECK_CUDA(cudaMemset(status.get(), 0, status.bytes()));
        MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
        const int32_t* t = tables.get();
        space = {
            {t, t + 1, t + 1 + rows / kRowAlignment, t + 1 + rows / kRowAlignment + num_experts}, rows, num_experts};
    }

    int32_t hidden;
    int32_t width;
    int32_t num_experts;
    int32_t rows;
    DeviceBuffer<__nv_bfloat16> x, dy, dys, out, gu, dgu, h, w_gate, w_up, w_down;
    DeviceBuffer<__nv_bfloat16> fresh, fresh_up;  // bf16 weight gradients of the checks before timing
    DeviceBuffer<float> d_gate, d_up, d_down, row_weight, partials, d_router;
    DeviceBuffer<int32_t> tables;
    DeviceBuffer<DeviceStatus> status;
    DeviceBuffer<uint32_t> wave_counter;  // the launches align their waves, as the layer's do
    gemm::GroupedRowSpace space{};
};

// Which way a form's weight bytes move, and so which same-run bandwidth ceiling its 128-row points are held against.
enum class WeightTraffic {
    kRead,       // the forward and dgrad forms read the weights: device_read
    kWrite,      // the fresh weight gradients write a tensor the weights' size: device_write
    kReadWrite,  // accumulate mode reads and writes fp32 main_grad: device_copy
};

struct Form {
    std::string name;
    double flops;               // per run
    double weight_bytes;        // weight bytes moved per run: weights read, or weight gradients written (fresh) or
                                // read and written (accumulate)
    ceilings::GemmShape dense;  // the dense GEMM of the same (M, N, K): the same-run cuBLAS point
    std::function<void(cudaStream_t)> run;
    std::function<tolerance::Verdict()> check;
    WeightTraffic traffic = WeightTraffic::kRead;
};

// The same run's bandwidth ceilings, one per WeightTraffic.
struct BandwidthCeilings {
    Case copy;
    Case read;
    Case write;

    // The ceiling of the direction a form's weight bytes move (the copy's, which moves as many bytes each way, for
    // accumulate mode).
    const Case& of(WeightTraffic traffic) const {
        switch (traffic) {
            case WeightTraffic::kRead:
                return read;
            case WeightTraffic::kWrite:
                return write;
            case WeightTraffic::kReadWrite:
                break;
        }
        return copy;
    }
};

float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

std::vector<float> host_floats(const __nv_bfloat16* device, size_t offset, size_t count) {
    const std::vector<__nv_bfloat16> raw = download(device, offset, count);
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
        out[i] = to_float(raw[i]);
    }
    return out;
}

// Sampled check: collects the GPU value, the fp32-accumulated same-precision value and the fp64 oracle of each
// sampled element, and judges them with the tolerance model.
class SampledCheck {
  public:
    void add(double got, double same, double oracle) {
        got_.push_back(got);
        same_.push_back(same);
        oracle_.push_back(oracle);
    }
    tolerance::Verdict verdict() const { return tolerance::judge(got_, same_, oracle_); }

  private:
    std::vector<double> got_, same_, oracle_;
};

struct Dot {
    double oracle = 0.0;
    float same = 0.0f;
    void add(float a, float b) {
        oracle += static_cast<double>(a) * b;
        same = std::fma(a, b, same);
    }
};

std::vector<int32_t> sample_rows(const Problem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.hidden * 131 + p.width));
    std::uniform_int_distribution<int32_t> pick(0, p.rows - 1);
    std::vector<int32_t> rows;
    for (int i = 0; i < kCheckedRows; ++i) {
        rows.push_back(pick(rng));
    }
    return rows;
}

int32_t expert_of(const Problem& p, int32_t row) {
    return row / (p.rows / p.num_experts);
}

// out[r][j] = sum_k a[r][k] * w_e[j][k] (w_e: [n, k] per expert): gate/up (its g half) and down.
tolerance::Verdict check_rows_against_weights(const Problem& p, const __nv_bfloat16* a, const __nv_bfloat16* w,
                                              const __nv_bfloat16* out, int64_t out_stride, int64_t n, int64_t k) {
    SampledCheck check;
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> a_row = host_floats(a, static_cast<size_t>(r) * k, k);
        const std::vector<float> w_e = host_floats(w, static_cast<size_t>(expert_of(p, r)) * n * k, n * k);
        const std::vector<float> got = host_floats(out, static_cast<size_t>(r) * out_stride, n);
        for (int64_t j = 0; j < n; ++j) {
            Dot d;
            for (int64_t i = 0; i < k; ++i) {
                d.add(a_row[i], w_e[j * k + i]);
            }
            check.add(got[j], round_to_bf16(d.same), d.oracle);
        }
    }
    return check.verdict();
}

// dx rows: out[r][j] = sum_i dg[r][i] W_gate[i][j] + du[r][i] W_up[i][j].
tolerance::Verdict check_dgrad_gate_up(const Problem& p) {
    SampledCheck check;
    const int64_t H = p.hidden, I = p.width;
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> dgu = host_floats(p.dgu.get(), static_cast<size_t>(r) * 2 * I, 2 * I);
        const size_t e = expert_of(p, r);
        const std::vector<float> wg = host_floats(p.w_gate.get(), e * I * H, I * H);
        const std::vector<float> wu = host_floats(p.w_up.get(), e * I * H, I * H);
        const std::vector<float> got = host_floats(p.out.get(), static_cast<size_t>(r) * H, H);
        for (int64_t j = 0; j < H; ++j) {
            Dot d;
            for (int64_t i = 0; i < I; ++i) {
                d.add(dgu[i], wg[i * H + j]);
            }
            for (int64_t i = 0; i < I; ++i) {
                d.add(dgu[I + i], wu[i * H + j]);
            }
            check.add(got[j], round_to_bf16(d.same), d.oracle);
        }
    }
    return check.verdict();
}

// du = bf16(w * dh' * silu(g)), dh' = bf16(W_down^T dy): the dgrad epilogue's u-half output.
tolerance::Verdict check_dgrad_down(const Problem& p) {
    SampledCheck check;
    const int64_t H = p.hidden, I = p.width;
    const std::vector<float> weight = download(p.row_weight.get(), 0, p.rows);
    for (const int32_t r : sample_rows(p)) {
        const std::vector<float> dy = host_floats(p.dy.get(), static_cast<size_t>(r) * H, H);
        const std::vector<float> gu = host_floats(p.gu.get(), static_cast<size_t>(r) * 2 * I, 2 * I);
        const std::vector<float> wd = host_floats(p.w_down.get(), static_cast<size_t>(expert_of(p, r)) * H * I, H * I);
        const std::vector<float> got = host_floats(p.dgu.get(), static_cast<size_t>(r) * 2 * I + I, I);
        for (int64_t j = 0; j < I; ++j) {
            Dot d;
            for (int64_t i = 0; i < H; ++i) {
                d.add(dy[i], wd[i * I + j]);
            }
            const double g = gu[j];
            const double silu = g / (1.0 + std::exp(-g));
            check.add(got[j], round_to_bf16(weight[r] * round_to_bf16(d.same) * static_cast<float>(silu)),
                      weight[r] * d.oracle * silu);
        }
    }
    return check.verdict();
}

// A weight gradient run fresh (bf16) into `fresh`, at sampled (m, n) of one expert: the sum over the expert's
// rows of a[r][m] * b[r][n], a: [rows, a_stride] from column a_offset, b: [rows, n_extent].
tolerance::Verdict check_weight_grad(const Problem& p, const __nv_bfloat16* a, int64_t a_stride, int64_t a_offset,
                                     const __nv_bfloat16* b, int64_t m_extent, int64_t n_extent,
                                     const __nv_bfloat16* fresh) {
    constexpr int kSamples = 48;
    SampledCheck check;
    std::mt19937 rng(static_cast<uint32_t>(m_extent * 7 + n_extent));
    const int32_t rows_per_expert = p.rows / p.num_experts;
    const int64_t e = std::uniform_int_distribution<int64_t>(0, p.num_experts - 1)(rng);
    const std::vector<float> a_rows = host_floats(a, static_cast<size_t>(e) * rows_per_expert * a_stride,
                                                  static_cast<size_t>(rows_per_expert) * a_stride);
    const std::vector<float> b_rows = host_floats(b, static_cast<size_t>(e) * rows_per_expert * n_extent,
                                                  static_cast<size_t>(rows_per_expert) * n_extent);
    for (int s = 0; s < kSamples; ++s) {
        const int64_t m = std::uniform_int_distribution<int64_t>(0, m_extent - 1)(rng);
        const int64_t n = std::uniform_int_distribution<int64_t>(0, n_extent - 1)(rng);
        Dot d;
        for (int32_t r = 0; r < rows_per_expert; ++r) {
            d.add(a_rows[r * a_stride + a_offset + m], b_rows[r * n_extent + n]);
        }
        check.add(host_floats(fresh, (e * m_extent + m) * n_extent + n, 1)[0], round_to_bf16(d.same), d.oracle);
    }
    return check.verdict();
}

std::vector<Form> forms(Problem& p) {
    const double m = p.rows;
    const double hh = p.hidden;
    const double ii = p.width;
    const double e = p.num_experts;
    auto launch = [&p](cudaStream_t stream, gemm::Arrangement arrangement = gemm::Arrangement::kCooperative) {
        gemm::LaunchConfig l;
        l.stream = stream;
        l.status = p.status.get();
        l.wave_counter = p.wave_counter.get();
        l.arrangement = arrangement;
        return l;
    };
    std::vector<Form> out;
    // The M-grouped forms in every arrangement that serves them (the cases of the others carry its suffix), each
    // checked after a run of its own arrangement.
    for (const gemm::Arrangement arrangement :
         {gemm::Arrangement::kCooperative, gemm::Arrangement::kPingPong, gemm::Arrangement::kEpilogueWarps}) {
        const std::string suffix = arrangement == gemm::Arrangement::kPingPong        ? "_pingpong"
                                   : arrangement == gemm::Arrangement::kEpilogueWarps ? "_epilogue_warps"
                                                                                      : "";
        out.push_back({"gate_up_swiglu" + suffix,
                       kFlopsPerMultiplyAdd * m * 2 * ii * hh,
                       e * 2 * ii * hh * 2,
                       {p.rows, 2 * p.width, p.hidden},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::gate_up_swiglu({p.space, p.x.get(), p.w_gate.get(), p.w_up.get(),
                                                              p.gu.get(), p.h.get(), p.hidden, p.width},
                                                             launch(s, arrangement)));
                       },
                       [&p]() {
                           return check_rows_against_weights(p, p.x.get(), p.w_gate.get(), p.gu.get(), 2 * p.width,
                                                             p.width, p.hidden);
                       }});
        out.push_back({"down" + suffix,
                       kFlopsPerMultiplyAdd * m * hh * ii,
                       e * hh * ii * 2,
                       {p.rows, p.hidden, p.width},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::down_projection(
                               {p.space, p.h.get(), p.w_down.get(), p.out.get(), p.hidden, nullptr, p.hidden, p.width},
                               launch(s, arrangement)));
                       },
                       [&p]() {
                           return check_rows_against_weights(p, p.h.get(), p.w_down.get(), p.out.get(), p.hidden,
                                                             p.hidden, p.width);
                       }});
        out.push_back({"dgrad_down_swiglu" + suffix,
                       kFlopsPerMultiplyAdd * m * ii * hh,
                       e * hh * ii * 2,
                       {p.rows, p.width, p.hidden},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(
                               gemm::dgrad_down({p.space, p.dy.get(), p.w_down.get(), p.gu.get(), p.row_weight.get(),
                                                 p.dgu.get(), p.partials.get(), p.hidden, p.width},
                                                launch(s, arrangement)));
                           check_status(gemm::reduce_router_partials(
                               p.space, p.partials.get(), gemm::router_partial_tiles(p.width), p.d_router.get(), s));
                       },
                       [&p]() { return check_dgrad_down(p); }});
        out.push_back({"dgrad_gate_up" + suffix,
                       kFlopsPerMultiplyAdd * m * hh * 2 * ii,
                       e * 2 * ii * hh * 2,
                       {p.rows, p.hidden, 2 * p.width},
                       [&p, launch, arrangement](cudaStream_t s) {
                           check_status(gemm::dgrad_gate_up({p.space, p.dgu.get(), p.w_gate.get(), p.w_up.get(),
                                                             p.out.get(), p.hidden, nullptr, p.hidden, p.width},
                                                            launch(s, arrangement)));
                       },
                       [&p]() { return check_dgrad_gate_up(p); }});
    }
    // Weight gradients accumulating into fp32 main_grad (loaded, added and stored; then by TMA reductions, the cases
    // with _reduction), then fresh into bf16 (the layer's default): the difference is the cost of reading and writing
    // main_grad. Fresh mode runs in both arrangements that serve it (the epilogue warps' cases carry its suffix). Every
    // case is checked by a fresh-mode run of its arrangement.
    auto check_gate_up = [&p, launch](gemm::Arrangement arrangement) {
        return std::function<tolerance::Verdict()>([&p, launch, arrangement]() {
            check_status(gemm::weight_grad_gate_up({p.space, p.dgu.get(), p.x.get(), p.fresh.get(), p.fresh_up.get(),
                                                    gemm::WeightGradMode::kFresh, p.hidden, p.width},
                                                   launch(nullptr, arrangement)));
            MOK_BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            return check_weight_grad(p, p.dgu.get(), 2 * p.width, 0, p.x.get(), p.width, p.hidden, p.fresh.get());
        });
    };
    auto check_down = [&p, launch](gemm::Arrangement arrangement) {
        return std::function<tolerance::Verdict()>([&p, launch, arrangement]() {
            check_status(gemm::weight_grad_down(
                {p.space, p.dys.get(), p.h.get(), p.fresh.get(), gemm::WeightGradMode::kFresh, p.hidden, p.width},
                launch(nullptr, arrangement)));
            MOK_BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            return check_weight_grad(p, p.dys.get(), p.hidden, 0, p.h.get(), p.hidden, p.width, p.fresh.get());
        });
    };
    struct WeightGradCase {
        gemm::WeightGradMode mode;
        gemm::MainGradUpdate update;
        gemm::Arrangement arrangement;
        const char* suffix;
    };
    constexpr gemm::MainGradUpdate kLoads = gemm::MainGradUpdate::kLoadAddStore;
    for (const WeightGradCase& w :
         {WeightGradCase{gemm::WeightGradMode::kAccumulate, kLoads, gemm::Arrangement::kCooperative, ""},
          WeightGradCase{gemm::WeightGradMode::kAccumulate, gemm::MainGradUpdate::kReduction,
                         gemm::Arrangement::kCooperative, "_reduction"},
          WeightGradCase{gemm::WeightGradMode::kFresh, kLoads, gemm::Arrangement::kCooperative, "_fresh"},
          WeightGradCase{gemm::WeightGradMode::kFresh, kLoads, gemm::Arrangement::kEpilogueWarps,
                         "_fresh_epilogue_warps"}}) {
        const bool fresh = w.mode == gemm::WeightGradMode::kFresh;
        const gemm::WeightGradMode mode = w.mode;
        const gemm::MainGradUpdate update = w.update;
        const gemm::Arrangement arrangement = w.arrangement;
        const double grad_bytes = fresh ? static_cast<double>(sizeof(__nv_bfloat16)) : kMainGradBytesMoved;
        const WeightTraffic traffic = fresh ? WeightTraffic::kWrite : WeightTraffic::kReadWrite;
        void* d_gate = fresh ? static_cast<void*>(p.fresh.get()) : p.d_gate.get();
        void* d_up = fresh ? static_cast<void*>(p.fresh_up.get()) : p.d_up.get();
        void* d_down = fresh ? static_cast<void*>(p.fresh.get()) : p.d_down.get();
        out.push_back({std::string("wgrad_gate_up") + w.suffix,
                       kFlopsPerMultiplyAdd * m * 2 * ii * hh,
                       e * 2 * ii * hh * grad_bytes,
                       {2 * p.width, p.hidden, p.rows},
                       [&p, launch, mode, update, arrangement, d_gate, d_up](cudaStream_t s) {
                           check_status(gemm::weight_grad_gate_up(
                               {p.space, p.dgu.get(), p.x.get(), d_gate, d_up, mode, p.hidden, p.width, update},
                               launch(s, arrangement)));
                       },
                       check_gate_up(arrangement),
                       traffic});
        out.push_back({std::string("wgrad_down") + w.suffix,
                       kFlopsPerMultiplyAdd * m * hh * ii,
                       e * hh * ii * grad_bytes,
                       {p.hidden, p.width, p.rows},
                       [&p, launch, mode, update, arrangement, d_down](cudaStream_t s) {
                           check_status(gemm::weight_grad_down(
                               {p.space, p.dys.get(), p.h.get(), d_down, mode, p.hidden, p.width, update},
                               launch(s, arrangement)));
                       },
                       check_down(arrangement),
                       traffic});
    }
    return out;
}

// A form's case name: model/m<rows per expert>/form.
std::string case_name(const ModelShape& shape, int32_t rows_per_expert, const Form& form) {
    return shape.name + "/m" + std::to_string(rows_per_expert) + "/" + form.name;
}

// A case whose correctness check fails is not timed, unless `time_failed` (--time-failed): a diagnostic build that
// computes wrong results on purpose, to time what it leaves out, still gets its figures, and the case stays failed.
Case time_form(const ModelShape& shape, int32_t rows_per_expert, Form& form, cudaStream_t stream, Timer& timer,
               const TimingOptions& timing, double dense_tflops, const BandwidthCeilings& ceilings, bool time_failed) {
    Case c;
    c.name = case_name(shape, rows_per_expert, form);
    c.params = Json::object();
    c.params.set("hidden", Json(shape.hidden));
    c.params.set("width", Json(shape.width));
    c.params.set("rows_per_expert", Json(rows_per_expert));
    c.params.set("num_experts", Json(groups_for(shape, rows_per_expert)));
    c.params.set("form", Json(form.name));
    form.run(stream);
    MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    if (form.check) {
        const tolerance::Verdict v = form.check();
        if (!v.pass) {
            c.status = CaseStatus::kFailed;
            c.note = "correctness check failed: " + v.describe();
            if (!time_failed) {
                return c;
            }
            c.note += "; timed anyway (--time-failed)";
        } else {
            c.note = "checked before timing: " + v.describe();
        }
    }
    const TimingStats stats = timer.time([&](int) { form.run(stream); }, timing);
    c.figures.push_back(time_figure("time", stats));
    Figure rate = rate_figure("tflops", "TFLOP/s", form.flops / kTera, stats);
    rate.against("cublas_dense_bf16", dense_tflops);
    c.figures.push_back(rate);
    c.figures.push_back(fraction_figure("fraction_of_cublas", rate, "cublas_dense_bf16", dense_tflops));
    if (rows_per_expert <= kRowAlignment) {
        Figure bw = rate_figure("weight_read_bandwidth", "GB/s", form.weight_bytes / kGiga, stats);
        c.figures.push_back(bw);
        c.figures.push_back(
            fraction_figure("fraction_of_copy", bw, "device_copy", figure_value(ceilings.copy, "bandwidth")));
        const Case& one_way = ceilings.of(form.traffic);
        c.figures.push_back(fraction_figure("fraction_of_one_way", bw, one_way.name.substr(0, one_way.name.find('/')),
                                            figure_value(one_way, "bandwidth")));
    }
    return c;
}

void usage() {
    std::printf("mok-bench-gemm: grouped GEMM forms vs same-run dense cuBLAS\n%s", common_options_help().c_str());
    std::printf(
        "  --cases REGEX  only the cases whose name (model/m<rows per expert>/form) matches, e.g. 'dgrad_down'\n"
        "  --time-failed  time a case whose correctness check fails too (it stays failed): for diagnostic builds\n");
}

int run(const CommonOptions& options) {
    std::vector<std::string> rest = options.rest;
    const CaseFilter filter = CaseFilter::take_from(rest);
    const bool time_failed = take_switch(rest, "--time-failed");
    if (!rest.empty()) {
        throw std::invalid_argument("unknown flag '" + rest.front() + "' (see --help)");
    }
    TimingOptions timing;
    timing.num_warmup = options.num_warmup.value_or(kDefaultWarmup);
    timing.min_warmup_ms = options.min_warmup_ms.value_or(kDefaultWarmupMs);
    timing.num_reps = options.num_reps.value_or(options.quick ? 5 : 10);
    // --quick: the baseline's quick subset (DeepSeek-V3 and Qwen3.5 at 128 and 4096 rows per expert).
    const std::vector<int32_t> rows_points =
        options.quick ? std::vector<int32_t>{128, 4096} : std::vector<int32_t>{128, 512, 2048, 4096};
    std::vector<ModelShape> shapes = model_shapes();
    if (options.quick) {
        std::erase_if(shapes,
                      [](const ModelShape& m) { return m.name != "deepseek-v3" && m.name != "qwen3.5-397b-a17b"; });
    }
    Result result;
    result.run = collect_run_info("gemm", 1);
    result.config.set("groups", Json(std::string("min(E / 8, 65536 / rows per expert)")));
    result.config.set("num_reps", Json(timing.num_reps));
    result.config.set("warmup", Json(timing.num_warmup));
    result.config.set("warmup_ms", Json(timing.min_warmup_ms));
    result.config.set("flush_l2", Json(timing.flush_l2));
    if (!filter.pattern().empty()) {
        result.config.set("cases", Json(filter.pattern()));
    }
    if (time_failed) {
        result.config.set("time_failed", Json(true));
    }
    Stream stream(0);
    Timer timer({{0, stream.get()}});

    const size_t ceiling_bytes = size_t{4} << 30;
    const BandwidthCeilings bandwidth{ceilings::device_copy_case(ceiling_bytes, timing),
                                      ceilings::device_read_case(ceiling_bytes, timing),
                                      ceilings::device_write_case(ceiling_bytes, timing)};
    for (const Case* ceiling : {&bandwidth.copy, &bandwidth.read, &bandwidth.write}) {
        result.cases.push_back(*ceiling);
    }
    for (const ModelShape& shape : shapes) {
        for (int32_t rows_per_expert : rows_points) {
            Problem problem(shape, rows_per_expert, stream.get());
            for (Form& form : forms(problem)) {
                if (!filter.selects(case_name(shape, rows_per_expert, form))) {
                    continue;
                }
                const Case dense = ceilings::gemm_case(form.dense, timing);
                const double dense_tflops = figure_value(dense, "tflops");
                Case c = time_form(shape, rows_per_expert, form, stream.get(), timer, timing, dense_tflops, bandwidth,
                                   time_failed);
                result.cases.push_back(std::move(c));
                std::fflush(stdout);
            }
            DeviceStatus status{};
            MOK_BENCH_CHECK_CUDA(cudaMemcpy(&status, problem.status.get(), sizeof(status), cudaMemcpyDeviceToHost));
            if (status.code != 0) {
                throw std::runtime_error("a GEMM kernel reported device error " + std::to_string(status.code));
            }
        }
    }
    return finish_run(result, options.out_dir);
}

}  // namespace
}  // namespace mok::bench::gemm_bench

int main(int argc, char** argv) {
    return mok::bench::run_benchmark_main(argc, argv, "mok-bench-gemm", mok::bench::gemm_bench::usage,
                                          mok::bench::gemm_bench::run, mok::bench::OtherFlags::kPass);
}
