use std::io::Read;

use prost::Message;
use tracesync_protocol::perfetto::Trace;

use super::encode::{
    EVENT_TS_LEN, EVENT_TS_OFFSET, is_ftrace_packet, is_ftrace_parts, set_event_ts,
};
use super::line::{Line, parse_line, raw_prev_state};
use super::{SystraceReader, looks_like_systrace};
use crate::merge::conversion_stats::JsonStats;

const TEXT: &str = "# tracer: nop
#
  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: B|100|sys_slice
  app-100 (  100) [001] ...1  1.500000: tracing_mark_write: E|100
  <idle>-0     [000] d..3  2.000001: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=app next_pid=100 next_prio=120
  kworker/u16:1-77 [002] 3.5: workqueue_execute_start: work struct 0x0
this is no event line
";

#[test]
fn lines_split_as_the_trace_processor_reads_them() {
    let l =
        parse_line("  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: B|100|s").unwrap();
    assert_eq!(
        l,
        Line {
            task: "app",
            pid: 100,
            tgid: Some(100),
            cpu: 1,
            ts: 1_000_000_000,
            event: "tracing_mark_write",
            args: "B|100|s",
        }
    );
    let l = parse_line("  my-task-name-7 (-----) [003] 2.25: cpu_idle: state=1 cpu_id=3").unwrap();
    assert_eq!(
        (l.task, l.pid, l.tgid, l.cpu, l.ts),
        ("my-task-name", 7, None, 3, 2_250_000_000)
    );
    assert!(parse_line("no event here").is_none());
    assert!(parse_line("  app-1 [001] 1.0 tracing_mark_write: x").is_none());
}

#[test]
fn prev_state_letters_map_to_the_raw_state_the_trace_processor_decodes() {
    assert_eq!(raw_prev_state("R"), 0);
    assert_eq!(raw_prev_state("R+"), 0x800);
    assert_eq!(raw_prev_state("S"), 1);
    assert_eq!(raw_prev_state("D|K"), 0x82);
    assert_eq!(raw_prev_state("?"), 0xffff);
}

#[test]
fn detection_by_content() {
    assert!(looks_like_systrace(b"# tracer: nop\n"));
    assert!(looks_like_systrace(b"TRACE:\n# tracer: nop\n"));
    assert!(!looks_like_systrace(b"{\"traceEvents\": []}"));
    assert!(!looks_like_systrace(b"\x0a\x05# tracer"));
}

#[test]
fn supported_lines_become_packets_the_rest_is_counted() {
    let slot = super::StatsSlot::default();
    let mut bytes = Vec::new();
    SystraceReader::new(TEXT.as_bytes(), Some(slot.clone()))
        .read_to_end(&mut bytes)
        .unwrap();
    let trace = Trace::decode(bytes.as_slice()).unwrap();
    let ts: Vec<u64> = trace.packet.iter().filter_map(|p| p.timestamp).collect();
    assert_eq!(ts, vec![1_000_000_000, 1_500_000_000, 2_000_001_000]);
    let stats = *slot.lock().unwrap();
    assert_eq!(
        (
            stats.systrace_events_not_converted,
            stats.systrace_parse_failure
        ),
        (1, 1)
    );
    assert_eq!(
        stats,
        JsonStats {
            systrace_events_not_converted: 1,
            systrace_parse_failure: 1,
            ..Default::default()
        }
    );
}

#[test]
fn the_event_timestamp_is_rewritten_in_place() {
    let mut bytes = Vec::new();
    SystraceReader::new(TEXT.as_bytes(), None)
        .read_to_end(&mut bytes)
        .unwrap();
    // Unframe the first packet: tag, then its length as a varint.
    let (len, used) = tracesync_protocol::wire::decode_varint(&bytes[1..]).unwrap();
    let mut packet = bytes[1 + used..1 + used + len as usize].to_vec();
    assert!(set_event_ts(&mut packet, 42));
    let mut v = 0u64;
    for (i, b) in packet[EVENT_TS_OFFSET..EVENT_TS_OFFSET + EVENT_TS_LEN]
        .iter()
        .enumerate()
    {
        v |= u64::from(b & 0x7f) << (7 * i);
    }
    assert_eq!(v, 42);
    // Cut anywhere, the two parts are judged as the whole packet is.
    for cut in 0..=packet.len() {
        let (head, tail) = packet.split_at(cut);
        assert!(is_ftrace_parts(head, tail), "{cut}");
        let short = &packet[..EVENT_TS_OFFSET + EVENT_TS_LEN];
        let (head, tail) = short.split_at(cut.min(short.len()));
        assert!(!is_ftrace_parts(head, tail) && !is_ftrace_packet(short));
    }
    let mut other = packet.clone();
    other[4] = 0x1a;
    assert!(!is_ftrace_parts(&other[..3], &other[3..]));
}

/// The timestamps and stats of converting `text`.
fn read_all(text: &str) -> (Vec<u64>, JsonStats) {
    let slot = super::StatsSlot::default();
    let mut bytes = Vec::new();
    SystraceReader::new(text.as_bytes(), Some(slot.clone()))
        .read_to_end(&mut bytes)
        .unwrap();
    let trace = Trace::decode(bytes.as_slice()).unwrap();
    let ts = trace.packet.iter().filter_map(|p| p.timestamp).collect();
    let stats = *slot.lock().unwrap();
    (ts, stats)
}

const B: &str = "  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: B|100|s\n";
const E: &str = "  app-100 (  100) [001] ...1  1.500000: tracing_mark_write: E|100\n";

#[test]
fn headerless_forms_perfetto_detects_are_read() {
    // atrace's output with a preamble, trace-cmd's text, bare event lines.
    let atrace = format!("capturing trace... done\nTRACE:\n{B}{E}");
    let cmd = format!("cpus=8\n{B}{E}");
    let bare = format!("{B}{E}");
    for text in [&atrace, &cmd, &bare] {
        assert!(looks_like_systrace(text.as_bytes()), "{text}");
        let (ts, stats) = read_all(text);
        assert_eq!(ts, [1_000_000_000, 1_500_000_000], "{text}");
        assert_eq!(stats, JsonStats::default(), "{text}");
    }
    assert!(!looks_like_systrace(b"cpus\n"));
    assert!(!looks_like_systrace(b"\x0a\x05 TRACE:\n"));
}

#[test]
fn html_systrace_is_read_from_its_trace_data_section() {
    let html = format!(
        "<!DOCTYPE html>\n<html><head></head><body>\n\
         <script class=\"trace-data\" type=\"application/text\">\n\
         PROCESS DUMP\nUSER PID PPID VSZ RSS WCHAN PC S NAME COMM\n\
         root 1 0 1 1 0 0 S init init\n</script>\n\
         <script class=\"trace-data\" type=\"application/text\">\n\
         # tracer: nop\n#           TASK-PID    CPU#  TIMESTAMP  FUNCTION\n\
         {B}{E}</script>\n{B}</body></html>\n"
    );
    assert!(looks_like_systrace(html.as_bytes()));
    let (ts, stats) = read_all(&html);
    assert_eq!(
        ts,
        [1_000_000_000, 1_500_000_000],
        "only the trace-data events"
    );
    assert_eq!(stats, JsonStats::default());
}
