#!/usr/bin/env bash
# The test command: fetches the test-only trace processor, builds the
# examples the demo tests run, then runs every
# test of the workspace and ends with one summary line over all test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-deps.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# The examples as programs (target/debug/examples/): tests that run the
# demo scripts call the generators by path; `cargo test` builds them only
# as test targets under hashed names.
cargo build -p tracesync-tests --examples
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
