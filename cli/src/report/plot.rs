//! The report's picture (plotters): a title, how to read it and the
//! summary table on top, then one row per remote machine: the offset as
//! its residual around its least-squares line per epoch (`fit.rs`; the
//! fit's offset and drift in the caption) with the error bound in force as
//! a band around it, the round trip, and the bound alone; epoch changes as
//! vertical lines. Every panel's x axis is the whole capture, and a series
//! holds its last value until the machine's last packet. Each panel names
//! its lines in a legend under its caption. SVG or PNG by the output's
//! extension; text comes from the bundled DejaVu fonts (`pen.rs`), so no
//! system font is needed.

use std::ops::Range;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use tracesync_common::exit;

use super::fit::{self, Fit, Residual};
use super::pen::{DrawResult, FONT, Face, Look, MONO, Pen, width};
use super::{COLUMNS, MachineReport, Report};
use crate::merge::capture::CaptureError;

const WIDTH: u32 = 1500;
const ROW: u32 = 300;
/// The table's line height and character cell (px).
const LINE: i32 = 18;
const CELL: i32 = 8;
/// Where the table starts (px from the top), under the title and the note.
const TABLE_TOP: i32 = 56;
/// A panel's caption, detail line and legend, above its chart (px).
const HEAD: u32 = 62;
/// Spans a residual line is drawn with at most (about two per pixel).
const BUCKETS: usize = 1000;

const RESIDUAL: RGBColor = BLUE;
const BOUND: RGBColor = RGBColor(220, 0, 0);
const ROUND_TRIP: RGBColor = RGBColor(0, 140, 0);
const EPOCH: RGBColor = MAGENTA;
const MUTED: RGBColor = RGBColor(100, 100, 100);

const NOTE: &str = "offset − fit: the offset in force (each sample holds until the next) minus its least-squares line (weighed by time held / bound²), one per epoch; band: ± the error bound in force; x: s from the capture's start";

/// Draws `report` to `out` (.svg or .png).
pub fn draw(report: &Report, out: &std::path::Path) -> Result<(), CaptureError> {
    static FONT_ONCE: Once = Once::new();
    FONT_ONCE.call_once(|| {
        // For plotters' own text (tick labels). The bundled font is
        // valid: registering cannot fail.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(MONO, FontStyle::Normal, dejavu::sans_mono::regular());
    });
    let table_h = table_height(report);
    let height = table_h + ROW * report.machines.len().max(1) as u32;
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let failed = |e: String| CaptureError {
        line: format!("{}: cannot draw the report: {e}", out.display()),
        code: exit::CANTCREAT,
    };
    match ext.as_deref() {
        Some("png") => {
            let root = BitMapBackend::new(out, (WIDTH, height)).into_drawing_area();
            draw_on(&root, report, table_h, Pen::Pixels).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        Some("svg") => {
            let root = SVGBackend::new(out, (WIDTH, height)).into_drawing_area();
            draw_on(&root, report, table_h, Pen::Svg).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        _ => Err(CaptureError {
            line: format!("{}: give an output ending in .svg or .png", out.display()),
            code: exit::USAGE,
        }),
    }
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn table_height(report: &Report) -> u32 {
    (TABLE_TOP + LINE * (report.machines.len() as i32 + 1) + 16) as u32
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &Report,
    table_h: u32,
    pen: Pen,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(table_h);
    heading(&top, report, pen)?;
    if report.machines.is_empty() {
        let look = Look::new(Face::Sans, 16.0);
        return pen.text(&rest, "no remote machine in this capture", (10, 10), &look);
    }
    let rows = rest.split_evenly((report.machines.len(), 3));
    for (m, row) in report.machines.iter().zip(rows.chunks(3)) {
        let [offset, rtt, bound] = row else {
            continue;
        };
        offset_panel(offset, m, report.span_s, pen)?;
        let round_trip = Series {
            what: "round trip (µs)",
            legend: "smallest round trip of the estimate",
            values: &m.rtt_us,
            color: ROUND_TRIP,
        };
        series_panel(rtt, m, &round_trip, report.span_s, pen)?;
        let bounds = Series {
            what: "error bound (µs)",
            legend: "error bound in force (covers each packet)",
            values: &m.bound_us,
            color: BOUND,
        };
        series_panel(bound, m, &bounds, report.span_s, pen)?;
    }
    Ok(())
}

/// Title, note and the summary table, one text per cell at its column's
/// x (left edge for the machine, right edge for the numbers).
fn heading<DB: DrawingBackend>(
    top: &DrawingArea<DB, Shift>,
    report: &Report,
    pen: Pen,
) -> DrawResult<DB> {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let (files, machines) = (report.files, report.machines.len());
    let title = format!(
        "tracesync sync quality: {files} file{}, {:.1} s, {machines} remote machine{}",
        plural(files),
        report.span_s,
        plural(machines),
    );
    pen.text(top, &title, (10, 6), &Look::new(Face::Sans, 18.0))?;
    let note = Look::new(Face::Sans, 13.0).color(MUTED);
    pen.text(top, NOTE, (10, 30), &note)?;
    let titles = COLUMNS.map(|c| c.0.to_owned());
    let rows = std::iter::once(titles).chain(report.machines.iter().map(MachineReport::cells));
    for (i, cells) in rows.enumerate() {
        let y = TABLE_TOP + LINE * i as i32;
        let mut end = 0;
        for (j, (cell, (_, w))) in cells.iter().zip(COLUMNS).enumerate() {
            let look = Look::new(Face::Mono, 15.0);
            if j == 0 {
                pen.text(top, cell, (10, y), &look)?;
                end = w as i32;
            } else {
                end += 1 + w as i32;
                pen.text(top, cell, (10 + CELL * end, y), &look.right())?;
            }
        }
    }
    Ok(())
}

/// What a legend shows beside its text.
enum Swatch {
    Line(RGBColor),
    Band(RGBColor),
}

/// What a panel says above its chart: caption, a line of detail (the
/// fit, the range), and the legend.
struct Head<'a> {
    caption: String,
    detail: String,
    legend: Vec<(Swatch, &'a str)>,
}

/// Draws `head` at the top of `area`; returns the rest, for the chart.
fn head<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    head: &Head<'_>,
    pen: Pen,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (top, chart) = area.split_vertically(HEAD);
    pen.text(&top, &head.caption, (14, 4), &Look::new(Face::Sans, 15.0))?;
    let look = Look::new(Face::Sans, 13.0);
    pen.text(&top, &head.detail, (18, 23), &look.color(MUTED))?;
    let (mut x, y) = (18, 42);
    for (swatch, text) in &head.legend {
        match swatch {
            Swatch::Line(c) => {
                top.draw(&Rectangle::new([(x, y + 6), (x + 20, y + 8)], c.filled()))?
            }
            Swatch::Band(c) => {
                top.draw(&Rectangle::new(
                    [(x, y + 1), (x + 20, y + 13)],
                    c.mix(0.2).filled(),
                ))?;
            }
        }
        pen.text(&top, text, (x + 26, y), &look)?;
        x += 26 + width(text, &look) + 18;
    }
    Ok(chart)
}

fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    span: f64,
    y: Range<f64>,
) -> Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..span.max(1e-3), y)?;
    chart
        .configure_mesh()
        .x_desc("s")
        .label_style((FONT, 12))
        .max_light_lines(1)
        .bold_line_style(RGBColor(215, 215, 215))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    Ok(chart)
}

/// "fit: +11.101234 s, +50.00 ppm": the line's value at its epoch's
/// first sample and its slope; with epochs, how many and the last one's.
fn describe(fits: &[Fit]) -> String {
    let one = |f: &Fit| format!("{:+.6} s, {:+.2} ppm", f.offset_us / 1e6, f.drift_ppm);
    match fits {
        [] => "no offset samples".to_owned(),
        [f] => format!("fit: {}", one(f)),
        [.., f] => format!(
            "{} epochs, a fit each; the last from {:.1} s: {}",
            fits.len(),
            f.from_s,
            one(f)
        ),
    }
}

fn offset_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &MachineReport,
    span: f64,
    pen: Pen,
) -> DrawResult<DB> {
    let changes: Vec<f64> = m.epochs.iter().map(|e| e.0).collect();
    let r = fit::residual(&m.offset_us, &m.bound_us, &changes, m.last_s, BUCKETS);
    let mut legend = vec![
        (Swatch::Line(RESIDUAL), "offset − fit"),
        (Swatch::Band(BOUND), "± error bound in force"),
    ];
    if !m.epochs.is_empty() {
        legend.push((Swatch::Line(EPOCH), "epoch change"));
    }
    let scale = r.scale();
    let mut detail = describe(&r.fits);
    if let Some((seconds, farthest)) = scale.off {
        detail.push_str(&format!(
            "; off scale: {seconds:.2} s, to {farthest:+.0} µs"
        ));
    }
    let top = Head {
        caption: format!("{}: offset − fit (µs)", m.name),
        detail,
        legend,
    };
    let below = head(area, &top, pen)?;
    let y = scale.lo..scale.hi;
    let mut chart = chart(&below, span, y.clone())?;
    residual(&mut chart, &r, span, &y)?;
    epochs(&mut chart, &below, &m.epochs, &y, pen)?;
    if r.pieces.is_empty() {
        no_samples(&below, pen)?;
    }
    Ok(())
}

/// The band, the fit (0) and the residual line, held inside `y` (a
/// clipped scale's off-scale values run along its edge).
fn residual<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    r: &Residual,
    span: f64,
    y: &Range<f64>,
) -> DrawResult<DB> {
    let on = |v: f64| v.clamp(y.start, y.end);
    for piece in &r.pieces {
        let upper = piece
            .iter()
            .flat_map(|s| [(s.a, on(s.up.0)), (s.b, on(s.up.1))]);
        let lower = piece
            .iter()
            .rev()
            .flat_map(|s| [(s.b, on(s.down.1)), (s.a, on(s.down.0))]);
        let band = Polygon::new(
            upper.chain(lower).collect::<Vec<_>>(),
            BOUND.mix(0.2).filled(),
        );
        chart.draw_series(std::iter::once(band))?;
    }
    chart.draw_series(LineSeries::new([(0.0, 0.0), (span, 0.0)], &MUTED.mix(0.6)))?;
    for piece in &r.pieces {
        let mut line = Vec::with_capacity(piece.len() * 2);
        for s in piece {
            line.push((s.a, on(s.first)));
            // A merged span: its extremes too.
            if s.lo < s.first.min(s.last) || s.hi > s.first.max(s.last) {
                let mid = (s.a + s.b) / 2.0;
                line.extend([(mid, on(s.hi)), (mid, on(s.lo))]);
            }
            line.push((s.b, on(s.last)));
        }
        chart.draw_series(LineSeries::new(line, RESIDUAL.stroke_width(1)))?;
    }
    Ok(())
}

/// A panel of one track drawn as a step line.
struct Series<'a> {
    what: &'a str,
    legend: &'a str,
    values: &'a [(f64, f64)],
    color: RGBColor,
}

fn series_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &MachineReport,
    series: &Series<'_>,
    span: f64,
    pen: Pen,
) -> DrawResult<DB> {
    let mut items = vec![(Swatch::Line(series.color), series.legend)];
    if !m.epochs.is_empty() {
        items.push((Swatch::Line(EPOCH), "epoch change"));
    }
    let steps = steps(series.values, m.last_s);
    let (lo, hi) = steps.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.1), hi.max(p.1))
    });
    let detail = match series.values.last() {
        Some(last) => format!("from {lo:.1} to {hi:.1} µs, last {:.1} µs", last.1),
        None => "no samples".to_owned(),
    };
    let top = Head {
        caption: format!("{}: {}", m.name, series.what),
        detail,
        legend: items,
    };
    let below = head(area, &top, pen)?;
    let (lo, hi) = fit::padded(lo.min(0.0), hi.max(0.0));
    let y = lo..hi;
    let mut chart = chart(&below, span, y.clone())?;
    chart.draw_series(LineSeries::new(steps, &series.color))?;
    epochs(&mut chart, &below, &m.epochs, &y, pen)?;
    if series.values.is_empty() {
        no_samples(&below, pen)?;
    }
    Ok(())
}

/// A step line: each value holds until the next, the last until `end`.
fn steps(values: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut out = Vec::with_capacity(sorted.len() * 2 + 1);
    for (i, &(t, v)) in sorted.iter().enumerate() {
        if let Some(&(_, before)) = i.checked_sub(1).and_then(|j| sorted.get(j)) {
            out.push((t, before));
        }
        out.push((t, v));
    }
    if let Some(&(t, v)) = sorted.last() {
        out.push((end.max(t), v));
    }
    out
}

fn no_samples<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, pen: Pen) -> DrawResult<DB> {
    let (w, h) = area.dim_in_pixel();
    let look = Look::new(Face::Sans, 15.0).color(MUTED);
    let text = "no samples";
    pen.text(
        area,
        text,
        ((w as i32 - width(text, &look)) / 2, h as i32 / 2 - 20),
        &look,
    )
}

/// Epoch changes: a vertical line each, named at its top.
fn epochs<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    area: &DrawingArea<DB, Shift>,
    marks: &[(f64, String)],
    y: &Range<f64>,
    pen: Pen,
) -> DrawResult<DB> {
    let base = area.get_base_pixel();
    let look = Look::new(Face::Sans, 12.0).color(EPOCH);
    for (t, what) in marks {
        chart.draw_series(LineSeries::new([(*t, y.start), (*t, y.end)], &EPOCH))?;
        let (x, top) = chart.backend_coord(&(*t, y.end));
        pen.text(area, what, (x - base.0 + 3, top - base.1 + 2), &look)?;
    }
    Ok(())
}
