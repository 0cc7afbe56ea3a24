//! `tracesync-vm-guest`: runs inside the qemu guest of `scripts/vm-relay.sh`
//! (built static, like the relay). It answers the host's numbered pings on
//! a serial line that does not touch the network the relay uses:
//!
//! - it writes `R` when it is ready;
//! - for every `P <n>` it reads, it stamps the guest's BOOTTIME, writes a
//!   TrackEvent instant (`vm-ping`, debug annotation `vm_ping_n` = n) with
//!   that timestamp to the relay's `unix:` source, then answers
//!   `A <n> <boottime_ns>`;
//! - at `Q` it exits 0.
//!
//! The line is a UART (x86_64's ttyS1) or a virtio serial port (aarch64's
//! `virt` machine has one UART, its console); the port reads end-of-file
//! while the host has no end of it open, which is waited out.
//!
//! The host stamps each ping's send and receive times in its own BOOTTIME,
//! so the guest's stamp lies inside that window: after the merge, the
//! event's resolved time must too, widened by its error bound.
//!
//!   tracesync-vm-guest --serial /dev/ttyS1 --socket /run/vm-ping.sock
//!   tracesync-vm-guest --serial /dev/vport1p1 --socket /run/vm-ping.sock

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use prost::Message;
use tracesync_common::clock::boottime_ns;
use tracesync_protocol::perfetto::{
    DebugAnnotation, TracePacket, TrackEvent, debug_annotation, trace_packet, track_event,
};

#[derive(Parser, Debug)]
#[command(name = "tracesync-vm-guest", about = "Stamps the host's serial pings")]
struct Flags {
    /// The serial line to the host (raw mode, set with `stty raw -echo`).
    #[arg(long)]
    serial: PathBuf,
    /// The relay's `unix:` source socket.
    #[arg(long)]
    socket: PathBuf,
    /// How long to wait for the relay's socket to appear (s).
    #[arg(long, default_value_t = 30)]
    connect_timeout: u64,
    /// How long the serial line may have no host end (a virtio port
    /// between the host's commands) before the program gives up (s).
    #[arg(long, default_value_t = 30)]
    reconnect_timeout: u64,
}

/// Perfetto's `TracePacket.SequenceFlags`.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

fn main() -> ExitCode {
    let flags = Flags::parse();
    match run(&flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("tracesync-vm-guest: {message}");
            ExitCode::from(code)
        }
    }
}

/// sysexits: 66 no input, 69 unavailable, 74 I/O error, 65 bad data.
fn run(flags: &Flags) -> Result<(), (u8, String)> {
    let serial = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&flags.serial)
        .map_err(|e| (66, format!("{}: cannot open: {e}", flags.serial.display())))?;
    let mut reply = serial
        .try_clone()
        .map_err(|e| (74, format!("{}: {e}", flags.serial.display())))?;
    let mut relay = connect(flags)?;
    let io = |e: std::io::Error| (74, format!("{}: {e}", flags.serial.display()));
    reply.write_all(b"R\n").map_err(io)?;
    let mut serial = BufReader::new(serial);
    let (mut line, mut number, mut first) = (String::new(), 0usize, true);
    let mut closed_since: Option<Instant> = None;
    loop {
        line.clear();
        if serial.read_line(&mut line).map_err(io)? == 0 {
            // A virtio serial port reads end-of-file while no host end is
            // connected (the host's `ping` and `quit` connect one after
            // the other); a UART never does. Wait for the host to return.
            let since = *closed_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(flags.reconnect_timeout) {
                return Err((
                    65,
                    format!(
                        "{}: closed before `Q` (no host end for {} s)",
                        flags.serial.display(),
                        flags.reconnect_timeout
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        closed_since = None;
        number += 1;
        let line = line.trim();
        if line == "Q" {
            return Ok(());
        }
        let Some(n) = line.strip_prefix("P ").and_then(|n| n.parse::<u64>().ok()) else {
            // Line noise before the host's first ping is skipped, not fatal.
            eprintln!(
                "tracesync-vm-guest: {} line {number}: {line:?} is not `P <n>` or `Q`; skipped",
                flags.serial.display(),
            );
            continue;
        };
        let stamp = boottime_ns();
        relay
            .write_all(&record(n, stamp, first))
            .map_err(|e| (74, format!("{}: {e}", flags.socket.display())))?;
        first = false;
        reply
            .write_all(format!("A {n} {stamp}\n").as_bytes())
            .map_err(io)?;
    }
}

/// Connects to the relay's socket, waiting for the relay to bind it.
fn connect(flags: &Flags) -> Result<UnixStream, (u8, String)> {
    let deadline = Instant::now() + Duration::from_secs(flags.connect_timeout);
    loop {
        match UnixStream::connect(&flags.socket) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err((
                    69,
                    format!(
                        "{}: cannot connect within {} s: {e} (is the relay running with \
                         --source unix:{}?)",
                        flags.socket.display(),
                        flags.connect_timeout,
                        flags.socket.display()
                    ),
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One Trace record (field 1) holding the ping's TrackEvent instant at
/// `stamp` on the default clock (BOOTTIME).
fn record(n: u64, stamp: u64, first: bool) -> Vec<u8> {
    let flags = if first {
        SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE
    } else {
        SEQ_NEEDS_INCREMENTAL_STATE
    };
    let packet = TracePacket {
        timestamp: Some(stamp),
        sequence_flags: Some(flags),
        data: Some(trace_packet::Data::TrackEvent(TrackEvent {
            r#type: Some(track_event::Type::Instant as i32),
            name_field: Some(track_event::NameField::Name("vm-ping".into())),
            debug_annotations: vec![DebugAnnotation {
                name_field: Some(debug_annotation::NameField::Name("vm_ping_n".into())),
                value: Some(debug_annotation::Value::UintValue(n)),
                ..DebugAnnotation::default()
            }],
            ..TrackEvent::default()
        })),
        ..TracePacket::default()
    };
    let body = packet.encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 12);
    out.push(0x0a);
    prost::encoding::encode_varint(body.len() as u64, &mut out);
    out.extend_from_slice(&body);
    out
}
