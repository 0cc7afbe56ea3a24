//! The current file's `.sync.jsonl` sidecar of raw probe samples.

use std::io::{self, Write};
use std::path::PathBuf;

use super::files::{self, Found};
use super::{RollingWriter, at};
use tracesync_capture::sidecar::{self, ProbeSample, sidecar_name};

impl RollingWriter {
    /// Appends raw probe samples, one a line, to the current file's
    /// `.sync.jsonl` sidecar.
    pub fn write_sync_samples(&mut self, samples: &[ProbeSample]) -> io::Result<()> {
        let mut lines = Vec::new();
        for s in samples {
            sidecar::encode_line(s, &mut lines).map_err(io::Error::other)?;
        }
        let path = self.sidecar_path();
        let c = &mut self.current;
        if c.sidecar.is_none() {
            // New with its file: created, never opened through a link (a
            // link, or a file not ours, at the name: this file's samples
            // are not written).
            let f = files::create_new(&path, true).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists
                    && files::look(&path).is_ok_and(|f| f == Found::Link)
                {
                    self.links.met(
                        &path,
                        false,
                        "the samples of this file are not written (the next file has its own)",
                    );
                    return files::LinkRefused::error(&path);
                }
                at(&path, "create")(e)
            })?;
            c.sidecar = Some(f);
        }
        match &mut c.sidecar {
            Some(f) => f.write_all(&lines).map_err(at(&path, "write")),
            None => Ok(()),
        }
    }

    fn sidecar_path(&self) -> PathBuf {
        self.config.dir.join(sidecar_name(&self.current.entry.name))
    }
}
