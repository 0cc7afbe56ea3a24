//! `--mode` and `[ring]`: whether the relay streams or keeps a ring, and
//! the ring's bounds. The ring lives in the spool, so its bytes must fit
//! the spool's disk.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use tracesync_protocol::trigger::RelayMode;

use super::{ConfigError, Flags, Place, pick_range};

pub const DEFAULT_RING_SECONDS: u64 = 120;
pub const DEFAULT_RING_BYTES: u64 = 256 << 20;
/// Below this a ring holds too little of a machine's trace to be a window.
pub const MIN_RING_BYTES: u64 = 1 << 20;
/// How late a packet may reach the relay after its own timestamp: a
/// window is chosen this much wider on both sides (the daemon cuts it
/// exactly by the packets' times).
pub const RING_SOURCE_LAG: Duration = Duration::from_secs(2);

/// The file's `[ring]` section.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct RingSection {
    seconds: Option<Spanned<u64>>,
    bytes: Option<Spanned<u64>>,
}

/// The mode and the ring's bounds, after file and flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingSettings {
    pub mode: RelayMode,
    pub seconds: Duration,
    pub bytes: u64,
}

impl RingSettings {
    pub(super) fn pick(
        flags: &Flags,
        mode: Option<&Spanned<String>>,
        section: Option<&RingSection>,
        spool_disk_bytes: u64,
        place: Place<'_>,
    ) -> Result<Self, ConfigError> {
        let mode = match (flags.mode, mode) {
            (Some(mode), _) => mode,
            (None, Some(value)) => {
                RelayMode::parse(value.get_ref()).map_err(|m| place.at(value.span(), m))?
            }
            (None, None) => RelayMode::Stream,
        };
        let seconds = pick_range(
            flags.ring_seconds,
            section.and_then(|s| s.seconds.as_ref()),
            DEFAULT_RING_SECONDS,
            1..=86_400,
            "ring-seconds",
            place,
        )?;
        let file_bytes = section.and_then(|s| s.bytes.as_ref());
        let bytes = pick_range(
            flags.ring_bytes,
            file_bytes,
            DEFAULT_RING_BYTES,
            MIN_RING_BYTES..=u64::MAX,
            "ring-bytes",
            place,
        )?;
        if mode == RelayMode::Ring && bytes > spool_disk_bytes {
            let message = format!(
                "ring-bytes = {bytes} is over spool-disk-bytes = {spool_disk_bytes}: the ring \
                 lives in the spool; lower the ring or raise the spool"
            );
            return Err(match (flags.ring_bytes, file_bytes) {
                (None, Some(value)) => place.at(value.span(), message),
                _ => ConfigError::flag("ring-bytes", message),
            });
        }
        Ok(Self {
            mode,
            seconds: Duration::from_secs(seconds),
            bytes,
        })
    }
}

impl Default for RingSettings {
    fn default() -> Self {
        Self {
            mode: RelayMode::Stream,
            seconds: Duration::from_secs(DEFAULT_RING_SECONDS),
            bytes: DEFAULT_RING_BYTES,
        }
    }
}
