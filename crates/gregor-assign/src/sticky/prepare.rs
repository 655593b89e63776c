//! What both sticky builders start from: who owned what before (resolved by generation), the
//! members' generations, and rack information when rack-aware assignment applies.

use std::collections::HashMap;

use crate::model::{java_cmp, GroupSpec, PartitionId, TopicId};
use crate::protocol::{decode_cooperative_user_data, decode_sticky_user_data};

/// Marks "no member" in per-partition arrays.
pub(crate) const NONE: u32 = u32::MAX;

/// Kafka's generation for members that did not say.
pub(crate) const DEFAULT_GENERATION: i32 = -1;

/// Where a strategy reads previous ownership from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnershipSource {
    /// `sticky`: the user data it writes (previous assignment + generation); without user data,
    /// the subscription's owned partitions and generation.
    StickyUserData,
    /// `cooperative-sticky`: the subscription's owned partitions; the generation from the
    /// subscription, else from its user data.
    OwnedPartitions,
}

/// The sticky builders' view of the group.
pub(crate) struct Prepared {
    /// Each member's claimed partitions (deduplicated, existing topics only).
    pub claims: Vec<Vec<PartitionId>>,
    /// Resolved previous owner per partition (`NONE` when unowned or contested).
    pub prev_owner: Vec<u32>,
    /// Members ranked by member id (Java order), the tie-break of the sticky builders.
    pub id_rank: Vec<u32>,
    /// Rack information, present only when rack-aware assignment applies.
    pub racks: Option<RackInfo>,
}

/// Interned racks: consumers' racks and, per partition, which of those racks host a replica.
pub(crate) struct RackInfo {
    /// Rack id of each member, `NONE` without a rack.
    pub member_rack: Vec<u32>,
    /// CSR layout: racks of partition `p` are `partition_racks[offsets[p]..offsets[p + 1]]`,
    /// restricted to racks that some member is in.
    offsets: Vec<u32>,
    partition_racks: Vec<u32>,
    /// Number of members in the rack.
    members_in_rack: Vec<u32>,
    /// Per topic, the racks of its subscribers (sorted).
    topic_member_racks: Vec<Vec<u32>>,
}

impl RackInfo {
    pub fn racks_of(&self, p: u32) -> &[u32] {
        &self.partition_racks
            [self.offsets[p as usize] as usize..self.offsets[p as usize + 1] as usize]
    }

    /// Whether `member` should give up its ownership of `p` (of `topic`) for rack locality:
    /// it has a rack, no replica of `p` is there, and some subscriber of the topic is on a rack
    /// with a replica. Kafka drops the ownership even when no subscriber could read `p` locally,
    /// which only moves the partition between equally remote members (and, under the
    /// cooperative protocol, revokes it again in the follow-up round); here it stays.
    pub fn mismatch(&self, member: u32, p: u32, topic: TopicId) -> bool {
        let r = self.member_rack[member as usize];
        if r == NONE {
            return false;
        }
        let racks = self.racks_of(p);
        !racks.contains(&r)
            && racks.iter().any(|x| {
                self.topic_member_racks[topic.0 as usize]
                    .binary_search(x)
                    .is_ok()
            })
    }

    /// The member has a rack and a replica of `p` is there.
    pub fn matches(&self, member: u32, p: u32) -> bool {
        let r = self.member_rack[member as usize];
        r != NONE && self.racks_of(p).contains(&r)
    }

    /// How many members could consume `p` from a local replica.
    pub fn members_near(&self, p: u32) -> u32 {
        self.racks_of(p)
            .iter()
            .map(|r| self.members_in_rack[*r as usize])
            .sum()
    }
}

impl Prepared {
    pub fn new(group: &GroupSpec, source: OwnershipSource) -> Prepared {
        let members = group.members();
        let total = group.total_partitions() as usize;
        let mut claims = Vec::with_capacity(members.len());
        let mut generations = Vec::with_capacity(members.len());
        for m in members {
            let (owned, generation) = ownership(group, m, source);
            claims.push(owned);
            generations.push(generation);
        }

        // Highest generation wins; a tie at the highest generation leaves the partition unowned.
        let mut prev_owner = vec![NONE; total];
        let mut best_generation = vec![i32::MIN; total];
        let mut contested = vec![false; total];
        for (m, owned) in claims.iter().enumerate() {
            let g = generations[m];
            for p in owned {
                let i = p.0 as usize;
                if g > best_generation[i] {
                    best_generation[i] = g;
                    prev_owner[i] = m as u32;
                    contested[i] = false;
                } else if g == best_generation[i] {
                    contested[i] = true;
                }
            }
        }
        for (owner, contested) in prev_owner.iter_mut().zip(&contested) {
            if *contested {
                *owner = NONE;
            }
        }

        let mut by_id: Vec<u32> = (0..members.len() as u32).collect();
        by_id.sort_by(|a, b| {
            java_cmp(
                &members[*a as usize].member_id,
                &members[*b as usize].member_id,
            )
        });
        let mut id_rank = vec![0; members.len()];
        for (rank, m) in by_id.iter().enumerate() {
            id_rank[*m as usize] = rank as u32;
        }

        Prepared {
            claims,
            prev_owner,
            id_rank,
            racks: rack_info(group),
        }
    }
}

fn ownership(
    group: &GroupSpec,
    m: &crate::model::MemberSpec,
    source: OwnershipSource,
) -> (Vec<PartitionId>, i32) {
    match source {
        OwnershipSource::StickyUserData => match &m.user_data {
            Some(data) if !data.is_empty() => match decode_sticky_user_data(data) {
                Ok(decoded) => {
                    let mut owned: Vec<PartitionId> = decoded
                        .partitions
                        .iter()
                        .filter_map(|(t, ps)| group.topic_id(t).map(|id| (id, ps)))
                        .flat_map(|(id, ps)| {
                            ps.iter().filter_map(move |p| group.partition_id(id, *p))
                        })
                        .collect();
                    dedup_keep_order(&mut owned);
                    (owned, decoded.generation.unwrap_or(DEFAULT_GENERATION))
                }
                // Unreadable user data: the member is treated as owning nothing, as Kafka does.
                Err(_) => (Vec::new(), DEFAULT_GENERATION),
            },
            _ => (m.owned.clone(), m.generation.unwrap_or(DEFAULT_GENERATION)),
        },
        OwnershipSource::OwnedPartitions => {
            let generation = m
                .generation
                .or_else(|| {
                    m.user_data
                        .as_ref()
                        .map(|d| decode_cooperative_user_data(d).unwrap_or(DEFAULT_GENERATION))
                })
                .unwrap_or(DEFAULT_GENERATION);
            (m.owned.clone(), generation)
        }
    }
}

fn dedup_keep_order(v: &mut Vec<PartitionId>) {
    let mut seen = std::collections::HashSet::with_capacity(v.len());
    v.retain(|p| seen.insert(*p));
}

/// Rack-aware assignment applies when some member has a rack, some partition of a subscribed
/// topic has a replica on a member's rack, and not every partition has replicas on the same set
/// of racks (then every choice would be equally local).
fn rack_info(group: &GroupSpec) -> Option<RackInfo> {
    let members = group.members();
    let mut rack_ids: HashMap<&str, u32> = HashMap::new();
    let mut member_rack = vec![NONE; members.len()];
    for (i, m) in members.iter().enumerate() {
        if let Some(r) = m.rack.as_deref() {
            let next = rack_ids.len() as u32;
            member_rack[i] = *rack_ids.entry(r).or_insert(next);
        }
    }
    if rack_ids.is_empty() {
        return None;
    }
    let mut subscribed = vec![false; group.topics().len()];
    for m in members {
        for t in &m.topics {
            subscribed[t.0 as usize] = true;
        }
    }
    let mut members_in_rack = vec![0u32; rack_ids.len()];
    for r in &member_rack {
        if *r != NONE {
            members_in_rack[*r as usize] += 1;
        }
    }

    // Compare every partition's rack set with the union; keep only racks with members.
    let mut first: Option<Vec<&str>> = None;
    let mut all_same = true;
    let mut overlap = false;
    let mut offsets = vec![0u32; group.total_partitions() as usize + 1];
    let mut partition_racks = Vec::new();
    for (t, spec) in group.topics().iter().enumerate() {
        for p in 0..spec.partitions {
            let pid = (spec.base + p) as usize;
            if subscribed[t] {
                let mut set: Vec<&str> = spec.racks_of(p).iter().map(String::as_str).collect();
                set.sort_unstable();
                set.dedup();
                for r in &set {
                    if let Some(id) = rack_ids.get(r) {
                        partition_racks.push(*id);
                        overlap = true;
                    }
                }
                match &first {
                    None => first = Some(set),
                    Some(f) => all_same &= *f == set,
                }
            }
            offsets[pid + 1] = partition_racks.len() as u32;
        }
    }
    // Every partition equal to the first one means every partition equals the union.
    if !overlap || all_same {
        return None;
    }
    let mut topic_member_racks = vec![Vec::new(); group.topics().len()];
    for (i, m) in members.iter().enumerate() {
        if member_rack[i] != NONE {
            for t in &m.topics {
                topic_member_racks[t.0 as usize].push(member_rack[i]);
            }
        }
    }
    for racks in &mut topic_member_racks {
        racks.sort_unstable();
        racks.dedup();
    }
    Some(RackInfo {
        member_rack,
        offsets,
        partition_racks,
        members_in_rack,
        topic_member_racks,
    })
}
