#!/usr/bin/env bash
# A ring relay's disk and memory between triggers (docs/operations.md, "The
# flight recorder"): tracesyncd and one `--mode ring` relay at a time on
# loopback, plaintext, a synthetic source at each RATE (packets/s; 100M is
# as fast as the source goes), sampled every 250 ms for SECONDS (default
# 10): the spool directory's bytes on disk, the relay's VmRSS, and the
# ring's bytes and oldest age from its metrics endpoint. Prints a table.
#
#   scripts/ring-bounds.sh [RING_SECONDS] [RING_BYTES] [SECONDS] [RATE...]
set -euo pipefail
ring_seconds=${1:-600}
ring_bytes=${2:-8388608}
seconds=${3:-10}
shift $(($# < 3 ? $# : 3))
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1000 100000 100000000)
# shellcheck source=scripts/lib/plain-daemon.sh
source "$(dirname "$0")/lib/plain-daemon.sh"
metric() {
    curl -s "http://127.0.0.1:$mport/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}
printf "%-10s %12s %12s %14s %10s\n" rate disk_max_B rss_max_B ring_bytes_max oldest_s
for rate in "${rates[@]}"; do
    mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    spool="$work/spool-$rate"
    "$bin/tracesync-relay" --host "127.0.0.1:$port" --name "bounds-$rate" --token t --tls off \
        --spool "$spool" --source "synthetic:$rate" --mode ring --ring-seconds "$ring_seconds" \
        --ring-bytes "$ring_bytes" --metrics-listen "127.0.0.1:$mport" >"$work/r-$rate.log" 2>&1 &
    relay=$!
    pids+=("$relay")
    disk=0 rss=0 held=0 age=0
    for _ in $(seq $((seconds * 4))); do
        sleep 0.25
        d=$(find "$spool" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
        r=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$relay/status" 2>/dev/null || echo 0)
        h=$(metric tracesync_relay_ring_bytes || true)
        a=$(metric tracesync_relay_ring_oldest_age_seconds || true)
        disk=$((d > disk ? d : disk))
        rss=$((r > rss ? r : rss))
        held=$(awk -v x="${h:-0}" -v y="$held" 'BEGIN { printf "%d", (x > y ? x : y) }')
        age=${a:-$age}
    done
    kill "$relay"
    wait "$relay" 2>/dev/null || true
    printf "%-10s %12s %12s %14s %10s\n" "$rate" "$disk" "$rss" "$held" "$age"
done
