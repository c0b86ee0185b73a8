#!/usr/bin/env bash
# The one script a GPU machine runs, from the repository root: build mok, run the GPU tests, run the chosen
# benchmarks, collect their JSON, and print a short summary last. docs/benchmarking.md describes the method.
#
# Every step runs even when an earlier one failed; the exit status is non-zero if any step failed.
# NVLink multicast stays off for every program started here.

set -uo pipefail

usage() {
    cat <<'EOF'
usage: tools/gpu_runner.sh [flags]

With no selection flag it builds, runs the GPU tests and every benchmark.

  --tests            run the GPU test suite but its slow tests (ctest -L gpu -LE gpu_slow)
  --slow-tests       run the slow GPU tests (label gpu_slow: the layer at every model preset's full H and I
                     against the CPU backend, minutes each), as a step of their own; --test-filter picks shards
  --cpu-tests        also run the CPU test suite (ctest -L cpu)
  --test-filter RE   run only the tests whose names match RE (ctest -R)
  --bench LIST       comma list of: ceilings, gemm, transport, layer, baselines-gemm, baselines-layer,
                     baselines-a2a, all
  --quick            benchmarks run their representative subset with fewer repetitions
  --bench-args NAME ARGS
                     extra flags for the C++ benchmark NAME (ceilings, gemm, transport or layer), split at spaces
                     and passed after the runner's own, e.g. --bench-args layer "--token-groups --tokens 4096";
                     may be given once per benchmark
  --full             benchmarks run their whole sweep
  --gpus N           use GPUs 0..N-1 (default: all visible)
  --build-only       configure and build, nothing else
  --targets LIST     comma list of CMake targets to build instead of every one (e.g. mok-bench-transport,
                     mok_transport_virtual_test): an A/B call that needs two programs per tree builds in a
                     fraction of the time; tests and benchmarks whose programs were not built fail their step
  --sass             count HGMMA, UTMALDG and local-memory (LDL/STL) instructions per kernel
  --ncu-layer        profile the layer's grouped GEMMs with Nsight Compute (GPU 0, EP 1, one forward and one
                     backward of mok-bench-layer --quick --one-stream: Nsight Compute serialises kernels, under
                     which the pipelined order's GEMMs would wait for the dispatch in vain): DRAM bytes,
                     throughputs and L2 hit rate per launch
  --ncu-gemm RE      profile the grouped GEMM launches whose kernel name matches RE (the form, e.g. 'Dgrad') in
                     mok-bench-gemm --quick with Nsight Compute's throughput, warp-state, memory and occupancy
                     sections (GPU 0, first 16 matching launches); every metric goes to ncu-gemm.txt
  --ncu-gemm-cases RE
                     with --ncu-gemm: run only the benchmark cases whose name matches RE (mok-bench-gemm
                     --cases), so that the first matching launches are those cases' (e.g. 'm4096/dgrad_down')
  --build-dir DIR    build folder (default: build-gpu)
  --step-timeout S   seconds one step may take before it is stopped (default: 900)
  --dry-run          print the commands instead of running them
  --help             this text

Results go to bench/results/ and, when OUT is set, into one tar.gz (JSON, logs, report) in $OUT together
with summary.txt.
EOF
}

# ---------------------------------------------------------------------------------------------------------------
# Options

run_tests=0
run_slow_tests=0
run_cpu_tests=0
bench_list=""
mode_args=()
declare -A bench_extra_args=()  # NAME -> the extra flags of --bench-args, as one string
num_gpus=""
build_only=0
run_sass=0
run_ncu_layer=0
ncu_gemm_regex=""
ncu_gemm_cases=()
build_dir="build-gpu"
build_targets=""
step_timeout=900
dry_run=0
selected=0
test_filter=""

while [[ $# -gt 0 ]]; do
    case "$1" in
        --tests) run_tests=1; selected=1 ;;
        --slow-tests) run_slow_tests=1; selected=1 ;;
        --test-filter) test_filter="$2"; shift ;;
        --cpu-tests) run_cpu_tests=1; run_tests=1; selected=1 ;;
        --bench) bench_list="${2:?--bench needs a list}"; selected=1; shift ;;
        --quick) mode_args=(--quick) ;;
        --full) mode_args=(--full) ;;
        --bench-args)
            extra_for="${2:?--bench-args needs a benchmark}"
            bench_extra_args["$extra_for"]="${3:?--bench-args needs the flags after the benchmark name}"
            shift 2 ;;
        --gpus) num_gpus="${2:?--gpus needs a count}"; shift ;;
        --build-only) build_only=1; selected=1 ;;
        --sass) run_sass=1; selected=1 ;;
        --ncu-layer) run_ncu_layer=1; selected=1 ;;
        --ncu-gemm) ncu_gemm_regex="${2:?--ncu-gemm needs a kernel-name pattern}"; selected=1; shift ;;
        --ncu-gemm-cases) ncu_gemm_cases=(--cases "${2:?--ncu-gemm-cases needs a case-name pattern}"); shift ;;
        --build-dir) build_dir="${2:?--build-dir needs a folder}"; shift ;;
        --targets) build_targets="${2:?--targets needs a comma list of targets}"; shift ;;
        --step-timeout) step_timeout="${2:?--step-timeout needs seconds}"; shift ;;
        --dry-run) dry_run=1 ;;
        --help|-h) usage; exit 0 ;;
        *) echo "gpu_runner: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [[ $selected -eq 0 ]]; then
    run_tests=1
    bench_list="all"
fi
cpp_benchmarks="ceilings,gemm,transport,layer"
all_benchmarks="$cpp_benchmarks,baselines-gemm,baselines-layer,baselines-a2a"
for name in "${!bench_extra_args[@]}"; do
    if [[ ",$cpp_benchmarks," != *",$name,"* ]]; then
        echo "gpu_runner: --bench-args takes one of $cpp_benchmarks, not '$name'" >&2
        exit 2
    fi
done
if [[ ",$bench_list," == *",all,"* ]]; then
    bench_list="$all_benchmarks"
fi
for name in ${bench_list//,/ }; do
    if [[ ",$all_benchmarks," != *",$name,"* ]]; then
        echo "gpu_runner: unknown benchmark '$name' (known: $all_benchmarks, all)" >&2
        exit 2
    fi
done

if [[ ! -f CMakeLists.txt || ! -d bench ]]; then
    echo "gpu_runner: run me from the repository root" >&2
    exit 2
fi

# ---------------------------------------------------------------------------------------------------------------
# Environment

export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

python="$(command -v python3 || true)"

visible_gpus() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
    else
        echo 0
    fi
}

if [[ -z "$num_gpus" ]]; then
    num_gpus="$(visible_gpus)"
    [[ "$num_gpus" -ge 1 ]] || num_gpus=1
else
    CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((num_gpus - 1)))"
    export CUDA_VISIBLE_DEVICES
fi

commit_of_tree() {
    if git rev-parse --git-dir >/dev/null 2>&1; then
        local commit
        commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo uncommitted)"
        if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
            commit="${commit}-dirty"
        fi
        echo "$commit"
    elif [[ -f .mok-commit ]]; then
        cat .mok-commit  # a tree exported from git (tools/ab.sh prepare)
    else
        echo "unknown"
    fi
}

export MOK_COMMIT="${MOK_COMMIT:-$(commit_of_tree)}"
run_stamp="$(date -u +%Y%m%dT%H%M%SZ)"
export MOK_BENCH_RUN_ID="${MOK_BENCH_RUN_ID:-${run_stamp}-${MOK_COMMIT}}"
run_dir="$build_dir/runs/$MOK_BENCH_RUN_ID"
results_dir="$run_dir/results"
logs_dir="$run_dir/logs"
mkdir -p "$results_dir" "$logs_dir"
export MOK_BENCH_OUT_DIR="$results_dir"

# ---------------------------------------------------------------------------------------------------------------
# Steps: each logs to its own file, is bounded by a timeout, and records its status; the run goes on.

declare -a step_names=()
declare -a step_states=()
any_failed=0
tail_lines=15

record() {
    step_names+=("$1")
    step_states+=("$2")
    if [[ "$2" == FAILED* ]]; then
        any_failed=1
    fi
}

# run_step NAME COMMAND...: runs COMMAND with its output in logs/NAME.log; prints one line, and the log's tail
# when it fails.
run_step() {
    local name="$1"
    shift
    local log="$logs_dir/$name.log"
    if [[ $dry_run -eq 1 ]]; then
        echo "[dry-run] $name: $*"
        record "$name" "ok (dry run)"
        return 0
    fi
    local start=$SECONDS
    echo "== $name"
    timeout --kill-after=30 "$step_timeout" "$@" >"$log" 2>&1
    local status=$?
    local took=$((SECONDS - start))
    if [[ $status -eq 0 ]]; then
        record "$name" "ok (${took}s)"
    else
        local why="exit $status"
        [[ $status -eq 124 || $status -eq 137 ]] && why="timed out after ${step_timeout}s"
        record "$name" "FAILED: $why (${took}s)"
        echo "-- $name failed ($why); last lines of $log:"
        tail -n "$tail_lines" "$log" | sed 's/^/   /'
    fi
    return $status
}

skip_step() {
    record "$1" "skipped: $2"
    echo "== $1 skipped: $2"
}

nccl_root() {
    # PyTorch's pip NCCL (nvidia.nccl: include/ and lib/ with libnccl.so.2) has the GIN API the system one lacks.
    [[ -n "$python" ]] || return 0
    "$python" - <<'EOF' 2>/dev/null || true
import importlib.util
spec = importlib.util.find_spec("nvidia.nccl")
if spec is not None and spec.submodule_search_locations:
    print(list(spec.submodule_search_locations)[0])
EOF
}

# ---------------------------------------------------------------------------------------------------------------
# Build

configure_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOK_BUILD_TESTS=ON -DMOK_BUILD_BENCH=ON)
nccl_dir="$(nccl_root)"
if [[ -n "$nccl_dir" ]]; then
    configure_args+=("-DMOK_NCCL_ROOT=$nccl_dir")
fi
build_ok=1
run_step configure cmake "${configure_args[@]}" || build_ok=0
if [[ $build_ok -eq 1 ]]; then
    # --keep-going: one target that fails to compile leaves every other test and benchmark buildable.
    target_args=()
    for target in ${build_targets//,/ }; do
        target_args+=(--target "$target")
    done
    run_step build cmake --build "$build_dir" -j "$(nproc)" "${target_args[@]}" -- -k 0 || build_ok=0
fi

# ---------------------------------------------------------------------------------------------------------------
# Tests

test_summary=""

ctest_counts() {
    # "90% tests passed, 1 tests failed out of 12" -> "11 passed, 1 failed"; "100% tests passed out of 12" (the
    # form ctest prints when nothing failed) -> "12 passed, 0 failed"
    local line
    line="$(grep -E 'tests passed(, [0-9]+ tests? failed)? out of [0-9]+' "$1" | tail -n 1)"
    if [[ -n "$line" ]]; then
        local failed=0 total
        if [[ "$line" =~ ([0-9]+)\ tests?\ failed ]]; then
            failed="${BASH_REMATCH[1]}"
        fi
        total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")"
        echo "$((total - failed)) passed, $failed failed"
    elif grep -q 'No tests were found' "$1"; then
        echo "no tests found"
    else
        echo "no count (see $1)"
    fi
}

# run_tests_labelled NAME CTEST-LABEL-ARGS...: one step running the tests the label arguments select. Slow tests
# carry their own CTest timeout; the others get 600 s each.
run_tests_labelled() {
    local name="$1"
    shift
    run_step "tests-$name" ctest --test-dir "$build_dir" "$@" --output-on-failure --timeout 600 \
        ${test_filter:+-R "$test_filter"}
    if [[ $dry_run -eq 0 ]]; then
        test_summary+="tests ($name): $(ctest_counts "$logs_dir/tests-$name.log")"$'\n'
    fi
}

if [[ $build_only -eq 0 && ($run_tests -eq 1 || $run_slow_tests -eq 1) ]]; then
    if [[ $build_ok -eq 1 || $dry_run -eq 1 ]]; then
        [[ $run_tests -eq 1 ]] && run_tests_labelled gpu -L gpu -LE gpu_slow
        [[ $run_slow_tests -eq 1 ]] && run_tests_labelled gpu-slow -L gpu_slow
        [[ $run_cpu_tests -eq 1 ]] && run_tests_labelled cpu -L cpu
    else
        skip_step tests "the build failed"
    fi
fi

# ---------------------------------------------------------------------------------------------------------------
# Benchmarks

find_program() {
    find "$build_dir" -type f -name "$1" -perm -u+x 2>/dev/null | head -n 1
}

# Nsight Compute: on the PATH, or in the CUDA toolkit; empty when neither has it.
find_ncu() {
    if command -v ncu 2>/dev/null; then
        return
    fi
    [[ -x /usr/local/cuda/bin/ncu ]] && echo /usr/local/cuda/bin/ncu
    return 0
}

run_cpp_bench() {
    local name="$1" program="$2" bench="$3"
    local path
    local -a extra=()
    read -r -a extra <<<"${bench_extra_args[$bench]:-}"
    path="$(find_program "$program")"
    if [[ -z "$path" && $dry_run -eq 1 ]]; then
        path="$build_dir/.../$program"
    fi
    if [[ -z "$path" ]]; then
        skip_step "$name" "$program is not built (not written yet, or its build failed)"
        return
    fi
    run_step "$name" "$path" --out "$results_dir" "${mode_args[@]}" "${extra[@]}"
}

run_python_bench() {
    local name="$1" script="$2" launcher="$3"
    shift 3
    if [[ -z "$python" ]]; then
        skip_step "$name" "no python3"
        return
    fi
    if [[ $dry_run -eq 0 ]] && ! "$python" -c "import torch" >/dev/null 2>&1; then
        skip_step "$name" "PyTorch is not installed"
        return
    fi
    if [[ "$launcher" == torchrun ]]; then
        run_step "$name" "$python" -m torch.distributed.run --standalone --nproc-per-node "$num_gpus" \
            "bench/baselines/$script" --out "$results_dir" "${mode_args[@]}" "$@"
    else
        run_step "$name" "$python" "bench/baselines/$script" --out "$results_dir" "${mode_args[@]}" "$@"
    fi
}

if [[ $build_only -eq 0 ]]; then
    for name in ${bench_list//,/ }; do
        case "$name" in
            ceilings|gemm|transport|layer) run_cpp_bench "bench-$name" "mok-bench-$name" "$name" ;;
            baselines-gemm) run_python_bench "$name" gemm_baseline.py python ;;
            baselines-a2a) run_python_bench "$name" a2a_baseline.py torchrun ;;
            baselines-layer)
                # One process group per variant: a broken NVSHMEM setup cannot take the NCCL figures with it.
                run_python_bench "$name" layer_baseline.py torchrun --variants nccl
                run_python_bench "$name-symm-mem" layer_baseline.py torchrun --variants symm_mem
                ;;
        esac
    done
fi

# ---------------------------------------------------------------------------------------------------------------
# SASS: what the kernels compiled to

sass_report="$run_dir/sass.txt"

count_sass() {
    # Per kernel: HGMMA (wgmma), UTMALDG (TMA loads), LDL/STL (local memory: spills or stack arrays).
    awk '
        /Function :/ { kernel = $3; if (!(kernel in seen)) { seen[kernel] = 1; order[n++] = kernel }; next }
        /HGMMA/ { hgmma[kernel]++ }
        /UTMALDG/ { tma[kernel]++ }
        /[ \t](LDL|STL)[. \t]/ { local_mem[kernel]++ }
        END {
            for (i = 0; i < n; i++) {
                k = order[i]
                printf "%-8d %-8d %-8d %s\n", hgmma[k], tma[k], local_mem[k], k
                if (local_mem[k] > 0) spilling++
                if (hgmma[k] > 0) with_hgmma++
            }
            # The condition is parenthesised: a bare ">" in a print statement redirects its output.
            printf "verdict: %d kernels, %d with HGMMA, %d with local memory%s\n", n, with_hgmma, spilling,
                (spilling > 0 ? " (LDL/STL: fix before measuring)" : "")
        }'
}

run_sass_step() {
    local objects
    objects="$(find "$build_dir" -type f -name 'libmok_cuda.a' 2>/dev/null)"
    if [[ -z "$objects" ]]; then
        skip_step sass "no libmok_cuda.a in $build_dir"
        return
    fi
    if ! command -v cuobjdump >/dev/null 2>&1; then
        skip_step sass "cuobjdump is not installed"
        return
    fi
    local demangle=cat
    command -v c++filt >/dev/null 2>&1 && demangle=c++filt
    {
        echo "HGMMA    UTMALDG  LDL/STL  kernel"
        # shellcheck disable=SC2086
        cuobjdump --dump-sass $objects | count_sass | $demangle
    } >"$sass_report" 2>&1
    record sass "ok"
}

if [[ $run_sass -eq 1 ]]; then
    if [[ $dry_run -eq 1 ]]; then
        echo "[dry-run] sass: cuobjdump --dump-sass <libmok_cuda.a> | count per kernel"
        record sass "ok (dry run)"
    elif [[ $build_ok -eq 1 ]]; then
        run_sass_step
    else
        skip_step sass "the build failed"
    fi
fi

# ---------------------------------------------------------------------------------------------------------------
# Nsight Compute: the layer's grouped GEMMs, one launch each of a forward and a backward (docs/gemm.md, "Waves").

ncu_csv="$run_dir/ncu-layer.csv"
ncu_report="$run_dir/ncu-layer.txt"
# Launches profiled: the first forward's 4 GEMMs (routed and shared gate/up and down) and the first backward's 8.
ncu_launches=12
# --ncu-gemm: the quick GEMM bench's first shape runs each form at 128 and 4096 rows per expert, each timed once
# after a checked run, so 16 matching launches cover a form pair at both sizes.
ncu_gemm_launches=16

run_ncu_layer_step() {
    local ncu bench
    ncu="$(find_ncu)"
    bench="$(find_program mok-bench-layer)"
    if [[ -z "$ncu" ]]; then
        skip_step ncu-layer "Nsight Compute (ncu) is not installed"
        return
    fi
    if [[ -z "$bench" ]]; then
        skip_step ncu-layer "mok-bench-layer is not built"
        return
    fi
    # One GPU: the benchmark then runs EP 1 only. Its JSON goes to a scratch folder: profiled times are not results.
    run_step ncu-layer env CUDA_VISIBLE_DEVICES=0 "$ncu" --kernel-name regex:grouped_gemm_kernel \
        --launch-count "$ncu_launches" --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --metrics dram__bytes_read.sum --csv --log-file "$ncu_csv" \
        "$bench" --quick --one-stream --reps 1 --warmup 0 --warmup-ms 0 --out "$run_dir/ncu-bench"
    if [[ -n "$python" && -f "$ncu_csv" ]]; then
        "$python" tools/ncu_summary.py "$ncu_csv" >"$ncu_report" 2>&1 || true
    fi
}

run_ncu_gemm_step() {
    local ncu bench csv="$run_dir/ncu-gemm.csv"
    ncu="$(find_ncu)"
    bench="$(find_program mok-bench-gemm)"
    if [[ -z "$ncu" || -z "$bench" ]]; then
        skip_step ncu-gemm "Nsight Compute (ncu) or mok-bench-gemm is missing"
        return
    fi
    # Matched against the demangled name: the form is a template argument, which the default base name drops.
    run_step ncu-gemm env CUDA_VISIBLE_DEVICES=0 "$ncu" --kernel-name-base demangled \
        --kernel-name "regex:$ncu_gemm_regex" \
        --launch-count "$ncu_gemm_launches" --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv --log-file "$csv" \
        "$bench" --quick --reps 1 --warmup 0 --warmup-ms 0 "${ncu_gemm_cases[@]}" --out "$run_dir/ncu-gemm-bench"
    if [[ -n "$python" && -f "$csv" ]]; then
        "$python" tools/ncu_summary.py --details "$csv" >"$run_dir/ncu-gemm.txt" 2>&1 || true
    fi
}

if [[ -n "$ncu_gemm_regex" ]]; then
    if [[ $dry_run -eq 1 || $build_ok -eq 1 ]]; then
        run_ncu_gemm_step
    else
        skip_step ncu-gemm "the build failed"
    fi
fi

if [[ $run_ncu_layer -eq 1 ]]; then
    if [[ $dry_run -eq 1 || $build_ok -eq 1 ]]; then
        run_ncu_layer_step
    else
        skip_step ncu-layer "the build failed"
    fi
fi

# ---------------------------------------------------------------------------------------------------------------
# Collect: bench/results/, and one archive plus a summary under $OUT.

summary_file="$run_dir/summary.txt"
shopt -s nullglob
result_files=("$results_dir"/*.json)
shopt -u nullglob

if [[ ${#result_files[@]} -gt 0 ]]; then
    cp "${result_files[@]}" bench/results/
    if [[ -n "$python" ]]; then
        "$python" bench/report.py "$results_dir" --run-id "$MOK_BENCH_RUN_ID" --out "$run_dir/report" \
            >"$logs_dir/report.log" 2>&1 || true
    fi
fi

{
    echo "mok GPU run $MOK_BENCH_RUN_ID: $num_gpus GPU(s), commit $MOK_COMMIT"
    echo
    echo "steps:"
    for i in "${!step_names[@]}"; do
        printf "  %-26s %s\n" "${step_names[$i]}" "${step_states[$i]}"
    done
    if [[ -n "$test_summary" ]]; then
        echo
        printf "%s" "$test_summary"
    fi
    if [[ -f "$sass_report" ]]; then
        echo
        echo "sass (per kernel):"
        sed 's/^/  /' "$sass_report"
    fi
    if [[ -f "$ncu_report" ]]; then
        echo
        echo "ncu (the layer's grouped GEMMs, EP 1):"
        sed 's/^/  /' "$ncu_report"
    fi
    if [[ -f "$run_dir/ncu-gemm.txt" ]]; then
        echo
        echo "ncu (grouped GEMM launches matching '$ncu_gemm_regex'; every metric in ncu-gemm.txt of the archive):"
        sed '/^$/q' "$run_dir/ncu-gemm.txt" | sed 's/^/  /'
    fi
    if [[ ${#result_files[@]} -gt 0 && -n "$python" ]]; then
        echo
        echo "results:"
        "$python" bench/report.py "$results_dir" --run-id "$MOK_BENCH_RUN_ID" --summary 2>&1 | sed 's/^/  /'
    fi
} >"$summary_file"

if [[ -n "${OUT:-}" && $dry_run -eq 0 ]]; then
    mkdir -p "$OUT"
    tar -czf "$OUT/mok-gpu-run-$MOK_BENCH_RUN_ID.tar.gz" -C "$build_dir/runs" "$MOK_BENCH_RUN_ID"
    cp "$summary_file" "$OUT/summary.txt"
fi

echo
cat "$summary_file"
exit $any_failed
