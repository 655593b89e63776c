//! AlterUserScramCredentials (a controller write, forwarded to the active controller like
//! CreateTopics) and DescribeUserScramCredentials (answered from this broker's image, as a
//! KRaft broker does): wire messages in and out of gregor-meta. Neither logs a salted password
//! or a key; the request types' own `Debug` shows them, so requests are never logged whole.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use gregor_meta::{ApiError, ScramCredentialDeletion, ScramCredentialUpsertion, ScramUserResult};

use super::s;
use crate::metadata::MetadataManager;

/// AlterUserScramCredentials on the active controller.
pub async fn alter_user_scram_credentials(
    metadata: &MetadataManager,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions: Vec<ScramCredentialDeletion> = r
        .deletions
        .iter()
        .map(|d| ScramCredentialDeletion {
            name: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions: Vec<ScramCredentialUpsertion> = r
        .upsertions
        .iter()
        .map(|u| ScramCredentialUpsertion {
            name: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: gregor_sasl::SaltedPassword::from_bytes(u.salted_password.to_vec()),
        })
        .collect();
    let results = match metadata
        .submit(|c| c.alter_user_scram_credentials(&deletions, &upsertions))
        .await
    {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "AlterUserScramCredentials failed");
            every_user_fails(&deletions, &upsertions, e.api_error())
        }
    };
    let mut resp = AlterUserScramCredentialsResponse::default();
    resp.results = results
        .into_iter()
        .map(|res| {
            let mut out = AlterUserScramCredentialsResult::default();
            out.user = s(res.user);
            if let Err(e) = res.result {
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message));
            }
            out
        })
        .collect();
    resp
}

/// One failure per user named, in order of first mention (the controller's order).
fn every_user_fails(
    deletions: &[ScramCredentialDeletion],
    upsertions: &[ScramCredentialUpsertion],
    e: ApiError,
) -> Vec<ScramUserResult> {
    let mut users: Vec<&String> = Vec::new();
    for name in deletions
        .iter()
        .map(|d| &d.name)
        .chain(upsertions.iter().map(|u| &u.name))
    {
        if !users.contains(&name) {
            users.push(name);
        }
    }
    users
        .into_iter()
        .map(|u| ScramUserResult {
            user: u.clone(),
            result: Err(e.clone()),
        })
        .collect()
}

/// DescribeUserScramCredentials from this broker's metadata image: mechanisms and iterations.
pub fn describe_user_scram_credentials(
    metadata: &MetadataManager,
    r: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let names: Option<Vec<String>> = r
        .users
        .as_ref()
        .map(|users| users.iter().map(|u| u.name.to_string()).collect());
    let image = metadata.image();
    let described = gregor_meta::describe_user_scram_credentials(&image, names.as_deref());
    let mut resp = DescribeUserScramCredentialsResponse::default();
    resp.results = described
        .into_iter()
        .map(|d| {
            let mut out = DescribeUserScramCredentialsResult::default();
            out.user = s(d.user);
            match d.result {
                Ok(infos) => {
                    out.credential_infos = infos
                        .into_iter()
                        .map(|i| {
                            let mut c = CredentialInfo::default();
                            c.mechanism = i.mechanism.type_id();
                            c.iterations = i.iterations;
                            c
                        })
                        .collect();
                }
                Err(e) => {
                    out.error_code = e.code.code();
                    out.error_message = Some(s(e.message));
                }
            }
            out
        })
        .collect();
    resp
}
