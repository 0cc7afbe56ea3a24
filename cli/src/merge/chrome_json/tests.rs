//! Tests of the Chrome JSON conversion: the outer structure, Perfetto's
//! coercions, the packets each phase becomes, and errors with offsets.

use std::io::Read;

use prost::Message;
use tracesync_protocol::perfetto::trace_packet::Data;
use tracesync_protocol::perfetto::{Trace, TrackDescriptor, TrackEvent, track_event};

use super::event::parse_event;
use super::scan::looks_like_chrome_json;
use super::*;

/// Each packet's timestamp and payload.
type Packets = Vec<(Option<u64>, Data)>;

/// Converts `json`; the packets, the counts, and the error if any.
fn convert(json: &str) -> (Packets, JsonStats, Option<String>) {
    let slot = StatsSlot::default();
    let mut reader = ChromeJsonReader::new(
        std::io::Cursor::new(json.as_bytes().to_vec()),
        "t.json",
        Some(slot.clone()),
    );
    let mut bytes = Vec::new();
    let mut error = None;
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) => {
                error = Some(match json_error_of(&e) {
                    Some(j) => format!("{:?}: {j}", j.offset()),
                    None => e.to_string(),
                });
                break;
            }
        }
    }
    drop(reader);
    let trace = Trace::decode(&bytes[..]).unwrap();
    let packets = trace
        .packet
        .into_iter()
        .map(|p| (p.timestamp, p.data.unwrap()))
        .collect();
    let stats = *slot.lock().unwrap();
    (packets, stats, error)
}

fn events(packets: &[(Option<u64>, Data)]) -> Vec<(u64, &TrackEvent)> {
    packets
        .iter()
        .filter_map(|(ts, d)| match d {
            Data::TrackEvent(e) => Some((ts.unwrap(), e)),
            _ => None,
        })
        .collect()
}

fn descriptors(packets: &[(Option<u64>, Data)]) -> Vec<&TrackDescriptor> {
    packets
        .iter()
        .filter_map(|(_, d)| match d {
            Data::TrackDescriptor(t) => Some(t),
            _ => None,
        })
        .collect()
}

fn kind(e: &TrackEvent) -> track_event::Type {
    track_event::Type::try_from(e.r#type.unwrap()).unwrap()
}

fn name(e: &TrackEvent) -> Option<&str> {
    match &e.name_field {
        Some(track_event::NameField::Name(n)) => Some(n),
        _ => None,
    }
}

#[test]
fn sniffs_as_perfetto_does() {
    assert!(looks_like_chrome_json(b"{\"traceEvents\": []}"));
    assert!(looks_like_chrome_json(b" \n[ {\"ph\":\"X\"}]"));
    assert!(looks_like_chrome_json(b"\xEF\xBB\xBF{\"a\":1}"));
    assert!(!looks_like_chrome_json(b"[]"));
    assert!(!looks_like_chrome_json(b"{}"));
    assert!(!looks_like_chrome_json(b"\x0a\x05hello"));
}

#[test]
fn timestamps_are_coerced_as_perfetto_does() {
    let ts = |v: &str| parse_event(format!("{{\"ph\":\"i\",\"ts\":{v}}}").as_bytes()).unwrap();
    assert_eq!(ts("2000").ts, Some(2_000_000));
    assert_eq!(ts("2000.0").ts, Some(2_000_000));
    assert_eq!(
        ts("1.0005").ts,
        Some(1001),
        "half way rounds away from zero"
    );
    assert_eq!(ts("-1.0005").ts, Some(-1001));
    assert_eq!(ts("0.0001").ts, Some(0));
    assert_eq!(
        ts("\"12.5\"").ts,
        Some(12_500),
        "numeric strings are numbers"
    );
    assert_eq!(ts("\" 7\"").ts, Some(7_000));
    assert!(
        ts("\"12x\"").bad_field.is_some(),
        "trailing garbage is an error"
    );
    assert!(ts("\"\"").bad_field.is_some());
    assert!(ts("true").bad_field.is_some());
    assert!(
        ts("9223372036854775807").bad_field.is_some(),
        "overflows ns"
    );
    let e = parse_event(br#"{"ph":"X","ts":1,"ts":2,"pid":-5,"tid":4294967296}"#).unwrap();
    assert_eq!(e.ts, Some(2_000), "the last duplicate wins");
    assert_eq!(e.pid, Some(event::Ident::Num(0)), "negative pid is 0");
    assert_eq!(e.tid, Some(event::Ident::Num(0)), "beyond u32 is 0");
}

#[test]
fn complete_event_is_a_begin_and_an_end_on_its_thread() {
    let (packets, stats, error) = convert(
        r#"{"traceEvents":[{"pid":10,"tid":11,"ts":2000,"dur":500,"ph":"X","name":"s","cat":"c","args":{"a":1,"o":{"k":"v"},"n":null}}]}"#,
    );
    assert_eq!(error, None);
    assert_eq!(stats, JsonStats::default());
    let ev = events(&packets);
    assert_eq!(ev.len(), 2);
    assert_eq!(
        (ev[0].0, kind(ev[0].1)),
        (2_000_000, track_event::Type::SliceBegin)
    );
    assert_eq!(
        (ev[1].0, kind(ev[1].1)),
        (2_500_000, track_event::Type::SliceEnd)
    );
    assert_eq!(name(ev[0].1), Some("s"));
    assert_eq!(ev[0].1.categories, vec!["c".to_string()]);
    assert_eq!(ev[0].1.debug_annotations.len(), 2, "null is dropped");
    let d = descriptors(&packets);
    let thread = d.iter().find(|t| t.thread.is_some()).unwrap();
    let th = thread.thread.as_ref().unwrap();
    assert_eq!((th.pid, th.tid), (Some(10), Some(11)));
    assert_eq!(ev[0].1.track_uuid, thread.uuid);
    let process = d.iter().find(|t| t.process.is_some()).unwrap();
    assert_eq!(thread.parent_uuid, process.uuid);
}

#[test]
fn phases_become_their_tracks() {
    let (packets, stats, error) = convert(
        r#"[{"pid":1,"tid":2,"ts":1,"ph":"B","name":"b"},
            {"pid":1,"tid":2,"ts":3,"ph":"E"},
            {"pid":1,"tid":2,"ts":2,"ph":"i","name":"t"},
            {"pid":1,"ts":2,"ph":"i","s":"p","name":"p"},
            {"ts":2,"ph":"i","s":"g","name":"g"},
            {"pid":1,"ts":4,"ph":"C","name":"mem","args":{"heap":5,"rss":"7","bad":"x"}},
            {"pid":1,"ts":5,"ph":"b","name":"req","id":7,"cat":"n"},
            {"pid":1,"ts":6,"ph":"e","name":"req","id":7,"cat":"n"},
            {"pid":1,"ts":6,"ph":"b","name":"noid"},
            {"pid":1,"tid":2,"ph":"M","name":"thread_name","args":{"name":"main"}},
            {"pid":1,"ph":"M","name":"process_name","args":{"name":"app"}},
            {"pid":1,"ts":7,"ph":"P","id":1,"name":"sample"},
            {"ts":8,"name":"no phase"},
            {"ph":"X","name":"no ts"},
            {"pid":1,"ts":9,"ph":"X","name":"no dur"},
            {}]"#,
    );
    assert_eq!(error, None);
    let ev = events(&packets);
    let sorted: Vec<u64> = ev.iter().map(|(t, _)| *t).collect();
    assert!(
        sorted.windows(2).all(|w| w[0] <= w[1]),
        "released in order: {sorted:?}"
    );
    let d = descriptors(&packets);
    let counters: Vec<&str> = d
        .iter()
        .filter(|t| t.counter.is_some())
        .map(|t| t.name.as_deref().unwrap())
        .collect();
    assert_eq!(counters, vec!["mem heap", "mem rss"]);
    let named = |n: &str| d.iter().any(|t| t.name.as_deref() == Some(n));
    assert!(named("req") && named("Global instants"));
    let thread_name = d
        .iter()
        .filter_map(|t| t.thread.as_ref()?.thread_name.clone())
        .next_back();
    assert_eq!(thread_name.as_deref(), Some("main"));
    let process_name = d
        .iter()
        .filter_map(|t| t.process.as_ref()?.process_name.clone())
        .next_back();
    assert_eq!(process_name.as_deref(), Some("app"));
    assert_eq!(
        stats,
        JsonStats {
            // "bad" counter value, async without id, X without dur.
            json_parser_failure: 3,
            // no phase, no ts.
            json_tokenizer_failure: 2,
            json_events_not_converted: 1,
            ..JsonStats::default()
        }
    );
}

#[test]
fn string_pids_name_their_process() {
    let (packets, _, _) =
        convert(r#"[{"pid":"Renderer","tid":"Main","ts":1,"dur":1,"ph":"X","name":"x"}]"#);
    let d = descriptors(&packets);
    let process = d.iter().find_map(|t| t.process.as_ref()).unwrap();
    assert_eq!(process.process_name.as_deref(), Some("Renderer"));
    let thread = d.iter().find_map(|t| t.thread.as_ref()).unwrap();
    assert_eq!(thread.thread_name.as_deref(), Some("Main"));
    assert_eq!(thread.pid, process.pid);
}

#[test]
fn out_of_order_events_come_out_sorted() {
    let (packets, stats, _) = convert(
        r#"[{"pid":1,"tid":1,"ts":30,"ph":"i","name":"c"},{"pid":1,"tid":1,"ts":10,"ph":"X","dur":25,"name":"a"},{"pid":1,"tid":1,"ts":20,"ph":"i","name":"b"}]"#,
    );
    let ts: Vec<u64> = events(&packets).iter().map(|(t, _)| *t).collect();
    assert_eq!(ts, vec![10_000, 20_000, 30_000, 35_000]);
    assert_eq!(stats.json_events_out_of_window, 0);
}

#[test]
fn bind_id_flows_link_their_slices() {
    let (packets, _, _) = convert(
        r#"[{"pid":1,"tid":1,"ts":1,"dur":1,"ph":"X","name":"out","bind_id":"f","flow_out":true},
            {"pid":1,"tid":3,"ts":5,"dur":1,"ph":"X","name":"in","bind_id":"f","flow_in":true}]"#,
    );
    let ev = events(&packets);
    let out = ev.iter().find(|(_, e)| name(e) == Some("out")).unwrap().1;
    let inn = ev.iter().find(|(_, e)| name(e) == Some("in")).unwrap().1;
    assert_eq!(out.flow_ids.len(), 1);
    assert_eq!(inn.terminating_flow_ids, out.flow_ids);
}

#[test]
fn other_keys_are_skipped_and_display_time_unit_counted() {
    let (packets, stats, error) = convert(
        r##"{"metadata":{"clock-domain":"LINUX_CLOCK_MONOTONIC","x":[1,{"y":"]}"}]},
            "displayTimeUnit":"ns","systemTraceEvents":"# tracer: nop\n",
            "traceEvents":[{"pid":1,"tid":1,"ts":1,"ph":"i","name":"a"},],"stackFrames":{}}"##,
    );
    assert_eq!(error, None);
    assert_eq!(events(&packets).len(), 1);
    assert_eq!(stats.json_display_time_unit, 1);
    // A string is converted as systrace: its header lines are skipped.
    assert_eq!(stats.json_system_trace_events_not_converted, 0);
}

#[test]
fn system_trace_events_lines_become_ftrace_packets_in_time_order() {
    let json = r##"{"traceEvents":[{"pid":1,"tid":1,"ts":1500000,"ph":"i","name":"a"}],
        "systemTraceEvents":"# tracer: nop\n  app-100 (  100) [001] ...1  2.000000: tracing_mark_write: B|100|s\n  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: E|100\n  x-1 [000] 3.0: irq_handler_entry: irq=1\nnot a line \u00e9","systemTraceEvents2":{}}"##;
    let slot = StatsSlot::default();
    let mut bytes = Vec::new();
    ChromeJsonReader::new(
        std::io::Cursor::new(json.as_bytes().to_vec()),
        "t.json",
        Some(slot.clone()),
    )
    .read_to_end(&mut bytes)
    .unwrap();
    let ts: Vec<u64> = Trace::decode(&bytes[..])
        .unwrap()
        .packet
        .iter()
        .filter_map(|p| p.timestamp)
        .collect();
    // The window puts the JSON instant (1.5 s) between the two lines.
    assert_eq!(ts, vec![1_000_000_000, 1_500_000_000, 2_000_000_000]);
    let stats = *slot.lock().unwrap();
    assert_eq!(
        (
            stats.systrace_events_not_converted,
            stats.systrace_parse_failure
        ),
        (1, 1)
    );
}

#[test]
fn a_bare_array_may_be_cut_short_an_object_may_not() {
    let (packets, _, error) = convert(r#"[{"pid":1,"tid":1,"ts":1,"ph":"i","name":"a"},"#);
    assert_eq!(error, None);
    assert_eq!(events(&packets).len(), 1);
    let (packets, _, error) =
        convert(r#"{"traceEvents":[{"pid":1,"tid":1,"ts":1,"ph":"i","name":"a"},"#);
    assert_eq!(events(&packets).len(), 1, "the events before are kept");
    let error = error.unwrap();
    assert!(
        error.starts_with(
            "Some(61): expected ']' closing traceEvents (the file ends after 1 event: truncated?)"
        ),
        "{error}"
    );
}

#[test]
fn errors_name_the_byte_offset_and_what_was_expected() {
    let (packets, _, error) = convert(
        r#"[{"pid":1,"tid":1,"ts":1,"ph":"i","name":"a"}, {"pid":1,"tid":1,"ts":2 "ph":"i"}]"#,
    );
    assert_eq!(events(&packets).len(), 1);
    let error = error.unwrap();
    assert!(
        error.starts_with("Some(71): bad JSON in an event: expected `,` or `}`"),
        "{error}"
    );
    let (_, _, error) = convert(r#"[{"pid":1,"tid":1,"ts":1,"ph":"i"}] x"#);
    assert_eq!(
        error.as_deref(),
        Some("Some(36): expected nothing after the end of the trace")
    );
    let (_, _, error) = convert(r#"{"traceEvents": 5}"#);
    assert_eq!(
        error.as_deref(),
        Some("Some(16): expected '[': traceEvents must be an array")
    );
}

#[test]
fn perfetto_sort_rules_and_leniencies() {
    // Same start: the longer complete event first (it is the parent); an
    // end before a begin at one time; a trailing comma and a raw newline
    // in a string are read as Perfetto reads them.
    let (packets, stats, error) = convert(
        "[{\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":5,\"ph\":\"X\",\"name\":\"child\",\"args\":{\"a\":\"x\ny\",}},
          {\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":10,\"ph\":\"X\",\"name\":\"parent\"},
          {\"pid\":1,\"tid\":1,\"ts\":11,\"ph\":\"B\",\"name\":\"next\"},
          {\"pid\":1,\"tid\":1,\"ts\":\"x\",\"ph\":\"M\",\"name\":\"thread_name\",\"args\":{\"name\":\"t\"}}]",
    );
    assert_eq!(error, None);
    assert_eq!(stats, JsonStats::default());
    let got: Vec<(u64, track_event::Type, Option<&str>)> = events(&packets)
        .into_iter()
        .map(|(ts, e)| (ts, kind(e), name(e)))
        .collect();
    use track_event::Type::{SliceBegin as B, SliceEnd as E};
    assert_eq!(
        got,
        [
            (1000, B, Some("parent")),
            (1000, B, Some("child")),
            (6000, E, None),
            (11000, E, None),
            (11000, B, Some("next")),
        ]
    );
    let named = descriptors(&packets)
        .iter()
        .any(|d| d.thread.as_ref().and_then(|t| t.thread_name.as_deref()) == Some("t"));
    assert!(
        named,
        "a metadata event with a bad ts still names its thread"
    );
}

/// A reader dropped before the end stops its reading thread (which would
/// otherwise block on a full channel) and leaves what both threads counted.
#[test]
fn a_reader_dropped_early_stops_its_reading_thread() {
    let mut json = String::from(r#"{"displayTimeUnit":"ns","traceEvents":["#);
    for i in 0..200_000 {
        json.push_str(&format!(
            r#"{{"ph":"X","pid":1,"tid":2,"ts":{i},"dur":1,"name":"e"}},"#
        ));
    }
    json.push_str(r#"{}]}"#);
    let slot = StatsSlot::default();
    let mut reader = ChromeJsonReader::new(
        std::io::Cursor::new(json.into_bytes()),
        "t.json",
        Some(slot.clone()),
    );
    let mut buf = [0u8; 4096];
    assert!(reader.read(&mut buf).unwrap() > 0);
    let started = std::time::Instant::now();
    drop(reader);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // Counted by the reading thread, at the start of the text.
    assert_eq!(slot.lock().unwrap().json_display_time_unit, 1);
}

/// Converts `json` with a window of `window` bytes, handed out `chunk`
/// bytes at a time, `ahead` items converted after each chunk of a
/// release; the bytes and the counts.
fn convert_with(json: &str, window: usize, chunk: usize, ahead: usize) -> (Vec<u8>, JsonStats) {
    let slot = StatsSlot::default();
    let mut reader = ChromeJsonReader::with_converter(
        std::io::Cursor::new(json.as_bytes().to_vec()),
        convert::Converter::with_window("t.json", window),
        Some(slot.clone()),
        chunk,
        ahead,
    );
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).unwrap();
    drop(reader);
    let stats = *slot.lock().unwrap();
    (bytes, stats)
}

/// Converting ahead while a release goes out changes no byte: nothing is
/// released meanwhile, and the descriptors the new events write straight
/// out follow the release, as when they waited for it.
#[test]
fn converting_ahead_during_a_release_changes_no_byte() {
    // A small window makes hundreds of releases; processes and threads
    // (each a descriptor written straight out) keep appearing and are
    // named by metadata events; complete events overlap (some spill) and
    // times are out of order by a few events.
    let mut json = String::from(r#"{"traceEvents":["#);
    for i in 0..8000_u64 {
        let ts = i * 10 + (i * 7919) % 37;
        let pid = 1 + i / 700;
        let tid = pid * 100 + (i / 90) % 17;
        let event = match i % 5 {
            0 => format!(
                r#"{{"ph":"X","pid":{pid},"tid":{tid},"ts":{ts},"dur":{},"name":"x{}","args":{{"a":{i}}}}}"#,
                (i % 13) * 20,
                i % 7
            ),
            1 => format!(r#"{{"ph":"i","pid":{pid},"tid":{tid},"ts":{ts},"name":"in","s":"t"}}"#),
            2 => format!(r#"{{"ph":"C","pid":{pid},"ts":{ts},"name":"c","args":{{"v":{i}}}}}"#),
            3 => format!(
                r#"{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name","args":{{"name":"t{tid}"}}}}"#
            ),
            _ => format!(r#"{{"ph":"X","pid":{pid},"tid":{tid},"ts":{ts},"dur":3,"name":"s"}}"#),
        };
        json.push_str(&event);
        json.push(',');
    }
    json.push_str("{}]}");
    let waited = convert_with(&json, 4096, 512, 0);
    let trace = Trace::decode(&waited.0[..]).unwrap();
    let descriptors = trace
        .packet
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackDescriptor(_))))
        .count();
    assert!(descriptors > 100, "{descriptors} descriptors");
    assert!(
        waited.0.len() > 50 * 4096,
        "{} bytes: many releases",
        waited.0.len()
    );
    for ahead in [1, 7, 768] {
        let got = convert_with(&json, 4096, 512, ahead);
        assert!(got.0 == waited.0, "{ahead} ahead: other bytes");
        assert_eq!(got.1, waited.1, "{ahead} ahead: other counts");
    }
}
