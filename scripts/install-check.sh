#!/usr/bin/env bash
# The documented install, run verbatim on a fresh Debian 12 under a real
# systemd: the package tree (scripts/package.sh) is installed into a Debian
# root made by debootstrap, booted under qemu (software emulation) with
# systemd as PID 1, and the install steps of docs/operations.md are run
# there exactly as written (the shell blocks marked `install-check: host`
# and `install-check: relay on the host`). Then, in the guest:
#
#   - both units active (tracesyncd, and a relay on the same machine with a
#     synthetic source), the daemon's watchdog armed and no restart after
#     more than one WatchdogSec, `tracesync status` answered for an operator
#     in group tracesync (not root);
#   - `systemctl restart tracesyncd` while the relay streams, then a reboot;
#     after it both units come back by themselves;
#
# and on this host, from the guest's disk: every synthetic packet the relay
# made, in the capture exactly once (tracesync-capture-check), and every
# rolled file opened by the trace processor if it is installed
# (scripts/setup-test-deps.sh). Its last line:
#
#   install-check: units active A/2; packets N lost L dup D across restart and reboot
#
# Exit 0 when A is 2, N > 0 and L and D are 0; 1 when a check fails; 69
# when a tool is missing and cannot be installed; 70 when the guest does
# not finish; 77 when not root.
#
# Needs root (debootstrap, apt-get), and the network to Debian's mirror the
# first time: the Debian root is cached in .cache/install-check/ (about
# 800 MB; delete it to start over). A first run takes ~25 min on two
# cores (the release build, debootstrap, two emulated boots); later runs
# ~10.
#
#   sudo scripts/install-check.sh [--no-build]
#     --no-build   use the package scripts/package.sh built before
# INSTALL_CHECK_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "install-check: $*" >&2; }
die() { say "$2"; exit "$1"; }

BUILD=1
while (( $# )); do
  case "$1" in
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) die 64 "unknown argument $1 (usage: scripts/install-check.sh [--no-build])" ;;
  esac
done
[[ $(id -u) == 0 ]] || die 77 "needs root (debootstrap, a disk image of a root file system); run it with sudo"

MIRROR=${INSTALL_CHECK_MIRROR:-http://deb.debian.org/debian}
CACHE=.cache/install-check
TARGET_DIR=${CARGO_TARGET_DIR:-target}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TREE_NAME=tracesync-$VERSION-x86_64-linux
TARBALL=$TARGET_DIR/package/$TREE_NAME.tar.gz

# --- tools -------------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if (( ${#need[@]} )); then
  say "installing ${need[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${need[@]}"; } >&2 \
    || die 69 "could not install ${need[*]}"
fi

# --- the package and the host-side checker -------------------------------------
if (( BUILD )); then
  say "building the package (scripts/package.sh)"
  bash scripts/package.sh >&2 || die 70 "scripts/package.sh failed"
fi
[[ -r $TARBALL ]] || die 66 "$TARBALL is missing: run scripts/package.sh (or drop --no-build)"
cargo build --quiet -p tracesync-tests --bin tracesync-capture-check
CHECKER=$TARGET_DIR/debug/tracesync-capture-check

# --- the Debian root (cached) ---------------------------------------------------
if [[ ! -x $CACHE/root/usr/bin/sudo ]]; then
  say "debootstrap of Debian 12 into $CACHE/root (once; ~6 min)"
  rm -rf "$CACHE/root"
  mkdir -p "$CACHE"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,udev,linux-image-amd64,sudo,passwd,iproute2,procps \
    bookworm "$CACHE/root" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -5 "$CACHE/debootstrap.log" >&2; rm -rf "$CACHE/root"; die 69 "debootstrap failed ($CACHE/debootstrap.log)"; }
fi
KERNEL=$(ls "$CACHE"/root/boot/vmlinuz-* | sort -V | tail -1)
INITRD=$(ls "$CACHE"/root/boot/initrd.img-* | sort -V | tail -1)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/install-check.XXXXXX")
QEMU_PID=
cleanup() {
  [[ -n $QEMU_PID ]] && kill "$QEMU_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the steps, verbatim from the docs --------------------------------------------
# The first ```sh block after the marker line.
doc_block() { # $1: marker
  awk -v m="<!-- install-check: $1 -->" '
    index($0, m) { found = 1; next }
    found && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' docs/operations.md
}
doc_block host > "$WORK/host-steps.sh"
doc_block "relay on the host" > "$WORK/relay-steps.sh"
[[ -s $WORK/host-steps.sh && -s $WORK/relay-steps.sh ]] \
  || die 70 "docs/operations.md lacks the install-check: host / relay on the host blocks"

# --- the guest's disk -------------------------------------------------------------
say "making the guest's disk"
ROOT=$WORK/root
cp -a "$CACHE/root" "$ROOT"
echo "install-check" > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 install-check\n' > "$ROOT/etc/hosts"
echo "/dev/vda / ext4 defaults 0 1" > "$ROOT/etc/fstab"
install -d -m 0700 "$ROOT/root/install-check"
cp "$TARBALL" "$ROOT/root/install-check/"
cp "$WORK/host-steps.sh" "$WORK/relay-steps.sh" "$ROOT/root/install-check/"
cat > "$ROOT/root/install-check/guest.sh" <<'EOF'
#!/bin/bash
# Runs at every boot of the guest (install-check.service); the stage file
# says which boot this is. Everything goes to the console.
set -u
cd /root/install-check
log() { echo "guest: $*"; }
systemctl is-system-running --wait >/dev/null 2>&1
stage=$(cat stage 2>/dev/null || echo 1)
log "boot $stage up after $(cut -d' ' -f1 /proc/uptime) s"
if [ "$stage" = 1 ]; then
  log "the documented host steps:"
  bash -ex host-steps.sh 2>&1 | sed 's/^/guest:   /'
  log "host steps exit ${PIPESTATUS[0]}"
  # What a user configures: the relay's source (a synthetic one here).
  sed -i 's|^# sources = .*|sources = ["synthetic:200"]|' /etc/tracesync/relay.toml
  log "the documented steps for a relay on the host:"
  bash -ex relay-steps.sh 2>&1 | sed 's/^/guest:   /'
  log "relay steps exit ${PIPESTATUS[0]}"
  useradd -m -G tracesync alice   # "operator" is a Debian group already
  sleep 15
  log "systemctl restart tracesyncd"
  systemctl restart tracesyncd
  log "tracesyncd after restart: $(systemctl is-active tracesyncd)"
  sleep 10
  echo 2 > stage
  log "reboot"
  systemctl reboot
  exit 0
fi
# Boot 2: the units came back by themselves; let the watchdog run past one
# WatchdogSec (30 s) before looking.
sleep 40
active=0
for u in tracesyncd tracesync-relay; do
  state=$(systemctl is-active "$u")
  log "$u: $state; $(systemctl show "$u" -p NRestarts -p WatchdogUSec -p WatchdogTimestampMonotonic | tr '\n' ' ')"
  [ "$state" = active ] && active=$((active + 1))
done
log "units active $active/2"
log "tracesync status as user alice (group tracesync):"
runuser -u alice -- tracesync status 2>&1 | sed 's/^/guest:   /'
log "status exit ${PIPESTATUS[0]}"
log "the journal's warnings and errors:"
journalctl -b -u tracesyncd -u tracesync-relay -p warning --no-pager 2>&1 | tail -20 | sed 's/^/guest:   /'
systemctl stop tracesync-relay
systemctl stop tracesyncd
log "ls -l /etc/tracesync /etc/tracesync/tls /var/lib/tracesync:"
ls -l /etc/tracesync /etc/tracesync/tls /var/lib/tracesync 2>&1 | sed 's/^/guest:   /'
log "done"
systemctl poweroff
EOF
chmod 0755 "$ROOT/root/install-check/guest.sh"
cat > "$ROOT/etc/systemd/system/install-check.service" <<'EOF'
[Unit]
Description=scripts/install-check.sh's steps and checks
[Service]
Type=exec
ExecStart=/root/install-check/guest.sh
StandardOutput=journal+console
StandardError=journal+console
[Install]
WantedBy=multi-user.target
EOF
ln -s /etc/systemd/system/install-check.service \
  "$ROOT/etc/systemd/system/multi-user.target.wants/install-check.service"
truncate -s 3G "$WORK/disk.img"
mkfs.ext4 -q -F -d "$ROOT" "$WORK/disk.img" || die 70 "mkfs.ext4 -d failed"
rm -rf "$ROOT"

# --- two boots ----------------------------------------------------------------------
say "booting the guest (two boots under emulation; ~5 min)"
timeout 1200 qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1024 \
  -nodefaults -display none -nic none \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "root=/dev/vda rw console=ttyS0 quiet systemd.show_status=0 panic=-1" \
  -drive "file=$WORK/disk.img,format=raw,if=virtio" \
  -serial "file:$WORK/console.log" > "$WORK/qemu.log" 2>&1 &
QEMU_PID=$!
rc=0
wait "$QEMU_PID" || rc=$?
QEMU_PID=
grep "guest:" "$WORK/console.log" >&2 || true
if (( rc != 0 )) || ! grep -q "guest: done" "$WORK/console.log"; then
  tail -30 "$WORK/console.log" >&2
  die 70 "the guest did not finish (qemu exit $rc; 124: not within 1200 s)"
fi
active=$(sed -n 's/.*guest: units active \([0-9]\)\/2.*/\1/p' "$WORK/console.log" | tail -1)
status_rc=$(sed -n 's/.*guest: status exit \([0-9]*\).*/\1/p' "$WORK/console.log" | tail -1)

# --- the capture, from the guest's disk -----------------------------------------------
mkdir -p "$WORK/capture"
debugfs -R "rdump /var/lib/tracesync $WORK/capture" "$WORK/disk.img" >/dev/null 2>&1 \
  || die 70 "cannot copy /var/lib/tracesync out of the guest's disk"
rc=0
check=$("$CHECKER" "$WORK/capture/tracesync" 2>&1) || rc=$?
echo "$check" | sed 's/^/install-check: capture: /' >&2
line=$(echo "$check" | tail -1)
read -r _ packets _ lost _ dup _ <<<"$line"
ok=1
[[ $active == 2 ]] || { say "units active ${active:-?}/2"; ok=0; }
[[ $status_rc == 0 ]] || { say "tracesync status as the operator exited ${status_rc:-?}"; ok=0; }
(( rc == 0 )) || ok=0
if [[ -f .cache/trace_processor/trace_processor.wasm ]] && command -v node >/dev/null; then
  for f in "$WORK"/capture/tracesync/*.pftrace; do
    node tests/tp/query.mjs "$f" "select count(*) from slice" >/dev/null 2>&1 \
      || { say "the trace processor cannot open $(basename "$f")"; ok=0; }
  done
fi
echo "install-check: units active ${active:-0}/2; packets ${packets:-0} lost ${lost:-?} dup ${dup:-?} across restart and reboot"
(( ok )) && exit 0 || exit 1
