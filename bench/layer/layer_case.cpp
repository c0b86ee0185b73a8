// mok-bench-layer's cases and flags (layer_case.hpp).
#include "bench/layer/layer_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "bench/layer/routing.hpp"

namespace mok::bench::layer {
namespace {

constexpr double kZipfExponent = 1.2;  // as the baselines (docs/benchmarking.md)
// Seeds of the routings run before a case's own (--prior-routings): far from the case's kSeed + rank.
constexpr uint64_t kPriorRoutingSeedStride = 1000;

// A comma list of counts of at least `min` for `flag`.
std::vector<int64_t> parse_counts(const std::string& flag, const std::string& text, int64_t min) {
    std::vector<int64_t> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        size_t used = 0;
        int64_t value = 0;
        try {
            value = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || value < min) {
            throw std::invalid_argument(flag + ": a comma list of counts >= " + std::to_string(min) + ", got '" + text +
                                        "'");
        }
        out.push_back(value);
    }
    return out;
}

// A comma list of fresh, accumulate.
std::vector<GradMode> parse_grad_modes(const std::string& text) {
    std::vector<GradMode> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        if (item != "fresh" && item != "accumulate") {
            throw std::invalid_argument("--grad-modes: a comma list of fresh, accumulate, got '" + text + "'");
        }
        out.push_back(item == "fresh" ? GradMode::kFresh : GradMode::kAccumulate);
    }
    if (out.empty()) {
        throw std::invalid_argument("--grad-modes: expected at least one of fresh, accumulate");
    }
    return out;
}

std::vector<ForwardCombine> parse_combines(const std::string& text) {
    std::vector<ForwardCombine> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        ForwardCombine c = ForwardCombine::kAuto;
        if (!parse_forward_combine(item, &c)) {
            throw std::invalid_argument("--forward-combine: a comma list of auto, push, down_stores, got '" + text +
                                        "'");
        }
        out.push_back(c);
    }
    return out;
}

// A comma list of model preset names.
std::vector<std::string> parse_shapes(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        const ModelPreset* preset = nullptr;
        if (const Status s = lookup_model_preset(item, &preset); !s.is_ok()) {
            throw std::invalid_argument("--shapes: " + s.message());
        }
        out.push_back(item);
    }
    if (out.empty()) {
        throw std::invalid_argument("--shapes: expected at least one model preset");
    }
    return out;
}

// A comma list of uniform, zipf, balanced.
std::vector<std::string> parse_routings(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
        if (item != "uniform" && item != "zipf" && item != "balanced") {
            throw std::invalid_argument("--routings: a comma list of uniform, zipf, balanced, got '" + text + "'");
        }
        out.push_back(item);
    }
    if (out.empty()) {
        throw std::invalid_argument("--routings: expected at least one of uniform, zipf, balanced");
    }
    return out;
}

}  // namespace

std::string LayerCase::name(const char* pass) const {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict for `"literal" + std::string(...)` here.
    std::string out(model->name);
    out += "/ep";
    out += std::to_string(ep);
    out += "/t";
    out += std::to_string(tokens);
    out += "/";
    out += routing;
    if (comm_sms > 0) {
        out += "/comm";
        out += std::to_string(comm_sms);
    }
    if (one_stream) {
        out += "/one-stream";
    }
    if (!gemm_arrangements) {
        out += "/cooperative";
    }
    if (forward_combine != ForwardCombine::kAuto) {
        out += "/";
        out += combine_name();
    }
    if (token_groups) {
        out += "/token-groups";
    }
    if (grad_mode != GradMode::kFresh) {
        out += "/";
        out += grad_mode_name();
    }
    out += "/";
    out += pass;
    return out;
}

std::string LayerCase::grad_mode_name() const {
    return grad_mode == GradMode::kFresh ? "fresh" : "accumulate";
}

std::string LayerCase::combine_name() const {
    return to_string(forward_combine);
}

std::vector<int32_t> make_expert_ids(const LayerCase& c, int rank, int variant) {
    const int64_t num_experts = c.model->num_experts;
    const int64_t k = c.model->top_k;
    if (c.routing == "balanced") {
        return balanced_expert_ids(c.tokens, k, num_experts, rank);
    }
    std::mt19937_64 rng(kSeed + kPriorRoutingSeedStride * static_cast<uint64_t>(variant) + static_cast<uint64_t>(rank));
    std::vector<double> weights(num_experts, 1.0);
    if (c.routing == "zipf") {
        std::vector<int64_t> order(num_experts);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937_64(kSeed));
        for (int64_t e = 0; e < num_experts; ++e) {
            weights[e] = 1.0 / std::pow(static_cast<double>(order[e] + 1), kZipfExponent);
        }
    }
    std::vector<int32_t> ids(c.tokens * k);
    for (int64_t t = 0; t < c.tokens; ++t) {
        std::vector<double> w = weights;
        for (int64_t s = 0; s < k; ++s) {
            std::discrete_distribution<int32_t> pick(w.begin(), w.end());
            const int32_t e = pick(rng);
            ids[t * k + s] = e;
            w[e] = 0.0;  // distinct experts per token
        }
    }
    return ids;
}

double forward_flops(const LayerCase& c) {
    const double h = static_cast<double>(c.model->hidden);
    double flops = static_cast<double>(c.tokens) * c.model->top_k * 6.0 * h * c.model->expert_width;
    for (const int64_t width : c.model->shared_expert_widths) {
        flops += static_cast<double>(c.tokens) * 6.0 * h * width;
    }
    return flops;
}

LayerFlags parse_flags(const std::vector<std::string>& rest) {
    LayerFlags flags;
    for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] == "--one-stream") {
            flags.one_stream = true;
            continue;
        }
        if (rest[i] == "--gemm-cooperative") {
            flags.gemm_cooperative = true;
            continue;
        }
        if (rest[i] == "--token-groups") {
            flags.token_groups = true;
            continue;
        }
        if (i + 1 >= rest.size() ||
            (rest[i] != "--comm-sms" && rest[i] != "--tokens" && rest[i] != "--forward-combine" &&
             rest[i] != "--shapes" && rest[i] != "--routings" && rest[i] != "--prior-routings" &&
             rest[i] != "--grad-modes")) {
            throw std::invalid_argument("unknown flag or missing value: '" + rest[i] + "' (see --help)");
        }
        const std::string& flag = rest[i];
        const std::string& value = rest[++i];
        if (flag == "--tokens") {
            flags.tokens = parse_counts(flag, value, 1);
        } else if (flag == "--forward-combine") {
            flags.forward_combine = parse_combines(value);
        } else if (flag == "--shapes") {
            flags.shapes = parse_shapes(value);
        } else if (flag == "--routings") {
            flags.routings = parse_routings(value);
        } else if (flag == "--grad-modes") {
            flags.grad_modes = parse_grad_modes(value);
        } else if (flag == "--prior-routings") {
            const std::vector<int64_t> counts = parse_counts(flag, value, 0);
            if (counts.size() != 1) {
                throw std::invalid_argument("--prior-routings: expected one count, got '" + value + "'");
            }
            flags.prior_routings = static_cast<int>(counts[0]);
        } else {
            const std::vector<int64_t> sms = parse_counts(flag, value, 0);
            flags.comm_sms.assign(sms.begin(), sms.end());
        }
    }
    return flags;
}

std::vector<LayerCase> sweep(const CommonOptions& options, const LayerFlags& flags, int visible_gpus) {
    std::vector<std::string> models = {"deepseek-v3", "qwen3.5-397b-a17b"};
    std::vector<int64_t> tokens = {4096};
    std::vector<std::string> routings = {"uniform", "zipf"};
    if (options.quick) {
        models = {"deepseek-v3"};
        routings = {"uniform"};
    }
    if (options.full) {
        models.clear();
        for (const ModelPreset& preset : model_presets()) {
            models.emplace_back(preset.name);
        }
        tokens = {2048, 4096, 16384};
    }
    if (!flags.tokens.empty()) {
        tokens = flags.tokens;
    }
    if (!flags.shapes.empty()) {
        models = flags.shapes;
    }
    if (!flags.routings.empty()) {
        routings = flags.routings;
    }
    std::vector<int> eps = {1};
    if (visible_gpus >= 2) {
        eps.push_back(2);
    }
    std::vector<LayerCase> out;
    for (const std::string& name : models) {
        const ModelPreset* model = find_model_preset(name);
        for (const int64_t t : tokens) {
            for (const int ep : eps) {
                for (const std::string& routing : routings) {
                    for (const int sms : flags.comm_sms) {
                        for (const ForwardCombine combine : flags.forward_combine) {
                            for (const GradMode mode : flags.grad_modes) {
                                out.push_back({model, t, ep, routing, sms, flags.one_stream, true, combine,
                                               flags.prior_routings, mode});
                                if (flags.gemm_cooperative) {
                                    out.push_back({model, t, ep, routing, sms, flags.one_stream, false, combine,
                                                   flags.prior_routings, mode});
                                }
                                if (flags.token_groups) {
                                    out.push_back({model, t, ep, routing, sms, flags.one_stream, true, combine,
                                                   flags.prior_routings, mode, true});
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return out;
}

void print_usage() {
    std::printf(
        "usage: mok-bench-layer [flags]\n"
        "The MoE layer (forward, backward) at EP 1 and EP 2: DeepSeek-V3 and Qwen3.5 at 4096 tokens per rank,\n"
        "uniform and Zipf routing (--quick: DeepSeek-V3 uniform; --full: every preset at 2048, 4096, 16384\n"
        "tokens). Pairs with bench/baselines/layer_baseline.py in the same run. Writes one JSON result.\n%s"
        "  --comm-sms LIST   comma list of communication SM counts to run each case at (Config::num_comm_sms_*;\n"
        "                    0, the default, is the library's choice; other counts add /comm<N> to the case name)\n"
        "  --one-stream      time the one-stream order instead of the pipelined one (every kernel after the one\n"
        "                    before it): for profilers that serialise kernels, under which a GEMM waiting for\n"
        "                    the dispatch's rows would time out; adds /one-stream to the case names\n"
        "  --gemm-cooperative  also time each case with Config::gemm_pingpong and gemm_epilogue_warps off\n"
        "                      (every GEMM in the cooperative arrangement, docs/gemm.md); those cases carry\n"
        "                      /cooperative in their names\n"
        "  --token-groups    also time each case with Config::dispatch_token_groups on (the dispatch pulls a\n"
        "                    token's rows once per group of four); those cases carry /token-groups in their names\n"
        "  --tokens LIST     comma list of tokens per rank, in place of the sweep's\n"
        "  --shapes LIST     comma list of model presets (the names of layer_baseline.py --shapes), in place of\n"
        "                    the sweep's\n"
        "  --routings LIST   comma list of uniform, zipf, balanced, in place of the sweep's; balanced gives every\n"
        "                    expert the same rows (no padding where that count is a multiple of 128) and has no\n"
        "                    baseline case to pair with\n"
        "  --forward-combine LIST  comma list of auto, push, down_stores (Config::forward_combine); cases other\n"
        "                    than auto carry /push or /down_stores in their names\n"
        "  --prior-routings N  before each case, N steps with other routings of the same skew, so that the rows\n"
        "                    its plan leaves as padding hold earlier data, as in training (default 0: a fresh,\n"
        "                    zeroed workspace)\n"
        "  --grad-modes LIST  comma list of fresh, accumulate (BackwardArgs::grad_mode; default fresh): accumulate\n"
        "                    adds the weight gradients into fp32 main_grad and times the backward alone (its\n"
        "                    forward is fresh's); those cases carry /accumulate in their names\n",
        common_options_help().c_str());
}

}  // namespace mok::bench::layer
