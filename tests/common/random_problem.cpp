#include "common/random_problem.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "common/bf16.hpp"

namespace mok::testing {
namespace {

// Exact-arithmetic values are n * 2^-scale_log2 with |n| <= kExactMaxInteger (reference: Values).
constexpr int kExactMaxInteger = 8;
constexpr int kExactInputScaleLog2 = 2;   // x
constexpr int kExactWeightScaleLog2 = 4;  // gate, up, down
constexpr int kExactGradScaleLog2 = 3;    // dy
constexpr int kExactRouterScaleLog2 = 2;  // router weights

// Draws from the 64-bit Mersenne Twister, whose output sequence the standard fixes, with our own mapping to
// ranges (the standard distributions' algorithms differ between libraries).
class Random {
  public:
    explicit Random(uint64_t seed) : engine_(seed) {}

    // Uniform in [0, 1), 53 random bits.
    double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
    // Uniform in [lo, hi]; the modulo bias is below 2^-50 at the ranges used here.
    int64_t integer(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(engine_() % (hi - lo + 1)); }
    bool chance(double p) { return unit() < p; }

  private:
    std::mt19937_64 engine_;
};

double exact_value(Random& random, int scale_log2) {
    return std::ldexp(static_cast<double>(random.integer(-kExactMaxInteger, kExactMaxInteger)), -scale_log2);
}

double bf16_value(Random& random, double scale) {
    return round_to_bf16(static_cast<float>(scale * random.uniform(-1.0, 1.0)));
}

// A [rows, cols] matrix of a layer weight whose fan-in is `fan_in`.
std::vector<double> random_weight(Random& random, int64_t count, int64_t fan_in, Values values) {
    std::vector<double> out(count);
    const double scale = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (double& v : out) {
        v = values == Values::kExactArithmetic ? exact_value(random, kExactWeightScaleLog2) : bf16_value(random, scale);
    }
    return out;
}

reference::ExpertParams random_experts(Random& random, int64_t count, int64_t width, int64_t hidden, Values values) {
    return {random_weight(random, count * width * hidden, hidden, values),
            random_weight(random, count * width * hidden, hidden, values),
            random_weight(random, count * hidden * width, width, values)};
}

// The experts a token may pick, with their relative popularity.
struct Candidates {
    std::vector<int32_t> experts;
    std::vector<double> popularity;
};

Candidates routing_candidates(const ProblemOptions& o, Random& random) {
    std::vector<double> popularity(o.num_experts, 1.0);
    if (o.routing == Routing::kZipf) {
        std::vector<int32_t> order(o.num_experts);
        for (int32_t e = 0; e < o.num_experts; ++e) {
            order[e] = e;
        }
        for (int64_t i = o.num_experts - 1; i > 0; --i) {
            std::swap(order[i], order[random.integer(0, i)]);
        }
        for (int32_t p = 0; p < o.num_experts; ++p) {
            popularity[order[p]] = 1.0 / std::pow(static_cast<double>(p + 1), o.zipf_exponent);
        }
    }
    Candidates c;
    for (int32_t e = 0; e < o.num_experts; ++e) {
        const bool idle = std::find(o.idle_experts.begin(), o.idle_experts.end(), e) != o.idle_experts.end();
        const bool hot = e >= o.hot_first_expert && e < o.hot_first_expert + o.num_hot_experts;
        if (!idle && (o.routing != Routing::kHotRange || hot)) {
            c.experts.push_back(e);
            c.popularity.push_back(popularity[e]);
        }
    }
    return c;
}

// One token's k slots: min(k, candidates) distinct experts drawn by popularity without replacement, some made
// unused, in random slot order.
void route_token(const ProblemOptions& o, const Candidates& c, Random& random, int32_t* slots) {
    std::vector<double> weight = c.popularity;
    std::fill(slots, slots + o.top_k, plan::kUnusedSlot);
    const int64_t picks = std::min<int64_t>(o.top_k, static_cast<int64_t>(c.experts.size()));
    for (int64_t j = 0; j < picks; ++j) {
        double total = 0.0;
        for (const double w : weight) {
            total += w;
        }
        // The first expert whose cumulative popularity passes the target; the last one still available if
        // rounding carries the target past the total.
        double target = random.uniform(0.0, total);
        size_t pick = weight.size();
        size_t last_available = 0;
        for (size_t i = 0; i < weight.size() && pick == weight.size(); ++i) {
            if (weight[i] > 0.0) {
                last_available = i;
                if (target < weight[i]) {
                    pick = i;
                }
                target -= weight[i];
            }
        }
        pick = pick < weight.size() ? pick : last_available;
        slots[j] = random.chance(o.unused_slot_fraction) ? plan::kUnusedSlot : c.experts[pick];
        weight[pick] = 0.0;
    }
    for (int64_t j = o.top_k - 1; j > 0; --j) {
        std::swap(slots[j], slots[random.integer(0, j)]);
    }
}

std::string list(const std::vector<int64_t>& values) {
    std::ostringstream out;
    out << "{";
    for (size_t i = 0; i < values.size(); ++i) {
        out << (i > 0 ? ", " : "") << values[i];
    }
    out << "}";
    return out.str();
}

}  // namespace

std::string ProblemOptions::describe() const {
    std::ostringstream out;
    out << "N " << num_tokens << ", H " << hidden << ", I " << expert_width << ", E " << num_experts << ", k " << top_k
        << ", shared " << list(shared_expert_widths) << ", routing ";
    switch (routing) {
        case Routing::kUniform:
            out << "uniform";
            break;
        case Routing::kZipf:
            out << "zipf(" << zipf_exponent << ")";
            break;
        case Routing::kHotRange:
            out << "hot experts [" << hot_first_expert << ", " << hot_first_expert + num_hot_experts << ")";
            break;
    }
    out << ", unused " << unused_slot_fraction << ", idle "
        << list(std::vector<int64_t>(idle_experts.begin(), idle_experts.end())) << ", zero weights "
        << zero_weight_fraction << ", values " << (values == Values::kExactArithmetic ? "exact" : "bf16");
    return out.str();
}

reference::GlobalBatch random_global_batch(const ProblemOptions& o, uint64_t seed) {
    Random random(seed);
    reference::GlobalBatch batch;
    batch.shape.hidden = o.hidden;
    batch.shape.expert_width = o.expert_width;
    batch.shape.num_experts = o.num_experts;
    batch.shape.top_k = o.top_k;
    batch.shape.shared_expert_widths = o.shared_expert_widths;
    batch.num_tokens = o.num_tokens;

    batch.x.resize(o.num_tokens * o.hidden);
    for (double& v : batch.x) {
        v = o.values == Values::kExactArithmetic ? exact_value(random, kExactInputScaleLog2) : bf16_value(random, 1.0);
    }
    const Candidates candidates = routing_candidates(o, random);
    batch.expert_ids.resize(o.num_tokens * o.top_k);
    batch.router_weights.resize(o.num_tokens * o.top_k);
    for (int64_t t = 0; t < o.num_tokens; ++t) {
        route_token(o, candidates, random, &batch.expert_ids[t * o.top_k]);
    }
    for (double& w : batch.router_weights) {
        if (random.chance(o.zero_weight_fraction)) {
            w = 0.0;
        } else if (o.values == Values::kExactArithmetic) {
            w = exact_value(random, kExactRouterScaleLog2);
        } else {
            w = static_cast<float>(random.uniform(-1.0, 1.0));
        }
    }
    batch.experts = random_experts(random, o.num_experts, o.expert_width, o.hidden, o.values);
    for (const int64_t width : o.shared_expert_widths) {
        batch.shared.push_back(random_experts(random, 1, width, o.hidden, o.values));
    }
    return batch;
}

std::vector<double> random_output_grad(int64_t rows, int64_t hidden, Values values, uint64_t seed) {
    Random random(seed);
    std::vector<double> out(rows * hidden);
    for (double& v : out) {
        v = values == Values::kExactArithmetic ? exact_value(random, kExactGradScaleLog2) : bf16_value(random, 1.0);
    }
    return out;
}

std::vector<std::vector<double>> split_rows(const std::vector<double>& global, int ep_size) {
    const size_t per_rank = global.size() / ep_size;
    std::vector<std::vector<double>> out;
    for (int r = 0; r < ep_size; ++r) {
        out.emplace_back(global.begin() + r * per_rank, global.begin() + (r + 1) * per_rank);
    }
    return out;
}

std::vector<double> concat_ranks(const std::vector<std::vector<double>>& per_rank) {
    std::vector<double> out;
    for (const std::vector<double>& part : per_rank) {
        out.insert(out.end(), part.begin(), part.end());
    }
    return out;
}

reference::ExpertParams concat_expert_grads(const std::vector<reference::RankGrads>& grads) {
    reference::ExpertParams out;
    for (const reference::RankGrads& rank : grads) {
        out.gate.insert(out.gate.end(), rank.d_experts.gate.begin(), rank.d_experts.gate.end());
        out.up.insert(out.up.end(), rank.d_experts.up.begin(), rank.d_experts.up.end());
        out.down.insert(out.down.end(), rank.d_experts.down.begin(), rank.d_experts.down.end());
    }
    return out;
}

}  // namespace mok::testing
