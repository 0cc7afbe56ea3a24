//! The merge demo (scripts/demo-merge.sh) as README.md describes it: the
//! script runs with small inputs, and the trace processor finds in its
//! merged trace the processes, threads and tracks the README names, with
//! the JSON trace's events inside the proto trace's time span.
//!
//! Needs the generator built (`cargo build -p tracesync-tests --examples`;
//! scripts/test.sh builds every target).

use std::process::Command;

use serde_json::{Value, json};
use tracesync_tests::run::bin;
use tracesync_tests::tp;

fn column(rows: &[Vec<Value>]) -> Vec<Value> {
    rows.iter().map(|r| r[0].clone()).collect()
}

#[test]
fn demo_merge_script_gives_the_tracks_the_readme_names() {
    if !tp::require_or_skip("demo_merge_script_gives_the_tracks_the_readme_names") {
        return;
    }
    let tracesync = bin("tracesync");
    let bins = tracesync.parent().expect("target/<profile>");
    assert!(
        bins.join("examples/gen_trace").exists(),
        "gen_trace is not built: cargo build -p tracesync-tests --examples"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let run = Command::new("bash")
        .arg(tp::repo_root().join("scripts/demo-merge.sh"))
        .arg(&out)
        .env("B", bins)
        .env("MB", "1")
        .output()
        .expect("run the demo script");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let merged = out.join("merged.pftrace");
    let trainer = "(SELECT upid FROM process WHERE pid = 4242)";
    let res = tp::query(
        &merged,
        &[
            "SELECT pid, name FROM process WHERE pid != 0 ORDER BY pid",
            &format!(
                "SELECT name FROM thread WHERE upid = {trainer} AND name IS NOT NULL ORDER BY tid"
            ),
            &format!("SELECT name FROM process_counter_track WHERE upid = {trainer} ORDER BY name"),
            "SELECT DISTINCT t.name FROM track t JOIN slice s ON s.track_id = t.id \
             WHERE t.name GLOB 'worker-*-*' ORDER BY t.name",
            &format!(
                "SELECT min(s.ts) FROM slice s JOIN thread_track tt ON s.track_id = tt.id \
                 JOIN thread t USING(utid) WHERE t.upid = {trainer}"
            ),
            &format!(
                "SELECT min(ts), max(ts) FROM slice WHERE track_id NOT IN \
                 (SELECT tt.id FROM thread_track tt JOIN thread USING(utid) WHERE upid = {trainer})"
            ),
            "SELECT so.name, si.name FROM flow f JOIN slice so ON f.slice_out = so.id \
             JOIN slice si ON f.slice_in = si.id ORDER BY so.ts",
            "SELECT t.name, count(*) FROM slice s JOIN track t ON s.track_id = t.id \
             WHERE s.name = 'checkpoint upload' GROUP BY t.name",
        ],
    )
    .expect("trace processor");
    assert_eq!(
        res[0].rows,
        vec![
            vec![json!(1234), Value::Null],
            vec![json!(4242), json!("trainer")]
        ]
    );
    assert_eq!(column(&res[1].rows), [json!("main"), json!("dataloader")]);
    assert_eq!(
        column(&res[2].rows),
        [json!("memory allocated"), json!("memory reserved")]
    );
    let proto_tracks: Vec<Value> = (2..=5)
        .flat_map(|s| (0..4).map(move |t| json!(format!("worker-{s}-{t}"))))
        .collect();
    assert_eq!(column(&res[3].rows), proto_tracks);
    // The JSON events start inside the proto trace's span.
    let json_first = tp::as_i64(&res[4].rows[0][0]).expect("JSON slices");
    let proto = (&res[5].rows[0][0], &res[5].rows[0][1]);
    let (first, last) = (tp::as_i64(proto.0), tp::as_i64(proto.1));
    let (Some(first), Some(last)) = (first, last) else {
        panic!("no proto slices: {proto:?}");
    };
    assert!(
        (first..=last).contains(&json_first),
        "JSON's first slice {json_first} outside the proto trace's {first}..={last}"
    );
    assert_eq!(
        res[6].rows,
        vec![
            vec![json!("DataLoader.__next__"), json!("step")],
            vec![json!("optimizer.step"), json!("DataLoader.__next__")]
        ]
    );
    assert_eq!(
        res[7].rows,
        vec![vec![json!("checkpoint upload"), json!(1)]]
    );
}
