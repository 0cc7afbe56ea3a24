//! Cost of signing and checking probe datagrams (the relay signs its reply
//! between reading t3 and sending it, so this time lands on the return leg).

use divan::Bencher;
use tracesync_protocol::probe::{self, ProbeKey};
use tracesync_protocol::relay::v1::{ProbeReply, probe_body::Kind};

fn main() {
    divan::main();
}

fn reply() -> Kind {
    Kind::Reply(ProbeReply {
        nonce: 123_456,
        t2_ns: 9_876_543_210_123,
        t3_ns: 9_876_543_212_345,
        boottime_minus_monotonic_ns: 1_234_567,
    })
}

/// Encode + HMAC-SHA256: what the relay does after t3.
#[divan::bench]
fn seal_reply(bencher: Bencher) {
    let key = ProbeKey::new(&[7; 32]).expect("key");
    bencher.bench(|| probe::seal(divan::black_box(&key), 0x1234_5678_9abc_def0, reply()));
}

/// Decode + constant-time MAC check + body decode: what either end does
/// after the receive stamp.
#[divan::bench]
fn open_reply(bencher: Bencher) {
    let key = ProbeKey::new(&[7; 32]).expect("key");
    let bytes = probe::seal(&key, 0x1234_5678_9abc_def0, reply());
    bencher.bench(|| {
        let datagram = probe::envelope(divan::black_box(&bytes)).expect("decodes");
        probe::open(&key, &datagram).expect("authentic")
    });
}
