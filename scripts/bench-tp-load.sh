#!/usr/bin/env bash
# The consumer's cost (issue 18): time for the Perfetto trace processor
# (v52, .cache/trace_processor, run by tests/tp/query.mjs) to load one of
# our rolled files against the same packets without tracesync's additions.
#
# Makes a demo capture (`tracesync demo`), takes its second rolled file (a
# whole one, with a replayed preamble) and writes beside it a copy without
# the additions: the replayed preamble (index.jsonl's preamble_bytes), the
# daemon's own sequence (OWN_SEQUENCE_ID 1: sync points, the host's
# SystemInfo and ClockSnapshots) and the sync-quality tracks' sequences
# (from 0x7F000000, core/src/sync_quality.rs). Then loads both alternately,
# BENCH_RUNS times each, and prints the trace processor's own parse time
# (stat parse_trace_duration_ns where it reports one) and the wall time of
# each load, the medians and the ratio with/without.
#
#   scripts/bench-tp-load.sh
#   BENCH_RUNS=9 BENCH_RELAYS=3 BENCH_SECONDS=10 BENCH_RATE=5000 scripts/bench-tp-load.sh
#   BENCH_BIN_DIR=DIR scripts/bench-tp-load.sh   # binaries from DIR, no build
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${BENCH_RUNS:-7}
RELAYS=${BENCH_RELAYS:-2}
SECONDS_=${BENCH_SECONDS:-8}
RATE=${BENCH_RATE:-2000}
bins=${BENCH_BIN_DIR:-}
if [ -z "$bins" ]; then
    cargo build --release --quiet -p tracesync-daemon -p tracesync-cli -p tracesync-relay --bins
    bins=${CARGO_TARGET_DIR:-target}/release
fi
[ -f .cache/trace_processor/trace_processor.wasm ] || bash scripts/setup-test-deps.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/tracesync-bench-tp.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bins/tracesync" demo --relays "$RELAYS" --seconds "$SECONDS_" --rate "$RATE" \
    --out "$work/demo" --metrics-listen off >"$work/demo.log" 2>&1 || {
    echo "tracesync demo failed:" >&2
    cat "$work/demo.log" >&2
    exit 70
}

python3 - "$work/demo/output" "$work" <<'PY'
import json, os, sys
out, work = sys.argv[1], sys.argv[2]
index = [json.loads(l) for l in open(os.path.join(out, "index.jsonl"))]
if len(index) < 2:
    sys.exit("bench-tp-load: the demo wrote %d rolled files, need 2 (raise BENCH_SECONDS)" % len(index))
entry = index[1]
data = open(os.path.join(out, entry["name"]), "rb").read()

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i

def seq_of(p):
    i = 0
    while i < len(p):
        tag, i = varint(p, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = varint(p, i)
            if f == 10:
                return v
        elif wt == 1: i += 8
        elif wt == 5: i += 4
        elif wt == 2:
            n, i = varint(p, i); i += n
        else:
            raise ValueError("wire type %d" % wt)
    return None

OWN, QBASE, QCOUNT = 1, 0x7F000000, 1 << 20
kept, dropped = bytearray(), {"preamble": 0, "own": 0, "quality": 0}
i, start = 0, entry.get("preamble_bytes", 0)
while i < len(data):
    rec = i
    tag, i = varint(data, i)
    n, i = varint(data, i)
    body = data[i:i + n]; i += n
    if rec < start:
        dropped["preamble"] += 1; continue
    s = seq_of(body)
    if s == OWN:
        dropped["own"] += 1; continue
    if s is not None and 0 <= s - QBASE < QCOUNT:
        dropped["quality"] += 1; continue
    kept += data[rec:i]
open(os.path.join(work, "with.pftrace"), "wb").write(data)
open(os.path.join(work, "bare.pftrace"), "wb").write(kept)
print("file %s: %d bytes, %d packets; bare copy %d bytes (dropped: %s)" % (
    entry["name"], len(data), entry["packets"], len(kept), dropped))
PY

load() { # $1 file: prints "<parse ms or nan> <wall ms>"
    local t0 t1 stats
    t0=$(date +%s%N)
    stats=$(node tests/tp/query.mjs --stats "$1" | head -1)
    t1=$(date +%s%N)
    python3 -c "
import json, sys
rows = json.loads(sys.argv[1]).get('rows', [])
parse = [r[4] for r in rows if r[0] == 'parse_trace_duration_ns']
print(round(parse[0] / 1e6, 1) if parse else 'nan', round(($t1 - $t0) / 1e6, 1))" "$stats"
}

with_parse=() with_wall=() bare_parse=() bare_wall=()
for r in $(seq "$RUNS"); do
    read -r p w < <(load "$work/with.pftrace"); with_parse+=("$p") with_wall+=("$w")
    read -r p w < <(load "$work/bare.pftrace"); bare_parse+=("$p") bare_wall+=("$w")
    echo "run $r: with additions parse ${with_parse[-1]} ms wall ${with_wall[-1]} ms; bare parse ${bare_parse[-1]} ms wall ${bare_wall[-1]} ms" >&2
done
python3 - "${with_parse[*]}" "${with_wall[*]}" "${bare_parse[*]}" "${bare_wall[*]}" <<'PY'
import statistics, sys
def med(s):
    v = [float(x) for x in s.split() if x != "nan"]
    return statistics.median(v) if v else float("nan")
wp, ww, bp, bw = (med(a) for a in sys.argv[1:5])
print("median parse (trace processor's stat): with %.1f ms, bare %.1f ms, ratio %.3f" % (wp, bp, wp / bp if bp else float("nan")))
print("median wall per load (node, wasm start included): with %.1f ms, bare %.1f ms, ratio %.3f" % (ww, bw, ww / bw))
PY
