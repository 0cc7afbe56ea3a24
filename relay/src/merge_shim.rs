//! MERGE SHIM — delete at merge. Stand-ins with the contract's signatures
//! for what the relay-sources (identity, sequences, source, own_packets)
//! and sync (probe) branches provide, so this branch's `main.rs` compiles
//! alone. At merge: delete this file and, in main.rs, replace
//! `mod merge_shim; use merge_shim as parts;` with
//! `use tracesync_relay as parts;`.
#![allow(dead_code)]

pub mod identity {
    #[derive(Clone, Debug)]
    pub struct MachineIdentity {
        pub boot_id: String,
        pub machine_name: String,
        pub raw_id: u32,
    }

    impl MachineIdentity {
        pub fn detect(name: Option<&str>) -> Self {
            let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap_or_default()
                .trim()
                .to_owned();
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            Self {
                boot_id,
                machine_name: name.unwrap_or(host.trim()).to_owned(),
                raw_id: 1,
            }
        }
    }
}

pub mod sequences {
    #[derive(Debug, Default)]
    pub struct SequenceAllocator;

    impl SequenceAllocator {
        pub fn new() -> Self {
            Self
        }
    }
}

pub mod source {
    use std::sync::Arc;

    use bytes::Bytes;
    use serde::{Deserialize, Serialize};
    use tokio::sync::mpsc;
    use tokio::task::JoinHandle;
    use tokio_util::sync::CancellationToken;
    use tracesync_relay::clocks::SharedClock;

    use super::sequences::SequenceAllocator;

    #[derive(Clone, Debug)]
    pub struct SourceBatch {
        pub source: u16,
        pub packets: Vec<Bytes>,
        pub cursor: Cursor,
    }

    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Cursor {
        #[default]
        None,
        File {
            dev: u64,
            ino: u64,
            offset: u64,
        },
        Synthetic {
            next_counter: u64,
        },
    }

    #[derive(Clone, Debug)]
    pub struct SourceSpec(pub String);

    impl SourceSpec {
        pub fn parse(text: &str) -> Result<Self, String> {
            Ok(Self(text.to_owned()))
        }
    }

    #[derive(Debug, Default)]
    pub struct SourceStats {
        pub packets: u64,
    }

    #[derive(Clone)]
    pub struct SourceContext {
        pub clock: SharedClock,
        pub sequences: Arc<SequenceAllocator>,
        pub machine_name: Arc<str>,
        pub shutdown: CancellationToken,
        pub stats: Arc<SourceStats>,
    }

    pub fn spawn(
        spec: SourceSpec,
        index: u16,
        ctx: SourceContext,
        resume: Cursor,
        tx: mpsc::Sender<SourceBatch>,
    ) -> JoinHandle<()> {
        tracing::warn!(
            "source {index} ({}): sources are not in this build (merge shim)",
            spec.0
        );
        let _ = (ctx, resume, tx);
        tokio::spawn(async {})
    }
}

pub mod own_packets {
    use tokio::sync::mpsc;
    use tokio::task::JoinHandle;
    use tokio_util::sync::CancellationToken;
    use tracesync_relay::clocks::SharedClock;

    use super::identity::MachineIdentity;
    use super::source::SourceBatch;

    pub fn spawn(
        clock: SharedClock,
        identity: MachineIdentity,
        tx: mpsc::Sender<SourceBatch>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            shutdown.cancelled().await;
            drop((clock, identity, tx));
        })
    }
}

pub mod probe {
    use std::net::SocketAddr;

    use tokio_util::sync::CancellationToken;
    use tracesync_relay::clocks::SharedClock;

    pub async fn run_probe_responder(
        clock: SharedClock,
        daemon: SocketAddr,
        session_id: u64,
        shutdown: CancellationToken,
    ) {
        tracing::warn!(
            "probe responder for session {session_id:016x} at {daemon} is not in this build (merge shim)"
        );
        shutdown.cancelled().await;
        drop(clock);
    }
}
