//! Member id generation: `{client_id}-{uuid}` (dynamic members) or `{group_instance_id}-{uuid}`
//! (static members), as Kafka names them.
//!
//! The UUID comes from a seeded generator so that a coordinator driven by the same inputs and the
//! same seed produces the same ids (deterministic tests and simulation). The shell seeds it from
//! the operating system's randomness so that ids differ across coordinators and restarts.

/// A seedable source of version-4 (random) UUIDs.
#[derive(Debug, Clone)]
pub struct UuidSource {
    state: u64,
}

impl UuidSource {
    pub fn new(seed: u64) -> Self {
        UuidSource { state: seed }
    }

    /// splitmix64: small, fast and well distributed; ids need uniqueness, not secrecy.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A random UUID in Java's `UUID.toString()` form (`8-4-4-4-12` lower-case hex digits).
    pub fn next_uuid(&mut self) -> String {
        let hi = (self.next_u64() & !0xF000) | 0x4000; // version 4
        let lo = (self.next_u64() & !(0b11 << 62)) | (0b10 << 62); // IETF variant
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xFFFF,
            hi & 0xFFFF,
            lo >> 48,
            lo & 0xFFFF_FFFF_FFFF
        )
    }

    /// A member id for a joining member.
    pub fn member_id(&mut self, client_id: &str, group_instance_id: Option<&str>) -> String {
        let prefix = group_instance_id.unwrap_or(client_id);
        format!("{prefix}-{}", self.next_uuid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_shape_and_determinism() {
        let mut a = UuidSource::new(7);
        let mut b = UuidSource::new(7);
        let u = a.next_uuid();
        assert_eq!(u, b.next_uuid());
        let parts: Vec<&str> = u.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "version 4: {u}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {u}"
        );
        assert_ne!(u, a.next_uuid());
    }

    #[test]
    fn member_id_prefix() {
        let mut s = UuidSource::new(1);
        assert!(s.member_id("consumer-1", None).starts_with("consumer-1-"));
        assert!(s
            .member_id("consumer-1", Some("inst-a"))
            .starts_with("inst-a-"));
    }
}
