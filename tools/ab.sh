#!/usr/bin/env bash
# A/B measurements: the same GPU runner steps on several commits, alternately, in one call to a GPU machine, and a
# per-case comparison of their results. Ratios between commits measured together are the ones that count
# (docs/benchmarking.md); alternating them keeps the machine's drift over the call out of the ratios.
#
#   tools/ab.sh prepare REV [REV...]     (in a checkout) export each revision into .ab/<n>-<commit>/
#   tools/ab.sh run [--rounds N] [--baseline COMMIT] -- RUNNER_FLAGS
#                                        (on the GPU machine, from the repository root) run
#                                        tools/gpu_runner.sh RUNNER_FLAGS in every .ab/ tree, N rounds (default
#                                        2) in turn, then bench/compare.py over all their results
#
# The first revision prepared is the baseline unless --baseline names another. The .ab/ trees carry no .git: each
# holds its commit in .mok-commit, which gpu_runner.sh reads. Results and each run's archive stay in the tree's
# build folder (build-ab/runs/); with OUT set, every run's archive lands in $OUT as usual.
set -uo pipefail

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}

ab_dir=".ab"

prepare() {
    [[ $# -ge 1 ]] || { usage >&2; exit 2; }
    git rev-parse --git-dir >/dev/null 2>&1 || { echo "ab: prepare runs in a git checkout" >&2; exit 2; }
    mkdir -p "$ab_dir"
    local order=0 rev commit tree
    for rev in "$@"; do
        commit="$(git rev-parse --short=12 "$rev^{commit}")" || exit 2
        tree="$ab_dir/$order-$commit"
        rm -rf "$tree"
        mkdir -p "$tree"
        git archive "$commit" | tar -x -C "$tree"
        echo "$commit" >"$tree/.mok-commit"
        echo "$tree"
        order=$((order + 1))
    done
}

run() {
    local rounds=2 baseline="" runner_flags=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --rounds) rounds="${2:?--rounds needs a count}"; shift ;;
            --baseline) baseline="${2:?--baseline needs a commit}"; shift ;;
            --) shift; runner_flags=("$@"); break ;;
            *) usage >&2; exit 2 ;;
        esac
        shift
    done
    shopt -s nullglob
    local trees=("$ab_dir"/*/)
    shopt -u nullglob
    [[ ${#trees[@]} -ge 2 ]] || { echo "ab: run needs two or more trees in $ab_dir/ (tools/ab.sh prepare)" >&2; exit 2; }
    local status=0 round tree
    for ((round = 1; round <= rounds; round++)); do
        for tree in "${trees[@]}"; do
            echo "== round $round: $tree"
            # MOK_COMMIT set here: an older tree's runner may not read .mok-commit.
            (cd "$tree" && MOK_COMMIT="$(cat .mok-commit)" tools/gpu_runner.sh --build-dir build-ab \
                "${runner_flags[@]}") || status=1
        done
    done
    local results=()
    for tree in "${trees[@]}"; do
        results+=("$tree/build-ab/runs")
    done
    [[ -z "$baseline" ]] && baseline="$(cat "${trees[0]}/.mok-commit")"
    python3 bench/compare.py "${results[@]}" --baseline "$baseline" || status=1
    return $status
}

case "${1:-}" in
    prepare) shift; prepare "$@" ;;
    run) shift; run "$@" ;;
    *) usage; [[ "${1:-}" == --help || "${1:-}" == -h ]] && exit 0; exit 2 ;;
esac
