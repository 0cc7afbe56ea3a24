//! `[trigger]` of the daemon config: the flight recorder's limits on
//! triggers, range-checked while parsing (one line naming the key). They
//! apply at start (a restart takes new values).

use serde::Deserialize;
use tracesync_core::trigger::TriggerConfig;

const S: u64 = 1_000_000_000;

/// `[trigger]`: how often one trigger name may fire, and how long a fired
/// trigger is still sent to ring relays that connect later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TriggerSection {
    /// Triggers of one name that may fire within `per-seconds`; more are
    /// refused and counted.
    #[serde(deserialize_with = "max_per_name")]
    pub max_per_name: u64,
    #[serde(deserialize_with = "per_seconds")]
    pub per_seconds: u64,
    /// How long after its window's end a trigger is still sent to a ring
    /// relay that connects (s).
    #[serde(deserialize_with = "remember_seconds")]
    pub remember_seconds: u64,
    /// Fired triggers remembered (and snapshots tracked) at most.
    #[serde(deserialize_with = "max_remembered")]
    pub max_remembered: u64,
}

impl Default for TriggerSection {
    fn default() -> Self {
        let core = TriggerConfig::default();
        Self {
            max_per_name: u64::from(core.max_per_name),
            per_seconds: core.per_ns / S,
            remember_seconds: core.remember_ns / S,
            max_remembered: core.max_remembered as u64,
        }
    }
}

impl TriggerSection {
    /// Core's trigger table configuration.
    pub fn trigger_config(&self) -> TriggerConfig {
        TriggerConfig {
            max_per_name: u32::try_from(self.max_per_name).unwrap_or(u32::MAX),
            per_ns: self.per_seconds.saturating_mul(S),
            remember_ns: self.remember_seconds.saturating_mul(S),
            max_remembered: usize::try_from(self.max_remembered).unwrap_or(usize::MAX),
        }
    }
}

crate::ranged_keys::ranged_keys! {
    "trigger";
    max_per_name: "max-per-name" in 1..=100000,
    per_seconds: "per-seconds" in 1..=604800,
    remember_seconds: "remember-seconds" in 0..=86400,
    max_remembered: "max-remembered" in 1..=1024,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_cores_and_ranges_are_checked() {
        let parsed: TriggerSection = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed, TriggerSection::default());
        assert_eq!(parsed.trigger_config(), TriggerConfig::default());
        let set: TriggerSection =
            toml::from_str("max-per-name = 3\nper-seconds = 60").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.trigger_config().max_per_name, 3);
        assert_eq!(set.trigger_config().per_ns, 60 * S);
        let bad = toml::from_str::<TriggerSection>("max-remembered = 0");
        let message = bad.map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(
            message.contains("[trigger] max-remembered must be in 1..=1024, got 0"),
            "{message}"
        );
    }
}
