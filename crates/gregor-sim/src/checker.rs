//! The checker over a run's history and the nodes' final images.

use std::collections::BTreeMap;

use gregor_meta::MetadataImage;

use crate::history::OpRecord;
use crate::ops::{Op, Reply};
use crate::property::{Property, Violation};
use crate::workload::FINAL_TOPIC;

/// What the acknowledged history says about one topic at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Created (acknowledged), not deleted: present with this id (when known) and a partition
    /// count in `[min, max]`.
    Present {
        id: Option<u128>,
        min: i32,
        max: i32,
        op: usize,
    },
    /// Deleted (acknowledged): absent.
    Absent {
        op: usize,
    },
    /// The creation was refused (acknowledged, and no attempt could have taken effect).
    NeverCreated {
        op: usize,
    },
    Unknown,
}

fn is_code(r: &Result<impl Sized, String>, code: &str) -> bool {
    matches!(r, Err(c) if c == code)
}

const UNKNOWN_TOPIC: &str = "UnknownTopicOrPartition";

/// A determinate "unknown topic" for a topic whose creation was acknowledged before this
/// operation was sent (the workload is one client: operations do not overlap) and that nothing
/// deleted since: a controller answered from an image that no longer was the cluster's, as a
/// deposed one that decides without confirming its leadership does.
fn stale_unknown(id: usize, what: &str, name: &str, created_by: usize) -> Violation {
    Violation::new(
        Property::WrongAnswer,
        format!("op{id} {what} {name}: UnknownTopicOrPartition, but op{created_by} created it (acknowledged) and nothing deleted it"),
    )
}

/// Checks the acknowledged operations against one node's final image.
pub fn check_acked(ops: &[OpRecord], node: usize, image: &MetadataImage) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut topics: BTreeMap<&str, Expect> = BTreeMap::new();
    let mut epochs: BTreeMap<i32, (i64, usize)> = BTreeMap::new();
    for rec in ops {
        match (&rec.op, &rec.reply) {
            (Op::CreateTopic { name, .. }, reply) => {
                topics.insert(name, expect_created(rec, name, reply, &mut out));
            }
            (Op::CreatePartitions { name, count }, reply) => {
                if let Some(Expect::Present { min, max, op, .. }) = topics.get_mut(name.as_str()) {
                    match reply {
                        Some(Reply::Partitions(r))
                            if is_code(r, UNKNOWN_TOPIC) && !rec.indeterminate =>
                        {
                            out.push(stale_unknown(rec.id, "add partitions to", name, *op));
                        }
                        Some(Reply::Partitions(Ok(()))) => {
                            *min = (*min).max(*count);
                            *max = (*max).max(*count);
                        }
                        Some(_) if !rec.indeterminate => {}
                        _ => *max = (*max).max(*count),
                    }
                }
            }
            (Op::DeleteTopic { name }, reply) => {
                let e = expect_deleted(rec, name, reply, &topics, &mut out);
                topics.insert(name, e);
            }
            (Op::Register { broker, .. }, Some(Reply::Registered(Ok(epoch)))) => {
                epochs.insert(*broker, (*epoch, rec.id));
            }
            _ => {}
        }
    }
    check_topics(node, image, &topics, &mut out);
    check_brokers(node, image, &epochs, &mut out);
    out
}

/// What an acknowledged (or refused) creation says of its topic.
fn expect_created(
    rec: &OpRecord,
    name: &str,
    reply: &Option<Reply>,
    out: &mut Vec<Violation>,
) -> Expect {
    match reply {
        Some(Reply::Created(Ok((id, n)))) => Expect::Present {
            id: Some(*id),
            min: *n,
            max: *n,
            op: rec.id,
        },
        Some(Reply::Created(r)) if is_code(r, "TopicAlreadyExists") => {
            if rec.indeterminate {
                Expect::Unknown
            } else {
                out.push(Violation::new(
                    Property::WrongAnswer,
                    format!("op{} create {name}: TopicAlreadyExists, but no earlier attempt could have created it", rec.id),
                ));
                Expect::Unknown
            }
        }
        Some(Reply::Created(Err(_))) if !rec.indeterminate => Expect::NeverCreated { op: rec.id },
        _ => Expect::Unknown,
    }
}

/// What an acknowledged (or refused) deletion says of its topic, given what came before.
fn expect_deleted(
    rec: &OpRecord,
    name: &str,
    reply: &Option<Reply>,
    topics: &BTreeMap<&str, Expect>,
    out: &mut Vec<Violation>,
) -> Expect {
    match reply {
        Some(Reply::Deleted(Ok(id))) => {
            if let Some(Expect::Present {
                id: Some(known), ..
            }) = topics.get(name)
            {
                if known != id {
                    out.push(Violation::new(
                        Property::WrongAnswer,
                        format!(
                            "op{} deleted {name} with id {id:x}, created as {known:x}",
                            rec.id
                        ),
                    ));
                }
            }
            Expect::Absent { op: rec.id }
        }
        Some(Reply::Deleted(r)) if is_code(r, UNKNOWN_TOPIC) && rec.indeterminate => {
            Expect::Absent { op: rec.id }
        }
        Some(Reply::Deleted(r)) if is_code(r, UNKNOWN_TOPIC) => {
            if let Some(Expect::Present { op, .. }) = topics.get(name) {
                out.push(stale_unknown(rec.id, "delete", name, *op));
            }
            topics.get(name).cloned().unwrap_or(Expect::Unknown)
        }
        Some(Reply::Deleted(Err(_))) if !rec.indeterminate => {
            topics.get(name).cloned().unwrap_or(Expect::Unknown)
        }
        _ => Expect::Unknown,
    }
}

/// Every topic as its acknowledged history expects it in `node`'s final image.
fn check_topics(
    node: usize,
    image: &MetadataImage,
    topics: &BTreeMap<&str, Expect>,
    out: &mut Vec<Violation>,
) {
    for (name, e) in topics {
        let got = image.topic(name);
        match (e, got) {
            (Expect::Present { op, .. }, None) => out.push(Violation::new(
                Property::AckedWriteLost,
                format!("n{node}: topic {name} (created by op{op}, acknowledged) is missing"),
            )),
            (Expect::Present { id, min, max, op }, Some(t)) => {
                if let Some(id) = id {
                    if t.id.as_u128() != *id {
                        out.push(Violation::new(
                            Property::AckedWriteLost,
                            format!(
                                "n{node}: topic {name} has id {:x}, op{op} acknowledged {id:x}",
                                t.id.as_u128()
                            ),
                        ));
                    }
                }
                let n = t.partitions.len() as i32;
                if n < *min || n > *max {
                    out.push(Violation::new(
                        Property::AckedWriteLost,
                        format!("n{node}: topic {name} has {n} partitions, acknowledged history allows {min}..={max}"),
                    ));
                }
            }
            (Expect::Absent { op }, Some(_)) => out.push(Violation::new(
                Property::AckedWriteLost,
                format!("n{node}: topic {name} (deleted by op{op}, acknowledged) is present"),
            )),
            (Expect::NeverCreated { op }, Some(_)) if name != &FINAL_TOPIC => {
                out.push(Violation::new(
                    Property::WrongAnswer,
                    format!("n{node}: topic {name} exists though op{op} was refused"),
                ))
            }
            _ => {}
        }
    }
}

/// Every acknowledged registration in `node`'s final image, at its epoch or later.
fn check_brokers(
    node: usize,
    image: &MetadataImage,
    epochs: &BTreeMap<i32, (i64, usize)>,
    out: &mut Vec<Violation>,
) {
    for (broker, (epoch, op)) in epochs {
        match image.broker(*broker) {
            None => out.push(Violation::new(
                Property::AckedWriteLost,
                format!(
                    "n{node}: broker {broker} (registered by op{op}, epoch {epoch}) is missing"
                ),
            )),
            Some(b) if b.epoch < *epoch => out.push(Violation::new(
                Property::AckedWriteLost,
                format!(
                    "n{node}: broker {broker} has epoch {}, op{op} acknowledged epoch {epoch}",
                    b.epoch
                ),
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_meta::{
        LeaderRecoveryState, MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord,
        Uuid,
    };

    /// Topic `t` (id 7) with `partitions` partitions, and broker 1 at epoch 5.
    fn image(partitions: i32) -> MetadataImage {
        let mut records = vec![
            MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: 1,
                incarnation_id: Uuid::from_u128(1),
                broker_epoch: 5,
                endpoints: Vec::new(),
                rack: None,
                fenced: false,
            }),
            MetadataRecord::Topic(TopicRecord {
                name: "t".into(),
                topic_id: Uuid::from_u128(7),
            }),
        ];
        records.extend((0..partitions).map(|p| {
            MetadataRecord::Partition(PartitionRecord {
                topic_id: Uuid::from_u128(7),
                partition: p,
                replicas: vec![1],
                isr: vec![1],
                removing_replicas: Vec::new(),
                adding_replicas: Vec::new(),
                leader: 1,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                leader_epoch: 0,
                partition_epoch: 0,
            })
        }));
        MetadataImage::from_records(&records).expect("a valid image")
    }

    fn op(id: usize, op: Op, reply: Option<Reply>, indeterminate: bool) -> OpRecord {
        OpRecord {
            id,
            op,
            end_ms: 0,
            indeterminate,
            reply,
        }
    }

    fn create(
        id: usize,
        name: &str,
        reply: Result<(u128, i32), String>,
        unknown: bool,
    ) -> OpRecord {
        let name = name.to_string();
        let partitions = 2;
        let op_ = Op::CreateTopic {
            name,
            partitions,
            rf: 1,
        };
        op(id, op_, Some(Reply::Created(reply)), unknown)
    }

    fn properties(ops: &[OpRecord], image: &MetadataImage) -> Vec<Property> {
        check_acked(ops, 0, image)
            .into_iter()
            .map(|v| v.property)
            .collect()
    }

    #[test]
    fn acknowledged_writes_in_the_image_pass() {
        let ops = [
            create(0, "t", Ok((7, 2)), false),
            op(
                1,
                Op::Register {
                    broker: 1,
                    incarnation: 1,
                },
                Some(Reply::Registered(Ok(5))),
                false,
            ),
        ];
        assert_eq!(properties(&ops, &image(2)), Vec::new());
    }

    #[test]
    fn a_created_topic_missing_or_changed_is_an_acknowledged_write_lost() {
        let ops = [create(0, "t", Ok((7, 2)), false)];
        // Missing, another id, another partition count.
        assert_eq!(
            properties(&ops, &MetadataImage::new()),
            vec![Property::AckedWriteLost]
        );
        let other_id = [create(0, "t", Ok((8, 2)), false)];
        assert_eq!(
            properties(&other_id, &image(2)),
            vec![Property::AckedWriteLost]
        );
        assert_eq!(properties(&ops, &image(3)), vec![Property::AckedWriteLost]);
    }

    #[test]
    fn a_deleted_topic_present_or_a_registration_lost_is_an_acknowledged_write_lost() {
        let deleted = [
            create(0, "t", Ok((7, 2)), false),
            op(
                1,
                Op::DeleteTopic { name: "t".into() },
                Some(Reply::Deleted(Ok(7))),
                false,
            ),
        ];
        assert_eq!(
            properties(&deleted, &image(2)),
            vec![Property::AckedWriteLost]
        );
        let registered = [op(
            0,
            Op::Register {
                broker: 1,
                incarnation: 2,
            },
            Some(Reply::Registered(Ok(6))),
            false,
        )];
        assert_eq!(
            properties(&registered, &image(2)),
            vec![Property::AckedWriteLost]
        );
    }

    #[test]
    fn an_answer_no_history_explains_is_a_wrong_answer() {
        let exists = Err("TopicAlreadyExists".to_string());
        // Nobody could have created it before...
        let ops = [create(0, "t", exists.clone(), false)];
        assert_eq!(properties(&ops, &image(2)), vec![Property::WrongAnswer]);
        // ...unless an earlier attempt of the same operation may have.
        let ops = [create(0, "t", exists, true)];
        assert_eq!(properties(&ops, &image(2)), Vec::new());
        // A refused creation whose topic exists anyway.
        let refused = [create(
            0,
            "t",
            Err("InvalidReplicationFactor".into()),
            false,
        )];
        assert_eq!(properties(&refused, &image(2)), vec![Property::WrongAnswer]);
        // A deletion answered with another topic's id.
        let ops = [
            create(0, "t", Ok((7, 2)), false),
            op(
                1,
                Op::DeleteTopic { name: "t".into() },
                Some(Reply::Deleted(Ok(9))),
                false,
            ),
        ];
        assert_eq!(
            properties(&ops, &MetadataImage::new()),
            vec![Property::WrongAnswer]
        );
    }
}
