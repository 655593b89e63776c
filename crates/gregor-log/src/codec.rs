//! Compression codecs of a batch's records section, as streams: decompression never holds
//! more than the decoder's own state plus what the caller reads, and stops at a cap on
//! decompressed bytes whatever the compressed data or the batch header claim.

use std::io::{self, Read};

use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{self, BatchHeader, Codec, HEADER_LEN};
use crate::error::{LogError, Result};

/// Cap on the decompressed records section of one batch: 64 MiB. A compressed batch whose
/// records decompress to more is refused with `INVALID_RECORD`, on append, in recovery and
/// wherever stored batches are decoded, whatever its header claims. The same fixed number
/// everywhere, so a batch accepted once is never refused later because a setting changed.
/// Uncompressed batches are bounded by `max.message.bytes` instead.
pub const MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// Marker inside an `io::Error`: a decoder would have produced more than the cap.
#[derive(Debug)]
struct OverCap(usize);

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "decompressed records exceed the cap of {} bytes", self.0)
    }
}

impl std::error::Error for OverCap {}

/// The error for a records section that decompresses to more than `cap` bytes.
pub(crate) fn over_cap(cap: usize) -> LogError {
    LogError::InvalidRecord(OverCap(cap).to_string())
}

/// Map an error from a decompressing reader: over the cap is `INVALID_RECORD`, anything else
/// (bad framing, checksum, truncated stream) is a corrupt batch.
pub(crate) fn read_error(e: io::Error) -> LogError {
    if let Some(OverCap(cap)) = e.get_ref().and_then(|i| i.downcast_ref::<OverCap>()) {
        return over_cap(*cap);
    }
    LogError::CorruptMessage(format!("cannot decompress records: {e}"))
}

/// zstd back-reference window limit (log2): a frame asking for a larger window would make the
/// decoder allocate it, so it is refused instead. 2^26 = 64 MiB, the decompression cap; producers'
/// windows are far smaller (librdkafka and the Java client at default levels use 2^21 or less).
const ZSTD_WINDOW_LOG_MAX: u32 = 26;

/// A reader of the decompressed records section `data` (the bytes after the batch header).
/// The reader itself does not count bytes: callers bound what they read by `cap`; `cap` is
/// passed here for codecs whose frames announce a block size before it is allocated.
pub(crate) fn reader<'a>(codec: Codec, data: &'a [u8], cap: usize) -> Result<Box<dyn Read + 'a>> {
    let corrupt =
        |e: io::Error| LogError::CorruptMessage(format!("cannot decompress records: {e}"));
    Ok(match codec {
        Codec::None => Box::new(data),
        // Java's GZIPInputStream reads concatenated members, so a batch may hold several.
        Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(data)),
        Codec::Snappy => Box::new(SnappyReader::new(data, cap)),
        Codec::Lz4 => Box::new(lz4::Decoder::new(data).map_err(corrupt)?),
        Codec::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(corrupt)?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
            Box::new(d)
        }
    })
}

/// Decompress a whole records section into memory, refusing more than `cap` bytes.
pub(crate) fn decompress(codec: Codec, data: &[u8], cap: usize) -> Result<Vec<u8>> {
    if codec == Codec::None {
        return Ok(data.to_vec());
    }
    let mut out = Vec::new();
    reader(codec, data, cap)?
        .take(cap as u64 + 1)
        .read_to_end(&mut out)
        .map_err(read_error)?;
    if out.len() > cap {
        return Err(over_cap(cap));
    }
    Ok(out)
}

/// Compress a records section.
pub(crate) fn compress(codec: Codec, data: &[u8]) -> Result<Vec<u8>> {
    let mut out = BytesMut::new();
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(data);
        Ok(())
    };
    let r = match codec {
        Codec::None => {
            out.extend_from_slice(data);
            Ok(())
        }
        Codec::Gzip => Gzip::compress(&mut out, fill),
        Codec::Snappy => Snappy::compress(&mut out, fill),
        Codec::Lz4 => Lz4::compress(&mut out, fill),
        Codec::Zstd => Zstd::compress(&mut out, fill),
    };
    r.map_err(|e| LogError::InvalidArgument(format!("cannot compress records: {e}")))?;
    Ok(out.to_vec())
}

/// The same batch with its records section compressed with `codec` instead (Kafka's
/// `compression.type` other than `producer`): header fields are kept, the codec bits, the
/// length and the CRC change. At most `cap` bytes are decompressed.
pub(crate) fn recompress(
    batch: &[u8],
    h: &BatchHeader,
    codec: Codec,
    cap: usize,
) -> Result<Vec<u8>> {
    let from = h
        .codec()
        .ok_or_else(|| LogError::InvalidRecord("unknown compression codec".into()))?;
    let raw = decompress(from, &batch[HEADER_LEN..h.size()], cap)?;
    let section = compress(codec, &raw)?;
    batch::with_records_section(batch, codec, &section)
}

/// Kafka's snappy framing (xerial's `SnappyOutputStream`): a 16-byte header, then blocks of
/// `[u32 length][raw snappy]`. Without the header the section is one raw snappy block (what
/// some clients send). Each block's announced length is checked against what is left of the
/// cap before anything is allocated for it.
struct SnappyReader<'a> {
    input: &'a [u8],
    framed: bool,
    started: bool,
    block: Vec<u8>,
    pos: usize,
    cap_left: usize,
    cap: usize,
}

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], cap: usize) -> SnappyReader<'a> {
        let framed = input.len() >= XERIAL_HEADER_LEN && input.starts_with(XERIAL_MAGIC);
        SnappyReader {
            input: if framed {
                &input[XERIAL_HEADER_LEN..]
            } else {
                input
            },
            framed,
            started: false,
            block: Vec::new(),
            pos: 0,
            cap_left: cap,
            cap,
        }
    }

    /// Decompress the next block into `self.block`; `false` at the end of the input.
    fn next_block(&mut self) -> io::Result<bool> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let raw = if self.framed {
            if self.input.is_empty() {
                return Ok(false);
            }
            let Some((len, rest)) = self.input.split_first_chunk::<4>() else {
                return Err(bad("truncated snappy block length".into()));
            };
            let len = u32::from_be_bytes(*len) as usize;
            let block = rest
                .get(..len)
                .ok_or_else(|| bad(format!("snappy block of {len} bytes is truncated")))?;
            self.input = &rest[len..];
            block
        } else {
            if self.started {
                return Ok(false);
            }
            std::mem::take(&mut self.input)
        };
        self.started = true;
        let n = snap::raw::decompress_len(raw).map_err(|e| bad(e.to_string()))?;
        if n > self.cap_left {
            return Err(io::Error::other(OverCap(self.cap)));
        }
        self.cap_left -= n;
        self.block.clear();
        self.block.resize(n, 0);
        let got = snap::raw::Decoder::new()
            .decompress(raw, &mut self.block)
            .map_err(|e| bad(e.to_string()))?;
        self.block.truncate(got);
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips_and_stops_at_the_cap() {
        let data = vec![7u8; 200_000];
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let packed = compress(codec, &data).expect("compress");
            assert!(packed.len() < data.len() / 10, "{codec:?} compresses zeros");
            assert_eq!(decompress(codec, &packed, data.len()).expect("fits"), data);
            let err = decompress(codec, &packed, data.len() - 1).expect_err("over the cap");
            assert!(
                matches!(err, LogError::InvalidRecord(ref m) if m.contains("cap")),
                "{codec:?}: {err}"
            );
        }
    }

    #[test]
    fn garbage_is_a_corrupt_batch_not_a_panic() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            for input in [
                &b""[..],
                b"\x00",
                b"\x82SNAPPY\x00\0\0\0\x01\0\0\0\x01\xff\xff\xff\xff",
            ] {
                let _ = decompress(codec, input, 1 << 20);
            }
        }
        // A raw snappy block announcing 128 MiB is refused before anything is allocated.
        let lying = [0x80, 0x80, 0x80, 0x40, 0x00];
        assert!(matches!(
            decompress(Codec::Snappy, &lying, 1 << 20),
            Err(LogError::InvalidRecord(_))
        ));
    }
}
