use super::*;

fn ping(n: u64, send_ns: u64, recv_ns: u64) -> Ping {
    Ping {
        n,
        send_ns,
        recv_ns,
        guest_ns: 5_000_000 + send_ns,
    }
}

#[test]
fn an_event_counts_only_inside_its_window_widened_by_its_bound() {
    let pings = [
        ping(0, 1_000, 2_000),
        ping(1, 10_000, 11_000),
        ping(2, 20_000, 21_000),
        ping(3, 30_000, 31_000),
    ];
    let found: BTreeMap<u64, Found> = [
        // Inside the window itself.
        (
            0,
            Found {
                ts: 1_500,
                err_ns: Some(10),
                copies: 1,
            },
        ),
        // 100 ns before send, bound 100: inside.
        (
            1,
            Found {
                ts: 9_900,
                err_ns: Some(100),
                copies: 1,
            },
        ),
        // 101 ns after receive, bound 100: outside.
        (
            2,
            Found {
                ts: 21_101,
                err_ns: Some(100),
                copies: 2,
            },
        ),
    ]
    .into();
    let mut r = Report {
        arch: "aarch64".into(),
        pings_sent: 4,
        ..Report::default()
    };
    causality(&pings, &found, &BTreeMap::new(), &mut r);
    assert_eq!((r.inside, r.pings_found, r.pings_duplicated), (2, 3, 1));
    assert_eq!(r.inside_bare, 1);
    assert_eq!(r.outside, vec![(2, 1_101, -101, 100)]);
    assert_eq!(r.window_ns, vec![1_000; 4]);
    assert_eq!(r.err_ns, vec![10, 100, 100]);
    // The missing ping is lost; the second copy is a duplicate.
    assert_eq!((r.lost(), r.duplicated()), (1, 1));
    assert!(!r.passed());
    let last = r.lines("vm").pop().unwrap();
    assert_eq!(
        last,
        "vm-relay: arch aarch64; packets 3 lost 1 dup 1; causality 2/4 inside; drift nan ppm"
    );
}
