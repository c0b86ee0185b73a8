#include "report.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "common/bf16.hpp"
#include "parallel.hpp"

namespace mok::run {
namespace {

// Up to this many ranks or experts are listed one by one; more are summarised.
constexpr size_t kMaxListed = 16;
constexpr size_t kHottestListed = 5;

// Tensors are checksummed in fixed chunks, spread over threads (parallel_ranges), and the chunks' results are
// combined in order: a full-size layer's weight gradients are tens of gigabytes, which a byte-at-a-time hash took
// longer to read than the layer took to set up and run. The chunk size is fixed, so the checksums do not depend
// on the number of threads.
constexpr size_t kChunkBytes = size_t{1} << 20;

// FNV-1a, 64 bits: order-sensitive, so it changes when any bit of any byte moves.
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
uint64_t fnv1a(uint64_t hash, const unsigned char* p, size_t bytes) {
    constexpr uint64_t kFnvPrime = 0x100000001b3ull;
    for (size_t i = 0; i < bytes; ++i) {
        hash = (hash ^ p[i]) * kFnvPrime;
    }
    return hash;
}

// One chunk's part: the FNV-1a of its bytes and the sum of its values, in element order.
struct ChunkDigest {
    uint64_t hash = kFnvBasis;
    double sum = 0.0;
};

template <typename T, typename ToDouble>
std::vector<ChunkDigest> digest_chunks(std::span<const T> values, ToDouble&& to_double) {
    constexpr size_t kPerChunk = kChunkBytes / sizeof(T);
    const size_t num_chunks = (values.size() + kPerChunk - 1) / kPerChunk;
    std::vector<ChunkDigest> digests(num_chunks);
    parallel_ranges(static_cast<int64_t>(num_chunks), 1, [&](int64_t first, int64_t end) {
        for (auto c = static_cast<size_t>(first); c < static_cast<size_t>(end); ++c) {
            const std::span<const T> chunk =
                values.subspan(c * kPerChunk, std::min(kPerChunk, values.size() - c * kPerChunk));
            ChunkDigest& d = digests[c];
            for (const T v : chunk) {
                d.sum += to_double(v);
            }
            d.hash = fnv1a(kFnvBasis, reinterpret_cast<const unsigned char*>(chunk.data()), chunk.size_bytes());
        }
    });
    return digests;
}

struct Checksum {
    double sum = 0.0;
    // FNV-1a over the 8 bytes of each chunk's FNV-1a, chunk after chunk, tensor after tensor.
    uint64_t hash = kFnvBasis;

    void absorb(const std::vector<ChunkDigest>& digests) {
        for (const ChunkDigest& d : digests) {
            sum += d.sum;
            unsigned char bytes[sizeof(d.hash)];
            std::memcpy(bytes, &d.hash, sizeof(bytes));
            hash = fnv1a(hash, bytes, sizeof(bytes));
        }
    }
    void add(std::span<const uint16_t> bf16) {
        absorb(digest_chunks(bf16, [](uint16_t b) { return static_cast<double>(bf16_bits_to_float(b)); }));
    }
    void add(std::span<const float> values) {
        absorb(digest_chunks(values, [](float v) { return static_cast<double>(v); }));
    }
    void add(const ExpertBuffers& grads) {
        add(grads.gate);
        add(grads.up);
        add(grads.down);
    }
};

void print_checksum(const char* name, const Checksum& c) {
    std::printf("  %-18s sum %+.9e  bits %016" PRIx64 "\n", name, c.sum, c.hash);
}

double max_over_mean(const std::vector<int64_t>& rows) {
    const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
    if (total == 0) {
        return 1.0;
    }
    const int64_t max_rows = *std::max_element(rows.begin(), rows.end());
    return static_cast<double>(max_rows) * static_cast<double>(rows.size()) / static_cast<double>(total);
}

void print_expert_rows(const std::vector<int64_t>& rows) {
    if (rows.size() <= kMaxListed) {
        std::printf("  rows per expert:");
        for (int64_t r : rows) {
            std::printf(" %" PRId64, r);
        }
        std::printf("\n");
        return;
    }
    std::vector<int64_t> sorted = rows;
    std::sort(sorted.begin(), sorted.end());
    const auto idle = std::count(rows.begin(), rows.end(), int64_t{0});
    std::printf("  rows per expert: min %" PRId64 ", median %" PRId64 ", max %" PRId64
                " over %zu experts (%td with no rows)\n",
                sorted.front(), sorted[sorted.size() / 2], sorted.back(), rows.size(), idle);
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + kHottestListed, order.end(),
                      [&](size_t a, size_t b) { return rows[a] > rows[b]; });
    std::printf("  hottest experts:");
    for (size_t i = 0; i < kHottestListed; ++i) {
        std::printf(" e%zu:%" PRId64, order[i], rows[order[i]]);
    }
    std::printf("\n");
}

}  // namespace

std::string describe_shape(const LayerShape& s, int ep_size) {
    std::string widths;
    for (int64_t w : s.shared_expert_widths) {
        widths += (widths.empty() ? "" : ", ") + std::to_string(w);
    }
    char text[256];
    std::snprintf(text, sizeof(text),
                  "T %" PRId64 " tokens/rank, H %" PRId64 ", I %" PRId64 ", E %" PRId64 ", k %" PRId64
                  ", shared {%s}, EP %d",
                  s.tokens_per_rank, s.hidden, s.expert_width, s.num_experts, s.top_k, widths.c_str(), ep_size);
    return text;
}

void print_models() {
    for (const ModelPreset& preset : model_presets()) {
        std::printf("%-20s %-20s %s\n", std::string(preset.name).c_str(), std::string(preset.display_name).c_str(),
                    describe_shape(preset.layer_shape(4096), 1).c_str());
    }
}

void print_routing(const ForwardContext& context, int ep_size) {
    std::vector<int64_t> rank_rows;
    std::vector<int64_t> expert_rows;
    std::printf("routing (rows each rank's experts received; padded to the 128-row GEMM tile):\n");
    for (int r = 0; r < ep_size; ++r) {
        const RoutingStats& stats = context.stats(r);
        const int64_t routed =
            std::accumulate(stats.rows_per_local_expert.begin(), stats.rows_per_local_expert.end(), int64_t{0});
        rank_rows.push_back(routed);
        expert_rows.insert(expert_rows.end(), stats.rows_per_local_expert.begin(), stats.rows_per_local_expert.end());
        if (ep_size <= static_cast<int>(kMaxListed)) {
            std::printf("  rank %-3d %10" PRId64 " rows, %10" PRId64 " padded\n", r, routed, stats.padded_rows);
        }
    }
    if (ep_size > static_cast<int>(kMaxListed)) {
        const auto [lo, hi] = std::minmax_element(rank_rows.begin(), rank_rows.end());
        std::printf("  rows per rank: min %" PRId64 ", max %" PRId64 " over %d ranks\n", *lo, *hi, ep_size);
    }
    print_expert_rows(expert_rows);
    std::printf("  imbalance (max / mean rows): ranks %.3f, experts %.3f (%" PRId64 " routed rows in all)\n",
                max_over_mean(rank_rows), max_over_mean(expert_rows),
                std::accumulate(rank_rows.begin(), rank_rows.end(), int64_t{0}));
}

void print_checksums(const LayerData& data) {
    Checksum y, dx, d_router, d_weights;
    for (const RankBuffers& rank : data.ranks()) {
        y.add(rank.y);
        dx.add(rank.dx);
        d_router.add(rank.d_router_weights);
        d_weights.add(rank.d_experts);
        for (const ExpertBuffers& shared : rank.d_shared) {
            d_weights.add(shared);
        }
    }
    std::printf("checksums (all ranks in order; bits: FNV-1a 64 over each MiB's FNV-1a 64):\n");
    print_checksum("y", y);
    print_checksum("dx", dx);
    print_checksum("d_router_weights", d_router);
    print_checksum("weight grads", d_weights);
}

}  // namespace mok::run
