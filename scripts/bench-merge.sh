#!/usr/bin/env bash
# Throughput and peak memory of `tracesync merge` (docs/performance.md), measured
# against `cat INPUTS > FILE` (a file in the same directory, so on the same
# disk) on the same page-cache-warm inputs in the same run.
#
#   scripts/bench-merge.sh               # 256 MiB and 1 GiB of input, 4 machines
#   BENCH_SIZES="64" scripts/bench-merge.sh
#   BENCH_BIG_PERCENT=0 scripts/bench-merge.sh   # small packets only
#   BENCH_SMALL=1 BENCH_MACHINES=1 BENCH_SIZES=300 scripts/bench-merge.sh
#       # issue 18's trace: ~46-byte TrackEvent packets, 8 sequences, a
#       # quarter on MONOTONIC (gen_trace --small)
#
# Inputs come from the gen_trace example (tests/examples/gen_trace.rs) and
# are written to a temporary directory that is deleted on exit. MB/s are
# 10^6 bytes of input per second of wall time; peak RSS is GNU time's
# "Maximum resident set size".
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${BENCH_SIZES:-"256 1024"}
MACHINES=${BENCH_MACHINES:-4}
BIG_PERCENT=${BENCH_BIG_PERCENT:-20}
small_args=()
[ "${BENCH_SMALL:-0}" = 1 ] && small_args=(--small)
TMPBASE=${TMPDIR:-/tmp}

# shellcheck source=scripts/lib/bench-timing.sh
source scripts/lib/bench-timing.sh

echo "building (release)" >&2
cargo build --release --quiet -p tracesync-cli --bin tracesync
cargo build --release --quiet -p tracesync-tests --example gen_trace
target=${CARGO_TARGET_DIR:-target}
tracesync=$target/release/tracesync
gen=$target/release/examples/gen_trace

work=$(mktemp -d "$TMPBASE/tracesync-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# run_timed OUTVAR_NS OUTVAR_RSS_KIB CMD...: wall time (ns) and peak RSS (KiB).
run_timed() {
    local -n _ns=$1 _rss=$2
    shift 2
    local t0 t1
    t0=$(now)
    /usr/bin/time -f %M -o "$work/time.out" "$@"
    t1=$(now)
    _ns=$((t1 - t0))
    _rss=$(tail -n 1 "$work/time.out")
}

rows=()
for size in $SIZES; do
    in=$work/in-$size
    echo "generating $size MiB ($MACHINES machines, $BIG_PERCENT% big packets)" >&2
    "$gen" --out "$in" --machines "$MACHINES" --megabytes "$size" \
        --big-percent "$BIG_PERCENT" "${small_args[@]}" 2>/dev/null
    inputs=("$in"/*.pftrace)
    bytes=$(cat "${inputs[@]}" | wc -c)

    # Baseline: the second of two runs, so both read from the page cache;
    # written to a file beside the merge's output, as the merge writes.
    cat "${inputs[@]}" >/dev/null
    t0=$(now)
    cat "${inputs[@]}" >"$work/cat.out"
    cat_ns=$(($(now) - t0))
    rm -f "$work/cat.out"

    echo "merging $size MiB (perfetto)" >&2
    run_timed merge_ns merge_rss \
        "$tracesync" merge --machine-per-file -o "$work/out.pftrace" "${inputs[@]}"
    out_bytes=$(wc -c <"$work/out.pftrace")
    rm -f "$work/out.pftrace"

    echo "merging $size MiB (jsonl)" >&2
    run_timed jsonl_ns jsonl_rss \
        "$tracesync" merge --machine-per-file --format jsonl -o /dev/null "${inputs[@]}"
    rm -rf "$in"

    cat_mbs=$(mb_per_s "$bytes" "$cat_ns")
    merge_mbs=$(mb_per_s "$bytes" "$merge_ns")
    jsonl_mbs=$(mb_per_s "$bytes" "$jsonl_ns")
    rows+=("| $(awk -v b="$bytes" 'BEGIN { printf "%.0f MB", b / 1e6 }') | $cat_mbs | $merge_mbs | $(ratio "$merge_mbs" "$cat_mbs") | $(mib "$merge_rss") | $jsonl_mbs | $(mib "$jsonl_rss") | $(awk -v b="$out_bytes" 'BEGIN { printf "%.0f MB", b / 1e6 }') |")
done

echo
echo "| input | cat MB/s | merge MB/s | merge/cat | merge peak RSS | jsonl MB/s | jsonl peak RSS | output |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
