//! The report's numbers (fit, residual, table) and its picture, judged
//! from the SVG's text: a drifting machine's offset panel is on the scale
//! of its bound, every line runs over the capture, panels have legends,
//! an empty machine shows no bound, the table's columns sit at fixed x.

use super::fit::residual;
use super::*;

const SPAN_S: f64 = 29.0;

/// A machine whose clock runs `ppm` fast from `offset_s`, with a sync
/// point (an offset sample) whenever the offset moved by more than 1 µs,
/// checked every 5 ms until `until_s`; its bound is `bound_us` throughout
/// and its last packet at [`SPAN_S`].
fn drifting(name: &str, offset_s: f64, ppm: f64, bound_us: f64, until_s: f64) -> MachineReport {
    let mut m = MachineReport::new(name.len() as u32);
    m.name = name.to_owned();
    let mut last: Option<f64> = None;
    for i in 0..=(until_s / 0.005) as u32 {
        let t = f64::from(i) * 0.005;
        let offset = offset_s * 1e6 + ppm * t;
        if last.is_none_or(|l| (offset - l).abs() > 1.0) {
            m.offset_us.push((t, offset));
            last = Some(offset);
        }
    }
    m.bound_us.push((0.0, bound_us));
    m.rtt_us.push((0.0, 20.0));
    m.freq_ppm.push((0.0, ppm));
    for _ in 0..1000 {
        m.packets += 1;
        if let Some(h) = &mut m.bounds {
            let _ = h.record((bound_us * 1000.0) as u64);
        }
    }
    m.last_s = SPAN_S;
    m
}

fn report(machines: Vec<MachineReport>) -> Report {
    Report {
        machines,
        span_s: SPAN_S,
        files: 3,
    }
}

#[test]
fn the_fit_of_a_sync_point_staircase_is_the_clocks_drift() {
    let m = drifting("guest-vm", 11.1, 50.0, 5.0, SPAN_S);
    let r = residual(&m.offset_us, &m.bound_us, &[], m.last_s, 1000);
    let [fit] = r.fits.as_slice() else {
        panic!("{:?}", r.fits)
    };
    assert!((fit.drift_ppm - 50.0).abs() < 0.01, "{fit:?}");
    assert!((fit.offset_us - 11.1e6).abs() < 1.0, "{fit:?}");
    // The staircase stays within the sync-point threshold of its line.
    let (lo, hi) = r.extent().expect("drawn");
    assert!(lo > -5.0 - 1.5 && hi < 5.0 + 1.5, "{lo} {hi}");
}

#[test]
fn a_held_offset_runs_to_the_machines_last_packet() {
    // No sample after 12 s (the offset stopped moving past the threshold).
    let m = drifting("board", 7.3, 0.0, 5.0, 12.0);
    assert!(m.offset_us.last().is_some_and(|s| s.0 < 12.0));
    let r = residual(&m.offset_us, &m.bound_us, &[], m.last_s, 1000);
    let end = r.pieces.last().and_then(|p| p.last()).map(|s| s.b);
    assert_eq!(end, Some(SPAN_S));
    assert!(r.fits[0].drift_ppm.abs() < 1e-9, "{:?}", r.fits);
}

#[test]
fn each_epoch_gets_a_line_of_its_own() {
    let mut m = drifting("phone", 3.7, 8.0, 5.0, SPAN_S);
    // A step of 2 ms at 10 s.
    for s in &mut m.offset_us {
        if s.0 >= 10.0 {
            s.1 += 2000.0;
        }
    }
    let r = residual(&m.offset_us, &m.bound_us, &[10.0], m.last_s, 1000);
    assert_eq!(r.fits.len(), 2, "{:?}", r.fits);
    assert!(r.fits.iter().all(|f| (f.drift_ppm - 8.0).abs() < 0.01));
    let first_end = r.pieces[0].last().map(|s| s.b);
    assert!(first_end.is_some_and(|b| b <= 10.0), "{first_end:?}");
    assert!(r.pieces[1].first().is_some_and(|s| s.a >= 10.0));
    let (lo, hi) = r.extent().expect("drawn");
    assert!(
        lo > -7.0 && hi < 7.0,
        "the step is not in the residual: {lo} {hi}"
    );
}

#[test]
fn a_long_residual_is_drawn_with_its_extremes_kept() {
    let mut m = drifting("guest-vm", 11.1, 50.0, 5.0, SPAN_S);
    m.offset_us[700].1 += 40.0;
    let full = residual(&m.offset_us, &m.bound_us, &[], m.last_s, 100_000);
    let few = residual(&m.offset_us, &m.bound_us, &[], m.last_s, 100);
    assert!(few.pieces[0].len() <= 101, "{}", few.pieces[0].len());
    assert!(full.pieces[0].len() > 1000);
    assert_eq!(few.extent(), full.extent());
    assert!(few.pieces[0].windows(2).all(|w| w[0].b == w[1].a));
}

#[test]
fn a_short_wide_start_is_said_off_scale() {
    let steady = drifting("guest-vm", 11.1, 50.0, 5.0, SPAN_S);
    let r = residual(&steady.offset_us, &steady.bound_us, &[], SPAN_S, 1000);
    assert_eq!(r.scale().off, None);
    // The first 0.1 s: an estimate 300 µs off, with a bound of 400 µs.
    let mut m = steady;
    m.offset_us[0].1 -= 300.0;
    m.bound_us = vec![(0.0, 400.0), (0.1, 5.0)];
    let scale = residual(&m.offset_us, &m.bound_us, &[], SPAN_S, 1000).scale();
    let (seconds, farthest) = scale.off.expect("clipped");
    assert!(seconds > 0.0 && seconds <= 0.1 + 1e-9, "{scale:?}");
    assert!(farthest < -600.0, "{scale:?}");
    assert!(scale.lo > -10.0 && scale.hi < 10.0, "{scale:?}");
}

#[test]
fn an_empty_machine_shows_no_bound() {
    let m = MachineReport::new(9);
    let row = m.row();
    assert!(!row.contains("µs"), "{row}");
    assert_eq!(m.cells()[3..6], ["-", "-", "-"], "{row}");
}

#[test]
fn the_printed_header_sits_over_its_columns() {
    let m = drifting("server", -1.25, -12.0, 5.0, SPAN_S);
    let (header, row) = (header(), m.row());
    // Each right-aligned title ends where its cells end.
    let mut end = COLUMNS[0].1;
    for (title, w) in &COLUMNS[1..] {
        end += 1 + w;
        for line in [&header, &row] {
            let chars: Vec<char> = line.chars().collect();
            let ends_here = chars[end - 1] != ' ' && chars.get(end).is_none_or(|c| *c == ' ');
            assert!(ends_here, "{title} at {end}:\n{header}\n{row}");
        }
    }
}

/// Names a peer chose: a forged table row, a terminal-title escape, a
/// right-to-left mark and a line separator.
const HOSTILE_NAMES: [&str; 4] = [
    "vm\nforged      1000000",
    "x\u{1b}]0;owned\u{7}",
    "rlm\u{200f}mac",
    "line\u{2028}sep",
];

#[test]
fn names_print_escaped_in_the_table_and_the_picture() {
    let machines = HOSTILE_NAMES
        .iter()
        .map(|n| drifting(n, 0.0, 1.0, 5.0, SPAN_S))
        .collect();
    let r = report(machines);
    let table = r.table();
    assert_eq!(table.len(), 1 + HOSTILE_NAMES.len(), "{table:#?}");
    for line in &table {
        assert!(
            !line.chars().any(tracesync_protocol::text::needs_escape),
            "{line:?}"
        );
    }
    assert!(table[1].starts_with("vm\\nforged"), "{:?}", table[1]);
    let svg = svg_of(&r);
    assert!(!svg.contains('\u{1b}') && !svg.contains('\u{200f}') && !svg.contains('\u{2028}'));
    assert!(
        svg.contains("rlm\\u{200f}mac"),
        "the caption names it escaped"
    );
}

/// `<text>` elements of an SVG: x, y, anchor, text.
fn texts(svg: &str) -> Vec<(f64, f64, String, String)> {
    let attr = |attrs: &str, name: &str| -> Option<String> {
        let from = attrs.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(attrs[from..].split('"').next()?.to_owned())
    };
    svg.split("<text")
        .skip(1)
        .filter_map(|chunk| {
            let (attrs, rest) = chunk.split_once('>')?;
            let body = rest.split("</text>").next()?.trim().to_owned();
            let x = attr(attrs, "x")?.parse().ok()?;
            let y = attr(attrs, "y")?.parse().ok()?;
            Some((x, y, attr(attrs, "text-anchor")?, body))
        })
        .collect()
}

/// Points of the polylines stroked `color`.
fn polylines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    svg.split("<polyline")
        .skip(1)
        .filter(|chunk| chunk.contains(&format!("stroke=\"{color}\"")))
        .filter_map(|chunk| {
            let points = chunk.split("points=\"").nth(1)?.split('"').next()?;
            let pairs = points.split_whitespace().filter_map(|p| {
                let (x, y) = p.split_once(',')?;
                Some((x.parse().ok()?, y.parse().ok()?))
            });
            Some(pairs.collect())
        })
        .collect()
}

fn svg_of(report: &Report) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.svg");
    draw(report, &out).expect("drawn");
    std::fs::read_to_string(&out).expect("svg")
}

/// The panel whose caption starts with `caption`: its left x and top y.
fn panel(texts: &[(f64, f64, String, String)], caption: &str) -> (f64, f64) {
    let c = texts
        .iter()
        .find(|t| t.3.starts_with(caption))
        .unwrap_or_else(|| panic!("no caption {caption}"));
    (c.0 - 14.0, c.1 - 4.0)
}

/// The numbers of a panel's y ticks (right-aligned left of its chart) and
/// its x ticks (centred under it), as (pixel, value).
fn ticks(texts: &[(f64, f64, String, String)], at: (f64, f64)) -> [Vec<(f64, f64)>; 2] {
    let inside = |t: &&(f64, f64, String, String)| {
        t.0 > at.0 && t.0 < at.0 + 500.0 && t.1 > at.1 + 44.0 && t.1 < at.1 + 300.0
    };
    let value = |t: &(f64, f64, String, String), px: f64| Some((px, t.3.parse::<f64>().ok()?));
    let y = texts
        .iter()
        .filter(inside)
        .filter(|t| t.2 == "end")
        .filter_map(|t| value(t, t.1))
        .collect();
    let x = texts
        .iter()
        .filter(inside)
        .filter(|t| t.2 == "middle")
        .filter_map(|t| value(t, t.0))
        .collect();
    [y, x]
}

#[test]
fn a_drifting_machines_offset_is_drawn_on_the_scale_of_its_bound() {
    let svg = svg_of(&report(vec![drifting("guest-vm", 11.1, 50.0, 5.0, SPAN_S)]));
    let texts = texts(&svg);
    let at = panel(&texts, "guest-vm: offset − fit");
    let [y, _] = ticks(&texts, at);
    let largest = y.iter().map(|t| t.1.abs()).fold(0.0, f64::max);
    // 50 ppm over 29 s is 1450 µs of drift; the residual ± 5 µs is not.
    assert!(y.len() >= 3 && largest <= 3.0 * 5.0, "{y:?}");
    assert!(largest >= 5.0, "the band must fit: {y:?}");
    let (offset_s, ppm) = fit_in(&svg, "guest-vm");
    assert!(
        (offset_s - 11.1).abs() < 2e-6 && ppm == "+50.00",
        "{offset_s} {ppm}"
    );
}

/// The offset (s) and drift ("+50.00") a machine's offset caption names.
fn fit_in(svg: &str, name: &str) -> (f64, String) {
    let texts = texts(svg);
    let at = panel(&texts, &format!("{name}: offset − fit (µs)"));
    let detail = texts
        .iter()
        .find(|t| t.0 == at.0 + 18.0 && t.1 == at.1 + 23.0);
    let rest = detail.and_then(|t| t.3.strip_prefix("fit: "));
    let (offset, drift) = rest.and_then(|r| r.trim().split_once(" s, ")).expect("fit");
    let drift = drift.strip_suffix(" ppm").expect("ppm");
    (offset.parse().expect("offset"), drift.to_owned())
}

#[test]
fn a_caption_names_the_fit_with_one_sign() {
    let svg = svg_of(&report(vec![drifting("server", -1.25, -12.0, 5.0, SPAN_S)]));
    let (offset_s, ppm) = fit_in(&svg, "server");
    assert!(
        (offset_s + 1.25).abs() < 2e-6 && ppm == "-12.00",
        "{offset_s} {ppm}"
    );
    assert!(!svg.contains("− -") && !svg.contains("+ -") && !svg.contains("--"));
}

#[test]
fn every_line_and_axis_runs_over_the_whole_capture() {
    let svg = svg_of(&report(vec![
        drifting("board", 7.3, 0.0, 5.0, 12.0),
        drifting("phone", 3.7, 8.0, 5.0, SPAN_S),
    ]));
    let texts = texts(&svg);
    for caption in [
        "board: offset",
        "board: round trip",
        "board: error bound",
        "phone: offset",
    ] {
        let [_, x] = ticks(&texts, panel(&texts, caption));
        let last = x.iter().map(|t| t.1).fold(0.0, f64::max);
        assert!(last >= SPAN_S - 5.0, "{caption}: {x:?}");
    }
    // The still machine's residual line reaches its last packet at 29 s.
    let at = panel(&texts, "board: offset");
    let [_, x] = ticks(&texts, at);
    let (first, last) = (x[0], x[x.len() - 1]);
    let end_px = first.0 + (SPAN_S - first.1) * (last.0 - first.0) / (last.1 - first.1);
    let reach = polylines(&svg, "#0000FF")
        .into_iter()
        .flatten()
        .filter(|p| p.0 > at.0 && p.0 < at.0 + 500.0 && p.1 > at.1 && p.1 < at.1 + 300.0)
        .map(|p| p.0)
        .fold(0.0, f64::max);
    assert!(
        reach >= end_px - 1.0,
        "line ends at {reach}, capture at {end_px}"
    );
}

#[test]
fn every_panel_has_a_legend() {
    let svg = svg_of(&report(vec![drifting("phone", 3.7, 8.0, 5.0, SPAN_S)]));
    let texts: Vec<String> = texts(&svg).into_iter().map(|t| t.3).collect();
    for label in [
        "offset − fit",
        "± error bound in force",
        "smallest round trip of the estimate",
        "error bound in force (covers each packet)",
    ] {
        assert!(texts.iter().any(|t| t == label), "{label}: {texts:?}");
    }
}

#[test]
fn an_empty_machine_is_drawn_without_a_bound() {
    let mut empty = MachineReport::new(4);
    empty.name = "quiet".into();
    let svg = svg_of(&report(vec![
        drifting("phone", 3.7, 8.0, 5.0, SPAN_S),
        empty,
    ]));
    let texts = texts(&svg);
    let row: Vec<&str> = texts
        .iter()
        .filter(|t| t.1 == texts.iter().find(|u| u.3 == "quiet").map_or(-1.0, |u| u.1))
        .map(|t| t.3.as_str())
        .collect();
    assert_eq!(row, ["quiet", "0", "0", "-", "-", "-", "0", "0"]);
    assert!(!texts.iter().any(|t| t.3 == "0.0 µs"));
    assert!(texts.iter().filter(|t| t.3 == "no samples").count() >= 3);
}

#[test]
fn the_svg_table_puts_each_column_at_one_x() {
    let svg = svg_of(&report(vec![
        drifting("phone", 3.7, 8.0, 5.0, SPAN_S),
        drifting("a-much-longer-name", 1.0, -3.0, 120.0, SPAN_S),
    ]));
    let texts = texts(&svg);
    let header_y = texts.iter().find(|t| t.3 == "machine").map(|t| t.1);
    let header: Vec<_> = texts.iter().filter(|t| Some(t.1) == header_y).collect();
    assert_eq!(header.len(), COLUMNS.len(), "one text per column");
    for name in ["phone", "a-much-longer-name"] {
        let y = texts.iter().find(|t| t.3 == name).map(|t| t.1);
        let row: Vec<_> = texts.iter().filter(|t| Some(t.1) == y).collect();
        assert_eq!(row.len(), header.len(), "{row:?}");
        for (cell, title) in row.iter().zip(&header) {
            assert_eq!(
                (cell.0, &cell.2),
                (title.0, &title.2),
                "{} under {}",
                cell.3,
                title.3
            );
        }
    }
}
