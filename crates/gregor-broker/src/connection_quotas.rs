//! Connection limits, as Kafka's: while `max.connections` connections are open the listener
//! stops accepting (new connections wait in the kernel's backlog until one closes); a new
//! connection from an address that already has `max.connections.per.ip` (or its entry in
//! `max.connections.per.ip.overrides`) is closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("too many connections from {ip} (limit {limit})")]
    PerIp { ip: IpAddr, limit: usize },
    #[error("too many connections (max.connections {limit})")]
    Total { limit: usize },
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open connections, in total and per client address, against their limits.
#[derive(Debug)]
pub struct ConnectionQuotas {
    max_connections: usize,
    per_ip: usize,
    overrides: HashMap<IpAddr, usize>,
    counts: Mutex<Counts>,
    released: Notify,
}

/// One admitted connection's place in the counts; dropping it frees the place.
#[derive(Debug)]
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self.quotas.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
        drop(c);
        self.quotas.released.notify_waiters();
    }
}

impl ConnectionQuotas {
    pub fn new(
        max_connections: usize,
        per_ip: usize,
        overrides: HashMap<IpAddr, usize>,
    ) -> Arc<ConnectionQuotas> {
        Arc::new(ConnectionQuotas {
            max_connections,
            per_ip,
            overrides,
            counts: Mutex::new(Counts::default()),
            released: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `max.connections`.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn limit_for(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }

    /// Counts a new connection from `ip`, or says which limit refuses it.
    pub fn try_admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, QuotaError> {
        let mut c = self.lock();
        if c.total >= self.max_connections {
            return Err(QuotaError::Total {
                limit: self.max_connections,
            });
        }
        let limit = self.limit_for(ip);
        let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= limit {
            return Err(QuotaError::PerIp { ip, limit });
        }
        c.total += 1;
        *c.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnectionSlot {
            quotas: self.clone(),
            ip,
        })
    }

    /// Returns once fewer than `max.connections` connections are open.
    pub async fn wait_for_slot(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a close between check and wait is not missed.
            released.as_mut().enable();
            if self.open() < self.max_connections {
                return;
            }
            released.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn per_ip_limit_refuses_the_next_connection_and_frees_on_close() {
        let q = ConnectionQuotas::new(100, 2, HashMap::new());
        let a = q.try_admit(ip("127.0.0.1")).expect("first");
        let _b = q.try_admit(ip("127.0.0.1")).expect("second");
        assert_eq!(
            q.try_admit(ip("127.0.0.1")).expect_err("third"),
            QuotaError::PerIp {
                ip: ip("127.0.0.1"),
                limit: 2
            }
        );
        // Another address has its own count.
        let _c = q.try_admit(ip("127.0.0.2")).expect("other address");
        drop(a);
        q.try_admit(ip("127.0.0.1"))
            .expect("a place freed by a close");
    }

    #[test]
    fn overrides_replace_the_per_ip_limit() {
        let overrides = HashMap::from([(ip("127.0.0.9"), 0), (ip("127.0.0.8"), 3)]);
        let q = ConnectionQuotas::new(100, 1, overrides);
        assert!(matches!(
            q.try_admit(ip("127.0.0.9")),
            Err(QuotaError::PerIp { limit: 0, .. })
        ));
        let held: Vec<_> = (0..3)
            .map(|_| q.try_admit(ip("127.0.0.8")).expect("override allows 3"))
            .collect();
        assert!(q.try_admit(ip("127.0.0.8")).is_err());
        assert_eq!(q.open(), 3);
        drop(held);
        assert_eq!(q.open(), 0);
    }

    #[tokio::test]
    async fn total_limit_blocks_until_a_connection_closes() {
        let q = ConnectionQuotas::new(2, 10, HashMap::new());
        let a = q.try_admit(ip("127.0.0.1")).expect("first");
        let _b = q.try_admit(ip("127.0.0.2")).expect("second");
        assert_eq!(
            q.try_admit(ip("127.0.0.3")).expect_err("full"),
            QuotaError::Total { limit: 2 }
        );
        let waiter = {
            let q = q.clone();
            crate::runtime::spawn(async move { q.wait_for_slot().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "no place while both are open");
        drop(a);
        waiter.await.expect("woken by the close");
        q.try_admit(ip("127.0.0.3"))
            .expect("admitted after the close");
    }
}
