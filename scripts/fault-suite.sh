#!/usr/bin/env bash
# Fault injection suite, long edition: the scenarios of
# tests/tests/fault_suite/main.rs with many more faults, then one summary table.
#
#   scripts/fault-suite.sh [CYCLES] [FILTER]  # default 50 kill -9 cycles
#   scripts/fault-suite.sh 500 mixed_faults_with_a_flood   # 1000 faults, hostile peers present
#   FAULT_SUITE_RELEASE=1 scripts/fault-suite.sh 100
#   TRACESYNC_FAULT_SEED=123 scripts/fault-suite.sh   # replay a seeded run
#
# - random faults: CYCLES kill -9 cycles at random points (the daemon, a
#   relay, or both), and CYCLES/5 each of SIGSTOP of the daemon, SIGSTOP of
#   a relay, a silent partition of a relay's link, a reset of its
#   connections and a relay clock step, with a stuck tail subscriber held
#   all along (3 relays, one in a time namespace when possible);
# - disk full: TRACESYNC_FAULT_DISK_EPISODES episodes (default max(3,
#   CYCLES/10)) of the daemon's output tmpfs filling up and freed again;
# - reconnect storm: TRACESYNC_FAULT_STORMS daemon kills (default 3) with
#   64 relays reconnecting at once;
# - hostile peers present: TRACESYNC_FAULT_HOSTILE_FAULTS mixed faults
#   (default 2 x CYCLES: kill -9, SIGSTOP, partitions, resets, clock steps,
#   disk full) under mutual TLS while a flood (TRACESYNC_FAULT_FLOOD_PER_S,
#   default 1000 connections/s), a squatter and a lying relay stay present.
# FILTER runs only the scenarios whose test name contains it.
#
# Every scenario counts synthetic packets produced, written, lost and
# duplicated by identity and fails unless lost = 0 and duplicated = 0;
# every rolled file is loaded in the trace processor. Needs root for the
# disk-full scenario (tmpfs in a private mount namespace); skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

CYCLES=${1:-50}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export TRACESYNC_FAULT_CYCLES=$CYCLES
export TRACESYNC_FAULT_DISK_EPISODES=${TRACESYNC_FAULT_DISK_EPISODES:-$(( CYCLES / 10 > 3 ? CYCLES / 10 : 3 ))}
export TRACESYNC_FAULT_STORMS=${TRACESYNC_FAULT_STORMS:-3}
export TRACESYNC_FAULT_HOSTILE_FAULTS=${TRACESYNC_FAULT_HOSTILE_FAULTS:-$(( 2 * CYCLES ))}
export TRACESYNC_FAULT_FLOOD_PER_S=${TRACESYNC_FAULT_FLOOD_PER_S:-1000}
FILTER=${2:-}
profile=()
if [[ -n ${FAULT_SUITE_RELEASE:-} ]]; then
    profile=(--release)
fi

log=$(mktemp -t fault-suite.XXXXXX.log)
echo "fault-suite: $CYCLES kill cycles, $TRACESYNC_FAULT_DISK_EPISODES disk-full episodes," \
     "$TRACESYNC_FAULT_STORMS storms, $TRACESYNC_FAULT_HOSTILE_FAULTS faults with hostile peers;" \
     "log: $log" >&2
cargo build "${profile[@]}" --workspace --bins >&2
start=$(date +%s)
status=0
cargo test "${profile[@]}" -p tracesync-tests --test fault_suite -- --nocapture --test-threads=1 \
    ${FILTER:+"$FILTER"} >"$log" 2>&1 || status=$?
secs=$(( $(date +%s) - start ))
grep -E '^(fault-suite: |SKIPPED|test |.*: seed )' "$log" >&2 || true

# One row per scenario from the `fault-suite row: {json}` lines.
field() { sed -E "s/.*\"$1\":([^,}]*).*/\\1/; s/\"//g"; }
printf '\n%-60s %6s %8s %8s %10s %10s %6s %6s  %s\n' \
    scenario relays offer/s held/s produced written lost dup faults
declare -A total
while IFS= read -r line; do
    json=${line#*fault-suite row: }
    faults=$(sed -E 's/.*"faults":\{([^}]*)\}.*/\1/; s/"//g; s/:/=/g' <<<"$json")
    printf '%-60s %6s %8s %8s %10s %10s %6s %6s  %s\n' \
        "$(field scenario <<<"$json")" "$(field relays <<<"$json")" \
        "$(field offered_per_s <<<"$json")" "$(field held_per_s <<<"$json")" \
        "$(field produced <<<"$json")" "$(field written <<<"$json")" \
        "$(field lost <<<"$json")" "$(field duplicated <<<"$json")" "$faults"
    IFS=, read -ra kinds <<<"$faults"
    for kv in "${kinds[@]}"; do
        [[ -n $kv ]] || continue
        total[${kv%%=*}]=$(( ${total[${kv%%=*}]:-0} + ${kv#*=} ))
        total[ALL]=$(( ${total[ALL]:-0} + ${kv#*=} ))
    done
    for k in produced written lost duplicated; do
        total[$k]=$(( ${total[$k]:-0} + $(field $k <<<"$json") ))
    done
done < <(grep -a 'fault-suite row: ' "$log")
echo
echo "faults by kind:"
for k in "${!total[@]}"; do
    case $k in produced|written|lost|duplicated|ALL) continue ;; esac
    printf '  %-24s %6s\n' "$k" "${total[$k]}"
done | sort
printf '  %-24s %6s\n' "total" "${total[ALL]:-0}"
printf 'packets: produced %s, written %s, lost %s, duplicated %s (%s s)\n' \
    "${total[produced]:-0}" "${total[written]:-0}" "${total[lost]:-0}" "${total[duplicated]:-0}" "$secs"
if (( status != 0 )); then
    echo "fault-suite: FAILED (cargo test exit $status); see $log" >&2
fi
exit "$status"
