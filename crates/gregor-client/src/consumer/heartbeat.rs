//! The heartbeat task: heartbeats while the member is in a stable generation, and the
//! `max.poll.interval.ms` check (leave the group when the application stopped polling).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{HeartbeatRequest, LeaveGroupRequest};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::group_wire::{self, MemberIdentityRef};
use super::membership::{HeartbeatAction, HeartbeatOutcome};
use super::{lock, millis, Shared};
use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError};

pub(super) struct HeartbeatTask {
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) client: Client,
    pub(super) group_id: String,
    pub(super) instance_id: Option<String>,
    pub(super) wake: Arc<Notify>,
    pub(super) wake_app: Arc<Notify>,
    pub(super) started: Instant,
    pub(super) session_timeout: Duration,
}

/// Sends heartbeats while the member is stable and enforces `max.poll.interval.ms`.
pub(super) async fn heartbeat_loop(t: HeartbeatTask) {
    let target = Target::Coordinator(t.group_id.clone());
    loop {
        let now = millis(t.started.elapsed());
        let action = {
            let mut s = lock(&t.shared);
            if s.closed {
                return;
            }
            s.m.heartbeat_action(now)
        };
        match action {
            HeartbeatAction::Idle => t.wake.notified().await,
            HeartbeatAction::WaitUntil(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(t.started + Duration::from_millis(at)) => {}
                    _ = t.wake.notified() => {}
                }
            }
            HeartbeatAction::Send {
                generation,
                member_id,
            } => {
                let who = MemberIdentityRef {
                    group_id: &t.group_id,
                    member_id: &member_id,
                    group_instance_id: t.instance_id.as_deref(),
                };
                // The group client's requests may wait as long as a JoinGroup does; a
                // heartbeat not answered within a session is lost whatever the connection says.
                let sent = tokio::time::timeout(
                    t.session_timeout,
                    t.client.send::<HeartbeatRequest, _>(&target, |v| {
                        Ok(group_wire::heartbeat_request(&who, generation, v))
                    }),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Timeout {
                        what: "waiting for the Heartbeat response".to_string(),
                        after_ms: millis(t.session_timeout),
                    })
                });
                // No answer at all (a timeout, a broken connection) rather than an error code:
                // the coordinator may be unreachable over this connection for good.
                let unanswered = matches!(&sent, Err(e) if e.kafka_code().is_none());
                let code = match sent {
                    Ok((_, r)) => KafkaCode::from_code(r.error_code),
                    Err(e) => Some(e.kafka_code().unwrap_or(KafkaCode::NETWORK_EXCEPTION)),
                };
                let now = millis(t.started.elapsed());
                let outcome = lock(&t.shared).m.on_heartbeat_answer(generation, code, now);
                match outcome {
                    HeartbeatOutcome::Ok => {}
                    HeartbeatOutcome::CoordinatorUnknown => {
                        if unanswered {
                            t.client
                                .coordinator_unreachable(&t.group_id, "a heartbeat went unanswered")
                                .await;
                        }
                        let mut state = t.client.retry_state("heartbeat");
                        let _ = t
                            .client
                            .prepare_retry(
                                &mut state,
                                Error::kafka(
                                    "Heartbeat",
                                    KafkaError::new(KafkaCode::NOT_COORDINATOR, None),
                                ),
                            )
                            .await;
                    }
                    HeartbeatOutcome::Rejoin
                    | HeartbeatOutcome::Lost
                    | HeartbeatOutcome::Fatal(_) => {
                        tracing::debug!(group = %t.group_id, member = %member_id, generation, ?outcome, "heartbeat");
                        t.wake_app.notify_one();
                    }
                }
            }
            HeartbeatAction::PollTimeoutExpired {
                member_id,
                send_leave,
            } => {
                tracing::warn!(
                    group = %t.group_id,
                    member = %member_id,
                    "consumer poll timeout has expired: the time between subsequent calls to \
                     poll() was longer than max.poll.interval.ms; leaving the group"
                );
                if send_leave {
                    let who = MemberIdentityRef {
                        group_id: &t.group_id,
                        member_id: &member_id,
                        group_instance_id: None,
                    };
                    let _ = t
                        .client
                        .send::<LeaveGroupRequest, _>(&target, |v| {
                            Ok(group_wire::leave_group_request(
                                &who,
                                "consumer poll timeout has expired",
                                v,
                            ))
                        })
                        .await;
                }
                t.wake_app.notify_one();
            }
        }
    }
}
