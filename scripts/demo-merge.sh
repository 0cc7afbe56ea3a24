#!/usr/bin/env bash
# The merge demo: a Perfetto trace (tests/examples/gen_trace.rs) and a Chrome
# JSON trace (tests/examples/gen_chrome_json.rs) made by the project's
# generators, merged with a manifest into one file to open in Perfetto UI.
# README.md ("Merge demo") names the tracks it holds.
#
#   scripts/demo-merge.sh [DIR]        (DIR: demo-merge)
#
# B: the directory of built binaries (when not given: target/release, built
# first). MB: the size of each input in MiB (8).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-demo-merge}
mb=${MB:-8}
if [ -z "${B:-}" ]; then
  B=target/release
  cargo build --release -p tracesync-cli --bin tracesync
  cargo build --release -p tracesync-tests --example gen_trace --example gen_chrome_json
fi
mkdir -p "$dir"
"$B/examples/gen_trace" --out "$dir" --machines 1 --megabytes "$mb"
"$B/examples/gen_chrome_json" --out "$dir/app.json" --megabytes "$mb"

# The JSON trace has no clock of its own; its first event is at 1 s of its
# timeline. The manifest pins that second to the proto trace's first
# BOOTTIME clock snapshot, so the two overlap on one timeline.
boot0=$("$B/tracesync" clocks "$dir/machine-0.pftrace" |
  awk -F'\t' '$6 == "BOOTTIME" { print $8; exit }')
if [ -z "$boot0" ]; then
  echo "demo-merge: no BOOTTIME snapshot in $dir/machine-0.pftrace" >&2
  exit 1
fi
offset=$((boot0 - 1000000000))
cat > "$dir/manifest.json" <<JSON
{"perfetto_manifest": {"version": 1, "files": [
  {"path": "machine-0.pftrace"},
  {"path": "app.json", "clocks": {"offset_ns": $offset,
   "sync_to": {"file": "machine-0.pftrace", "clock": "BOOTTIME"}}}]}}
JSON
"$B/tracesync" merge -o "$dir/merged.pftrace" --stats "$dir/stats.json" \
  "$dir/manifest.json" "$dir/machine-0.pftrace" "$dir/app.json"
echo "demo-merge: open $dir/merged.pftrace in https://ui.perfetto.dev"
