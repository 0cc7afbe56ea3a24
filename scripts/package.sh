#!/usr/bin/env bash
# Builds an install tree (and a tarball of it):
#
#   usr/bin/tracesyncd, usr/bin/tracesync          release builds for this host
#   usr/bin/tracesync-relay                         statically linked (glibc, crt-static)
#   etc/tracesync/daemon.toml, etc/tracesync/relay.toml
#   usr/lib/systemd/system/tracesyncd.service, tracesync-relay.service
#   usr/lib/sysusers.d/tracesync.conf, usr/lib/tmpfiles.d/tracesync.conf
#   usr/lib/systemd/system-preset/50-tracesync.preset
#   usr/share/doc/tracesync/operations.md, operations-*.md, README.md
#   usr/share/man/man1/tracesync.1.gz and a page per command (tracesync-merge.1.gz, ...),
#   man8/tracesyncd.8.gz, man8/tracesync-relay.8.gz
#   usr/share/{bash-completion,zsh,fish}/...: completions of tracesync
#
# and prints the static relay's size and how it is linked.
#
# With --target aarch64, the tree of an arm64 machine that only traces (a
# phone, a board, an arm64 VM): the static arm64 relay, etc/tracesync/relay.toml,
# the relay's unit, the sysusers and tmpfiles files, its man page and the docs; no host
# daemon. It is built by Debian's Rust (rustc-web/cargo-web 1.96, its
# arm64 standard library, the aarch64-linux-gnu linker), which
# `sudo scripts/setup-arm64.sh` installs beside rustup's host toolchain;
# the static tracesync-vm-guest of scripts/vm-relay.sh --arch aarch64 is
# built with it (not packaged). The relay also stays at
# $CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/tracesync-relay.
#
# Usage: scripts/package.sh [--target x86_64|aarch64] [--out DIR] [--no-build]
#   --target ARCH  x86_64 (default: this host's tree) or aarch64 (the relay only)
#   --out DIR      install tree (default: $CARGO_TARGET_DIR/package/tracesync-VERSION-ARCH-linux,
#                  CARGO_TARGET_DIR defaulting to target)
#   --no-build     package binaries already built by an earlier run
#   ARM64_CARGO, ARM64_RUSTC  the aarch64 build's compiler (default /usr/bin/cargo,
#                  /usr/bin/rustc: Debian's)
#
# Every file in the tarball is root's (whoever builds it). Install steps:
# docs/operations.md "Installing" (scripts/install-check.sh runs them).
#
# Exit 64 bad usage, 66 a binary not built (--no-build), 69 the aarch64
# toolchain missing (run sudo scripts/setup-arm64.sh), 70 a relay that is
# not static. docs/operations.md "Installing" says more.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCH=x86_64
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=
BUILD=1
while (( $# )); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --target)
      case "${2:-}" in
        x86_64|x86_64-unknown-linux-gnu) ARCH=x86_64 ;;
        aarch64|arm64|aarch64-unknown-linux-gnu) ARCH=aarch64 ;;
        *) echo "package.sh: --target ${2:-} is not x86_64 or aarch64" >&2; exit 64 ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
TARGET=$ARCH-unknown-linux-gnu
OUT=${OUT:-$TARGET_DIR/package/tracesync-$VERSION-$ARCH-linux}
RELAY="$TARGET_DIR/$TARGET/release/tracesync-relay"

# The arm64 build: Debian's compiler (its arm64 standard library is a
# Debian package; rustup's host toolchain is left as it is), the cross
# linker, static glibc. Build scripts and proc macros run on this host and
# stay dynamic (the explicit --target keeps RUSTFLAGS off them).
ARM64_CARGO=${ARM64_CARGO:-/usr/bin/cargo}
ARM64_RUSTC=${ARM64_RUSTC:-/usr/bin/rustc}
arm64_toolchain() {
  local why=
  if [[ ! -x $ARM64_CARGO || ! -x $ARM64_RUSTC ]]; then
    why="no $ARM64_CARGO / $ARM64_RUSTC (Debian's cargo-web, rustc-web)"
  elif [[ ! -d $("$ARM64_RUSTC" --print sysroot)/lib/rustlib/$TARGET/lib ]]; then
    why="$ARM64_RUSTC has no $TARGET standard library (libstd-rust-web-dev:arm64)"
  elif ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    why="no aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)"
  elif ! command -v qemu-aarch64-static >/dev/null; then
    why="no qemu-aarch64-static (qemu-user-static), which runs the relay's --man and --check-config"
  fi
  if [[ -n $why ]]; then
    echo "package.sh: $why; install the arm64 toolchain with: sudo scripts/setup-arm64.sh" >&2
    exit 69
  fi
}
build_arm64() {
  echo "package.sh: building the static $TARGET relay with $("$ARM64_RUSTC" --version)" >&2
  RUSTC=$ARM64_RUSTC CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    "$ARM64_CARGO" build --release --target "$TARGET" -p tracesync-relay -p tracesync-vm-guest \
    --bin tracesync-relay --bin tracesync-vm-guest
}
build_x86_64() {
  # Host binaries: ordinary (dynamically linked) release builds.
  cargo build --release -p tracesync-daemon -p tracesync-cli --bins
  # The relay for phones and VMs: glibc linked statically, so one binary runs
  # on any x86_64 Linux. An explicit --target keeps these RUSTFLAGS away
  # from build scripts and proc macros (they must stay dynamic).
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --target "$TARGET" -p tracesync-relay
}

if [[ $ARCH == aarch64 ]]; then
  arm64_toolchain
  (( BUILD )) && build_arm64
  # The relay's own man page and config check, run under user-mode qemu.
  run_relay() { qemu-aarch64-static "$OUT/usr/bin/tracesync-relay" "$@"; }
  STRIP=aarch64-linux-gnu-strip
  BINS=("$RELAY")
else
  (( BUILD )) && build_x86_64
  run_relay() { "$OUT/usr/bin/tracesync-relay" "$@"; }
  STRIP=strip
  HOST_BIN="$TARGET_DIR/release"
  BINS=("$HOST_BIN/tracesyncd" "$HOST_BIN/tracesync" "$RELAY")
fi
for f in "${BINS[@]}"; do
  [[ -x $f ]] || { echo "package.sh: $f is not built (drop --no-build)" >&2; exit 66; }
done

rm -rf "$OUT"
install -d "$OUT/usr/bin" "$OUT/etc/tracesync" "$OUT/usr/lib/systemd/system" \
  "$OUT/usr/lib/sysusers.d" "$OUT/usr/share/doc/tracesync" "$OUT/usr/share/man/man8"
# Stripped: the release profile keeps line tables (for backtraces), which
# weigh more than the code on a phone.
install -m 0755 -s --strip-program="$STRIP" "$RELAY" "$OUT/usr/bin/tracesync-relay"
# The configs are readable by the service user only (they may hold a token).
install -m 0640 configs/relay.toml "$OUT/etc/tracesync/"
install -m 0644 systemd/tracesync-relay.service "$OUT/usr/lib/systemd/system/"
install -m 0644 systemd/tracesync.sysusers "$OUT/usr/lib/sysusers.d/tracesync.conf"
install -D -m 0644 systemd/tracesync.tmpfiles "$OUT/usr/lib/tmpfiles.d/tracesync.conf"
install -m 0644 docs/operations.md docs/operations-*.md README.md "$OUT/usr/share/doc/tracesync/"
# Man pages and shell completions, generated by the binaries themselves
# (clap_mangen, clap_complete), so they always match --help.
run_relay --man | gzip -9n > "$OUT/usr/share/man/man8/tracesync-relay.8.gz"
# The shipped configs must pass the shipped binaries' own check. Their TLS
# files (/etc/tracesync/tls) belong to the machine installed on, not this
# one: the check runs with --tls off, which leaves out only those files.
run_relay --config "$OUT/etc/tracesync/relay.toml" --check-config --tls off >/dev/null

if [[ $ARCH == x86_64 ]]; then
  install -d "$OUT/usr/lib/systemd/system-preset" "$OUT/usr/share/man/man1" \
    "$OUT/usr/share/bash-completion/completions" "$OUT/usr/share/zsh/vendor-completions" \
    "$OUT/usr/share/fish/vendor_completions.d"
  install -m 0755 "$HOST_BIN/tracesyncd" "$HOST_BIN/tracesync" "$OUT/usr/bin/"
  install -m 0640 configs/daemon.toml "$OUT/etc/tracesync/"
  install -m 0644 systemd/tracesyncd.service "$OUT/usr/lib/systemd/system/"
  install -m 0644 systemd/50-tracesync.preset "$OUT/usr/lib/systemd/system-preset/"
  # tracesync(1) and the tracesync-COMMAND(1) pages it refers to.
  "$OUT/usr/bin/tracesync" man --dir "$OUT/usr/share/man/man1"
  gzip -9n "$OUT"/usr/share/man/man1/*.1
  "$OUT/usr/bin/tracesyncd" --man | gzip -9n > "$OUT/usr/share/man/man8/tracesyncd.8.gz"
  "$OUT/usr/bin/tracesync" completions bash > "$OUT/usr/share/bash-completion/completions/tracesync"
  "$OUT/usr/bin/tracesync" completions zsh > "$OUT/usr/share/zsh/vendor-completions/_tracesync"
  "$OUT/usr/bin/tracesync" completions fish > "$OUT/usr/share/fish/vendor_completions.d/tracesync.fish"
  "$OUT/usr/bin/tracesyncd" --config "$OUT/etc/tracesync/daemon.toml" --check-config --tls off >/dev/null
fi

tar -C "$(dirname "$OUT")" --owner=0 --group=0 --numeric-owner \
  -czf "$OUT.tar.gz" "$(basename "$OUT")"

SHIPPED="$OUT/usr/bin/tracesync-relay"
echo "install tree: $OUT ($OUT.tar.gz)"
echo "static relay: $(stat -c %s "$SHIPPED") bytes stripped ($SHIPPED)," \
  "$(stat -c %s "$RELAY") bytes as built with line tables ($RELAY)"
if command -v file >/dev/null; then
  echo "  file: $(file -b "$SHIPPED")"
fi
# A dynamic executable names its loader (an INTERP header); ldd can only
# answer for this host's architecture.
if [[ $ARCH == x86_64 ]]; then
  echo "  ldd: $(ldd "$SHIPPED" 2>&1 | head -1 | sed 's/^[[:space:]]*//')"
  ldd "$SHIPPED" 2>&1 | grep -q '=>' && dynamic=1 || dynamic=0
else
  readelf -lW "$SHIPPED" | grep -q 'INTERP' && dynamic=1 || dynamic=0
fi
if (( dynamic )); then
  echo "package.sh: $SHIPPED is dynamically linked" >&2
  exit 70
fi
