#include "bench/common/result.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <stdexcept>

// Set by bench/common/CMakeLists.txt; the fallbacks keep the file compilable on its own.
#ifndef MOK_BENCH_CONFIGURED_COMMIT
#define MOK_BENCH_CONFIGURED_COMMIT ""
#endif
#ifndef MOK_BENCH_DEFAULT_OUT_DIR
#define MOK_BENCH_DEFAULT_OUT_DIR "bench/results"
#endif

namespace mok::bench {
namespace {

const char* better_name(Better better) {
    return better == Better::kLower ? "lower" : "higher";
}

const char* status_name(CaseStatus status) {
    switch (status) {
        case CaseStatus::kOk:
            return "ok";
        case CaseStatus::kSkipped:
            return "skipped";
        case CaseStatus::kFailed:
            return "failed";
    }
    return "failed";
}

std::string env_or_empty(const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
}

Json reference_json(const Reference& reference) {
    Json json = Json::object();
    json.set("name", reference.name).set("value", reference.value);
    if (!reference.unit.empty()) {
        json.set("unit", reference.unit);
    }
    return json;
}

Json figure_json(const Figure& figure) {
    Json json = Json::object();
    json.set("name", figure.name)
        .set("unit", figure.unit)
        .set("better", better_name(figure.better))
        .set("value", figure.value)
        .set("reps", figure.num_reps);
    if (figure.spread) {
        Json spread = Json::object();
        spread.set("min", figure.spread->min)
            .set("p25", figure.spread->p25)
            .set("p75", figure.spread->p75)
            .set("max", figure.spread->max);
        json.set("spread", std::move(spread));
    }
    if (!figure.samples.empty()) {
        Json samples = Json::array();
        for (const double sample : figure.samples) {
            samples.push(sample);
        }
        json.set("samples", std::move(samples));
    }
    if (figure.warmup) {
        Json warmup = Json::object();
        warmup.set("runs", figure.warmup->runs).set("ms", figure.warmup->ms);
        json.set("warmup", std::move(warmup));
    }
    if (figure.baseline) {
        json.set("baseline", reference_json(*figure.baseline)).set("ratio", figure.ratio());
    }
    if (figure.ceiling) {
        json.set("ceiling", reference_json(*figure.ceiling));
    }
    return json;
}

Json case_json(const Case& benchmark_case) {
    Json json = Json::object();
    json.set("name", benchmark_case.name).set("status", status_name(benchmark_case.status));
    if (!benchmark_case.note.empty()) {
        json.set("note", benchmark_case.note);
    }
    json.set("params", benchmark_case.params);
    Json figures = Json::array();
    for (const Figure& figure : benchmark_case.figures) {
        figures.push(figure_json(figure));
    }
    json.set("figures", std::move(figures));
    return json;
}

// "2026-11-29T20:15:03Z" -> "20261129T201503Z": file names without ':' (not allowed everywhere).
std::string compact_date(const std::string& iso_date) {
    std::string compact;
    for (const char c : iso_date) {
        if (c != '-' && c != ':') {
            compact += c;
        }
    }
    return compact;
}

// Commits and benchmark names go into file names: keep them to characters every file system accepts.
std::string file_name_part(const std::string& text) {
    std::string part;
    for (const char c : text) {
        const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        part += plain ? c : '_';
    }
    return part.empty() ? std::string("unknown") : part;
}

std::string format_value(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.4g", value);
    return buffer;
}

}  // namespace

double Figure::ratio() const {
    if (!baseline || baseline->value == 0.0 || value == 0.0) {
        return std::numeric_limits<double>::quiet_NaN();
    }
    return better == Better::kLower ? baseline->value / value : value / baseline->value;
}

Figure& Figure::against(std::string baseline_name, double baseline_value) {
    baseline = Reference{std::move(baseline_name), baseline_value, unit};
    return *this;
}

Figure time_figure(std::string name, const TimingStats& stats) {
    Figure figure;
    figure.name = std::move(name);
    figure.unit = "ms";
    figure.better = Better::kLower;
    figure.value = stats.median_ms;
    figure.spread = Spread{stats.min_ms, stats.p25_ms, stats.p75_ms, stats.max_ms};
    figure.num_reps = stats.num_reps();
    figure.samples = stats.samples_ms;
    figure.warmup = WarmUp{stats.num_warmup_runs, stats.warmup_ms};
    return figure;
}

Figure rate_figure(std::string name, std::string unit, double amount_per_run, const TimingStats& stats) {
    constexpr double kMillisecondsPerSecond = 1e3;
    const auto rate = [&](double ms) { return ms > 0.0 ? amount_per_run * kMillisecondsPerSecond / ms : 0.0; };
    Figure figure;
    figure.name = std::move(name);
    figure.unit = std::move(unit);
    figure.better = Better::kHigher;
    figure.value = rate(stats.median_ms);
    // A longer time is a smaller rate: the slowest repetition gives the spread's minimum.
    figure.spread = Spread{rate(stats.max_ms), rate(stats.p75_ms), rate(stats.p25_ms), rate(stats.min_ms)};
    figure.num_reps = stats.num_reps();
    return figure;
}

Figure value_figure(std::string name, std::string unit, Better better, double value) {
    Figure figure;
    figure.name = std::move(name);
    figure.unit = std::move(unit);
    figure.better = better;
    figure.value = value;
    return figure;
}

Figure fraction_figure(std::string name, const Figure& rate, std::string ceiling_name, double ceiling_value) {
    const auto scale = [&](double value) { return ceiling_value > 0.0 ? value / ceiling_value : 0.0; };
    Figure figure;
    figure.name = std::move(name);
    figure.unit = "fraction";
    figure.better = Better::kHigher;
    figure.value = scale(rate.value);
    if (rate.spread) {
        figure.spread =
            Spread{scale(rate.spread->min), scale(rate.spread->p25), scale(rate.spread->p75), scale(rate.spread->max)};
    }
    figure.num_reps = rate.num_reps;
    figure.ceiling = Reference{std::move(ceiling_name), ceiling_value, rate.unit};
    return figure;
}

double figure_value(const Case& c, const std::string& name) {
    for (const Figure& f : c.figures) {
        if (f.name == name) {
            return f.value;
        }
    }
    return NAN;
}

std::string current_commit() {
    std::string commit = env_or_empty("MOK_COMMIT");
    if (commit.empty()) {
        commit = MOK_BENCH_CONFIGURED_COMMIT;
    }
    return commit.empty() ? std::string("unknown") : commit;
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char buffer[sizeof("2026-11-29T20:15:03Z")];
    std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return buffer;
}

std::string run_id_for(const std::string& date, const std::string& commit) {
    const std::string run_id = env_or_empty("MOK_BENCH_RUN_ID");
    return run_id.empty() ? compact_date(date) + "-" + commit : run_id;
}

std::string device_slug(const std::string& device_name) {
    std::string lower;
    for (const char c : device_name) {
        lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const std::string vendor = "nvidia";
    if (lower.rfind(vendor, 0) == 0) {
        lower.erase(0, vendor.size());
    }
    std::string slug;
    for (const char c : lower) {
        if (std::isalnum(static_cast<unsigned char>(c))) {
            slug += c;
        } else if (!slug.empty() && slug.back() != '-') {
            slug += '-';
        }
    }
    while (!slug.empty() && slug.back() == '-') {
        slug.pop_back();
    }
    return slug.empty() ? std::string("unknown") : slug;
}

Json Result::to_json() const {
    Json json = Json::object();
    json.set("schema_version", kSchemaVersion)
        .set("benchmark", run.benchmark)
        .set("run_id", run.run_id)
        .set("device", run.device)
        .set("num_gpus", run.num_gpus)
        .set("sm_count", run.sm_count)
        .set("commit", run.commit)
        .set("date", run.date)
        .set("config", config);
    Json case_list = Json::array();
    for (const Case& benchmark_case : cases) {
        case_list.push(case_json(benchmark_case));
    }
    json.set("cases", std::move(case_list));
    return json;
}

std::string result_file_name(const RunInfo& run) {
    return file_name_part(run.benchmark) + "-" + device_slug(run.device) + "-" + std::to_string(run.num_gpus) + "gpu-" +
           file_name_part(compact_date(run.date)) + "-" + file_name_part(run.commit) + ".json";
}

std::filesystem::path default_out_dir() {
    const std::string from_env = env_or_empty("MOK_BENCH_OUT_DIR");
    return from_env.empty() ? std::filesystem::path(MOK_BENCH_DEFAULT_OUT_DIR) : std::filesystem::path(from_env);
}

// The name's `number`-th variant: the name itself, then <stem>-2.json, <stem>-3.json, ...
std::string numbered_file_name(const std::string& name, int number) {
    if (number == 1) {
        return name;
    }
    const std::string stem = name.substr(0, name.size() - std::string(".json").size());
    return stem + "-" + std::to_string(number) + ".json";
}

std::filesystem::path write_result(const Result& result, const std::filesystem::path& out_dir) {
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    if (error) {
        throw std::runtime_error("cannot create " + out_dir.string() + ": " + error.message());
    }
    // A run never overwrites another's file: two runs of one tree that start in the same second (one per GPU, say)
    // share a name, so the first free variant is taken by an exclusive create ("x": fails if the file exists).
    constexpr int kMaxVariants = 1000;
    const std::string name = result_file_name(result.run);
    for (int number = 1; number <= kMaxVariants; ++number) {
        const std::filesystem::path path = out_dir / numbered_file_name(name, number);
        std::FILE* file = std::fopen(path.c_str(), "wx");
        if (file == nullptr) {
            if (errno == EEXIST) {
                continue;
            }
            throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
        }
        const std::string text = result.to_json().dump();
        const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
        if (std::fclose(file) != 0 || !written) {
            throw std::runtime_error("cannot write " + path.string());
        }
        return path;
    }
    throw std::runtime_error("cannot write " + (out_dir / name).string() + ": " + std::to_string(kMaxVariants) +
                             " files of that name exist");
}

std::string format_summary(const Result& result) {
    std::string text;
    for (const Case& benchmark_case : result.cases) {
        if (benchmark_case.status != CaseStatus::kOk) {
            text += benchmark_case.name + "  " + status_name(benchmark_case.status) + ": " + benchmark_case.note + "\n";
            if (benchmark_case.figures.empty()) {
                continue;
            }
        }
        for (const Figure& figure : benchmark_case.figures) {
            text += benchmark_case.name + "  " + figure.name + "  " + format_value(figure.value) + " " + figure.unit;
            if (figure.baseline) {
                text += "  vs " + figure.baseline->name + " " + format_value(figure.baseline->value) + ": x" +
                        format_value(figure.ratio());
            }
            text += "\n";
        }
    }
    return text;
}

int finish_run(const Result& result, const std::filesystem::path& out_dir) {
    const std::filesystem::path path = write_result(result, out_dir);
    std::printf("%s", format_summary(result).c_str());
    std::printf("wrote %s\n", path.string().c_str());
    const bool any_failed = std::any_of(result.cases.begin(), result.cases.end(),
                                        [](const Case& c) { return c.status == CaseStatus::kFailed; });
    return any_failed ? 1 : 0;
}

}  // namespace mok::bench
