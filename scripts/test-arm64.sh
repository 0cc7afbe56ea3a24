#!/usr/bin/env bash
# The protocol crate's and the relay's tests on arm64: cross-built for
# aarch64-unknown-linux-gnu by Debian's Rust (rustc-web/cargo-web 1.96, as
# scripts/package.sh --target aarch64 builds the relay) and run by
# qemu-aarch64-static as cargo's target runner, so an endianness,
# alignment or atomics mistake on arm64 fails a test. Statically linked
# (crt-static), so no arm64 C library or loader is needed to run them.
#
#   scripts/test-arm64.sh             # tracesync-protocol and tracesync-relay
#   scripts/test-arm64.sh --short     # tracesync-protocol only (12.5 min from cold)
#
# Ends with one line over all test binaries: "arm64: N passed, M failed".
# Exit 0 when nothing failed; 69 when the arm64 toolchain is missing
# (sudo scripts/setup-arm64.sh); cargo's status otherwise.
#
# What emulation changes, each for its reason:
#   - kernel receive timestamps are off (TRACESYNC_KERNEL_RX_TIMESTAMPS=off):
#     qemu-user 7.2 refuses SO_TIMESTAMPNS (ENOPROTOOPT), so the probe
#     sockets stamp in userspace either way, and the probe test's count of
#     kernel stamps expects none. An arm64 kernel's own stamps are
#     exercised by scripts/vm-relay.sh --arch aarch64 (its relay logs them);
#   - skipped: the synthetic source's rate test
#     (runs_at_rate_and_resumes_from_its_cursor): it bounds wall-clock
#     time, and emulated debug code makes 100 k packets/s too slowly
#     (20 k packets in 2.1 s against its 2 s);
#   - the relay's tests that start the relay binary itself
#     (tests/relay_binary.rs) run only when the kernel runs arm64
#     executables through binfmt_misc (qemu-user emulates one process, so an
#     arm64 test process cannot exec an arm64 program otherwise; Debian's
#     qemu-user-static registers itself where systemd-binfmt runs), and
#     then one at a time: the SIGHUP test gives the relay 500 ms to start,
#     which an emulated relay beside another misses.
# ARM64_CARGO, ARM64_RUSTC (and ARM64_RUSTDOC, beside it): as in
# scripts/package.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
ARM64_CARGO=${ARM64_CARGO:-/usr/bin/cargo}
ARM64_RUSTC=${ARM64_RUSTC:-/usr/bin/rustc}
# The doc tests need the same compiler's rustdoc (rustup's has no arm64 std).
ARM64_RUSTDOC=${ARM64_RUSTDOC:-$(dirname "$ARM64_RUSTC")/rustdoc}
crates=(tracesync-protocol tracesync-relay)
while (( $# )); do
  case "$1" in
    --short) crates=(tracesync-protocol); shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "test-arm64.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done

missing=
[[ -x $ARM64_CARGO && -x $ARM64_RUSTC && -x $ARM64_RUSTDOC ]] \
  || missing="$ARM64_CARGO / $ARM64_RUSTC / $ARM64_RUSTDOC"
[[ -n $missing || -d $("$ARM64_RUSTC" --print sysroot)/lib/rustlib/$TARGET/lib ]] \
  || missing="the $TARGET standard library"
command -v aarch64-linux-gnu-gcc >/dev/null || missing="aarch64-linux-gnu-gcc"
command -v qemu-aarch64-static >/dev/null || missing="qemu-aarch64-static"
if [[ -n $missing ]]; then
  echo "test-arm64.sh: no $missing; install the arm64 toolchain with: sudo scripts/setup-arm64.sh" >&2
  exit 69
fi

skip=(--skip runs_at_rate_and_resumes_from_its_cursor)
# The relay's test targets but its binary tests, which run on their own.
relay_targets=(--lib --bins)
for t in relay/tests/*.rs; do
  t=$(basename "$t" .rs)
  [[ $t == relay_binary ]] || relay_targets+=(--test "$t")
done
binary_tests=0
if [[ " ${crates[*]} " == *" tracesync-relay "* ]]; then
  if grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    binary_tests=1
  else
    echo "test-arm64.sh: skipping the relay's binary tests (tests/relay_binary.rs): no binfmt_misc" \
      "entry for arm64 executables, so the arm64 test process cannot start the arm64 relay" >&2
  fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export RUSTC=$ARM64_RUSTC RUSTDOC=$ARM64_RUSTDOC TRACESYNC_KERNEL_RX_TIMESTAMPS=off \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64-static \
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static"
status=0
SECONDS=0
arm64_test() { # cargo test arguments, then the test binaries' own after --
  "$ARM64_CARGO" test --target "$TARGET" --no-fail-fast "$@" 2>&1 | tee -a "$log" \
    || status=$?
}
arm64_test -p tracesync-protocol -- "${skip[@]}"
if [[ " ${crates[*]} " == *" tracesync-relay "* ]]; then
  arm64_test -p tracesync-relay "${relay_targets[@]}" -- "${skip[@]}"
  arm64_test -p tracesync-relay --doc
fi
if (( binary_tests )); then
  arm64_test -p tracesync-relay --test relay_binary -- --test-threads=1
fi
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "arm64: %d passed, %d failed", p, f }' "$log"
echo " (${SECONDS} s)"
exit "$status"
