// Command-line flags every benchmark program shares, so tools/gpu_runner.sh drives them all alike:
//   --out DIR      where the JSON goes (default: MOK_BENCH_OUT_DIR, else the source tree's bench/results)
//   --quick        a representative subset with fewer repetitions
//   --full         the whole sweep
//   --warmup N     untimed runs before the timed ones, at least (default: the benchmark's own)
//   --warmup-ms MS and at least this much device time in them, 0 for the count alone (default: the benchmark's own)
//   --reps N       timed repetitions (default: the benchmark's own)
//   --help         print the flags and exit
// Anything else is left, in order, for the program's own flags.
#pragma once

#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace mok::bench {

struct CommonOptions {
    std::filesystem::path out_dir;
    bool quick = false;
    bool full = false;
    std::optional<int> num_warmup;
    std::optional<double> min_warmup_ms;
    std::optional<int> num_reps;
    bool help = false;
    std::vector<std::string> rest;  // arguments this parser does not know, for the program to read
};

// Parses argv[1..argc). Throws std::invalid_argument naming the flag when a value is missing or malformed.
CommonOptions parse_common_options(int argc, char** argv);

// The help text for the flags above, one per line, for a program's --help.
std::string common_options_help();

// `--cases REGEX`, a flag of the benchmarks whose cases are many (mok-bench-gemm): only the cases whose name matches
// the ECMAScript expression anywhere (std::regex_search) run, so that an A/B of one form costs seconds of GPU time,
// not the whole sweep's. Without the flag every case runs.
class CaseFilter {
  public:
    // Takes `--cases REGEX` out of `rest` (the last one given counts). Throws std::invalid_argument naming the flag
    // when the value is missing or is not a regular expression.
    static CaseFilter take_from(std::vector<std::string>& rest);

    bool selects(const std::string& case_name) const;
    // The expression as given; empty when every case runs.
    const std::string& pattern() const { return pattern_; }

  private:
    std::string pattern_;
    std::optional<std::regex> regex_;
};

// Takes every `flag` (a switch without a value) out of `rest`; returns whether there was one.
bool take_switch(std::vector<std::string>& rest, const std::string& flag);

// What a benchmark program does with the flags the common parser does not know.
enum class OtherFlags {
    kRefuse,  // exit 2, naming the first
    kPass,    // leave them in CommonOptions::rest for run(), which throws std::invalid_argument on a bad one
};

// The main() of a benchmark program: parses the common flags, prints `usage()` for --help, handles the others as
// `other_flags` says, and runs `run(options)`; an exception becomes a message and exit 1.
int run_benchmark_main(int argc, char** argv, const char* program, void (*usage)(),
                       int (*run)(const CommonOptions& options), OtherFlags other_flags = OtherFlags::kRefuse);

}  // namespace mok::bench
