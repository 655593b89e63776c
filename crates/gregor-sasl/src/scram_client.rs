//! The client side of a SCRAM exchange (gregor-client, tools and tests): client-first out,
//! server-first in and client-final out, server-final in and the server verified.

use crate::error::SaslError;
use crate::scram_credential::{client_key, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use crate::scram_message::{ClientFinal, ClientFirst, ServerFinal, ServerFirst};
use crate::secret::{ct_eq, Password};

enum State {
    Initial,
    AwaitingServerFirst,
    AwaitingServerFinal { server_signature: Vec<u8> },
    Complete,
    Failed,
}

/// One client-side SCRAM exchange.
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Password,
    first: ClientFirst,
    state: State,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.first.username)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// An exchange for `username` with `client_nonce` (printable, no `,`).
    pub fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: Password,
        client_nonce: &str,
    ) -> Self {
        Self::with_extensions(mechanism, username, password, client_nonce, &[])
    }

    /// [`ScramClient::new`] with extensions in the client-first-message.
    pub fn with_extensions(
        mechanism: ScramMechanism,
        username: &str,
        password: Password,
        client_nonce: &str,
        extensions: &[(String, String)],
    ) -> Self {
        ScramClient {
            mechanism,
            password,
            first: ClientFirst::new(username, client_nonce, extensions),
            state: State::Initial,
        }
    }

    /// An exchange with a random client nonce.
    pub fn with_random_nonce(
        mechanism: ScramMechanism,
        username: &str,
        password: Password,
    ) -> Result<Self, SaslError> {
        let nonce = crate::random::random_nonce()?;
        Ok(Self::new(mechanism, username, password, &nonce))
    }

    /// The client-first-message.
    pub fn client_first(&mut self) -> Result<Vec<u8>, SaslError> {
        if !matches!(self.state, State::Initial) {
            return Err(SaslError::UnexpectedMessage("client-first"));
        }
        self.state = State::AwaitingServerFirst;
        Ok(self.first.to_bytes())
    }

    /// Handles the server-first-message; returns the client-final-message.
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError> {
        if !matches!(
            std::mem::replace(&mut self.state, State::Failed),
            State::AwaitingServerFirst
        ) {
            return Err(SaslError::UnexpectedMessage("server-first"));
        }
        let sf = ServerFirst::parse(message)?;
        if !sf.nonce.starts_with(&self.first.nonce) || sf.nonce.len() == self.first.nonce.len() {
            return Err(SaslError::InvalidNonce);
        }
        // The upper bound keeps a hostile server from making the client burn CPU.
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&sf.iterations) {
            return Err(SaslError::InvalidIterations {
                mechanism: self.mechanism.name(),
                iterations: sf.iterations,
                min: MIN_ITERATIONS,
                max: MAX_ITERATIONS,
            });
        }
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &sf.salt, sf.iterations);
        let without_proof = ClientFinal::without_proof(&self.first.gs2_header, &sf.nonce);
        let auth_message = format!("{},{},{without_proof}", self.first.bare, sf.raw);
        let ck = client_key(m, &salted);
        let signature = m.hmac(&m.hash(&ck), auth_message.as_bytes());
        let proof: Vec<u8> = ck.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(salted.expose(), b"Server Key");
        self.state = State::AwaitingServerFinal {
            server_signature: m.hmac(&server_key, auth_message.as_bytes()),
        };
        Ok(ClientFinal::to_bytes(&without_proof, &proof))
    }

    /// Handles the server-final-message: succeeds when the server proved it holds the
    /// credential.
    pub fn server_final(&mut self, message: &[u8]) -> Result<(), SaslError> {
        let State::AwaitingServerFinal { server_signature } =
            std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(SaslError::UnexpectedMessage("server-final"));
        };
        match ServerFinal::parse(message)? {
            ServerFinal::Error(e) => Err(SaslError::ServerError(e)),
            ServerFinal::Verifier(v) if ct_eq(&v, &server_signature) => {
                self.state = State::Complete;
                Ok(())
            }
            ServerFinal::Verifier(_) => Err(SaslError::InvalidServerSignature),
        }
    }

    /// Whether the server has been verified.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }
}
