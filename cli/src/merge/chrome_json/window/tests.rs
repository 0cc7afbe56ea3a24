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
        assert!(w.arena.len() <= 1001);
    }
    w.finish(&mut out, &mut stats);
    assert_eq!(out.len(), 100_000);
    assert_eq!(stats.json_events_out_of_window, 0);
}
