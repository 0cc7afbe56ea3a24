#!/usr/bin/env bash
# A relay in a real VM: a qemu guest (software emulation, no KVM) with the
# Debian kernel, its own clocks and a virtual NIC, checked through a channel
# the clock sync does not use.
#
#   - builds an initramfs: busybox (static), the static relay (as
#     scripts/package.sh builds it), tracesync-vm-guest (static), the NIC
#     driver, and an init that runs the relay with a synthetic source and a
#     unix: source fed by tracesync-vm-guest;
#   - creates a network namespace, runs tracesyncd and qemu in it; the guest
#     reaches the daemon only through qemu's user networking (10.0.2.2 is
#     the namespace's loopback), so no traffic leaves the namespace;
#   - wires the guest's second serial port (ttyS1) to a unix socket: the
#     host sends numbered pings there and stamps send and receive in its
#     BOOTTIME, the guest stamps each in its own BOOTTIME as a trace event;
#   - stops the guest (it drains its relay and powers off), then the daemon,
#     merges the capture to jsonl and checks it (tracesync-vm-host check):
#     loss and duplication of the guest's events, every ping event inside
#     [send - err_ns, receive + err_ns], the guest's drift and jitter, and
#     every rolled file through the trace processor.
#
# The last line is
#   vm-relay: packets N lost L dup D; causality K/K inside; drift X ppm
# Exit 0 when nothing was lost or duplicated and K/K are inside; 1 when the
# check fails; 77 when not root; 69 when qemu, the kernel or busybox cannot
# be had; 70 when the run itself fails (boot, daemon, cleanup).
#
#   sudo scripts/vm-relay.sh
#   VM_RELAY_PINGS=300 VM_RELAY_RATE=500 sudo scripts/vm-relay.sh
#   VM_RELAY_KEEP=1 sudo scripts/vm-relay.sh      # keep the work directory
#
# Needs root (ip netns; apt-get install of qemu-system-x86, linux-image-amd64,
# busybox-static and cpio when missing), and the trace processor in .cache/
# (bash scripts/setup-test-deps.sh). Everything it starts is stopped and its
# namespace deleted on exit, whatever the exit (trap).
set -euo pipefail
cd "$(dirname "$0")/.."

PINGS=${VM_RELAY_PINGS:-150}
PING_MS=${VM_RELAY_PING_MS:-100}
RATE=${VM_RELAY_RATE:-200}
GUEST_NAME=tracesync-vm
DATA_PORT=7410
SYNC_PORT=7411
TARGET=x86_64-unknown-linux-gnu
TARGET_DIR=${CARGO_TARGET_DIR:-target}

say() { echo "vm-relay: $*" >&2; }
die() { say "$2"; exit "$1"; }

[[ $(id -u) == 0 ]] || die 77 "needs root (ip netns, apt-get); run it with sudo"

# --- packages ----------------------------------------------------------------
# Only an x86_64 kernel boots this PC guest; an arm64 kernel installed beside
# it (scripts/setup-arm64.sh) sorts after amd64 and must not be picked.
kernel() { ls /boot/vmlinuz-* 2>/dev/null | grep -v -- '-arm64$' | sort -V | tail -1; }
static_busybox() { [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; }
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -n $(kernel) ]] || need+=(linux-image-amd64)
static_busybox || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if (( ${#need[@]} )); then
  command -v apt-get >/dev/null || die 69 "missing ${need[*]} and no apt-get to install them"
  say "installing ${need[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${need[@]}"; } >&2 \
    || die 69 "could not install ${need[*]}"
fi
command -v qemu-system-x86_64 >/dev/null || die 69 "qemu-system-x86_64 is not installed"
static_busybox || die 69 "/bin/busybox is not a static busybox (install busybox-static)"
KERNEL=$(kernel)
[[ -r $KERNEL ]] || die 69 "no readable kernel in /boot (install linux-image-amd64)"
KVER=${KERNEL#/boot/vmlinuz-}
E1000=/lib/modules/$KVER/kernel/drivers/net/ethernet/intel/e1000/e1000.ko
[[ -r $E1000 ]] || die 69 "$E1000 missing: the guest's NIC driver comes with linux-image-$KVER"

# --- binaries ----------------------------------------------------------------
say "building (host binaries, then the static guest binaries)"
cargo build --quiet -p tracesync-daemon -p tracesync-cli -p tracesync-tests \
  --bin tracesyncd --bin tracesync --bin tracesync-vm-host
# Static glibc for the guest, as scripts/package.sh builds the relay; an
# explicit --target keeps these RUSTFLAGS away from build scripts.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --quiet --release --target "$TARGET" -p tracesync-relay -p tracesync-vm-guest \
  --bin tracesync-relay --bin tracesync-vm-guest
HOST_BIN=$TARGET_DIR/debug
GUEST_BIN=$TARGET_DIR/$TARGET/release
for b in "$GUEST_BIN/tracesync-relay" "$GUEST_BIN/tracesync-vm-guest"; do
  if ldd "$b" 2>&1 | grep -q '=>'; then die 70 "$b is dynamically linked"; fi
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
cp /bin/busybox "$ROOT/bin/busybox"
cp "$GUEST_BIN/tracesync-relay" "$GUEST_BIN/tracesync-vm-guest" "$ROOT/usr/bin/"
strip "$ROOT/usr/bin/"* 2>/dev/null || true
cp "$E1000" "$ROOT/lib/modules/"
cat > "$ROOT/etc/vm-relay.env" <<EOF
TOKEN=$TOKEN
RATE=$RATE
GUEST_NAME=$GUEST_NAME
HOST=10.0.2.2:$DATA_PORT
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
insmod /lib/modules/e1000.ko
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
stty -F /dev/ttyS1 raw -echo
echo "vm-guest: up after $(cut -d' ' -f1 /proc/uptime) s; clocksource" \
  "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
tracesync-relay --host "$HOST" --tls off --token "$TOKEN" --log-format text \
  --source "synthetic:$RATE" --source unix:/run/vm-ping.sock \
  --spool /var/spool/tracesync &
relay=$!
tracesync-vm-guest --serial /dev/ttyS1 --socket /run/vm-ping.sock
guest=$?
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
# ttyS0: the console, to a file; ttyS1: the ping channel, a unix socket.
ip netns exec "$NS" timeout 110 qemu-system-x86_64 \
  -accel tcg -cpu max -smp 1 -m 512 -nodefaults -display none -no-reboot \
  -kernel "$KERNEL" -initrd "$WORK/initramfs.cpio" \
  -append "console=ttyS0 quiet panic=-1 random.trust_cpu=on" \
  -serial "file:$WORK/console.log" \
  -serial "unix:$WORK/ping.sock,server=on,wait=off" \
  -netdev user,id=n0 -device e1000,netdev=n0 \
  > "$WORK/qemu.log" 2>&1 &
QEMU_PID=$!

show_logs() {
  for f in console.log qemu.log daemon.log; do
    [[ -s $WORK/$f ]] && { echo "---- $f (tail)"; tail -n 30 "$WORK/$f"; } >&2
  done
  return 0
}
if ! "$HOST_BIN/tracesync-vm-host" ping --socket "$WORK/ping.sock" --count "$PINGS" \
    --interval-ms "$PING_MS" --ready-timeout 60 --log "$WORK/pings.jsonl"; then
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
(( rc == 0 )) || { show_logs; die 70 "qemu exited $rc (124: the guest did not power off in time)"; }
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
  --pings "$WORK/pings.jsonl" --live "$WORK/live.jsonl" --status "$WORK/status.json" --machine "$GUEST_NAME" || rc=$?
exit "$rc"
