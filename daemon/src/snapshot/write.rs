//! One snapshot written: its windows read back from staging, assembled by
//! core ([`Assembly`]) and written to `snapshot-<UTC>-<NAME>.pftrace` in
//! the output directory (the stream relays' and the host's windows read
//! back from the rolled output first, `output.rs`, then each ring relay's)
//! through a temporary file created new (`O_EXCL|O_NOFOLLOW`, mode 0640 as
//! the rolled files: nothing at its name, a link included, is written
//! through), fsynced,
//! renamed over the name and the directory fsynced, so a reader sees the
//! earlier file or the new one whole. Runs on a thread of its own: the
//! ingest loop polls for the outcome ([`Job::spawn`]).

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::SystemTime;

use tracesync_capture::index::{IndexEntry, IndexMachine};
use tracesync_capture::names::SnapshotName;
use tracesync_core::live::{HelloInfo, LiveConfig};
use tracesync_core::trigger::{Assembly, Fired};

use super::output::{self, OutputRead};
use super::{Parts, StagedWindow};

/// A snapshot to write.
#[derive(Debug)]
pub struct Job {
    pub fired: Fired,
    /// When the trigger fired (the file's name).
    pub wall: SystemTime,
    pub output_dir: PathBuf,
    pub windows: Vec<StagedWindow>,
    /// The machines of ring relays: their windows come from their rings,
    /// never from the output.
    pub ring_machines: BTreeSet<u32>,
    /// The output is durable past the window's end.
    pub output_whole: bool,
    /// Host BOOTTIME and the host's clocks read together, now.
    pub now_ns: u64,
    pub host_clocks: Vec<(u32, u64)>,
}

/// A snapshot durable on disk.
#[derive(Debug)]
pub struct Written {
    pub trigger_id: u64,
    /// The relay instances whose windows it holds.
    pub instances: Vec<u64>,
    /// It holds the output's whole window.
    pub output_whole: bool,
    /// Packets read back from the output (before the cut).
    pub output_packets: u64,
    pub entry: IndexEntry,
    /// Data packets the relays shipped outside the host window.
    pub cut: u64,
}

pub type Outcome = Result<Written, (u64, String)>;

impl Job {
    /// Writes on a thread of its own; the outcome comes on `done`.
    pub fn spawn(self, done: mpsc::Sender<Outcome>) -> io::Result<()> {
        std::thread::Builder::new()
            .name("tracesync-snapshot".into())
            .spawn(move || {
                let id = self.fired.id;
                let _ = done.send(self.run().map_err(|e| (id, e)));
            })
            .map(|_| ())
    }

    fn run(self) -> Result<Written, String> {
        let name = SnapshotName::new(self.wall, &self.fired.name)
            .ok_or_else(|| format!("trigger name {:?} cannot name a file", self.fired.name))?
            .to_string();
        let path = self.output_dir.join(&name);
        let tmp = self.output_dir.join(format!(".{name}.tmp"));
        let at = |p: &Path, e: io::Error| format!("{}: {e}", p.display());
        let _ = fs::remove_file(&tmp);
        let mut file = super::create_new(&tmp).map_err(|e| at(&tmp, e))?;
        let written = self.assemble(&mut file).map_err(|e| at(&tmp, e));
        let written = written.and_then(|((stats, bytes), output)| {
            file.write_all(&bytes).map_err(|e| at(&tmp, e))?;
            file.sync_all().map_err(|e| at(&tmp, e))?;
            Ok((stats, output))
        });
        let (stats, output) = match written {
            Ok(stats) => stats,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        fs::rename(&tmp, &path).map_err(|e| at(&path, e))?;
        File::open(&self.output_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| at(&self.output_dir, e))?;
        let entry = IndexEntry {
            name,
            first_ts: stats.first_ts,
            last_ts: stats.last_ts,
            machines: stats
                .machines
                .iter()
                .map(|(&raw_id, name)| IndexMachine {
                    raw_id,
                    name: name.clone(),
                })
                .collect(),
            bytes: stats.bytes,
            packets: stats.packets,
            preamble_bytes: 0,
            preamble_packets: Some(0),
            complete: true,
        };
        Ok(Written {
            trigger_id: self.fired.id,
            instances: self.windows.iter().map(|w| w.relay.instance).collect(),
            output_whole: self.output_whole,
            output_packets: output.packets,
            entry,
            cut: stats.cut,
        })
    }

    /// Feeds every window through the assembly, writing as it goes; the
    /// figures and the last bytes.
    fn assemble(
        &self,
        file: &mut File,
    ) -> io::Result<(
        (tracesync_core::trigger::AssemblyStats, Vec<u8>),
        OutputRead,
    )> {
        let mut assembly = Assembly::new(
            LiveConfig::default(),
            &self.fired,
            self.now_ns,
            &self.host_clocks,
        );
        let (from, to) = self.fired.host_window();
        let window = (
            i64::try_from(from).unwrap_or(i64::MAX),
            i64::try_from(to).unwrap_or(i64::MAX),
        );
        let output = output::feed(
            &self.output_dir,
            window,
            &self.ring_machines,
            &mut assembly,
            file,
        )?;
        for window in &self.windows {
            let mut parts = Parts::open(&window.path)?;
            let first = parts
                .next()
                .transpose()?
                .ok_or_else(|| io::Error::other("a staged window without parts"))?;
            let relay = &window.relay;
            let hello = HelloInfo {
                relay_instance: relay.instance,
                boot_id: relay.boot_id.clone(),
                machine_name: relay.name.clone(),
                machine_raw_id: relay.raw_id,
                oldest_unacked_batch: 1,
                clocks: None,
                ring: true,
            };
            assembly
                .begin(hello, window.estimate, first.preamble)
                .map_err(io::Error::other)?;
            assembly.part(first.packets, first.clocks);
            file.write_all(&assembly.take_bytes())?;
            for part in parts {
                let part = part?;
                assembly.part(part.packets, part.clocks);
                file.write_all(&assembly.take_bytes())?;
            }
            assembly.end();
            file.write_all(&assembly.take_bytes())?;
        }
        Ok((assembly.finish(), output))
    }
}
