#!/usr/bin/env bash
# Clock-sync accuracy over real sockets (docs/clock-sync-accuracy.md):
# tracesyncd and three relays in time namespaces with known offsets (+1000 s;
# +5000 s with 50 ppm simulated drift; +3000 s with 20 ppm drift, 5 ppm / 60 s
# sinusoidal wander and a +200 us step at SYNC_REAL_STEP_AT s). Wiring by
# profile: "loopback" runs everything in one network namespace over lo and
# "veth" gives each relay a veth pair straight to the daemon's namespace
# (no proxy in either); every other profile (lan, wifi, asym-static,
# asym-jitter, lan-pareto, proxy-loopback = the proxy without impairment)
# sends all relay <-> daemon traffic (TCP data, UDP probes) through the
# impairment proxy (tracesync-impair) in a namespace of its own; "usb" (a
# phone behind adb reverse) forwards TCP only, so the relays' probes fall
# back to TCP. Prints a
# markdown table: per profile and relay, |merged ts - truth| p50/p99/max
# after a 10 s warm-up, the fraction inside the per-packet bound the daemon
# reported, and the naive last-sample and Perfetto-style constant baselines
# computed from the probe samples of the same run (the .sync.jsonl
# sidecars), plus the share of kernel-stamped t4 (daemon) / t2 (relay).
#
#   sudo scripts/sync-real.sh                      # loopback lan wifi asym-static asym-jitter
#   sudo scripts/sync-real.sh lan wifi             # some profiles
#   sudo scripts/sync-real.sh usb                  # adb's TCP-only link
#   sudo scripts/sync-real.sh --kernel-timestamps both loopback lan
#                                                  # userspace vs kernel receive stamps
#   SYNC_REAL_SECS=60 SYNC_REAL_SEED=2 sudo scripts/sync-real.sh
#   SYNC_REAL_KEEP=1 ...                           # keep logs and output dirs, and
#                                                  # errors-RELAY.tsv and refined-errors-RELAY.tsv
#                                                  # (each event's error over time)
#   SYNC_REAL_SLEW_AT=20 ...                       # a fourth relay whose clock slews
#                                                  # +500 ppm for 2 s at 20 s
#
# Needs root, iproute2 (ip netns) and util-linux unshare with --time. The
# namespaces are created and deleted by the run; traffic stays inside them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "sync-real.sh: needs root (ip netns, unshare --time)" >&2
    exit 77
fi
SECS=${SYNC_REAL_SECS:-40}
SEED=${SYNC_REAL_SEED:-1}
args=(--seconds "$SECS" --seed "$SEED")
# A third relay with wander and a +200 us clock step at this second (0: none).
STEP_AT=${SYNC_REAL_STEP_AT:-25}
args+=(--step-at "$STEP_AT")
# A relay whose clock slews +500 ppm for 2 s (1 ms) at this second, as an
# NTP daemon corrects an offset (0: none, the default).
args+=(--slew-at "${SYNC_REAL_SLEW_AT:-0}")
if [ -n "${SYNC_REAL_KEEP:-}" ]; then
    args+=(--keep)
fi
# A config file for tracesyncd, e.g. "[sync] warmup-ms = 0" to compare a
# setting with the defaults on the same build.
if [ -n "${SYNC_REAL_DAEMON_CONFIG:-}" ]; then
    args+=(--daemon-config "$(realpath "$SYNC_REAL_DAEMON_CONFIG")")
fi

echo "building (release)" >&2
cargo build --release --quiet -p tracesync-daemon -p tracesync-cli -p tracesync-relay --bins
cargo build --release --quiet -p tracesync-tests --bin tracesync-impair --bin tracesync-sync-real
target=${CARGO_TARGET_DIR:-target}
exec "$target/release/tracesync-sync-real" "${args[@]}" "$@"
