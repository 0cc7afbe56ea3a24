//! The markdown table of real-socket results (µs), one row per relay.

use super::{ErrStats, RunResult, us};

/// The markdown table of results (µs).
pub fn table(results: &[RunResult]) -> String {
    let mut s = String::from(
        "| profile | rx stamps | probes | relay | events | merged p50 / p99 / max (µs) | live p99 (µs) | bias (µs) \
         | in bound | bound p50 (µs) | naive p50 / p99 / max (µs) | Perfetto-style p50 / p99 / max (µs) \
         | lost / dup | kernel-stamped t4 / t2 | proxy release late p50 / p99 / max (µs) \
         | refined p50 / p99 / max (µs) | refined in bound |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let late = &r.proxy["release_late_ns"];
        let late_cells = if r.proxied {
            let late = |k: &str| us(late[k].as_u64().unwrap_or(0));
            format!("{} / {} / {}", late("p50"), late("p99"), late("max"))
        } else {
            "no proxy".to_owned()
        };
        let stamps = match r.kernel_timestamps {
            Some(true) => "kernel",
            Some(false) => "user",
            None => "default",
        };
        let share = |c: Option<(u64, u64)>| match c {
            Some((k, f)) if k + f > 0 => format!("{:.0}%", 100.0 * k as f64 / (k + f) as f64),
            _ => "-".to_owned(),
        };
        for x in &r.relays {
            let mut relay = match x.drift_ppm {
                Some(d) => format!("{} (+{} s, {d} ppm", x.name, x.timens_s),
                None => format!("{} (+{} s", x.name, x.timens_s),
            };
            if !x.extra_args.is_empty() {
                relay.push_str(&format!(", {}", x.extra_args.join(" ")));
            }
            relay.push(')');
            let base = |b: &Option<ErrStats>| b.map_or_else(|| "n/a".into(), |b| b.cells());
            s.push_str(&format!(
                "| {} | {stamps} | {} | {relay} | {} | {} | {} | {:.1} | {:.2}%{} | {} | {} | {} | {} / {} | {} / {} | {late_cells} | {} | {} |\n",
                r.profile,
                x.probe_route.as_deref().unwrap_or("-"),
                x.measured,
                x.merged.cells(),
                us(x.live.p99),
                x.mean_signed_ns as f64 / 1e3,
                x.coverage() * 100.0,
                if x.no_bound > 0 {
                    format!(" ({} unknown)", x.no_bound)
                } else {
                    String::new()
                },
                us(x.bound_p50_ns),
                base(&x.naive),
                base(&x.perfetto),
                x.missing,
                x.duplicates,
                share(r.daemon_rx_stamps),
                share(x.relay_rx_stamps),
                base(&x.refined),
                match x.refined_inside {
                    (_, 0) => "n/a".to_owned(),
                    (inside, all) => format!("{:.2}%", 100.0 * inside as f64 / all as f64),
                },
            ));
        }
    }
    s
}
