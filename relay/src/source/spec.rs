//! `--source` specs: `file:PATH`, `unix:PATH`, `stdin`,
//! `synthetic:RATE[,size=BYTES][,seqs=N]`.

use std::fmt;
use std::path::PathBuf;

/// Largest `size=` of synthetic packets (well under a batch).
pub const MAX_SYNTHETIC_SIZE: usize = 256 << 10;
/// Most `seqs=` of a synthetic source.
pub const MAX_SYNTHETIC_SEQS: u16 = 1024;
/// Highest synthetic rate, packets per second.
pub const MAX_SYNTHETIC_RATE: f64 = 100e6;
/// Default number of synthetic sequences.
pub const DEFAULT_SYNTHETIC_SEQS: u16 = 4;

/// Where a source's packets come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSpec {
    /// Follow a Perfetto trace file being written.
    File(PathBuf),
    /// Listen on a unix socket for producers writing Trace-framed packets.
    Unix(PathBuf),
    /// Trace-framed packets on standard input.
    Stdin,
    /// The built-in generator.
    Synthetic(SyntheticSpec),
}

/// `synthetic:RATE[,size=BYTES][,seqs=N]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// Packets per second.
    pub rate: f64,
    /// Pad packets to about this many bytes.
    pub size: Option<usize>,
    /// Number of sequences the packets are spread over.
    pub seqs: u16,
}

const USAGE: &str = "expected file:PATH, unix:PATH, stdin or synthetic:RATE[,size=BYTES][,seqs=N]";

impl SourceSpec {
    /// Parses one `--source` value; the error is one line naming the spec.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("source {text:?}: {why}");
        if text == "stdin" || text == "-" {
            return Ok(Self::Stdin);
        }
        let Some((kind, rest)) = text.split_once(':') else {
            return Err(bad(USAGE));
        };
        match kind {
            "file" | "unix" => {
                if rest.is_empty() {
                    return Err(bad(&format!("{kind}: needs a path ({kind}:PATH)")));
                }
                let path = PathBuf::from(rest);
                Ok(if kind == "file" {
                    Self::File(path)
                } else {
                    Self::Unix(path)
                })
            }
            "synthetic" => SyntheticSpec::parse(rest)
                .map(Self::Synthetic)
                .map_err(|e| bad(&e)),
            _ => Err(bad(&format!("unknown kind {kind:?}; {USAGE}"))),
        }
    }

    /// A short label for logs and errors, e.g. `file:/tmp/t.pftrace`.
    pub fn label(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(p) => write!(f, "file:{}", p.display()),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
            Self::Stdin => f.write_str("stdin"),
            Self::Synthetic(s) => {
                write!(f, "synthetic:{}", s.rate)?;
                if let Some(size) = s.size {
                    write!(f, ",size={size}")?;
                }
                write!(f, ",seqs={}", s.seqs)
            }
        }
    }
}

impl SyntheticSpec {
    fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split(',');
        let rate_text = parts.next().unwrap_or_default();
        let rate = parse_rate(rate_text)?;
        let mut spec = Self {
            rate,
            size: None,
            seqs: DEFAULT_SYNTHETIC_SEQS,
        };
        for option in parts {
            let (key, value) = option.split_once('=').ok_or_else(|| {
                format!("option {option:?} is not KEY=VALUE (size=BYTES, seqs=N)")
            })?;
            match key {
                "size" => {
                    let size = parse_count(value)
                        .filter(|&s| s > 0 && s <= MAX_SYNTHETIC_SIZE as u64)
                        .ok_or_else(|| {
                            format!("size={value}: expected 1..={MAX_SYNTHETIC_SIZE} bytes")
                        })?;
                    spec.size = Some(size as usize);
                }
                "seqs" => {
                    spec.seqs = value
                        .parse::<u16>()
                        .ok()
                        .filter(|&n| (1..=MAX_SYNTHETIC_SEQS).contains(&n))
                        .ok_or_else(|| {
                            format!("seqs={value}: expected 1..={MAX_SYNTHETIC_SEQS}")
                        })?;
                }
                _ => return Err(format!("unknown option {key:?} (size=BYTES, seqs=N)")),
            }
        }
        Ok(spec)
    }
}

/// A rate in packets/s: a positive number, optionally with k or M.
fn parse_rate(text: &str) -> Result<f64, String> {
    let (digits, scale) = split_suffix(text);
    let rate = digits
        .parse::<f64>()
        .ok()
        .map(|r| r * scale)
        .filter(|r| r.is_finite() && *r > 0.0 && *r <= MAX_SYNTHETIC_RATE);
    rate.ok_or_else(|| {
        format!("rate {text:?}: expected packets per second, > 0 and <= 100M (e.g. 10000, 50k, 1M)")
    })
}

/// A whole count, optionally with k/K (x1024 for sizes is not used: k = 1000).
fn parse_count(text: &str) -> Option<u64> {
    let (digits, scale) = split_suffix(text);
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(scale as u64)
}

fn split_suffix(text: &str) -> (&str, f64) {
    if let Some(d) = text.strip_suffix(['k', 'K']) {
        (d, 1e3)
    } else if let Some(d) = text.strip_suffix('M') {
        (d, 1e6)
    } else {
        (text, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        assert_eq!(
            SourceSpec::parse("file:/tmp/a.pftrace"),
            Ok(SourceSpec::File("/tmp/a.pftrace".into()))
        );
        assert_eq!(
            SourceSpec::parse("unix:/run/p.sock"),
            Ok(SourceSpec::Unix("/run/p.sock".into()))
        );
        assert_eq!(SourceSpec::parse("stdin"), Ok(SourceSpec::Stdin));
        assert_eq!(
            SourceSpec::parse("synthetic:10000"),
            Ok(SourceSpec::Synthetic(SyntheticSpec {
                rate: 10000.0,
                size: None,
                seqs: 4
            }))
        );
        assert_eq!(
            SourceSpec::parse("synthetic:50k,size=4096,seqs=8"),
            Ok(SourceSpec::Synthetic(SyntheticSpec {
                rate: 50_000.0,
                size: Some(4096),
                seqs: 8
            }))
        );
        assert_eq!(
            SourceSpec::parse("synthetic:1M,seqs=1"),
            Ok(SourceSpec::Synthetic(SyntheticSpec {
                rate: 1e6,
                size: None,
                seqs: 1
            }))
        );
    }

    #[test]
    fn paths_keep_colons() {
        assert_eq!(
            SourceSpec::parse("file:a:b"),
            Ok(SourceSpec::File("a:b".into()))
        );
    }

    #[test]
    fn errors_are_one_line_and_name_the_spec() {
        for bad in [
            "",
            "tcp:1.2.3.4",
            "file:",
            "unix:",
            "synthetic:",
            "synthetic:0",
            "synthetic:-5",
            "synthetic:abc",
            "synthetic:1e12",
            "synthetic:100,size=0",
            "synthetic:100,size=99999999",
            "synthetic:100,seqs=0",
            "synthetic:100,seqs=5000",
            "synthetic:100,speed=3",
            "synthetic:100,size",
        ] {
            let e = SourceSpec::parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("source {bad:?}: ")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "file:/x",
            "unix:/y.sock",
            "stdin",
            "synthetic:2500,size=100,seqs=3",
        ] {
            let spec = SourceSpec::parse(text).unwrap();
            assert_eq!(SourceSpec::parse(&spec.to_string()), Ok(spec));
        }
    }
}
