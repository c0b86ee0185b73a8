#include "bench/common/options.hpp"

#include <charconv>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "bench/common/result.hpp"

namespace mok::bench {
namespace {

const std::string& value_after(const std::vector<std::string>& args, size_t& i) {
    if (i + 1 >= args.size()) {
        throw std::invalid_argument("flag " + args[i] + ": expected a value after it");
    }
    return args[++i];
}

int non_negative_count(const std::string& flag, const std::string& text) {
    int value = 0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size() || value < 0) {
        throw std::invalid_argument("flag " + flag + ": expected a non-negative integer, got '" + text + "'");
    }
    return value;
}

double non_negative_ms(const std::string& flag, const std::string& text) {
    double value = 0.0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size() || !(value >= 0.0)) {
        throw std::invalid_argument("flag " + flag + ": expected a non-negative number of milliseconds, got '" + text +
                                    "'");
    }
    return value;
}

}  // namespace

CommonOptions parse_common_options(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    CommonOptions options;
    options.out_dir = default_out_dir();
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--out") {
            options.out_dir = value_after(args, i);
        } else if (arg == "--quick") {
            options.quick = true;
        } else if (arg == "--full") {
            options.full = true;
        } else if (arg == "--warmup") {
            options.num_warmup = non_negative_count(arg, value_after(args, i));
        } else if (arg == "--warmup-ms") {
            options.min_warmup_ms = non_negative_ms(arg, value_after(args, i));
        } else if (arg == "--reps") {
            options.num_reps = non_negative_count(arg, value_after(args, i));
        } else if (arg == "--help" || arg == "-h") {
            options.help = true;
        } else {
            options.rest.push_back(arg);
        }
    }
    if (options.num_reps && *options.num_reps == 0) {
        throw std::invalid_argument("flag --reps: expected at least one timed repetition");
    }
    return options;
}

std::string common_options_help() {
    return "  --out DIR      write the JSON result into DIR (default: $MOK_BENCH_OUT_DIR, else bench/results)\n"
           "  --quick        a representative subset, fewer repetitions\n"
           "  --full         the whole sweep\n"
           "  --warmup N     untimed runs before the timed ones, at least\n"
           "  --warmup-ms MS and at least this much device time in them (0: the count alone)\n"
           "  --reps N       timed repetitions (median and spread are taken over them)\n"
           "  --help         this text\n";
}

CaseFilter CaseFilter::take_from(std::vector<std::string>& rest) {
    CaseFilter filter;
    std::vector<std::string> kept;
    for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] != "--cases") {
            kept.push_back(rest[i]);
            continue;
        }
        filter.pattern_ = value_after(rest, i);
        try {
            filter.regex_.emplace(filter.pattern_, std::regex::ECMAScript);
        } catch (const std::regex_error& error) {
            throw std::invalid_argument("flag --cases: '" + filter.pattern_ +
                                        "' is not a regular expression: " + error.what());
        }
    }
    rest = std::move(kept);
    return filter;
}

bool take_switch(std::vector<std::string>& rest, const std::string& flag) {
    const auto taken = std::erase(rest, flag);
    return taken > 0;
}

bool CaseFilter::selects(const std::string& case_name) const {
    return !regex_.has_value() || std::regex_search(case_name, *regex_);
}

int run_benchmark_main(int argc, char** argv, const char* program, void (*usage)(),
                       int (*run)(const CommonOptions& options), OtherFlags other_flags) {
    try {
        const CommonOptions options = parse_common_options(argc, argv);
        if (options.help) {
            usage();
            return 0;
        }
        if (other_flags == OtherFlags::kRefuse && !options.rest.empty()) {
            std::fprintf(stderr, "%s: unknown flag '%s' (see --help)\n", program, options.rest.front().c_str());
            return 2;
        }
        return run(options);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s: %s\n", program, error.what());
        return 1;
    }
}

}  // namespace mok::bench
