# The feeder phase of scripts/bench-live.sh (sourced by it: uses its
# functions and variables; not run alone).
#
# $RELAYS feeders (tracesync-feeder, tests/src/feeder/) into one daemon:
# each speaks the relay protocol over the mode's TLS (Hello, a window of
# batches, acks, probes) but sends pre-encoded batches of small TrackEvents,
# every one with a fresh identity, as fast as the daemon acknowledges them.
# The feeders' CPU per packet is a small fraction of the daemon's, so on
# this box the figure is the daemon's own capacity rather than what the
# relays' generators leave it. Run once with one ingest shard and once with
# two (`--ingest-shards`; a daemon without the flag runs the first alone),
# side by side. Reported per run: packets/s the daemon took (its status
# counters), the daemon's CPU per packet in all and per thread
# (/proc/PID/task/*/stat, by thread name), the feeders' CPU per packet,
# the daemon's peak RSS, and packets lost and duplicated: after the
# feeders drained and the daemon stopped, `tracesync-feeder check` reads
# the whole output (every acknowledged identity exactly once).
# BENCH_FEEDER_CHECK=0 skips that check (it reads gigabytes).

FEEDER_CHECK=${BENCH_FEEDER_CHECK:-1}

daemon_has_shards() { "$tracesyncd" --help 2>/dev/null | grep -q -- '--ingest-shards'; }

# "<tid> <name> <ticks>" per thread of pid $1 (names without spaces).
thread_ticks() {
    local t name ticks
    for t in /proc/"$1"/task/*; do
        name=$(tr ' ' '_' <"$t/comm" 2>/dev/null) || continue
        ticks=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}') || continue
        echo "${t##*/} $name $ticks"
    done
}

# perf's report lines without their empty trailing columns.
trim_perf() { sed -E 's/([[:space:]]+-)*[[:space:]]*$//'; }

start_feeders() { # $1 label, $2 count
    feeder_pids=()
    for i in $(seq "$2"); do
        # shellcheck disable=SC2046 # paths without spaces (mktemp)
        "$feeder" run --host "$data_addr" --name "bench-$i" --token "$token" $(relay_tls "$i") \
            --drain-seconds 5 >"$work/$1/feeder-$i.out" 2>"$work/$1/feeder-$i.log" &
        feeder_pids+=("$!")
        pids+=("$!")
    done
}

feeders_cpu_ticks() {
    local sum=0 p
    for p in "${feeder_pids[@]}"; do sum=$((sum + $(cpu_ticks "$p"))); done
    echo "$sum"
}

# One run; sets the feeder_* results of shard count $2 ("" : no flag).
feeder_phase() { # $1 label, $2 shards
    local saved=("${daemon_args[@]}")
    [ -n "$2" ] && daemon_args+=(--ingest-shards "$2")
    start_daemon "$1"
    daemon_args=("${saved[@]}")
    start_feeders "$1" "$RELAYS"
    sleep "$WARMUP"
    local perf_pid=""
    if [ "$PERF" = 1 ]; then
        perf record -q -e cpu-clock -g -p "$daemon_pid" -o "$work/$1/perf.data" \
            2>"$work/$1/perf.log" &
        perf_pid=$!
    fi
    read -r p0 b0 < <(status)
    c0=$(cpu_ticks "$daemon_pid")
    f0=$(feeders_cpu_ticks)
    thread_ticks "$daemon_pid" >"$work/$1/threads0"
    t0=$(date +%s.%N)
    sleep "$SECS"
    read -r p1 b1 < <(status)
    c1=$(cpu_ticks "$daemon_pid")
    f1=$(feeders_cpu_ticks)
    thread_ticks "$daemon_pid" >"$work/$1/threads1"
    t1=$(date +%s.%N)
    rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$daemon_pid/status")
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" || true
        # By thread, self time; then inclusive (callers' share), which
        # says how much of the ingest thread the writer takes.
        echo "--- perf report, daemon, phase $1: self, by thread ---"
        perf report -i "$work/$1/perf.data" --no-children --percent-limit 0.7 --stdio \
            -g none --sort comm,symbol 2>&1 | grep -v '^#' | grep -v '^$' | trim_perf | head -50 || true
        echo "--- perf report, daemon, phase $1: inclusive, ingest thread ---"
        perf report -i "$work/$1/perf.data" --children --comms tracesync-inges --percent-limit 2 \
            --stdio -g none --sort symbol 2>&1 | grep -v '^#' | grep -v '^$' | trim_perf | head -60 || true
    fi
    # The feeders drain (their last batches acknowledged) and print what
    # was acknowledged; then the daemon stops and its output is whole.
    stop_pids "${feeder_pids[@]}"
    stop_pids "$daemon_pid"
    local tally="written=nan lost=nan duplicated=nan"
    if [ "$FEEDER_CHECK" = 1 ]; then
        tally=$("$feeder" check --output "$work/$1/out" "$work/$1"/feeder-*.out 2>"$work/$1/check.log") || true
        [ -n "$tally" ] || tally="written=nan lost=nan duplicated=nan ($(head -1 "$work/$1/check.log"))"
    fi
    rm -rf "$work/$1/out"
    sync
    read -r f_pps f_bpp f_cpu f_fcpu f_rss < <(python3 -c "
dt = $t1 - $t0
p, b = $p1 - $p0, $b1 - $b0
hz = $(getconf CLK_TCK)
per = lambda ticks: round(ticks / hz / p * 1e6, 3) if p else float('nan')
print(round(p / dt), round(b / p) if p else 'nan', per($c1 - $c0), per($f1 - $f0),
      round($rss_kib / 1024, 1))")
    # Per thread name: us/pkt, and the busiest thread's share of a core.
    f_threads=$(python3 - "$work/$1/threads0" "$work/$1/threads1" "$((p1 - p0))" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import sys
def load(path):
    out = {}
    for line in open(path):
        tid, name, ticks = line.split()
        out[tid] = (name, int(float(ticks)))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
packets, dt, hz = int(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4]), int(sys.argv[6])
by_name, busiest = {}, 0
for tid, (name, ticks) in b.items():
    d = ticks - a.get(tid, (name, 0))[1]
    by_name[name] = by_name.get(name, 0) + d
    busiest = max(busiest, d)
cells = [f"{n} {t / hz / packets * 1e6:.3f}" for n, t in sorted(by_name.items(), key=lambda x: -x[1])
         if packets and t / hz / packets * 1e6 >= 0.005]
print(", ".join(cells) + f" (busiest thread {busiest / hz / dt * 100:.0f}% of a core)")
PY
)
    f_tally=$tally
}

# The feeder phases of mode $m: one shard, then two.
feeder_phases() {
    local n flag
    for n in 1 2; do
        if daemon_has_shards; then
            flag=$n
        elif [ "$n" = 1 ]; then
            flag="" # one shard is what a daemon without the flag runs
        else
            R[$m.feeder_cell_$n]="n/a (this tracesyncd has no --ingest-shards)"
            continue
        fi
        echo "$m: $RELAYS feeders, small packets, $n ingest shard(s)" >&2
        feeder_phase "$m-feeder-$n" "$flag"
        R[$m.feeder_pps_$n]=$f_pps R[$m.feeder_bpp_$n]=$f_bpp R[$m.feeder_cpu_$n]=$f_cpu
        R[$m.feeder_fcpu_$n]=$f_fcpu R[$m.feeder_rss_$n]=$f_rss
        R[$m.feeder_threads_$n]=$f_threads
        R[$m.feeder_cell_$n]="$f_pps (~$f_bpp B; $f_tally)"
    done
    R[$m.feeder_ratio]=$(python3 -c "print(round(float('$(r "$m.feeder_pps_2")') / float('$(r "$m.feeder_pps_1")'), 2))" 2>/dev/null || echo nan)
}

feeder_rows() {
    row "feeder, small packets, 1 shard: packets/s" ">= 3.5 M/s, 0 lost / 0 dup" "%s" feeder_cell_1
    row "feeder, small packets, 2 shards: packets/s" ">= 3.5 M/s, 0 lost / 0 dup" "%s" feeder_cell_2
    row "feeder, 2 shards / 1 shard: packets/s" ">= 1.6x" "%sx" feeder_ratio
    row "daemon CPU, feeder small packets" "<= 0.45 us/pkt" "%s us/pkt at 1 shard, %s at 2" feeder_cpu_1 feeder_cpu_2
    row "... per thread, 1 shard (us/pkt)" "" "%s" feeder_threads_1
    row "... per thread, 2 shards (us/pkt)" "" "%s" feeder_threads_2
    row "feeders' own CPU (summed), small packets" "a small fraction of the daemon's" "%s us/pkt at 1 shard, %s at 2" feeder_fcpu_1 feeder_fcpu_2
    row "daemon peak RSS (VmHWM), feeder 1 / 2 shards" "<= 192 MiB" "%s / %s MiB" feeder_rss_1 feeder_rss_2
}
