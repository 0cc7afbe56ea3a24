use super::*;
use tracesync_protocol::relay::v1::{self, frame::Body};

#[test]
fn batch_frame_is_what_prost_writes() {
    let packets = vec![
        Bytes::from_static(b"packet one"),
        Bytes::from(vec![9u8; 300]),
    ];
    let clocks = RelayClocks {
        boottime_ns: 1,
        monotonic_ns: 2,
        realtime_ns: 3,
        monotonic_raw_ns: 0,
    };
    for (seq, first) in [(1, 0), (77, 123_456), (1 << 40, 1 << 50)] {
        let frame = Frame {
            body: Some(Body::Batch(v1::Batch {
                seq,
                first_packet_index: first,
                packets: packets.clone(),
                clocks: Some(clocks),
            })),
        };
        let wire = Bytes::from(
            v1::Batch {
                packets: packets.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let out = OutFrame::batch(seq, first, wire, &clocks).unwrap();
        let mut want = BytesMut::new();
        FrameCodec::default().encode(frame, &mut want).unwrap();
        let got: Vec<u8> = out.parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(got, want.to_vec(), "seq {seq}");
        assert_eq!(out.len(), want.len());
    }
}

#[tokio::test]
async fn vectored_writes_keep_order_across_partial_writes() {
    // A pipe with a small buffer forces partial writes.
    let (mut a, mut b) = tokio::io::duplex(7);
    let mut chunks: VecDeque<Bytes> = (0..50u8)
        .map(|i| Bytes::from(vec![i; usize::from(i % 5) + 1]))
        .collect();
    let want: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got)
            .await
            .unwrap();
        got
    });
    write_chunks(&mut a, &mut chunks).await.unwrap();
    drop(a);
    assert_eq!(reader.await.unwrap(), want);
    assert!(chunks.is_empty());
}
