//! The checker over a run's history and the nodes' final images.

use std::collections::BTreeMap;
use std::fmt;

use gregor_meta::MetadataImage;
use serde::{Deserialize, Serialize};

use crate::ops::{Op, Reply};
use crate::workload::{OpRecord, FINAL_TOPIC};

/// A property the checker holds the run to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Property {
    /// Every acknowledged write is in every node's final image.
    AckedWriteLost,
    /// An acknowledged answer that no history explains (for example "already exists" for a
    /// topic nobody created).
    WrongAnswer,
    /// After healing, every node applied the same index and holds the same image.
    ImagesDiverge,
    /// No two nodes apply different entries at the same log index (Raft's state machine
    /// safety). openraft 0.9 (without `single-term-leader`) orders leaders by (term, node id),
    /// so two leaders in one term are legal there; what must never happen is two different
    /// entries committed at one index.
    AppliedEntriesDiffer,
    /// A node's applied metadata never goes backwards while it runs.
    AppliedWentBack,
    /// A voter's Raft term (kept with its vote on its disk) went back, across a restart or
    /// not: it could then vote twice in one term.
    TermWentBack,
    /// After the faults stop, a write commits and every node applies it within the bound.
    Liveness,
    /// A node restarted on its own files.
    NodeFailedToStart,
    /// Replicated runs: an acknowledged `acks=all` record is not at its acknowledged offset
    /// with its value when the log is read again after the faults.
    AckedRecordLost,
    /// Replicated runs: a consumer read two different records at one offset.
    OffsetHoldsTwoRecords,
    /// Replicated runs: a consumer fetch skipped offsets.
    ReadGap,
    /// Replicated runs: a consumer was given a record at or above the high watermark.
    ReadAboveHighWatermark,
    /// Replicated runs: a consumer read a record no producer sent.
    RecordNeverSent,
    /// Replicated runs: the high watermark reported in one leader epoch went back.
    HighWatermarkWentBack,
    /// Replicated runs: two nodes' metadata named different leaders for one partition and
    /// leader epoch.
    TwoLeadersInEpoch,
    /// Replicated runs: a record of the idempotent producer is in the log twice.
    IdempotentDuplicate,
    /// `--power-loss` runs: a file in a node's data directory was created or written without
    /// going through the simulated disk, so the power model cannot tell what survives.
    DiskBypassed,
    /// `--groups` runs: two members owned one partition in one generation.
    TwoOwnersInGeneration,
    /// `--groups` runs: an acknowledged offset commit moved a partition's committed offset
    /// back.
    CommittedOffsetWentBack,
    /// `--groups` runs: an offset below a committed one was never given to any member.
    GroupSkippedRecords,
    /// `--topic-admin` runs: after the faults, a node's open side-topic logs are not the ones
    /// its metadata assigns it (a deleted topic's log left, an added partition's missing).
    HostedLogsDiffer,
    /// Replicated runs: the controller fenced a broker that had been up, unpaused and with
    /// every link working for longer than its session (see `fence_check.rs`).
    HealthyBrokerFenced,
    /// Replicated runs: at the end, an in-sync follower's log is not its leader's, byte for
    /// byte, below the leader's high watermark (`replica_logs.rs`).
    ReplicaLogsDiverge,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Property::AckedWriteLost => "acked-write-lost",
            Property::HostedLogsDiffer => "hosted-logs-differ",
            Property::HealthyBrokerFenced => "healthy-broker-fenced",
            Property::ReplicaLogsDiverge => "replica-logs-diverge",
            Property::WrongAnswer => "wrong-answer",
            Property::ImagesDiverge => "images-diverge",
            Property::AppliedEntriesDiffer => "applied-entries-differ",
            Property::AppliedWentBack => "applied-went-back",
            Property::TermWentBack => "term-went-back",
            Property::Liveness => "liveness",
            Property::NodeFailedToStart => "node-failed-to-start",
            Property::AckedRecordLost => "acked-record-lost",
            Property::OffsetHoldsTwoRecords => "offset-holds-two-records",
            Property::ReadGap => "read-gap",
            Property::ReadAboveHighWatermark => "read-above-high-watermark",
            Property::RecordNeverSent => "record-never-sent",
            Property::HighWatermarkWentBack => "high-watermark-went-back",
            Property::TwoLeadersInEpoch => "two-leaders-in-epoch",
            Property::IdempotentDuplicate => "idempotent-duplicate",
            Property::DiskBypassed => "disk-bypassed",
            Property::TwoOwnersInGeneration => "two-owners-in-generation",
            Property::CommittedOffsetWentBack => "committed-offset-went-back",
            Property::GroupSkippedRecords => "group-skipped-records",
        };
        f.write_str(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub property: Property,
    pub detail: String,
}

impl Violation {
    pub fn new(property: Property, detail: impl Into<String>) -> Self {
        Violation {
            property,
            detail: detail.into(),
        }
    }
}

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

/// Checks the acknowledged operations against one node's final image.
pub fn check_acked(ops: &[OpRecord], node: usize, image: &MetadataImage) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut topics: BTreeMap<&str, Expect> = BTreeMap::new();
    let mut epochs: BTreeMap<i32, (i64, usize)> = BTreeMap::new();
    for rec in ops {
        match (&rec.op, &rec.reply) {
            (Op::CreateTopic { name, .. }, reply) => {
                let e = match reply {
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
                    Some(Reply::Created(Err(_))) if !rec.indeterminate => {
                        Expect::NeverCreated { op: rec.id }
                    }
                    _ => Expect::Unknown,
                };
                topics.insert(name, e);
            }
            (Op::CreatePartitions { name, count }, reply) => {
                if let Some(Expect::Present { min, max, .. }) = topics.get_mut(name.as_str()) {
                    match reply {
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
                let e = match reply {
                    Some(Reply::Deleted(Ok(id))) => {
                        if let Some(Expect::Present {
                            id: Some(known), ..
                        }) = topics.get(name.as_str())
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
                    Some(Reply::Deleted(r))
                        if is_code(r, "UnknownTopicOrPartition") && rec.indeterminate =>
                    {
                        Expect::Absent { op: rec.id }
                    }
                    Some(Reply::Deleted(Err(_))) if !rec.indeterminate => topics
                        .get(name.as_str())
                        .cloned()
                        .unwrap_or(Expect::Unknown),
                    _ => Expect::Unknown,
                };
                topics.insert(name, e);
            }
            (Op::Register { broker, .. }, Some(Reply::Registered(Ok(epoch)))) => {
                epochs.insert(*broker, (*epoch, rec.id));
            }
            _ => {}
        }
    }
    for (name, e) in &topics {
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
    for (broker, (epoch, op)) in &epochs {
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
    out
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
