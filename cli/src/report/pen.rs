//! The report's own text: title, table, panel captions and legends. An SVG
//! gets one `<text>` element per piece, anchored where it belongs (the
//! viewer lays it out, so a right-aligned column stays aligned whatever
//! its font); a PNG gets each glyph of the bundled DejaVu fonts rasterised
//! at its pen position plus its side bearing (plotters' bitmap text drops
//! the bearing, which spaces a monospace table unevenly).

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use tracesync_protocol::text::escape_control;

/// The font families plotters' own text (tick labels) and an SVG name.
pub(super) const FONT: &str = "sans-serif";
pub(super) const MONO: &str = "monospace";

pub(super) type DrawResult<DB> =
    Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    Sans,
    Mono,
}

/// How a piece of text looks; `align` says which end of it is at its x.
#[derive(Clone, Copy)]
pub struct Look {
    pub face: Face,
    /// Plotters' size: the font's height in pixels.
    pub size: f64,
    pub color: RGBColor,
    pub align: HPos,
}

impl Look {
    pub const fn new(face: Face, size: f64) -> Self {
        Self {
            face,
            size,
            color: BLACK,
            align: HPos::Left,
        }
    }

    pub const fn color(self, color: RGBColor) -> Self {
        Self { color, ..self }
    }

    pub const fn right(self) -> Self {
        Self {
            align: HPos::Right,
            ..self
        }
    }
}

/// Which kind of output the text goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pen {
    Svg,
    Pixels,
}

fn font(face: Face) -> Option<&'static FontRef<'static>> {
    static SANS: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    static SANS_MONO: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    let (cell, bytes) = match face {
        Face::Sans => (&SANS, dejavu::sans::regular()),
        Face::Mono => (&SANS_MONO, dejavu::sans_mono::regular()),
    };
    cell.get_or_init(|| FontRef::try_from_slice(bytes).ok())
        .as_ref()
}

/// The width of `text` in pixels, as the PNG lays it out (an SVG viewer's
/// font is about as wide).
pub fn width(text: &str, look: &Look) -> i32 {
    let Some(font) = font(look.face) else {
        return (text.chars().count() as f64 * look.size * 0.6) as i32;
    };
    let scaled = font.as_scaled(PxScale::from(look.size as f32));
    let (mut x, mut prev) = (0.0f32, None);
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            x += scaled.kern(p, id);
        }
        x += scaled.h_advance(id);
        prev = Some(id);
    }
    x.ceil() as i32
}

impl Pen {
    /// Draws `text` with its top at `pos.1` and its `look.align` end at
    /// `pos.0`.
    pub fn text<DB: DrawingBackend>(
        self,
        area: &DrawingArea<DB, Shift>,
        text: &str,
        pos: (i32, i32),
        look: &Look,
    ) -> DrawResult<DB> {
        // Names and epoch labels come from the capture: a control or
        // reordering character prints escaped, as in the terminal.
        let text = escape_control(text);
        let text = text.as_ref();
        match (self, font(look.face)) {
            (Pen::Pixels, Some(font)) => glyphs(area, font, text, pos, look),
            // The bundled fonts always parse: plotters' text is a fallback
            // only in name.
            _ => {
                let family = match look.face {
                    Face::Sans => FONT,
                    Face::Mono => MONO,
                };
                let style = (family, look.size)
                    .into_font()
                    .color(&look.color)
                    .pos(Pos::new(look.align, VPos::Top));
                area.draw_text(text, &style, pos)
            }
        }
    }
}

fn glyphs<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    font: &FontRef<'static>,
    text: &str,
    pos: (i32, i32),
    look: &Look,
) -> DrawResult<DB> {
    let scaled = font.as_scaled(PxScale::from(look.size as f32));
    let shift = match look.align {
        HPos::Left => 0,
        HPos::Center => width(text, look) / 2,
        HPos::Right => width(text, look),
    };
    let baseline = pos.1 as f32 + scaled.ascent();
    let (mut x, mut prev) = ((pos.0 - shift) as f32, None);
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            x += scaled.kern(p, id);
        }
        let glyph = id.with_scale_and_position(scaled.scale(), point(x, baseline));
        x += scaled.h_advance(id);
        prev = Some(id);
        // A space has no outline.
        let Some(outline) = font.outline_glyph(glyph) else {
            continue;
        };
        let corner = outline.px_bounds().min;
        let mut pixels = Vec::new();
        outline.draw(|gx, gy, coverage| {
            if coverage > 0.0 {
                pixels.push((gx as i32, gy as i32, coverage.min(1.0)));
            }
        });
        for (gx, gy, coverage) in pixels {
            let at = (corner.x as i32 + gx, corner.y as i32 + gy);
            area.draw_pixel(at, &look.color.mix(f64::from(coverage)))?;
        }
    }
    Ok(())
}
