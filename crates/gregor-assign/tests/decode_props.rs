//! The structured twin of `fuzz/fuzz_targets/consumer_protocol.rs`, run by `cargo test`: the
//! consumer-protocol metadata members send (subscriptions, assignments, sticky and cooperative
//! user data) decodes or fails with a typed error, whatever the bytes. Valid encodings with bytes
//! flipped or cut, and lengths set to extremes, are tried as well as noise.

use bytes::Bytes;
use gregor_assign::protocol::{
    decode_assignment, decode_cooperative_user_data, decode_sticky_user_data, decode_subscription,
    encode_assignment, encode_sticky_user_data, encode_subscription, Assignment, StickyUserData,
    Subscription,
};
use proptest::prelude::*;

fn decode_all(data: &[u8]) {
    let _ = decode_subscription(data);
    let _ = decode_assignment(data);
    let _ = decode_sticky_user_data(data);
    let _ = decode_cooperative_user_data(data);
}

fn valid_encodings() -> Vec<Bytes> {
    let owned = vec![("t".to_string(), vec![0, 1, 2]), ("u".to_string(), vec![5])];
    let mut out = Vec::new();
    for v in 0..=3 {
        let sub = Subscription {
            topics: vec!["t".into(), "u".into()],
            user_data: Some(Bytes::from_static(b"ud")),
            owned_partitions: owned.clone(),
            generation_id: 4,
            rack_id: Some("r1".into()),
        };
        out.push(encode_subscription(&sub, v).expect("encode subscription"));
    }
    for v in 0..=3 {
        let a = Assignment {
            partitions: owned.clone(),
            user_data: Some(Bytes::from_static(b"x")),
        };
        out.push(encode_assignment(&a, v).expect("encode assignment"));
    }
    out.push(encode_sticky_user_data(&StickyUserData {
        partitions: owned,
        generation: Some(3),
    }));
    out
}

/// A valid encoding damaged: bytes replaced (often with length-like extremes), then cut.
fn damaged() -> impl Strategy<Value = Vec<u8>> {
    let edits = proptest::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop_oneof![Just(0xffu8), Just(0x7f), Just(0x00), any::<u8>()],
        ),
        1..6,
    );
    (
        proptest::sample::select(valid_encodings()),
        edits,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(valid, edits, cut)| {
            let mut b = valid.to_vec();
            for (at, byte) in edits {
                let i = at.index(b.len());
                b[i] = byte;
            }
            let keep = cut.index(b.len() + 1);
            b.truncate(keep.max(b.len() / 2));
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn noise_decodes_or_fails_cleanly(data in proptest::collection::vec(any::<u8>(), 0..128)) {
        decode_all(&data);
    }

    #[test]
    fn damaged_encodings_decode_or_fail_cleanly(data in damaged()) {
        decode_all(&data);
    }
}

#[test]
fn valid_encodings_still_decode() {
    for (i, b) in valid_encodings().iter().enumerate() {
        let ok = decode_subscription(b).is_ok()
            || decode_assignment(b).is_ok()
            || decode_sticky_user_data(b).is_ok();
        assert!(ok, "encoding {i} did not decode");
    }
}
