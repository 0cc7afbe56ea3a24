//! The current file's `.sync.jsonl` sidecar of raw probe samples.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::PathBuf;

use serde::Serialize;

use super::{RollingWriter, at, naming};

impl RollingWriter {
    /// Appends raw probe samples, one JSON object a line, to the current
    /// file's `.sync.jsonl` sidecar.
    pub fn write_sync_samples<T: Serialize>(&mut self, samples: &[T]) -> io::Result<()> {
        let mut lines = Vec::new();
        for s in samples {
            serde_json::to_writer(&mut lines, s).map_err(io::Error::other)?;
            lines.push(b'\n');
        }
        let path = self.sidecar_path();
        let c = &mut self.current;
        if c.sidecar.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(at(&path, "open"))?;
            c.sidecar = Some(f);
        }
        match &mut c.sidecar {
            Some(f) => f.write_all(&lines).map_err(at(&path, "write")),
            None => Ok(()),
        }
    }

    fn sidecar_path(&self) -> PathBuf {
        self.config
            .dir
            .join(naming::sidecar_name(&self.current.entry.name))
    }
}
