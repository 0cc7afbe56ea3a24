#!/usr/bin/env bash
# Throughput and peak memory of `tracesync merge` of one Chrome JSON input
# (docs/performance-merge.md), against `cat FILE > FILE2` (a file in the
# same directory, so on the same disk) on the same page-cache-warm input
# in the same run, and the trace processor's own import time of the same
# JSON (tests/tp/query.mjs, WebAssembly under Node) up to a size it holds.
#
#   scripts/bench-merge-json.sh                       # 30, 256 and 1024 MiB
#   BENCH_SIZES="30" scripts/bench-merge-json.sh
#   BENCH_TP_MAX=0 scripts/bench-merge-json.sh         # no trace processor
#   BENCH_KEEP=DIR scripts/bench-merge-json.sh         # keep the JSON in DIR
#
# The JSON comes from the gen_chrome_json example
# (tests/examples/gen_chrome_json.rs: Chrome-like and PyTorch-like threads,
# flows, counters, metadata, out of order within ~2 ms) and is written to
# a temporary directory deleted on exit. MB/s are 10^6 bytes of JSON per
# second of wall time; peak RSS is GNU time's "Maximum resident set size";
# CPU is the merge's user + system seconds (all its threads); load is the
# 1-minute load average as the merge starts (the box may be shared).
# The trace processor is timed only for inputs of at most BENCH_TP_MAX MiB
# (default 256): its WebAssembly build holds the whole trace in its 32-bit
# heap.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${BENCH_SIZES:-"30 256 1024"}
TP_MAX=${BENCH_TP_MAX:-256}
TMPBASE=${TMPDIR:-/tmp}

# shellcheck source=scripts/lib/bench-timing.sh
source scripts/lib/bench-timing.sh

echo "building (release)" >&2
cargo build --release --quiet -p tracesync-cli --bin tracesync
cargo build --release --quiet -p tracesync-tests --example gen_chrome_json
target=${CARGO_TARGET_DIR:-target}
tracesync=$target/release/tracesync
gen=$target/release/examples/gen_chrome_json

work=$(mktemp -d "$TMPBASE/tracesync-bench-json.XXXXXX")
trap 'rm -rf "$work"' EXIT

secs() { awk -v ns="$1" 'BEGIN { printf "%.2f s", ns / 1e9 }'; }

# run_timed OUTVAR_NS OUTVAR_RSS_KIB OUTVAR_CPU_S CMD...: wall time (ns),
# peak RSS (KiB) and CPU seconds (user + system).
run_timed() {
    local -n _ns=$1 _rss=$2 _cpu=$3
    shift 3
    local t0 t1
    t0=$(now)
    /usr/bin/time -f '%M %U %S' -o "$work/time.out" "$@"
    t1=$(now)
    _ns=$((t1 - t0))
    read -r _rss user sys < <(tail -n 1 "$work/time.out")
    _cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
}

rows=()
for size in $SIZES; do
    in=$work/in-$size.json
    echo "generating $size MiB of Chrome JSON" >&2
    "$gen" --out "$in" --megabytes "$size"
    bytes=$(wc -c <"$in")

    # Baseline: the second of two reads, so both come from the page cache;
    # written to a file beside the merge's output, as the merge writes.
    cat "$in" >/dev/null
    t0=$(now)
    cat "$in" >"$work/cat.out"
    cat_ns=$(($(now) - t0))
    rm -f "$work/cat.out"

    echo "merging $size MiB" >&2
    load=$(cut -d' ' -f1 /proc/loadavg)
    run_timed merge_ns merge_rss merge_cpu \
        "$tracesync" merge --stats "$work/stats.json" -o "$work/out.pftrace" "$in"
    out_bytes=$(wc -c <"$work/out.pftrace")
    rm -f "$work/out.pftrace"
    out_of_window=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("json_events_out_of_window", "?"))' "$work/stats.json")

    tp="not run (over ${TP_MAX} MiB)"
    if [ "$size" -le "$TP_MAX" ]; then
        [ -f .cache/trace_processor/trace_processor.wasm ] || bash scripts/setup-test-deps.sh
        echo "trace processor import of $size MiB" >&2
        t0=$(now)
        if node tests/tp/query.mjs "$in" "select count(*) from slice" >"$work/tp.out" 2>"$work/tp.err"; then
            tp_ns=$(($(now) - t0))
            tp="$(secs "$tp_ns") ($(mb_per_s "$bytes" "$tp_ns") MB/s)"
        else
            tp="failed: $(head -c 120 "$work/tp.err" | tr '\n' ' ')"
        fi
    fi
    if [ -n "${BENCH_KEEP:-}" ]; then
        mv "$in" "$BENCH_KEEP/"
    else
        rm -f "$in"
    fi

    per_cpu=$(awk -v b="$bytes" -v c="$merge_cpu" 'BEGIN { printf "%.0f", b / 1e6 / c }')
    rows+=("| $(awk -v b="$bytes" 'BEGIN { printf "%.0f MB", b / 1e6 }') | $load | $(mb_per_s "$bytes" "$cat_ns") | $(mb_per_s "$bytes" "$merge_ns") ($(secs "$merge_ns")) | $merge_cpu s ($per_cpu MB/s) | $(mib "$merge_rss") | $(awk -v b="$out_bytes" 'BEGIN { printf "%.0f MB", b / 1e6 }') | $out_of_window | $tp |")
done

echo
echo "| JSON input | load | cat MB/s | merge MB/s (wall) | merge CPU (MB per CPU s) | merge peak RSS | output | out of window | trace processor import |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
