//! PKCS12 key and trust stores on a listener: stores made at test time by
//! `openssl pkcs12 -export`, served in a real handshake with client certificates, refused with
//! the setting named (never the password) when they cannot work, and re-read by a reload.

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::ServerName;

use super::*;

const PASSWORD: &str = "p12-store-secret";

struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        let ca = params.self_signed(&ca_key).expect("CA");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write");
        Pki { dir, ca, ca_key }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A certificate for `localhost` named CN=`cn`, and its key.
    fn issue(&self, cn: &str) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("signed");
        (cert, key)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(["pkcs12", "-export", "-passout", &format!("pass:{PASSWORD}")])
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl runs (these tests make their stores with it)");
        assert!(
            out.status.success(),
            "openssl pkcs12 {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `name`.p12: a key store of a new certificate CN=`cn` (with the CA); the certificate.
    fn keystore(&self, name: &str, cn: &str) -> (PathBuf, rcgen::Certificate) {
        let (cert, key) = self.issue(cn);
        std::fs::write(self.path("leaf.crt"), cert.pem()).expect("write");
        std::fs::write(self.path("leaf.key"), key.serialize_pem()).expect("write");
        let out = format!("{name}.p12");
        self.openssl(&[
            "-inkey",
            "leaf.key",
            "-in",
            "leaf.crt",
            "-certfile",
            "ca.pem",
            "-out",
            &out,
        ]);
        (self.path(&out), cert)
    }

    /// trust.p12: a trust store of the CA certificate.
    fn truststore(&self) -> PathBuf {
        self.openssl(&["-nokeys", "-in", "ca.pem", "-out", "trust.p12"]);
        self.path("trust.p12")
    }
}

fn config(pairs: &[(&str, String)]) -> StaticBrokerConfig {
    let mut s = StaticBrokerConfig::new();
    for (k, v) in pairs {
        s.set(k, v).expect("known setting");
    }
    s
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

/// A handshake with `listener` by a client trusting the CA and presenting `cert`; the
/// certificate the server showed and the principal it gave the client.
async fn connect(
    listener: &TlsListener,
    pki: &Pki,
    cert: &(rcgen::Certificate, KeyPair),
) -> (CertificateDer<'static>, KafkaPrincipal) {
    let mut roots = RootCertStore::empty();
    roots.add(pki.ca.der().clone()).expect("root");
    let config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![cert.0.der().clone()],
            PrivateKeyDer::try_from(cert.1.serialize_der()).expect("key"),
        )
        .expect("client cert");
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    let (client, server) = tokio::join!(
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, client_io),
        listener.accept(server_io, Some(Duration::from_secs(10)))
    );
    let (_stream, principal) = server.expect("server handshake");
    let client = client.expect("client handshake");
    let served = client
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .clone();
    (served, principal)
}

#[tokio::test]
async fn a_listener_serves_a_pkcs12_key_store_and_verifies_clients_with_a_pkcs12_trust_store() {
    let pki = Pki::new();
    let (keystore, broker) = pki.keystore("broker", "broker");
    let truststore = pki.truststore();
    let settings = config(&[
        ("listener.name.ssl.ssl.keystore.type", "PKCS12".into()),
        ("listener.name.ssl.ssl.keystore.location", shown(&keystore)),
        ("listener.name.ssl.ssl.keystore.password", PASSWORD.into()),
        ("ssl.truststore.type", "pkcs12".into()),
        ("ssl.truststore.location", shown(&truststore)),
        ("ssl.truststore.password", PASSWORD.into()),
        ("ssl.client.auth", "required".into()),
    ]);
    let listener = TlsListener::from_settings(&settings, "SSL").expect("valid");
    let alice = pki.issue("alice");
    let (served, principal) = connect(&listener, &pki, &alice).await;
    assert_eq!(served, *broker.der());
    assert_eq!(principal, KafkaPrincipal::user("CN=alice"));

    // A reload (IncrementalAlterConfigs) reads PKCS12 stores with the same loader: a new store
    // with the same names is taken; one the password does not open is refused, naming the
    // password's setting, and the served certificate stays.
    let (renewed, broker2) = pki.keystore("broker2", "broker");
    let mut changed = settings.clone();
    changed
        .set("listener.name.ssl.ssl.keystore.location", &shown(&renewed))
        .expect("set");
    let replacement = listener.reloaded(&changed, "SSL").expect("loads");
    let mut wrong = changed.clone();
    wrong
        .set("listener.name.ssl.ssl.keystore.password", "not-it-42")
        .expect("set");
    let e = listener
        .reloaded(&wrong, "SSL")
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.starts_with(
            "listener.name.ssl.ssl.keystore.password: for listener.name.ssl.ssl.keystore.location"
        ),
        "{e}"
    );
    assert!(!e.contains("not-it-42") && !e.contains(PASSWORD), "{e}");
    assert_eq!(listener.certificate(), *broker.der());
    listener.install(replacement.expect("a new store"));
    assert_eq!(connect(&listener, &pki, &alice).await.0, *broker2.der());
}

#[test]
fn pkcs12_settings_that_cannot_work_are_named_without_the_password() {
    let pki = Pki::new();
    let (keystore, _) = pki.keystore("broker", "broker");
    let truststore = pki.truststore();
    let base = [
        ("ssl.keystore.type", "PKCS12".to_string()),
        ("ssl.keystore.location", shown(&keystore)),
        ("ssl.keystore.password", PASSWORD.to_string()),
        ("ssl.truststore.type", "PKCS12".to_string()),
        ("ssl.truststore.location", shown(&truststore)),
        ("ssl.truststore.password", PASSWORD.to_string()),
        ("ssl.client.auth", "required".to_string()),
    ];
    let refusal = |changes: &[(&str, &str)]| {
        let mut s = config(&base);
        for (k, v) in changes {
            s.set(k, v).expect("known setting");
        }
        let e = TlsListener::from_settings(&s, "SSL")
            .expect_err("refused")
            .to_string();
        assert!(!e.contains(PASSWORD) && !e.contains("bad-pw-9"), "{e}");
        e
    };
    assert!(TlsListener::from_settings(&config(&base), "SSL").is_ok());
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("ssl.keystore.password", "bad-pw-9")],
            "ssl.keystore.password: for ssl.keystore.location: the password does not open",
        ),
        (
            &[("ssl.truststore.password", "bad-pw-9")],
            "ssl.truststore.password: for ssl.truststore.location",
        ),
        (
            &[("ssl.keystore.password", "")],
            "ssl.keystore.password: a PKCS12 store",
        ),
        (
            &[("ssl.truststore.password", "")],
            "ssl.truststore.password: a PKCS12 store",
        ),
        (
            &[("ssl.key.password", "bad-pw-9")],
            "ssl.key.password: differs from ssl.keystore.password",
        ),
        (
            &[("ssl.keystore.location", "")],
            "ssl.keystore.location: an SSL listener needs",
        ),
        (
            &[("ssl.keystore.key", "-----BEGIN PRIVATE KEY-----")],
            "ssl.keystore.key: is PEM",
        ),
        (
            &[
                ("ssl.truststore.certificates", "-----BEGIN CERTIFICATE-----"),
                ("ssl.truststore.location", ""),
            ],
            "ssl.truststore.certificates: is PEM",
        ),
        (
            &[("ssl.keystore.type", "JKS")],
            "ssl.keystore.type: JKS stores are not supported: use PKCS12 or PEM",
        ),
        (
            &[("listener.name.ssl.ssl.truststore.type", "JKS")],
            "listener.name.ssl.ssl.truststore.type: JKS",
        ),
        (
            &[("ssl.keystore.location", "/nonexistent/ks.p12")],
            "ssl.keystore.location: cannot read",
        ),
    ];
    for (changes, expected) in cases {
        let e = refusal(changes);
        assert!(e.starts_with(expected), "{changes:?}: {e}");
    }
    // A trust store as the key store: no key. A damaged file: not PKCS12.
    let e = refusal(&[("ssl.keystore.location", &shown(&truststore))]);
    assert!(
        e.starts_with("ssl.keystore.location: holds no private key"),
        "{e}"
    );
    std::fs::write(pki.path("bad.p12"), b"\x30\x82\x01\x00garbage").expect("write");
    let e = refusal(&[("ssl.keystore.location", &shown(&pki.path("bad.p12")))]);
    assert!(
        e.starts_with("ssl.keystore.location: is not a readable PKCS12"),
        "{e}"
    );
    // ssl.key.password may repeat the store's password (Kafka's key password defaults to it).
    let mut same = config(&base);
    same.set("ssl.key.password", PASSWORD).expect("set");
    assert!(TlsListener::from_settings(&same, "SSL").is_ok());
}

#[test]
fn the_inter_broker_client_reads_the_listeners_pkcs12_stores() {
    let pki = Pki::new();
    let (keystore, _) = pki.keystore("broker", "broker");
    let truststore = pki.truststore();
    let mut pairs = vec![
        ("ssl.keystore.type", "PKCS12".to_string()),
        ("ssl.keystore.location", shown(&keystore)),
        ("ssl.keystore.password", PASSWORD.to_string()),
        ("ssl.truststore.type", "PKCS12".to_string()),
        ("ssl.truststore.location", shown(&truststore)),
        ("ssl.truststore.password", PASSWORD.to_string()),
    ];
    assert!(inter_broker_client(&config(&pairs), "SSL").is_ok());
    pairs[2].1 = "bad-pw-9".to_string();
    let e = inter_broker_client(&config(&pairs), "SSL")
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("ssl.keystore.password: for ssl.keystore.location"),
        "{e}"
    );
    assert!(!e.contains("bad-pw-9"), "{e}");
}
