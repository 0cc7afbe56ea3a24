//! Perfetto triggers in a source's packets (`TracePacket.trigger`, field
//! 46; `Trigger.trigger_name`, field 1): the pipeline notes each one it
//! stamps (a packet whose payload is field 46: one comparison per packet,
//! the trigger itself read only then), and the source fires those whose
//! name is in `trigger-on` through the uplink, like `tracesync-relay
//! trigger`, at the packet's own time.
//!
//! The packet's time: its timestamp when it is on BOOTTIME (no
//! `timestamp_clock_id`, or 6: Perfetto's service stamps its trigger
//! packets with the boot time the trigger came at), else when the relay
//! read it. Invariants: at most [`MAX_PER_BATCH`] triggers are noted per
//! batch (a stream of nothing but triggers costs bounded memory; the rest
//! are counted); a trigger that does not fit the uplink's queue is
//! dropped, counted and logged.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tracesync_protocol::scan::{FieldValue, Fields, PacketFields};

use super::SourceContext;
use crate::control::{Origin, TriggerAsk};

/// Triggers noted per batch at most.
pub const MAX_PER_BATCH: usize = 64;
/// `TracePacket.trigger`.
const TRIGGER_FIELD: u32 = 46;
/// `Trigger.trigger_name`.
const TRIGGER_NAME_FIELD: u32 = 1;
/// BOOTTIME's builtin clock id.
const BOOTTIME: u32 = 6;
/// The window a packet's trigger asks for (as `tracesync trigger`'s
/// defaults).
const BEFORE_NS: u64 = 30_000_000_000;
const AFTER_NS: u64 = 5_000_000_000;

/// A Perfetto trigger seen in a packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketTrigger {
    pub name: String,
    /// The packet's time on BOOTTIME, when it says one.
    pub boottime_ns: Option<u64>,
}

/// The trigger of a scanned packet, if its payload is one with a name.
pub fn packet_trigger(packet: &[u8], fields: &PacketFields<'_>) -> Option<PacketTrigger> {
    if fields.data_field != Some(TRIGGER_FIELD) {
        return None;
    }
    let trigger = Fields::new(packet)
        .filter_map(Result::ok)
        .find_map(|f| match f.value {
            FieldValue::Len(bytes) if f.number == TRIGGER_FIELD => Some(bytes),
            _ => None,
        })?;
    let name = Fields::new(trigger)
        .filter_map(Result::ok)
        .find_map(|f| match f.value {
            FieldValue::Len(bytes) if f.number == TRIGGER_NAME_FIELD => Some(bytes),
            _ => None,
        })?;
    let boottime = matches!(fields.timestamp_clock_id, None | Some(BOOTTIME));
    Some(PacketTrigger {
        name: String::from_utf8_lossy(name).into_owned(),
        boottime_ns: fields.timestamp.filter(|_| boottime),
    })
}

/// Which Perfetto trigger names fire (`trigger-on`) and where they go.
#[derive(Clone, Debug)]
pub struct PacketTriggers {
    pub names: Arc<[String]>,
    pub asks: mpsc::Sender<TriggerAsk>,
}

impl SourceContext {
    /// Fires the triggers of `found` whose name is configured.
    pub(crate) fn fire_packet_triggers(&self, label: &str, found: &[PacketTrigger]) {
        let Some(triggers) = &self.triggers else {
            return;
        };
        for trigger in found {
            if !triggers.names.contains(&trigger.name) {
                tracing::debug!(
                    "{label}: Perfetto trigger {:?} not in trigger-on",
                    trigger.name
                );
                continue;
            }
            let relay_time_ns = trigger.boottime_ns.unwrap_or_else(|| self.clock.boottime());
            let ask = TriggerAsk {
                name: trigger.name.clone(),
                before_ns: BEFORE_NS,
                after_ns: AFTER_NS,
                relay_time_ns,
                origin: Origin::Packet,
                reply: None,
            };
            match triggers.asks.try_send(ask) {
                Ok(()) => tracing::info!(
                    "{label}: Perfetto trigger {} in the packets, at relay time {relay_time_ns} \
                     ns: fired",
                    trigger.name
                ),
                Err(_) => {
                    self.stats.triggers_dropped.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::trigger_asked("busy");
                    tracing::warn!(
                        "{label}: Perfetto trigger {} dropped: the relay's trigger queue is full",
                        trigger.name
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::scan::scan_packet;
    use tracesync_protocol::wire;

    fn trigger_packet(name: &str, ts: u64, clock: Option<u64>) -> Vec<u8> {
        let mut trigger = Vec::new();
        wire::put_len_field(&mut trigger, TRIGGER_NAME_FIELD, name.as_bytes());
        wire::put_len_field(&mut trigger, 2, b"producer");
        let mut packet = Vec::new();
        wire::put_varint_field(&mut packet, 8, ts);
        if let Some(clock) = clock {
            wire::put_varint_field(&mut packet, 58, clock);
        }
        wire::put_len_field(&mut packet, TRIGGER_FIELD, &trigger);
        packet
    }

    #[test]
    fn a_trigger_packet_gives_its_name_and_boottime() {
        let packet = trigger_packet("crash", 1234, None);
        let fields = scan_packet(&packet).unwrap_or_default();
        assert_eq!(
            packet_trigger(&packet, &fields),
            Some(PacketTrigger {
                name: "crash".into(),
                boottime_ns: Some(1234)
            })
        );
        // On another clock: no time of its own (the relay's read time).
        let packet = trigger_packet("crash", 1234, Some(3));
        let fields = scan_packet(&packet).unwrap_or_default();
        assert_eq!(
            packet_trigger(&packet, &fields).and_then(|t| t.boottime_ns),
            None
        );
        // Any other payload is not looked at.
        let mut other = Vec::new();
        wire::put_varint_field(&mut other, 8, 5);
        wire::put_len_field(&mut other, 11, b"\x08\x01");
        let fields = scan_packet(&other).unwrap_or_default();
        assert_eq!(packet_trigger(&other, &fields), None);
    }
}
