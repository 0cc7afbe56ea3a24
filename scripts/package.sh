#!/usr/bin/env bash
# Builds an install tree (and a tarball of it):
#
#   usr/bin/tracesyncd, usr/bin/tracesync          release builds for this host
#   usr/bin/tracesync-relay                         statically linked (glibc, crt-static)
#   etc/tracesync/daemon.toml, etc/tracesync/relay.toml
#   usr/lib/systemd/system/tracesyncd.service, tracesync-relay.service
#   usr/lib/sysusers.d/tracesync.conf
#   usr/lib/systemd/system-preset/50-tracesync.preset
#   usr/share/doc/tracesync/operations.md
#
# and prints the static relay's size and how it is linked.
#
# Usage: scripts/package.sh [--out DIR] [--no-build]
#   --out DIR     install tree (default: $CARGO_TARGET_DIR/package/tracesync-VERSION-x86_64-linux,
#                 CARGO_TARGET_DIR defaulting to target)
#   --no-build    package binaries already built by an earlier run
#
# Install on a host:  sudo cp -a TREE/. /  &&  sudo systemd-sysusers \
#   && sudo systemctl daemon-reload && sudo systemctl preset tracesyncd.service \
#   && sudo systemctl start tracesyncd
#
# Cross builds (aarch64 phones and VMs) need targets this script does not
# install; see docs/operations.md "Installing".
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT="$TARGET_DIR/package/tracesync-$VERSION-x86_64-linux"
BUILD=1
while (( $# )); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done

if (( BUILD )); then
  # Host binaries: ordinary (dynamically linked) release builds.
  cargo build --release -p tracesync-daemon -p tracesync-cli --bins
  # The relay for phones and VMs: glibc linked statically, so one binary runs
  # on any x86_64 Linux. An explicit --target keeps these RUSTFLAGS away
  # from build scripts and proc macros (they must stay dynamic).
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --target "$TARGET" -p tracesync-relay
fi

RELAY="$TARGET_DIR/$TARGET/release/tracesync-relay"
HOST_BIN="$TARGET_DIR/release"
for f in "$HOST_BIN/tracesyncd" "$HOST_BIN/tracesync" "$RELAY"; do
  [[ -x $f ]] || { echo "package.sh: $f is not built (drop --no-build)" >&2; exit 66; }
done

rm -rf "$OUT"
install -d "$OUT/usr/bin" "$OUT/etc/tracesync" "$OUT/usr/lib/systemd/system" \
  "$OUT/usr/lib/sysusers.d" "$OUT/usr/lib/systemd/system-preset" "$OUT/usr/share/doc/tracesync"
install -m 0755 "$HOST_BIN/tracesyncd" "$HOST_BIN/tracesync" "$OUT/usr/bin/"
# Stripped: the release profile keeps line tables (for backtraces), which
# weigh more than the code on a phone.
install -m 0755 -s "$RELAY" "$OUT/usr/bin/tracesync-relay"
# The configs are readable by the service user only (they may hold a token).
install -m 0640 configs/daemon.toml configs/relay.toml "$OUT/etc/tracesync/"
install -m 0644 systemd/tracesyncd.service systemd/tracesync-relay.service \
  "$OUT/usr/lib/systemd/system/"
install -m 0644 systemd/tracesync.sysusers "$OUT/usr/lib/sysusers.d/tracesync.conf"
install -m 0644 systemd/50-tracesync.preset "$OUT/usr/lib/systemd/system-preset/"
install -m 0644 docs/operations.md README.md "$OUT/usr/share/doc/tracesync/"

# The shipped configs must pass the shipped binaries' own check.
"$OUT/usr/bin/tracesyncd" --config "$OUT/etc/tracesync/daemon.toml" --check-config >/dev/null
"$OUT/usr/bin/tracesync-relay" --config "$OUT/etc/tracesync/relay.toml" --check-config >/dev/null

tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"

SHIPPED="$OUT/usr/bin/tracesync-relay"
echo "install tree: $OUT ($OUT.tar.gz)"
echo "static relay: $(stat -c %s "$SHIPPED") bytes stripped ($SHIPPED)," \
  "$(stat -c %s "$RELAY") bytes as built with line tables ($RELAY)"
if command -v file >/dev/null; then
  echo "  file: $(file -b "$SHIPPED")"
fi
echo "  ldd: $(ldd "$SHIPPED" 2>&1 | head -1 | sed 's/^[[:space:]]*//')"
if ldd "$SHIPPED" 2>&1 | grep -q '=>'; then
  echo "package.sh: $SHIPPED is dynamically linked" >&2
  exit 70
fi
