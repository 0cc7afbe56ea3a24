#!/usr/bin/env bash
# The merge demo: a Perfetto trace made by the project's generator
# (tests/examples/gen_trace.rs) and a small Chrome JSON trace written below
# (a training step as a profiler writes it), merged with a manifest into one
# file to open in Perfetto UI. README.md ("Merge demo") names its tracks.
#
#   scripts/demo-merge.sh [DIR]        (DIR: demo-merge)
#
# B: the directory of built binaries (when not given: target/release, built
# first). MB: the size of the Perfetto trace in MiB (8).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-demo-merge}
mb=${MB:-8}
if [ -z "${B:-}" ]; then
  B=target/release
  cargo build --release -p tracesync-cli --bin tracesync
  cargo build --release -p tracesync-tests --example gen_trace
fi
mkdir -p "$dir"
"$B/examples/gen_trace" --out "$dir" --machines 1 --megabytes "$mb"

# Times in µs from 1 s of the file's own timeline: nested complete events,
# a begin/end pair, instants, a counter, an async request, a flow from the
# data loader to the step (bind_id) and one back (v1 s/f), names.
cat > "$dir/app.json" <<'JSON'
{"traceEvents": [
{"ph": "M", "pid": 4242, "name": "process_name", "args": {"name": "trainer"}},
{"ph": "M", "pid": 4242, "tid": 4242, "name": "thread_name", "args": {"name": "main"}},
{"ph": "M", "pid": 4242, "tid": 4243, "name": "thread_name", "args": {"name": "dataloader"}},
{"ph": "X", "pid": 4242, "tid": 4243, "ts": 1000000, "dur": 8000, "name": "DataLoader.__next__", "cat": "data", "bind_id": 1, "flow_out": true},
{"ph": "X", "pid": 4242, "tid": 4243, "ts": 1001000, "dur": 5000, "name": "decode", "cat": "data", "args": {"batch": 32}},
{"ph": "X", "pid": 4242, "tid": 4242, "ts": 1010000, "dur": 30000, "name": "step", "cat": "train", "args": {"step": 1}, "bind_id": 1, "flow_in": true},
{"ph": "X", "pid": 4242, "tid": 4242, "ts": 1010000, "dur": 12000, "name": "forward", "cat": "train"},
{"ph": "X", "pid": 4242, "tid": 4242, "ts": 1011000, "dur": 4000, "name": "aten::matmul", "cat": "op", "args": {"Input Dims": [[32, 512], [512, 512]]}},
{"ph": "B", "pid": 4242, "tid": 4242, "ts": 1022000, "name": "backward", "cat": "train"},
{"ph": "i", "pid": 4242, "tid": 4242, "ts": 1025000, "name": "grad ready", "s": "t"},
{"ph": "E", "pid": 4242, "tid": 4242, "ts": 1036000},
{"ph": "X", "pid": 4242, "tid": 4242, "ts": 1036000, "dur": 4000, "name": "optimizer.step", "cat": "train"},
{"ph": "s", "pid": 4242, "tid": 4242, "ts": 1037000, "name": "next batch", "cat": "flow", "id": "0x2"},
{"ph": "f", "pid": 4242, "tid": 4243, "ts": 1040500, "name": "next batch", "cat": "flow", "id": "0x2"},
{"ph": "X", "pid": 4242, "tid": 4243, "ts": 1041000, "dur": 6000, "name": "DataLoader.__next__", "cat": "data"},
{"ph": "C", "pid": 4242, "ts": 1000000, "name": "memory", "args": {"allocated": 512, "reserved": 1024}},
{"ph": "C", "pid": 4242, "ts": 1022000, "name": "memory", "args": {"allocated": 900, "reserved": 1024}},
{"ph": "C", "pid": 4242, "ts": 1040000, "name": "memory", "args": {"allocated": 520, "reserved": 1024}},
{"ph": "b", "pid": 4242, "tid": 4242, "ts": 1005000, "name": "checkpoint upload", "cat": "io", "id": "0x10"},
{"ph": "e", "pid": 4242, "tid": 4242, "ts": 1045000, "name": "checkpoint upload", "cat": "io", "id": "0x10"},
{"ph": "i", "pid": 4242, "tid": 4242, "ts": 1040000, "name": "epoch end", "s": "p"}
]}
JSON

# The JSON trace has no clock of its own; its events start at 1 s of its
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
