//! The converter's side of the window's releases: what the reader asks
//! while it hands a release out, and converting ahead meanwhile (events
//! held only, nothing released, until the release is done).

use super::super::JsonStats;
use super::Converter;

impl Converter {
    /// While `on`, pushed events are converted and held, and nothing is
    /// released (not even the release under way): the reader converts
    /// ahead while it hands a release out, keeping what the events write
    /// straight out until the release is done.
    pub fn set_holding_only(&mut self, on: bool) {
        self.holding_only = on;
    }

    /// Everything still held, in order: the file has ended (the rest by
    /// [`Converter::drain`] while [`Converter::releasing`]).
    pub fn finish(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.window.finish(out, stats);
    }

    /// Releases from the window hand out at most about `bytes` at a time.
    pub fn set_out_chunk(&mut self, bytes: usize) {
        self.window.set_out_chunk(bytes);
    }

    /// Whether what is held besides the release under way is more than
    /// the window holds: [`Converter::release_if_full`] is due once it is
    /// done.
    pub fn full_after_release(&self) -> bool {
        self.window.full_after_release()
    }

    /// Starts a release if the window is full (what a push does after
    /// its event) and hands out its first piece.
    pub fn release_if_full(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.window.release_if_full(out, stats);
    }

    /// Whether the window is releasing: [`Converter::drain`] has more.
    pub fn releasing(&self) -> bool {
        self.window.releasing()
    }

    /// The next piece of the window's release under way.
    pub fn drain(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.window.drain(out, stats);
    }
}
