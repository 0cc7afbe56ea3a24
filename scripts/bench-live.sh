#!/usr/bin/env bash
# Live capture benchmarks (docs/performance.md) at the shipped defaults, all in one
# run on this machine. The headline is the configuration that ships: relays
# over mutual TLS (a lab PKI made with `tracesync pki`) and the daemon's
# default merge window (configs/daemon.toml, 500 ms) and rotation;
# plaintext runs beside it in the same run.
#
#   1. the box: raw loopback TCP throughput, 4 KiB writes
#      (tests/examples/tcp_baseline.rs), and the durable write rate of the
#      work directory's disk (the daemon acks only what it has fdatasync'ed);
#   2. four synthetic relays into tracesyncd, small packets (~64 B):
#      packets/s end to end, once per offered rate of BENCH_SMALL_RATE
#      (per relay, comma-separated; default 300000,500000,750000, that is
#      1.2, 2 and 3 M/s in all): the headline is the rate that delivered
#      most, the others on a line of their own;
#   3. the same with large packets (synthetic size=4096): MB/s and its ratio
#      to raw TCP and to the durable disk rate. Relays' spools live on their
#      own filesystem (a tmpfs, 256 MiB each), as on the phones and VMs they
#      stand for: on this one machine they would otherwise write every
#      spooled byte to the disk the daemon writes its output to. Phase
#      large-shared runs the same with the spools in the work directory, on
#      the output's disk (first mode only);
#   4. one relay at 10 k packets/s: relay CPU (utime+stime from
#      /proc/PID/stat over the interval, % of one core) and tail latency
#      p50/p99 (a jsonl tail client comparing each record's ts with the host
#      CLOCK_BOOTTIME when it reads the record);
#   5. feeders (tracesync-feeder) instead of relays, small packets, into a
#      daemon with one ingest shard and then two: the daemon's own capacity
#      and CPU per packet (in all and per thread), the feeders' CPU, and
#      every acknowledged packet's identity checked in the output
#      (scripts/bench-live-feeder.sh says how).
#
# Phases 2-5 run once per mode (mutual TLS, then plaintext).
#
#   scripts/bench-live.sh
#   BENCH_SECS=20 BENCH_SMALL_RATE=400000,1000000 scripts/bench-live.sh
#   BENCH_MODES=tls scripts/bench-live.sh    # modes, in order: any of tls,plain
#                                            # (default tls,plain); BENCH_TLS=1
#                                            # means tls, BENCH_TLS=0 plain
#   BENCH_PHASES=small scripts/bench-live.sh   # only some phases: any of
#                                              # tcp,small,large,large-shared,cpu,
#                                              # feeder (default all)
#   BENCH_WINDOW_MS=100 scripts/bench-live.sh  # merge window (default: the
#                                              # shipped one, configs/daemon.toml)
#   BENCH_SPOOL_DIR=DIR scripts/bench-live.sh  # relays' spools of phase large
#                                              # (default /dev/shm)
#   BENCH_BIN_DIR=DIR scripts/bench-live.sh   # binaries from DIR, no build
#                                             # (e.g. a copy of an older build)
#   BENCH_DAEMON_ARGS='--config F' BENCH_RELAY_ARGS='--spool-disk-bytes 268435456' \
#       scripts/bench-live.sh   # extra arguments of every daemon / relay
#   BENCH_DAEMON_ENV='MALLOC_ARENA_MAX=2' scripts/bench-live.sh
#                       # the daemon's environment (default: the Environment=
#                       # lines of systemd/tracesyncd.service, as shipped)
#   BENCH_PERF=1 BENCH_PHASES=small scripts/bench-live.sh   # or feeder
#                       # also `perf record -e cpu-clock -g` of the daemon
#                       # during each end-to-end phase (report in the output)
#
# Besides the rates, each end-to-end phase reports the daemon's CPU time
# (utime+stime from /proc/PID/stat over the measured interval) per packet
# and per MB, the same summed over the relays, the daemon's ingest thread
# alone (per packet, and how much of a core it took: with small packets it
# is the daemon's ceiling), and the daemon's peak RSS (VmHWM over the
# whole phase): unlike the rates, CPU per packet and per MB
# hardly depend on what else runs on the machine, so they compare builds on
# a busy box. Each run prints the load average at its start and end.
#
# End-to-end figures are the daemon's own counters (status: packets and
# bytes taken from relays, summed over machines) over BENCH_SECS after a
# BENCH_WARMUP_SECS warm-up. Relays generate at the offered rate (per
# relay) and block on a full spool, so the measured rate is what the daemon
# sustains. MB = 10^6 bytes. Not run in CI (it takes about two minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${BENCH_SECS:-10}
WARMUP=${BENCH_WARMUP_SECS:-3}
SMALL_RATE=${BENCH_SMALL_RATE:-300000,500000,750000}
LARGE_RATE=${BENCH_LARGE_RATE:-40000}
RELAYS=${BENCH_RELAYS:-4}
# The shipped merge window: configs/daemon.toml's [merge] window-ms.
default_window=$(awk '/^\[merge\]/ {m = 1; next} /^\[/ {m = 0} m && /^window-ms *=/ {print $3; exit}' configs/daemon.toml)
WINDOW_MS=${BENCH_WINDOW_MS:-${default_window:-500}}
TMPBASE=${TMPDIR:-/tmp}
case "${BENCH_TLS:-}" in
1) default_modes=tls ;;
0) default_modes=plain ;;
*) default_modes=tls,plain ;;
esac
MODES=${BENCH_MODES:-$default_modes}
PHASES=${BENCH_PHASES:-tcp,small,large,large-shared,cpu,feeder}
SPOOL_BASE=${BENCH_SPOOL_DIR:-/dev/shm}
[ -d "$SPOOL_BASE" ] || SPOOL_BASE=${TMPDIR:-/tmp}
PERF=${BENCH_PERF:-0}
read -r -a daemon_args <<<"${BENCH_DAEMON_ARGS:-}"
if [ -z "${BENCH_DAEMON_ENV+set}" ]; then
    BENCH_DAEMON_ENV=$(sed -n 's/^Environment=//p' systemd/tracesyncd.service | tr '\n' ' ')
fi
read -r -a daemon_env <<<"$BENCH_DAEMON_ENV"
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
feeder=$bins/tracesync-feeder
if want feeder && { [ -z "${BENCH_BIN_DIR:-}" ] || [ ! -x "$feeder" ]; }; then
    cargo build --release --quiet -p tracesync-tests --bin tracesync-feeder
    feeder=$target/release/tracesync-feeder
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

# TLS flags of the daemon and of relay $1, per mode (plaintext said
# explicitly); set_mode picks the mode's. The PKI is made once.
if [[ ",$MODES," == *",tls,"* ]]; then
    pki=$work/pki
    "$tracesync" pki init --daemon-name 127.0.0.1 "$pki" >/dev/null
    for i in $(seq "$RELAYS"); do "$tracesync" pki issue --name "bench-$i" "$pki" >/dev/null; done
fi
set_mode() { # $1 tls|plain
    mode=$1
    if [ "$mode" = tls ]; then
        daemon_tls=(--tls-cert "$pki/daemon.crt" --tls-key "$pki/daemon.key" --tls-client-ca "$pki/ca.crt")
        relay_tls() { echo --tls-ca "$pki/ca.crt" --tls-cert "$pki/bench-$1.crt" --tls-key "$pki/bench-$1.key"; }
    else
        daemon_tls=(--tls off)
        relay_tls() { echo --tls off; }
    fi
}

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

start_daemon() { # $1 label (a directory of the work directory)
    local dir=$work/$1
    mkdir -p "$dir"
    env "${daemon_env[@]}" "$tracesyncd" --listen 127.0.0.1:0 --sync-listen 127.0.0.1:0 \
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

# Stops processes with SIGTERM, and with SIGKILL those still running after
# 10 s: a relay drains its spool on SIGTERM, which after an overload phase
# can take minutes on a busy box; the figures are taken by then.
stop_pids() {
    local p
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 100); do
        for p in "$@"; do kill -0 "$p" 2>/dev/null && break; done
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

stop_all() {
    stop_pids "${relay_pids[@]}"
    stop_pids "$daemon_pid"
}

status() { python3 "$work/status.py" "$control"; }

cpu_ticks() { # utime + stime of a pid (fields 14, 15 of /proc/PID/stat)
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

ingest_cpu_ticks() { # utime + stime of the daemon's ingest thread (the ceiling)
    local t
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = tracesync-inges ]; then
            sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}'
            return
        fi
    done
    echo nan # renamed thread: no figure rather than a wrong one
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
    i0=$(ingest_cpu_ticks "$daemon_pid")
    r0=$(relays_cpu_ticks)
    t0=$(date +%s.%N)
    sleep "$SECS"
    read -r p1 b1 < <(status)
    c1=$(cpu_ticks "$daemon_pid")
    i1=$(ingest_cpu_ticks "$daemon_pid")
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
    # The phase's output (gigabytes with 4 KiB packets) is deleted and
    # the disk synced before the next phase: left in place, its writeback
    # ran during the next phase, and whichever mode came second measured
    # slower (4 KiB: 199-295 against 388-507 MB/s, either mode).
    rm -rf "$work/$1/out"
    sync
    read -r pps mbps bpp rss_mib cpu_us_pkt cpu_ms_mb rcpu_us_pkt rcpu_ms_mb icpu_us_pkt ibusy < <(python3 -c "
dt = $t1 - $t0
p, b = $p1 - $p0, $b1 - $b0
cpu = ($c1 - $c0) / $(getconf CLK_TCK)
rcpu = ($r1 - $r0) / $(getconf CLK_TCK)
icpu = (float('$i1') - float('$i0')) / $(getconf CLK_TCK)
# Nothing delivered in the interval (relays still waiting for their first
# sync estimate on a busy box): no per-packet figures (nan), not a division by 0.
per = lambda x, n, scale: round(x / n * scale, 3) if n else float('nan')
print(round(p / dt), round(b / dt / 1e6, 1), round(b / p) if p else 'nan', round($rss_kib / 1024, 1),
      per(cpu, p, 1e6), per(cpu, b, 1e9), per(rcpu, p, 1e6), per(rcpu, b, 1e9),
      per(icpu, p, 1e6), round(icpu / dt * 100, 1) if icpu == icpu else icpu)")
    if [ "$pps" = 0 ]; then
        echo "phase $1: no packet delivered in the ${SECS}s measured; try BENCH_WARMUP_SECS=10" >&2
    fi
}

# shellcheck source=scripts/bench-live-feeder.sh
. scripts/bench-live-feeder.sh

# Results by "<mode>.<key>"; nan where a phase did not run.
declare -A R
r() { echo "${R[$1]:-nan}"; }
pct() { python3 -c "print(round($1 / $2 * 100, 1))" 2>/dev/null || echo nan; }
tcp_mbps=nan disk_mbps=nan
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
if want tcp; then
    echo "box: raw loopback TCP, 4 KiB writes, ${SECS}s; durable disk writes" >&2
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

first_mode=1
for m in ${MODES//,/ }; do
    case "$m" in
    tls | plain) set_mode "$m" ;;
    *)
        echo "BENCH_MODES: unknown mode '$m' (use tls, plain or tls,plain)" >&2
        exit 64
        ;;
    esac
    if want small; then
        # One phase per offered rate; the headline is the one that
        # delivered most. Offered more than the box sustains, the relays'
        # generators and spools take CPU from the daemon on these two
        # cores and fewer packets arrive, so one rate alone understates
        # or overstates what the daemon can take.
        best=-1 sweep=""
        for rate in ${SMALL_RATE//,/ }; do
            echo "$m: $RELAYS relays, small packets, offered ${rate}/s each" >&2
            phase "$m-small-$rate" "synthetic:$rate,size=64"
            sweep+="$(python3 -c "print(f'{$rate * $RELAYS / 1e6:.1f} M -> {float(\"$pps\") / 1e6:.2f} M')"), "
            if python3 -c "import sys; sys.exit(0 if float('$pps') > float('$best') else 1)"; then
                best=$pps
                R[$m.small_pps]=$pps R[$m.small_bpp]=$bpp R[$m.small_rss]=$rss_mib
                R[$m.small_relay_rss]=$relay_rss_mib
                R[$m.small_cpu]=$cpu_us_pkt R[$m.small_cpu_mb]=$cpu_ms_mb
                R[$m.small_rcpu]=$rcpu_us_pkt R[$m.small_rcpu_mb]=$rcpu_ms_mb
                R[$m.small_icpu]=$icpu_us_pkt R[$m.small_ibusy]=$ibusy
                R[$m.small_offered]=$((rate * RELAYS))
            fi
        done
        R[$m.small_sweep]=${sweep%, }
    fi
    if want large; then
        echo "$m: $RELAYS relays, 4 KiB packets, offered ${LARGE_RATE}/s each, spools in $SPOOL_BASE" >&2
        own_spools=$(mktemp -d "$SPOOL_BASE/tracesync-bench-spools.XXXXXX")
        phase_spools=$own_spools phase_spool_args=(--spool-disk-bytes 268435456)
        phase "$m-large" "synthetic:$LARGE_RATE,size=4096"
        phase_spools="" phase_spool_args=()
        rm -rf "$own_spools"
        R[$m.large_pps]=$pps R[$m.large_mbps]=$mbps R[$m.large_rss]=$rss_mib
        R[$m.large_relay_rss]=$relay_rss_mib
        R[$m.large_cpu]=$cpu_ms_mb R[$m.large_cpu_pkt]=$cpu_us_pkt
        R[$m.large_rcpu]=$rcpu_ms_mb R[$m.large_rcpu_pkt]=$rcpu_us_pkt
        R[$m.tcp_ratio]=$(pct "$mbps" "$tcp_mbps")
        R[$m.disk_ratio]=$(pct "$mbps" "$disk_mbps")
    fi
    if want large-shared && [ "$first_mode" = 1 ]; then
        echo "$m: the same, spools on the output's disk" >&2
        phase "$m-large-shared" "synthetic:$LARGE_RATE,size=4096"
        R[$m.shared_mbps]=$mbps R[$m.shared_cpu]=$cpu_ms_mb R[$m.shared_rcpu]=$rcpu_ms_mb
        R[$m.shared_ratio]=$(pct "$mbps" "$tcp_mbps")
    fi
    if want cpu; then
        echo "$m: one relay at 10 k packets/s: relay CPU, tail latency" >&2
        mkdir -p "$work/$m-cpu"
        start_daemon "$m-cpu"
        start_relays "$m-cpu" 1 "synthetic:10000"
        sleep "$WARMUP"
        rpid=${relay_pids[0]}
        c0=$(cpu_ticks "$rpid")
        t0=$(date +%s.%N)
        read -r p50 p99 nlat lagged < <(python3 "$work/tail_latency.py" "$control" "$SECS")
        c1=$(cpu_ticks "$rpid")
        t1=$(date +%s.%N)
        stop_all
        hz=$(getconf CLK_TCK)
        R[$m.relay_cpu]=$(python3 -c "print(round(($c1 - $c0) / $hz / ($t1 - $t0) * 100, 2))")
        R[$m.p50]=$p50 R[$m.p99]=$p99 R[$m.nlat]=$nlat R[$m.lagged]=$lagged
    fi
    if want feeder; then
        feeder_phases
    fi
    first_mode=0
done

# One column per mode, the headline (mutual TLS) first.
cols=(${MODES//,/ })
name() { if [ "$1" = tls ]; then echo "mutual TLS"; else echo plaintext; fi; }
row() { # $1 measure, $2 target, $3 printf format of a cell, $4... keys
    local label=$1 target=$2 fmt=$3 m cells="" k vals
    shift 3
    for m in "${cols[@]}"; do
        vals=()
        for k in "$@"; do vals+=("$(r "$m.$k")"); done
        # shellcheck disable=SC2059 # the format is the caller's
        cells+=" $(printf "$fmt" "${vals[@]}") |"
    done
    echo "| $label |$cells $target |"
}
header="| measure |"
rule="|---|"
for m in "${cols[@]}"; do header+=" $(name "$m") |"; rule+="---|"; done

cat <<EOF

tracesync live benchmarks ($(nproc) cores, load $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end, ${SECS}s per phase, merge window ${WINDOW_MS} ms)

box: raw loopback TCP, 4 KiB writes: ${tcp_mbps} MB/s; durable disk writes (fdatasync per 16 MiB): ${disk_mbps} MB/s

$header target |
$rule---|
EOF
row "$RELAYS relays, small packets: packets/s (most delivered)" ">= 3 M/s" "%s (~%s B, offered %s/s)" small_pps small_bpp small_offered
row "... by offered rate (all relays): offered -> delivered packets/s" "" "%s" small_sweep
row "$RELAYS relays, 4 KiB packets: MB/s" "" "%s (%s pkt/s)" large_mbps large_pps
row "4 KiB: share of raw TCP / of durable disk" ">= 60% of TCP" "%s%% / %s%%" tcp_ratio disk_ratio
row "the same, spools on the output's disk" "(relays' disks are other machines')" "%s MB/s = %s%%" shared_mbps shared_ratio
row "daemon peak RSS (VmHWM) small / 4 KiB" "<= 192 MiB" "%s / %s MiB" small_rss large_rss
row "largest relay's peak RSS small / 4 KiB" "" "%s / %s MiB" small_relay_rss large_relay_rss
row "daemon CPU, small packets" "" "%s us/pkt, %s ms/MB" small_cpu small_cpu_mb
row "... of it the ingest thread (one core at most), small packets" "" "%s us/pkt, %s%% of a core" small_icpu small_ibusy
row "daemon CPU, 4 KiB packets" "" "%s ms/MB, %s us/pkt" large_cpu large_cpu_pkt
row "relays' CPU (summed), small packets" "" "%s us/pkt, %s ms/MB" small_rcpu small_rcpu_mb
row "relays' CPU (summed), 4 KiB packets" "" "%s ms/MB, %s us/pkt" large_rcpu large_rcpu_pkt
row "daemon / relays' CPU, spools on output disk" "" "%s / %s ms/MB" shared_cpu shared_rcpu
row "relay CPU at 10 k packets/s" "<= 3%" "%s%% of a core" relay_cpu
row "tail latency p50 / p99" "p99 <= window + 50 ms" "%s / %s ms (%s records, %s lag notices)" p50 p99 nlat lagged
feeder_rows
echo
echo "reproduce: BENCH_MODES=$MODES BENCH_PHASES=$PHASES BENCH_SECS=$SECS BENCH_WARMUP_SECS=$WARMUP BENCH_SMALL_RATE=$SMALL_RATE BENCH_LARGE_RATE=$LARGE_RATE BENCH_RELAYS=$RELAYS BENCH_WINDOW_MS=$WINDOW_MS BENCH_SPOOL_DIR=$SPOOL_BASE BENCH_DAEMON_ENV='$BENCH_DAEMON_ENV' scripts/bench-live.sh"
