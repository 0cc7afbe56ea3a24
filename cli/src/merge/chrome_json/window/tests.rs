use super::*;

fn push(w: &mut Window, ts: i64, out: &mut Vec<u8>, stats: &mut JsonStats) {
    w.hold_with(ts, KEY_OTHER, Mark::Plain, |b| b.push(ts as u8));
    w.release_if_full(out, stats);
}

#[test]
fn releases_in_time_order_ties_in_order_made() {
    let mut w = Window::new(4);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    for ts in [5, 3, 4, 3, 9, 8, 7, 10, 11] {
        push(&mut w, ts, &mut out, &mut stats);
    }
    w.finish(&mut out, &mut stats);
    assert_eq!(out, vec![3, 3, 4, 5, 7, 8, 9, 10, 11]);
    assert_eq!(stats.json_events_out_of_window, 0);
}

#[test]
fn at_one_time_ends_first_then_longer_complete_events_then_others() {
    let mut w = Window::new(1 << 20);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    for (byte, key) in [
        (1, KEY_OTHER),
        (2, key_complete(5)),
        (3, KEY_END),
        (4, key_complete(50)),
        (5, KEY_OTHER),
        (6, KEY_END),
    ] {
        w.hold_with(10, key, Mark::Plain, |b| b.push(byte));
    }
    w.finish(&mut out, &mut stats);
    assert_eq!(out, vec![3, 6, 4, 2, 1, 5]);
}

#[test]
fn too_late_packets_are_counted_and_written() {
    let mut w = Window::new(2);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    for ts in [10, 11, 12, 13, 1] {
        push(&mut w, ts, &mut out, &mut stats);
    }
    w.finish(&mut out, &mut stats);
    assert_eq!(out.len(), 5);
    assert_eq!(stats.json_events_out_of_window, 1);
}

#[test]
fn holds_at_most_its_limit() {
    let mut w = Window::new(1000);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    for i in 0..100_000_i64 {
        // Out of order by up to 50 packets.
        let ts = i + (i * 7919) % 50;
        push(&mut w, ts, &mut out, &mut stats);
        assert!(w.held <= 1001);
        // Record headers: five bytes per plain packet.
        assert!(w.arena.len() <= 6006);
    }
    w.finish(&mut out, &mut stats);
    assert_eq!(out.len(), 100_000);
    assert_eq!(stats.json_events_out_of_window, 0);
}

/// Packets `(ts, key, byte)` pushed into a window of `limit` bytes that
/// hands out `chunk` bytes at a time, drained as the JSON reader drains it.
fn run(limit: usize, chunk: usize, packets: &[(i64, i64, u8)]) -> (Vec<u8>, u64) {
    let mut w = Window::new(limit);
    w.set_out_chunk(chunk);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    let mut piece = Vec::new();
    for &(ts, key, byte) in packets {
        while w.releasing() {
            w.drain(&mut piece, &mut stats);
            assert!(piece.len() <= chunk.max(1));
            out.append(&mut piece);
        }
        w.hold_with(ts, key, Mark::Plain, |b| b.push(byte));
        w.release_if_full(&mut piece, &mut stats);
        out.append(&mut piece);
    }
    w.finish(&mut piece, &mut stats);
    out.append(&mut piece);
    while w.releasing() {
        w.drain(&mut piece, &mut stats);
        out.append(&mut piece);
    }
    assert!(w.arena.is_empty() && w.entries.is_empty());
    (out, stats.json_events_out_of_window)
}

#[test]
fn a_release_in_pieces_gives_what_one_at_once_gives() {
    // Ties at every time (several keys, several packets per key), out of
    // order by a few packets: ties must stay in the order made across
    // releases that move the kept packets.
    let packets: Vec<(i64, i64, u8)> = (0..5000_i64)
        .map(|i| {
            let ts = i / 4 + (i * 7919) % 5;
            let key = [KEY_OTHER, KEY_END, key_complete(3)][(i % 3) as usize];
            (ts, key, (i % 251) as u8)
        })
        .collect();
    let whole = run(64, usize::MAX, &packets);
    assert_eq!(whole.1, 0);
    for chunk in [1, 3, 17] {
        assert_eq!(run(64, chunk, &packets), whole);
    }
    // The expected order: by (time, key), ties in the order made.
    let mut sorted: Vec<(usize, &(i64, i64, u8))> = packets.iter().enumerate().collect();
    sorted.sort_by_key(|(i, p)| (p.0, p.1, *i));
    let want: Vec<u8> = sorted.iter().map(|(_, p)| p.2).collect();
    assert_eq!(whole.0, want);
}

/// Drains a release under way as the JSON reader does, a piece at a time
/// into an output it empties between pieces.
fn drain_all(w: &mut Window, out: &mut Vec<u8>, stats: &mut JsonStats) {
    let mut piece = Vec::new();
    while w.releasing() {
        w.drain(&mut piece, stats);
        out.append(&mut piece);
    }
}

#[test]
fn complete_events_keep_their_links_across_releases() {
    // Pairs of partially overlapping complete events, held across many
    // releases (their records moved down in the arena): every second one
    // spills, and its end must find its begin's spill track by the link
    // its record kept, leaving no spilled begin unmatched.
    let mut w = Window::new(40);
    w.set_out_chunk(5);
    let (mut out, mut stats) = (Vec::new(), JsonStats::default());
    let mut ends = Vec::new();
    for i in 0..2000_i64 {
        for (ts, byte) in [(i * 10, 1), (i * 10 + 3, 3)] {
            drain_all(&mut w, &mut out, &mut stats);
            let mark = Mark::CompleteBegin { thread: 7, dur: 6 };
            let begin = w.hold_with(ts, KEY_OTHER, mark, |b| b.push(byte));
            ends.push((ts + 6, begin, byte + 1));
        }
        // Ends are made after the begins of the next pair start.
        ends.retain(|&(end, begin, byte)| {
            if end > i * 10 + 3 {
                return true;
            }
            w.hold_with(end, KEY_END, Mark::CompleteEnd { begin }, |b| b.push(byte));
            false
        });
        w.release_if_full(&mut out, &mut stats);
    }
    for (end, begin, byte) in ends {
        w.hold_with(end, KEY_END, Mark::CompleteEnd { begin }, |b| b.push(byte));
    }
    w.finish(&mut out, &mut stats);
    drain_all(&mut w, &mut out, &mut stats);
    // 8000 one-byte packets and the spill track's one descriptor.
    assert!((8000..8100).contains(&out.len()));
    assert_eq!(stats.slice_spill_overlapping_complete_event, 2000);
    assert!(w.spill.is_idle());
    assert_eq!(stats.json_events_out_of_window, 0);
}

#[test]
fn releases_as_a_whole_sort_of_what_is_held_does() {
    // Packets far out of order (late ones overtake the kept run), few
    // times and keys (many ties): each release must give what sorting
    // everything held by (time, key, order made) gives.
    let keys = [KEY_OTHER, KEY_END, key_complete(3), key_complete(9)];
    let packets: Vec<(i64, i64, u8)> = (0..20_000_i64)
        .map(|i| {
            let ts = i / 8 + (i * 7919) % 97 - (i * 104_729) % 61;
            (ts, keys[(i % 4) as usize], (i % 251) as u8)
        })
        .collect();
    let limit = 100;
    let mut held: Vec<(i64, i64, usize, u8)> = Vec::new();
    let mut want = Vec::new();
    for (i, &(ts, key, byte)) in packets.iter().enumerate() {
        held.push((ts, key, i, byte));
        if held.len() > limit {
            held.sort();
            let keep = held.split_off(held.len() - limit / 2);
            want.extend(held.iter().map(|p| p.3));
            held = keep;
        }
    }
    held.sort();
    want.extend(held.iter().map(|p| p.3));
    let (got, _) = run(limit, usize::MAX, &packets);
    assert_eq!(got, want);
}

/// What the window must give for packets `(ts, key, byte, len)` (`len`
/// copies of `byte`) in a window of `limit` bytes: when more than `limit`
/// bytes are held, everything held sorted by (time, key, order made) and
/// the earliest let go until at most half is left; at the end, the rest.
fn model(limit: usize, packets: &[(i64, i64, u8, usize)]) -> Vec<u8> {
    let mut held: Vec<(i64, i64, usize, u8, usize)> = Vec::new();
    let mut bytes = 0;
    let mut want = Vec::new();
    for (i, &(ts, key, byte, len)) in packets.iter().enumerate() {
        held.push((ts, key, i, byte, len));
        bytes += len;
        if bytes > limit {
            held.sort();
            let mut cut = 0;
            for p in &held {
                if bytes <= limit / 2 {
                    break;
                }
                bytes -= p.4;
                cut += 1;
            }
            for p in held.drain(..cut) {
                want.extend(std::iter::repeat_n(p.3, p.4));
            }
        }
    }
    held.sort();
    for p in held {
        want.extend(std::iter::repeat_n(p.3, p.4));
    }
    want
}

proptest::proptest! {
    /// Whatever the disorder (none: each release a prefix of the arena;
    /// a little: a few records mixed; throughout), and whatever the
    /// packets' sizes, the kept records move down intact and in order.
    #[test]
    fn compaction_keeps_every_kept_packet_whatever_the_disorder(
        spread in proptest::prop_oneof![proptest::strategy::Just(0_i64), 1_i64..8, 8_i64..400],
        lens in proptest::collection::vec(1_usize..40, 300..1500),
        limit in 64_usize..3000,
        chunk in proptest::prop_oneof![proptest::strategy::Just(usize::MAX), 1_usize..200],
    ) {
        let keys = [KEY_OTHER, KEY_END, key_complete(3)];
        let packets: Vec<(i64, i64, u8, usize)> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let i = i as i64;
                let ts = i * 4 + if spread == 0 { 0 } else { (i * 7919) % spread };
                (ts, keys[(i % 3) as usize], (i % 251) as u8, len)
            })
            .collect();
        let mut w = Window::new(limit);
        w.set_out_chunk(chunk);
        let (mut out, mut stats) = (Vec::new(), JsonStats::default());
        for &(ts, key, byte, len) in &packets {
            drain_all(&mut w, &mut out, &mut stats);
            w.hold_with(ts, key, Mark::Plain, |b| b.extend(std::iter::repeat_n(byte, len)));
            w.release_if_full(&mut out, &mut stats);
        }
        w.finish(&mut out, &mut stats);
        drain_all(&mut w, &mut out, &mut stats);
        proptest::prop_assert!(w.arena.is_empty() && w.entries.is_empty());
        proptest::prop_assert_eq!(out, model(limit, &packets));
    }
}
