//! Broker registration, heartbeats and fencing. A registered broker starts fenced and is
//! unfenced by its first heartbeat that asks for it; one that asked for a controlled shutdown is
//! fenced and stays so until it registers again; a broker silent for
//! `broker.session.timeout.ms` is fenced: it leaves every ISR (except as the last member) and
//! its leaderships move to other in-sync replicas, or to any live replica where unclean leader
//! election is enabled. When it is unfenced, leaderless partitions it can lead get it back.

use super::change::{Election, PartitionChangeBuilder};
use super::state::{BrokerSession, Controller, ControllerResult, Staging};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::*;
use crate::types::{BrokerId, NO_LEADER};
use kafka_protocol::ResponseError;
use uuid::Uuid;

/// A BrokerRegistration request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationRequest {
    /// Broker id.
    pub broker_id: BrokerId,
    /// Random id of the broker process.
    pub incarnation_id: Uuid,
    /// Listeners.
    pub endpoints: Vec<BrokerEndpoint>,
    /// `broker.rack`.
    pub rack: Option<String>,
}

/// A BrokerHeartbeat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHeartbeat {
    /// Broker id.
    pub broker_id: BrokerId,
    /// Epoch from the registration.
    pub broker_epoch: i64,
    /// The broker wants to stay fenced (still catching up with the metadata log).
    pub want_fence: bool,
    /// The broker is shutting down (controlled shutdown): its leaderships move to other in-sync
    /// replicas and it leaves every ISR (except as the last member) before it stops.
    pub want_shut_down: bool,
}

/// A BrokerHeartbeat response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHeartbeatReply {
    /// Whether the broker is fenced once the returned records are committed.
    pub is_fenced: bool,
    /// Controlled shutdown: the broker leads nothing and may stop once the records are committed.
    pub should_shut_down: bool,
}

/// The last heartbeat of a session ended because the broker's process is gone: long past
/// any timeout, and told apart from a lapsed session when it is fenced.
const ENDED_BY_PROBE_MS: i64 = i64::MIN / 2;

impl Controller {
    fn session_timeout_ms(&self) -> i64 {
        self.config_view().i64("broker.session.timeout.ms")
    }

    fn session_alive(&self, id: BrokerId, now_ms: i64) -> bool {
        self.sessions
            .get(&id)
            .is_some_and(|s| now_ms - s.last_heartbeat_ms <= self.session_timeout_ms())
    }

    /// Register (or re-register) a broker. Returns its new broker epoch. A restarted broker
    /// (new incarnation) whose previous registration was unfenced is fenced first, so that it
    /// leads nothing until it has caught up. Errors: `INVALID_REQUEST` (negative id),
    /// `DUPLICATE_BROKER_REGISTRATION` (another process holds the id: its session has not expired
    /// and this controller heard from it).
    pub fn register_broker(
        &mut self,
        request: &BrokerRegistrationRequest,
        now_ms: i64,
    ) -> ControllerResult<Result<i64, ApiError>> {
        let id = request.broker_id;
        if id < 0 {
            return ControllerResult::new(
                Vec::new(),
                Err(ApiError::invalid_request(format!("Invalid broker id {id}"))),
            );
        }
        let mut staging = Staging::new(&self.image);
        if let Some(existing) = self.image.broker(id) {
            if existing.incarnation_id == request.incarnation_id
                && existing.endpoints == request.endpoints
                && existing.rack == request.rack
            {
                // A retried registration of the same process: the same session.
                let s = self.sessions.entry(id).or_insert(BrokerSession {
                    last_heartbeat_ms: now_ms,
                    shutting_down: false,
                    heard: true,
                });
                s.last_heartbeat_ms = now_ms;
                s.heard = true;
                return ControllerResult::new(Vec::new(), Ok(existing.epoch));
            }
            if existing.incarnation_id != request.incarnation_id
                && !existing.fenced
                && self.session_alive(id, now_ms)
                && self.sessions.get(&id).is_some_and(|s| s.heard)
            {
                return ControllerResult::new(
                    Vec::new(),
                    Err(ApiError::new(
                        ResponseError::DuplicateBrokerRegistration,
                        format!(
                            "Another broker is registered with that broker id {id} and its session has not expired."
                        ),
                    )),
                );
            }
            if !existing.fenced {
                let epoch = existing.epoch;
                if let Err(e) = self.fence(&mut staging, id, epoch) {
                    return ControllerResult::new(Vec::new(), Err(e));
                }
            }
        }
        let epoch = staging.image.next_broker_epoch();
        let record = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: id,
            incarnation_id: request.incarnation_id,
            broker_epoch: epoch,
            endpoints: request.endpoints.clone(),
            rack: request.rack.clone(),
            fenced: true,
        });
        if let Err(e) = staging.push(record) {
            return ControllerResult::new(Vec::new(), Err(e));
        }
        self.sessions.insert(
            id,
            BrokerSession {
                last_heartbeat_ms: now_ms,
                shutting_down: false,
                heard: true,
            },
        );
        tracing::info!(broker = id, epoch, "registering broker");
        ControllerResult::new(staging.records, Ok(epoch))
    }

    /// A heartbeat: renews the session and unfences the broker when it asks to be unfenced.
    /// Errors: `BROKER_ID_NOT_REGISTERED`, `STALE_BROKER_EPOCH`.
    pub fn broker_heartbeat(
        &mut self,
        hb: &BrokerHeartbeat,
        now_ms: i64,
    ) -> ControllerResult<Result<BrokerHeartbeatReply, ApiError>> {
        let Some(b) = self.image.broker(hb.broker_id) else {
            return ControllerResult::new(
                Vec::new(),
                Err(ApiError::new(
                    ResponseError::BrokerIdNotRegistered,
                    format!("Broker {} is not registered.", hb.broker_id),
                )),
            );
        };
        if b.epoch != hb.broker_epoch {
            return ControllerResult::new(
                Vec::new(),
                Err(ApiError::new(
                    ResponseError::StaleBrokerEpoch,
                    format!(
                        "Expected broker epoch {}, but got broker epoch {}",
                        b.epoch, hb.broker_epoch
                    ),
                )),
            );
        }
        let (fenced, epoch) = (b.fenced, b.epoch);
        let shutting_down = hb.want_shut_down
            || self
                .sessions
                .get(&hb.broker_id)
                .is_some_and(|s| s.shutting_down);
        // `renew_session` may have seen a later heartbeat arrive while this one waited.
        let last_heartbeat_ms = self
            .sessions
            .get(&hb.broker_id)
            .map_or(now_ms, |s| s.last_heartbeat_ms.max(now_ms));
        self.sessions.insert(
            hb.broker_id,
            BrokerSession {
                last_heartbeat_ms,
                shutting_down,
                heard: true,
            },
        );
        // Once asked in this registration, the ask stands, as in Kafka, where a broker cannot
        // take a controlled shutdown back: a heartbeat without it (the periodic one crossing the
        // shutdown request) is answered as the request was, rather than unfencing the broker
        // and letting its partitions' leaders take it back into their ISRs while it stops.
        if shutting_down {
            // Fencing moves every leadership away and takes the broker out of the ISRs; a
            // fenced broker leads nothing, so it may stop once these records are committed.
            let mut staging = Staging::new(&self.image);
            if !fenced {
                tracing::info!(broker = hb.broker_id, epoch, "controlled shutdown");
                if let Err(e) = self.fence(&mut staging, hb.broker_id, epoch) {
                    return ControllerResult::new(Vec::new(), Err(e));
                }
            }
            return ControllerResult::new(
                staging.records,
                Ok(BrokerHeartbeatReply {
                    is_fenced: true,
                    should_shut_down: true,
                }),
            );
        }
        if !fenced || hb.want_fence {
            return ControllerResult::new(
                Vec::new(),
                Ok(BrokerHeartbeatReply {
                    is_fenced: fenced,
                    should_shut_down: false,
                }),
            );
        }
        let mut staging = Staging::new(&self.image);
        if let Err(e) = self.unfence(&mut staging, hb.broker_id, epoch) {
            return ControllerResult::new(Vec::new(), Err(e));
        }
        ControllerResult::new(
            staging.records,
            Ok(BrokerHeartbeatReply {
                is_fenced: false,
                should_shut_down: false,
            }),
        )
    }

    /// A heartbeat renews its broker's session when it arrives, ahead of its turn on the write
    /// path: while a write waits for the quorum, the brokers that keep heartbeating must not
    /// have their sessions lapse behind it and be fenced the moment the quorum is back (as a
    /// Kafka controller touches a session before the heartbeat's records commit). Only the
    /// registration the heartbeat names is renewed; anything else waits for
    /// [`Controller::broker_heartbeat`] to refuse it.
    pub fn renew_session(&mut self, broker_id: BrokerId, broker_epoch: i64, now_ms: i64) {
        if self
            .image
            .broker(broker_id)
            .is_none_or(|b| b.epoch != broker_epoch)
        {
            return;
        }
        let s = self.sessions.entry(broker_id).or_insert(BrokerSession {
            last_heartbeat_ms: now_ms,
            shutting_down: false,
            heard: true,
        });
        s.last_heartbeat_ms = s.last_heartbeat_ms.max(now_ms);
        s.heard = true;
    }

    /// Whether [`Controller::tick`] has anything to do at `now_ms`: an unfenced broker whose
    /// session expired or that has none yet. Lets the caller skip the write path (a quorum
    /// round) on the frequent checks where nothing changed.
    pub fn sessions_due(&self, now_ms: i64) -> bool {
        let timeout = self.session_timeout_ms();
        self.image.active_brokers().any(|b| {
            self.sessions
                .get(&b.id)
                .is_none_or(|s| now_ms - s.last_heartbeat_ms > timeout)
        })
    }

    /// Time passes: fence every unfenced broker whose session expired. Unfenced brokers the
    /// controller has no session for yet (it just became active) get a full session from now.
    pub fn tick(&mut self, now_ms: i64) -> Vec<MetadataRecord> {
        let timeout = self.session_timeout_ms();
        let mut expired = Vec::new();
        for b in self.image.active_brokers() {
            let s = self.sessions.entry(b.id).or_insert(BrokerSession {
                last_heartbeat_ms: now_ms,
                shutting_down: false,
                heard: false,
            });
            if now_ms - s.last_heartbeat_ms > timeout {
                expired.push((b.id, b.epoch, s.last_heartbeat_ms == ENDED_BY_PROBE_MS));
            }
        }
        if expired.is_empty() {
            return Vec::new();
        }
        let mut staging = Staging::new(&self.image);
        for (id, epoch, probed) in expired {
            if probed {
                // Its listener refused connections: not one session timeout later. The only
                // line for it (no "session expired" follows: it is fenced now).
                tracing::warn!(
                    broker = id,
                    epoch,
                    "fencing a broker whose process is gone (its listener refuses connections)"
                );
            } else {
                tracing::warn!(
                    broker = id,
                    epoch,
                    timeout_ms = timeout,
                    "broker session expired; fencing"
                );
            }
            if self.fence(&mut staging, id, epoch).is_err() {
                return Vec::new();
            }
        }
        staging.records
    }

    /// Ends a broker's session now (its process is known to be gone): the next
    /// [`Controller::tick`] fences it, as if its session had timed out.
    pub fn expire_session(&mut self, id: BrokerId) {
        if self.image.is_broker_active(id) {
            self.sessions.insert(
                id,
                BrokerSession {
                    last_heartbeat_ms: ENDED_BY_PROBE_MS,
                    shutting_down: false,
                    heard: false,
                },
            );
        }
    }

    /// Forget every heartbeat session: this controller just became active, and the sessions it
    /// kept from an earlier term are stale. The next [`Controller::tick`] gives each unfenced
    /// broker a full session from then, as a new Kafka controller does.
    pub fn reset_sessions(&mut self) {
        self.sessions.clear();
    }

    /// Remove a broker's registration for good (UnregisterBroker). The broker must be fenced
    /// or have no live session. Errors: `BROKER_ID_NOT_REGISTERED`, `INVALID_REQUEST`.
    pub fn unregister_broker(
        &mut self,
        broker_id: BrokerId,
        now_ms: i64,
    ) -> ControllerResult<Result<(), ApiError>> {
        let Some(b) = self.image.broker(broker_id) else {
            return ControllerResult::new(
                Vec::new(),
                Err(ApiError::new(
                    ResponseError::BrokerIdNotRegistered,
                    format!("Broker ID {broker_id} is not currently registered"),
                )),
            );
        };
        if !b.fenced && self.session_alive(broker_id, now_ms) {
            return ControllerResult::new(
                Vec::new(),
                Err(ApiError::invalid_request(format!(
                    "Broker {broker_id} is still alive; stop it before unregistering it."
                ))),
            );
        }
        let epoch = b.epoch;
        let mut staging = Staging::new(&self.image);
        let result = (|| {
            if !b.fenced {
                self.fence(&mut staging, broker_id, epoch)?;
            }
            staging.push(MetadataRecord::UnregisterBroker(BrokerEpochRecord {
                broker_id,
                broker_epoch: epoch,
            }))
        })();
        match result {
            Ok(()) => ControllerResult::new(staging.records, Ok(())),
            Err(e) => ControllerResult::new(Vec::new(), Err(e)),
        }
    }

    /// Partition changes for fencing `broker`, then the FenceBroker record.
    fn fence(&self, staging: &mut Staging, broker: BrokerId, epoch: i64) -> Result<(), ApiError> {
        let changes = {
            let image = &staging.image;
            let is_active = |b: BrokerId| b != broker && image.is_broker_active(b);
            let mut changes = Vec::new();
            for topic in image.topics().values() {
                let election = self.election_for(image, &topic.name);
                for (&p, part) in &topic.partitions {
                    if !part.isr.contains(&broker) && part.leader != broker {
                        continue;
                    }
                    let isr: Vec<BrokerId> =
                        part.isr.iter().copied().filter(|&b| b != broker).collect();
                    if let Some(c) = PartitionChangeBuilder::new(part, topic.id, p, &is_active)
                        .election(election)
                        .target_isr(isr)
                        .build()
                    {
                        changes.push(c);
                    }
                }
            }
            changes
        };
        for c in changes {
            staging.push(MetadataRecord::PartitionChange(c))?;
        }
        staging.push(MetadataRecord::FenceBroker(BrokerEpochRecord {
            broker_id: broker,
            broker_epoch: epoch,
        }))
    }

    /// The UnfenceBroker record, then leaders for partitions that had none.
    fn unfence(&self, staging: &mut Staging, broker: BrokerId, epoch: i64) -> Result<(), ApiError> {
        staging.push(MetadataRecord::UnfenceBroker(BrokerEpochRecord {
            broker_id: broker,
            broker_epoch: epoch,
        }))?;
        tracing::info!(broker, epoch, "unfencing broker");
        let changes = {
            let image = &staging.image;
            let is_active = |b: BrokerId| image.is_broker_active(b);
            let mut changes = Vec::new();
            for topic in image.topics().values() {
                let election = self.election_for(image, &topic.name);
                for (&p, part) in &topic.partitions {
                    if part.leader != NO_LEADER || !part.replicas.contains(&broker) {
                        continue;
                    }
                    if let Some(c) = PartitionChangeBuilder::new(part, topic.id, p, &is_active)
                        .election(election)
                        .build()
                    {
                        changes.push(c);
                    }
                }
            }
            changes
        };
        for c in changes {
            staging.push(MetadataRecord::PartitionChange(c))?;
        }
        Ok(())
    }

    /// Online, or Unclean where the topic allows it.
    pub(crate) fn election_for(&self, image: &MetadataImage, topic: &str) -> Election {
        if self.unclean_enabled(image, topic) {
            Election::Unclean
        } else {
            Election::Online
        }
    }
}
