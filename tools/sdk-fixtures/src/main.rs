//! Records the real-producer fixtures in `tests/fixtures/`:
//!
//! * `sdk_host.pftrace`: in-process Perfetto tracing service + producer on
//!   the host machine (machine id 0).
//! * `sdk_machine7.pftrace`: same, with the producer stamped `machine_id = 7`
//!   (needs `trace_all_machines: true` in the TraceConfig since Perfetto v54).
//!
//! The SDK's producer can only be initialised once per process, so `main`
//! re-runs this binary once per fixture.
//!
//! Usage: `cargo run --release [-- OUT_DIR]` (default: `<repo>/tests/fixtures`).

use perfetto_sdk::{
    heap_buffer::HeapBuffer,
    pb_msg::{PbMsg, PbMsgWriter},
    producer::{Backends, Producer, ProducerInitArgsBuilder},
    protos::config::{
        data_source_config::DataSourceConfig,
        trace_config::{
            TraceConfig, TraceConfigBufferConfig, TraceConfigBuiltinDataSource,
            TraceConfigDataSource,
        },
        track_event::track_event_config::TrackEventConfig,
    },
    tracing_session::TracingSession,
    track_event::{
        EventContext, TrackEvent, TrackEventCounter, TrackEventDebugArg, TrackEventTrack,
    },
    track_event_begin, track_event_categories, track_event_counter, track_event_end,
};
use std::{
    error::Error,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    thread,
    time::Duration,
};

track_event_categories! {
    pub mod fixture_te_ns {
        ( "fixture", "tracesync test fixture events", [] ),
    }
}
use fixture_te_ns as perfetto_te_ns;

fn trace_config(all_machines: bool) -> Vec<u8> {
    let writer = PbMsgWriter::new();
    let hb = HeapBuffer::new(writer.stream_writer());
    let mut msg = PbMsg::new(&writer).unwrap();
    {
        let mut cfg = TraceConfig { msg: &mut msg };
        cfg.set_buffers(|b: &mut TraceConfigBufferConfig| {
            b.set_size_kb(1024);
        });
        cfg.set_data_sources(|ds: &mut TraceConfigDataSource| {
            ds.set_config(|c: &mut DataSourceConfig| {
                c.set_name("track_event");
                c.set_track_event_config(|te: &mut TrackEventConfig| {
                    te.set_enabled_categories("fixture");
                });
            });
        });
        // More than the one start-of-trace ClockSnapshot.
        cfg.set_builtin_data_sources(|b: &mut TraceConfigBuiltinDataSource| {
            b.set_snapshot_interval_ms(100);
        });
        if all_machines {
            cfg.set_trace_all_machines(true);
        }
    }
    msg.finalize();
    let size = writer.stream_writer().get_written_size();
    let mut buf = vec![0u8; size];
    hb.copy_into(&mut buf);
    buf
}

fn worker(label: &'static str, rounds: u32) {
    for i in 0..rounds {
        track_event_begin!("fixture", "work", |ctx: &mut EventContext| {
            ctx.add_debug_arg("worker", TrackEventDebugArg::String(label));
            ctx.add_debug_arg("round", TrackEventDebugArg::Int64(i as i64));
        });
        thread::sleep(Duration::from_millis(5));
        track_event_begin!("fixture", "inner");
        thread::sleep(Duration::from_millis(2));
        track_event_end!("fixture");
        track_event_end!("fixture");
        thread::sleep(Duration::from_millis(20));
    }
}

fn record(machine_id: u32, out: &Path) -> Result<(), Box<dyn Error>> {
    let mut args = ProducerInitArgsBuilder::new().backends(Backends::IN_PROCESS);
    if machine_id != 0 {
        args = args.machine_id(machine_id);
    }
    Producer::init(args.build());
    TrackEvent::init();
    perfetto_te_ns::register()?;

    let mut session = TracingSession::in_process()?;
    session.setup(&trace_config(machine_id != 0));
    session.start_blocking();

    let counter = TrackEventTrack::register_counter_track(
        "queue_depth",
        TrackEventTrack::process_track_uuid(),
    )?;
    let threads: Vec<_> = ["worker-a", "worker-b"]
        .into_iter()
        .map(|label| {
            thread::Builder::new()
                .name(label.into())
                .spawn(move || worker(label, 10))
                .unwrap()
        })
        .collect();
    for depth in [1i64, 3, 2, 5, 0] {
        track_event_counter!("fixture", |ctx: &mut EventContext| {
            ctx.set_track(&counter);
            ctx.set_counter(TrackEventCounter::Int64(depth));
        });
        thread::sleep(Duration::from_millis(60));
    }
    for t in threads {
        t.join().unwrap();
    }
    session.flush_blocking(Duration::from_secs(5));
    session.stop_blocking();

    let data = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&data);
    session.read_trace_blocking(move |chunk, _end| sink.lock().unwrap().extend_from_slice(chunk));
    let bytes = data.lock().unwrap().clone();
    std::fs::write(out, &bytes)?;
    println!(
        "wrote {} ({} bytes, machine_id {machine_id})",
        out.display(),
        bytes.len()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--record" {
        return record(args[2].parse()?, Path::new(&args[3]));
    }
    let out_dir = match args.get(1) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"),
    };
    std::fs::create_dir_all(&out_dir)?;
    let exe = std::env::current_exe()?;
    for (machine_id, name) in [(0u32, "sdk_host.pftrace"), (7, "sdk_machine7.pftrace")] {
        // The process descriptor records the command line: keep the paths of
        // this machine out of the committed fixtures (neutral argv[0], output
        // file name relative to the working directory).
        let status = Command::new(&exe)
            .arg0("sdk-fixtures")
            .current_dir(&out_dir)
            .args(["--record", &machine_id.to_string(), name])
            .status()?;
        if !status.success() {
            return Err(format!("recording {name} failed: {status}").into());
        }
    }
    Ok(())
}
