//! DescribeCluster: cluster id, controller and brokers (from Metadata on brokers without it).

use kafka_protocol::messages::DescribeClusterRequest;

use super::base::Admin;
use crate::error::{Error, Result};

pub use crate::metadata::{describe_cluster_request, parse_describe_cluster, ClusterDescription};

impl Admin {
    /// The cluster id, controller and brokers; DescribeCluster where the broker has it,
    /// Metadata otherwise.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        self.client
            .retry("describing the cluster", || async {
                let sent = self
                    .client
                    .send::<DescribeClusterRequest, _>(&crate::client::Target::Any, |v| {
                        Ok(describe_cluster_request(
                            v,
                            self.client.config().bootstrap_controllers,
                        ))
                    })
                    .await;
                match sent {
                    Ok((_, resp)) => {
                        parse_describe_cluster(resp).map_err(|e| Error::kafka("DescribeCluster", e))
                    }
                    Err(Error::UnsupportedVersion { .. }) => {
                        let md = self.client.refresh_metadata(Some(&[])).await?;
                        Ok(ClusterDescription {
                            cluster_id: md.cluster_id,
                            controller_id: md.controller_id,
                            brokers: md.brokers,
                        })
                    }
                    Err(e) => Err(e),
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::error::KafkaCode;
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    use kafka_protocol::messages::DescribeClusterResponse;
    use kafka_protocol::protocol::{Message, StrBytes};

    #[test]
    fn request_in_every_version_and_response_parsed() {
        for v in DescribeClusterRequest::VERSIONS.min..=DescribeClusterRequest::VERSIONS.max {
            encode_request(&describe_cluster_request(v, false), v, 1, "c")
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        let resp = DescribeClusterResponse::default()
            .with_cluster_id(StrBytes::from_static_str("MkU3OEVBNTcwNTJENDM2Qk"))
            .with_controller_id(2.into())
            .with_brokers(vec![
                DescribeClusterBroker::default()
                    .with_broker_id(2.into())
                    .with_host(StrBytes::from_static_str("h2"))
                    .with_port(9094),
                DescribeClusterBroker::default()
                    .with_broker_id(0.into())
                    .with_host(StrBytes::from_static_str("h0"))
                    .with_port(9092),
            ]);
        let frame = encode_response_frame::<DescribeClusterRequest>(&resp, 1, 1);
        let c =
            parse_describe_cluster(decode_response::<DescribeClusterRequest>(frame, 1).unwrap())
                .unwrap();
        assert_eq!(c.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
        assert_eq!(c.controller_id, Some(2));
        assert_eq!(
            c.brokers.iter().map(|b| b.id).collect::<Vec<_>>(),
            vec![0, 2]
        );
        let err = parse_describe_cluster(DescribeClusterResponse::default().with_error_code(7))
            .unwrap_err();
        assert_eq!(err.code, KafkaCode::REQUEST_TIMED_OUT);
    }
}
