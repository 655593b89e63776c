//! Client quotas as metadata: Kafka's `ClientQuotaRecord` and the image's quota configs per
//! entity. An entity is a user, a client id, or a user and a client id, each either named or
//! the default (Kafka's `<default>`, a null name on the wire). Values are doubles as on the
//! wire; byte rates are whole numbers (the controller checks).

use crate::error::ImageError;
use std::collections::BTreeMap;

/// `producer_byte_rate`: bytes per second a client may produce.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// `consumer_byte_rate`: bytes per second a client may fetch.
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// `request_percentage`: percentage of one request-handling thread's time.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// `controller_mutation_rate`: topic/partition mutations per second (KIP-599).
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";

/// One part of an entity: named, or the default for its type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    /// Kafka's `<default>` (a null name).
    Default,
    /// A specific user or client id.
    Named(String),
}

impl EntityName {
    /// From the wire: `None` is the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }

    /// To the wire: the default is `None`.
    pub fn as_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// A quota entity: at least one of user and client id. (Kafka's `ip` entities are connection
/// rate quotas, which Gregor does not enforce; the controller refuses them.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientQuotaEntity {
    /// The `user` part.
    pub user: Option<EntityName>,
    /// The `client-id` part.
    pub client_id: Option<EntityName>,
}

/// Kafka's entity type names.
pub const USER: &str = "user";
/// Kafka's entity type names.
pub const CLIENT_ID: &str = "client-id";
/// Kafka's entity type names.
pub const IP: &str = "ip";

impl ClientQuotaEntity {
    /// The entity's (type, name) pairs, user first.
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            out.push((USER, u.as_wire()));
        }
        if let Some(c) = &self.client_id {
            out.push((CLIENT_ID, c.as_wire()));
        }
        out
    }

    /// Kafka's path-like name of the entity, e.g. `user 'alice', client-id <default>`.
    pub fn describe(&self) -> String {
        let part = |t: &str, n: Option<&str>| match n {
            Some(n) => format!("{t} '{n}'"),
            None => format!("{t} <default>"),
        };
        self.parts()
            .into_iter()
            .map(|(t, n)| part(t, n))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A quota value: a double compared bit for bit (so records stay `Eq`).
#[derive(Debug, Clone, Copy)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// `ClientQuotaRecord`: one quota key of one entity was set, or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientQuotaRecord {
    /// The entity.
    pub entity: ClientQuotaEntity,
    /// The quota key (`producer_byte_rate`...).
    pub key: String,
    /// The value (ignored when `remove`).
    pub value: QuotaValue,
    /// Whether the key is removed.
    pub remove: bool,
}

/// Every entity's quota configs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientQuotas {
    entities: BTreeMap<ClientQuotaEntity, BTreeMap<String, QuotaValue>>,
}

impl ClientQuotas {
    /// Entities with at least one quota, and their quotas.
    pub fn entities(&self) -> &BTreeMap<ClientQuotaEntity, BTreeMap<String, QuotaValue>> {
        &self.entities
    }

    /// One quota of one entity.
    pub fn get(&self, entity: &ClientQuotaEntity, key: &str) -> Option<f64> {
        self.entities.get(entity)?.get(key).map(|v| v.0)
    }

    /// Whether no entity has a quota.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    pub(crate) fn apply(&mut self, r: &ClientQuotaRecord) -> Result<(), ImageError> {
        if r.entity.user.is_none() && r.entity.client_id.is_none() {
            return Err(ImageError::Invalid(
                "client quota with an empty entity".into(),
            ));
        }
        if r.remove {
            if let Some(m) = self.entities.get_mut(&r.entity) {
                m.remove(&r.key);
                if m.is_empty() {
                    self.entities.remove(&r.entity);
                }
            }
            return Ok(());
        }
        self.entities
            .entry(r.entity.clone())
            .or_default()
            .insert(r.key.clone(), r.value);
        Ok(())
    }

    /// The records that recreate these quotas (for a snapshot).
    pub(crate) fn to_records(&self) -> impl Iterator<Item = ClientQuotaRecord> + '_ {
        self.entities.iter().flat_map(|(entity, m)| {
            m.iter().map(|(key, value)| ClientQuotaRecord {
                entity: entity.clone(),
                key: key.clone(),
                value: *value,
                remove: false,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: &str) -> ClientQuotaEntity {
        ClientQuotaEntity {
            user: Some(EntityName::Named(n.into())),
            client_id: None,
        }
    }

    fn set(entity: ClientQuotaEntity, key: &str, v: f64) -> ClientQuotaRecord {
        ClientQuotaRecord {
            entity,
            key: key.into(),
            value: QuotaValue(v),
            remove: false,
        }
    }

    #[test]
    fn set_replace_and_remove() {
        let mut q = ClientQuotas::default();
        q.apply(&set(user("alice"), PRODUCER_BYTE_RATE, 1024.0))
            .unwrap();
        q.apply(&set(user("alice"), PRODUCER_BYTE_RATE, 2048.0))
            .unwrap();
        assert_eq!(q.get(&user("alice"), PRODUCER_BYTE_RATE), Some(2048.0));
        let mut rm = set(user("alice"), PRODUCER_BYTE_RATE, 0.0);
        rm.remove = true;
        q.apply(&rm).unwrap();
        assert!(q.is_empty(), "an entity without quotas is dropped");
        let empty = ClientQuotaEntity {
            user: None,
            client_id: None,
        };
        assert!(q.apply(&set(empty, PRODUCER_BYTE_RATE, 1.0)).is_err());
    }
}
