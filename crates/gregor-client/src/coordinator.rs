//! FindCoordinator: which broker coordinates a group.

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use crate::error::{Error, KafkaError, Result};
use crate::metadata::BrokerNode;

/// Kafka's coordinator key type for consumer groups.
pub const KEY_TYPE_GROUP: i8 = 0;

/// A FindCoordinator request for one group, in the layout of `version` (a single key before
/// v4, a batch of keys from v4).
pub fn find_coordinator_request(group: &str, version: i16) -> FindCoordinatorRequest {
    let mut req = FindCoordinatorRequest::default();
    if version >= 4 {
        req.coordinator_keys = vec![StrBytes::from_string(group.to_string())];
    } else {
        req.key = StrBytes::from_string(group.to_string());
    }
    if version >= 1 {
        req.key_type = KEY_TYPE_GROUP;
    }
    req
}

/// The coordinator of `group` from a FindCoordinator response of either layout.
pub fn parse_find_coordinator(group: &str, resp: FindCoordinatorResponse) -> Result<BrokerNode> {
    let context = || format!("FindCoordinator for group '{group}'");
    if resp.coordinators.is_empty() {
        KafkaError::check(resp.error_code, resp.error_message.as_deref())
            .map_err(|e| Error::kafka(context(), e))?;
        return Ok(BrokerNode {
            id: resp.node_id.0,
            host: resp.host.to_string(),
            port: resp.port,
            rack: None,
        });
    }
    let c = resp
        .coordinators
        .into_iter()
        .find(|c| c.key.as_str() == group)
        .ok_or_else(|| Error::Protocol {
            broker: "coordinator lookup".to_string(),
            reason: format!("FindCoordinator response does not mention group '{group}'"),
        })?;
    KafkaError::check(c.error_code, c.error_message.as_deref())
        .map_err(|e| Error::kafka(context(), e))?;
    Ok(BrokerNode {
        id: c.node_id.0,
        host: c.host.to_string(),
        port: c.port,
        rack: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::error::KafkaCode;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::protocol::Message;

    #[test]
    fn request_encodes_in_every_version() {
        for v in FindCoordinatorRequest::VERSIONS.min..=FindCoordinatorRequest::VERSIONS.max {
            encode_request(&find_coordinator_request("g", v), v, 1, "c")
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        assert_eq!(find_coordinator_request("g", 3).key.as_str(), "g");
        assert_eq!(find_coordinator_request("g", 4).coordinator_keys.len(), 1);
    }

    #[test]
    fn parses_both_layouts() {
        let old = FindCoordinatorResponse::default()
            .with_node_id(2.into())
            .with_host(StrBytes::from_static_str("h2"))
            .with_port(9094);
        let frame = encode_response_frame::<FindCoordinatorRequest>(&old, 2, 1);
        let node = parse_find_coordinator(
            "g",
            decode_response::<FindCoordinatorRequest>(frame, 2).unwrap(),
        )
        .unwrap();
        assert_eq!((node.id, node.address()), (2, "h2:9094".to_string()));

        let new =
            FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
                .with_key(StrBytes::from_static_str("g"))
                .with_node_id(3.into())
                .with_host(StrBytes::from_static_str("h3"))
                .with_port(9095)]);
        let frame = encode_response_frame::<FindCoordinatorRequest>(&new, 4, 1);
        let node = parse_find_coordinator(
            "g",
            decode_response::<FindCoordinatorRequest>(frame, 4).unwrap(),
        )
        .unwrap();
        assert_eq!(node.id, 3);
    }

    #[test]
    fn coordinator_not_available_is_a_kafka_error() {
        let resp =
            FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
                .with_key(StrBytes::from_static_str("g"))
                .with_error_code(15)]);
        let err = parse_find_coordinator("g", resp).unwrap_err();
        assert_eq!(err.kafka_code(), Some(KafkaCode::COORDINATOR_NOT_AVAILABLE));
        assert!(err.to_string().contains("group 'g'"));
    }
}
