//! Client quotas, enforced as Kafka enforces them (KIP-13, KIP-55, KIP-124, KIP-219). Pure:
//! callers pass the image's quota configs and `now`.
//!
//! Which quota applies to a request, per quota key, is the first of these entities that has
//! one (Kafka's precedence): user + client-id, user + default client-id, user, default user +
//! client-id, default user + default client-id, default user, client-id, default client-id.
//! The rate is kept per matched entity with the *actual* names in it, so a default user quota
//! gives each user its own rate, and a user quota is shared by all that user's client ids.
//!
//! Rates are Kafka's sampled rate: `quota.window.num` samples of `quota.window.size.seconds`
//! each; the rate is the sum of the live samples over the elapsed span, that span counted as at
//! least `num - 1` whole windows (so a new client's first burst is spread over that span, as in
//! Kafka). The value is recorded whatever the outcome; when the rate is over the quota the
//! throttle time is the time the rate needs to fall back to it:
//! `(rate - quota) / quota × span`, at most the whole sampled span.

use std::collections::HashMap;

use gregor_meta::quota::{ClientQuotaEntity, ClientQuotas, EntityName};

/// Kafka's `quota.window.num` default.
pub const QUOTA_WINDOW_NUM: u32 = 11;
/// Kafka's `quota.window.size.seconds` default, in ms.
pub const QUOTA_WINDOW_MS: u64 = 1_000;

/// The sample windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindows {
    /// Samples kept.
    pub num: u32,
    /// Length of one sample, ms.
    pub size_ms: u64,
}

impl Default for QuotaWindows {
    fn default() -> Self {
        QuotaWindows {
            num: QUOTA_WINDOW_NUM,
            size_ms: QUOTA_WINDOW_MS,
        }
    }
}

impl QuotaWindows {
    fn span_ms(&self) -> u64 {
        u64::from(self.num) * self.size_ms
    }
}

/// A sampled rate per second.
#[derive(Debug, Clone, Default)]
pub struct Rate {
    /// `(start_ms, total)` of each sample, oldest first; at most `num`.
    samples: std::collections::VecDeque<(u64, f64)>,
}

impl Rate {
    fn purge(&mut self, w: QuotaWindows, now_ms: u64) {
        while let Some(&(start, _)) = self.samples.front() {
            if start + w.span_ms() <= now_ms {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// Adds `value` at `now_ms`.
    pub fn record(&mut self, w: QuotaWindows, value: f64, now_ms: u64) {
        self.purge(w, now_ms);
        match self.samples.back_mut() {
            Some((start, total)) if now_ms < *start + w.size_ms => *total += value,
            _ => {
                self.samples.push_back((now_ms, value));
                if self.samples.len() > w.num as usize {
                    self.samples.pop_front();
                }
            }
        }
    }

    /// The elapsed span the rate is taken over, ms (Kafka's `Rate.windowSize`).
    pub fn window_ms(&self, w: QuotaWindows, now_ms: u64) -> u64 {
        let oldest = self
            .samples
            .iter()
            .find(|(start, _)| start + w.span_ms() > now_ms)
            .map_or(now_ms, |(start, _)| *start);
        let elapsed = now_ms.saturating_sub(oldest);
        let min_full = u64::from(w.num.saturating_sub(1));
        if elapsed / w.size_ms < min_full {
            elapsed + (min_full - elapsed / w.size_ms) * w.size_ms
        } else {
            elapsed
        }
    }

    /// The rate per second at `now_ms`.
    pub fn measure(&self, w: QuotaWindows, now_ms: u64) -> f64 {
        let total: f64 = self
            .samples
            .iter()
            .filter(|(start, _)| start + w.span_ms() > now_ms)
            .map(|(_, v)| v)
            .sum();
        let window = self.window_ms(w, now_ms).max(1) as f64;
        total * 1000.0 / window
    }

    fn idle_since(&self, w: QuotaWindows, now_ms: u64) -> bool {
        self.samples
            .back()
            .is_none_or(|(start, _)| start + w.span_ms() <= now_ms)
    }
}

/// The throttle time for a rate over its quota: the time at which the rate, with nothing more
/// recorded, is back at the quota; at most `max_ms`.
pub fn throttle_ms(rate: f64, quota: f64, window_ms: u64, max_ms: u64) -> u64 {
    if quota <= 0.0 || rate <= quota {
        return 0;
    }
    let ms = (rate - quota) / quota * window_ms as f64;
    (ms.round() as u64).min(max_ms)
}

/// The entity (with the actual names, for the rate) and quota that apply to `user` and
/// `client_id` for `key`, by Kafka's precedence.
pub fn matching_quota(
    quotas: &ClientQuotas,
    key: &str,
    user: &str,
    client_id: &str,
) -> Option<(ClientQuotaEntity, f64)> {
    let named = |s: &str| Some(EntityName::Named(s.to_string()));
    let default = || Some(EntityName::Default);
    let candidates = [
        (named(user), named(client_id)),
        (named(user), default()),
        (named(user), None),
        (default(), named(client_id)),
        (default(), default()),
        (default(), None),
        (None, named(client_id)),
        (None, default()),
    ];
    candidates.into_iter().find_map(|(u, c)| {
        let entity = ClientQuotaEntity {
            user: u,
            client_id: c,
        };
        let quota = quotas.get(&entity, key)?;
        // The rate is kept under the actual names of the parts the entity has.
        let rate_key = ClientQuotaEntity {
            user: entity.user.as_ref().and_then(|_| named(user)),
            client_id: entity.client_id.as_ref().and_then(|_| named(client_id)),
        };
        Some((rate_key, quota))
    })
}

/// Every client's rates, per quota key and matched entity.
#[derive(Debug, Default)]
pub struct ClientQuotaState {
    windows: QuotaWindows,
    rates: HashMap<(&'static str, ClientQuotaEntity), Rate>,
    last_prune_ms: u64,
}

impl ClientQuotaState {
    /// State with these sample windows.
    #[cfg(test)]
    pub fn new(windows: QuotaWindows) -> Self {
        ClientQuotaState {
            windows,
            rates: HashMap::new(),
            last_prune_ms: 0,
        }
    }

    /// Records `value` for `key` (one of gregor-meta's quota keys) of this client and returns
    /// the throttle time in ms (0 without a quota or under it).
    pub fn record(
        &mut self,
        quotas: &ClientQuotas,
        key: &'static str,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) -> u64 {
        self.prune(now_ms);
        let Some((entity, quota)) = matching_quota(quotas, key, user, client_id) else {
            return 0;
        };
        let w = self.windows;
        let rate = self.rates.entry((key, entity)).or_default();
        rate.record(w, value, now_ms);
        let measured = rate.measure(w, now_ms);
        throttle_ms(measured, quota, rate.window_ms(w, now_ms), w.span_ms())
    }

    /// Drops the rates with no live sample (their rate is 0, as a new one's would be), so
    /// clients that come and go with ever new ids do not grow the table for good.
    fn prune(&mut self, now_ms: u64) {
        let w = self.windows;
        if now_ms < self.last_prune_ms + w.span_ms() {
            return;
        }
        self.last_prune_ms = now_ms;
        self.rates.retain(|_, r| !r.idle_since(w, now_ms));
    }

    /// Rates tracked.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.rates.len()
    }
}

/// The broker's client quota state and the connections to mute once their response is out
/// (KIP-219). The only lock-holding part; every decision is [`ClientQuotaState`]'s.
#[derive(Debug, Default)]
pub struct ClientQuotaManager {
    state: std::sync::Mutex<ClientQuotaState>,
    /// Connection id -> throttle ms, taken by the connection after it writes the response.
    mutes: std::sync::Mutex<HashMap<u64, u64>>,
}

impl ClientQuotaManager {
    /// [`ClientQuotaState::record`] under the lock.
    pub fn record(
        &self,
        quotas: &ClientQuotas,
        key: &'static str,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) -> u64 {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.record(quotas, key, user, client_id, value, now_ms)
    }

    /// Mutes `connection_id` for `throttle_ms` once its current response is written (the
    /// longest of several pending throttles wins).
    pub fn mute(&self, connection_id: u64, throttle_ms: u64) {
        let mut mutes = self
            .mutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = mutes.entry(connection_id).or_default();
        *slot = (*slot).max(throttle_ms);
    }

    /// The throttle to apply to `connection_id` now, if any (taking it).
    pub fn take_mute(&self, connection_id: u64) -> Option<u64> {
        let mut mutes = self
            .mutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if mutes.is_empty() {
            return None;
        }
        mutes.remove(&connection_id)
    }
}

/// Request time as a percentage of one thread over a second (Kafka's request quota unit).
pub fn nanos_to_percentage(nanos: u128) -> f64 {
    nanos as f64 * 100.0 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_meta::quota::{ClientQuotaRecord, QuotaValue, PRODUCER_BYTE_RATE};
    use gregor_meta::{MetadataImage, MetadataRecord};

    fn e(user: Option<Option<&str>>, client: Option<Option<&str>>) -> ClientQuotaEntity {
        let n = |p: Option<&str>| p.map_or(EntityName::Default, |s| EntityName::Named(s.into()));
        ClientQuotaEntity {
            user: user.map(n),
            client_id: client.map(n),
        }
    }

    fn quotas(entries: &[(ClientQuotaEntity, f64)]) -> ClientQuotas {
        let records: Vec<MetadataRecord> = entries
            .iter()
            .map(|(entity, v)| {
                MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: entity.clone(),
                    key: PRODUCER_BYTE_RATE.into(),
                    value: QuotaValue(*v),
                    remove: false,
                })
            })
            .collect();
        MetadataImage::from_records(&records)
            .unwrap()
            .client_quotas()
            .clone()
    }

    #[test]
    fn precedence_follows_kafka() {
        // One quota per level, each a different value: removing the best match in turn must
        // reveal the next level.
        let levels = [
            (e(Some(Some("u")), Some(Some("c"))), 1.0),
            (e(Some(Some("u")), Some(None)), 2.0),
            (e(Some(Some("u")), None), 3.0),
            (e(Some(None), Some(Some("c"))), 4.0),
            (e(Some(None), Some(None)), 5.0),
            (e(Some(None), None), 6.0),
            (e(None, Some(Some("c"))), 7.0),
            (e(None, Some(None)), 8.0),
        ];
        for i in 0..levels.len() {
            let q = quotas(&levels[i..]);
            let (_, v) = matching_quota(&q, PRODUCER_BYTE_RATE, "u", "c").unwrap();
            assert_eq!(v, levels[i].1, "with levels {i}.. in place");
        }
        assert!(matching_quota(&quotas(&[]), PRODUCER_BYTE_RATE, "u", "c").is_none());
        // Another user falls through the "u" levels to the defaults.
        let q = quotas(&levels[..3]);
        assert!(matching_quota(&q, PRODUCER_BYTE_RATE, "v", "c").is_none());
    }

    #[test]
    fn default_quotas_keep_a_rate_per_actual_name() {
        let q = quotas(&[(e(Some(None), None), 100.0)]);
        let (alice, _) = matching_quota(&q, PRODUCER_BYTE_RATE, "alice", "a").unwrap();
        let (bob, _) = matching_quota(&q, PRODUCER_BYTE_RATE, "bob", "a").unwrap();
        assert_eq!(alice, e(Some(Some("alice")), None));
        assert_ne!(alice, bob);
        let mut s = ClientQuotaState::new(QuotaWindows::default());
        // alice blows her quota; bob's is untouched.
        assert!(s.record(&q, PRODUCER_BYTE_RATE, "alice", "a", 10_000.0, 0) > 0);
        assert_eq!(s.record(&q, PRODUCER_BYTE_RATE, "bob", "a", 50.0, 0), 0);
    }

    #[test]
    fn rate_spreads_the_first_burst_over_the_minimum_span() {
        let w = QuotaWindows::default();
        let mut r = Rate::default();
        r.record(w, 1000.0, 0);
        assert_eq!(r.window_ms(w, 0), 10_000);
        assert!((r.measure(w, 0) - 100.0).abs() < 1e-9);
        // After the whole span the sample is gone.
        assert_eq!(r.measure(w, 11_000), 0.0);
        // Steady 500 bytes every 100 ms for 30 s is 5000 bytes/s.
        let mut r = Rate::default();
        for t in (0..30_000).step_by(100) {
            r.record(w, 500.0, t);
        }
        let m = r.measure(w, 30_000);
        assert!((m - 5000.0).abs() < 300.0, "{m}");
    }

    #[test]
    fn throttle_is_the_time_back_to_the_quota() {
        assert_eq!(throttle_ms(100.0, 100.0, 10_000, 11_000), 0);
        assert_eq!(throttle_ms(150.0, 100.0, 10_000, 11_000), 5_000);
        assert_eq!(throttle_ms(10_000.0, 100.0, 10_000, 11_000), 11_000);
        // A client held to its throttle times converges to the quota.
        let q = quotas(&[(e(None, Some(Some("c"))), 1000.0)]);
        let mut s = ClientQuotaState::new(QuotaWindows::default());
        let mut now = 0;
        let mut sent = 0.0;
        while now < 60_000 {
            let t = s.record(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "c", 400.0, now);
            sent += 400.0;
            now += 20 + t;
        }
        let achieved = sent * 1000.0 / now as f64;
        assert!((800.0..1250.0).contains(&achieved), "{achieved}");
    }

    #[test]
    fn idle_rates_are_pruned() {
        let q = quotas(&[(e(None, Some(None)), 1000.0)]);
        let mut s = ClientQuotaState::new(QuotaWindows::default());
        for i in 0..100 {
            s.record(&q, PRODUCER_BYTE_RATE, "u", &format!("c{i}"), 1.0, 0);
        }
        assert_eq!(s.tracked(), 100);
        s.record(&q, PRODUCER_BYTE_RATE, "u", "late", 1.0, 20_000);
        assert_eq!(s.tracked(), 1);
    }
}
