//! TLS listener tests: settings to rustls configuration, handshakes over an in-memory pipe with
//! certificates made by rcgen, and subject names as principals.

use super::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::ServerName;

/// A CA and what it signed.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA");
        Ca { cert, key }
    }

    /// A certificate for `localhost` with subject `dn` (RDNs in the order given), and its key.
    fn issue(&self, dn: &[(DnType, &str)], expired: bool) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed");
        (cert, key)
    }
}

/// Settings of an SSL listener named SSL with a key store file in `dir`, plus `extra`.
fn settings(dir: &std::path::Path, ca: &Ca, extra: &[(&str, String)]) -> StaticBrokerConfig {
    let (cert, key) = ca.issue(&[(DnType::CommonName, "broker")], false);
    let keystore = dir.join("broker.pem");
    std::fs::write(&keystore, format!("{}{}", key.serialize_pem(), cert.pem())).expect("write");
    let truststore = dir.join("ca.pem");
    std::fs::write(&truststore, ca.cert.pem()).expect("write");
    let mut s = StaticBrokerConfig::new();
    let base = [
        ("ssl.keystore.location", keystore.display().to_string()),
        ("ssl.truststore.location", truststore.display().to_string()),
    ];
    for (k, v) in base.iter().chain(extra) {
        s.set(k, v).expect("known setting");
    }
    s
}

/// A client trusting `ca`, presenting `cert` if given.
fn client(ca: &Ca, cert: Option<&(rcgen::Certificate, KeyPair)>) -> tokio_rustls::TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert.der().clone()).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match cert {
        Some((c, k)) => builder
            .with_client_auth_cert(
                vec![c.der().clone()],
                PrivateKeyDer::try_from(k.serialize_der()).expect("key"),
            )
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Runs a handshake between `listener` and `connector`: the server's outcome.
async fn handshake(
    listener: &TlsListener,
    connector: tokio_rustls::TlsConnector,
) -> Result<KafkaPrincipal, HandshakeError> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    let client = async move {
        // The client's own outcome does not matter: with TLS 1.3 it may finish before the
        // server refuses its certificate.
        let stream = connector.connect(name, client_io).await;
        if let Ok(mut s) = stream {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 1];
            let _ = s.read(&mut buf).await;
        }
    };
    let server = async move {
        let accepted = listener
            .accept(server_io, Some(Duration::from_secs(10)))
            .await;
        accepted.map(|(_stream, principal)| principal)
    };
    let ((), outcome) = tokio::join!(client, server);
    outcome
}

#[tokio::test]
async fn a_client_trusting_the_ca_connects_anonymously() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let listener = TlsListener::from_settings(&settings(dir.path(), &ca, &[]), "SSL")
        .expect("valid TLS settings");
    assert_eq!(listener.client_auth, ClientAuth::None);
    let principal = handshake(&listener, client(&ca, None))
        .await
        .expect("handshake");
    assert_eq!(principal, KafkaPrincipal::anonymous());
}

#[tokio::test]
async fn required_client_auth_maps_the_certificate_subject_to_the_principal() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let auth = [("ssl.client.auth", "required".to_string())];
    let listener = TlsListener::from_settings(&settings(dir.path(), &ca, &auth), "SSL")
        .expect("valid TLS settings");
    let alice = ca.issue(
        &[
            (DnType::OrganizationName, "Acme"),
            (DnType::CommonName, "alice"),
        ],
        false,
    );
    let principal = handshake(&listener, client(&ca, Some(&alice)))
        .await
        .expect("handshake");
    assert_eq!(principal.to_string(), "User:CN=alice,O=Acme");
    let refused = handshake(&listener, client(&ca, None)).await;
    assert!(
        matches!(refused, Err(HandshakeError::Handshake(_))),
        "no certificate: {refused:?}"
    );
    let expired = ca.issue(&[(DnType::CommonName, "old")], true);
    let refused = handshake(&listener, client(&ca, Some(&expired))).await;
    assert!(
        matches!(refused, Err(HandshakeError::Handshake(_))),
        "expired: {refused:?}"
    );
    let other = Ca::new("other-ca").issue(&[(DnType::CommonName, "mallory")], false);
    let refused = handshake(&listener, client(&ca, Some(&other))).await;
    assert!(
        matches!(refused, Err(HandshakeError::Handshake(_))),
        "untrusted: {refused:?}"
    );
}

#[tokio::test]
async fn listener_overrides_win_and_mapping_rules_apply() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let extra = [
        ("ssl.client.auth", "none".to_string()),
        ("listener.name.ssl.ssl.client.auth", "requested".to_string()),
        (
            "listener.name.ssl.ssl.principal.mapping.rules",
            "RULE:^CN=(.*?),O=.*$/$1/U,DEFAULT".to_string(),
        ),
    ];
    let s = settings(dir.path(), &ca, &extra);
    let listener = TlsListener::from_settings(&s, "SSL").expect("valid");
    assert_eq!(listener.client_auth, ClientAuth::Requested);
    let bob = ca.issue(
        &[
            (DnType::OrganizationName, "Acme"),
            (DnType::CommonName, "bob"),
        ],
        false,
    );
    let principal = handshake(&listener, client(&ca, Some(&bob)))
        .await
        .expect("handshake");
    assert_eq!(principal, KafkaPrincipal::user("BOB"));
    // Requested: a client without a certificate is anonymous.
    let anonymous = handshake(&listener, client(&ca, None))
        .await
        .expect("handshake");
    assert_eq!(anonymous, KafkaPrincipal::anonymous());
    // Another listener gets the plain settings.
    let other = TlsListener::from_settings(&s, "INTERNAL").expect("valid");
    assert_eq!(other.client_auth, ClientAuth::None);
}

#[test]
fn inline_pem_and_encrypted_pkcs8_keys() {
    let ca = Ca::new("test-ca");
    let (cert, key) = ca.issue(&[(DnType::CommonName, "broker")], false);
    let inline = |pairs: &[(&str, String)]| {
        let mut s = StaticBrokerConfig::new();
        for (k, v) in pairs {
            s.set(k, v).expect("known");
        }
        TlsListener::from_settings(&s, "SSL")
    };
    inline(&[
        ("ssl.keystore.key", key.serialize_pem()),
        ("ssl.keystore.certificate.chain", cert.pem()),
    ])
    .expect("inline key and chain");
    // An encrypted PKCS#8 key, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it.
    let der = key.serialize_der();
    let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).expect("pkcs8");
    let params =
        pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, &[7u8; 16], &[9u8; 16])
            .expect("params");
    let encrypted = info
        .encrypt_with_params(params, "s3cret")
        .expect("encrypt")
        .to_pem("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF)
        .expect("pem");
    let with = |password: Option<&str>| {
        let mut pairs = vec![
            ("ssl.keystore.key", encrypted.to_string()),
            ("ssl.keystore.certificate.chain", cert.pem()),
        ];
        if let Some(p) = password {
            pairs.push(("ssl.key.password", p.to_string()));
        }
        inline(&pairs).map(|_| ()).map_err(|e| e.to_string())
    };
    with(Some("s3cret")).expect("decrypted with ssl.key.password");
    let wrong = with(Some("Zq9-not-it")).expect_err("wrong password");
    assert!(wrong.starts_with("ssl.key.password:"), "{wrong}");
    assert!(!wrong.contains("Zq9-not-it"), "never the password: {wrong}");
    let missing = with(None).expect_err("no password");
    assert!(missing.contains("ssl.key.password"), "{missing}");
}

#[test]
fn settings_that_cannot_work_are_named_without_their_values() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let err = |extra: &[(&str, &str)]| {
        let extra: Vec<(&str, String)> = extra.iter().map(|(k, v)| (*k, v.to_string())).collect();
        TlsListener::from_settings(&settings(dir.path(), &ca, &extra), "SSL")
            .expect_err("refused")
            .to_string()
    };
    let jks = err(&[("ssl.keystore.type", "JKS")]);
    assert!(
        jks.starts_with("ssl.keystore.type:") && jks.contains("PEM"),
        "{jks}"
    );
    let p12 = err(&[
        ("listener.name.ssl.ssl.truststore.type", "JKS"),
        ("ssl.client.auth", "required"),
    ]);
    assert!(
        p12.starts_with("listener.name.ssl.ssl.truststore.type:"),
        "{p12}"
    );
    let old = err(&[("ssl.enabled.protocols", "TLSv1.1,TLSv1.2")]);
    assert!(
        old.starts_with("ssl.enabled.protocols:") && old.contains("TLSv1.1"),
        "{old}"
    );
    let store_password = err(&[("ssl.keystore.password", "hunter2")]);
    assert!(
        store_password.starts_with("ssl.keystore.password:") && !store_password.contains("hunter2"),
        "{store_password}"
    );
    let rules = err(&[("ssl.principal.mapping.rules", "RULE:x")]);
    assert!(rules.starts_with("ssl.principal.mapping.rules:"), "{rules}");
    let both = err(&[
        ("ssl.keystore.key", "x"),
        ("ssl.keystore.certificate.chain", "y"),
    ]);
    assert!(both.starts_with("ssl.keystore.key:"), "{both}");
    let missing = TlsListener::from_settings(&StaticBrokerConfig::new(), "SSL")
        .expect_err("no keystore")
        .to_string();
    assert!(missing.starts_with("ssl.keystore.location:"), "{missing}");
    let mut no_truststore = StaticBrokerConfig::new();
    let (cert, key) = ca.issue(&[(DnType::CommonName, "broker")], false);
    no_truststore
        .set("ssl.keystore.key", &key.serialize_pem())
        .expect("known");
    no_truststore
        .set("ssl.keystore.certificate.chain", &cert.pem())
        .expect("known");
    no_truststore
        .set("ssl.client.auth", "required")
        .expect("known");
    let e = TlsListener::from_settings(&no_truststore, "SSL")
        .expect_err("no CA")
        .to_string();
    assert!(
        e.starts_with("ssl.client.auth:") && e.contains("ssl.truststore"),
        "{e}"
    );
    let unreadable = err(&[("ssl.keystore.location", "/nonexistent/broker.pem")]);
    assert!(
        unreadable.starts_with("ssl.keystore.location: cannot read"),
        "{unreadable}"
    );
}

#[test]
fn subject_names_are_written_as_rfc_2253() {
    let ca = Ca::new("test-ca");
    let (cert, _) = ca.issue(
        &[
            (DnType::CountryName, "US"),
            (DnType::OrganizationName, "Acme, Inc."),
            (DnType::OrganizationalUnitName, "eng"),
            (DnType::CommonName, " client+1"),
        ],
        false,
    );
    let dn = subject_name(cert.der()).expect("subject");
    assert_eq!(dn, r"CN=\ client\+1,OU=eng,O=Acme\, Inc.,C=US");
}

/// Accepts one TLS connection on `tcp` and returns its principal.
async fn accept_one(
    tcp: &tokio::net::TcpListener,
    listener: &TlsListener,
) -> Result<KafkaPrincipal, HandshakeError> {
    let (stream, _) = tcp.accept().await.expect("accept");
    let accepted = listener.accept(stream, Some(Duration::from_secs(10))).await;
    accepted.map(|(_stream, principal)| principal)
}

#[tokio::test]
async fn gregor_clients_tls_dialer_reaches_the_listener() {
    use gregor_client::tls::ClientTls;
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let auth = [("ssl.client.auth", "requested".to_string())];
    let listener = TlsListener::from_settings(&settings(dir.path(), &ca, &auth), "SSL")
        .expect("valid TLS settings");
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = tcp.local_addr().expect("addr").port();
    let (cert, key) = ca.issue(&[(DnType::CommonName, "carol")], false);
    let (crt_path, key_path) = (dir.path().join("carol.crt"), dir.path().join("carol.key"));
    std::fs::write(&crt_path, cert.pem()).expect("write");
    std::fs::write(&key_path, key.serialize_pem()).expect("write");
    let ca_path = dir.path().join("ca.pem");
    let props = |extra: &[(&str, String)]| {
        let p: std::collections::BTreeMap<String, String> = [
            ("security.protocol", "SSL".to_string()),
            ("ssl.ca.location", ca_path.display().to_string()),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
        ClientTls::from_properties(&p).expect("valid").expect("SSL")
    };
    let anonymous = props(&[]);
    let (dialed, accepted) = tokio::join!(
        anonymous.dialer().dial(&format!("localhost:{port}")),
        accept_one(&tcp, &listener)
    );
    assert!(dialed.is_ok(), "dialed: {:?}", dialed.err());
    assert_eq!(accepted.expect("accepted"), KafkaPrincipal::anonymous());
    let carol = props(&[
        ("ssl.certificate.location", crt_path.display().to_string()),
        ("ssl.key.location", key_path.display().to_string()),
    ]);
    let (dialed, accepted) = tokio::join!(
        carol.dialer().dial(&format!("localhost:{port}")),
        accept_one(&tcp, &listener)
    );
    assert!(dialed.is_ok(), "dialed: {:?}", dialed.err());
    assert_eq!(
        accepted.expect("accepted"),
        KafkaPrincipal::user("CN=carol")
    );
    // The certificate names localhost, not 127.0.0.1: refused unless the check is off.
    let (dialed, _) = tokio::join!(
        anonymous.dialer().dial(&format!("127.0.0.1:{port}")),
        accept_one(&tcp, &listener)
    );
    assert!(dialed.is_err(), "host name not checked");
    let unchecked = props(&[("ssl.endpoint.identification.algorithm", String::new())]);
    let (dialed, accepted) = tokio::join!(
        unchecked.dialer().dial(&format!("127.0.0.1:{port}")),
        accept_one(&tcp, &listener)
    );
    assert!(dialed.is_ok(), "dialed: {:?}", dialed.err());
    assert!(accepted.is_ok());
}

/// Writes `cert` and its key as a key store file at `path`.
fn write_keystore(path: &std::path::Path, (cert, key): &(rcgen::Certificate, KeyPair)) {
    std::fs::write(path, format!("{}{}", key.serialize_pem(), cert.pem())).expect("write");
}

/// The certificate a new connection to `listener` is shown.
async fn served_to_a_new_client(listener: &TlsListener, ca: &Ca) -> CertificateDer<'static> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    let (client, server) = tokio::join!(
        client(ca, None).connect(name, client_io),
        listener.accept(server_io, Some(Duration::from_secs(10)))
    );
    server.expect("server handshake");
    let client = client.expect("client handshake");
    client
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .clone()
}

#[tokio::test]
async fn a_reloaded_key_store_serves_new_connections_while_open_ones_keep_their_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let path = dir.path().join("ks.pem");
    let a = ca.issue(&[(DnType::CommonName, "broker")], false);
    write_keystore(&path, &a);
    let mut settings = StaticBrokerConfig::new();
    settings
        .set("ssl.keystore.location", &path.display().to_string())
        .expect("set");
    let listener = TlsListener::from_settings(&settings, "SSL").expect("valid");
    assert_eq!(served_to_a_new_client(&listener, &ca).await, *a.0.der());
    // The same file read again changes nothing.
    assert!(listener
        .reloaded(&settings, "SSL")
        .expect("loads")
        .is_none());
    // A connection opened before the reload.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    let (opened, accepted) = tokio::join!(
        client(&ca, None).connect(name, client_io),
        listener.accept(server_io, Some(Duration::from_secs(10)))
    );
    let (mut old_client, (mut old_server, _)) =
        (opened.expect("client"), accepted.expect("server"));
    // The file at the same path now holds certificate B (same names, new key).
    let b = ca.issue(&[(DnType::CommonName, "broker")], false);
    write_keystore(&path, &b);
    let replacement = listener
        .reloaded(&settings, "SSL")
        .expect("loads")
        .expect("changed");
    listener.install(replacement);
    assert_eq!(listener.certificate(), *b.0.der());
    assert_eq!(served_to_a_new_client(&listener, &ca).await, *b.0.der());
    // The old connection still carries data both ways.
    old_client.write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    old_server.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"ping");
    old_server.write_all(b"pong").await.expect("write");
    old_client.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"pong");
}

#[test]
fn a_reload_that_does_not_load_or_changes_the_names_is_refused_and_the_served_one_stays() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let path = dir.path().join("ks.pem");
    let a = ca.issue(&[(DnType::CommonName, "broker")], false);
    write_keystore(&path, &a);
    let mut settings = StaticBrokerConfig::new();
    settings
        .set(
            "listener.name.ssl.ssl.keystore.location",
            &path.display().to_string(),
        )
        .expect("set");
    let listener = TlsListener::from_settings(&settings, "SSL").expect("valid");
    let refused = |listener: &TlsListener, settings: &StaticBrokerConfig| {
        let e = listener.reloaded(settings, "SSL").err().expect("refused");
        assert_eq!(
            listener.certificate(),
            *a.0.der(),
            "the served certificate stays"
        );
        e.to_string()
    };
    std::fs::write(&path, "not a key store").expect("write");
    let e = refused(&listener, &settings);
    assert!(e.contains("listener.name.ssl.ssl.keystore.location"), "{e}");
    // B's certificate with another key.
    let b = ca.issue(&[(DnType::CommonName, "broker")], false);
    let other = KeyPair::generate().expect("key");
    std::fs::write(&path, format!("{}{}", other.serialize_pem(), b.0.pem())).expect("write");
    let e = refused(&listener, &settings);
    assert!(e.contains("unusable key or certificate"), "{e}");
    // Another subject: refused unless ssl.allow.dn.changes.
    let renamed = ca.issue(&[(DnType::CommonName, "someone-else")], false);
    write_keystore(&path, &renamed);
    let e = refused(&listener, &settings);
    assert!(e.contains("ssl.allow.dn.changes"), "{e}");
    settings
        .set("listener.name.ssl.ssl.allow.dn.changes", "true")
        .expect("set");
    assert!(listener
        .reloaded(&settings, "SSL")
        .expect("allowed")
        .is_some());
}

#[test]
fn other_subject_alt_names_are_refused_unless_allowed() {
    let ca = Ca::new("test-ca");
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, "broker");
        let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("signed");
        cert.der().clone()
    };
    let old = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
    let same = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let other = leaf(vec!["broker1.example.com".into()]);
    assert!(names_compatible(&old, &same, false, false).is_ok());
    let e = names_compatible(&old, &other, false, false).expect_err("other names");
    assert!(e.contains("ssl.allow.san.changes"), "{e}");
    assert!(names_compatible(&old, &other, false, true).is_ok());
}

#[tokio::test]
async fn the_listener_set_validates_and_applies_a_nodes_dynamic_store_settings() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("test-ca");
    let (path_a, path_b) = (dir.path().join("a.pem"), dir.path().join("b.pem"));
    let a = ca.issue(&[(DnType::CommonName, "broker")], false);
    let b = ca.issue(&[(DnType::CommonName, "broker")], false);
    write_keystore(&path_a, &a);
    write_keystore(&path_b, &b);
    let mut settings = StaticBrokerConfig::new();
    settings
        .set("ssl.keystore.location", &path_a.display().to_string())
        .expect("set");
    let listener = TlsListener::from_settings(&settings, "SSL").expect("valid");
    let set = ListenerTlsSet::new(&settings, [("SSL", &listener)], []);
    let key = "listener.name.ssl.ssl.keystore.location";
    let overrides = BTreeMap::from([(key.to_string(), path_b.display().to_string())]);
    let ssl = BTreeSet::from(["ssl".to_string()]);
    set.validate(&overrides, &ssl).expect("B is valid");
    assert_eq!(
        listener.certificate(),
        *a.0.der(),
        "validation serves nothing"
    );
    let e = set
        .validate(&overrides, &BTreeSet::from(["external".to_string()]))
        .expect_err("no such listener");
    assert!(e.to_string().contains("external"), "{e}");
    set.apply(Some(&overrides));
    assert_eq!(served_to_a_new_client(&listener, &ca).await, *b.0.der());
    // The override removed: the static store again.
    set.apply(None);
    assert_eq!(listener.certificate(), *a.0.der());
    // A store that became unusable after validation is not served; the listener keeps B.
    set.apply(Some(&overrides));
    std::fs::write(&path_b, "garbage").expect("write");
    set.apply(Some(&overrides));
    assert_eq!(listener.certificate(), *b.0.der());
}

/// Settings of a node whose CONTROLLER listener it only connects to (a broker-only node): a
/// key store file at `keystore`, the trust store `trusted`, mTLS.
fn peer_settings(keystore: &std::path::Path, trusted: &std::path::Path) -> StaticBrokerConfig {
    let mut s = StaticBrokerConfig::new();
    for (k, v) in [
        ("listener.name.controller.ssl.keystore.location", keystore),
        ("listener.name.controller.ssl.truststore.location", trusted),
    ] {
        s.set(k, &v.display().to_string()).expect("set");
    }
    s
}

/// The certificate `peer` presents to a new connection to `server` (which asks for one), and
/// the client side of that connection.
async fn presented_by(
    peer: &PeerTls,
    server: &TlsListener,
) -> (
    CertificateDer<'static>,
    tokio_rustls::client::TlsStream<tokio::io::DuplexStream>,
    tokio_rustls::server::TlsStream<tokio::io::DuplexStream>,
) {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let tls = peer.current();
    let (client, accepted) = tokio::join!(
        tls.connect_over("localhost:9093", client_io),
        server.accept(server_io, Some(Duration::from_secs(10)))
    );
    let client = client.expect("client handshake");
    let (server_side, _) = accepted.expect("server handshake");
    let presented = server_side
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .clone();
    (presented, client, server_side)
}

#[tokio::test]
async fn a_peer_client_presents_its_reloaded_certificate_to_new_connections_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("dir");
    let (old_ca, new_ca) = (Ca::new("old-ca"), Ca::new("new-ca"));
    let both = dir.path().join("both.pem");
    std::fs::write(&both, format!("{}{}", old_ca.cert.pem(), new_ca.cert.pem())).expect("write");
    // The server: any node's controller listener, trusting both CAs, asking for a certificate.
    let server_ks = dir.path().join("server.pem");
    write_keystore(
        &server_ks,
        &old_ca.issue(&[(DnType::CommonName, "node")], false),
    );
    let mut server_settings = peer_settings(&server_ks, &both);
    server_settings
        .set("ssl.client.auth", "required")
        .expect("set");
    let server = TlsListener::from_settings(&server_settings, "CONTROLLER").expect("server");
    // This node: certificate A of the old CA, trusting both.
    let (path_a, path_b) = (dir.path().join("a.pem"), dir.path().join("b.pem"));
    let a = old_ca.issue(&[(DnType::CommonName, "node")], false);
    let b = new_ca.issue(&[(DnType::CommonName, "node")], false);
    write_keystore(&path_a, &a);
    write_keystore(&path_b, &b);
    let settings = peer_settings(&path_a, &both);
    let peer = controller_client(&settings, "CONTROLLER").expect("valid");
    let set = ListenerTlsSet::new(&settings, [], [&peer]);
    let (presented, mut old_client, mut old_server) = presented_by(&peer, &server).await;
    assert_eq!(presented, *a.0.der());
    // Nothing changed: nothing to replace.
    set.apply(None);
    assert!(peer.reloaded(&settings).expect("loads").is_none());
    // B of the new CA through this node's dynamic override, validated then applied.
    let key = "listener.name.controller.ssl.keystore.location";
    let overrides = BTreeMap::from([(key.to_string(), path_b.display().to_string())]);
    let touched = BTreeSet::from(["controller".to_string()]);
    set.validate(&overrides, &touched).expect("B is valid");
    assert_eq!(
        peer.certificate(),
        Some(a.0.der().clone()),
        "validation changes nothing"
    );
    set.apply(Some(&overrides));
    assert_eq!(peer.certificate(), Some(b.0.der().clone()));
    assert_eq!(presented_by(&peer, &server).await.0, *b.0.der());
    // The connection opened before still carries data both ways.
    old_client.write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    old_server.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"ping");
    old_server.write_all(b"pong").await.expect("write");
    old_client.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"pong");
    // The override removed: the static store again.
    set.apply(None);
    assert_eq!(presented_by(&peer, &server).await.0, *a.0.der());
}

#[test]
fn a_peer_client_reload_is_refused_when_it_does_not_load_or_changes_the_names() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("ca");
    let trusted = dir.path().join("ca.pem");
    std::fs::write(&trusted, ca.cert.pem()).expect("write");
    let path = dir.path().join("ks.pem");
    let a = ca.issue(&[(DnType::CommonName, "node")], false);
    write_keystore(&path, &a);
    let mut settings = peer_settings(&path, &trusted);
    let peer = inter_broker_client(&settings, "CONTROLLER").expect("valid");
    let refused = |settings: &StaticBrokerConfig| {
        let e = peer.reloaded(settings).err().expect("refused");
        assert_eq!(peer.certificate(), Some(a.0.der().clone()), "A stays");
        e.to_string()
    };
    std::fs::write(&path, "not a key store").expect("write");
    let e = refused(&settings);
    assert!(
        e.contains("listener.name.controller.ssl.keystore.location"),
        "{e}"
    );
    write_keystore(
        &path,
        &ca.issue(&[(DnType::CommonName, "someone-else")], false),
    );
    let e = refused(&settings);
    assert!(e.contains("ssl.allow.dn.changes"), "{e}");
    // Without a key store where there was one.
    let mut removed = StaticBrokerConfig::new();
    removed
        .set(
            "listener.name.controller.ssl.truststore.location",
            &trusted.display().to_string(),
        )
        .expect("set");
    let e = refused(&removed);
    assert!(e.contains("cannot be removed"), "{e}");
    // A name only this node's connections use is a listener of the set; another one is not.
    let set = ListenerTlsSet::new(&settings, [], [&peer]);
    let e = set
        .validate(&BTreeMap::new(), &BTreeSet::from(["metrics".to_string()]))
        .expect_err("not a listener of this node");
    assert!(e.to_string().contains("metrics"), "{e}");
    settings
        .set("listener.name.controller.ssl.allow.dn.changes", "true")
        .expect("set");
    assert!(peer.reloaded(&settings).expect("allowed").is_some());
}
