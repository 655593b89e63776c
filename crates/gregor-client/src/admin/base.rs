//! The [`Admin`] handle and what every area shares: the per-entity result of a batch call and
//! the loop that retries the entities whose errors are retriable.

use std::future::Future;

use crate::client::{Client, ClientConfig};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::retry::{action_for_code, RetryAction};

/// Per-entity outcome of a batch call (one topic, partition, group or config resource).
pub type EntityResult<K, T> = Vec<(K, std::result::Result<T, KafkaError>)>;

/// Admin operations over a [`Client`].
#[derive(Debug, Clone)]
pub struct Admin {
    pub(super) client: Client,
}

impl Admin {
    pub async fn connect(config: ClientConfig) -> Result<Admin> {
        Ok(Admin {
            client: Client::connect(config).await?,
        })
    }

    pub fn new(client: Client) -> Admin {
        Admin { client }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// The result a batch response failed to mention for an entity.
pub(crate) fn missing_result(what: &str) -> KafkaError {
    KafkaError::new(
        KafkaCode::UNKNOWN_SERVER_ERROR,
        Some(format!("the response has no result for {what}")),
    )
}

/// Runs a batch call in which each entity succeeds or fails on its own. Entities whose error
/// is retriable are sent again (after the metadata refresh or coordinator lookup the error
/// asks for) until the operation deadline; final errors and successes are kept. A failure of
/// the whole request (connection lost, timeout) retries the pending entities too.
pub(crate) async fn retry_entities<K, T, F, Fut>(
    client: &Client,
    what: &str,
    keys: Vec<K>,
    mut attempt: F,
) -> Result<EntityResult<K, T>>
where
    K: Clone + PartialEq,
    F: FnMut(Vec<K>) -> Fut,
    Fut: Future<Output = Result<EntityResult<K, T>>>,
{
    let mut state = client.retry_state(what);
    let mut done: EntityResult<K, T> = Vec::new();
    let mut pending = keys;
    while !pending.is_empty() {
        let error = match tokio::time::timeout_at(state.deadline(), attempt(pending.clone())).await
        {
            Err(_) => return Err(state.timed_out(None)),
            Ok(Err(e)) => e,
            Ok(Ok(results)) => {
                let mut retry = Vec::new();
                let mut first_retriable = None;
                let mut answered = Vec::with_capacity(pending.len());
                for (key, result) in results {
                    if !pending.contains(&key) || answered.contains(&key) {
                        continue;
                    }
                    answered.push(key.clone());
                    match result {
                        Err(e) if action_for_code(e.code) != RetryAction::Fail => {
                            retry.push(key);
                            first_retriable.get_or_insert(e);
                        }
                        other => done.push((key, other)),
                    }
                }
                for key in pending.iter().filter(|k| !answered.contains(k)) {
                    done.push((key.clone(), Err(missing_result(what))));
                }
                pending = retry;
                match first_retriable {
                    None => break,
                    Some(e) => Error::kafka(what, e),
                }
            }
        };
        client.prepare_retry(&mut state, error).await?;
    }
    Ok(done)
}
