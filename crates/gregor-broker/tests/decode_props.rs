//! The structured twin of `fuzz/fuzz_targets/decode_request.rs`, run by `cargo test`: request
//! decoding answers any bytes with a request or a typed error. A panic fails the case; an
//! allocation sized by a length read off the wire aborts the process, failing the run.

use bytes::Bytes;
use gregor_broker::frame::decode_request;
use proptest::prelude::*;

/// Every API key Gregor decodes, with its version range.
fn supported() -> Vec<(i16, i16, i16)> {
    gregor_broker::api::api_versions()
        .into_iter()
        .map(|v| (v.api_key, v.min_version, v.max_version))
        .collect()
}

/// A request header (v1 layout: key, version, correlation id, client id) for a supported API at
/// a supported version, then `body`. Flexible versions read a tagged-field section after the
/// client id, which arbitrary bodies also exercise.
fn frame(api: (i16, i16, i16), version_pick: u16, client: &[u8], body: &[u8]) -> Bytes {
    let (key, lo, hi) = api;
    let version = lo + (version_pick % ((hi - lo + 1) as u16)) as i16;
    let mut f = Vec::with_capacity(10 + client.len() + body.len());
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&(client.len() as i16).to_be_bytes());
    f.extend_from_slice(client);
    f.extend_from_slice(body);
    Bytes::from(f)
}

/// Bodies that look like Kafka encodings: runs of big lengths, -1, small counts and varints.
fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(vec![0x7f, 0xff, 0xff, 0xff]), // i32::MAX as an array or string length
        Just(vec![0xff, 0xff, 0xff, 0xff]), // -1: null
        Just(vec![0xff, 0xff, 0xff, 0xff, 0x0f]), // a huge unsigned varint (compact length)
        Just(vec![0x00, 0x00, 0x00, 0x02]),
        Just(vec![0x00]),
        Just(vec![0x01]),
        any::<[u8; 2]>().prop_map(|b| b.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..16),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(Bytes::from(data));
    }

    #[test]
    fn hostile_bodies_for_every_supported_api_decode_or_fail_cleanly(
        api in proptest::sample::select(supported()),
        version_pick in any::<u16>(),
        client in proptest::collection::vec(any::<u8>(), 0..8),
        body in hostile_body(),
    ) {
        let _ = decode_request(frame(api, version_pick, &client, &body));
    }
}
