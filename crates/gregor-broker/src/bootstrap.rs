//! Bootstrap metadata records (KIP-900's `kafka-storage format --add-scram`): records written
//! into a data directory before the first start, which the first active controller of a new
//! metadata log commits ahead of its first write (`Controller::bootstrap_records_due`). Today
//! these are SCRAM credentials, so a cluster can require authentication from its first start.
//!
//! File `bootstrap.records` in the data directory: the magic line, a record count, then each
//! record's encoding (`MetadataRecord::encode`) prefixed with its length (u32, big-endian).
//! It holds derived SCRAM keys, never passwords.

use gregor_meta::MetadataRecord;
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const BOOTSTRAP_FILE: &str = "bootstrap.records";
const MAGIC: &[u8] = b"gregor-bootstrap-records v1\n";

/// A bootstrap file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a bootstrap records file: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

/// The path of the bootstrap file of `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(BOOTSTRAP_FILE)
}

/// The file's bytes for `records`.
pub fn encode(records: &[MetadataRecord]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for r in records {
        let bytes = r.encode();
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

/// Writes the bootstrap records of `data_dir` durably (replacing any earlier file).
pub fn write(
    disk: &gregor_log::Disk,
    data_dir: &Path,
    records: &[MetadataRecord],
) -> std::io::Result<()> {
    disk.write_atomic(&path(data_dir), &encode(records))
        .map_err(std::io::Error::other)
}

/// The bootstrap records of `data_dir`; none when it has no bootstrap file.
pub fn read(data_dir: &Path) -> Result<Vec<MetadataRecord>, BootstrapError> {
    let path = path(data_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(BootstrapError::Io { path, source }),
    };
    decode(&bytes).map_err(|detail| BootstrapError::Corrupt { path, detail })
}

fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
    if rest.len() < n {
        return Err(format!("truncated in {what}"));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn u32_at(rest: &mut &[u8], what: &str) -> Result<usize, String> {
    let b = take(rest, 4, what)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// Parses the file's bytes.
pub fn decode(bytes: &[u8]) -> Result<Vec<MetadataRecord>, String> {
    let mut rest = bytes;
    if take(&mut rest, MAGIC.len(), "the header")? != MAGIC {
        return Err("wrong header".into());
    }
    let count = u32_at(&mut rest, "the record count")?;
    let mut records = Vec::new();
    for i in 0..count {
        let len = u32_at(&mut rest, "a record length")?;
        let record = MetadataRecord::decode(take(&mut rest, len, "a record")?)
            .map_err(|e| format!("record {i}: {e}"))?;
        records.push(record);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last record", rest.len()));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_meta::{ScramCredential, ScramMechanism, UserScramCredentialRecord};

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let credential = ScramCredential::from_password(
            ScramMechanism::Sha512,
            &gregor_sasl::Password::new("admin-secret"),
            b"salt",
            4096,
        )
        .expect("credential");
        let records = vec![MetadataRecord::UserScramCredential(
            UserScramCredentialRecord {
                name: "admin".into(),
                mechanism: ScramMechanism::Sha512,
                credential,
            },
        )];
        let tmp = tempfile::tempdir().expect("temp dir");
        assert_eq!(read(tmp.path()).expect("no file"), Vec::new());
        write(&gregor_log::Disk::real(), tmp.path(), &records).expect("write");
        assert_eq!(read(tmp.path()).expect("read"), records);
        let bytes = encode(&records);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }
}
