#!/usr/bin/env bash
# The flight recorder across a link outage of minutes (docs/operations.md,
# "The flight recorder"): runs tests/tests/ring_link.rs with its outage set
# to MINUTES (default 3). A ring relay in a network namespace of the test's
# own is cut off (its veth down), a trigger fires a second into the outage;
# the snapshot is written first with the relay that stayed, then, after the
# link is back and the relay has shipped its window, again whole. The test
# prints each machine's events, worst |ts - truth| and worst error/bound,
# how long the link was down and how long after it came back the window
# was acknowledged.
#
#   sudo scripts/ring-outage.sh [MINUTES]
#
# Needs root, iproute2 (ip netns) and util-linux unshare with --time; the
# namespace and veth are made and deleted by the test. The ring is sized
# by the test to span the outage (a relay cut off hears of the trigger
# only when the link is back).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "ring-outage.sh: needs root (ip netns, unshare --time)" >&2
    exit 77
fi
minutes=${1:-3}
export CARGO_INCREMENTAL=0
TRACESYNC_RING_OUTAGE_S=$((minutes * 60)) \
    cargo test -p tracesync-tests --test ring_link -- --nocapture --test-threads 1 2>&1 |
    grep -E "^(snapshot:|ring_link:|test |SKIP)|panicked|assertion"
