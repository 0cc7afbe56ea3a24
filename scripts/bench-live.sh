#!/usr/bin/env bash
# Live capture benchmarks (DESIGN.md §8), all in one run on this machine:
#
#   1. raw loopback TCP throughput, 4 KiB writes (tests/examples/tcp_baseline.rs);
#   2. four synthetic relays into tracesyncd, small packets (~64 B):
#      packets/s end to end, daemon peak RSS;
#   3. the same with large packets (synthetic size=4096): MB/s and the ratio
#      to (1). Relays' spools live on their own filesystem (a tmpfs, 256 MiB
#      each), as on the phones and VMs they stand for: on this one machine
#      they would otherwise write every spooled byte to the disk the daemon
#      writes its output to. Phase large-shared runs the same with the
#      spools in the work directory, on the output's disk;
#   4. one relay at 10 k packets/s: relay CPU (utime+stime from
#      /proc/PID/stat over the interval, % of one core) and tail latency
#      p50/p99 (a jsonl tail client comparing each record's ts with the host
#      CLOCK_BOOTTIME when it reads the record).
#
#   scripts/bench-live.sh
#   BENCH_SECS=20 BENCH_SMALL_RATE=500000 scripts/bench-live.sh
#   BENCH_TLS=1 scripts/bench-live.sh   # relays over mutual TLS (lab PKI made
#                                       # with `tracesync pki`); default plaintext
#   BENCH_PHASES=small scripts/bench-live.sh   # only some phases: any of
#                                              # tcp,small,large,large-shared,cpu
#                                              # (default all)
#   BENCH_SPOOL_DIR=DIR scripts/bench-live.sh  # relays' spools of phase large
#                                              # (default /dev/shm)
#   BENCH_BIN_DIR=DIR scripts/bench-live.sh   # binaries from DIR, no build
#                                             # (e.g. a copy of an older build)
#   BENCH_DAEMON_ARGS='--config F' BENCH_RELAY_ARGS='--spool-disk-bytes 268435456' \
#       scripts/bench-live.sh   # extra arguments of every daemon / relay
#   BENCH_PERF=1 BENCH_PHASES=small scripts/bench-live.sh
#                       # also `perf record -e cpu-clock -g` of the daemon
#                       # during each end-to-end phase (report in the output)
#
# Besides the rates, each end-to-end phase reports the daemon's CPU time
# (utime+stime from /proc/PID/stat over the measured interval) per packet
# and per MB, and the same summed over the relays: unlike the rates, these
# hardly depend on what else runs on the machine, so they compare builds on
# a busy box. The tcp phase also measures the durable write rate of the
# work directory's disk (the daemon acks only what it has fdatasync'ed).
#
# End-to-end figures are the daemon's own counters (status: packets and
# bytes taken from relays, summed over machines) over BENCH_SECS after a
# BENCH_WARMUP_SECS warm-up. Relays generate at the offered rate (per
# relay) and block on a full spool, so the measured rate is what the daemon
# sustains. MB = 10^6 bytes.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${BENCH_SECS:-10}
WARMUP=${BENCH_WARMUP_SECS:-3}
SMALL_RATE=${BENCH_SMALL_RATE:-400000}
LARGE_RATE=${BENCH_LARGE_RATE:-40000}
RELAYS=${BENCH_RELAYS:-4}
WINDOW_MS=${BENCH_WINDOW_MS:-100}
TMPBASE=${TMPDIR:-/tmp}
TLS=${BENCH_TLS:-0}
PHASES=${BENCH_PHASES:-tcp,small,large,large-shared,cpu}
SPOOL_BASE=${BENCH_SPOOL_DIR:-/dev/shm}
[ -d "$SPOOL_BASE" ] || SPOOL_BASE=${TMPDIR:-/tmp}
PERF=${BENCH_PERF:-0}
read -r -a daemon_args <<<"${BENCH_DAEMON_ARGS:-}"
read -r -a relay_args <<<"${BENCH_RELAY_ARGS:-}"
want() { [[ ",$PHASES," == *",$1,"* ]]; }

target=${CARGO_TARGET_DIR:-target}
bins=${BENCH_BIN_DIR:-}
if [ -z "$bins" ]; then
    echo "building (release)" >&2
    cargo build --release --quiet -p tracesync-daemon -p tracesync-cli -p tracesync-relay --bins
    bins=$target/release
fi
if want tcp; then
    cargo build --release --quiet -p tracesync-tests --example tcp_baseline
fi
tracesyncd=$bins/tracesyncd
relay=$bins/tracesync-relay
tracesync=$bins/tracesync
baseline=$target/release/examples/tcp_baseline

work=$(mktemp -d "$TMPBASE/tracesync-bench-live.XXXXXX")
pids=()
own_spools=""
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work" ${own_spools:+"$own_spools"}
}
trap cleanup EXIT
token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')

# TLS flags of the daemon and of relay $1 (plaintext said explicitly).
daemon_tls=(--tls off)
relay_tls() { echo --tls off; }
if [ "$TLS" = 1 ]; then
    pki=$work/pki
    "$tracesync" pki init --daemon-name 127.0.0.1 "$pki" >/dev/null
    for i in $(seq "$RELAYS"); do "$tracesync" pki issue --name "bench-$i" "$pki" >/dev/null; done
    daemon_tls=(--tls-cert "$pki/daemon.crt" --tls-key "$pki/daemon.key" --tls-client-ca "$pki/ca.crt")
    relay_tls() { echo --tls-ca "$pki/ca.crt" --tls-cert "$pki/bench-$1.crt" --tls-key "$pki/bench-$1.key"; }
fi

# Status over the control socket: prints "<packets> <bytes>" summed over machines.
cat >"$work/status.py" <<'EOF'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"cmd":"status"}\n')
buf = b""
while not buf.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
report = json.loads(buf)
ms = report.get("machines", [])
print(sum(m.get("packets", 0) for m in ms), sum(m.get("bytes", 0) for m in ms))
EOF

# Tail latency: host BOOTTIME at receipt minus the record's trace ts.
cat >"$work/tail_latency.py" <<'EOF'
import json, socket, sys, time
sock, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
s.sendall(b'{"cmd":"tail","format":"jsonl"}\n')
f = s.makefile("rb")
lat, lagged = [], 0
end = time.monotonic() + secs
for line in f:
    now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    ts = rec.get("ts")
    if isinstance(ts, int) and rec.get("raw_id", 0) != 0:
        lat.append(now - ts)
    elif "ts" not in rec:
        lagged += 1
    if time.monotonic() > end:
        break
lat.sort()
if not lat:
    print("nan nan 0 %d" % lagged)
else:
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6
    print("%.2f %.2f %d %d" % (q(0.50), q(0.99), len(lat), lagged))
EOF

start_daemon() { # $1 label
    local dir=$work/$1
    mkdir -p "$dir"
    "$tracesyncd" --listen 127.0.0.1:0 --sync-listen 127.0.0.1:0 \
        --control "$dir/control.sock" --output "$dir/out" --token "$token" "${daemon_tls[@]}" \
        --merge-window-ms "$WINDOW_MS" "${daemon_args[@]}" 2>"$dir/daemon.log" &
    daemon_pid=$!
    pids+=("$daemon_pid")
    control=$dir/control.sock
    data_addr=""
    for _ in $(seq 300); do
        data_addr=$(sed -n 's/.*listening data=\([^ ]*\).*/\1/p' "$dir/daemon.log" | head -1)
        [ -n "$data_addr" ] && break
        sleep 0.1
    done
    if [ -z "$data_addr" ]; then
        echo "tracesyncd did not start:" >&2
        cat "$dir/daemon.log" >&2
        exit 1
    fi
}

# Where relays spool: the phase's work directory unless a phase sets
# phase_spools (and the extra relay arguments phase_spool_args).
phase_spools=""
phase_spool_args=()

start_relays() { # $1 label, $2 count, $3 source spec
    relay_pids=()
    local spool_dir=${phase_spools:-$work/$1}
    local spool_args=("${phase_spool_args[@]}")
    for i in $(seq "$2"); do
        # shellcheck disable=SC2046 # paths without spaces (mktemp)
        "$relay" --host "$data_addr" --name "bench-$i" --token "$token" $(relay_tls "$i") \
            --spool "$spool_dir/spool-$i" --source "$3" "${spool_args[@]}" "${relay_args[@]}" \
            2>"$work/$1/relay-$i.log" &
        relay_pids+=("$!")
        pids+=("$!")
    done
}

stop_all() {
    for p in "${relay_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${relay_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
}

status() { python3 "$work/status.py" "$control"; }

cpu_ticks() { # utime + stime of a pid (fields 14, 15 of /proc/PID/stat)
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

relays_cpu_ticks() { # cpu_ticks summed over the relays
    local sum=0 p
    for p in "${relay_pids[@]}"; do sum=$((sum + $(cpu_ticks "$p"))); done
    echo "$sum"
}

# Runs one end-to-end phase; sets pps, mbps, rss_mib, relay_rss_mib (the
# largest relay's).
phase() { # $1 label, $2 source spec
    start_daemon "$1"
    start_relays "$1" "$RELAYS" "$2"
    sleep "$WARMUP"
    local perf_pid=""
    if [ "$PERF" = 1 ]; then
        perf record -q -e cpu-clock -g -p "$daemon_pid" -o "$work/$1/perf.data" \
            2>"$work/$1/perf.log" &
        perf_pid=$!
    fi
    read -r p0 b0 < <(status)
    c0=$(cpu_ticks "$daemon_pid")
    r0=$(relays_cpu_ticks)
    t0=$(date +%s.%N)
    sleep "$SECS"
    read -r p1 b1 < <(status)
    c1=$(cpu_ticks "$daemon_pid")
    r1=$(relays_cpu_ticks)
    t1=$(date +%s.%N)
    rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$daemon_pid/status")
    local p relay_kib=0 kib
    for p in "${relay_pids[@]}"; do
        kib=$(awk '/VmHWM/ {print $2}' "/proc/$p/status")
        [ "$kib" -gt "$relay_kib" ] && relay_kib=$kib
    done
    relay_rss_mib=$((relay_kib / 1024))
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" || true
        echo "--- perf report, daemon, phase $1 ---"
        perf report -i "$work/$1/perf.data" --no-children --percent-limit 0.7 --stdio \
            -g none --sort dso,symbol 2>&1 | grep -v '^#' | grep -v '^$' | head -50 || true
    fi
    stop_all
    read -r pps mbps bpp rss_mib cpu_us_pkt cpu_ms_mb rcpu_us_pkt rcpu_ms_mb < <(python3 -c "
dt = $t1 - $t0
p, b = $p1 - $p0, $b1 - $b0
cpu = ($c1 - $c0) / $(getconf CLK_TCK)
rcpu = ($r1 - $r0) / $(getconf CLK_TCK)
print(round(p / dt), round(b / dt / 1e6, 1), round(b / max(p, 1)), round($rss_kib / 1024, 1),
      round(cpu / max(p, 1) * 1e6, 3), round(cpu / max(b, 1) * 1e9, 2),
      round(rcpu / max(p, 1) * 1e6, 3), round(rcpu / max(b, 1) * 1e9, 2))")
}

tcp_mbps=nan disk_mbps=nan small_pps=nan small_mbps=nan small_bpp=nan small_rss=nan small_cpu=nan
large_pps=nan large_mbps=nan large_bpp=nan large_rss=nan large_cpu=nan ratio=nan
small_rcpu=nan large_rcpu=nan small_relay_rss=nan large_relay_rss=nan
relay_cpu=nan p50=nan p99=nan nlat=0 lagged=0
if want tcp; then
    echo "1/4 raw loopback TCP, 4 KiB writes, ${SECS}s" >&2
    tcp_mbps=$("$baseline" --seconds "$SECS" --chunk 4096 | sed -n 's/.*mb_per_s=\([0-9.]*\).*/\1/p')
    # The daemon acks only what is durable: its output disk's durable write
    # rate (1 MiB writes, fdatasync every 16 MiB like its early commits,
    # 512 MiB into the work directory) bounds what any relay gets acked.
    disk_mbps=$(python3 - "$work/disk.bin" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
chunk = b"\x5a" * (1 << 20)
t = time.monotonic()
for i in range(512):
    os.write(fd, chunk)
    if i % 16 == 15:
        os.fdatasync(fd)
dt = time.monotonic() - t
os.close(fd)
os.unlink(sys.argv[1])
print(round(512 * (1 << 20) / dt / 1e6, 1))
PY
)
fi

if want small; then
    echo "2/4 $RELAYS relays, small packets, offered ${SMALL_RATE}/s each" >&2
    phase small "synthetic:$SMALL_RATE,size=64"
    small_pps=$pps small_mbps=$mbps small_bpp=$bpp small_rss=$rss_mib small_relay_rss=$relay_rss_mib
    small_cpu="$cpu_us_pkt us/packet"
    small_rcpu="$rcpu_us_pkt us/packet"
fi

if want large; then
    echo "3/4 $RELAYS relays, 4 KiB packets, offered ${LARGE_RATE}/s each, spools in $SPOOL_BASE" >&2
    own_spools=$(mktemp -d "$SPOOL_BASE/tracesync-bench-spools.XXXXXX")
    phase_spools=$own_spools phase_spool_args=(--spool-disk-bytes 268435456)
    phase large "synthetic:$LARGE_RATE,size=4096"
    phase_spools="" phase_spool_args=()
    rm -rf "$own_spools"
    large_pps=$pps large_mbps=$mbps large_bpp=$bpp large_rss=$rss_mib large_relay_rss=$relay_rss_mib
    large_cpu="$cpu_ms_mb ms/MB"
    large_rcpu="$rcpu_ms_mb ms/MB"
    ratio=$(python3 -c "print(round($large_mbps / $tcp_mbps * 100, 1))" 2>/dev/null || echo nan)
fi

shared_mbps=nan shared_ratio=nan shared_cpu=nan shared_rcpu=nan
if want large-shared; then
    echo "3b/4 the same, spools on the output's disk" >&2
    phase large-shared "synthetic:$LARGE_RATE,size=4096"
    shared_mbps=$mbps
    shared_cpu="$cpu_ms_mb ms/MB"
    shared_rcpu="$rcpu_ms_mb ms/MB"
    shared_ratio=$(python3 -c "print(round($shared_mbps / $tcp_mbps * 100, 1))" 2>/dev/null || echo nan)
fi

if want cpu; then
    echo "4/4 one relay at 10 k packets/s: relay CPU, tail latency" >&2
    start_daemon cpu
    start_relays cpu 1 "synthetic:10000"
    sleep "$WARMUP"
    rpid=${relay_pids[0]}
    c0=$(cpu_ticks "$rpid")
    t0=$(date +%s.%N)
    read -r p50 p99 nlat lagged < <(python3 "$work/tail_latency.py" "$control" "$SECS")
    c1=$(cpu_ticks "$rpid")
    t1=$(date +%s.%N)
    stop_all
    hz=$(getconf CLK_TCK)
    relay_cpu=$(python3 -c "print(round(($c1 - $c0) / $hz / ($t1 - $t0) * 100, 2))")
fi

cat <<EOF

tracesync live benchmarks (TLS=$TLS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s per phase, merge window ${WINDOW_MS} ms)

| measure                                     | value                | target            |
|---------------------------------------------|----------------------|-------------------|
| raw loopback TCP, 4 KiB writes              | ${tcp_mbps} MB/s         | baseline          |
| durable disk writes (fdatasync per 16 MiB)  | ${disk_mbps} MB/s        | bounds acked rate |
| $RELAYS relays, small packets (~${small_bpp} B): packets/s | ${small_pps}             | >= 1 M/s          |
| $RELAYS relays, 4 KiB packets: MB/s             | ${large_mbps} (${large_pps} pkt/s) | >= 60% of TCP     |
| 4 KiB packets vs raw TCP                    | ${ratio}%                |                   |
| the same, spools on the output's disk       | ${shared_mbps} MB/s = ${shared_ratio}% of TCP | (relays' disks are other machines') |
| daemon peak RSS (VmHWM) small / large       | ${small_rss} / ${large_rss} MiB  | <= 256 MiB        |
| largest relay's peak RSS small / large      | ${small_relay_rss} / ${large_relay_rss} MiB |                   |
| daemon CPU time small / large               | ${small_cpu} / ${large_cpu} |                   |
| relays' CPU time (summed) small / large     | ${small_rcpu} / ${large_rcpu} |                   |
| daemon / relays' CPU, spools on output disk | ${shared_cpu} / ${shared_rcpu} |                   |
| relay CPU at 10 k packets/s                 | ${relay_cpu}% of a core    | <= 3%             |
| tail latency p50 / p99 (${nlat} records, ${lagged} lag notices) | ${p50} / ${p99} ms | p99 <= window + 50 ms |

reproduce: scripts/bench-live.sh (BENCH_PHASES=$PHASES BENCH_TLS=$TLS BENCH_SECS=$SECS BENCH_SMALL_RATE=$SMALL_RATE BENCH_LARGE_RATE=$LARGE_RATE BENCH_RELAYS=$RELAYS BENCH_WINDOW_MS=$WINDOW_MS BENCH_SPOOL_DIR=$SPOOL_BASE)
EOF
