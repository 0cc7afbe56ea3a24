#!/usr/bin/env bash
# Installs what the arm64 (aarch64) relay is built and checked with, on
# Debian 12: Debian's own Rust 1.96 (rustc-web, cargo-web) with its arm64
# standard library (multiarch), the aarch64 cross linker and C library, and
# qemu to run arm64 programs (qemu-user-static) and a whole arm64 machine
# (qemu-system-arm, Debian's arm64 kernel). The arm64 machine's static
# busybox is not installed: busybox-static:arm64 would replace the host's
# busybox; scripts/vm-relay.sh --arch aarch64 unpacks it from its package
# into .cache/vm-relay/ instead.
#
# The rustup toolchain stays the compiler of every host build: nothing here
# touches ~/.cargo or rustup; the cross build calls Debian's /usr/bin/cargo
# with RUSTC=/usr/bin/rustc (scripts/package.sh --target aarch64). Note:
# qemu-user-static replaces a newer qemu-utils from backports, if any.
#
#   sudo scripts/setup-arm64.sh          # idempotent; prints what it has
#   sudo scripts/setup-arm64.sh --no-vm  # only what builds and tests the relay
#                                        # (no qemu-system-arm, no arm64 kernel)
#
# Exit 0 when everything is there; 77 when not root and something is
# missing; 69 when a package cannot be installed; 64 bad usage.
set -euo pipefail

say() { echo "setup-arm64: $*" >&2; }

packages=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
  libc6-dev-arm64-cross qemu-user-static)
vm=1
case "${1:-}" in
  "") ;;
  --no-vm) vm=0 ;;
  *) say "unknown argument $1 (usage: scripts/setup-arm64.sh [--no-vm])"; exit 64 ;;
esac
# The arm64 machine of scripts/vm-relay.sh --arch aarch64.
(( vm )) && packages+=(qemu-system-arm linux-image-arm64:arm64 cpio)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  [[ $(id -u) == 0 ]] || { say "missing ${missing[*]}; run it as root (sudo)"; exit 77; }
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    say "adding the arm64 architecture (multiarch)"
    dpkg --add-architecture arm64
  fi
  say "installing ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2 \
    || { say "could not install ${missing[*]}"; exit 69; }
fi
# Debian's compiler is /usr/bin/rustc and /usr/bin/cargo (rustup's come
# first in PATH and stay the host compiler).
say "$(/usr/bin/rustc --version) / $(/usr/bin/cargo --version)"
say "$(aarch64-linux-gnu-gcc --version | head -1)"
say "$(qemu-aarch64-static --version | head -1)"
if (( vm )); then
  say "$(qemu-system-aarch64 --version | head -1)"
  say "arm64 kernel: $(ls /boot/vmlinuz-*arm64 2>/dev/null | sort -V | tail -1)"
fi
