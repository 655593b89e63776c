//! The producer's counters, shared between the `Producer` handle and its sender task.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::wire::ProducerIdentity;

/// A snapshot of the producer's counters (in the spirit of Kafka's producer metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerMetrics {
    /// Produce requests sent.
    pub requests: u64,
    /// The most Produce requests one broker had in flight at once.
    pub peak_requests_in_flight: u64,
    /// Epoch bumps after a sequence was lost (KIP-360).
    pub epoch_bumps: u64,
    /// Producer ids obtained with InitProducerId.
    pub producer_ids: u64,
    /// The identity idempotent batches carry now.
    pub identity: Option<ProducerIdentity>,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: AtomicU64,
    pub(super) peak_requests_in_flight: AtomicU64,
    pub(super) epoch_bumps: AtomicU64,
    pub(super) producer_ids: AtomicU64,
    identity: Mutex<Option<ProducerIdentity>>,
}

impl Counters {
    pub(super) fn set_identity(&self, identity: ProducerIdentity) {
        *self.identity.lock().unwrap_or_else(|p| p.into_inner()) = Some(identity);
    }

    pub(super) fn snapshot(&self) -> ProducerMetrics {
        ProducerMetrics {
            requests: self.requests.load(Ordering::Relaxed),
            peak_requests_in_flight: self.peak_requests_in_flight.load(Ordering::Relaxed),
            epoch_bumps: self.epoch_bumps.load(Ordering::Relaxed),
            producer_ids: self.producer_ids.load(Ordering::Relaxed),
            identity: *self.identity.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}
