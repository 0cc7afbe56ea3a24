//! The report's picture (plotters): the summary table on top, then one row
//! per remote machine: offset (minus its median, so µs changes show next
//! to an offset of hours) with its error bound as a band, round trip, and
//! the bound alone; epoch changes as vertical lines. SVG or PNG by the
//! output's extension; text is drawn with DejaVu Sans, bundled, so no
//! system font is needed.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use tracesync_common::exit;

use super::{MachineReport, Report};
use crate::merge::capture::CaptureError;

const FONT: &str = "sans-serif";
const MONO: &str = "monospace";
const WIDTH: u32 = 1500;
const ROW: u32 = 300;
const LINE: u32 = 18;

/// Draws `report` to `out` (.svg or .png).
pub fn draw(report: &Report, out: &Path) -> Result<(), CaptureError> {
    static FONT_ONCE: Once = Once::new();
    FONT_ONCE.call_once(|| {
        // The bundled font is valid: registering cannot fail.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(MONO, FontStyle::Normal, dejavu::sans_mono::regular());
    });
    let table_h = LINE * (report.table().len() as u32 + 3);
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
            draw_on(&root, report, table_h).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        Some("svg") => {
            let root = SVGBackend::new(out, (WIDTH, height)).into_drawing_area();
            draw_on(&root, report, table_h).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        _ => Err(CaptureError {
            line: format!("{}: give an output ending in .svg or .png", out.display()),
            code: exit::USAGE,
        }),
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &Report,
    table_h: u32,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(table_h);
    let title = format!(
        "tracesync sync quality: {} files, {:.1} s, {} remote machines (per-packet error bounds)",
        report.files,
        report.span_s,
        report.machines.len()
    );
    let mono = (MONO, 15).into_font();
    top.draw_text(&title, &(FONT, 18).into_font().color(&BLACK), (10, 6))?;
    for (i, line) in report.table().iter().enumerate() {
        let y = (LINE * (i as u32 + 2)) as i32;
        top.draw_text(line, &mono.clone().color(&BLACK), (10, y))?;
    }
    if report.machines.is_empty() {
        rest.draw_text(
            "no remote machine in this capture",
            &(FONT, 16).into_font().color(&BLACK),
            (10, 10),
        )?;
        return Ok(());
    }
    let rows = rest.split_evenly((report.machines.len(), 3));
    for (i, m) in report.machines.iter().enumerate() {
        offset_panel(&rows[i * 3], m, report.span_s)?;
        series_panel(
            &rows[i * 3 + 1],
            &format!("{}: round trip (µs)", m.name),
            &m.rtt_us,
            &m.epochs,
            report.span_s,
            &GREEN,
        )?;
        series_panel(
            &rows[i * 3 + 2],
            &format!("{}: error bound (µs)", m.name),
            &m.bound_us,
            &m.epochs,
            report.span_s,
            &RED,
        )?;
    }
    Ok(())
}

/// Median of the values (0 for none).
fn median(values: &[(f64, f64)]) -> f64 {
    let mut v: Vec<f64> = values.iter().map(|p| p.1).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The bound in force at time `t` (the last sample at or before it).
fn bound_at(bounds: &[(f64, f64)], t: f64) -> f64 {
    let i = bounds.partition_point(|p| p.0 <= t);
    bounds.get(i.wrapping_sub(1)).map_or(0.0, |p| p.1)
}

fn y_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return -1.0..1.0;
    }
    let pad = ((hi - lo) * 0.1).max(0.5);
    (lo - pad)..(hi + pad)
}

fn offset_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &MachineReport,
    span: f64,
) -> DrawResult<DB> {
    let base = median(&m.offset_us);
    let band: Vec<(f64, f64, f64)> = m
        .offset_us
        .iter()
        .map(|&(t, v)| {
            let b = bound_at(&m.bound_us, t);
            (t, v - base - b, v - base + b)
        })
        .collect();
    let y = y_range(band.iter().flat_map(|b| [b.1, b.2]));
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: offset − {:.3} s (µs), ± bound", m.name, base / 1e6),
            (FONT, 15),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..span.max(1e-3), y.clone())?;
    chart
        .configure_mesh()
        .x_desc("s")
        .label_style((FONT, 12))
        .draw()?;
    chart.draw_series(LineSeries::new(
        band.iter().map(|b| (b.0, b.1)),
        &RED.mix(0.6),
    ))?;
    chart.draw_series(LineSeries::new(
        band.iter().map(|b| (b.0, b.2)),
        &RED.mix(0.6),
    ))?;
    chart.draw_series(LineSeries::new(
        m.offset_us.iter().map(|&(t, v)| (t, v - base)),
        &BLUE,
    ))?;
    epochs(&mut chart, &m.epochs, &y)?;
    Ok(())
}

fn series_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    values: &[(f64, f64)],
    epoch_marks: &[(f64, String)],
    span: f64,
    color: &RGBColor,
) -> DrawResult<DB> {
    let y = y_range(values.iter().map(|v| v.1).chain([0.0]));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..span.max(1e-3), y.clone())?;
    chart
        .configure_mesh()
        .x_desc("s")
        .label_style((FONT, 12))
        .draw()?;
    // A step line: each value holds until the next.
    let mut steps = Vec::with_capacity(values.len() * 2);
    for (i, &(t, v)) in values.iter().enumerate() {
        if i > 0 {
            steps.push((t, values[i - 1].1));
        }
        steps.push((t, v));
    }
    if let Some(&(_, v)) = values.last() {
        steps.push((span, v));
    }
    chart.draw_series(LineSeries::new(steps, color))?;
    epochs(&mut chart, epoch_marks, &y)?;
    Ok(())
}

fn epochs<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    marks: &[(f64, String)],
    y: &std::ops::Range<f64>,
) -> DrawResult<DB> {
    for (t, what) in marks {
        chart.draw_series(LineSeries::new([(*t, y.start), (*t, y.end)], &MAGENTA))?;
        chart.draw_series(std::iter::once(Text::new(
            what.clone(),
            (*t, y.end),
            (FONT, 12).into_font().color(&MAGENTA),
        )))?;
    }
    Ok(())
}
