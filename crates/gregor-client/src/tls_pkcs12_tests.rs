//! PKCS12 stores: made at test time by `openssl pkcs12 -export` (OpenSSL 3's default AES-256
//! PBES2, and `-legacy` 3DES/RC2) and by p12-keystore's writer, read back by the loader and
//! through Kafka's client settings.

use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use super::*;

const PASSWORD: &str = "store-secret-1";

/// A CA and a certificate it signed for `localhost`, as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    leaf: rcgen::Certificate,
    leaf_key: KeyPair,
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
        let leaf_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf = params.signed_by(&leaf_key, &ca, &ca_key).expect("signed");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write");
        std::fs::write(dir.path().join("leaf.crt"), leaf.pem()).expect("write");
        std::fs::write(dir.path().join("leaf.key"), leaf_key.serialize_pem()).expect("write");
        Pki {
            dir,
            ca,
            leaf,
            leaf_key,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `openssl pkcs12 -export` with `args`, writing `name`; its bytes.
    fn openssl_store(&self, name: &str, args: &[&str]) -> Vec<u8> {
        let out = Command::new("openssl")
            .args(["pkcs12", "-export", "-passout", &format!("pass:{PASSWORD}")])
            .args(["-out", name])
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl runs (these tests make their stores with it)");
        assert!(
            out.status.success(),
            "openssl pkcs12 {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(self.path(name)).expect("store written")
    }

    /// A key store of the leaf's key and chain, made by openssl (`extra`: its cipher options).
    fn keystore(&self, name: &str, extra: &[&str]) -> Vec<u8> {
        let mut args = vec![
            "-inkey",
            "leaf.key",
            "-in",
            "leaf.crt",
            "-certfile",
            "ca.pem",
        ];
        args.extend_from_slice(extra);
        self.openssl_store(name, &args)
    }
}

/// The public key (SubjectPublicKeyInfo) of a private key, through the project's crypto provider.
fn public_key(key: &PrivateKeyDer<'static>) -> Vec<u8> {
    let signing = crypto_provider()
        .key_provider
        .load_private_key(key.clone_key())
        .expect("a key ring can use");
    signing.public_key().expect("public key").to_vec()
}

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn openssl_key_stores_give_the_key_and_its_chain_default_and_legacy_ciphers() {
    let pki = Pki::new();
    for (name, ciphers) in [
        ("aes.p12", vec![]),
        ("legacy.p12", vec!["-legacy"]),
        (
            "3des.p12",
            vec![
                "-certpbe",
                "PBE-SHA1-3DES",
                "-keypbe",
                "PBE-SHA1-3DES",
                "-macalg",
                "sha1",
            ],
        ),
    ] {
        let store = pki.keystore(name, &ciphers);
        let (chain, key) = pkcs12_identity(&store, PASSWORD).expect(name);
        assert_eq!(chain.len(), 2, "{name}: leaf then CA");
        assert_eq!(chain[0].as_ref(), pki.leaf.der().as_ref(), "{name}: leaf");
        assert_eq!(chain[1].as_ref(), pki.ca.der().as_ref(), "{name}: CA");
        assert_eq!(
            public_key(&key),
            pki.leaf_key.public_key_der(),
            "{name}: the leaf's key"
        );
        assert_eq!(
            pkcs12_identity(&store, "not-the-password").map(|_| ()),
            Err(Pkcs12Error::WrongPassword),
            "{name}"
        );
    }
}

#[test]
fn a_trust_store_gives_its_certificates_and_no_key() {
    let pki = Pki::new();
    let store = pki.openssl_store("trust.p12", &["-nokeys", "-in", "ca.pem"]);
    let certs = pkcs12_certificates(&store, PASSWORD).expect("trust store");
    assert_eq!(certs.len(), 1);
    assert_eq!(certs[0].as_ref(), pki.ca.der().as_ref());
    assert_eq!(
        pkcs12_identity(&store, PASSWORD).map(|_| ()),
        Err(Pkcs12Error::NoKey)
    );
    assert_eq!(
        pkcs12_certificates(&store, "wrong").map(|_| ()),
        Err(Pkcs12Error::WrongPassword)
    );
}

#[test]
fn corrupt_stores_are_refused() {
    let pki = Pki::new();
    let store = pki.keystore("k.p12", &[]);
    for (what, bytes) in [
        ("empty", Vec::new()),
        ("truncated", store[..store.len() / 2].to_vec()),
        ("PEM text", pki.leaf.pem().into_bytes()),
    ] {
        assert!(
            matches!(
                pkcs12_identity(&bytes, PASSWORD),
                Err(Pkcs12Error::Corrupt(_))
            ),
            "{what}: {:?}",
            pkcs12_identity(&bytes, PASSWORD).map(|_| ())
        );
    }
    // A changed byte inside the MAC'd content fails the MAC, as a wrong password does.
    let mut changed = store.clone();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x5a;
    assert!(pkcs12_identity(&changed, PASSWORD).is_err());
}

/// A store written by p12-keystore holding `key` with the chain `certs` (not checked to match).
fn written_store(key: &KeyPair, certs: &[&rcgen::Certificate]) -> Vec<u8> {
    use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKey, PrivateKeyChain};
    let key = PrivateKey::from_der(&key.serialize_der()).expect("PKCS#8");
    let certs: Vec<Certificate> = certs
        .iter()
        .map(|c| Certificate::from_der(c.der()).expect("X.509"))
        .collect();
    let mut store = KeyStore::new();
    let chain = PrivateKeyChain::new(b"key-1".as_slice(), key, certs);
    store.add_entry("broker", KeyStoreEntry::PrivateKeyChain(chain));
    store.writer(PASSWORD).write().expect("written")
}

#[test]
fn client_settings_read_pkcs12_stores_and_name_what_is_wrong() {
    let pki = Pki::new();
    pki.keystore("client.p12", &[]);
    pki.openssl_store("trust.p12", &["-nokeys", "-in", "ca.pem"]);
    let (keystore, truststore) = (pki.path("client.p12"), pki.path("trust.p12"));
    let base = [
        ("security.protocol", "SSL"),
        ("ssl.truststore.type", "PKCS12"),
        ("ssl.truststore.location", path_str(&truststore)),
        ("ssl.truststore.password", PASSWORD),
        ("ssl.keystore.type", "PKCS12"),
        ("ssl.keystore.location", path_str(&keystore)),
        ("ssl.keystore.password", PASSWORD),
    ];
    let with = |changes: &[(&str, &str)]| {
        let mut props = settings(&base);
        for (k, v) in changes {
            props.insert(k.to_string(), v.to_string());
        }
        ClientTls::from_properties(&props)
    };
    let refusal = |changes: &[(&str, &str)]| with(changes).expect_err("refused").to_string();
    assert!(with(&[]).expect("valid").is_some());
    // librdkafka's keystore is PKCS12 without a type setting; ssl.key.password may repeat the
    // store's password.
    assert!(with(&[("ssl.keystore.type", ""), ("ssl.key.password", PASSWORD)]).is_ok());

    let e = refusal(&[("ssl.keystore.password", "wrong-pw-7")]);
    assert!(
        e.starts_with("ssl.keystore.password: for ssl.keystore.location"),
        "{e}"
    );
    assert!(!e.contains("wrong-pw-7") && !e.contains(PASSWORD), "{e}");
    let e = refusal(&[("ssl.truststore.password", "wrong-pw-7")]);
    assert!(e.starts_with("ssl.truststore.password:"), "{e}");
    let e = refusal(&[("ssl.truststore.password", "")]);
    assert!(e.starts_with("ssl.truststore.password:"), "{e}");
    let e = refusal(&[("ssl.keystore.password", "")]);
    assert!(e.starts_with("ssl.keystore.password:"), "{e}");
    let e = refusal(&[("ssl.key.password", "other-key-pw")]);
    assert!(e.starts_with("ssl.key.password: differs"), "{e}");
    let e = refusal(&[("ssl.keystore.location", path_str(&truststore))]);
    assert!(
        e.starts_with("ssl.keystore.location: holds no private key"),
        "{e}"
    );
    let e = refusal(&[("ssl.keystore.type", "JKS")]);
    assert!(
        e.starts_with("ssl.keystore.type: JKS") && e.contains("keytool"),
        "{e}"
    );
    let e = refusal(&[("ssl.truststore.type", "jks")]);
    assert!(e.starts_with("ssl.truststore.type:"), "{e}");
    let e = refusal(&[("ssl.ca.location", path_str(&pki.path("ca.pem")))]);
    assert!(e.starts_with("ssl.ca.location: is PEM"), "{e}");
    let e = refusal(&[("ssl.keystore.location", path_str(&pki.path("leaf.crt")))]);
    assert!(
        e.starts_with("ssl.keystore.location: is not a readable PKCS12"),
        "{e}"
    );

    // A store whose key is not its certificate's: rustls refuses the pair.
    let other = KeyPair::generate().expect("key");
    std::fs::write(
        pki.path("mismatch.p12"),
        written_store(&other, &[&pki.leaf]),
    )
    .expect("write");
    let e = refusal(&[("ssl.keystore.location", path_str(&pki.path("mismatch.p12")))]);
    assert!(
        e.starts_with("ssl.keystore.location: unusable key or certificate"),
        "{e}"
    );
    // The same writer with the right key: accepted, so the refusal above is the mismatch's.
    std::fs::write(
        pki.path("written.p12"),
        written_store(&pki.leaf_key, &[&pki.leaf, &pki.ca]),
    )
    .expect("write");
    assert!(with(&[("ssl.keystore.location", path_str(&pki.path("written.p12")))]).is_ok());
}

/// A valid store, made once, for the mutation property.
fn valid_store() -> &'static [u8] {
    static STORE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    STORE.get_or_init(|| {
        let pki = Pki::new();
        written_store(&pki.leaf_key, &[&pki.leaf, &pki.ca])
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_as_a_store_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(pkcs12_identity(&bytes, PASSWORD).is_err());
        prop_assert!(pkcs12_certificates(&bytes, PASSWORD).is_err());
    }

    #[test]
    fn a_changed_or_cut_store_never_panics(
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut store = valid_store().to_vec();
        let i = at.index(store.len());
        store[i] ^= xor;
        let _ = pkcs12_identity(&store, PASSWORD);
        let _ = pkcs12_certificates(&store, PASSWORD);
        let cut = &valid_store()[..cut.index(valid_store().len())];
        prop_assert!(pkcs12_identity(cut, PASSWORD).is_err());
    }
}
