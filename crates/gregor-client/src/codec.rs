//! Kafka request and response frames: a big-endian `int32` size, then the header, then the body.
//!
//! Pure functions over bytes. The connection's reader task only needs a response's correlation
//! id to route it; decoding the body happens in the task that sent the request, which knows the
//! API and version.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::error::KafkaCode;

/// Largest response frame accepted. A size beyond it means a corrupt stream or a peer that is
/// not a Kafka broker (an HTTP server answering with text, say), not a real response.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// Encodes `request` at `version` as a complete frame, size prefix included.
pub fn encode_request<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> Result<Bytes, String> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    header
        .encode(&mut buf, R::header_version(version))
        .map_err(|e| format!("request header: {e}"))?;
    request
        .encode(&mut buf, version)
        .map_err(|e| format!("request body (version {version}): {e}"))?;
    let size = i32::try_from(buf.len() - 4).map_err(|_| "request larger than 2 GiB".to_string())?;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// Validates a frame size read from the wire.
pub fn check_frame_size(size: i32) -> Result<usize, String> {
    match usize::try_from(size) {
        Ok(n) if (4..=MAX_RESPONSE_BYTES).contains(&n) => Ok(n),
        _ => Err(format!(
            "response frame size {size} outside 4..={MAX_RESPONSE_BYTES}"
        )),
    }
}

/// The correlation id of a response frame (size prefix removed): its first four bytes in every
/// response header version.
pub fn response_correlation_id(frame: &[u8]) -> Option<i32> {
    let bytes: [u8; 4] = frame.get(0..4)?.try_into().ok()?;
    Some(i32::from_be_bytes(bytes))
}

/// Decodes a response frame (size prefix removed) of request type `R` sent at `version`.
pub fn decode_response<R: Request>(mut frame: Bytes, version: i16) -> Result<R::Response, String> {
    let header_version = <R::Response as HeaderVersion>::header_version(version);
    ResponseHeader::decode(&mut frame, header_version)
        .map_err(|e| format!("response header: {e}"))?;
    R::Response::decode(&mut frame, version)
        .map_err(|e| format!("response body (version {version}): {e}"))
}

/// Decodes an ApiVersions response. A broker that does not support the request's version answers
/// in version 0 with `UNSUPPORTED_VERSION` and its own ranges (KIP-511), so the error code — the
/// body's first field in every version — decides which version to decode. Returns the version
/// the body was decoded in.
pub fn decode_api_versions_response(
    mut frame: Bytes,
    version: i16,
) -> Result<(i16, ApiVersionsResponse), String> {
    // The ApiVersions response header is always version 0, so clients can read it before they
    // know anything about the broker.
    ResponseHeader::decode(&mut frame, 0).map_err(|e| format!("response header: {e}"))?;
    if frame.remaining() < 2 {
        return Err("ApiVersions response shorter than its error code".to_string());
    }
    let error_code = i16::from_be_bytes([frame[0], frame[1]]);
    let body_version = if error_code == KafkaCode::UNSUPPORTED_VERSION.0 {
        0
    } else {
        version
    };
    let response = ApiVersionsResponse::decode(&mut frame, body_version)
        .map_err(|e| format!("ApiVersions response body (version {body_version}): {e}"))?;
    Ok((body_version, response))
}

/// Test support: a response frame (size prefix removed) as a broker would send it.
#[cfg(test)]
pub(crate) fn encode_response_frame<R: Request>(
    response: &R::Response,
    version: i16,
    correlation_id: i32,
) -> Bytes {
    let mut buf = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(
            &mut buf,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .expect("response header encodes");
    response
        .encode(&mut buf, version)
        .expect("response encodes");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest, MetadataResponse};

    #[test]
    fn request_frame_has_size_header_and_body() {
        let req = MetadataRequest::default().with_topics(None);
        let frame = encode_request(&req, 12, 42, "gregor-cli").unwrap();
        let mut buf = frame.clone();
        let size = buf.get_i32();
        assert_eq!(size as usize, frame.len() - 4);
        let header = kafka_protocol::protocol::decode_request_header_from_buffer(&mut buf).unwrap();
        assert_eq!(header.request_api_key, 3);
        assert_eq!(header.request_api_version, 12);
        assert_eq!(header.correlation_id, 42);
        assert_eq!(header.client_id.as_deref(), Some("gregor-cli"));
        let body = MetadataRequest::decode(&mut buf, 12).unwrap();
        assert_eq!(body, req);
        assert_eq!(buf.remaining(), 0);
    }

    #[test]
    fn field_not_in_version_is_refused_not_silently_dropped() {
        // include_cluster_authorized_operations exists only in v8..=10.
        let req = MetadataRequest::default().with_include_cluster_authorized_operations(true);
        assert!(encode_request(&req, 12, 1, "c").is_err());
    }

    #[test]
    fn response_roundtrip_and_correlation_id() {
        let resp = MetadataResponse::default().with_controller_id(3.into());
        let frame = encode_response_frame::<MetadataRequest>(&resp, 12, 7);
        assert_eq!(response_correlation_id(&frame), Some(7));
        let decoded = decode_response::<MetadataRequest>(frame, 12).unwrap();
        assert_eq!(decoded.controller_id, 3);
    }

    #[test]
    fn truncated_response_is_an_error() {
        let resp = MetadataResponse::default().with_controller_id(3.into());
        let frame = encode_response_frame::<MetadataRequest>(&resp, 12, 7);
        let cut = frame.slice(0..frame.len() - 3);
        assert!(decode_response::<MetadataRequest>(cut, 12).is_err());
        assert_eq!(response_correlation_id(&[0, 1]), None);
    }

    #[test]
    fn frame_sizes_are_bounded() {
        assert!(check_frame_size(-1).is_err());
        assert!(check_frame_size(3).is_err());
        assert_eq!(check_frame_size(4), Ok(4));
        // "HTTP" read as a size.
        assert!(check_frame_size(i32::from_be_bytes(*b"HTTP")).is_err());
    }

    #[test]
    fn api_versions_unsupported_version_answer_is_read_as_v0() {
        // The client asked in v4; the broker only knows up to v2 and answers in v0.
        let mut resp = ApiVersionsResponse::default().with_error_code(35);
        resp.api_keys = vec![ApiVersion::default()
            .with_api_key(18)
            .with_min_version(0)
            .with_max_version(2)];
        let frame = encode_response_frame::<ApiVersionsRequest>(&resp, 0, 1);
        let (v, decoded) = decode_api_versions_response(frame, 4).unwrap();
        assert_eq!(v, 0);
        assert_eq!(decoded.error_code, 35);
        assert_eq!(decoded.api_keys[0].max_version, 2);

        // A normal v3 answer decodes in v3.
        let ok = ApiVersionsResponse::default().with_throttle_time_ms(5);
        let frame = encode_response_frame::<ApiVersionsRequest>(&ok, 3, 2);
        let (v, decoded) = decode_api_versions_response(frame, 3).unwrap();
        assert_eq!((v, decoded.throttle_time_ms), (3, 5));
    }
}
