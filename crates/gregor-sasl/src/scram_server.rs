//! The server side of a SCRAM exchange: client-first-message in, server-first-message out;
//! client-final-message in, server-final-message out and the user authenticated. The caller
//! supplies the credential lookup (the metadata image) and the server nonce.

use crate::error::SaslError;
use crate::scram_credential::{ScramCredential, ScramMechanism, MIN_ITERATIONS};
use crate::scram_message::{ClientFinal, ClientFirst, ServerFinal, ServerFirst};
use crate::secret::ct_eq;

enum State {
    AwaitingClientFirst { server_nonce: String },
    AwaitingClientFinal(Box<Exchange>),
    Complete { username: String },
    Failed,
}

struct Exchange {
    client_first: ClientFirst,
    server_first: ServerFirst,
    credential: ScramCredential,
}

/// One server-side SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: State,
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::AwaitingClientFirst { .. } => "awaiting client-first",
            State::AwaitingClientFinal(_) => "awaiting client-final",
            State::Complete { .. } => "complete",
            State::Failed => "failed",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish()
    }
}

impl ScramServer {
    /// An exchange whose server nonce part is `server_nonce` (printable, no `,`).
    pub fn new(mechanism: ScramMechanism, server_nonce: String) -> Self {
        ScramServer {
            mechanism,
            state: State::AwaitingClientFirst { server_nonce },
        }
    }

    /// An exchange with a random server nonce.
    pub fn with_random_nonce(mechanism: ScramMechanism) -> Result<Self, SaslError> {
        Ok(Self::new(mechanism, crate::random::random_nonce()?))
    }

    /// The mechanism.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The authenticated user, once the exchange completed.
    pub fn authenticated_user(&self) -> Option<&str> {
        match &self.state {
            State::Complete { username } => Some(username),
            _ => None,
        }
    }

    /// Handles the client-first-message; `lookup` finds the user's credential for this
    /// mechanism. Returns the server-first-message. Any error ends the exchange.
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Vec<u8>, SaslError> {
        let State::AwaitingClientFirst { server_nonce } =
            std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(SaslError::UnexpectedMessage("client-first"));
        };
        let client_first = ClientFirst::parse(message)?;
        if let Some((k, _)) = client_first
            .extensions
            .iter()
            .find(|(k, v)| k == "tokenauth" && v.eq_ignore_ascii_case("true"))
        {
            // Delegation tokens are not implemented: refuse rather than treat a token as a
            // password.
            return Err(SaslError::UnsupportedExtension(k.clone()));
        }
        if let Some(authzid) = &client_first.authzid {
            if *authzid != client_first.username {
                return Err(SaslError::AuthorizationIdMismatch {
                    authzid: authzid.clone(),
                });
            }
        }
        let credential = lookup(&client_first.username).ok_or(SaslError::AuthenticationFailed)?;
        if credential.iterations < MIN_ITERATIONS {
            return Err(SaslError::AuthenticationFailed);
        }
        let nonce = format!("{}{server_nonce}", client_first.nonce);
        let server_first = ServerFirst::new(&nonce, &credential.salt, credential.iterations);
        let out = server_first.raw.clone().into_bytes();
        self.state = State::AwaitingClientFinal(Box::new(Exchange {
            client_first,
            server_first,
            credential,
        }));
        Ok(out)
    }

    /// Handles the client-final-message: checks the nonce, the channel binding and the proof.
    /// Returns the server-final-message; the user is then authenticated.
    pub fn client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError> {
        let State::AwaitingClientFinal(x) = std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(SaslError::UnexpectedMessage("client-final"));
        };
        let client_final = ClientFinal::parse(message)?;
        // RFC 5802 wants the same nonce back. librdkafka before 2.6.1 sends the client nonce
        // once more in front of it; Kafka (3.8.1+, CVE-2024-56128) accepts a nonce that ends
        // with the server's, and so does this, so those clients can log in.
        if !client_final.nonce.ends_with(&x.server_first.nonce) {
            return Err(SaslError::InvalidNonce);
        }
        if client_final.channel_binding != x.client_first.gs2_header.as_bytes() {
            return Err(SaslError::malformed(
                "client-final-message",
                "channel binding does not match the GS2 header",
            ));
        }
        let auth_message = format!(
            "{},{},{}",
            x.client_first.bare, x.server_first.raw, client_final.without_proof
        );
        let m = self.mechanism;
        let signature = m.hmac(&x.credential.stored_key, auth_message.as_bytes());
        if client_final.proof.len() != signature.len() {
            return Err(SaslError::AuthenticationFailed);
        }
        let client_key: Vec<u8> = client_final
            .proof
            .iter()
            .zip(&signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !ct_eq(&m.hash(&client_key), &x.credential.stored_key) {
            return Err(SaslError::AuthenticationFailed);
        }
        let verifier = m.hmac(&x.credential.server_key, auth_message.as_bytes());
        self.state = State::Complete {
            username: x.client_first.username,
        };
        Ok(ServerFinal::Verifier(verifier).to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram_client::ScramClient;
    use crate::secret::Password;
    use base64::Engine;

    const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

    fn rfc7677_credential() -> ScramCredential {
        let salt = base64::engine::general_purpose::STANDARD
            .decode("W22ZaJ0SNY7soEsUEjb6gQ==")
            .expect("salt");
        ScramCredential::from_password(
            ScramMechanism::Sha256,
            &Password::new("pencil"),
            &salt,
            4096,
        )
        .expect("credential")
    }

    /// The example exchange of RFC 7677 section 3, byte for byte, from both sides.
    #[test]
    fn rfc7677_exchange() {
        let m = ScramMechanism::Sha256;
        let mut client = ScramClient::new(m, "user", Password::new("pencil"), CLIENT_NONCE);
        let mut server = ScramServer::new(m, SERVER_NONCE.into());
        let cf = client.client_first().expect("client-first");
        assert_eq!(cf, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let sf = server
            .client_first(&cf, |u| (u == "user").then(rfc7677_credential))
            .expect("server-first");
        assert_eq!(
            String::from_utf8_lossy(&sf),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let cfin = client.server_first(&sf).expect("client-final");
        assert_eq!(
            String::from_utf8_lossy(&cfin),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let sfin = server.client_final(&cfin).expect("server-final");
        assert_eq!(
            String::from_utf8_lossy(&sfin),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(server.authenticated_user(), Some("user"));
        client.server_final(&sfin).expect("verified");
        assert!(client.is_complete());
    }

    #[test]
    fn unknown_user_token_auth_and_authzid_are_refused() {
        let m = ScramMechanism::Sha256;
        let mut s = ScramServer::new(m, SERVER_NONCE.into());
        assert_eq!(
            s.client_first(b"n,,n=nobody,r=abc", |_| None),
            Err(SaslError::AuthenticationFailed)
        );
        // The exchange is over after an error.
        assert!(s
            .client_first(b"n,,n=user,r=abc", |_| Some(rfc7677_credential()))
            .is_err());
        let mut s = ScramServer::new(m, SERVER_NONCE.into());
        assert_eq!(
            s.client_first(b"n,,n=user,r=abc,tokenauth=true", |_| Some(
                rfc7677_credential()
            )),
            Err(SaslError::UnsupportedExtension("tokenauth".into()))
        );
        let mut s = ScramServer::new(m, SERVER_NONCE.into());
        assert!(matches!(
            s.client_first(b"n,a=admin,n=user,r=abc", |_| Some(rfc7677_credential())),
            Err(SaslError::AuthorizationIdMismatch { .. })
        ));
        let mut s = ScramServer::new(m, SERVER_NONCE.into());
        assert!(s
            .client_first(b"n,a=user,n=user,r=abc", |_| Some(rfc7677_credential()))
            .is_ok());
    }

    #[test]
    fn a_wrong_nonce_or_channel_binding_fails() {
        let m = ScramMechanism::Sha256;
        let run = |tamper: &dyn Fn(String) -> String| {
            let mut client = ScramClient::new(m, "user", Password::new("pencil"), CLIENT_NONCE);
            let mut server = ScramServer::new(m, SERVER_NONCE.into());
            let cf = client.client_first().expect("client-first");
            let sf = server
                .client_first(&cf, |_| Some(rfc7677_credential()))
                .expect("sf");
            let cfin = String::from_utf8(client.server_first(&sf).expect("cfin")).expect("utf8");
            server.client_final(tamper(cfin).as_bytes())
        };
        assert!(run(&|s| s).is_ok());
        assert_eq!(
            run(&|s| s.replace("hNlF$k0", "hNlF$k1")),
            Err(SaslError::InvalidNonce)
        );
        // The client nonce alone, or the server's part alone, is not the nonce.
        assert_eq!(
            run(&|s| s.replace("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "")),
            Err(SaslError::InvalidNonce)
        );
        assert_eq!(
            run(&|s| s.replace("r=rOprNGfwEbeRWgbNEkqO", "r=")),
            Err(SaslError::InvalidNonce)
        );
        // Old librdkafka's doubled client nonce passes the nonce check (its proof covers the
        // message as sent; this one's does not, hence the failed proof).
        assert_eq!(
            run(&|s| s.replace(
                "r=rOprNGfwEbeRWgbNEkqO",
                "r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO"
            )),
            Err(SaslError::AuthenticationFailed)
        );
        assert!(matches!(
            run(&|s| s.replace("c=biws", "c=eSws")),
            Err(SaslError::Malformed { .. })
        ));
        assert_eq!(
            run(&|s| s.replace("p=dH", "p=dI")),
            Err(SaslError::AuthenticationFailed)
        );
    }
}
