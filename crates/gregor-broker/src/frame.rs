//! Kafka's wire framing: a big-endian `int32` size, then the request header and body.
//!
//! Decoding is split so that the connection can tell apart what deserves an error response
//! (an unsupported ApiVersions version: KIP-511 answers it with the versions we do support) from
//! what Kafka answers by closing the connection (unknown API keys, other unsupported versions,
//! malformed requests, oversized frames).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::api;

/// Why a request could not be turned into a `RequestKind`.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("request of {size} bytes exceeds socket.request.max.bytes ({max})")]
    TooLarge { size: i64, max: usize },
    #[error("request too short for a header ({0} bytes)")]
    Truncated(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("unsupported version {version} of {api:?}")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one size-prefixed frame. `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    match read_frame_size(reader, max).await? {
        Some(size) => read_frame_body(reader, size).await.map(Some),
        None => Ok(None),
    }
}

/// Reads a frame's size prefix and checks it against `max` before anything is allocated.
/// `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame_size<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<usize>, FrameError> {
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size) as i64;
    if size < 0 || size as usize > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(Some(size as usize))
}

/// Reads a frame body of `size` bytes (already checked by [`read_frame_size`]).
pub async fn read_frame_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<Bytes, FrameError> {
    let mut buf = BytesMut::zeroed(size);
    reader.read_exact(&mut buf).await?;
    Ok(buf.freeze())
}

/// A decoded request.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: RequestKind,
}

/// Decodes a frame's header and body, checking the API key and version against what Gregor
/// implements.
pub fn decode_request(mut frame: Bytes) -> Result<Request, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::Truncated(frame.len()));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApiKey(key))?;
    let Some(range) = api::supported(api_key) else {
        return Err(FrameError::UnknownApiKey(key));
    };
    if version < range.0 || version > range.1 {
        return Err(FrameError::UnsupportedVersion {
            api: api_key,
            version,
            correlation_id,
        });
    }
    let malformed = |reason: String| FrameError::Malformed {
        api: api_key,
        version,
        reason,
    };
    let header_version = api_key.request_header_version(version);
    let header =
        RequestHeader::decode(&mut frame, header_version).map_err(|e| malformed(e.to_string()))?;
    let body =
        RequestKind::decode(api_key, &mut frame, version).map_err(|e| malformed(e.to_string()))?;
    // Bytes after the body are ignored, as Kafka's request parser does: some clients send them
    // (librdkafka 2.16's Metadata v12 carries three).
    if frame.has_remaining() {
        tracing::debug!(api = ?api_key, version, trailing = frame.remaining(), "ignoring bytes after the request body");
    }
    Ok(Request {
        api_key,
        header,
        body,
    })
}

/// Encodes a response frame (size, header, body).
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, EncodeError> {
    // Fetch responses carry megabytes of records: size the buffer once instead of growing it
    // (each growth copies everything encoded so far).
    let body_size = match body {
        ResponseKind::Fetch(f) => f.compute_size(version).unwrap_or(0),
        _ => 0,
    };
    let mut buf = BytesMut::with_capacity(64 + body_size.max(192));
    buf.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| EncodeError(e.to_string()))?;
    body.encode(&mut buf, version)
        .map_err(|e| EncodeError(e.to_string()))?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// A response that cannot be encoded (a bug: a field out of range for the version).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode response: {0}")]
pub struct EncodeError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzz/decode_request: a Metadata v0 request whose topic array claims ~234 million
    /// entries in 14 bytes. It must be a decode error, not an allocation of gigabytes.
    #[test]
    fn huge_array_length_is_an_error_not_an_allocation() {
        let frame = Bytes::from_static(&[0, 3, 0, 0, 0, 0, 0, 255, 255, 255, 14, 0, 0, 0]);
        assert!(matches!(
            decode_request(frame),
            Err(FrameError::Malformed { .. })
        ));
    }

    /// librdkafka 2.16 sends Metadata v12 with three bytes after the body; Kafka answers it.
    #[test]
    fn trailing_bytes_after_the_body_are_ignored() {
        let hex = "0003000c00000003000772646b61666b610000000000010000";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let req = decode_request(Bytes::from(bytes)).expect("decodes");
        assert_eq!(req.api_key, ApiKey::Metadata);
        assert_eq!(req.header.correlation_id, 3);
    }

    #[test]
    fn unknown_keys_and_versions_are_reported() {
        let unknown = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
        assert!(matches!(
            decode_request(unknown),
            Err(FrameError::UnknownApiKey(0x7f00))
        ));
        let versions = Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff]);
        assert!(matches!(
            decode_request(versions),
            Err(FrameError::UnsupportedVersion {
                correlation_id: 7,
                ..
            })
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 18])),
            Err(FrameError::Truncated(2))
        ));
    }
}
