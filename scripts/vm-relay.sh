#!/usr/bin/env bash
# A relay in a real VM: a qemu guest (software emulation, no KVM) with a
# Debian kernel, its own clocks and a virtual NIC, checked through a channel
# the clock sync does not use. --arch x86_64 (default) boots a PC with an
# e1000 NIC; --arch aarch64 boots an arm64 `virt` machine (Cortex-A57) with
# Debian's arm64 kernel, virtio-net and the static arm64 relay of
# scripts/package.sh --target aarch64: the machine a phone's relay runs on.
#
#   - builds an initramfs: busybox (static, of the guest's architecture), the
#     static relay (as scripts/package.sh builds it), tracesync-vm-guest
#     (static), the NIC driver (and the virtio modules it needs), and an init
#     that runs the relay with a synthetic source and a unix: source fed by
#     tracesync-vm-guest;
#   - creates a network namespace, runs tracesyncd and qemu in it; the guest
#     reaches the daemon only through qemu's user networking (10.0.2.2 is
#     the namespace's loopback), so no traffic leaves the namespace;
#   - wires the guest's second serial line to a unix socket (x86_64: the
#     UART ttyS1; aarch64: a virtio serial port, the board's one UART being
#     the console): the host sends numbered pings there and stamps send and
#     receive in its BOOTTIME, the guest stamps each in its own BOOTTIME as
#     a trace event;
#   - stops the guest (it drains its relay, prints the relay's peak RSS as
#     its kernel counted it, VmHWM, and powers off), then the daemon, merges
#     the capture to jsonl and checks it (tracesync-vm-host check): loss and
#     duplication of the guest's events, every ping event inside
#     [send - err_ns, receive + err_ns], the guest's drift and jitter, and
#     every rolled file through the trace processor (the guest must be a
#     machine of its own, of the architecture asked for).
#
# The last line is
#   vm-relay: arch ARCH; packets N lost L dup D; causality K/K inside; drift X ppm
# Exit 0 when nothing was lost or duplicated and K/K are inside; 1 when the
# check fails; 64 bad usage; 77 when not root; 69 when qemu, the kernel,
# busybox or the arm64 toolchain cannot be had; 70 when the run itself fails
# (boot, daemon, cleanup).
#
#   sudo scripts/vm-relay.sh                      # x86_64, 150 pings, 200 packets/s
#   sudo scripts/vm-relay.sh --arch aarch64       # arm64, 150 pings, 1000 packets/s
#   VM_RELAY_PINGS=300 VM_RELAY_RATE=500 sudo scripts/vm-relay.sh
#   VM_RELAY_KEEP=1 sudo scripts/vm-relay.sh      # keep the work directory
#
# VM_RELAY_PINGS (150), VM_RELAY_PING_MS (100) and VM_RELAY_RATE (the
# synthetic source's packets/s: 200 on x86_64, 1000 on aarch64, so that its
# run carries more than 10 000 packets) change the run; VM_RELAY_BOOT_S (60
# on x86_64, 120 on aarch64) is the longest wait for the guest to be ready.
# VM_RELAY_PROFILE (release) is the cargo profile of the x86_64 guest's
# binaries; the test suite's edition uses `guest` (Cargo.toml: release at
# opt-level 1, about a fifth less CPU to build from nothing).
#
# Needs root (ip netns; apt-get). x86_64 installs qemu-system-x86,
# linux-image-amd64 and cpio when missing; aarch64 runs
# scripts/setup-arm64.sh when its toolchain, qemu-system-arm or the arm64
# kernel are missing. Busybox comes from /bin/busybox when that is a static
# one of the guest's architecture, else from Debian's busybox-static of that
# architecture, downloaded (apt-get download) into .cache/vm-relay/ and not
# installed, so the host's own busybox is never replaced. The trace
# processor must be in .cache/ (bash scripts/setup-test-deps.sh). Everything
# it starts is stopped and its namespace deleted on exit, whatever the exit
# (trap).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "vm-relay: $*" >&2; }
die() { say "$2"; exit "$1"; }

ARCH=x86_64
while (( $# )); do
  case "$1" in
    --arch)
      case "${2:-}" in
        x86_64) ARCH=x86_64 ;;
        aarch64|arm64) ARCH=aarch64 ;;
        *) die 64 "--arch ${2:-} is not x86_64 or aarch64" ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,58p' "$0"; exit 0 ;;
    *) die 64 "unknown argument $1 (usage: scripts/vm-relay.sh [--arch x86_64|aarch64])" ;;
  esac
done

# Per architecture: qemu, its package, the kernel's package, the ELF
# machine number of its binaries (e_machine), the guest's console and the
# modules its devices need (with what they depend on, unless built in).
case $ARCH in
  x86_64)
    DEB_ARCH=amd64; QEMU=qemu-system-x86_64; ELF_MACHINE=62
    RATE_DEFAULT=200; BOOT_DEFAULT=60
    CONSOLE=ttyS0; WANT_MODULES=(e1000)
    ;;
  aarch64)
    DEB_ARCH=arm64; QEMU=qemu-system-aarch64; ELF_MACHINE=183
    RATE_DEFAULT=1000; BOOT_DEFAULT=120
    CONSOLE=ttyAMA0; WANT_MODULES=(virtio_mmio virtio_net virtio_console)
    ;;
esac
PINGS=${VM_RELAY_PINGS:-150}
# The arm64 relay is the package's (scripts/package.sh): always release.
PROFILE=${VM_RELAY_PROFILE:-release}
[[ $ARCH == aarch64 ]] && PROFILE=release
[[ $PROFILE =~ ^[a-z][a-z0-9-]*$ ]] || die 64 "VM_RELAY_PROFILE=$PROFILE is not a cargo profile name"
PING_MS=${VM_RELAY_PING_MS:-100}
RATE=${VM_RELAY_RATE:-$RATE_DEFAULT}
BOOT_S=${VM_RELAY_BOOT_S:-$BOOT_DEFAULT}
# The guest must be ready within BOOT_S, answer every ping, then drain its
# relay and power off: 110 s at the x86_64 defaults.
QEMU_TIMEOUT=$((BOOT_S + PINGS * PING_MS / 1000 + 35))
GUEST_NAME=tracesync-vm
DATA_PORT=7410
SYNC_PORT=7411
TARGET=$ARCH-unknown-linux-gnu
TARGET_DIR=${CARGO_TARGET_DIR:-target}
CACHE=.cache/vm-relay

[[ $(id -u) == 0 ]] || die 77 "needs root (ip netns, apt-get); run it with sudo"

# --- packages ----------------------------------------------------------------
# The newest kernel of the guest's architecture: an arm64 kernel installed
# beside the amd64 one (scripts/setup-arm64.sh) sorts after it, and a PC
# guest cannot boot it.
kernel() {
  if [[ $ARCH == aarch64 ]]; then
    ls /boot/vmlinuz-*-arm64 2>/dev/null
  else
    ls /boot/vmlinuz-* 2>/dev/null | grep -v -- '-arm64$'
  fi | sort -V | tail -1
}
# e_machine of an ELF file (62 x86_64, 183 aarch64).
elf_machine() { od -An -tu2 -j18 -N2 "$1" 2>/dev/null | tr -d ' '; }
# Static: no program interpreter (dynamic loader) named.
is_static() { readelf -lW "$1" 2>/dev/null | grep -q 'Entry point' && ! readelf -lW "$1" | grep -q INTERP; }
if [[ $ARCH == aarch64 ]]; then
  # Idempotent: installs only what is missing, then names the versions.
  bash scripts/setup-arm64.sh || die 69 "scripts/setup-arm64.sh failed: no arm64 toolchain, qemu or kernel"
else
  need=()
  command -v "$QEMU" >/dev/null || need+=(qemu-system-x86)
  [[ -n $(kernel) ]] || need+=(linux-image-amd64)
  command -v cpio >/dev/null || need+=(cpio)
  if (( ${#need[@]} )); then
    command -v apt-get >/dev/null || die 69 "missing ${need[*]} and no apt-get to install them"
    say "installing ${need[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${need[@]}"; } >&2 \
      || die 69 "could not install ${need[*]}"
  fi
fi
command -v "$QEMU" >/dev/null || die 69 "$QEMU is not installed"
command -v cpio >/dev/null || die 69 "cpio is not installed"
KERNEL=$(kernel)
[[ -r $KERNEL ]] || die 69 "no readable $ARCH kernel in /boot (install linux-image-$DEB_ARCH)"
KVER=${KERNEL#/boot/vmlinuz-}

# Busybox for the guest: the host's if it fits, else Debian's static one of
# the guest's architecture, unpacked from its package (never installed).
BUSYBOX=/bin/busybox
if ! { [[ -x $BUSYBOX ]] && is_static "$BUSYBOX" && [[ $(elf_machine "$BUSYBOX") == "$ELF_MACHINE" ]]; }; then
  BUSYBOX=$CACHE/busybox-$DEB_ARCH
  if [[ ! -x $BUSYBOX ]]; then
    say "fetching busybox-static:$DEB_ARCH (apt-get download) into $CACHE"
    mkdir -p "$CACHE"
    deb_dir=$(mktemp -d "${TMPDIR:-/tmp}/vm-relay-deb.XXXXXX")
    if ! (cd "$deb_dir" && { apt-get download -qq "busybox-static:$DEB_ARCH" 2>/dev/null \
          || { apt-get update -qq && apt-get download -qq "busybox-static:$DEB_ARCH"; }; }) >&2; then
      rm -rf "$deb_dir"
      die 69 "could not download busybox-static:$DEB_ARCH (for arm64: dpkg --add-architecture arm64, as scripts/setup-arm64.sh does)"
    fi
    dpkg-deb -x "$deb_dir"/busybox-static_*.deb "$deb_dir/root" \
      && install -m 0755 "$deb_dir/root/bin/busybox" "$BUSYBOX.tmp" \
      && mv "$BUSYBOX.tmp" "$BUSYBOX"
    rm -rf "$deb_dir"
  fi
fi
{ is_static "$BUSYBOX" && [[ $(elf_machine "$BUSYBOX") == "$ELF_MACHINE" ]]; } \
  || die 69 "$BUSYBOX is not a static $ARCH busybox"

# The modules, dependencies first (modules.dep lists them last-needed
# first); a module built into this kernel needs no file.
MODDIR=/lib/modules/$KVER
MODULE_FILES=()
declare -A module_seen=()
add_module() { # $1: a path in modules.dep
  local path=$1 deps i
  [[ -n ${module_seen[$path]:-} ]] && return 0
  module_seen[$path]=1
  read -r -a deps <<<"$(grep -m1 "^$path:" "$MODDIR/modules.dep" | cut -d: -f2)"
  for (( i = ${#deps[@]} - 1; i >= 0; i-- )); do add_module "${deps[i]}"; done
  [[ $path == *.ko ]] || die 69 "$MODDIR/$path: a compressed module; busybox insmod needs a plain .ko"
  [[ -r $MODDIR/$path ]] || die 69 "$MODDIR/$path missing: the guest's drivers come with linux-image-$KVER"
  MODULE_FILES+=("$path")
}
for m in "${WANT_MODULES[@]}"; do
  path=$(grep -m1 -E "(^|/)$m\.ko[^:]*:" "$MODDIR/modules.dep" 2>/dev/null | cut -d: -f1 || true)
  if [[ -n $path ]]; then
    add_module "$path"
  elif ! grep -qE "(^|/)$m\.ko$" "$MODDIR/modules.builtin" 2>/dev/null; then
    die 69 "module $m is neither in $MODDIR/modules.dep nor built in"
  fi
done

# --- binaries ----------------------------------------------------------------
say "building (host binaries, then the static $ARCH guest binaries)"
cargo build --quiet -p tracesync-daemon -p tracesync-cli -p tracesync-tests \
  --bin tracesyncd --bin tracesync --bin tracesync-vm-host
if [[ $ARCH == aarch64 ]]; then
  # Debian's Rust and the cross linker, exactly as the arm64 package is built.
  bash scripts/package.sh --target aarch64 >&2 || die 70 "scripts/package.sh --target aarch64 failed"
  STRIP=aarch64-linux-gnu-strip
else
  # Static glibc for the guest, as scripts/package.sh builds the relay; an
  # explicit --target keeps these RUSTFLAGS away from build scripts.
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --quiet --profile "$PROFILE" --target "$TARGET" -p tracesync-relay \
    -p tracesync-vm-guest --bin tracesync-relay --bin tracesync-vm-guest
  STRIP=strip
fi
HOST_BIN=$TARGET_DIR/debug
GUEST_BIN=$TARGET_DIR/$TARGET/$PROFILE
for b in "$GUEST_BIN/tracesync-relay" "$GUEST_BIN/tracesync-vm-guest"; do
  is_static "$b" || die 70 "$b is not a static executable"
  [[ $(elf_machine "$b") == "$ELF_MACHINE" ]] || die 70 "$b is not an $ARCH executable"
done

# --- run state and its cleanup -----------------------------------------------
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vm-relay.XXXXXX")
NS=tsvm-$$
DAEMON_PID=
QEMU_PID=
TAIL_PID=
cleanup() {
  local rc=$? left=()
  trap - EXIT INT TERM
  for pid in $QEMU_PID $DAEMON_PID $TAIL_PID; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    if kill -0 "$pid" 2>/dev/null; then left+=("process $pid"); fi
  done
  if ip netns list 2>/dev/null | grep -qw "$NS"; then
    # Anything still in the namespace is ours: end it before deleting it.
    for pid in $(ip netns pids "$NS" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    if ip netns list 2>/dev/null | grep -qw "$NS"; then left+=("namespace $NS"); fi
  fi
  if grep -q "$WORK" /proc/mounts; then left+=("a mount under $WORK"); fi
  if [[ -n ${VM_RELAY_KEEP:-} ]]; then
    say "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  if (( ${#left[@]} )); then
    say "left behind: ${left[*]}"
    rc=70
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the guest's initramfs ---------------------------------------------------
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
ROOT=$WORK/initramfs
mkdir -p "$ROOT"/{bin,usr/bin,etc,proc,sys,dev,run,tmp,lib/modules,var/spool/tracesync}
cp "$BUSYBOX" "$ROOT/bin/busybox"
cp "$GUEST_BIN/tracesync-relay" "$GUEST_BIN/tracesync-vm-guest" "$ROOT/usr/bin/"
"$STRIP" "$ROOT/usr/bin/"* 2>/dev/null || true
modules=
for m in "${MODULE_FILES[@]}"; do
  cp "$MODDIR/$m" "$ROOT/lib/modules/"
  modules+="${modules:+ }$(basename "$m")"
done
# The ping line: the second UART on x86_64; on aarch64 the virtio serial
# port named tracesync-ping (its /dev/vportNpM name is found by that name).
if [[ $ARCH == aarch64 ]]; then ping_tty=; ping_port=tracesync-ping; else ping_tty=/dev/ttyS1; ping_port=; fi
cat > "$ROOT/etc/vm-relay.env" <<EOF
TOKEN=$TOKEN
RATE=$RATE
GUEST_NAME=$GUEST_NAME
HOST=10.0.2.2:$DATA_PORT
MODULES="$modules"
PING_TTY=$ping_tty
PING_PORT=$ping_port
EOF
cat > "$ROOT/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
. /etc/vm-relay.env
hostname "$GUEST_NAME"
for m in $MODULES; do insmod "/lib/modules/$m"; done
for _ in $(seq 100); do [ -e /sys/class/net/eth0 ] && break; sleep 0.05; done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
PING=$PING_TTY
if [ -n "$PING_PORT" ]; then
  for _ in $(seq 100); do
    for f in /sys/class/virtio-ports/*/name; do
      [ "$(cat "$f" 2>/dev/null)" = "$PING_PORT" ] && PING=/dev/$(basename "$(dirname "$f")")
    done
    [ -n "$PING" ] && [ -e "$PING" ] && break
    sleep 0.05
  done
else
  stty -F "$PING" raw -echo
fi
echo "vm-guest: up after $(cut -d' ' -f1 /proc/uptime) s; $(uname -m); clocksource" \
  "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource); ping line $PING"
tracesync-relay --host "$HOST" --tls off --token "$TOKEN" --log-format text \
  --source "synthetic:$RATE" --source unix:/run/vm-ping.sock \
  --spool /var/spool/tracesync &
relay=$!
tracesync-vm-guest --serial "$PING" --socket /run/vm-ping.sock
guest=$?
# The relay's cost as the guest's kernel counted it (USER_HZ is 100).
echo "vm-guest: relay $(grep -E '^Vm(HWM|RSS):' /proc/$relay/status | tr -s ' \t\n' ' ')cpu" \
  "$(sed 's/.*) //' /proc/$relay/stat | awk '{printf "%.2f", ($12 + $13) / 100}') s" \
  "over $(sed 's/.*) //' /proc/$relay/stat | awk -v up="$(cut -d' ' -f1 /proc/uptime)" '{printf "%.1f", up - $20 / 100}') s"
kill -TERM "$relay"
wait "$relay"
echo "vm-guest: ping program exit $guest, relay exit $?"
poweroff -f
EOF
chmod 0755 "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc --quiet) > "$WORK/initramfs.cpio"

# --- the namespace and the daemon --------------------------------------------
ip netns add "$NS"
say "network namespace $NS"
ip -n "$NS" link set lo up
mkdir -p "$WORK/out"
ip netns exec "$NS" "$HOST_BIN/tracesyncd" --tls off --token "$TOKEN" \
  --listen "127.0.0.1:$DATA_PORT" --sync-listen "127.0.0.1:$SYNC_PORT" \
  --control "$WORK/control.sock" --output "$WORK/out" --log-format text \
  > "$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do
  grep -q "tracesyncd: listening" "$WORK/daemon.log" && break
  kill -0 "$DAEMON_PID" 2>/dev/null || break
  sleep 0.1
done
grep -q "tracesyncd: listening" "$WORK/daemon.log" \
  || { cat "$WORK/daemon.log" >&2; die 70 "tracesyncd did not start"; }
# The live tail: the bound (err_ns) the live path gives each guest packet.
"$HOST_BIN/tracesync" tail --connect "$WORK/control.sock" --format jsonl \
  --machine "$GUEST_NAME" > "$WORK/live.jsonl" 2> "$WORK/tail.log" &
TAIL_PID=$!

# --- the guest ---------------------------------------------------------------
# The console to a file; the ping line to a unix socket.
if [[ $ARCH == aarch64 ]]; then
  machine=(-M virt -cpu cortex-a57)
  ping_line=(-chardev "socket,id=ping,path=$WORK/ping.sock,server=on,wait=off"
    -device virtio-serial-device -device virtserialport,chardev=ping,name=tracesync-ping)
  nic=(-device virtio-net-device,netdev=n0)
  append=
else
  machine=(-cpu max)
  ping_line=(-serial "unix:$WORK/ping.sock,server=on,wait=off")
  nic=(-device e1000,netdev=n0)
  append=" random.trust_cpu=on"
fi
ip netns exec "$NS" timeout "$QEMU_TIMEOUT" "$QEMU" \
  "${machine[@]}" -accel tcg -smp 1 -m 512 -nodefaults -display none -no-reboot \
  -kernel "$KERNEL" -initrd "$WORK/initramfs.cpio" \
  -append "console=$CONSOLE quiet panic=-1$append" \
  -serial "file:$WORK/console.log" \
  "${ping_line[@]}" \
  -netdev user,id=n0 "${nic[@]}" \
  > "$WORK/qemu.log" 2>&1 &
QEMU_PID=$!

show_logs() {
  for f in console.log qemu.log daemon.log; do
    [[ -s $WORK/$f ]] && { echo "---- $f (tail)"; tail -n 30 "$WORK/$f"; } >&2
  done
  return 0
}
if ! "$HOST_BIN/tracesync-vm-host" ping --socket "$WORK/ping.sock" --count "$PINGS" \
    --interval-ms "$PING_MS" --ready-timeout "$BOOT_S" --log "$WORK/pings.jsonl"; then
  show_logs
  die 70 "the ping channel failed"
fi
"$HOST_BIN/tracesync" status --connect "$WORK/control.sock" --json > "$WORK/status.json" \
  || { show_logs; die 70 "tracesync status failed"; }
"$HOST_BIN/tracesync-vm-host" quit --socket "$WORK/ping.sock" || true
# The guest drains its relay and powers off; qemu then exits.
rc=0
wait "$QEMU_PID" || rc=$?
QEMU_PID=
grep "vm-guest:" "$WORK/console.log" >&2 || true
hwm=$(sed -n 's/^vm-guest: relay .*VmHWM: \([0-9]*\) kB.*/\1/p' "$WORK/console.log")
[[ -n $hwm ]] && say "relay peak RSS in the $ARCH guest (VmHWM): $hwm kB at $RATE packets/s"
(( rc == 0 )) || { show_logs; die 70 "qemu exited $rc (124: the guest did not power off within $QEMU_TIMEOUT s)"; }
kill -TERM "$DAEMON_PID"
rc=0
wait "$DAEMON_PID" || rc=$?
DAEMON_PID=
(( rc == 0 )) || { show_logs; die 70 "tracesyncd exited $rc"; }
# The tail ends with the daemon.
wait "$TAIL_PID" || true
TAIL_PID=
say "guest run took $((SECONDS - START)) s"

# --- the verdict -------------------------------------------------------------
# The rolled files in the order of their sequence numbers (names sort so).
files=("$WORK"/out/*.pftrace)
"$HOST_BIN/tracesync" merge --format jsonl -o "$WORK/merged.jsonl" "${files[@]}" \
  || die 70 "tracesync merge of the capture failed"
rc=0
"$HOST_BIN/tracesync-vm-host" check --dir "$WORK/out" --merged "$WORK/merged.jsonl" \
  --pings "$WORK/pings.jsonl" --live "$WORK/live.jsonl" --status "$WORK/status.json" --machine "$GUEST_NAME" \
  --arch "$ARCH" || rc=$?
exit "$rc"
