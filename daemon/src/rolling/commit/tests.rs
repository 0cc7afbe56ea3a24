//! Commits on the sync thread: what a record names, merged requests,
//! rotation and failures while one is in flight.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{EventName, InternedData, TracePacket, TrackEvent};
use tracesync_protocol::scan;

use super::super::*;
use super::{Done, Failed, SyncThread};
use tracesync_core::live::{Origin, OutPacket};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn open(dir: &Path) -> (RollingWriter, Recovered) {
    let config = RollingConfig {
        retain_age: Duration::ZERO,
        ..RollingConfig::new(dir)
    };
    RollingWriter::open_at(config, at(0)).expect("open")
}

/// A track event of relay 500's sequence 2, Origin index `index`.
fn event(index: u64) -> OutPacket {
    let flags = if index == 0 { 1 } else { 2 };
    let p = TracePacket {
        timestamp: Some(1000 + index),
        sequence_flags: Some(flags),
        interned_data: (flags == 1).then(|| InternedData {
            event_names: vec![EventName {
                iid: Some(1),
                name: Some("name".into()),
            }],
        }),
        data: Some(Data::TrackEvent(TrackEvent {
            track_uuid: Some(2),
            ..Default::default()
        })),
        machine_id: Some(5),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(2),
        ),
        ..Default::default()
    };
    let bytes = Bytes::from(p.encode_to_vec());
    OutPacket {
        ts: 1000 + index as i64,
        machine_raw_id: 5,
        machine_name: Some(Arc::from("m5")),
        seq: 2,
        clock: 6,
        clock_ts: 1000 + index,
        err_ns: 0,
        data_field: None,
        src: Arc::from("test"),
        role: role_of(&scan::scan_packet(&bytes).expect("valid packet")),
        origin: Some(Origin {
            relay_instance: 500,
            relay_sequence: 2,
            index,
        }),
        bytes: bytes.into(),
    }
}

fn write(w: &mut RollingWriter, indexes: std::ops::Range<u64>) {
    for i in indexes {
        w.write(&event(i), at(1)).expect("write");
    }
}

/// What a restart after a crash now recovers: relay 500's sequence 2
/// written through, and the old file's length.
fn recovered_after_crash(w: RollingWriter, dir: &Path) -> (Option<u64>, u64) {
    let path = w.current_path().to_path_buf();
    // No close: the writer goes as in a kill.
    drop(w);
    let (_, recovered) = open(dir);
    let through = recovered
        .streams
        .iter()
        .find(|s| (s.relay_instance, s.relay_sequence) == (500, 2))
        .map(|s| s.written_through);
    (through, std::fs::metadata(path).expect("stat").len())
}

#[test]
fn a_commit_names_what_was_written_when_it_was_requested() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    let wakes = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&wakes);
    w.set_commit_waker(Arc::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    write(&mut w, 0..10);
    let n = w.request_commit().expect("request").expect("in flight");
    let len = w.current.entry.bytes;
    // Written while it runs: not part of it.
    write(&mut w, 10..20);
    w.flush().expect("flush");
    assert_eq!(w.wait_commits().expect("wait"), Some(n));
    assert_eq!(w.durable_commit(), n);
    // The thread wakes the owner after handing over the outcome (so a
    // woken owner always finds it): wait for the wake.
    for _ in 0..1000 {
        if wakes.load(Ordering::SeqCst) > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(wakes.load(Ordering::SeqCst), 1);
    // Reported once.
    assert_eq!(w.poll_commits().expect("poll"), None);
    assert_eq!(w.current.committed_len, len);
    // The sync thread saved the index as of the commit.
    let (index, _) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("index");
    assert_eq!(index.last().map(|e| e.bytes), Some(len));
    assert_eq!(recovered_after_crash(w, dir.path()), (Some(9), len));
}

#[test]
fn a_request_while_one_runs_is_merged_into_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    write(&mut w, 0..10);
    let first = w.request_commit().expect("request").expect("in flight");
    // Nothing new: the same commit covers it.
    assert_eq!(w.request_commit().expect("request"), Some(first));
    write(&mut w, 10..20);
    let next = w.request_commit().expect("request").expect("queued");
    assert_eq!(next, first + 1);
    write(&mut w, 20..30);
    assert_eq!(w.request_commit().expect("request"), Some(next));
    let len = w.current.entry.bytes;
    // Polling takes the first and starts the merged one, never waits.
    let mut reported = None;
    for _ in 0..1000 {
        match w.poll_commits().expect("poll") {
            Some(n) if n >= next => {
                reported = Some(n);
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    assert_eq!(reported, Some(next));
    assert!(w.commits.in_flight.is_none());
    assert_eq!(w.stats().commits, 2);
    // Idle and nothing new: durable already.
    assert_eq!(w.request_commit().expect("request"), None);
    assert_eq!(recovered_after_crash(w, dir.path()), (Some(29), len));
}

#[test]
fn a_rotation_waits_for_the_commit_in_flight_and_covers_the_merged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    write(&mut w, 0..10);
    let first = w.request_commit().expect("request").expect("in flight");
    write(&mut w, 10..20);
    let next = w.request_commit().expect("request").expect("queued");
    // The next write rotates.
    w.config.max_file_bytes = w.current.entry.bytes;
    let old = w.current_path().to_path_buf();
    write(&mut w, 20..21);
    assert_ne!(w.current_path(), old);
    assert!(first < next && w.durable_commit() == next);
    assert_eq!(w.poll_commits().expect("poll"), Some(next));
    // The old file is whole; its data is in the new file's full record.
    let (through, _) = recovered_after_crash(w, dir.path());
    assert_eq!(through, Some(19));
}

/// Puts a sync thread in the test's hands: it gets the jobs and says how
/// they went.
fn fake_thread(
    w: &mut RollingWriter,
) -> (
    crossbeam_channel::Receiver<super::Job>,
    crossbeam_channel::Sender<Done>,
) {
    let (jobs, job_rx) = crossbeam_channel::bounded(1);
    let (done_tx, done) = crossbeam_channel::bounded(1);
    w.commits.thread = Some(SyncThread { jobs, done });
    (job_rx, done_tx)
}

fn failed(how: Failed) -> Done {
    Done {
        result: Err(how),
        index: Ok(()),
    }
}

#[test]
fn a_failed_fdatasync_takes_nothing_and_the_retry_covers_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    write(&mut w, 0..5);
    w.commit().expect("commit");
    let committed = w.current.committed_len;
    let (jobs, done) = fake_thread(&mut w);
    write(&mut w, 5..10);
    let n = w.request_commit().expect("request").expect("in flight");
    let _job = jobs.recv().expect("a job");
    write(&mut w, 10..15);
    let len = w.current.entry.bytes;
    done.send(failed(Failed::Data(std::io::Error::other("EIO"))))
        .expect("send");
    assert!(w.poll_commits().is_err());
    // Nothing moved: the job's bytes are uncommitted again, before the rest.
    assert!(w.durable_commit() < n);
    assert_eq!(w.current.committed_len, committed);
    assert!(w.current.suspect);
    assert_eq!(w.current.pending.len() as u64, len - committed);
    assert!(w.changed.contains(&(500, 2)));
    // A working thread again: the retry cuts back, writes again, commits.
    w.commits.thread = SyncThread::start();
    let retry = w.request_commit().expect("retry").expect("in flight");
    assert!(retry > n);
    assert_eq!(w.wait_commits().expect("wait"), Some(retry));
    assert_eq!(w.stats().rewrites, 1);
    assert_eq!(recovered_after_crash(w, dir.path()), (Some(14), len));
}

#[test]
fn a_torn_journal_record_is_cut_before_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    let (jobs, done) = fake_thread(&mut w);
    write(&mut w, 0..5);
    w.request_commit().expect("request").expect("in flight");
    let job = jobs.recv().expect("a job");
    // Half the record reached the journal.
    (&job.journal)
        .write_all(&job.record[..job.record.len() / 2])
        .expect("write");
    done.send(failed(Failed::Journal(std::io::Error::other("ENOSPC"))))
        .expect("send");
    assert!(w.poll_commits().is_err());
    assert!(!w.current.suspect);
    w.commits.thread = SyncThread::start();
    let len = w.current.entry.bytes;
    w.commit().expect("commit");
    assert_eq!(recovered_after_crash(w, dir.path()), (Some(4), len));
}

use std::io::Write as _;

#[test]
fn the_early_commit_merges_while_one_runs_and_reports_to_the_owner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    let (jobs, done) = fake_thread(&mut w);
    write(&mut w, 0..5);
    let n = w.request_commit().expect("request").expect("in flight");
    let _job = jobs.recv().expect("a job");
    write(&mut w, 5..10);
    // Under the bound with one in flight: merged, no wait.
    w.commit_early(0).expect("early");
    assert!(w.commits.want_next);
    // The first finishes; the write path takes it and starts the next,
    // but the report stays for the owner.
    done.send(Done {
        result: Ok(()),
        index: Ok(()),
    })
    .expect("send");
    w.commit_early(0).expect("early");
    assert_eq!(w.durable_commit(), n);
    assert_eq!(w.commits.in_flight.as_ref().map(|j| j.id), Some(n + 1));
    assert_eq!(w.poll_commits().expect("poll"), Some(n));
    let _job = jobs.recv().expect("the merged job");
}

/// Relay 500's event `index` with a ~60 KB category: a large packet.
fn large_event(index: u64) -> OutPacket {
    let mut p = event(index);
    let mut t = TracePacket::decode(p.bytes.to_bytes()).expect("decode");
    if let Some(Data::TrackEvent(e)) = &mut t.data {
        e.categories = vec!["c".repeat(60_000)];
    }
    p.bytes = Bytes::from(t.encode_to_vec()).into();
    p
}

#[test]
fn the_pending_bytes_and_the_commit_in_flight_keep_their_room() {
    use super::super::current::BUF_BYTES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = open(dir.path());
    // ~60 MB, past the early-commit bound many times: the room is never
    // doubled (a `Vec` grown by doubling took up to twice what it held).
    for i in 0..1000 {
        w.write(&large_event(i), at(1)).expect("write");
        let in_flight = w
            .commits
            .in_flight
            .as_ref()
            .map_or(0, |j| j.bytes.capacity());
        assert!(w.current.pending.capacity() <= BUF_BYTES);
        assert!(in_flight <= BUF_BYTES && w.commits.spare.capacity() <= BUF_BYTES);
    }
    w.wait_commits().expect("wait");
    assert!(w.stats.commits > 2, "{} commits", w.stats.commits);
    let len = w.current.entry.bytes;
    w.commit().expect("commit");
    assert_eq!(recovered_after_crash(w, dir.path()).1, len);
}

/// Bytes of `path` resident in the page cache (`fincore`, util-linux).
fn resident_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) runs");
    assert!(out.status.success(), "fincore: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("fincore prints a byte count")
}

/// Bytes a commit made durable leave the page cache once the next commit
/// is durable; the newest commit's stay for readers following the file.
#[test]
fn durable_bytes_leave_the_page_cache_one_commit_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kind = nix::sys::statfs::statfs(dir.path()).expect("statfs");
    if kind.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC {
        // tmpfs pages are the file itself: nothing to drop.
        eprintln!("skipped: the temporary directory is a tmpfs");
        return;
    }
    let (mut w, _) = open(dir.path());
    write(&mut w, 0..100_000);
    w.commit().expect("first commit");
    let first = w.current.committed_len;
    write(&mut w, 100_000..200_000);
    w.commit().expect("second commit");
    let len = w.current.committed_len;
    assert!(
        first > 1 << 20 && len > first + (1 << 20),
        "{first} then {len}"
    );
    let resident = resident_bytes(w.current_path());
    // Pages straddling `first` may stay: one page of slack.
    assert!(
        resident <= len - first + 4096,
        "{resident} bytes cached of {len}, {first} of them durable before the last commit"
    );
}
