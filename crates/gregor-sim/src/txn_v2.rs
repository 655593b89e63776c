//! `--transactions`, transaction version 2 (KIP-890 part 2): late retries. After a version-2
//! transaction ended (EndTxn v5 acknowledged) and its marker is written in a partition, one of
//! its batches there is sent again exactly as it was (same producer id, the old epoch, same
//! sequence), as a producer's retry that arrives late would be. The marker carried the bumped
//! epoch, so it must be refused; so must a late copy of the EndTxn itself once the next
//! transaction is open. An acknowledgement of either is recorded for `txn_check.rs`.

use gregor_client::producer::wire::ProducerIdentity;

use crate::data::sleep_ms;
use crate::txn::TxnClient;
use crate::txn_read::fetch_request;

/// Fetches of the partition's last stable offset while waiting for the marker.
const MARKER_ATTEMPTS: usize = 40;

impl TxnClient {
    /// Sometimes (one ended transaction in three), the late retry of one of its batches; and
    /// sometimes a late copy of its EndTxn, sent once the next transaction is open
    /// (`TxnClient::send_late_end`).
    pub(crate) async fn late_retry(&mut self, ended: ProducerIdentity, commit: bool) {
        if self.rng.next_below(3) == 0 {
            self.late_end = Some((ended, commit));
        }
        if self.sent.is_empty() || self.rng.next_below(3) != 0 {
            return;
        }
        let b = self.sent[self.rng.next_below(self.sent.len())].clone();
        let what = format!(
            "late retry p{} producer {} epoch {} sequence {}",
            b.p, b.identity.producer_id, b.identity.epoch, b.sequence
        );
        if !self.marker_written(b.p, b.base_offset).await {
            self.event(format!("{what}: skipped, the marker was not seen"));
            return;
        }
        let answer = self
            .send_batch(b.p, &b.values, b.identity, b.sequence)
            .await;
        match answer {
            Some((leader, Some(0), offset)) => {
                let msg = format!(
                    "{} {what} acknowledged by n{leader} at offset {offset} after its marker",
                    self.name
                );
                self.event(format!("{what}: acknowledged"));
                self.history.borrow_mut().data.txn.late_retry_acks.push(msg);
            }
            Some((leader, code, _)) => {
                self.event(format!("{what}: refused by n{leader}: {code:?}"));
                if code.is_none() {
                    self.links.drop_conn(leader);
                }
            }
            None => self.event(format!("{what}: not sent")),
        }
    }

    /// Whether partition `p`'s last stable offset passed `offset` (the transaction's marker is
    /// written there) within the attempts, by read_committed fetches at its leader.
    async fn marker_written(&mut self, p: i32, offset: i64) -> bool {
        for _ in 0..MARKER_ATTEMPTS {
            if self.links.leader(p).is_none() {
                self.links.refresh().await;
            }
            if let Some((leader, epoch)) = self.links.leader(p) {
                let req = fetch_request(p, epoch, offset);
                let resp = match self.links.conn(leader).await {
                    Some(c) => c.send(&req, 12).await.ok(),
                    None => None,
                };
                let lso = resp.as_ref().and_then(|r| {
                    let pd = r.responses.first()?.partitions.first()?;
                    (pd.error_code == 0).then_some(pd.last_stable_offset)
                });
                match lso {
                    Some(lso) if lso > offset => return true,
                    Some(_) => {}
                    None => {
                        self.links.drop_conn(leader);
                        self.links.refresh().await;
                    }
                }
            }
            sleep_ms(50).await;
        }
        false
    }
}
