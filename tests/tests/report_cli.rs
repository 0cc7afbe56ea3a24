//! `tracesync report` on the demo's output draws a picture and exits 0;
//! bad input gets one clear line and the sysexits code (65 not a capture,
//! 66 an empty directory).

use std::process::{Command, Output};

use tracesync_tests::live;

fn tracesync(args: &[&str]) -> Output {
    Command::new(live::bin("tracesync"))
        .args(args)
        .output()
        .expect("run tracesync")
}

/// Width and height of a PNG (its IHDR chunk), if `bytes` is one.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.get(..8)? != b"\x89PNG\r\n\x1a\n" || bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    let be = |r: std::ops::Range<usize>| Some(u32::from_be_bytes(bytes.get(r)?.try_into().ok()?));
    Some((be(16..20)?, be(20..24)?))
}

#[test]
fn report_on_the_demo_output_draws_a_picture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let out_s = out.to_str().expect("utf-8");
    let demo = tracesync(&[
        "demo",
        "--relays",
        "2",
        "--seconds",
        "4",
        "--out",
        out_s,
        "--metrics-listen",
        "off",
    ]);
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(
        demo.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    // The demo's table gives the bound each packet had, and its report.
    assert!(text.contains("p99 bound (us)"), "{text}");
    let beside = out.join("sync-report.png");
    let drawn = std::fs::read(&beside).expect("the demo wrote its report");
    assert!(png_size(&drawn).is_some(), "{}", beside.display());

    let png = dir.path().join("r.png");
    let run = tracesync(&[
        "report",
        &format!("{out_s}/output"),
        "-o",
        png.to_str().expect("utf-8"),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let bytes = std::fs::read(&png).expect("report written");
    let (w, h) = png_size(&bytes).expect("a PNG");
    println!("{stdout}report PNG {w}x{h}, {} bytes", bytes.len());
    assert!(w >= 800 && h >= 400 && bytes.len() > 20_000);
    // One table row per relay machine.
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" µs ")).count(),
        2,
        "{stdout}"
    );
    let svg = dir.path().join("r.svg");
    let run = tracesync(&[
        "report",
        &format!("{out_s}/output"),
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    assert!(run.status.success());
    let svg_text = std::fs::read_to_string(&svg).expect("svg");
    assert!(svg_text.starts_with("<svg") && svg_text.contains("error bound"));
}

fn one_line_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn report_on_bad_input_says_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let run = tracesync(&["report", empty.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(66), "{line}");
    assert!(line.contains("no rolled files"), "{line}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a trace\n").expect("write");
    let run = tracesync(&["report", text.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(65), "{line}");
    assert!(line.contains("not a rolling capture"), "{line}");

    // A rolled file's name on bytes that are no trace: file and offset.
    let fake = dir.path().join("tracesync-20260101T000000Z-000001.pftrace");
    std::fs::write(&fake, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff").expect("write");
    let run = tracesync(&["report", fake.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(65), "{line}");
    assert!(
        line.contains("byte offset") && line.contains(&*fake.to_string_lossy()),
        "{line}"
    );
}

/// `<text>` elements of an SVG: x, y, anchor, text.
fn svg_texts(svg: &str) -> Vec<(f64, f64, String, String)> {
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

/// A panel of the report: its left x and top y (its caption sits at
/// +14, +4), 500 px wide and 300 high, the chart below its 62 px head.
struct Panel {
    x: f64,
    y: f64,
}

impl Panel {
    fn find(texts: &[(f64, f64, String, String)], caption: &str) -> Panel {
        let c = texts
            .iter()
            .find(|t| t.3 == caption)
            .unwrap_or_else(|| panic!("no panel {caption}"));
        Panel {
            x: c.0 - 14.0,
            y: c.1 - 4.0,
        }
    }

    fn holds(&self, x: f64, y: f64) -> bool {
        x > self.x && x < self.x + 500.0 && y > self.y + 62.0 && y < self.y + 300.0
    }

    /// Its y ticks (right-aligned) and x ticks (centred) as (pixel, value).
    fn ticks(&self, texts: &[(f64, f64, String, String)]) -> [Vec<(f64, f64)>; 2] {
        let pick = |anchor: &str, x_axis: bool| {
            texts
                .iter()
                .filter(|t| t.2 == anchor && self.holds(t.0, t.1))
                .filter_map(|t| Some((if x_axis { t.0 } else { t.1 }, t.3.parse().ok()?)))
                .collect::<Vec<(f64, f64)>>()
        };
        [pick("end", false), pick("middle", true)]
    }
}

/// The rightmost x of the polylines stroked `color` in `panel`.
fn reach(svg: &str, color: &str, panel: &Panel) -> f64 {
    svg.split("<polyline")
        .filter(|p| p.contains(&format!("stroke=\"{color}\"")))
        .filter_map(|p| p.split("points=\"").nth(1)?.split('"').next())
        .flat_map(|points| points.split_whitespace())
        .filter_map(|p| {
            let (x, y) = p.split_once(',')?;
            Some((x.parse::<f64>().ok()?, y.parse::<f64>().ok()?))
        })
        .filter(|p| panel.holds(p.0, p.1))
        .map(|p| p.0)
        .fold(0.0, f64::max)
}

/// The demo's relays 2 and 4 run 50 ppm fast and at 0 ppm. The report
/// draws each offset as its residual around its fit, on the scale of its
/// bound; the still relay's offset (no new sample once the estimate
/// settles) runs to its last packet; panels have legends; the table's
/// columns sit at one x each.
#[test]
fn report_of_a_drifting_and_a_still_relay_is_judged_at_a_glance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let out_s = out.to_str().expect("utf-8");
    let demo = tracesync(&[
        "demo",
        "--relays",
        "4",
        "--seconds",
        "10",
        "--rate",
        "500",
        "--out",
        out_s,
        "--metrics-listen",
        "off",
    ]);
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let svg = dir.path().join("r.svg");
    let run = tracesync(&[
        "report",
        &format!("{out_s}/output"),
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}");
    let svg = std::fs::read_to_string(&svg).expect("svg");
    let texts = svg_texts(&svg);
    let span: f64 = texts
        .iter()
        .find_map(|t| t.3.strip_prefix("tracesync sync quality: "))
        .and_then(|title| title.split(", ").nth(1)?.strip_suffix(" s")?.parse().ok())
        .expect("the capture's length in the title");

    for name in ["phone", "guest-vm", "server", "board"] {
        // The table's largest per-packet bound of this machine (µs).
        let row = stdout.lines().find(|l| l.starts_with(&format!("{name} ")));
        let max_bound: f64 = row
            .and_then(|r| r.split_whitespace().nth(7)?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in\n{stdout}"));
        let offset = Panel::find(&texts, &format!("{name}: offset − fit (µs)"));
        let [y, x] = offset.ticks(&texts);
        let largest = y.iter().map(|t| t.1.abs()).fold(0.0, f64::max);
        assert!(
            y.len() >= 3 && largest <= 3.0 * max_bound,
            "{name}: axis {y:?} for a bound of at most {max_bound} µs"
        );
        for caption in ["round trip (µs)", "error bound (µs)"] {
            let panel = Panel::find(&texts, &format!("{name}: {caption}"));
            let [_, x] = panel.ticks(&texts);
            let last = x.iter().map(|t| t.1).fold(0.0, f64::max);
            assert!(last >= span - 2.5, "{name}: {caption} {x:?} of {span} s");
        }
        let last = x.iter().map(|t| t.1).fold(0.0, f64::max);
        assert!(last >= span - 2.5, "{name}: {x:?} of {span} s");
        // The residual line (blue) runs as far as the round trip (green):
        // to the machine's last packet.
        let rtt = Panel::find(&texts, &format!("{name}: round trip (µs)"));
        let residual_end = reach(&svg, "#0000FF", &offset) - offset.x;
        let rtt_end = reach(&svg, "#008C00", &rtt) - rtt.x;
        assert!(
            rtt_end > 400.0 && (residual_end - rtt_end).abs() <= 2.0,
            "{name}: the offset ends at {residual_end} px, the round trip at {rtt_end} px"
        );
    }
    // The fit names the fast relay's drift, with one sign.
    let fit = texts.iter().find_map(|t| {
        let f = t.3.strip_prefix("fit: ")?;
        (f.contains("ppm") && t.1 > Panel::find(&texts, "guest-vm: offset − fit (µs)").y)
            .then_some(f)
    });
    let ppm: f64 = fit
        .and_then(|f| f.split(", ").nth(1)?.strip_suffix(" ppm")?.parse().ok())
        .expect("guest-vm's fit");
    assert!((ppm - 50.0).abs() < 1.0, "{fit:?}");
    // Legends: what each line and band is, once per machine.
    for label in [
        "offset − fit",
        "± error bound in force",
        "smallest round trip of the estimate",
    ] {
        assert_eq!(texts.iter().filter(|t| t.3 == label).count(), 4, "{label}");
    }
    // The table: one text per cell, each column's cells at one x.
    let header_y = texts.iter().find(|t| t.3 == "machine").map(|t| t.1);
    let header: Vec<_> = texts.iter().filter(|t| Some(t.1) == header_y).collect();
    assert_eq!(header.len(), 8, "{header:?}");
    for name in ["phone", "board"] {
        let y = texts.iter().find(|t| t.3 == name).map(|t| t.1);
        let row: Vec<_> = texts.iter().filter(|t| Some(t.1) == y).collect();
        assert_eq!(row.len(), 8, "{row:?}");
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
