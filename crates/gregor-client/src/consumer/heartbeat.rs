//! The heartbeat task: heartbeats while the member is in a stable generation, and the
//! `max.poll.interval.ms` check (leave the group when the application stopped polling).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{HeartbeatRequest, LeaveGroupRequest};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::group_wire::{self, MemberIdentityRef};
use super::membership::{HeartbeatAction, HeartbeatOutcome};
use super::shared::{lock, millis, Shared};
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
    /// Counts heartbeat answers, for commits waiting for a newer member epoch.
    pub(super) answers: Arc<tokio::sync::watch::Sender<u64>>,
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
            } => t.heartbeat(&target, generation, &member_id).await,
            HeartbeatAction::PollTimeoutExpired {
                member_id,
                send_leave,
            } => {
                t.leave_after_poll_timeout(&target, &member_id, send_leave)
                    .await
            }
        }
    }
}

impl HeartbeatTask {
    /// Sends one Heartbeat and hands its answer to the membership state machine.
    async fn heartbeat(&self, target: &Target, generation: i32, member_id: &str) {
        let who = MemberIdentityRef {
            group_id: &self.group_id,
            member_id,
            group_instance_id: self.instance_id.as_deref(),
        };
        // The group client's requests may wait as long as a JoinGroup does; a
        // heartbeat not answered within a session is lost whatever the connection says.
        let sent = tokio::time::timeout(
            self.session_timeout,
            self.client.send::<HeartbeatRequest, _>(target, |v| {
                Ok(group_wire::heartbeat_request(&who, generation, v))
            }),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Error::Timeout {
                what: "waiting for the Heartbeat response".to_string(),
                after_ms: millis(self.session_timeout),
            })
        });
        // No answer at all (a timeout, a broken connection) rather than an error code:
        // the coordinator may be unreachable over this connection for good.
        let unanswered = matches!(&sent, Err(e) if e.kafka_code().is_none());
        let code = match sent {
            Ok((_, r)) => KafkaCode::from_code(r.error_code),
            Err(e) => Some(e.kafka_code().unwrap_or(KafkaCode::NETWORK_EXCEPTION)),
        };
        let now = millis(self.started.elapsed());
        let outcome = lock(&self.shared)
            .m
            .on_heartbeat_answer(generation, code, now);
        match outcome {
            HeartbeatOutcome::Ok => {}
            HeartbeatOutcome::CoordinatorUnknown => self.forget_coordinator(unanswered).await,
            HeartbeatOutcome::Rejoin | HeartbeatOutcome::Lost | HeartbeatOutcome::Fatal(_) => {
                tracing::debug!(group = %self.group_id, member = %member_id, generation, ?outcome, "heartbeat");
                self.wake_app.notify_one();
            }
        }
    }

    /// The coordinator is unknown: close the connection to it when it went silent, and find
    /// it again (after the retry backoff).
    async fn forget_coordinator(&self, unanswered: bool) {
        if unanswered {
            self.client
                .coordinator_unreachable(&self.group_id, "a heartbeat went unanswered")
                .await;
        }
        let mut state = self.client.retry_state("heartbeat");
        let _ = self
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

    /// `max.poll.interval.ms` passed without a `poll`: leave the group (LeaveGroup for a
    /// dynamic member) and wake the application so its next `poll` reports the loss.
    async fn leave_after_poll_timeout(&self, target: &Target, member_id: &str, send_leave: bool) {
        tracing::warn!(
            group = %self.group_id,
            member = %member_id,
            "consumer poll timeout has expired: the time between subsequent calls to \
             poll() was longer than max.poll.interval.ms; leaving the group"
        );
        if send_leave {
            let who = MemberIdentityRef {
                group_id: &self.group_id,
                member_id,
                group_instance_id: None,
            };
            let _ = self
                .client
                .send::<LeaveGroupRequest, _>(target, |v| {
                    Ok(group_wire::leave_group_request(
                        &who,
                        "consumer poll timeout has expired",
                        v,
                    ))
                })
                .await;
        }
        self.wake_app.notify_one();
    }
}
