// Host launchers of the grouped GEMM forms: tensor maps, grid, shared memory. The kernels are instantiated
// here and only here -- the closed list of forms below.
#include "device/gemm/grouped_gemm.hpp"

#include <algorithm>
#include <string>

#include "device/gemm/epilogue_warps_kernel.cuh"
#include "device/gemm/forms/dgrad_down_form.cuh"
#include "device/gemm/forms/dgrad_gate_up_form.cuh"
#include "device/gemm/forms/down_form.cuh"
#include "device/gemm/forms/gate_up_form.cuh"
#include "device/gemm/forms/weight_grad_forms.cuh"
#include "device/gemm/pingpong_kernel.cuh"
#include "host/cuda/cuda_status.hpp"
#include "host/cuda/kernel_attributes.hpp"
#include "host/cuda/tensor_map.hpp"

namespace mok::gemm {
namespace {

constexpr uint64_t kBf16 = 2;

using host::cuda_status;

// (rows, cols) row-major with `ld` elements between rows, loaded in boxes of (box_rows, box_cols).
Status map_rows(const void* base, int64_t rows, int64_t cols, int64_t ld, uint32_t box_cols, uint32_t box_rows,
                CUtensorMap* out) {
    host::TensorMapSpec spec;
    spec.base = base;
    spec.rank = 2;
    spec.dims[0] = static_cast<uint64_t>(cols);
    spec.dims[1] = static_cast<uint64_t>(rows);
    spec.strides_bytes[0] = static_cast<uint64_t>(ld) * kBf16;
    spec.box[0] = box_cols;
    spec.box[1] = box_rows;
    return host::encode_bf16_tensor_map(spec, out);
}

// (experts, rows, cols) contiguous, in boxes of one expert's (box_rows, box_cols).
Status map_expert_tensor(const void* base, host::TensorElement element, int64_t experts, int64_t rows, int64_t cols,
                         uint32_t box_cols, uint32_t box_rows, CUtensorMap* out) {
    const uint64_t element_bytes = host::element_bytes(element);
    host::TensorMapSpec spec;
    spec.base = base;
    spec.rank = 3;
    spec.dims[0] = static_cast<uint64_t>(cols);
    spec.dims[1] = static_cast<uint64_t>(rows);
    spec.dims[2] = static_cast<uint64_t>(experts);
    spec.strides_bytes[0] = static_cast<uint64_t>(cols) * element_bytes;
    spec.strides_bytes[1] = static_cast<uint64_t>(rows * cols) * element_bytes;
    spec.box[0] = box_cols;
    spec.box[1] = box_rows;
    spec.box[2] = 1;
    return host::encode_tensor_map(spec, element, out);
}

// Expert weights: (experts, rows, cols) bf16, loaded in boxes of one expert's (box_rows, box_cols).
Status map_experts(const void* base, int64_t experts, int64_t rows, int64_t cols, uint32_t box_cols, uint32_t box_rows,
                   CUtensorMap* out) {
    return map_expert_tensor(base, host::TensorElement::kBf16, experts, rows, cols, box_cols, box_rows, out);
}

// A weight gradient's output (experts, rows, cols) and its map for the epilogue's TMA: boxes of one warpgroup's
// rows by one 128-byte line (weight_grad_epilogue.cuh), bf16 in fresh mode, fp32 main_grad in accumulate mode.
template <epilogue::WeightGradMode kMode>
Status weight_grad_output(void* base, int64_t experts, int32_t rows, int32_t cols, epilogue::WeightGradOutput* out) {
    out->out = base;
    out->num_rows = rows;
    out->num_cols = cols;
    if constexpr (kMode == epilogue::WeightGradMode::kFresh) {
        return map_expert_tensor(base, host::TensorElement::kBf16, experts, rows, cols, epilogue::kFreshBoxCols,
                                 WGMMA_M, &out->map);
    }
    return map_expert_tensor(base, host::TensorElement::kFp32, experts, rows, cols, epilogue::kAccumulateBoxCols,
                             WGMMA_M, &out->map);
}

// (rows, 2, width): the g|u (or dg|du) pairs, loaded as boxes of (box_rows, one half, box_cols): a box never
// crosses from the first half into the second, so a K block past `width` reads zeros, not the other half.
Status map_pairs(const void* base, int64_t rows, int64_t width, uint32_t box_cols, uint32_t box_rows,
                 CUtensorMap* out) {
    host::TensorMapSpec spec;
    spec.base = base;
    spec.rank = 3;
    spec.dims[0] = static_cast<uint64_t>(width);
    spec.dims[1] = 2;
    spec.dims[2] = static_cast<uint64_t>(rows);
    spec.strides_bytes[0] = static_cast<uint64_t>(width) * kBf16;
    spec.strides_bytes[1] = static_cast<uint64_t>(2 * width) * kBf16;
    spec.box[0] = box_cols;
    spec.box[1] = 1;
    spec.box[2] = box_rows;
    return host::encode_bf16_tensor_map(spec, out);
}

// The weight gradients' operands, row-major (rows, cols) read MN-major (cols along M or N, rows along K), as a
// chunked view: dims {64 elements, rows, cols / 64 chunks}, strides {ld elements, 64 elements}. One box
// {64, BLOCK_K, box_chunks} lands as box_chunks (BLOCK_K, 64) boxes one after another, chunk c at
// c x kMnBoxBytes -- the stage layout operands.cuh describes -- so an operand's stage is one TMA instruction
// instead of one per 64 columns. Chunks past the last read zeros, as columns past `cols` do in the plain maps.
// Needs cols % 64 == 0: a partial last chunk would read into the next row (chunked_operands).
host::TensorMapSpec row_chunks_spec(const void* base, int64_t rows, int64_t cols, int64_t ld, uint32_t box_chunks) {
    host::TensorMapSpec spec;
    spec.base = base;
    spec.rank = 3;
    spec.dims[0] = kMnBoxElements;
    spec.dims[1] = static_cast<uint64_t>(rows);
    spec.dims[2] = static_cast<uint64_t>(cols / kMnBoxElements);
    spec.strides_bytes[0] = static_cast<uint64_t>(ld) * kBf16;
    spec.strides_bytes[1] = kMnBoxElements * kBf16;
    spec.box[0] = kMnBoxElements;
    spec.box[1] = BLOCK_K;
    spec.box[2] = box_chunks;
    return spec;
}

Status map_row_chunks(const void* base, int64_t rows, int64_t cols, int64_t ld, uint32_t box_chunks, CUtensorMap* out) {
    return host::encode_bf16_tensor_map(row_chunks_spec(base, rows, cols, ld, box_chunks), out);
}

// The (rows, 2, width) pairs in the same chunked view, the half outermost: dims {64, rows, width / 64, 2}, so a
// box of chunks never crosses from one half into the other (chunks past width / 64 read zeros).
Status map_pair_chunks(const void* base, int64_t rows, int64_t width, uint32_t box_chunks, CUtensorMap* out) {
    host::TensorMapSpec spec = row_chunks_spec(base, rows, width, 2 * width, box_chunks);
    spec.rank = 4;
    spec.dims[3] = 2;
    spec.strides_bytes[2] = static_cast<uint64_t>(width) * kBf16;
    spec.box[3] = 1;
    return host::encode_bf16_tensor_map(spec, out);
}

// Whether the weight gradients' operands take the chunked view: every width they read is whole chunks.
bool chunked_operands(int32_t hidden, int32_t width) {
    return hidden % kMnBoxElements == 0 && width % kMnBoxElements == 0;
}

Status check_shape(const GroupedRowSpace& rows, int32_t hidden, int32_t width, const LaunchConfig& launch) {
    constexpr int32_t kWidthMultiple = 8;  // 16-byte rows: TMA strides and 16-byte epilogue stores
    if (hidden <= 0 || hidden % kWidthMultiple != 0) {
        return Status::invalid_argument("hidden", "a positive multiple of 8, got " + std::to_string(hidden));
    }
    if (width <= 0 || width % kWidthMultiple != 0) {
        return Status::invalid_argument("width", "a positive multiple of 8, got " + std::to_string(width));
    }
    if (rows.capacity_rows <= 0 || rows.capacity_rows % BLOCK_M != 0) {
        return Status::invalid_argument("capacity_rows", "a positive multiple of 128");
    }
    if (rows.num_experts <= 0) {
        return Status::invalid_argument("num_experts", "at least one local expert");
    }
    if (launch.status == nullptr) {
        return Status::invalid_argument("launch.status", "a device error record");
    }
    return Status::ok();
}

KernelCommon common_of(const LaunchConfig& launch) {
    return {launch.status, launch.rank, launch.timeout_ns, launch.wave_counter};
}

// Loads the forms' kernels and raises their shared-memory limits.
template <class... Forms>
Status prepare_forms() {
    MOK_RETURN_IF_ERROR((host::load_kernels<grouped_gemm_kernel<Forms>...>("grouped GEMM")));
    for (const Status& raised : {host::allow_max_dynamic_shared_memory<grouped_gemm_kernel<Forms>>()...}) {
        MOK_RETURN_IF_ERROR(raised);
    }
    return Status::ok();
}

// The same for the epilogue-warps kernels of the forms that split their epilogue.
template <class... Forms>
Status prepare_epilogue_warps_forms() {
    MOK_RETURN_IF_ERROR(
        (host::load_kernels<grouped_gemm_epilogue_warps_kernel<Forms>...>("grouped GEMM (epilogue warps)")));
    for (const Status& raised :
         {host::allow_max_dynamic_shared_memory<grouped_gemm_epilogue_warps_kernel<Forms>>()...}) {
        MOK_RETURN_IF_ERROR(raised);
    }
    return Status::ok();
}

bool pingpong(const LaunchConfig& launch) {
    return launch.arrangement == Arrangement::kPingPong;
}

// Rows of an A box: a CTA's half of the tile in the ping-pong arrangement, the whole tile otherwise.
uint32_t a_box_rows(const LaunchConfig& launch) {
    return pingpong(launch) ? kPingPongRows : BLOCK_M;
}

// The cluster launch of a form's ping-pong kernel on `grid_ctas` CTAs.
struct ClusterLaunch {
    cudaLaunchAttribute cluster{};
    cudaLaunchConfig_t config{};

    ClusterLaunch(int grid_ctas, size_t shared_bytes, cudaStream_t stream) {
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = kPingPongClusterSize;
        cluster.val.clusterDim.y = 1;
        cluster.val.clusterDim.z = 1;
        config.gridDim = dim3(static_cast<unsigned>(grid_ctas));
        config.blockDim = dim3(kNumThreads);
        config.dynamicSmemBytes = shared_bytes;
        config.stream = stream;
        config.attrs = &cluster;
        config.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;
    ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// How many clusters of a form's ping-pong kernel fit on the device at once: asked once per device (a host query,
// kept off the enqueue path of every step) for a grid of every SM.
template <class Form>
Status max_pingpong_clusters(int device, int num_sms, int* out) {
    constexpr int kMaxDevices = 64;
    static host::PerDeviceOnce state;
    static int cached[kMaxDevices] = {};
    MOK_RETURN_IF_ERROR(host::once_per_device(state, [num_sms](int d) -> Status {
        ClusterLaunch launch(num_sms - num_sms % kPingPongClusterSize, PingPongLayout<Form>::kSharedBytes, nullptr);
        return cuda_status(
            cudaOccupancyMaxActiveClusters(&cached[d], grouped_gemm_pingpong_kernel<Form>, &launch.config),
            "the ping-pong GEMM's co-resident clusters");
    }));
    *out = cached[device];
    return Status::ok();
}

// The same for the ping-pong kernels of the M-grouped forms, and their co-resident clusters asked for here, ahead
// of any step (the first launch may come while a stream is being captured into a graph).
template <class... Forms>
Status prepare_pingpong_forms(int device) {
    MOK_RETURN_IF_ERROR((host::load_kernels<grouped_gemm_pingpong_kernel<Forms>...>("grouped GEMM (ping-pong)")));
    for (const Status& raised : {host::allow_max_dynamic_shared_memory<grouped_gemm_pingpong_kernel<Forms>>()...}) {
        MOK_RETURN_IF_ERROR(raised);
    }
    int num_sms = 0;
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
    int max_clusters = 0;
    for (const Status& asked : {max_pingpong_clusters<Forms>(device, num_sms, &max_clusters)...}) {
        MOK_RETURN_IF_ERROR(asked);
    }
    return Status::ok();
}

// Graphics processing clusters on a Hopper GPU (eight on H100 and H200 SXM): a cluster's CTAs run in one.
inline constexpr int kMaxGpcs = 8;

// The ping-pong kernel in clusters of two: as many clusters as fit at once on the whole device. With
// launch.num_sms set below the device's SMs, the other SMs run other kernels at the same time (the layer's copy
// kernels), which may leave a GPC an odd number of free SMs, one of which no cluster can use: the grid then leaves
// out one SM per GPC, so that every cluster is resident. A cluster that is not would hold its share of the tiles
// until a resident one ends (the tiles are dealt out statically), which cost the cluster-pair kernel 18% of the
// layer's forward (docs/gemm.md).
template <class Form>
Status launch_pingpong_form(const typename Form::Params& params, const LaunchConfig& launch) {
    int device = 0;
    MOK_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
    int num_sms = 0;
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
    int max_clusters = 0;
    MOK_RETURN_IF_ERROR(max_pingpong_clusters<Form>(device, num_sms, &max_clusters));
    const bool shared_device = launch.num_sms > 0 && launch.num_sms < num_sms;
    const int usable_sms = shared_device ? launch.num_sms - kMaxGpcs : num_sms;
    const int clusters = std::max(1, std::min(max_clusters, usable_sms / kPingPongClusterSize));
    if (launch.wave_counter != nullptr) {
        MOK_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(launch.wave_counter, 0, sizeof(uint32_t), launch.stream),
                                        "zeroing the wave counter"));
    }
    ClusterLaunch cluster_launch(clusters * kPingPongClusterSize, PingPongLayout<Form>::kSharedBytes, launch.stream);
    return cuda_status(cudaLaunchKernelEx(&cluster_launch.config, grouped_gemm_pingpong_kernel<Form>, params),
                       "launching a ping-pong grouped GEMM");
}

// The forms whose epilogue splits into a consumer's half and the epilogue warps' half (epilogue_warps_kernel.cuh):
// those with a hand-off buffer.
template <class Form>
concept SplitsEpilogue = requires {
    requires Form::kHandoffBytes >
    0;
};

template <class Form>
Status launch_form(const typename Form::Params& params, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(load_kernels());
    if constexpr (!Form::kMaskKTail) {
        if (pingpong(launch)) {
            return launch_pingpong_form<Form>(params, launch);
        }
    }
    if (launch.arrangement == Arrangement::kEpilogueWarps) {
        if constexpr (!SplitsEpilogue<Form>) {
            return Status::invalid_argument("launch.arrangement",
                                            "kEpilogueWarps serves gate_up_swiglu, down_projection, dgrad_down, "
                                            "dgrad_gate_up and the fresh weight gradients only");
        }
    }
    int device = 0;
    MOK_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
    int num_sms = 0;
    MOK_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
    const int grid = launch.num_sms > 0 && launch.num_sms < num_sms ? launch.num_sms : num_sms;
    if (launch.wave_counter != nullptr) {
        MOK_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(launch.wave_counter, 0, sizeof(uint32_t), launch.stream),
                                        "zeroing the wave counter"));
    }
    if constexpr (SplitsEpilogue<Form>) {
        if (launch.arrangement == Arrangement::kEpilogueWarps) {
            grouped_gemm_epilogue_warps_kernel<Form>
                <<<grid, kNumThreads, kHandoffSharedBytes<Form>, launch.stream>>>(params);
            return cuda_status(cudaGetLastError(), "launching a grouped GEMM (epilogue warps)");
        }
    }
    grouped_gemm_kernel<Form><<<grid, kNumThreads, GemmLayout<Form>::kSharedBytes, launch.stream>>>(params);
    return cuda_status(cudaGetLastError(), "launching a grouped GEMM");
}

// The cooperative kernel's stages per form (GemmLayout): kStages for all but the accumulate mode by loads, whose four
// main_grad slots per warpgroup leave room for three.
static_assert(GemmLayout<GateUpForm>::kNumStages == kStages && GemmLayout<DgradDownForm>::kNumStages == kStages &&
              GemmLayout<WeightGradDownForm<epilogue::WeightGradMode::kFresh>>::kNumStages == kStages &&
              GemmLayout<WeightGradDownForm<epilogue::WeightGradMode::kAccumulateByReduction>>::kNumStages == kStages);
static_assert(GemmLayout<WeightGradGateUpForm<epilogue::WeightGradMode::kAccumulate>>::kNumStages == kStages - 1 &&
              GemmLayout<WeightGradDownForm<epilogue::WeightGradMode::kAccumulate>>::kNumStages == kStages - 1);

}  // namespace

Status load_kernels() {
    // Every GEMM launch calls this: after the first call on a device it is one check.
    static host::PerDeviceOnce state;
    return host::once_per_device(state, [](int device) -> Status {
        using epilogue::WeightGradMode;
        MOK_RETURN_IF_ERROR(
            (prepare_forms<GateUpForm, DownForm, DgradDownForm, DgradGateUpForm,
                           WeightGradGateUpForm<WeightGradMode::kFresh>,
                           WeightGradGateUpForm<WeightGradMode::kAccumulate>,
                           WeightGradGateUpForm<WeightGradMode::kAccumulateByReduction>,
                           WeightGradDownForm<WeightGradMode::kFresh>, WeightGradDownForm<WeightGradMode::kAccumulate>,
                           WeightGradDownForm<WeightGradMode::kAccumulateByReduction>>()));
        MOK_RETURN_IF_ERROR((prepare_pingpong_forms<GateUpForm, DownForm, DgradDownForm, DgradGateUpForm>(device)));
        MOK_RETURN_IF_ERROR((prepare_epilogue_warps_forms<GateUpForm, DownForm, DgradDownForm, DgradGateUpForm,
                                                          WeightGradGateUpForm<WeightGradMode::kFresh>,
                                                          WeightGradDownForm<WeightGradMode::kFresh>>()));
        return load_row_op_kernels();
    });
}

int32_t router_partial_tiles(int32_t width) {
    return (width + BLOCK_N - 1) / BLOCK_N;
}

Status gate_up_swiglu(const GateUpArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    GateUpForm::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    MOK_RETURN_IF_ERROR(map_rows(a.x, a.rows.capacity_rows, a.hidden, a.hidden, BLOCK_K, a_box_rows(launch), &p.x));
    MOK_RETURN_IF_ERROR(map_experts(a.w_gate, a.rows.num_experts, a.width, a.hidden, BLOCK_K, BLOCK_N / 2, &p.w_gate));
    MOK_RETURN_IF_ERROR(map_experts(a.w_up, a.rows.num_experts, a.width, a.hidden, BLOCK_K, BLOCK_N / 2, &p.w_up));
    p.out = {a.gu, a.h, a.width};
    p.hidden = a.hidden;
    return launch_form<GateUpForm>(p, launch);
}

Status down_projection(const DownArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    DownForm::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    MOK_RETURN_IF_ERROR(map_rows(a.h, a.rows.capacity_rows, a.width, a.width, BLOCK_K, a_box_rows(launch), &p.h));
    // The ping-pong arrangement loads each half of the B tile from one CTA of the cluster.
    const uint32_t w_box_rows = pingpong(launch) ? BLOCK_N / kPingPongClusterSize : BLOCK_N;
    MOK_RETURN_IF_ERROR(map_experts(a.w_down, a.rows.num_experts, a.hidden, a.width, BLOCK_K, w_box_rows, &p.w_down));
    p.out = {a.out, a.out_ld, a.row_map, a.hidden};
    p.width = a.width;
    p.publish = a.publish;
    const SourceTargets& to = a.to_sources;
    if (to.sources != nullptr) {
        if (to.rank_rows == nullptr || to.rank_flags == nullptr || to.step_status == nullptr || a.row_map != nullptr) {
            return Status::invalid_argument("down_projection to_sources",
                                            "rank_rows, rank_flags and step_status with sources, and no row_map");
        }
        p.out.sources = to.sources;
        p.out.rank_rows = to.rank_rows;
        p.publish.sources = to.sources;
        p.publish.rank_flags = to.rank_flags;
        p.publish.step_status = to.step_status;
    } else if (a.out == nullptr) {
        return Status::invalid_argument("down_projection out", "an output (or to_sources)");
    }
    if (p.publish.enabled()) {
        if (a.publish.tile_counts == nullptr || a.publish.sequence == nullptr) {
            return Status::invalid_argument("down_projection publish",
                                            "tile_counts and sequence with tile_ready or to_sources");
        }
        const size_t count_bytes = static_cast<size_t>(a.rows.capacity_rows / BLOCK_M) * sizeof(uint32_t);
        MOK_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(a.publish.tile_counts, 0, count_bytes, launch.stream),
                                        "zeroing the row tiles' store counts"));
    }
    return launch_form<DownForm>(p, launch);
}

Status dgrad_down(const DgradDownArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    static_assert(kDgradDownMaxConsumerRows == epilogue::ConsumerRowSplit::kMaxConsumerRows);
    if (a.consumer_rows < 0 || a.consumer_rows > kDgradDownMaxConsumerRows) {
        return Status::invalid_argument("consumer_rows", "rows of a consumer warp's 16 in [0, " +
                                                             std::to_string(kDgradDownMaxConsumerRows) + "], got " +
                                                             std::to_string(a.consumer_rows));
    }
    DgradDownForm::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    MOK_RETURN_IF_ERROR(map_rows(a.dy, a.rows.capacity_rows, a.hidden, a.hidden, BLOCK_K, a_box_rows(launch), &p.dy));
    MOK_RETURN_IF_ERROR(
        map_experts(a.w_down, a.rows.num_experts, a.hidden, a.width, kMnBoxElements, BLOCK_K, &p.w_down));
    p.out = {a.gu, a.row_weight, a.dgu, a.router_partials, router_partial_tiles(a.width), a.width};
    p.hidden = a.hidden;
    p.consumer_rows = launch.arrangement == Arrangement::kEpilogueWarps ? a.consumer_rows : 0;
    return launch_form<DgradDownForm>(p, launch);
}

Status dgrad_gate_up(const DgradGateUpArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    DgradGateUpForm::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    MOK_RETURN_IF_ERROR(map_pairs(a.dgu, a.rows.capacity_rows, a.width, BLOCK_K, a_box_rows(launch), &p.dgu));
    MOK_RETURN_IF_ERROR(
        map_experts(a.w_gate, a.rows.num_experts, a.width, a.hidden, kMnBoxElements, BLOCK_K, &p.w_gate));
    MOK_RETURN_IF_ERROR(map_experts(a.w_up, a.rows.num_experts, a.width, a.hidden, kMnBoxElements, BLOCK_K, &p.w_up));
    p.out = {a.out, a.out_ld, a.row_map, a.hidden};
    p.width = a.width;
    return launch_form<DgradGateUpForm>(p, launch);
}

// The epilogue of a weight-gradient launch: fresh, or accumulate mode's way of adding to main_grad.
epilogue::WeightGradMode epilogue_mode(WeightGradMode mode, MainGradUpdate update) {
    if (mode == WeightGradMode::kFresh) {
        return epilogue::WeightGradMode::kFresh;
    }
    return update == MainGradUpdate::kReduction ? epilogue::WeightGradMode::kAccumulateByReduction
                                                : epilogue::WeightGradMode::kAccumulate;
}

// Runs `launch_as.template operator()<kMode>()` for the epilogue mode of (mode, update): one instantiation each.
template <class LaunchAs>
Status with_epilogue_mode(WeightGradMode mode, MainGradUpdate update, const char* form, LaunchAs&& launch_as) {
    switch (epilogue_mode(mode, update)) {
        case epilogue::WeightGradMode::kFresh:
            return launch_as.template operator()<epilogue::WeightGradMode::kFresh>();
        case epilogue::WeightGradMode::kAccumulate:
            return launch_as.template operator()<epilogue::WeightGradMode::kAccumulate>();
        case epilogue::WeightGradMode::kAccumulateByReduction:
            return launch_as.template operator()<epilogue::WeightGradMode::kAccumulateByReduction>();
    }
    return {StatusCode::kInternal, std::string(form) + ": unknown epilogue mode"};
}

template <epilogue::WeightGradMode kMode>
Status launch_weight_grad_gate_up(const WeightGradGateUpArgs& a, const LaunchConfig& launch) {
    typename WeightGradGateUpForm<kMode>::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    p.chunked = chunked_operands(a.hidden, a.width);
    if (p.chunked) {
        MOK_RETURN_IF_ERROR(map_pair_chunks(a.dgu, a.rows.capacity_rows, a.width, kMnBoxesA, &p.dgu));
        MOK_RETURN_IF_ERROR(map_row_chunks(a.x, a.rows.capacity_rows, a.hidden, a.hidden, kMnBoxesB, &p.x));
    } else {
        MOK_RETURN_IF_ERROR(map_pairs(a.dgu, a.rows.capacity_rows, a.width, kMnBoxElements, BLOCK_K, &p.dgu));
        MOK_RETURN_IF_ERROR(map_rows(a.x, a.rows.capacity_rows, a.hidden, a.hidden, kMnBoxElements, BLOCK_K, &p.x));
    }
    MOK_RETURN_IF_ERROR(weight_grad_output<kMode>(a.d_gate, a.rows.num_experts, a.width, a.hidden, &p.d_gate));
    MOK_RETURN_IF_ERROR(weight_grad_output<kMode>(a.d_up, a.rows.num_experts, a.width, a.hidden, &p.d_up));
    p.num_experts = a.rows.num_experts;
    return launch_form<WeightGradGateUpForm<kMode>>(p, launch);
}

Status weight_grad_gate_up(const WeightGradGateUpArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    return with_epilogue_mode(a.mode, a.main_grad_update, "weight_grad_gate_up", [&]<epilogue::WeightGradMode kMode>() {
        return launch_weight_grad_gate_up<kMode>(a, launch);
    });
}

template <epilogue::WeightGradMode kMode>
Status launch_weight_grad_down(const WeightGradDownArgs& a, const LaunchConfig& launch) {
    typename WeightGradDownForm<kMode>::Params p{};
    p.common = common_of(launch);
    p.groups = a.rows.groups;
    p.chunked = chunked_operands(a.hidden, a.width);
    if (p.chunked) {
        MOK_RETURN_IF_ERROR(map_row_chunks(a.dys, a.rows.capacity_rows, a.hidden, a.hidden, kMnBoxesA, &p.dys));
        MOK_RETURN_IF_ERROR(map_row_chunks(a.h, a.rows.capacity_rows, a.width, a.width, kMnBoxesB, &p.h));
    } else {
        MOK_RETURN_IF_ERROR(map_rows(a.dys, a.rows.capacity_rows, a.hidden, a.hidden, kMnBoxElements, BLOCK_K, &p.dys));
        MOK_RETURN_IF_ERROR(map_rows(a.h, a.rows.capacity_rows, a.width, a.width, kMnBoxElements, BLOCK_K, &p.h));
    }
    MOK_RETURN_IF_ERROR(weight_grad_output<kMode>(a.d_down, a.rows.num_experts, a.hidden, a.width, &p.d_down));
    p.num_experts = a.rows.num_experts;
    return launch_form<WeightGradDownForm<kMode>>(p, launch);
}

Status weight_grad_down(const WeightGradDownArgs& a, const LaunchConfig& launch) {
    MOK_RETURN_IF_ERROR(check_shape(a.rows, a.hidden, a.width, launch));
    return with_epilogue_mode(a.mode, a.main_grad_update, "weight_grad_down", [&]<epilogue::WeightGradMode kMode>() {
        return launch_weight_grad_down<kMode>(a, launch);
    });
}

}  // namespace mok::gemm
