//! The fast path against the full one: where it reads an event, the
//! converted bytes and counts are the same.

use super::super::convert::Converter;
use super::super::event::parse_event;
use super::*;
use crate::merge::chrome_json::JsonStats;

/// The converted bytes and counts of `events`, each read the full way.
fn full(events: &[&str]) -> (Vec<u8>, JsonStats) {
    let (mut c, mut out, mut stats) = (Converter::new("t.json"), Vec::new(), JsonStats::default());
    for e in events {
        c.push(&parse_event(e.as_bytes()).unwrap(), &mut out, &mut stats);
    }
    c.finish(&mut out, &mut stats);
    (out, stats)
}

/// The same through the fast path where it reads the event; how many it
/// read.
fn fast(events: &[&str]) -> (Vec<u8>, JsonStats, usize) {
    let (mut c, mut out, mut stats) = (Converter::new("t.json"), Vec::new(), JsonStats::default());
    let (mut args, mut read) = (Vec::new(), 0);
    // One event and scratch for all, as the reading thread reuses them.
    let (mut ev, mut scratch) = (JsonEvent::default(), Scratch::default());
    for e in events {
        args.clear();
        match parse_fast(e.as_bytes(), &mut ev, &mut args, &mut scratch) {
            Some(n) if n == e.trim_end().len() => {
                read += 1;
                c.push_encoded(&ev, &args, &mut out, &mut stats);
            }
            _ => c.push(&parse_event(e.as_bytes()).unwrap(), &mut out, &mut stats),
        }
    }
    c.finish(&mut out, &mut stats);
    (out, stats, read)
}

const COMMON: &[&str] = &[
    r#"{"ph":"M","pid":1,"name":"process_name","args":{"name":"p"}}"#,
    r#"{"ph":"X","pid":1,"tid":2,"ts":1000000.413,"dur":137.928,"name":"a","cat":"c0","args":{"seq":0,"depth":1}}"#,
    r#"{"ph":"B","pid":1,"tid":2,"ts":1000138,"name":"step","cat":"train"}"#,
    r#"{"ph":"i","pid":1,"tid":2,"ts":1000140,"name":"mark","s":"t"}"#,
    r#"{"ph":"E","pid":1,"tid":2,"ts":1000143}"#,
    r#"{"ph":"E","pid":1,"tid":2,"ts":1000143,"args":{"r":"x"}}"#,
    r#"{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":7,"tid":8,"ts":1700000000123.456,"dur":45.678,"args":{"External id":12,"Input Dims":[[32,1024],[4096,1024],[4096]],"Input type":["float","float",""],"Fwd thread id":0}}"#,
    r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":5.5,"dur":2,"args":{"blocks per SM":4.5,"grid":[64,1,1],"n":null,"o":{"z":1,"a":[null,true,false],"m":{}},"big":18446744073709551615,"neg":-5,"e":1.5e3},"bind_id":42,"flow_in":true}"#,
    r#"{"ph":"X","pid":7,"tid":8,"ts":6,"dur":1,"name":"l","bind_id":42,"flow_out":true}"#,
    r#"{"ph":"s","id":5531,"pid":7,"tid":8,"ts":7,"cat":"ac2g","name":"ac2g"}"#,
    r#"{"ph":"f","id":5531,"pid":0,"tid":7,"ts":8,"cat":"ac2g","name":"ac2g","bp":"e"}"#,
    r#"{"ph":"b","pid":1,"ts":9,"name":"req","id":"0x7","cat":"n","args":{"url":"u"}}"#,
    r#"{"ph":"e","pid":1,"ts":10,"name":"req","id":"0x7","cat":"n"}"#,
    r#"{"ph":"n","pid":1,"ts":10,"name":"req","id":7,"cat":"n"}"#,
    r#"{"ph":"i","s":"g","ts":11,"name":"g"}"#,
    r#"{"ph":"I","s":"p","pid":1,"ts":12,"name":"p","args":{"deep":{"a":{"b":{"c":[1,[2,[3]]]}}}}}"#,
    r#"{"ph":"X","pid":"Renderer","tid":"Main","ts":13,"dur":1,"name":"x"}"#,
    r#"{"ph":"X","pid":-5,"tid":4294967296,"ts":14,"dur":1}"#,
    r#"{"ph":"X","pid":1,"tid":1,"ts":14}"#,
    r#"{"ph":"X","pid":1,"tid":1,"ts":true,"tts":"x"}"#,
    r#"{"ph":"X","pid":1,"tid":1,"ts":-3,"dur":1}"#,
    r#"{"ph":"X","pid":1,"tid":1,"ts":9223372036854775807,"dur":1}"#,
    r#"{"ph":"X","pid":1.9,"tid":1e2,"ts":15,"dur":0.0001,"name":""}"#,
    r#"{"name":"no phase","ts":1}"#,
    r#"{}"#,
    r#" { "ph" : "X" , "pid" : 1 , "tid" : 2 , "ts" : 16 , "dur" : 1 , "other" : { "k" : [ 1 , 2 ] } } "#,
    r#"{"ph":"C","pid":1,"ts":17,"name":"mem","args":{"heap":5}}"#,
    "{ \"ph\" :\t\"X\" ,\n\"pid\" : 1 , \"tid\" : \"t\" , \"ts\" : 19.5 , \"dur\" : 1 , \"name\" : \"w\" , \"cat\" :\r\n\"c\" , \"args\" : { \"b\" : [ 1 , \"s\" , null , true , { \"k\" : -2.5 } ] , \"a\" : null , \"c\" : { } , \"d\" : [ ] } }",
    r#"{"ph":"X","idx":1,"tsx":2,"s2":"t","name2":"n","args_":{},"pid":1,"tid":1,"ts":21,"dur":1,"name":"keys that start as the event's do"}"#,
    r#"{"ph":"X","pid":1,"tid":1,"ts":22,"dur":true,"name":"a bad dur, named"}"#,
    r#"{"ph":"X","pid":1,"tid":2,"ts":18,"dur":1,"name":"long","args":{"s":"................................................................................................................................................................"}}"#,
];

/// Events whose meaning the conversion refines: thread time, named ends,
/// v1 flows, complete events spilled to a child track, lenient syntax.
const SEMANTICS: &[&str] = &[
    r#"{"ph":"B","pid":3,"tid":4,"ts":100,"tts":50,"name":"outer","cat":"c","args":{"a":1}}"#,
    r#"{"ph":"B","pid":3,"tid":4,"ts":101,"tts":51.5,"name":"inner","args":{"b":[1,2]}}"#,
    r#"{"ph":"E","pid":3,"tid":4,"ts":102,"tts":52,"name":"inner","args":{"r":"done"}}"#,
    r#"{"ph":"E","pid":3,"tid":4,"ts":103,"name":"outer","cat":"c"}"#,
    r#"{"ph":"E","pid":3,"tid":4,"ts":104,"name":"nothing open"}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":110,"dur":10,"tts":60,"tdur":4,"name":"t","args":{"k":"v"}}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":111,"dur":2,"tts":61,"name":"no tdur"}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":115,"dur":10,"name":"spills","args":{"s":1}}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":116,"dur":20,"name":"spills too","args":{"s":2}}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":116,"dur":1,"name":"nested, same time"}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":140,"dur":0,"name":"zero"}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":140,"dur":0,"name":"zero too"}"#,
    r#"{"ph":"s","id":"0x1F","pid":3,"tid":4,"ts":112,"cat":"f","name":"flow"}"#,
    r#"{"ph":"t","id":31,"pid":3,"tid":4,"ts":113,"cat":"f","name":"flow","args":{"x":1}}"#,
    r#"{"ph":"f","id":"1f","pid":3,"tid":5,"ts":114,"cat":"f","name":"flow","bp":"e"}"#,
    r#"{"ph":"f","id":31,"pid":3,"tid":5,"ts":114,"cat":"f","name":"flow"}"#,
    r#"{"ph":"s","id":"not hex","pid":3,"tid":4,"ts":115,"name":"bad"}"#,
    r#"{"ph":"X","pid":3,"tid":4,"ts":150,"dur":1,"name":"trailing",}"#,
    "{\"ph\":\"X\",\"pid\":3,\"tid\":4,\"ts\":151,\"dur\":1,\"name\":\"raw\ttab\"}",
    r#"{"ph":"X","pid":3,"tid":4,"ts":1850244461563845.0,"dur":1,"name":"exact"}"#,
];

#[test]
fn reads_what_the_full_way_reads() {
    let (want, want_stats) = full(COMMON);
    let (got, got_stats, read) = fast(COMMON);
    assert_eq!(got_stats, want_stats);
    assert!(got == want, "converted bytes differ");
    // All but a string `tts`.
    assert_eq!(read, COMMON.len() - 1);

    let (want, want_stats) = full(SEMANTICS);
    let (got, got_stats, read) = fast(SEMANTICS);
    assert_eq!(got_stats, want_stats);
    assert!(got == want, "converted bytes differ");
    assert!(want_stats.slice_spill_overlapping_complete_event > 0);
    assert_eq!(want_stats.flow_invalid_id, 1);
    // All but the lenient ones and the timestamp beyond 2^53.
    assert_eq!(read, SEMANTICS.len() - 3);
}

#[test]
fn leaves_what_it_cannot_read_exactly_to_the_full_way() {
    for e in [
        r#"{"ph":"X","name":"a\"b","ts":1}"#,
        r#"{"ph":"X","ts":1,"ts":2}"#,
        r#"{"ph":"X","ts":1,"args":{"a":1,"a":2}}"#,
        r#"{"ph":"X","ts":"12.5"}"#,
        r#"{"ph":"X","ts":-0}"#,
        r#"{"ph":"X","ts":0.30000000000000004}"#,
        r#"{"ph":"X","ts":1e300}"#,
        r#"{"ph":"X","ts":01}"#,
        r#"{"ph":"X","ts":18446744073709551616}"#,
        r#"{"ph":"b","id2":{"local":"0x1"},"ts":1}"#,
        r#"{"p\u0068":"X","ts":1}"#,
        r#"{"ph":"\u0058","ts":1}"#,
        r#"{"ph":"X","ph":"B","ts":1}"#,
        r#"{"ph":"X","ts":1 "pid":1}"#,
        r#"{"ph":"X","ts":1,}"#,
        "{\"ph\":\"X\",\"name\":\"a\u{1}\",\"ts\":1}",
        r#"{"ph":"M","name":"thread_name","args":{"name":{"a":1}}}"#,
        r#"{"ph":"C","ts":1,"name":"c","args":{"a":[1]}}"#,
    ] {
        assert!(
            parse_fast(
                e.as_bytes(),
                &mut JsonEvent::default(),
                &mut Vec::new(),
                &mut Scratch::default()
            )
            .is_none(),
            "{e}"
        );
    }
}

#[test]
fn numbers_are_serde_jsons() {
    for text in [
        "0",
        "12",
        "-12",
        "1.5",
        "-0.25",
        "1000000.413",
        "1700000000123.456",
        "1e3",
        "2.5E-3",
        "9007199254740991",
        "123456789.123456",
    ] {
        let got = Cursor::new(text.as_bytes()).number();
        let want: serde_json::Number = serde_json::from_str(text).unwrap();
        let want = match (want.as_u64(), want.as_i64()) {
            (Some(u), _) => Num::Uint(u),
            (None, Some(i)) => Num::Int(i),
            _ => Num::Float(want.as_f64().unwrap()),
        };
        assert_eq!(got, Some(want), "{text}");
    }
}

#[test]
fn timestamps_read_as_digits_are_the_doubles_rounding() {
    // Decimals of up to three places are read as their digits; the
    // answer must be what the double, times 1000 and rounded, gives.
    let mut texts: Vec<String> = [
        "0.001",
        "-0.001",
        "-0.000",
        "1.000",
        "0.5",
        "1000000.413",
        "1700000000123.456",
        "1125899906842.623",
        "1125899906842.624",
        "9007199254740.991",
        "12345678901234567.8",
        "0.0001",
        "-3.25",
        "00.5",
        "1.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Spread over the range where the digits are used and past it.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let digits = x % (1 << 51);
        let places = (x >> 60) % 4;
        let s = digits.to_string();
        let s = if places == 0 || s.len() <= places as usize {
            s
        } else {
            let (int, frac) = s.split_at(s.len() - places as usize);
            format!("{int}.{frac}")
        };
        texts.push(if x & 1 == 1 { format!("-{s}") } else { s });
    }
    for text in &texts {
        let got = Cursor::new(text.as_bytes()).us_to_ns();
        let want = Cursor::new(text.as_bytes()).number().map(Num::us_to_ns);
        assert_eq!(got, want, "{text}");
    }
}

#[test]
fn counter_and_metadata_args_are_read_as_values() {
    let events: &[&str] = &[
        r#"{"ph":"M","pid":1,"name":"process_name","args":{"name":"p"}}"#,
        r#"{"ph":"M","pid":1,"tid":2,"name":"thread_sort_index","args":{"sort_index":3}}"#,
        r#"{"args":{"name":"late ph"},"pid":1,"tid":3,"name":"thread_name","ph":"M"}"#,
        r#"{"ph":"M","pid":1,"name":"process_labels","args":{}}"#,
        r#"{"ph":"C","pid":1,"ts":1,"name":"m","args":{"b":1.5,"a":-2,"c":"7.25","d":true,"e":null}}"#,
        r#"{"ph":"C","pid":1,"ts":2,"name":"m","args":{"a":1,"a":18446744073709551615}}"#,
        r#"{"args":{"x":3},"ph":"C","pid":1,"ts":3,"name":"m","id":"s"}"#,
        r#"{"ph":"C","pid":1,"ts":4,"name":"m","args":"no"}"#,
        r#"{"ph":"C","pid":1,"ts":5,"name":"m"}"#,
    ];
    let (want, want_stats) = full(events);
    let (got, got_stats, read) = fast(events);
    assert_eq!(got_stats, want_stats);
    assert!(got == want, "converted bytes differ");
    assert_eq!(read, events.len());
}

#[test]
fn non_ascii_strings_are_read_and_invalid_utf8_left() {
    let events: &[&str] = &[
        r#"{"ph":"X","pid":1,"tid":2,"ts":1,"dur":1,"name":"café","cat":"ü","args":{"ключ":"значение"}}"#,
        r#"{"ph":"C","pid":1,"ts":2,"name":"m","args":{"é":1}}"#,
    ];
    let (want, want_stats) = full(events);
    let (got, got_stats, read) = fast(events);
    assert_eq!(got_stats, want_stats);
    assert!(got == want, "converted bytes differ");
    assert_eq!(read, events.len());
    // Invalid UTF-8 anywhere in a string: the full way decides.
    for bad in [
        &b"{\"ph\":\"X\",\"name\":\"a\xff\"}"[..],
        b"{\"ph\":\"X\",\"other\":\"\xc3\"}",
        b"{\"ph\":\"X\",\"args\":{\"k\xe2\x82\":1}}",
        b"{\"ph\":\"C\",\"args\":{\"k\":\"\xed\xa0\x80\"}}",
    ] {
        let (mut ev, mut args, mut scratch) =
            (JsonEvent::default(), Vec::new(), Scratch::default());
        assert_eq!(
            parse_fast(bad, &mut ev, &mut args, &mut scratch),
            None,
            "{bad:?}"
        );
    }
}

/// An event read into again holds what a fresh one holds: every field
/// the reading before wrote (whole or cut short by a refusal) is reset,
/// whichever event came before.
#[test]
fn an_event_read_into_again_is_a_fresh_one() {
    let refused = [
        r#"{"ph":"X","pid":"a","tid":"b","id":"0x1","bind_id":2,"s":"p","bp":"e","flow_in":true,"flow_out":true,"tts":1,"tdur":2,"ts":1,"dur":"x""#,
        r#"{"ph":"C","name":"n","cat":"c","ts":true,"args":{"a":1},"ts":2}"#,
    ];
    let all: Vec<&str> = COMMON
        .iter()
        .chain(SEMANTICS)
        .chain(&refused)
        .copied()
        .collect();
    let read = |e: &mut JsonEvent, text: &str| {
        let (mut args, mut scratch) = (Vec::new(), Scratch::default());
        parse_fast(text.as_bytes(), e, &mut args, &mut scratch).map(|n| (n, args))
    };
    for before in &all {
        for after in &all {
            let mut reused = JsonEvent::default();
            let _ = read(&mut reused, before);
            let mut fresh = JsonEvent::default();
            let want = read(&mut fresh, after);
            assert_eq!(read(&mut reused, after), want, "{before} then {after}");
            if want.is_some() {
                let (got, want) = (format!("{:?}", reused), format!("{:?}", fresh));
                assert_eq!(got, want, "{before} then {after}");
            }
        }
    }
}
