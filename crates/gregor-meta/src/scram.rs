//! SCRAM credentials as metadata: Kafka's `UserScramCredentialRecord` and
//! `RemoveUserScramCredentialRecord`, and the image's table of credentials by user and
//! mechanism. Only derived keys are stored (never a password or a salted password), and no
//! `Debug` here shows a key.

use crate::error::ImageError;
pub use gregor_sasl::{ScramCredential, ScramMechanism};
use std::collections::BTreeMap;

/// `UserScramCredentialRecord`: a user's credential for one mechanism was set.
#[derive(Clone, PartialEq, Eq)]
pub struct UserScramCredentialRecord {
    /// The user name.
    pub name: String,
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// Salt, stored key, server key and iterations.
    pub credential: ScramCredential,
}

impl std::fmt::Debug for UserScramCredentialRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserScramCredentialRecord")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.credential.iterations)
            .finish_non_exhaustive()
    }
}

/// `RemoveUserScramCredentialRecord`: a user's credential for one mechanism was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveUserScramCredentialRecord {
    /// The user name.
    pub name: String,
    /// The mechanism.
    pub mechanism: ScramMechanism,
}

/// Every user's SCRAM credentials, by user name then mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScramCredentials {
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

impl ScramCredentials {
    /// One user's credential for one mechanism.
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users.get(user).and_then(|m| m.get(&mechanism))
    }

    /// One user's credentials (none: the user has no credential).
    pub fn user(&self, user: &str) -> Option<&BTreeMap<ScramMechanism, ScramCredential>> {
        self.users.get(user)
    }

    /// Users with at least one credential, by name.
    pub fn users(&self) -> &BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>> {
        &self.users
    }

    /// Whether no user has a credential.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub(crate) fn apply_upsert(&mut self, r: &UserScramCredentialRecord) -> Result<(), ImageError> {
        if r.name.is_empty() {
            return Err(ImageError::Invalid(
                "SCRAM credential with an empty user name".into(),
            ));
        }
        self.users
            .entry(r.name.clone())
            .or_default()
            .insert(r.mechanism, r.credential.clone());
        Ok(())
    }

    pub(crate) fn apply_remove(
        &mut self,
        r: &RemoveUserScramCredentialRecord,
    ) -> Result<(), ImageError> {
        let Some(m) = self.users.get_mut(&r.name) else {
            return Err(ImageError::Invalid(format!(
                "no SCRAM credential of user {:?} to remove",
                r.name
            )));
        };
        if m.remove(&r.mechanism).is_none() {
            return Err(ImageError::Invalid(format!(
                "no {} credential of user {:?} to remove",
                r.mechanism, r.name
            )));
        }
        if m.is_empty() {
            self.users.remove(&r.name);
        }
        Ok(())
    }

    /// The records that recreate these credentials (for a snapshot).
    pub(crate) fn to_records(&self) -> impl Iterator<Item = UserScramCredentialRecord> + '_ {
        self.users.iter().flat_map(|(name, m)| {
            m.iter().map(|(mechanism, c)| UserScramCredentialRecord {
                name: name.clone(),
                mechanism: *mechanism,
                credential: c.clone(),
            })
        })
    }
}
