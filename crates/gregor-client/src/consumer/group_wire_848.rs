//! ConsumerGroupHeartbeat (KIP-848) as a member sends it, in the layout of the negotiated
//! version, and its answer reduced to what [`super::membership_848`] needs.

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::membership_848::{HeartbeatFields, HeartbeatReply, Subscription, TopicIdPartitions};
use crate::error::KafkaCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The request for `f` in `version`. In v0 the coordinator names a joining member, which
/// then sends no id; from v1 the member sends the id it generated (KIP-1082).
pub fn heartbeat_request(
    group_id: &str,
    f: &HeartbeatFields,
    version: i16,
) -> ConsumerGroupHeartbeatRequest {
    let member_id = match version == 0 && !f.member_id_named {
        true => "",
        false => f.member_id.as_str(),
    };
    let (names, regex) = match &f.subscription {
        Some(Subscription::Topics(t)) => (
            Some(t.iter().map(|n| TopicName(s(n))).collect()),
            f.clear_regex.then(|| s("")),
        ),
        Some(Subscription::Regex(r)) => (Some(Vec::new()), Some(s(r))),
        None => (None, None),
    };
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group_id)))
        .with_member_id(s(member_id))
        .with_member_epoch(f.member_epoch)
        .with_instance_id(f.instance_id.as_deref().map(s))
        .with_rack_id(f.rack_id.as_deref().map(s))
        .with_rebalance_timeout_ms(match f.member_epoch >= 0 {
            true => f.rebalance_timeout_ms,
            false => -1,
        })
        .with_subscribed_topic_names(names)
        .with_subscribed_topic_regex(regex)
        .with_server_assignor(f.server_assignor.as_deref().map(s))
        .with_topic_partitions(f.owned.as_ref().map(owned_to_wire))
}

fn owned_to_wire(owned: &TopicIdPartitions) -> Vec<TopicPartitions> {
    owned
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(*id)
                .with_partitions(ps.iter().copied().collect())
        })
        .collect()
}

/// The answer: the reply, or the error code.
pub fn parse_heartbeat(
    resp: ConsumerGroupHeartbeatResponse,
) -> Result<HeartbeatReply, (KafkaCode, Option<String>)> {
    if let Some(code) = KafkaCode::from_code(resp.error_code) {
        return Err((code, resp.error_message.map(|m| m.to_string())));
    }
    Ok(HeartbeatReply {
        member_id: resp.member_id.map(|m| m.to_string()),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.map(|a| {
            let mut out = TopicIdPartitions::new();
            for t in a.topic_partitions {
                out.entry(t.topic_id).or_default().extend(t.partitions);
            }
            out
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_request;
    use kafka_protocol::protocol::Message;
    use uuid::Uuid;

    fn fields(epoch: i32, named: bool) -> HeartbeatFields {
        HeartbeatFields {
            member_id: "m-1".into(),
            member_id_named: named,
            member_epoch: epoch,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 300_000,
            subscription: Some(Subscription::Topics(vec!["t".into()])),
            clear_regex: false,
            server_assignor: Some("uniform".into()),
            owned: Some([(Uuid::from_u128(7), [0, 1].into())].into()),
            session: 0,
        }
    }

    #[test]
    fn v0_join_sends_no_member_id_and_v1_sends_the_generated_one() {
        let v0 = heartbeat_request("g", &fields(0, false), 0);
        assert_eq!(v0.member_id.as_str(), "");
        let v1 = heartbeat_request("g", &fields(0, false), 1);
        assert_eq!(v1.member_id.as_str(), "m-1");
        let named = heartbeat_request("g", &fields(3, true), 0);
        assert_eq!(named.member_id.as_str(), "m-1");
        assert_eq!(named.topic_partitions.as_ref().map(Vec::len), Some(1));
        for v in ConsumerGroupHeartbeatRequest::VERSIONS.min
            ..=ConsumerGroupHeartbeatRequest::VERSIONS.max
        {
            encode_request(&heartbeat_request("g", &fields(3, true), v), v, 1, "c")
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
    }

    #[test]
    fn a_regex_subscription_sends_no_topic_names() {
        let mut f = fields(0, true);
        f.subscription = Some(Subscription::Regex("t-.*".into()));
        let req = heartbeat_request("g", &f, 1);
        assert_eq!(req.subscribed_topic_regex.as_deref(), Some("t-.*"));
        assert_eq!(req.subscribed_topic_names, Some(Vec::new()));
    }

    #[test]
    fn answers_keep_the_assignment_and_errors() {
        use kafka_protocol::messages::consumer_group_heartbeat_response as r;
        let resp = ConsumerGroupHeartbeatResponse::default()
            .with_member_epoch(4)
            .with_heartbeat_interval_ms(500)
            .with_assignment(Some(r::Assignment::default().with_topic_partitions(vec![
                r::TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(7))
                    .with_partitions(vec![2, 0]),
            ])));
        let reply = parse_heartbeat(resp).unwrap();
        assert_eq!(reply.member_epoch, 4);
        let a = reply.assignment.unwrap();
        assert_eq!(a[&Uuid::from_u128(7)], [0, 2].into());
        let err = ConsumerGroupHeartbeatResponse::default().with_error_code(110);
        assert_eq!(parse_heartbeat(err).unwrap_err().0, KafkaCode(110));
    }
}
