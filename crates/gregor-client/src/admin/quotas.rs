//! Client quotas: Kafka's `Admin.alterClientQuotas` and `describeClientQuotas`
//! (AlterClientQuotas, DescribeClientQuotas). An entity is a list of `(entity type, name)`
//! with `None` for the type's default, e.g. `[("user", Some("alice")), ("client-id", None)]`.

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::base::Admin;
use crate::client::Target;
use crate::error::{Error, KafkaError, Result};

/// A quota entity: `(entity type, name or None for the default)`, e.g. `("user", Some("alice"))`.
pub type QuotaEntity = Vec<(String, Option<String>)>;

/// One change to one quota key: `Some(value)` sets, `None` removes.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    /// The entity.
    pub entity: QuotaEntity,
    /// `(key, Some(value))` to set, `(key, None)` to remove.
    pub ops: Vec<(String, Option<f64>)>,
}

/// A filter component: which names of one entity type match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaMatch {
    /// Exactly this name.
    Exact(String),
    /// The type's default entity.
    Default,
    /// Any name, the default included.
    Any,
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The AlterClientQuotas request.
pub fn alter_client_quotas_request(
    entries: &[QuotaAlteration],
    validate_only: bool,
) -> AlterClientQuotasRequest {
    let mut req = AlterClientQuotasRequest::default();
    req.validate_only = validate_only;
    req.entries = entries
        .iter()
        .map(|a| {
            let mut e = EntryData::default();
            e.entity = a
                .entity
                .iter()
                .map(|(t, n)| {
                    let mut d = EntityData::default();
                    d.entity_type = str(t);
                    d.entity_name = n.as_deref().map(str);
                    d
                })
                .collect();
            e.ops = a
                .ops
                .iter()
                .map(|(k, v)| {
                    let mut o = OpData::default();
                    o.key = str(k);
                    o.value = v.unwrap_or(0.0);
                    o.remove = v.is_none();
                    o
                })
                .collect();
            e
        })
        .collect();
    req
}

/// An entity as the two responses carry it (each with its own part type).
fn entity_of<P>(parts: &[P], fields: impl Fn(&P) -> (&StrBytes, Option<&StrBytes>)) -> QuotaEntity {
    parts
        .iter()
        .map(|p| {
            let (entity_type, name) = fields(p);
            (entity_type.to_string(), name.map(|n| n.to_string()))
        })
        .collect()
}

/// Each entry's outcome, in request order.
pub fn parse_alter_client_quotas(
    resp: AlterClientQuotasResponse,
) -> Vec<(QuotaEntity, std::result::Result<(), KafkaError>)> {
    resp.entries
        .into_iter()
        .map(|e| {
            let entity = entity_of(&e.entity, |p| (&p.entity_type, p.entity_name.as_ref()));
            (
                entity,
                KafkaError::check(e.error_code, e.error_message.as_deref()),
            )
        })
        .collect()
}

/// The DescribeClientQuotas request.
pub fn describe_client_quotas_request(
    components: &[(String, QuotaMatch)],
    strict: bool,
) -> DescribeClientQuotasRequest {
    let mut req = DescribeClientQuotasRequest::default();
    req.strict = strict;
    req.components = components
        .iter()
        .map(|(t, m)| {
            let mut c = ComponentData::default();
            c.entity_type = str(t);
            (c.match_type, c._match) = match m {
                QuotaMatch::Exact(n) => (0, Some(str(n))),
                QuotaMatch::Default => (1, None),
                QuotaMatch::Any => (2, None),
            };
            c
        })
        .collect();
    req
}

/// A described entity and its `(key, value)` quotas.
pub type DescribedQuotas = (QuotaEntity, Vec<(String, f64)>);

/// The described entities and their quotas.
pub fn parse_describe_client_quotas(
    resp: DescribeClientQuotasResponse,
) -> std::result::Result<Vec<DescribedQuotas>, KafkaError> {
    KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
    Ok(resp
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let entity = entity_of(&e.entity, |p| (&p.entity_type, p.entity_name.as_ref()));
            let values = e
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            (entity, values)
        })
        .collect())
}

impl Admin {
    /// AlterClientQuotas: each entry's outcome (sent to any broker, which forwards it to the
    /// active controller).
    pub async fn alter_client_quotas(
        &self,
        entries: &[QuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<(QuotaEntity, std::result::Result<(), KafkaError>)>> {
        let (_, resp) = self
            .client
            .send::<AlterClientQuotasRequest, _>(&Target::Any, |_| {
                Ok(alter_client_quotas_request(entries, validate_only))
            })
            .await?;
        Ok(parse_alter_client_quotas(resp))
    }

    /// DescribeClientQuotas: the entities matching every component (and, with `strict`, no
    /// other entity type), with their quotas.
    pub async fn describe_client_quotas(
        &self,
        components: &[(String, QuotaMatch)],
        strict: bool,
    ) -> Result<Vec<DescribedQuotas>> {
        self.client
            .retry("DescribeClientQuotas", || async {
                let (_, resp) = self
                    .client
                    .send::<DescribeClientQuotasRequest, _>(&Target::Any, |_| {
                        Ok(describe_client_quotas_request(components, strict))
                    })
                    .await?;
                parse_describe_client_quotas(resp)
                    .map_err(|e| Error::kafka("DescribeClientQuotas", e))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_client_quotas_response::{
        EntityData as RespEntity, EntryData as RespEntry, ValueData,
    };

    #[test]
    fn requests_carry_entities_defaults_and_removals() {
        let req = alter_client_quotas_request(
            &[QuotaAlteration {
                entity: vec![
                    ("user".into(), Some("alice".into())),
                    ("client-id".into(), None),
                ],
                ops: vec![
                    ("producer_byte_rate".into(), Some(1024.0)),
                    ("consumer_byte_rate".into(), None),
                ],
            }],
            true,
        );
        assert!(req.validate_only);
        let e = &req.entries[0];
        assert_eq!(e.entity[1].entity_name, None);
        assert!(!e.ops[0].remove && e.ops[0].value == 1024.0);
        assert!(e.ops[1].remove);
        let d = describe_client_quotas_request(
            &[
                ("user".into(), QuotaMatch::Exact("a".into())),
                ("client-id".into(), QuotaMatch::Any),
            ],
            true,
        );
        assert_eq!(
            (d.components[0].match_type, d.components[1].match_type),
            (0, 2)
        );
        assert_eq!(d.components[1]._match, None);
    }

    #[test]
    fn describe_responses_parse_and_errors_surface() {
        let mut entity = RespEntity::default();
        entity.entity_type = str("user");
        entity.entity_name = None;
        let mut value = ValueData::default();
        value.key = str("producer_byte_rate");
        value.value = 10.0;
        let mut entry = RespEntry::default();
        entry.entity = vec![entity];
        entry.values = vec![value];
        let mut resp = DescribeClientQuotasResponse::default();
        resp.entries = Some(vec![entry]);
        let parsed = parse_describe_client_quotas(resp).unwrap();
        assert_eq!(parsed[0].0, vec![("user".to_string(), None)]);
        assert_eq!(parsed[0].1, vec![("producer_byte_rate".to_string(), 10.0)]);
        let mut bad = DescribeClientQuotasResponse::default();
        bad.error_code = 42;
        assert!(parse_describe_client_quotas(bad).is_err());
    }
}
