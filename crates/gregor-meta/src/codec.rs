//! Binary encoding of [`MetadataRecord`]s, as stored in the metadata log.
//!
//! Layout: `type: u8`, `version: u8`, then the fields of that type and version in declaration
//! order. Integers are zig-zag LEB128 varints (broker ids and epochs are small, so records stay a
//! few dozen bytes), lengths are unsigned varints, strings are length-prefixed UTF-8, options
//! have a `0`/`1` presence byte, uuids are 16 raw bytes. Adding a field means a new version of
//! that record type; decoders keep reading every older version. The format is our own (no serde)
//! so that the bytes on disk are defined here, in one place, and never change with a
//! dependency upgrade.

use crate::error::DecodeError;
use crate::record::*;
use uuid::Uuid;

const REGISTER_BROKER: u8 = 0;
const UNREGISTER_BROKER: u8 = 1;
const FENCE_BROKER: u8 = 2;
const UNFENCE_BROKER: u8 = 3;
const TOPIC: u8 = 4;
const PARTITION: u8 = 5;
const PARTITION_CHANGE: u8 = 6;
const REMOVE_TOPIC: u8 = 7;
const CONFIG: u8 = 8;
const ACCESS_CONTROL_ENTRY: u8 = 9;
const REMOVE_ACCESS_CONTROL_ENTRY: u8 = 10;
const USER_SCRAM_CREDENTIAL: u8 = 11;
const REMOVE_USER_SCRAM_CREDENTIAL: u8 = 12;
const CLIENT_QUOTA: u8 = 13;
const FEATURE_LEVEL: u8 = 14;

/// Version written for every record type today.
const V0: u8 = 0;

impl MetadataRecord {
    /// Encode to bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(32));
        match self {
            MetadataRecord::RegisterBroker(r) => {
                w.header(REGISTER_BROKER);
                w.i32(r.broker_id);
                w.uuid(r.incarnation_id);
                w.i64(r.broker_epoch);
                w.len(r.endpoints.len());
                for e in &r.endpoints {
                    w.str(&e.name);
                    w.str(&e.host);
                    w.0.extend_from_slice(&e.port.to_be_bytes());
                    w.i64(i64::from(e.security_protocol));
                }
                w.opt_str(r.rack.as_deref());
                w.bool(r.fenced);
            }
            MetadataRecord::UnregisterBroker(r) => w.broker_epoch(UNREGISTER_BROKER, r),
            MetadataRecord::FenceBroker(r) => w.broker_epoch(FENCE_BROKER, r),
            MetadataRecord::UnfenceBroker(r) => w.broker_epoch(UNFENCE_BROKER, r),
            MetadataRecord::Topic(r) => {
                w.header(TOPIC);
                w.str(&r.name);
                w.uuid(r.topic_id);
            }
            MetadataRecord::Partition(r) => {
                w.header(PARTITION);
                w.uuid(r.topic_id);
                w.i32(r.partition);
                w.ids(&r.replicas);
                w.ids(&r.isr);
                w.ids(&r.removing_replicas);
                w.ids(&r.adding_replicas);
                w.i32(r.leader);
                w.0.push(r.leader_recovery_state.as_i8() as u8);
                w.i32(r.leader_epoch);
                w.i32(r.partition_epoch);
            }
            MetadataRecord::PartitionChange(r) => {
                w.header(PARTITION_CHANGE);
                w.uuid(r.topic_id);
                w.i32(r.partition);
                w.opt_ids(r.isr.as_deref());
                match r.leader {
                    LeaderChange::Unchanged => w.bool(false),
                    LeaderChange::To(id) => {
                        w.bool(true);
                        w.i32(id);
                    }
                }
                w.opt_ids(r.replicas.as_deref());
                w.opt_ids(r.removing_replicas.as_deref());
                w.opt_ids(r.adding_replicas.as_deref());
                match r.leader_recovery_state {
                    None => w.bool(false),
                    Some(s) => {
                        w.bool(true);
                        w.0.push(s.as_i8() as u8);
                    }
                }
            }
            MetadataRecord::RemoveTopic(r) => {
                w.header(REMOVE_TOPIC);
                w.uuid(r.topic_id);
            }
            MetadataRecord::Config(r) => {
                w.header(CONFIG);
                w.0.push(r.resource.resource_type.as_i8() as u8);
                w.str(&r.resource.name);
                w.str(&r.name);
                w.opt_str(r.value.as_deref());
            }
            MetadataRecord::AccessControlEntry(r) => w.access_control_entry(r),
            MetadataRecord::RemoveAccessControlEntry(r) => {
                w.header(REMOVE_ACCESS_CONTROL_ENTRY);
                w.uuid(r.id);
            }
            MetadataRecord::UserScramCredential(r) => w.user_scram_credential(r),
            MetadataRecord::RemoveUserScramCredential(r) => {
                w.header(REMOVE_USER_SCRAM_CREDENTIAL);
                w.str(&r.name);
                w.0.push(r.mechanism.type_id() as u8);
            }
            MetadataRecord::ClientQuota(r) => w.client_quota(r),
            MetadataRecord::FeatureLevel(r) => {
                w.header(FEATURE_LEVEL);
                w.str(&r.name);
                w.i32(i32::from(r.level));
            }
        }
        w.0
    }

    /// Decode bytes produced by [`MetadataRecord::encode`] (any supported version).
    pub fn decode(bytes: &[u8]) -> Result<MetadataRecord, DecodeError> {
        let mut r = Reader(bytes);
        let record_type = r.u8("record type")?;
        let version = r.u8("record version")?;
        if record_type > CONFIG
            && !is_acl_record(record_type)
            && !is_scram_record(record_type)
            && record_type != CLIENT_QUOTA
            && record_type != FEATURE_LEVEL
        {
            return Err(DecodeError::UnknownType(record_type));
        }
        if version != V0 {
            return Err(DecodeError::UnsupportedVersion {
                record_type,
                version,
            });
        }
        let record = match record_type {
            REGISTER_BROKER => MetadataRecord::RegisterBroker(r.register_broker()?),
            UNREGISTER_BROKER => MetadataRecord::UnregisterBroker(r.broker_epoch()?),
            FENCE_BROKER => MetadataRecord::FenceBroker(r.broker_epoch()?),
            UNFENCE_BROKER => MetadataRecord::UnfenceBroker(r.broker_epoch()?),
            TOPIC => MetadataRecord::Topic(TopicRecord {
                name: r.string("topic name")?,
                topic_id: r.uuid("topic id")?,
            }),
            PARTITION => MetadataRecord::Partition(PartitionRecord {
                topic_id: r.uuid("topic id")?,
                partition: r.i32("partition")?,
                replicas: r.ids("replicas")?,
                isr: r.ids("isr")?,
                removing_replicas: r.ids("removing replicas")?,
                adding_replicas: r.ids("adding replicas")?,
                leader: r.i32("leader")?,
                leader_recovery_state: r.recovery_state()?,
                leader_epoch: r.i32("leader epoch")?,
                partition_epoch: r.i32("partition epoch")?,
            }),
            PARTITION_CHANGE => MetadataRecord::PartitionChange(r.partition_change()?),
            REMOVE_TOPIC => MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: r.uuid("topic id")?,
            }),
            CONFIG => MetadataRecord::Config(r.config()?),
            ACCESS_CONTROL_ENTRY => MetadataRecord::AccessControlEntry(r.access_control_entry()?),
            REMOVE_ACCESS_CONTROL_ENTRY => {
                MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
                    id: r.uuid("acl id")?,
                })
            }
            USER_SCRAM_CREDENTIAL => {
                MetadataRecord::UserScramCredential(r.user_scram_credential()?)
            }
            REMOVE_USER_SCRAM_CREDENTIAL => {
                MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                    name: r.string("user name")?,
                    mechanism: r.scram_mechanism()?,
                })
            }
            CLIENT_QUOTA => MetadataRecord::ClientQuota(r.client_quota()?),
            FEATURE_LEVEL => MetadataRecord::FeatureLevel(r.feature_level()?),
            _ => unreachable!("record type range checked above"),
        };
        if !r.0.is_empty() {
            return Err(DecodeError::TrailingBytes(r.0.len()));
        }
        Ok(record)
    }
}

fn is_acl_record(record_type: u8) -> bool {
    matches!(
        record_type,
        ACCESS_CONTROL_ENTRY | REMOVE_ACCESS_CONTROL_ENTRY
    )
}

struct Writer(Vec<u8>);

impl Writer {
    fn header(&mut self, record_type: u8) {
        self.0.push(record_type);
        self.0.push(V0);
    }
    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn i64(&mut self, v: i64) {
        self.uvarint(((v << 1) ^ (v >> 63)) as u64);
    }
    fn i32(&mut self, v: i32) {
        self.i64(i64::from(v));
    }
    fn len(&mut self, n: usize) {
        self.uvarint(n as u64);
    }
    fn bool(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.bool(false),
            Some(s) => {
                self.bool(true);
                self.str(s);
            }
        }
    }
    fn uuid(&mut self, id: Uuid) {
        self.0.extend_from_slice(id.as_bytes());
    }
    fn ids(&mut self, ids: &[i32]) {
        self.len(ids.len());
        for &id in ids {
            self.i32(id);
        }
    }
    fn opt_ids(&mut self, ids: Option<&[i32]>) {
        match ids {
            None => self.bool(false),
            Some(ids) => {
                self.bool(true);
                self.ids(ids);
            }
        }
    }
    fn broker_epoch(&mut self, record_type: u8, r: &BrokerEpochRecord) {
        self.header(record_type);
        self.i32(r.broker_id);
        self.i64(r.broker_epoch);
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        let (&b, rest) = self.0.split_first().ok_or(DecodeError::Truncated(field))?;
        self.0 = rest;
        Ok(b)
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        if self.0.len() < N {
            return Err(DecodeError::Truncated(field));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split_at(N) yields N bytes"))
    }
    fn uvarint(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(field)?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Invalid {
            field,
            detail: "varint longer than 10 bytes".into(),
        })
    }
    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let u = self.uvarint(field)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        let v = self.i64(field)?;
        i32::try_from(v).map_err(|_| DecodeError::Invalid {
            field,
            detail: format!("{v} does not fit in 32 bits"),
        })
    }
    fn len(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let n = self.uvarint(field)?;
        // A length can never exceed the bytes left (every element takes at least one byte).
        if n > self.0.len() as u64 {
            return Err(DecodeError::Truncated(field));
        }
        Ok(n as usize)
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(DecodeError::Invalid {
                field,
                detail: format!("boolean byte {b}"),
            }),
        }
    }
    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let n = self.len(field)?;
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8(head.to_vec()).map_err(|_| DecodeError::Invalid {
            field,
            detail: "not UTF-8".into(),
        })
    }
    fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        if self.bool(field)? {
            Ok(Some(self.string(field)?))
        } else {
            Ok(None)
        }
    }
    fn uuid(&mut self, field: &'static str) -> Result<Uuid, DecodeError> {
        Ok(Uuid::from_bytes(self.array::<16>(field)?))
    }
    fn ids(&mut self, field: &'static str) -> Result<Vec<i32>, DecodeError> {
        let n = self.len(field)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.i32(field)?);
        }
        Ok(ids)
    }
    fn opt_ids(&mut self, field: &'static str) -> Result<Option<Vec<i32>>, DecodeError> {
        if self.bool(field)? {
            Ok(Some(self.ids(field)?))
        } else {
            Ok(None)
        }
    }
    fn recovery_state(&mut self) -> Result<LeaderRecoveryState, DecodeError> {
        let b = self.u8("leader recovery state")? as i8;
        LeaderRecoveryState::from_i8(b).ok_or_else(|| DecodeError::Invalid {
            field: "leader recovery state",
            detail: format!("unknown value {b}"),
        })
    }
    fn broker_epoch(&mut self) -> Result<BrokerEpochRecord, DecodeError> {
        Ok(BrokerEpochRecord {
            broker_id: self.i32("broker id")?,
            broker_epoch: self.i64("broker epoch")?,
        })
    }

    fn register_broker(&mut self) -> Result<RegisterBrokerRecord, DecodeError> {
        let broker_id = self.i32("broker id")?;
        let incarnation_id = self.uuid("incarnation id")?;
        let broker_epoch = self.i64("broker epoch")?;
        let n = self.len("endpoint count")?;
        let mut endpoints = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            endpoints.push(self.endpoint()?);
        }
        let rack = self.opt_string("rack")?;
        let fenced = self.bool("fenced")?;
        Ok(RegisterBrokerRecord {
            broker_id,
            incarnation_id,
            broker_epoch,
            endpoints,
            rack,
            fenced,
        })
    }

    fn endpoint(&mut self) -> Result<BrokerEndpoint, DecodeError> {
        let name = self.string("endpoint name")?;
        let host = self.string("endpoint host")?;
        let port = u16::from_be_bytes(self.array::<2>("endpoint port")?);
        let sp = self.i64("security protocol")?;
        let security_protocol = i16::try_from(sp).map_err(|_| DecodeError::Invalid {
            field: "security protocol",
            detail: format!("{sp} out of range"),
        })?;
        Ok(BrokerEndpoint {
            name,
            host,
            port,
            security_protocol,
        })
    }

    fn partition_change(&mut self) -> Result<PartitionChangeRecord, DecodeError> {
        let topic_id = self.uuid("topic id")?;
        let partition = self.i32("partition")?;
        let isr = self.opt_ids("isr")?;
        let leader = if self.bool("leader present")? {
            LeaderChange::To(self.i32("leader")?)
        } else {
            LeaderChange::Unchanged
        };
        let replicas = self.opt_ids("replicas")?;
        let removing_replicas = self.opt_ids("removing replicas")?;
        let adding_replicas = self.opt_ids("adding replicas")?;
        let leader_recovery_state = if self.bool("recovery state present")? {
            Some(self.recovery_state()?)
        } else {
            None
        };
        Ok(PartitionChangeRecord {
            topic_id,
            partition,
            isr,
            leader,
            replicas,
            removing_replicas,
            adding_replicas,
            leader_recovery_state,
        })
    }

    fn config(&mut self) -> Result<ConfigRecord, DecodeError> {
        let t = self.u8("resource type")? as i8;
        let resource_type = ConfigResourceType::from_i8(t).ok_or_else(|| DecodeError::Invalid {
            field: "resource type",
            detail: format!("unknown resource type {t}"),
        })?;
        Ok(ConfigRecord {
            resource: ConfigResource {
                resource_type,
                name: self.string("resource name")?,
            },
            name: self.string("config name")?,
            value: self.opt_string("config value")?,
        })
    }
}

// ACL records (`acl::types`): the enums are stored as Kafka's one-byte codes.
impl Writer {
    fn access_control_entry(&mut self, r: &AccessControlEntryRecord) {
        self.header(ACCESS_CONTROL_ENTRY);
        self.uuid(r.id);
        self.0.push(r.acl.resource_type.code() as u8);
        self.str(&r.acl.resource_name);
        self.0.push(r.acl.pattern_type.code() as u8);
        self.str(&r.acl.principal);
        self.str(&r.acl.host);
        self.0.push(r.acl.operation.code() as u8);
        self.0.push(r.acl.permission_type.code() as u8);
    }
}

impl Reader<'_> {
    /// One byte that must be a code no encoder rejects (a binding, never a filter's ANY).
    fn acl_code<T: Copy>(
        &mut self,
        field: &'static str,
        from_code: fn(i8) -> T,
        valid: fn(T) -> bool,
    ) -> Result<T, DecodeError> {
        let code = self.u8(field)? as i8;
        let v = from_code(code);
        if valid(v) {
            Ok(v)
        } else {
            Err(DecodeError::Invalid {
                field,
                detail: format!("code {code} is not valid in a stored ACL"),
            })
        }
    }

    fn access_control_entry(&mut self) -> Result<AccessControlEntryRecord, DecodeError> {
        use crate::acl::types::{
            AclBinding, AclOperation as Op, AclPermissionType as Perm, AclResourceType as Res,
            PatternType as Pat,
        };
        let id = self.uuid("acl id")?;
        let resource_type = self.acl_code("acl resource type", Res::from_code, |t| {
            !matches!(t, Res::Unknown | Res::Any)
        })?;
        let resource_name = self.string("acl resource name")?;
        let pattern_type = self.acl_code("acl pattern type", Pat::from_code, |p| {
            matches!(p, Pat::Literal | Pat::Prefixed)
        })?;
        let principal = self.string("acl principal")?;
        let host = self.string("acl host")?;
        let operation = self.acl_code("acl operation", Op::from_code, |o| {
            !matches!(o, Op::Unknown | Op::Any)
        })?;
        let permission_type = self.acl_code("acl permission type", Perm::from_code, |p| {
            matches!(p, Perm::Allow | Perm::Deny)
        })?;
        Ok(AccessControlEntryRecord {
            id,
            acl: AclBinding {
                resource_type,
                resource_name,
                pattern_type,
                principal,
                host,
                operation,
                permission_type,
            },
        })
    }
}

fn is_scram_record(record_type: u8) -> bool {
    matches!(
        record_type,
        USER_SCRAM_CREDENTIAL | REMOVE_USER_SCRAM_CREDENTIAL
    )
}

// SCRAM credentials: name, mechanism (Kafka's type id), salt, stored key, server key (each
// length-prefixed bytes), iterations.
impl Writer {
    fn user_scram_credential(&mut self, r: &UserScramCredentialRecord) {
        self.header(USER_SCRAM_CREDENTIAL);
        self.str(&r.name);
        self.0.push(r.mechanism.type_id() as u8);
        for bytes in [
            &r.credential.salt,
            &r.credential.stored_key,
            &r.credential.server_key,
        ] {
            self.len(bytes.len());
            self.0.extend_from_slice(bytes);
        }
        self.i32(r.credential.iterations);
    }
}

impl Reader<'_> {
    fn byte_string(&mut self, field: &'static str) -> Result<Vec<u8>, DecodeError> {
        let n = self.len(field)?;
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head.to_vec())
    }

    fn scram_mechanism(&mut self) -> Result<crate::scram::ScramMechanism, DecodeError> {
        let id = self.u8("SCRAM mechanism")? as i8;
        crate::scram::ScramMechanism::from_type_id(id).ok_or_else(|| DecodeError::Invalid {
            field: "SCRAM mechanism",
            detail: format!("unknown mechanism type {id}"),
        })
    }

    fn user_scram_credential(&mut self) -> Result<UserScramCredentialRecord, DecodeError> {
        let name = self.string("user name")?;
        let mechanism = self.scram_mechanism()?;
        Ok(UserScramCredentialRecord {
            name,
            mechanism,
            credential: crate::scram::ScramCredential {
                salt: self.byte_string("salt")?,
                stored_key: self.byte_string("stored key")?,
                server_key: self.byte_string("server key")?,
                iterations: self.i32("iterations")?,
            },
        })
    }
}

// Client quotas: entity parts (count, then each: type 0 user / 1 client-id, optional name,
// absent for the default), key, value (f64, 8 bytes big-endian), remove.
impl Writer {
    fn client_quota(&mut self, r: &ClientQuotaRecord) {
        self.header(CLIENT_QUOTA);
        let parts = [(0u8, &r.entity.user), (1u8, &r.entity.client_id)];
        self.len(parts.iter().filter(|(_, n)| n.is_some()).count());
        for (code, name) in parts {
            if let Some(name) = name {
                self.0.push(code);
                self.opt_str(name.as_wire());
            }
        }
        self.str(&r.key);
        self.0.extend_from_slice(&r.value.0.to_be_bytes());
        self.bool(r.remove);
    }
}

impl Reader<'_> {
    fn client_quota(&mut self) -> Result<ClientQuotaRecord, DecodeError> {
        use crate::quota::{ClientQuotaEntity, EntityName, QuotaValue};
        let n = self.len("quota entity parts")?;
        let mut entity = ClientQuotaEntity {
            user: None,
            client_id: None,
        };
        for _ in 0..n {
            let code = self.u8("quota entity type")?;
            let name = EntityName::from_wire(self.opt_string("quota entity name")?.as_deref());
            let slot = match code {
                0 => &mut entity.user,
                1 => &mut entity.client_id,
                _ => {
                    return Err(DecodeError::Invalid {
                        field: "quota entity type",
                        detail: format!("unknown entity type {code}"),
                    })
                }
            };
            if slot.replace(name).is_some() {
                return Err(DecodeError::Invalid {
                    field: "quota entity type",
                    detail: format!("entity type {code} twice"),
                });
            }
        }
        let key = self.string("quota key")?;
        let value = f64::from_be_bytes(self.array::<8>("quota value")?);
        Ok(ClientQuotaRecord {
            entity,
            key,
            value: QuotaValue(value),
            remove: self.bool("quota remove")?,
        })
    }
}

// Feature levels: name, level (a varint that must fit Kafka's int16).
impl Reader<'_> {
    fn feature_level(&mut self) -> Result<FeatureLevelRecord, DecodeError> {
        let name = self.string("feature name")?;
        let level = self.i32("feature level")?;
        let level = i16::try_from(level).map_err(|_| DecodeError::Invalid {
            field: "feature level",
            detail: format!("{level} does not fit in 16 bits"),
        })?;
        Ok(FeatureLevelRecord { name, level })
    }
}
