#!/usr/bin/env bash
# Long fuzz run: every fuzz target (tests/tests/fuzz_*.rs) for SECONDS each
# (default 300), one after the other, with a random seed unless FUZZ_SEED is
# set; ends with a table of cases per target. CI runs the same targets with
# a fixed seed and a fixed number of cases (scripts/test.sh).
#
#   scripts/fuzz.sh [SECONDS]
#
# Environment: FUZZ_SEED (u64; default random), FUZZ_CASES (cases per round;
# default each target's own), FUZZ_PROFILE=release for more cases per second
# (debug, the default, also checks integer overflow).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
seed=${FUZZ_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
profile=()
if [[ ${FUZZ_PROFILE:-debug} == release ]]; then
    profile=(--release)
fi
targets=(
    "fuzz_protocol trace_reader"
    "fuzz_protocol packet_scanner_and_stamp"
    "fuzz_protocol probe_datagrams"
    "fuzz_inputs manifest"
    "fuzz_inputs daemon_config"
    "fuzz_inputs relay_config"
    "fuzz_session relay_frames_session"
)
export CARGO_INCREMENTAL=0
cargo build -p tracesync-tests --tests "${profile[@]}" --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, seed ${seed}"
for t in "${targets[@]}"; do
    read -r bin name <<<"$t"
    FUZZ_SECONDS=$seconds FUZZ_SEED=$seed \
        cargo test -p tracesync-tests --test "$bin" "${profile[@]}" --quiet -- \
        --exact "$name" --test-threads=1 2>&1 | tee -a "$log" | grep -E '^fuzz-figures|panicked|reproduce' || true
    if ! grep -q "^fuzz-figures: target=$name " "$log"; then
        echo "fuzz: $name FAILED (see the reproduce line above)"
        status=1
    fi
done
echo
printf '%-28s %12s %8s %10s\n' target cases rounds seconds
sed -n 's/^fuzz-figures: target=\([^ ]*\) cases=\([0-9]*\) rounds=\([0-9]*\) seed=[0-9]* seconds=\([0-9.]*\).*/\1 \2 \3 \4/p' "$log" |
    awk '{ printf "%-28s %12d %8d %10s\n", $1, $2, $3, $4; total += $2 }
         END { printf "%-28s %12d\n", "total", total }'
exit "$status"
