//! The cluster id in `meta.properties` (Kafka's format: `version=1`, `cluster.id=...`), read
//! at start-up and by `gregor storage format`.

/// The cluster id, kept in `meta.properties` in the data directory (created on first start,
/// a random UUID in Kafka's URL-safe base64 form).
pub fn cluster_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    cluster_id_on(&gregor_log::Disk::real(), data_dir)
}

/// The cluster id of a node of the quorum `voters`: the one its data directory records; for a
/// new directory, `explicit` (`--cluster-id`, like `kafka-storage format --cluster-id`), else
/// an id derived from the configured `controller.quorum.voters` (so nodes configured alike
/// agree without a format step, whether the quorum has one voter or several), else, for a
/// cluster of one without the setting (`voters` empty), a new random one. A directory of
/// another cluster is an error.
pub fn cluster_id_for(
    disk: &gregor_log::Disk,
    data_dir: &std::path::Path,
    voters: &std::collections::BTreeMap<u64, String>,
    explicit: Option<&str>,
) -> std::io::Result<String> {
    let path = data_dir.join("meta.properties");
    if path.exists() {
        let id = cluster_id_on(disk, data_dir)?;
        if let Some(want) = explicit.filter(|w| *w != id) {
            return Err(std::io::Error::other(format!(
                "{} belongs to cluster {id}, not --cluster-id {want}",
                data_dir.display()
            )));
        }
        return Ok(id);
    }
    let id = match explicit {
        Some(id) => id.to_string(),
        None if !voters.is_empty() => {
            let text: Vec<String> = voters.iter().map(|(id, a)| format!("{id}@{a}")).collect();
            kafka_uuid(uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                text.join(",").as_bytes(),
            ))
        }
        None => return cluster_id_on(disk, data_dir),
    };
    disk.write_atomic(&path, format!("version=1\ncluster.id={id}\n").as_bytes())
        .map_err(std::io::Error::other)?;
    Ok(id)
}

/// [`cluster_id`] through `disk` (tests pass one that models power loss). The new file is
/// written durably, its directory entry included: a cluster id that vanished after a power
/// loss would be replaced by a new one, and the broker would no longer match its own data.
pub fn cluster_id_on(
    disk: &gregor_log::Disk,
    data_dir: &std::path::Path,
) -> std::io::Result<String> {
    let path = data_dir.join("meta.properties");
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(id) = text.lines().find_map(|l| l.strip_prefix("cluster.id=")) {
            return Ok(id.trim().to_string());
        }
    }
    let id = kafka_uuid(uuid::Uuid::new_v4());
    disk.write_atomic(&path, format!("version=1\ncluster.id={id}\n").as_bytes())
        .map_err(std::io::Error::other)?;
    Ok(id)
}

/// Kafka prints UUIDs as 22 characters of URL-safe base64 without padding.
pub fn kafka_uuid(u: uuid::Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = u.as_bytes();
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | *b as u32;
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `meta.properties` survives a power loss (the disk model drops unsynced bytes and
    /// directory entries): the cluster id after the reboot is the one handed out before it.
    #[test]
    fn cluster_id_survives_a_power_loss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let faults = gregor_log::FaultInjector::power_model(dir.path()).expect("model");
        let disk = gregor_log::Disk::with_faults(faults.clone());
        let id = cluster_id_on(&disk, dir.path()).expect("cluster id");
        faults.power_loss(None).expect("power loss");
        assert_eq!(cluster_id_on(&disk, dir.path()).expect("cluster id"), id);
    }
}
