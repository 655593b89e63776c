//! A Kafka client pointed at a controller listener, by mistake: its first request is an
//! ApiVersions, which is not a controller RPC frame. It is answered as Kafka's controllers
//! answer, in Kafka's format, listing only ApiVersions: so the client learns at once that this
//! listener serves no client APIs (no Metadata) instead of waiting out its timeout on a closed
//! connection. Anything else that does not read closes the connection, as before.

/// Kafka's ApiVersions api key.
const API_VERSIONS: i16 = 18;
/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = 35;

/// The answer (a whole frame, length included) to `frame` (a frame's bytes without its
/// length) if it is a Kafka ApiVersions request; `None` otherwise.
///
/// The answer is the version 0 body, as Kafka sends to a version it does not know: a v0
/// request gets no error, a later one UNSUPPORTED_VERSION, and the client asks again in v0
/// (the list says ApiVersions 0..=0 is all there is).
pub fn api_versions_answer(frame: &[u8]) -> Option<Vec<u8>> {
    let header = frame.get(..8)?;
    let api_key = i16::from_be_bytes([header[0], header[1]]);
    let api_version = i16::from_be_bytes([header[2], header[3]]);
    if api_key != API_VERSIONS || !(0..=64).contains(&api_version) {
        return None;
    }
    let correlation_id = &header[4..8];
    let error = if api_version == 0 {
        0
    } else {
        UNSUPPORTED_VERSION
    };
    let mut body = Vec::with_capacity(20);
    body.extend_from_slice(correlation_id);
    body.extend_from_slice(&error.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // one api key
    body.extend_from_slice(&API_VERSIONS.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes()); // min version
    body.extend_from_slice(&0i16.to_be_bytes()); // max version
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(api_key: i16, version: i16, correlation: i32) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&api_key.to_be_bytes());
        f.extend_from_slice(&version.to_be_bytes());
        f.extend_from_slice(&correlation.to_be_bytes());
        f.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
        f
    }

    #[test]
    fn a_v0_api_versions_gets_the_list_without_error() {
        let answer = api_versions_answer(&request(18, 0, 7)).expect("an answer");
        assert_eq!(
            answer,
            [
                &[0, 0, 0, 16][..],
                &[0, 0, 0, 7],
                &[0, 0],
                &[0, 0, 0, 1],
                &[0, 18, 0, 0, 0, 0]
            ]
            .concat()
        );
    }

    #[test]
    fn a_later_version_is_told_to_ask_in_v0() {
        let answer = api_versions_answer(&request(18, 3, 9)).expect("an answer");
        assert_eq!(&answer[4..8], &9i32.to_be_bytes());
        assert_eq!(&answer[8..10], &UNSUPPORTED_VERSION.to_be_bytes());
    }

    #[test]
    fn anything_else_gets_no_answer() {
        assert_eq!(api_versions_answer(&request(3, 12, 1)), None);
        assert_eq!(api_versions_answer(&request(18, -1, 1)), None);
        assert_eq!(api_versions_answer(&[0, 18, 0]), None);
        assert_eq!(api_versions_answer(&[]), None);
    }
}
