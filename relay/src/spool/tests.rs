use super::record::SEGMENT_MAGIC;
use super::*;
use std::path::Path;
use std::time::Duration;
use tracesync_protocol::scan::scan_packet;

/// A TracePacket on `sequence` with `n` as its timestamp and `size` bytes of payload.
fn packet(sequence: u32, n: u64, size: usize) -> Bytes {
    let mut out = Vec::new();
    wire::put_varint_field(&mut out, 10, u64::from(sequence));
    wire::put_varint_field(&mut out, 8, n);
    wire::put_len_field(&mut out, 11, &vec![0xab; size]);
    out.into()
}

fn incoming(source: u16, packets: Vec<Bytes>, cursor: &str) -> Incoming {
    Incoming {
        source,
        packets,
        cursor: Bytes::copy_from_slice(cursor.as_bytes()),
    }
}

fn config(dir: &Path) -> SpoolConfig {
    let mut config = SpoolConfig::new(dir.to_path_buf(), 1 << 20, 16 << 20, WhenFull::Block);
    config.batch_bytes = 4096;
    config.segment_bytes = 16 << 10;
    config
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tss"))
        .collect();
    files.sort();
    files
}

/// Pushes `count` packets of `size` bytes from source 1 and cuts.
fn fill(spool: &mut Spool, count: u64, size: usize, now: Instant) {
    for n in 0..count {
        let cursor = format!("c{n}");
        spool
            .push(
                incoming(1, vec![packet(2 + (n % 3) as u32, n, size)], &cursor),
                now,
            )
            .unwrap();
    }
    spool.tick(now + Duration::from_secs(1)).unwrap();
}

#[test]
fn batches_are_numbered_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty());
    let id = spool.instance_id();
    assert_ne!(id, 0);
    fill(&mut spool, 100, 200, now);
    let last = spool.last_seq();
    assert!(last > 3, "{last}");
    let mut index = 0;
    for seq in 1..=last {
        let batch = spool.batch(seq).unwrap();
        assert_eq!(batch.first_packet_index, index);
        index += batch.packets().len() as u64;
    }
    assert_eq!(index, 100);
    let before: Vec<OutBatch> = (1..=last).filter_map(|s| spool.batch(s)).collect();
    drop(spool);

    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(spool.instance_id(), id);
    assert_eq!(spool.last_seq(), last);
    assert_eq!(spool.oldest_unacked(), 1);
    assert_eq!(spool.resume_cursor(1).unwrap(), "c99");
    let after: Vec<OutBatch> = (1..=last).filter_map(|s| spool.batch(s)).collect();
    assert_eq!(before, after);
    // Numbering continues.
    fill(&mut spool, 1, 10, now);
    let next = spool.batch(last + 1).unwrap();
    assert_eq!(next.first_packet_index, 100);
}

#[test]
fn linger_cuts_a_partial_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    let now = Instant::now();
    spool
        .push(incoming(1, vec![packet(2, 0, 10)], "a"), now)
        .unwrap();
    assert_eq!(spool.deadline(), Some(now + Duration::from_millis(20)));
    spool.tick(now + Duration::from_millis(19)).unwrap();
    assert_eq!(spool.last_seq(), 0);
    spool.tick(now + Duration::from_millis(20)).unwrap();
    assert_eq!(spool.last_seq(), 1);
    assert_eq!(spool.deadline(), None);
}

#[test]
fn a_split_incoming_keeps_its_cursor_for_the_last_part() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    let now = Instant::now();
    spool
        .push(incoming(1, vec![packet(2, 0, 10)], "first"), now)
        .unwrap();
    spool.tick(now + Duration::from_secs(1)).unwrap();
    // Three batches' worth: the first two cut parts must not carry "second".
    let big: Vec<Bytes> = (0..3).map(|n| packet(2, n, 3000)).collect();
    spool.push(incoming(1, big, "second"), now).unwrap();
    assert_eq!(spool.last_seq(), 3);
    assert_eq!(spool.resume_cursor(1).unwrap(), "first");
    drop(spool);
    // A crash now: the third packet was never written, so resume at "first".
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.resume_cursor(1).unwrap(), "first");
    assert_eq!(spool.last_seq(), 3);
}

#[test]
fn torn_tail_is_truncated_and_appending_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 10, 100, now);
    let last = spool.last_seq();
    drop(spool);
    let active = segment_files(dir.path()).pop().unwrap();
    let clean_len = fs::metadata(&active).unwrap().len();
    // A record cut short by a crash mid-write.
    let torn = record::encode(RecordKind::Batch, last + 1, 10, &[], &[packet(2, 99, 500)]).bytes;
    let mut file = OpenOptions::new().append(true).open(&active).unwrap();
    file.write_all(&torn[..torn.len() / 2]).unwrap();
    drop(file);

    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].path, active);
    assert_eq!(issues[0].offset, clean_len);
    assert!(issues[0].to_string().contains("torn"), "{}", issues[0]);
    assert_eq!(fs::metadata(&active).unwrap().len(), clean_len);
    assert_eq!(spool.last_seq(), last);
    fill(&mut spool, 1, 10, now);
    drop(spool);
    let (spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(spool.last_seq(), last + 1);
}

#[test]
fn batches_written_by_earlier_relays_are_still_read() {
    // Kind 1 records (packets as length + bytes) from before the wire-form
    // layout: a spool left by an older relay resends them unchanged.
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 3, 100, now);
    let last = spool.last_seq();
    let index = spool.next_packet_index;
    drop(spool);
    let active = segment_files(dir.path()).pop().unwrap();
    let old = [packet(2, 7, 50), packet(3, 8, 0)];
    let legacy = record::encode(
        RecordKind::LegacyBatch,
        last + 1,
        index,
        &[(1, b"old cursor")],
        &old,
    );
    let mut file = OpenOptions::new().append(true).open(&active).unwrap();
    file.write_all(&legacy.bytes).unwrap();
    drop(file);

    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(spool.last_seq(), last + 1);
    assert_eq!(spool.resume_cursor(1).as_deref(), Some(&b"old cursor"[..]));
    let batch = spool.batch(last + 1).unwrap();
    assert_eq!(batch.packets(), old);
    assert_eq!(
        (batch.packet_count, batch.bytes),
        (2, old[0].len() + old[1].len())
    );
    // New batches follow it in the new layout.
    fill(&mut spool, 1, 10, now);
    assert_eq!(spool.batch(last + 2).unwrap().first_packet_index, index + 2);
}

#[test]
fn checksum_corruption_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 200, 300, now);
    let last = spool.last_seq();
    drop(spool);
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    // Find the second batch record in the first segment and flip a payload byte.
    let first = &files[0];
    let mut bytes = fs::read(first).unwrap();
    let mut offsets = Vec::new();
    let mut pos = SEGMENT_MAGIC.len();
    while let record::HeaderCheck::Complete { record_len, .. } = record::check_header(&bytes[pos..])
    {
        offsets.push(pos);
        pos += record_len;
    }
    let victim = offsets[2]; // checkpoint, batch, batch
    bytes[victim + 40] ^= 0xff;
    fs::write(first, &bytes).unwrap();

    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].path, *first);
    assert_eq!(issues[0].offset, victim as u64);
    let line = issues[0].to_string();
    assert!(line.contains("checksum mismatch"), "{line}");
    assert!(line.contains(&format!("offset {victim}")), "{line}");
    // The batch before is intact; later segments still load.
    assert_eq!(spool.oldest_unacked(), 1);
    assert!(spool.batch(1).is_some());
    assert_eq!(spool.last_seq(), last);
    assert!(spool.batch(last).is_some());
}

#[test]
fn acks_delete_segments() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 300, 300, now);
    let files_before = segment_files(dir.path()).len();
    assert!(files_before >= 4, "{files_before}");
    let disk_before = spool.disk_bytes();
    let last = spool.last_seq();
    spool.ack(last - 1).unwrap();
    assert_eq!(spool.oldest_unacked(), last);
    assert!(spool.batch(last - 1).is_none());
    let files_after = segment_files(dir.path()).len();
    assert!(files_after <= 2, "{files_after}");
    assert!(spool.disk_bytes() < disk_before / 2);
    let on_disk: u64 = segment_files(dir.path())
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(on_disk, spool.disk_bytes());
    drop(spool);
    // Reopened, the deleted batches are gone and the cursor is kept.
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert!(spool.oldest_unacked() > 1);
    assert_eq!(spool.last_seq(), last);
    assert_eq!(spool.resume_cursor(1).unwrap(), "c299");
}

#[test]
fn cursors_survive_when_everything_is_acked() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 300, 300, now);
    spool.ack(spool.last_seq()).unwrap();
    // Force a roll by writing more, then ack everything again.
    fill(&mut spool, 100, 300, now);
    spool.ack(spool.last_seq()).unwrap();
    let last = spool.last_seq();
    drop(spool);
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.resume_cursor(1).unwrap(), "c99");
    assert_eq!(spool.last_seq(), last);
}

#[test]
fn block_policy_stops_accepting_until_acked() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut config = config(dir.path());
    config.disk_bytes = 64 << 10;
    config.memory_bytes = 32 << 10;
    let (mut spool, _) = Spool::open(config).unwrap();
    let mut pushed = 0u64;
    while spool.accepts() && pushed < 10_000 {
        spool
            .push(incoming(1, vec![packet(2, pushed, 500)], "x"), now)
            .unwrap();
        pushed += 1;
    }
    assert!(!spool.accepts(), "never blocked");
    assert!(spool.disk_bytes() <= 64 << 10, "{}", spool.disk_bytes());
    assert_eq!(spool.stats().batches_dropped, 0);
    let written = spool.last_seq();
    spool.ack(written).unwrap();
    spool.tick(now + Duration::from_secs(1)).unwrap();
    assert!(spool.accepts());
    assert!(spool.last_seq() > written);
    // Nothing was lost: every pushed packet has an index.
    spool.flush_all().unwrap();
    let last = spool.batch(spool.last_seq()).unwrap();
    assert_eq!(
        last.first_packet_index + last.packets().len() as u64,
        pushed
    );
}

#[test]
fn drop_oldest_counts_and_marks_the_next_packet_of_each_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut config = config(dir.path());
    config.disk_bytes = 64 << 10;
    config.when_full = WhenFull::DropOldest;
    let (mut spool, _) = Spool::open(config).unwrap();
    // Sequence 7 only appears early; sequence 2 throughout.
    spool
        .push(incoming(1, vec![packet(7, 0, 500)], "x"), now)
        .unwrap();
    for n in 1..400 {
        assert!(spool.accepts());
        spool
            .push(incoming(1, vec![packet(2, n, 500)], "x"), now)
            .unwrap();
    }
    spool
        .push(incoming(1, vec![packet(7, 400, 500)], "x"), now)
        .unwrap();
    spool.flush_all().unwrap();
    let stats = spool.stats().clone();
    assert!(stats.batches_dropped > 0);
    assert!(spool.disk_bytes() <= (64 << 10) + (8 << 10));
    let oldest = spool.oldest_unacked();
    assert!(oldest > 1);
    // Dropped batches' packets are simply absent: counts add up.
    let first = spool.batch(oldest).unwrap();
    assert_eq!(first.first_packet_index, stats.packets_dropped);
    // The first surviving packet of each sequence carries the flag; later ones do not.
    let mut flagged = Vec::new();
    for seq in oldest..=spool.last_seq() {
        for p in spool.batch(seq).unwrap().packets() {
            let fields = scan_packet(&p).unwrap();
            if fields.previous_packet_dropped == 1 {
                flagged.push((fields.trusted_packet_sequence_id, fields.timestamp));
            }
        }
    }
    assert_eq!(flagged.len(), 2, "{flagged:?}");
    assert_eq!(flagged[0], (Some(2), Some(first_ts(&first))));
    assert_eq!(flagged[1], (Some(7), Some(400)));
    // Resent batches keep the mark.
    let again = spool.batch(oldest).unwrap();
    assert_eq!(
        scan_packet(&again.packets()[0])
            .unwrap()
            .previous_packet_dropped,
        1
    );
}

fn first_ts(batch: &OutBatch) -> u64 {
    scan_packet(&batch.packets()[0]).unwrap().timestamp.unwrap()
}

#[test]
fn oversize_packets_are_counted_not_spooled() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    let huge = Bytes::from(vec![0u8; MAX_PACKET_BYTES + 1]);
    spool
        .push(
            incoming(1, vec![huge, packet(2, 1, 10)], "x"),
            Instant::now(),
        )
        .unwrap();
    spool.flush_all().unwrap();
    assert_eq!(spool.stats().oversize_packets_dropped, 1);
    assert_eq!(spool.batch(1).unwrap().packets().len(), 1);
}

#[test]
fn a_second_relay_cannot_share_the_spool() {
    let dir = tempfile::tempdir().unwrap();
    let (_spool, _) = Spool::open(config(dir.path())).unwrap();
    let err = Spool::open(config(dir.path())).unwrap_err();
    assert!(matches!(err, SpoolError::Locked { .. }), "{err}");
}

#[test]
fn cursor_only_moves_are_kept_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    spool
        .push(incoming(4, Vec::new(), "moved"), Instant::now())
        .unwrap();
    spool.flush_all().unwrap();
    assert_eq!(spool.last_seq(), 0);
    drop(spool);
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.resume_cursor(4).unwrap(), "moved");
}

#[test]
fn batches_are_cut_at_the_packet_count_limit() {
    use tracesync_protocol::relay::MAX_BATCH_PACKETS;
    let dir = tempfile::tempdir().unwrap();
    let mut config = SpoolConfig::new(
        dir.path().to_path_buf(),
        64 << 20,
        64 << 20,
        WhenFull::Block,
    );
    config.batch_bytes = 1 << 20;
    let (mut spool, _) = Spool::open(config).unwrap();
    let now = Instant::now();
    // Tiny packets: far under the byte limit, over the count limit.
    let count = MAX_BATCH_PACKETS as u64 + 10;
    let packets = (0..count).map(|n| packet(2, n, 0)).collect();
    spool.push(incoming(1, packets, "c"), now).unwrap();
    spool.tick(now + Duration::from_secs(1)).unwrap();
    let sizes: Vec<usize> = (1..=spool.last_seq())
        .map(|s| spool.batch(s).unwrap().packets().len())
        .collect();
    assert!(sizes.iter().all(|&n| n <= MAX_BATCH_PACKETS), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>() as u64, count);
}

#[test]
fn closed_segments_are_synced_only_while_they_hold_unacked_batches() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    // Acked as fast as written: segments roll and are deleted unsynced.
    for round in 0..8 {
        fill(&mut spool, 8, 1000, now);
        spool.ack(spool.last_seq()).unwrap();
        assert!(segment_files(dir.path()).len() <= 2, "round {round}");
    }
    assert!(spool.stats().batches_written >= 16);
    assert_eq!(spool.stats().segments_synced, 0);
    // Nothing acked: each closed segment is synced when the next one closes.
    fill(&mut spool, 64, 1000, now);
    let synced = spool.stats().segments_synced;
    assert!(synced >= 1, "{synced}");
    assert!(segment_files(dir.path()).len() >= 3);
    // Shutdown syncs the last closed one too; everything reads back.
    let last = spool.last_seq();
    spool.flush_all().unwrap();
    assert!(spool.stats().segments_synced > synced);
    drop(spool);
    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(spool.last_seq(), last);
    assert!(spool.batch(last).is_some_and(|b| b.packet_count > 0));
}

#[test]
fn batch_numbers_never_wrap() {
    // A batch record at the end of the number space (forged or damaged
    // with a valid checksum) is skipped on open, not wrapped to seq 0.
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 3, 100, now);
    let last = spool.last_seq();
    drop(spool);
    let active = segment_files(dir.path()).pop().unwrap();
    let forged = record::encode(RecordKind::Batch, u64::MAX, 0, &[], &[packet(2, 1, 10)]);
    let mut file = OpenOptions::new().append(true).open(&active).unwrap();
    file.write_all(&forged.bytes).unwrap();
    drop(file);
    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert!(issues[0].what.contains("runs past 2^64"), "{issues:?}");
    assert_eq!(spool.last_seq(), last);
    assert!(spool.batch(u64::MAX).is_none());
    drop(spool);

    // A checkpoint that leaves no seq for the next batch: cutting one is
    // an error, nothing is written, and the numbers stay where they were.
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    drop(spool);
    let active = segment_files(dir.path()).pop().unwrap();
    let checkpoint = record::encode(RecordKind::Checkpoint, u64::MAX, 0, &[], &[]);
    let mut file = OpenOptions::new().append(true).open(&active).unwrap();
    file.write_all(&checkpoint.bytes).unwrap();
    drop(file);
    let (mut spool, issues) = Spool::open(config(dir.path())).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(spool.last_seq(), u64::MAX - 1);
    let bytes = spool.disk_bytes();
    spool
        .push(incoming(1, vec![packet(2, 1, 10)], "c"), now)
        .unwrap();
    let error = spool.flush_all().unwrap_err();
    assert!(matches!(error, SpoolError::Exhausted { .. }), "{error}");
    assert_eq!(spool.last_seq(), u64::MAX - 1);
    assert_eq!(spool.disk_bytes(), bytes);
}

#[test]
fn the_highest_batch_ever_sent_survives_reopen_and_a_new_spool_sent_none() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.sent_through(), Some(0), "a new spool sent nothing");
    fill(&mut spool, 40, 500, now);
    assert!(spool.last_seq() >= 3);
    spool.note_sent(2).unwrap();
    spool.note_sent(1).unwrap(); // a resend never lowers it
    drop(spool);
    // Reopened (a restart): batches 3.. were spooled, never sent.
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.sent_through(), Some(2));
    assert!(spool.last_seq() > 2);
    spool.note_sent(3).unwrap();
    spool.sync().unwrap();
    drop(spool);
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.sent_through(), Some(3));
    drop(spool);
    // A damaged mark, or none beside an older relay's batches, says nothing.
    fs::write(dir.path().join("sent-through"), [7u8; 16]).unwrap();
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.sent_through(), None);
    drop(spool);
    fs::remove_file(dir.path().join("sent-through")).unwrap();
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.sent_through(), None);
}

#[test]
fn spool_files_are_owner_only_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    let now = Instant::now();
    // The process umask is shared by the test threads: the modes are set
    // explicitly, so a permissive umask cannot widen them anyway.
    let (mut spool, _) = Spool::open(config(&spool_dir)).unwrap();
    fill(&mut spool, 40, 500, now);
    spool.sync().unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&spool_dir), 0o700);
    let mut files = 0;
    for entry in fs::read_dir(&spool_dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        files += 1;
    }
    assert!(files >= 4, "lock, instance-id, sent-through, a segment");
}

#[test]
fn the_instance_id_is_shown_by_its_first_four_digits_only() {
    assert_eq!(instance_fingerprint(0x8c2e_5d1f_00a1_b2c3), "8c2e...");
}

#[test]
fn a_renewed_instance_keeps_every_batch_and_its_new_id() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut spool, _) = Spool::open(config(dir.path())).unwrap();
    fill(&mut spool, 40, 500, now);
    let (old, last) = (spool.instance_id(), spool.last_seq());
    let new = spool.renew_instance().unwrap();
    assert_ne!(new, old);
    assert_eq!((spool.oldest_unacked(), spool.last_seq()), (1, last));
    drop(spool);
    let (spool, _) = Spool::open(config(dir.path())).unwrap();
    assert_eq!(spool.instance_id(), new);
    assert_eq!(spool.last_seq(), last);
}
