//! Where a packet's stamped fields are, as the scan finds them: stamping
//! then edits by position, with no second walk over the packet.

use super::field;

/// Byte ranges of the top-level fields stamping replaces, found by the scan
/// so that stamping needs no second walk over the packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StampLayout {
    /// `trusted_packet_sequence_id` (field 10), any wire type.
    pub sequence_id: Option<(u32, u32)>,
    /// `machine_id` (field 98), any wire type.
    pub machine_id: Option<(u32, u32)>,
    /// Whether `timestamp_clock_id` (field 58) is present, any wire type.
    pub has_clock_id: bool,
    /// Field 10 or 98 appears more than once: stamping walks the packet.
    pub repeated: bool,
}

impl StampLayout {
    /// Notes a field at `start..end` if stamping cares about it.
    #[inline(always)]
    pub fn note(&mut self, number: u32, start: usize, end: usize) {
        let slot = match number {
            field::TRUSTED_PACKET_SEQUENCE_ID => &mut self.sequence_id,
            field::MACHINE_ID => &mut self.machine_id,
            field::TIMESTAMP_CLOCK_ID => {
                self.has_clock_id = true;
                return;
            }
            _ => return,
        };
        self.repeated |= slot.is_some();
        *slot = Some((start as u32, end as u32));
    }
}
