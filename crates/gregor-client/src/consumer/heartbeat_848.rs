//! The heartbeat task of a `group.protocol=consumer` member: sends the ConsumerGroupHeartbeats
//! [`super::membership_848`] asks for, at the interval the coordinator names, hands it their
//! answers, and wakes the application when it has partitions to reconcile or lost.

use std::time::Duration;

use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;

use super::group_wire_848;
use super::heartbeat::HeartbeatTask;
use super::membership_848::{HeartbeatAction848, HeartbeatFields, HeartbeatOutcome848};
use super::shared::{lock, millis};
use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError};

/// Runs the member's heartbeats until the consumer closes.
pub(super) async fn heartbeat_loop_848(t: HeartbeatTask) {
    let target = Target::Coordinator(t.group_id.clone());
    loop {
        let now = millis(t.started.elapsed());
        let action = {
            let mut s = lock(&t.shared);
            if s.closed {
                return;
            }
            match s.cg.as_mut() {
                Some(cg) => cg.heartbeat_action(now),
                None => return,
            }
        };
        match action {
            HeartbeatAction848::Idle => t.wake.notified().await,
            HeartbeatAction848::WaitUntil(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(t.started + Duration::from_millis(at)) => {}
                    _ = t.wake.notified() => {}
                }
            }
            HeartbeatAction848::Send(fields) => t.heartbeat_848(&target, &fields).await,
            HeartbeatAction848::PollTimeoutExpired(leave) => {
                tracing::warn!(
                    group = %t.group_id,
                    member = %leave.member_id,
                    "consumer poll timeout has expired: the time between subsequent calls to \
                     poll() was longer than max.poll.interval.ms; leaving the group"
                );
                let _ = send_848(&t.client, &t.group_id, t.session_timeout, &target, &leave).await;
                t.wake_app.notify_one();
            }
        }
    }
}

/// Sends one ConsumerGroupHeartbeat; the error code stands for no answer too.
/// `true` with the code when no answer came at all.
pub(super) async fn send_848(
    client: &Client,
    group_id: &str,
    timeout: Duration,
    target: &Target,
    f: &HeartbeatFields,
) -> Result<super::membership_848::HeartbeatReply, (KafkaCode, bool)> {
    // A heartbeat not answered within a session is lost whatever the connection says.
    let sent = tokio::time::timeout(
        timeout,
        client.send::<ConsumerGroupHeartbeatRequest, _>(target, |v| {
            Ok(group_wire_848::heartbeat_request(group_id, f, v))
        }),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Error::Timeout {
            what: "waiting for the ConsumerGroupHeartbeat response".to_string(),
            after_ms: millis(timeout),
        })
    });
    match sent {
        Ok((_, resp)) => group_wire_848::parse_heartbeat(resp).map_err(|(code, message)| {
            tracing::debug!(group = %group_id, ?code, ?message, "heartbeat refused");
            (code, false)
        }),
        Err(e) => {
            let unanswered = e.kafka_code().is_none();
            Err((
                e.kafka_code().unwrap_or(KafkaCode::NETWORK_EXCEPTION),
                unanswered,
            ))
        }
    }
}

impl HeartbeatTask {
    async fn heartbeat_848(&self, target: &Target, fields: &HeartbeatFields) {
        let answer = send_848(
            &self.client,
            &self.group_id,
            self.session_timeout,
            target,
            fields,
        )
        .await;
        let unanswered = matches!(answer, Err((_, true)));
        let now = millis(self.started.elapsed());
        let outcome = {
            let mut s = lock(&self.shared);
            match s.cg.as_mut() {
                Some(cg) => cg.on_answer(fields, answer.map_err(|(c, _)| c), now),
                None => return,
            }
        };
        self.answers.send_modify(|n| *n += 1);
        match outcome {
            HeartbeatOutcome848::Ok | HeartbeatOutcome848::Ignored | HeartbeatOutcome848::Retry => {
            }
            HeartbeatOutcome848::CoordinatorUnknown => {
                self.forget_coordinator_848(unanswered).await
            }
            HeartbeatOutcome848::NewAssignment
            | HeartbeatOutcome848::Lost
            | HeartbeatOutcome848::Fatal(_) => {
                tracing::debug!(group = %self.group_id, member = %fields.member_id, epoch = fields.member_epoch, ?outcome, "heartbeat");
                self.wake_app.notify_one();
            }
        }
    }

    /// The coordinator is unknown: close the connection to it when it went silent, and look
    /// it up again on the next heartbeat (the state machine waits the backoff).
    async fn forget_coordinator_848(&self, unanswered: bool) {
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
                    "ConsumerGroupHeartbeat",
                    KafkaError::new(KafkaCode::NOT_COORDINATOR, None),
                ),
            )
            .await;
    }
}
