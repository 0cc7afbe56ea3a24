#!/usr/bin/env bash
# Bytes on the data connection between triggers, ring mode beside stream
# mode (docs/operations.md, "The flight recorder"): tracesyncd and two
# relays on loopback, plaintext, each with a synthetic source at RATE
# packets/s (default 10000), one `--mode stream`, one `--mode ring`; after a
# warm-up, the TCP bytes each relay's data connection sent over SECONDS
# (default 10), read with `ss -tin` (bytes_acked). The probe datagrams (UDP,
# the same in both modes) are not in it: the script prints the probe rate.
#
#   scripts/ring-wire.sh [RATE] [SECONDS]
set -euo pipefail
rate=${1:-10000}
seconds=${2:-10}
# shellcheck source=scripts/lib/plain-daemon.sh
source "$(dirname "$0")/lib/plain-daemon.sh"
for mode in stream ring; do
    "$bin/tracesync-relay" --host "127.0.0.1:$port" --name "wire-$mode" --token t --tls off \
        --spool "$work/spool-$mode" --source "synthetic:$rate" --mode "$mode" \
        >"$work/$mode.log" 2>&1 &
    pids+=($!)
done
sleep 3
acked() {
    # The relays' data connections, in the order of their local ports.
    ss -tinH "dport = :$port" | grep -o "bytes_acked:[0-9]*" | cut -d: -f2
}
before=$(acked | paste -sd' ')
sleep "$seconds"
after=$(acked | paste -sd' ')
"$bin/tracesync" status --connect "$work/c.sock" --json >"$work/status.json"
python3 - "$before" "$after" "$seconds" "$work/status.json" <<'PY'
import json, sys
before, after = [list(map(int, a.split())) for a in sys.argv[1:3]]
seconds = int(sys.argv[3])
status = json.load(open(sys.argv[4]))
sent = sorted(a - b for a, b in zip(after, before))
ring, stream = sent[0], sent[-1]
print(f"data connection over {seconds} s: stream {stream} B ({stream / seconds:.0f} B/s), "
      f"ring {ring} B ({ring / seconds:.0f} B/s): ring/stream = {100 * ring / stream:.3f}%")
for m in status["machines"]:
    if m.get("mode"):
        rate = (m.get("sync") or {}).get("probe_rate_hz")
        print(f"{m['name']}: mode {m['mode']}, packets written {m['packets']}, probe rate {rate} Hz")
PY
