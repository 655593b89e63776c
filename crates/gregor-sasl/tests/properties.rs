//! Properties of the SASL exchanges over random inputs: parsers never panic, a client and a
//! server built from the same password agree, a wrong password never authenticates.

use gregor_sasl::scram_message::{ClientFinal, ClientFirst, ServerFinal, ServerFirst};
use gregor_sasl::{
    parse_jaas, Password, PlainUsers, SaslError, ScramClient, ScramCredential, ScramMechanism,
    ScramServer,
};
use proptest::prelude::*;

fn mechanism() -> impl Strategy<Value = ScramMechanism> {
    prop_oneof![Just(ScramMechanism::Sha256), Just(ScramMechanism::Sha512)]
}

/// Names with the characters SCRAM must escape, and non-ASCII ones.
fn username() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9=,._é-]{1,24}"
}

fn nonce() -> impl Strategy<Value = String> {
    "[!-+--~]{1,32}"
}

/// Runs a whole exchange; the server knows `stored_password`, the client uses `password`.
fn exchange(
    m: ScramMechanism,
    user: &str,
    stored_password: &str,
    password: &str,
    salt: &[u8],
    iterations: i32,
    nonces: (&str, &str),
) -> Result<String, SaslError> {
    let credential =
        ScramCredential::from_password(m, &Password::new(stored_password), salt, iterations)?;
    let mut client = ScramClient::new(m, user, Password::new(password), nonces.0);
    let mut server = ScramServer::new(m, nonces.1.to_string());
    let cf = client.client_first()?;
    let sf = server.client_first(&cf, |u| (u == user).then(|| credential.clone()))?;
    let cfin = client.server_first(&sf)?;
    let sfin = server.client_final(&cfin)?;
    client.server_final(&sfin)?;
    Ok(server.authenticated_user().unwrap_or_default().to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn client_and_server_with_one_password_agree(
        m in mechanism(),
        user in username(),
        password in "\\PC{1,40}",
        salt in proptest::collection::vec(any::<u8>(), 1..48),
        iterations in 4096i32..4200,
        cn in nonce(),
        sn in nonce(),
    ) {
        let got = exchange(m, &user, &password, &password, &salt, iterations, (&cn, &sn));
        prop_assert_eq!(got, Ok(user));
    }

    #[test]
    fn a_wrong_password_always_fails(
        m in mechanism(),
        user in username(),
        password in "\\PC{1,20}",
        wrong in "\\PC{1,20}",
        salt in proptest::collection::vec(any::<u8>(), 1..16),
    ) {
        prop_assume!(password != wrong);
        let got = exchange(m, &user, &password, &wrong, &salt, 4096, ("abc", "def"));
        prop_assert_eq!(got, Err(SaslError::AuthenticationFailed));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ClientFirst::parse(&bytes);
        let _ = ServerFirst::parse(&bytes);
        let _ = ClientFinal::parse(&bytes);
        let _ = ServerFinal::parse(&bytes);
        let _ = PlainUsers::new().authenticate(&bytes);
        let _ = parse_jaas(&String::from_utf8_lossy(&bytes));
    }

    /// Valid messages with bytes flipped, cut or inserted: each step answers, never panics;
    /// the server never authenticates from a mutated client message.
    #[test]
    fn mutated_exchange_messages_never_panic(
        m in mechanism(),
        step in 0usize..2,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        kind in 0u8..3,
    ) {
        let credential = ScramCredential::from_password(m, &Password::new("pw"), b"salt", 4096)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut client = ScramClient::new(m, "user", Password::new("pw"), "cnonce");
        let mut server = ScramServer::new(m, "snonce".into());
        let mut cf = client.client_first().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mutate = |msg: &mut Vec<u8>| {
            let i = at.index(msg.len());
            match kind {
                0 => msg[i] ^= byte | 1,
                1 => msg.truncate(i),
                _ => msg.insert(i, byte),
            }
        };
        if step == 0 {
            mutate(&mut cf);
        }
        let Ok(sf) = server.client_first(&cf, |_| Some(credential.clone())) else { return Ok(()) };
        let Ok(mut cfin) = client.server_first(&sf) else { return Ok(()) };
        if step == 1 {
            mutate(&mut cfin);
        }
        // Whatever was changed, the server must not authenticate: the proof covers both
        // messages.
        prop_assert!(server.client_final(&cfin).is_err());
    }
}

#[test]
fn plain_never_accepts_a_mutated_password() {
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
    let users = PlainUsers::from_jaas(jaas).expect("jaas");
    let good = b"\0alice\0alice-secret".to_vec();
    assert_eq!(users.authenticate(&good), Ok("alice".into()));
    for i in 7..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        assert!(users.authenticate(&bad).is_err(), "{bad:?}");
    }
}
