//! AlterClientQuotas (validated here, turned into `ClientQuotaRecord`s) and
//! DescribeClientQuotas (filters over an image), as Kafka's KRaft controller and brokers answer
//! them. Entity types `user` and `client-id`; `ip` entities (connection-rate quotas) are
//! refused because Gregor does not enforce them.

use super::state::{Controller, ControllerResult, MAX_RECORDS_PER_USER_OP};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::quota::{
    ClientQuotaEntity, ClientQuotaRecord, EntityName, QuotaValue, CLIENT_ID, CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE, IP, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER,
};
use crate::record::MetadataRecord;
use std::collections::BTreeSet;

/// One operation on one quota key: set `Some(value)`, remove `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaOp {
    /// The key.
    pub key: String,
    /// The new value, or `None` to remove the key.
    pub value: Option<f64>,
}

/// One AlterClientQuotas entry: an entity as sent, `(entity_type, name or None for default)`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    /// The entity's parts.
    pub entity: Vec<(String, Option<String>)>,
    /// The operations.
    pub ops: Vec<QuotaOp>,
}

/// A DescribeClientQuotas filter component (Kafka's match types 0 exact, 1 default, 2 any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaFilterComponent {
    /// The entity type.
    pub entity_type: String,
    /// 0 exact name, 1 the default, 2 any name.
    pub match_type: i8,
    /// The name for an exact match.
    pub name: Option<String>,
}

/// A described entity and its quotas.
pub type DescribedQuotaEntity = (ClientQuotaEntity, Vec<(String, f64)>);

/// Whether a quota key is a whole-number byte rate (Kafka's LONG keys).
fn is_long_key(key: &str) -> bool {
    key == PRODUCER_BYTE_RATE || key == CONSUMER_BYTE_RATE
}

/// The typed entity of a request entry, with Kafka's rules.
pub fn parse_entity(parts: &[(String, Option<String>)]) -> Result<ClientQuotaEntity, ApiError> {
    let mut entity = ClientQuotaEntity {
        user: None,
        client_id: None,
    };
    if parts.is_empty() {
        return Err(ApiError::invalid_request(
            "Invalid empty client quota entity",
        ));
    }
    for (entity_type, name) in parts {
        if name.as_deref() == Some("") {
            return Err(ApiError::invalid_request(format!(
                "Empty {entity_type} name; use the default entity (a null name) instead"
            )));
        }
        let slot =
            match entity_type.as_str() {
                USER => &mut entity.user,
                CLIENT_ID => &mut entity.client_id,
                IP => return Err(ApiError::invalid_request(
                    "ip quota entities (connection_creation_rate) are not supported by Gregor: \
                     it does not enforce connection-rate quotas",
                )),
                other => {
                    return Err(ApiError::invalid_request(format!(
                        "Unhandled client quota entity type: {other}"
                    )))
                }
            };
        if slot
            .replace(EntityName::from_wire(name.as_deref()))
            .is_some()
        {
            return Err(ApiError::invalid_request(format!(
                "Invalid quota entity: entity type {entity_type} appears more than once"
            )));
        }
    }
    Ok(entity)
}

fn validate_op(op: &QuotaOp) -> Result<(), ApiError> {
    let known = [
        PRODUCER_BYTE_RATE,
        CONSUMER_BYTE_RATE,
        REQUEST_PERCENTAGE,
        CONTROLLER_MUTATION_RATE,
    ];
    if !known.contains(&op.key.as_str()) {
        return Err(ApiError::invalid_request(format!(
            "Invalid configuration key {}",
            op.key
        )));
    }
    let Some(v) = op.value else { return Ok(()) };
    if !v.is_finite() || v <= 0.0 {
        return Err(ApiError::invalid_request(format!(
            "Invalid value {v} for configuration key {}: it must be a positive number",
            op.key
        )));
    }
    if is_long_key(&op.key) && (v.fract() != 0.0 || v > i64::MAX as f64) {
        return Err(ApiError::invalid_request(format!(
            "Configuration {} must be a Long value",
            op.key
        )));
    }
    Ok(())
}

/// The records of one entry, or why none apply.
fn entry_records(
    image: &MetadataImage,
    a: &QuotaAlteration,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let entity = parse_entity(&a.entity)?;
    let mut keys = BTreeSet::new();
    for op in &a.ops {
        validate_op(op)?;
        if !keys.insert(op.key.as_str()) {
            return Err(ApiError::invalid_request(format!(
                "Duplicate quota key {} for one entity",
                op.key
            )));
        }
    }
    let quotas = image.client_quotas();
    Ok(a.ops
        .iter()
        // Removing a key the entity does not have changes nothing, as in Kafka.
        .filter(|op| op.value.is_some() || quotas.get(&entity, &op.key).is_some())
        .map(|op| {
            MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: entity.clone(),
                key: op.key.clone(),
                value: QuotaValue(op.value.unwrap_or(0.0)),
                remove: op.value.is_none(),
            })
        })
        .collect())
}

impl Controller {
    /// AlterClientQuotas: one result per entry, in order; each entry applies whole or not at
    /// all. With `validate_only` nothing is written.
    pub fn alter_client_quotas(
        &self,
        entries: &[QuotaAlteration],
        validate_only: bool,
    ) -> ControllerResult<Vec<Result<(), ApiError>>> {
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(entries.len());
        for a in entries {
            match entry_records(&self.image, a) {
                Ok(r) => {
                    records.extend(r);
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if records.len() > MAX_RECORDS_PER_USER_OP {
            let e = ApiError::invalid_request(format!(
                "Cannot alter more than {MAX_RECORDS_PER_USER_OP} quotas in a single request"
            ));
            return ControllerResult::new(Vec::new(), vec![Err(e); entries.len()]);
        }
        if validate_only {
            records.clear();
        }
        let failed = results.iter().filter(|r| r.is_err()).count();
        tracing::info!(
            entries = entries.len(),
            failed,
            records = records.len(),
            validate_only,
            "AlterClientQuotas"
        );
        ControllerResult::new(records, results)
    }
}

/// Whether one entity part matches a filter component.
fn part_matches(part: Option<&EntityName>, c: &QuotaFilterComponent) -> bool {
    match (part, c.match_type) {
        (None, _) => false,
        (Some(n), 0) => n.as_wire() == c.name.as_deref(),
        (Some(n), 1) => *n == EntityName::Default,
        (Some(_), _) => true,
    }
}

fn validate_filter(components: &[QuotaFilterComponent]) -> Result<(), ApiError> {
    let mut seen = BTreeSet::new();
    for c in components {
        if !seen.insert(c.entity_type.as_str()) {
            return Err(ApiError::invalid_request(format!(
                "Entity type {} cannot appear more than once in the filter",
                c.entity_type
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&c.entity_type.as_str()) {
            return Err(ApiError::invalid_request(format!(
                "Custom entity type {} not supported",
                c.entity_type
            )));
        }
        match (c.match_type, &c.name) {
            (0, Some(_)) | (1 | 2, None) => {}
            (0, None) => return Err(ApiError::invalid_request("An exact match needs a name")),
            (1 | 2, Some(_)) => {
                return Err(ApiError::invalid_request(
                    "A default or any match takes no name",
                ))
            }
            (t, _) => return Err(ApiError::invalid_request(format!("Unknown match type {t}"))),
        }
    }
    if seen.contains(IP) && seen.len() > 1 {
        return Err(ApiError::invalid_request(
            "The ip entity type cannot be combined with user or client-id in a filter",
        ));
    }
    Ok(())
}

/// DescribeClientQuotas over an image: every entity that has each filtered part (and, with
/// `strict`, no other part), with its quotas.
pub fn describe_client_quotas(
    image: &MetadataImage,
    components: &[QuotaFilterComponent],
    strict: bool,
) -> Result<Vec<DescribedQuotaEntity>, ApiError> {
    validate_filter(components)?;
    let part = |e: &ClientQuotaEntity, t: &str| match t {
        USER => e.user.clone(),
        CLIENT_ID => e.client_id.clone(),
        _ => None,
    };
    let matches = |e: &ClientQuotaEntity| {
        let all = components
            .iter()
            .all(|c| part_matches(part(e, &c.entity_type).as_ref(), c));
        all && (!strict || e.parts().len() == components.len())
    };
    Ok(image
        .client_quotas()
        .entities()
        .iter()
        .filter(|(e, _)| matches(e))
        .map(|(e, q)| (e.clone(), q.iter().map(|(k, v)| (k.clone(), v.0)).collect()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StaticBrokerConfig;
    use kafka_protocol::ResponseError;

    fn entry(parts: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: parts
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
            ops: ops
                .iter()
                .map(|(k, v)| QuotaOp {
                    key: k.to_string(),
                    value: *v,
                })
                .collect(),
        }
    }

    fn controller() -> Controller {
        Controller::new(StaticBrokerConfig::new(), 1)
    }

    fn commit(c: &mut Controller, entries: &[QuotaAlteration]) -> Vec<Result<(), ApiError>> {
        let res = c.alter_client_quotas(entries, false);
        c.replay_all(&res.records).unwrap();
        res.response
    }

    fn code(r: &Result<(), ApiError>) -> Option<ResponseError> {
        r.as_ref().err().map(|e| e.code)
    }

    #[test]
    fn validates_entities_keys_and_values() {
        let c = controller();
        let bad = [
            entry(&[], &[("producer_byte_rate", Some(1.0))]),
            entry(
                &[("ip", Some("1.2.3.4"))],
                &[("connection_creation_rate", Some(1.0))],
            ),
            entry(
                &[("group", Some("g"))],
                &[("producer_byte_rate", Some(1.0))],
            ),
            entry(
                &[("user", Some("a")), ("user", Some("b"))],
                &[("producer_byte_rate", Some(1.0))],
            ),
            entry(&[("user", Some("a"))], &[("unknown_key", Some(1.0))]),
            entry(&[("user", Some("a"))], &[("producer_byte_rate", Some(1.5))]),
            entry(
                &[("user", Some("a"))],
                &[("producer_byte_rate", Some(-1.0))],
            ),
            entry(
                &[("user", Some("a"))],
                &[
                    ("producer_byte_rate", Some(1.0)),
                    ("producer_byte_rate", None),
                ],
            ),
        ];
        let res = c.alter_client_quotas(&bad, false);
        assert!(res.records.is_empty());
        for r in &res.response {
            assert_eq!(code(r), Some(ResponseError::InvalidRequest), "{r:?}");
        }
        let ok = entry(
            &[("user", Some("a"))],
            &[("request_percentage", Some(12.5))],
        );
        let res = c.alter_client_quotas(std::slice::from_ref(&ok), true);
        assert!(res.records.is_empty(), "validate_only writes nothing");
        assert_eq!(res.response, vec![Ok(())]);
    }

    #[test]
    fn set_describe_and_remove() {
        let mut c = controller();
        let results = commit(
            &mut c,
            &[
                entry(
                    &[("user", Some("alice"))],
                    &[("producer_byte_rate", Some(1024.0))],
                ),
                entry(
                    &[("user", Some("alice")), ("client-id", Some("app"))],
                    &[("consumer_byte_rate", Some(2048.0))],
                ),
                entry(&[("user", None)], &[("producer_byte_rate", Some(100.0))]),
                entry(
                    &[("client-id", None)],
                    &[("request_percentage", Some(50.0))],
                ),
            ],
        );
        assert!(results.iter().all(Result::is_ok));
        let image = c.image().clone();
        let user_any = QuotaFilterComponent {
            entity_type: "user".into(),
            match_type: 2,
            name: None,
        };
        let strict = describe_client_quotas(&image, std::slice::from_ref(&user_any), true).unwrap();
        assert_eq!(strict.len(), 2, "alice and the default user: {strict:?}");
        let loose = describe_client_quotas(&image, &[user_any], false).unwrap();
        assert_eq!(loose.len(), 3);
        let exact = QuotaFilterComponent {
            entity_type: "user".into(),
            match_type: 0,
            name: Some("alice".into()),
        };
        let alice = describe_client_quotas(&image, &[exact], true).unwrap();
        assert_eq!(alice[0].1, vec![("producer_byte_rate".to_string(), 1024.0)]);
        let default_client = QuotaFilterComponent {
            entity_type: "client-id".into(),
            match_type: 1,
            name: None,
        };
        assert_eq!(
            describe_client_quotas(&image, &[default_client], true)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(describe_client_quotas(&image, &[], false).unwrap().len(), 4);

        commit(
            &mut c,
            &[entry(
                &[("user", Some("alice"))],
                &[("producer_byte_rate", None)],
            )],
        );
        assert_eq!(c.image().client_quotas().entities().len(), 3);
        // Removing what is not there writes nothing and succeeds.
        let res = c.alter_client_quotas(
            &[entry(
                &[("user", Some("bob"))],
                &[("producer_byte_rate", None)],
            )],
            false,
        );
        assert!(res.records.is_empty());
        assert_eq!(res.response, vec![Ok(())]);
    }

    #[test]
    fn bad_filters_are_invalid_requests() {
        let image = MetadataImage::new();
        let c = |t: &str, m: i8, n: Option<&str>| QuotaFilterComponent {
            entity_type: t.into(),
            match_type: m,
            name: n.map(str::to_string),
        };
        for f in [
            vec![c("user", 2, None), c("user", 1, None)],
            vec![c("user", 0, None)],
            vec![c("user", 7, None)],
            vec![c("topic", 2, None)],
            vec![c("ip", 2, None), c("user", 2, None)],
        ] {
            let e = describe_client_quotas(&image, &f, false).unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidRequest, "{f:?}");
        }
    }

    #[test]
    fn quota_records_survive_the_codec_and_a_snapshot() {
        let mut c = controller();
        commit(
            &mut c,
            &[
                entry(
                    &[("user", None), ("client-id", Some("x"))],
                    &[("producer_byte_rate", Some(5.0))],
                ),
                entry(&[("client-id", None)], &[("request_percentage", Some(0.5))]),
            ],
        );
        let snapshot = c.image().to_records();
        let decoded: Vec<MetadataRecord> = snapshot
            .iter()
            .map(|r| MetadataRecord::decode(&r.encode()).unwrap())
            .collect();
        assert_eq!(decoded, snapshot);
        let rebuilt = MetadataImage::from_records(&decoded).unwrap();
        assert_eq!(rebuilt.client_quotas(), c.image().client_quotas());
        let d = crate::delta::MetadataDelta::between(&MetadataImage::new(), &rebuilt);
        assert_eq!(d.changed_client_quotas.len(), 2);
    }
}
