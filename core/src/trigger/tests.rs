use super::*;

const S: u64 = 1_000_000_000;

fn request(name: &str) -> TriggerRequest {
    TriggerRequest {
        name: name.into(),
        before_ns: 30 * S,
        after_ns: 5 * S,
    }
}

#[test]
fn a_name_fires_up_to_its_limit_per_period_and_refusals_are_counted() {
    let config = TriggerConfig {
        max_per_name: 3,
        per_ns: 60 * S,
        ..TriggerConfig::default()
    };
    let mut triggers = Triggers::new(config, 7);
    let mut fired = 0;
    let mut refused = Vec::new();
    // A storm: 1000 triggers in a minute.
    for i in 0..1000u64 {
        match triggers.fire(request("crash"), 100 * S + i * 60_000_000) {
            Decision::Fired(_) => fired += 1,
            Decision::Refused(reason) => refused.push(reason),
        }
    }
    assert_eq!(fired, 3);
    assert_eq!(refused.len(), 997);
    assert!(
        refused[0].contains("fired 3 times within 60 s"),
        "{}",
        refused[0]
    );
    assert_eq!(triggers.stats().refused, 997);
    // Another name has its own limit; the first fires again a period later.
    assert!(matches!(
        triggers.fire(request("oom"), 170 * S),
        Decision::Fired(_)
    ));
    assert!(matches!(
        triggers.fire(request("crash"), 170 * S),
        Decision::Fired(_)
    ));
}

#[test]
fn ids_are_unique_and_triggers_are_remembered_for_late_relays_for_a_while() {
    let config = TriggerConfig {
        remember_ns: 100 * S,
        max_remembered: 2,
        ..TriggerConfig::default()
    };
    let mut triggers = Triggers::new(config, 8);
    let ids: Vec<u64> = (0..3)
        .filter_map(
            |i| match triggers.fire(request(&format!("t{i}")), 1000 * S) {
                Decision::Fired(f) => Some(f.id),
                Decision::Refused(_) => None,
            },
        )
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    let late = triggers.for_new_relay(1050 * S);
    assert_eq!(late.iter().map(|f| f.id).collect::<Vec<_>>(), ids[1..]);
    // Window end 1005 s, remembered 100 s past it.
    assert_eq!(triggers.for_new_relay(1104 * S).len(), 2);
    assert!(triggers.for_new_relay(1106 * S).is_empty());
}

#[test]
fn a_relay_window_is_the_host_window_on_the_relay_clock_widened_by_the_bound() {
    let fired = Fired {
        id: 1,
        name: "crash".into(),
        host_time_ns: 1000 * S,
        before_ns: 30 * S,
        after_ns: 5 * S,
    };
    // The relay runs 7 s ahead and 50 ppm fast, bound 2 ms at its reference.
    let estimate = SyncEstimate {
        ref_relay_ns: 1007 * S,
        offset_ns: 7 * S as i64,
        freq_ppm: 50.0,
        error_bound_ns: 2_000_000,
        freq_bound_ppm: 1.0,
        ..SyncEstimate::default()
    };
    let (from, to) = relay_window(&fired, &estimate).unwrap_or_default();
    for (host, relay_edge, outward) in [(970 * S, from, false), (1005 * S, to, true)] {
        // relay = host + offset(relay): one step from the reference is
        // exact to well under a microsecond here.
        let exact = host as i64 + estimate.offset_at(host + 7 * S);
        let mapped_back = estimate.to_host(exact as u64);
        assert!(
            (mapped_back - host as i64).abs() < 1_000,
            "{mapped_back} vs {host}"
        );
        let bound = estimate.bound_at(exact as u64) as i64;
        let expected = if outward {
            exact + bound
        } else {
            exact - bound
        };
        assert!(
            (relay_edge as i64 - expected).abs() < 1_000,
            "edge {relay_edge} vs {expected}"
        );
        assert!(bound >= 2_000_000);
    }
    let unbounded = SyncEstimate {
        freq_bound_ppm: f64::NAN,
        ..estimate
    };
    assert_eq!(relay_window(&fired, &unbounded), None);
}

#[test]
fn the_estimate_tighter_over_the_window_is_taken() {
    let fired = Fired {
        id: 1,
        name: "crash".into(),
        host_time_ns: 1000 * S,
        before_ns: 30 * S,
        after_ns: 5 * S,
    };
    // Mature, referenced near the window; young, referenced a minute later
    // with a wider bound.
    let mature = SyncEstimate {
        ref_relay_ns: 1000 * S,
        error_bound_ns: 20_000,
        freq_bound_ppm: 0.5,
        ..SyncEstimate::default()
    };
    let young = SyncEstimate {
        ref_relay_ns: 1060 * S,
        error_bound_ns: 2_000_000,
        freq_bound_ppm: 20.0,
        ..SyncEstimate::default()
    };
    assert_eq!(tighter_over(&fired, young, mature), mature);
    assert_eq!(tighter_over(&fired, mature, young), mature);
    assert_eq!(tighter_over(&fired, mature, mature), mature);
}

#[test]
fn a_relay_trigger_is_placed_by_the_estimate_or_at_its_receipt() {
    use super::{Mapped, host_time_of};
    let estimate = crate::sync::SyncEstimate {
        ref_relay_ns: 5000 * S,
        offset_ns: 4000 * S as i64,
        error_bound_ns: 10_000,
        ..crate::sync::SyncEstimate::default()
    };
    // The relay is 4000 s ahead: its 5000 s is the host's 1000 s.
    assert_eq!(
        host_time_of(5000 * S, Some(&estimate), 1000 * S + 3_000_000),
        (1000 * S, Mapped::Estimate)
    );
    // No estimate yet, no time, or a time far from the receipt: the receipt.
    let now = 1000 * S;
    assert_eq!(host_time_of(5000 * S, None, now), (now, Mapped::Receipt));
    assert_eq!(
        host_time_of(0, Some(&estimate), now),
        (now, Mapped::Receipt)
    );
    assert_eq!(
        host_time_of(5000 * S, Some(&estimate), now + 120 * S),
        (now + 120 * S, Mapped::Receipt)
    );
    assert_eq!(
        host_time_of(5002 * S, Some(&estimate), now),
        (now, Mapped::Receipt)
    );
}

#[test]
fn a_trigger_fired_at_an_earlier_time_counts_against_the_limit_at_its_receipt() {
    let config = TriggerConfig {
        max_per_name: 1,
        per_ns: 100,
        ..TriggerConfig::default()
    };
    let mut triggers = Triggers::new(config, 7);
    let request = TriggerRequest {
        name: "crash".into(),
        before_ns: 5,
        after_ns: 5,
    };
    match triggers.fire_at(request.clone(), 1000, 990) {
        Decision::Fired(fired) => assert_eq!(fired.host_time_ns, 990),
        other => panic!("{other:?}"),
    }
    // Stamped long before, asked now: still within the limit's window.
    assert!(matches!(
        triggers.fire_at(request, 1050, 800),
        Decision::Refused(_)
    ));
    assert_eq!(triggers.stats().refused, 1);
}

#[test]
fn a_session_begun_after_the_window_maps_it_once_it_lasted_the_distance_back() {
    let fired = Fired {
        id: 1,
        name: "crash".into(),
        host_time_ns: 1000 * S,
        before_ns: 30 * S,
        after_ns: 5 * S,
    };
    // Connected before the window's end: its estimate is the live one.
    assert!(settled_for(&fired, 990 * S, 990 * S));
    assert!(settled_for(&fired, 1005 * S, 1005 * S));
    // Reconnected 25 s after the window's end: 25 s of samples first.
    assert!(!settled_for(&fired, 1030 * S, 1030 * S));
    assert!(!settled_for(&fired, 1030 * S, 1054 * S));
    assert!(settled_for(&fired, 1030 * S, 1055 * S));
    // An hour later: at most SETTLE_MAX_NS.
    let hour = 1005 * S + 3600 * S;
    assert!(!settled_for(&fired, hour, hour + SETTLE_MAX_NS - 1));
    assert!(settled_for(&fired, hour, hour + SETTLE_MAX_NS));
}
