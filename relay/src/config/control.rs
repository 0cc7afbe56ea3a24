//! `control-socket` and `trigger-on`: where `tracesync-relay trigger`
//! reaches the running relay, and which Perfetto trigger names in the
//! relay's packets fire a trigger.

use std::path::PathBuf;

use toml::Spanned;
use tracesync_protocol::trigger::check_trigger_name;

use super::{ConfigError, Flags, Place};
use crate::control::DEFAULT_CONTROL_SOCKET;

/// Trigger names `trigger-on` may list at most.
pub const MAX_TRIGGER_ON: usize = 64;

/// The control socket and the packet triggers, after file and flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlSettings {
    pub socket: PathBuf,
    /// The path was configured (its directory is made); the default's
    /// directory is systemd's to make.
    pub socket_configured: bool,
    /// Perfetto trigger names (TracePacket.trigger) that fire a trigger.
    pub trigger_on: Vec<String>,
}

impl Default for ControlSettings {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(DEFAULT_CONTROL_SOCKET),
            socket_configured: false,
            trigger_on: Vec::new(),
        }
    }
}

impl ControlSettings {
    pub(super) fn pick(
        flags: &Flags,
        socket: Option<&PathBuf>,
        trigger_on: Option<&Vec<Spanned<String>>>,
        place: Place<'_>,
    ) -> Result<Self, ConfigError> {
        let configured = flags.control_socket.clone().or_else(|| socket.cloned());
        let names = if flags.trigger_on.is_empty() {
            let mut names = Vec::new();
            for name in trigger_on.into_iter().flatten() {
                check_trigger_name(name.get_ref()).map_err(|m| place.at(name.span(), m))?;
                names.push(name.get_ref().clone());
            }
            names
        } else {
            for name in &flags.trigger_on {
                check_trigger_name(name).map_err(|m| ConfigError::flag("trigger-on", m))?;
            }
            flags.trigger_on.clone()
        };
        if names.len() > MAX_TRIGGER_ON {
            return Err(ConfigError::flag(
                "trigger-on",
                format!(
                    "{} trigger names; give at most {MAX_TRIGGER_ON}",
                    names.len()
                ),
            ));
        }
        let mut trigger_on = names;
        trigger_on.sort();
        trigger_on.dedup();
        Ok(Self {
            socket_configured: configured.is_some(),
            socket: configured.unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_SOCKET)),
            trigger_on,
        })
    }
}
