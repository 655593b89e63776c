//! Properties of the OAUTHBEARER parsers over random inputs: the client's initial response and
//! the token checks never panic, whatever the bytes; what the client builds, the server parses.

use std::collections::BTreeMap;

use gregor_sasl::{
    validate_initial_response, JwkKeys, JwtRules, OAuthBearerInitialResponse, Password,
};
use proptest::prelude::*;

/// A key set with one P-256 key (no token below is signed by it).
fn keys() -> JwkKeys {
    JwkKeys::from_json(
        r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k",
        "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
        "y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#,
    )
    .expect("jwks")
}

/// Initial responses close to valid ones, with random pieces.
fn near_valid() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just("n,"), Just("y,"), Just("p=x,"), Just("")],
        prop_oneof![Just(""), Just("a=al=2Cice"), Just("a=bad=")],
        "[ -~]{0,40}",
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(flag, authzid, token, tail)| {
            let mut out = format!("{flag}{authzid},\u{1}auth=Bearer {token}\u{1}").into_bytes();
            out.extend_from_slice(&tail);
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = OAuthBearerInitialResponse::parse(&bytes);
        let _ = validate_initial_response(&bytes, &keys(), &JwtRules::default(), 0);
        let _ = JwkKeys::from_json(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn near_valid_messages_never_panic(bytes in near_valid()) {
        let _ = OAuthBearerInitialResponse::parse(&bytes);
        let _ = validate_initial_response(&bytes, &keys(), &JwtRules::default(), i64::MAX);
    }

    #[test]
    fn what_the_client_builds_the_server_parses(
        token in "[A-Za-z0-9._~+/-]{1,64}={0,2}",
        authzid in proptest::option::of("[a-z=,]{1,12}"),
        extensions in proptest::collection::btree_map("[a-zA-Z]{1,8}", "[!-~ ]{1,16}", 0..4),
    ) {
        let extensions: BTreeMap<String, String> =
            extensions.into_iter().filter(|(k, _)| k != "auth").collect();
        let sent = OAuthBearerInitialResponse {
            authzid: authzid.clone(),
            token: Password::new(token.clone()),
            extensions: extensions.clone(),
        };
        let got = OAuthBearerInitialResponse::parse(&sent.to_bytes()).expect("parses");
        prop_assert_eq!(got.authzid, authzid);
        prop_assert_eq!(got.token.expose(), token.as_str());
        prop_assert_eq!(got.extensions, extensions);
    }
}
