#include "run_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string_view>

namespace mok::run {
namespace {

constexpr int64_t kDefaultTokens = 4096;

const char* const kValueFlags[] = {
    "--model",         "--tokens",  "--ep",   "--experts", "--hidden",          "--width",     "--top-k",
    "--shared-widths", "--routing", "--seed", "--backend", "--capacity-factor", "--iterations"};
const char* const kSwitchFlags[] = {"--full-size", "--help", "--list-models"};

bool is_one_of(std::string_view flag, std::span<const char* const> flags) {
    for (const char* f : flags) {
        if (flag == f) {
            return true;
        }
    }
    return false;
}

template <typename Int>
Status parse_int(const std::string& flag, const std::string& text, Int* out) {
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, *out);
    if (ec != std::errc() || ptr != end) {
        return Status::invalid_argument(flag, "an integer, got '" + text + "'");
    }
    return Status::ok();
}

Status parse_widths(const std::string& text, std::vector<int64_t>* out) {
    out->clear();
    if (text == "none" || text.empty()) {
        return Status::ok();
    }
    size_t begin = 0;
    while (begin <= text.size()) {
        const size_t end = std::min(text.find(',', begin), text.size());
        int64_t width = 0;
        MOK_RETURN_IF_ERROR(parse_int("--shared-widths", text.substr(begin, end - begin), &width));
        out->push_back(width);
        begin = end + 1;
    }
    return Status::ok();
}

Status parse_routing(const std::string& text, RunOptions* out) {
    constexpr std::string_view kZipfPrefix = "zipf:";
    if (text == "uniform") {
        out->routing = RoutingKind::kUniform;
    } else if (text == "one-expert") {
        out->routing = RoutingKind::kOneExpert;
    } else if (text == "one-rank") {
        out->routing = RoutingKind::kOneRank;
    } else if (text.starts_with(kZipfPrefix)) {
        out->routing = RoutingKind::kZipf;
        const std::string exponent = text.substr(kZipfPrefix.size());
        const char* end = exponent.data() + exponent.size();
        const auto [ptr, ec] = std::from_chars(exponent.data(), end, out->zipf_exponent);
        if (ec != std::errc() || ptr != end || !(out->zipf_exponent > 0.0)) {
            return Status::invalid_argument("--routing", "zipf:<s> with a positive exponent s, got '" + text + "'");
        }
    } else {
        return Status::invalid_argument("--routing", "uniform, zipf:<s>, one-expert or one-rank, got '" + text + "'");
    }
    return Status::ok();
}

// Flag -> value ("" for switches), accepting "--flag value" and "--flag=value".
Status collect_flags(int argc, char** argv, std::map<std::string, std::string>* flags) {
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        std::optional<std::string> value;
        if (const size_t eq = flag.find('='); eq != std::string::npos) {
            value = flag.substr(eq + 1);
            flag.resize(eq);
        }
        if (flag == "-h") {
            flag = "--help";
        }
        if (is_one_of(flag, kSwitchFlags)) {
            (*flags)[flag] = "";
        } else if (is_one_of(flag, kValueFlags)) {
            if (!value) {
                if (i + 1 >= argc) {
                    return Status::invalid_argument(flag, "a value after it");
                }
                value = argv[++i];
            }
            (*flags)[flag] = *value;
        } else {
            return Status::invalid_argument(flag, "a known flag (see --help)");
        }
    }
    return Status::ok();
}

Status resolve_shape(const std::map<std::string, std::string>& flags, RunOptions* out) {
    const auto find = [&](const char* flag) -> const std::string* {
        const auto it = flags.find(flag);
        return it == flags.end() ? nullptr : &it->second;
    };
    LayerShape& shape = out->requested;
    out->model_name = "custom";
    if (const std::string* model = find("--model")) {
        const ModelPreset* preset = nullptr;
        MOK_RETURN_IF_ERROR(lookup_model_preset(*model, &preset));
        shape = preset->layer_shape(kDefaultTokens);
        out->model_name = preset->display_name;
    } else if (!find("--experts") || !find("--hidden") || !find("--width") || !find("--top-k")) {
        return Status::invalid_argument("--model",
                                        "a model preset, or all of --experts, --hidden, --width and --top-k");
    }
    // Explicit dimensions override the preset's.
    const std::pair<const char*, int64_t*> dims[] = {{"--tokens", &shape.tokens_per_rank},
                                                     {"--experts", &shape.num_experts},
                                                     {"--hidden", &shape.hidden},
                                                     {"--width", &shape.expert_width},
                                                     {"--top-k", &shape.top_k}};
    shape.tokens_per_rank = kDefaultTokens;
    for (const auto& [flag, field] : dims) {
        if (const std::string* text = find(flag)) {
            MOK_RETURN_IF_ERROR(parse_int(flag, *text, field));
        }
    }
    if (const std::string* text = find("--shared-widths")) {
        MOK_RETURN_IF_ERROR(parse_widths(*text, &shape.shared_expert_widths));
    }
    return Status::ok();
}

}  // namespace

Status parse_run_options(int argc, char** argv, RunOptions* out) {
    std::map<std::string, std::string> flags;
    MOK_RETURN_IF_ERROR(collect_flags(argc, argv, &flags));
    out->help = flags.contains("--help");
    out->list_models = flags.contains("--list-models");
    if (out->help || out->list_models) {
        return Status::ok();
    }
    MOK_RETURN_IF_ERROR(resolve_shape(flags, out));
    out->full_size = flags.contains("--full-size");
    if (flags.contains("--ep")) {
        MOK_RETURN_IF_ERROR(parse_int("--ep", flags["--ep"], &out->ep_size));
    }
    if (flags.contains("--seed")) {
        MOK_RETURN_IF_ERROR(parse_int("--seed", flags["--seed"], &out->seed));
    }
    if (flags.contains("--routing")) {
        MOK_RETURN_IF_ERROR(parse_routing(flags["--routing"], out));
    }
    if (flags.contains("--capacity-factor")) {
        const std::string& text = flags["--capacity-factor"];
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, out->capacity_factor);
        if (ec != std::errc() || ptr != end || !(out->capacity_factor >= 0.0)) {
            return Status::invalid_argument("--capacity-factor", "a number >= 0, got '" + text + "'");
        }
    }
    if (flags.contains("--iterations")) {
        MOK_RETURN_IF_ERROR(parse_int("--iterations", flags["--iterations"], &out->iterations));
        if (out->iterations < 1) {
            return Status::invalid_argument("--iterations", "at least 1, got " + flags["--iterations"]);
        }
    }
    if (flags.contains("--backend")) {
        const std::string& backend = flags["--backend"];
        if (backend == "cpu") {
            out->backend = Backend::kCpuReference;
        } else if (backend == "cuda") {
            out->backend = Backend::kCuda;
        } else {
            return Status::invalid_argument("--backend", "cpu or cuda, got '" + backend + "'");
        }
    }
    return Status::ok();
}

std::string describe_routing(const RunOptions& options) {
    switch (options.routing) {
        case RoutingKind::kUniform:
            return "uniform";
        case RoutingKind::kZipf: {
            char text[48];
            std::snprintf(text, sizeof(text), "zipf:%g", options.zipf_exponent);
            return text;
        }
        case RoutingKind::kOneExpert:
            return "one-expert";
        case RoutingKind::kOneRank:
            return "one-rank";
    }
    return "unknown";
}

std::string usage() {
    return "usage: mok-run (--model NAME | --experts E --hidden H --width I --top-k K) [options]\n"
           "\n"
           "Runs forward and backward of one MoE layer through mok's public API and reports routing, timing and\n"
           "output checksums.\n"
           "\n"
           "  --model NAME          a model preset (--list-models); the flags below override its dimensions\n"
           "  --experts E           routed experts in the EP group (a multiple of --ep)\n"
           "  --hidden H            hidden size (a multiple of 8)\n"
           "  --width I             routed expert width (a multiple of 8)\n"
           "  --top-k K             routing slots per token\n"
           "  --shared-widths LIST  shared expert widths, comma-separated, or 'none'\n"
           "  --tokens T            tokens per rank (default 4096)\n"
           "  --ep R                expert-parallel ranks (default 1)\n"
           "  --routing KIND        uniform (default), zipf:<s>, one-expert or one-rank\n"
           "  --seed N              seed of the random inputs and routing (default 1)\n"
           "  --backend NAME        cpu (default, the CPU reference) or cuda (the GPU layer, full size; all --ep\n"
           "                        ranks on GPU 0 as virtual ranks, at most 8)\n"
           "  --capacity-factor F   Config::schedule_capacity_factor (default: 0, the worst case, on the CPU; 2 on\n"
           "                        the GPU, where worst-case buffers of a full model do not fit)\n"
           "  --iterations N        timed steps after one warm-up step on the GPU (default 5)\n"
           "  --full-size           run the requested shape on the CPU reference (by default it runs a reduced\n"
           "                        H, I and T so that it finishes in seconds; E, k and R are kept)\n"
           "  --list-models         print the model presets\n"
           "  --help                print this text\n";
}

}  // namespace mok::run
