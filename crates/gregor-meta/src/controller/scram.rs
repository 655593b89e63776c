//! AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554). An upsertion carries
//! salt, salted password and iterations; the controller derives the stored key and server key
//! and writes only those. Results are per user: one bad operation fails all of that user's
//! operations in the request, and other users' go ahead.

use super::state::{Controller, ControllerResult, MAX_RECORDS_PER_USER_OP};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;
use crate::scram::{RemoveUserScramCredentialRecord, UserScramCredentialRecord};
use gregor_sasl::{
    SaltedPassword, ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS,
};
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

/// Deletes one user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialDeletion {
    /// User name.
    pub name: String,
    /// Kafka's mechanism type id (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub mechanism: i8,
}

/// Sets one user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialUpsertion {
    /// User name.
    pub name: String,
    /// Kafka's mechanism type id.
    pub mechanism: i8,
    /// PBKDF2 iterations.
    pub iterations: i32,
    /// The salt.
    pub salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`, computed by the client. Redacted in `Debug`.
    pub salted_password: SaltedPassword,
}

/// One user's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUserResult {
    /// User name.
    pub user: String,
    /// Success, or why none of the user's operations applied.
    pub result: Result<(), ApiError>,
}

/// One described credential: mechanism and iterations, never keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramCredentialInfo {
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// PBKDF2 iterations.
    pub iterations: i32,
}

/// One user's DescribeUserScramCredentials result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedScramUser {
    /// User name.
    pub user: String,
    /// The user's credentials, or why there are none to show.
    pub result: Result<Vec<ScramCredentialInfo>, ApiError>,
}

fn unacceptable(message: impl Into<String>) -> ApiError {
    ApiError::new(ResponseError::UnacceptableCredential, message)
}

fn mechanism(id: i8) -> Result<ScramMechanism, ApiError> {
    ScramMechanism::from_type_id(id).ok_or_else(|| {
        ApiError::new(
            ResponseError::UnsupportedSaslMechanism,
            format!("Unknown SCRAM mechanism type {id}"),
        )
    })
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(unacceptable("Username must not be empty"));
    }
    Ok(())
}

fn deletion_record(
    image: &MetadataImage,
    d: &ScramCredentialDeletion,
) -> Result<MetadataRecord, ApiError> {
    check_name(&d.name)?;
    let mechanism = mechanism(d.mechanism)?;
    if image.scram_credentials().get(&d.name, mechanism).is_none() {
        return Err(ApiError::new(
            ResponseError::ResourceNotFound,
            "Attempt to delete a user credential that does not exist",
        ));
    }
    Ok(MetadataRecord::RemoveUserScramCredential(
        RemoveUserScramCredentialRecord {
            name: d.name.clone(),
            mechanism,
        },
    ))
}

fn upsertion_record(u: &ScramCredentialUpsertion) -> Result<MetadataRecord, ApiError> {
    check_name(&u.name)?;
    let mechanism = mechanism(u.mechanism)?;
    if u.iterations < MIN_ITERATIONS {
        return Err(unacceptable(format!(
            "Too few iterations: {} is below the minimum of {MIN_ITERATIONS}",
            u.iterations
        )));
    }
    if u.iterations > MAX_ITERATIONS {
        return Err(unacceptable(format!(
            "Too many iterations: {} is above the maximum of {MAX_ITERATIONS}",
            u.iterations
        )));
    }
    let credential =
        ScramCredential::from_salted_password(mechanism, &u.salt, &u.salted_password, u.iterations)
            .map_err(|e| unacceptable(e.to_string()))?;
    Ok(MetadataRecord::UserScramCredential(
        UserScramCredentialRecord {
            name: u.name.clone(),
            mechanism,
            credential,
        },
    ))
}

/// Users whose (user, mechanism) pair the request names more than once.
fn duplicated_users(
    deletions: &[ScramCredentialDeletion],
    upsertions: &[ScramCredentialUpsertion],
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut dups = BTreeSet::new();
    let pairs = deletions
        .iter()
        .map(|d| (&d.name, d.mechanism))
        .chain(upsertions.iter().map(|u| (&u.name, u.mechanism)));
    for (name, m) in pairs {
        if !seen.insert((name.clone(), m)) {
            dups.insert(name.clone());
        }
    }
    dups
}

impl Controller {
    /// AlterUserScramCredentials: one result per user named, in order of first mention
    /// (deletions first).
    pub fn alter_user_scram_credentials(
        &self,
        deletions: &[ScramCredentialDeletion],
        upsertions: &[ScramCredentialUpsertion],
    ) -> ControllerResult<Vec<ScramUserResult>> {
        let dups = duplicated_users(deletions, upsertions);
        let mut order: Vec<String> = Vec::new();
        let mut per_user: BTreeMap<String, Result<Vec<MetadataRecord>, ApiError>> = BTreeMap::new();
        let ops = deletions
            .iter()
            .map(|d| (&d.name, deletion_record(&self.image, d)))
            .chain(upsertions.iter().map(|u| (&u.name, upsertion_record(u))));
        for (name, outcome) in ops {
            let entry = per_user.entry(name.clone()).or_insert_with(|| {
                order.push(name.clone());
                Ok(Vec::new())
            });
            match (entry.as_mut(), outcome) {
                (Ok(records), Ok(r)) => records.push(r),
                (Ok(_), Err(e)) => *entry = Err(e),
                (Err(_), _) => {}
            }
        }
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(order.len());
        for user in order {
            let result = match per_user.remove(&user) {
                _ if dups.contains(&user) => Err(ApiError::new(
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                )),
                Some(Ok(r)) => {
                    records.extend(r);
                    Ok(())
                }
                Some(Err(e)) => Err(e),
                None => Ok(()),
            };
            results.push(ScramUserResult { user, result });
        }
        if records.len() > MAX_RECORDS_PER_USER_OP {
            let e = ApiError::invalid_request(format!(
                "Cannot alter more than {MAX_RECORDS_PER_USER_OP} credentials in a single request"
            ));
            for r in &mut results {
                r.result = Err(e.clone());
            }
            return ControllerResult::new(Vec::new(), results);
        }
        let failed = results.iter().filter(|r| r.result.is_err()).count();
        tracing::info!(
            users = results.len(),
            failed,
            records = records.len(),
            "AlterUserScramCredentials"
        );
        ControllerResult::new(records, results)
    }
}

/// DescribeUserScramCredentials over an image: every user with credentials when `users` is
/// `None` or empty; otherwise each named user, RESOURCE_NOT_FOUND for one without credentials
/// and DUPLICATE_RESOURCE for one named twice.
pub fn describe_user_scram_credentials(
    image: &MetadataImage,
    users: Option<&[String]>,
) -> Vec<DescribedScramUser> {
    let scram = image.scram_credentials();
    let describe = |creds: &BTreeMap<ScramMechanism, ScramCredential>| {
        creds
            .iter()
            .map(|(m, c)| ScramCredentialInfo {
                mechanism: *m,
                iterations: c.iterations,
            })
            .collect::<Vec<_>>()
    };
    let Some(names) = users.filter(|u| !u.is_empty()) else {
        return scram
            .users()
            .iter()
            .map(|(user, creds)| DescribedScramUser {
                user: user.clone(),
                result: Ok(describe(creds)),
            })
            .collect();
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for n in names {
        *counts.entry(n.as_str()).or_default() += 1;
    }
    let mut out = Vec::new();
    for (name, count) in counts {
        let result = if count > 1 {
            Err(ApiError::new(
                ResponseError::DuplicateResource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            ))
        } else {
            scram.user(name).map(describe).ok_or_else(|| {
                ApiError::new(
                    ResponseError::ResourceNotFound,
                    "Attempt to describe a user credential that does not exist",
                )
            })
        };
        out.push(DescribedScramUser {
            user: name.to_string(),
            result,
        });
    }
    out
}
