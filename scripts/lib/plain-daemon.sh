# Shared by the ring scripts (scripts/ring-bounds.sh, scripts/ring-wire.sh);
# sourced, not run. Starts one plaintext daemon on loopback in a
# temporary directory that is removed, with every process in `pids`, on
# exit. Sets: root, bin (release binaries if built, else debug), work,
# port (the data port).

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin="$root/target/release"
[ -x "$bin/tracesyncd" ] || bin="$root/target/debug"
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/out"
"$bin/tracesyncd" --listen 127.0.0.1:0 --sync-listen 127.0.0.1:0 --control "$work/c.sock" \
    --output "$work/out" --token t --tls off >"$work/d.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q "data=127.0.0.1:" "$work/d.log" && break; sleep 0.1; done
port=$(grep -o "data=127.0.0.1:[0-9]*" "$work/d.log" | head -1 | cut -d: -f2)
