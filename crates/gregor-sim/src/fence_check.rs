//! `healthy-broker-fenced`: the controller must not fence a broker whose process runs and whose
//! links work. The driver records, per node, the spans in which a fault could have made its
//! session lapse (its own crash, a fault on any of its links, a disk or clock fault anywhere,
//! a boot) and, from the most advanced node's metadata, every time a registration turns
//! fenced within its broker epoch; a fence with no span near it is a finding.

use crate::property::{Property, Violation};

/// How long a broker must have been left alone before a fence of it is flagged: its session
/// (`broker.session.timeout.ms` in `broker_node.rs`) plus a margin for what a fault leaves
/// behind once healed (a stalled connection's 3 s retry, a commit that waited for the quorum).
pub const HEALTHY_FOR_MS: u64 = 3_000 + 2_000;

/// A time in which some nodes were not healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub nodes: Vec<usize>,
    pub from_ms: u64,
    /// `None` while it lasts.
    pub to_ms: Option<u64>,
    pub why: String,
}

/// A broker's registration seen turning fenced (its epoch unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub broker: usize,
    pub epoch: i64,
    /// When the most advanced node's metadata first showed it.
    pub at_ms: u64,
}

/// What the driver saw of the nodes' health and of the fences.
#[derive(Debug, Default)]
pub struct HealthLog {
    pub spans: Vec<Span>,
    pub fences: Vec<Fence>,
}

impl HealthLog {
    /// Opens a span over `nodes` from `now`; returns its id for [`HealthLog::close`].
    pub fn open(&mut self, nodes: Vec<usize>, now: u64, why: impl Into<String>) -> usize {
        self.spans.push(Span {
            nodes,
            from_ms: now,
            to_ms: None,
            why: why.into(),
        });
        self.spans.len() - 1
    }

    pub fn close(&mut self, id: usize, now: u64) {
        if let Some(s) = self.spans.get_mut(id) {
            s.to_ms.get_or_insert(now);
        }
    }

    /// Node `n` was not running (or booted) at `now`: extends its last such mark when it
    /// follows on, so a node down for seconds leaves one span rather than one per step.
    pub fn mark(&mut self, n: usize, now: u64, why: &str) {
        if let Some(s) = self.spans.iter_mut().rev().find(|s| s.nodes == [n]) {
            if s.why == why && s.to_ms.is_some_and(|to| now <= to + 50) {
                s.to_ms = Some(now);
                return;
            }
        }
        let id = self.open(vec![n], now, why);
        self.close(id, now);
    }

    /// The span that last kept `fence.broker` from being healthy for [`HEALTHY_FOR_MS`]
    /// before the fence, if any.
    fn excuse(&self, fence: &Fence) -> Option<&Span> {
        self.spans.iter().find(|s| {
            s.nodes.contains(&fence.broker)
                && s.from_ms <= fence.at_ms
                && s.to_ms.is_none_or(|to| to + HEALTHY_FOR_MS > fence.at_ms)
        })
    }
}

/// Every fence of a broker that had been healthy for [`HEALTHY_FOR_MS`]: up since longer than
/// that (a boot is a span), no fault on it, its links or any disk or clock meanwhile.
pub fn check(log: &HealthLog) -> Vec<Violation> {
    log.fences
        .iter()
        .filter(|f| f.at_ms >= HEALTHY_FOR_MS && log.excuse(f).is_none())
        .map(|f| {
            let last = log
                .spans
                .iter()
                .filter(|s| s.nodes.contains(&f.broker) && s.from_ms <= f.at_ms)
                .filter_map(|s| s.to_ms.map(|to| (to, s.why.as_str())))
                .max();
            Violation::new(
                Property::HealthyBrokerFenced,
                format!(
                    "broker {} (epoch {}) fenced by {} ms while healthy; its last fault: {}",
                    f.broker,
                    f.epoch,
                    f.at_ms,
                    last.map_or("none".to_string(), |(to, why)| format!(
                        "{why}, ended at {to} ms"
                    ))
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 1 boots at 0; node 0 is isolated from 2000 to 4000 ms (a fault on every link).
    fn log() -> HealthLog {
        let mut log = HealthLog::default();
        for n in 0..3 {
            log.mark(n, 0, "boot");
        }
        let iso = log.open(vec![0, 1, 2], 2_000, "isolate n0");
        log.close(iso, 4_000);
        log
    }

    #[test]
    fn a_fence_long_after_every_fault_is_flagged() {
        let mut log = log();
        log.fences.push(Fence {
            broker: 1,
            epoch: 7,
            at_ms: 4_000 + HEALTHY_FOR_MS + 100,
        });
        let v = check(&log);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].property, Property::HealthyBrokerFenced);
        assert!(v[0].detail.contains("isolate n0"), "{}", v[0].detail);
    }

    #[test]
    fn a_fence_during_or_soon_after_a_fault_or_a_boot_is_not() {
        let mut log = log();
        // During the isolation, within the margin after it, and (for a node that rebooted)
        // soon after its boot.
        for at_ms in [3_000, 4_000 + HEALTHY_FOR_MS - 1] {
            log.fences.push(Fence {
                broker: 1,
                epoch: 7,
                at_ms,
            });
        }
        let crash = log.open(vec![2], 10_000, "crash n2");
        log.close(crash, 11_000);
        log.mark(2, 11_005, "boot");
        log.fences.push(Fence {
            broker: 2,
            epoch: 9,
            at_ms: 12_000,
        });
        // A fault still under way.
        log.open(vec![0], 20_000, "pause n0");
        log.fences.push(Fence {
            broker: 0,
            epoch: 3,
            at_ms: 40_000,
        });
        assert_eq!(check(&log), vec![]);
    }
}
