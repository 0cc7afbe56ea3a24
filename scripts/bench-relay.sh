#!/usr/bin/env bash
# Relay CPU per packet (docs/performance.md: a cheap relay leaves the cores to the
# daemon; relay CPU <= 3% of a core at 10 k packets/s).
#
# One relay (synthetic source, plaintext) sends into a minimal sink
# (relay/examples/relay_sink.rs: Welcome, an ack per batch at once, no
# output), so the relay's work is all that is measured: generation, spool
# (disk segments), uplink. Relay CPU is utime+stime from /proc/PID/stat over
# the interval; packets and bytes are the sink's counts. Phases:
#
#   1. small packets, synthetic:RATE,size=64: relay CPU per million packets;
#   2. large packets, synthetic:RATE,size=4096: relay CPU per GB;
#   3. default packets at 10 k packets/s: relay CPU in % of a core.
#
# Baseline, same run: the CPU of writing the same number of bytes straight
# to a loopback TCP socket in 64 KiB writes (relay_sink raw: the writing
# thread's CPU clock), i.e. the least any sender pays to move those bytes.
#
#   scripts/bench-relay.sh
#   BENCH_SECS=20 scripts/bench-relay.sh
#   RELAY_BIN=path/to/tracesync-relay scripts/bench-relay.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${BENCH_SECS:-10}
WARMUP=${BENCH_WARMUP_SECS:-2}
SMALL_RATE=${BENCH_SMALL_RATE:-200000}
LARGE_RATE=${BENCH_LARGE_RATE:-20000}
TMPBASE=${TMPDIR:-/tmp}

if [ "${BENCH_BUILD:-1}" = 1 ]; then
    echo "building (release)" >&2
    cargo build --release --quiet -p tracesync-relay --bin tracesync-relay --example relay_sink
fi
target=${CARGO_TARGET_DIR:-target}
relay=${RELAY_BIN:-$target/release/tracesync-relay}
sink=$target/release/examples/relay_sink

work=$(mktemp -d "$TMPBASE/tracesync-bench-relay.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$sink" serve "$work/sink.stats" >"$work/sink.addr" &
pids+=("$!")
addr=""
for _ in $(seq 100); do
    addr=$(head -1 "$work/sink.addr")
    [ -n "$addr" ] && [ -f "$work/sink.stats" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "relay_sink did not start" >&2; exit 1; }

cpu_ticks() { # utime + stime of a pid (fields 14, 15 of /proc/PID/stat)
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
hz=$(getconf CLK_TCK)

# One relay for SECS after WARMUP; sets cpu_s, packets, bytes, secs.
phase() { # $1 label, $2 source spec
    "$relay" --host "$addr" --name "bench-$1" --token x --tls off \
        --spool "$work/spool-$1" --source "$2" 2>"$work/relay-$1.log" &
    local rpid=$!
    pids+=("$rpid")
    sleep "$WARMUP"
    read -r p0 b0 <"$work/sink.stats"
    c0=$(cpu_ticks "$rpid")
    t0=$(date +%s.%N)
    sleep "$SECS"
    c1=$(cpu_ticks "$rpid")
    t1=$(date +%s.%N)
    sleep 0.2 # the sink's counters of what was sent until t1
    read -r p1 b1 <"$work/sink.stats"
    kill -TERM "$rpid"
    wait "$rpid" 2>/dev/null || true
    cpu_s=$(python3 -c "print(($c1 - $c0) / $hz)")
    packets=$((p1 - p0))
    bytes=$((b1 - b0))
    secs=$(python3 -c "print($t1 - $t0)")
}

raw_cpu() { "$sink" raw "$1" 65536; }

echo "1/3 small packets, synthetic:$SMALL_RATE,size=64, ${SECS}s" >&2
phase small "synthetic:$SMALL_RATE,size=64"
small=$(python3 -c "
p, b, c = $packets, $bytes, $cpu_s
print(f'{p / $secs:.0f} {b / max(p, 1):.1f} {c / (p / 1e6):.3f} {c / $secs * 100:.1f}')")
small_raw=$(raw_cpu "$bytes")
small_raw=$(python3 -c "print(f'{$small_raw / ($packets / 1e6):.3f}')")

echo "2/3 large packets, synthetic:$LARGE_RATE,size=4096, ${SECS}s" >&2
phase large "synthetic:$LARGE_RATE,size=4096"
large=$(python3 -c "
p, b, c = $packets, $bytes, $cpu_s
print(f'{b / $secs / 1e6:.1f} {b / max(p, 1):.0f} {c / (b / 1e9):.3f} {c / $secs * 100:.1f}')")
large_raw=$(raw_cpu "$bytes")
large_raw=$(python3 -c "print(f'{$large_raw / ($bytes / 1e9):.3f}')")

echo "3/3 default packets at 10 k packets/s, ${SECS}s" >&2
phase cpu "synthetic:10000"
at10k=$(python3 -c "
p, b, c = $packets, $bytes, $cpu_s
print(f'{p / $secs:.0f} {b / max(p, 1):.1f} {c / $secs * 100:.2f}')")

read -r s_pps s_bpp s_cpu s_core <<<"$small"
read -r l_mbps l_bpp l_cpu l_core <<<"$large"
read -r k_pps k_bpp k_core <<<"$at10k"
ratio() { python3 -c "print(f'{$1 / max($2, 1e-9):.1f}')"; }
cat <<EOF

tracesync relay CPU ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s per phase; CPU = utime+stime)

| measure | relay | raw TCP write of the same bytes | relay / raw |
|---|---|---|---|
| size=64: ${s_pps} packets/s of ${s_bpp} B (${s_core}% of a core) | ${s_cpu} CPU s per M packets | ${small_raw} s | $(ratio "$s_cpu" "$small_raw") |
| size=4096: ${l_mbps} MB/s, ${l_bpp} B packets (${l_core}% of a core) | ${l_cpu} CPU s per GB | ${large_raw} s | $(ratio "$l_cpu" "$large_raw") |
| default packets (${k_bpp} B) at ${k_pps} packets/s | ${k_core}% of a core | | target <= 3% |

reproduce: scripts/bench-relay.sh (BENCH_SECS=$SECS BENCH_SMALL_RATE=$SMALL_RATE BENCH_LARGE_RATE=$LARGE_RATE)
EOF
