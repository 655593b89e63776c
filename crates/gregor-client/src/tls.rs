//! TLS to brokers (`security.protocol=SSL`): Kafka's client settings to a rustls client
//! configuration, and a [`Dialer`] that opens TCP and does the handshake before the client's
//! own ApiVersions handshake. Both spellings of the settings work: librdkafka's
//! (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`) and the Java client's
//! PEM stores (`ssl.truststore.location` / `ssl.truststore.certificates`,
//! `ssl.keystore.location` / `ssl.keystore.key` + `ssl.keystore.certificate.chain`).
//!
//! PKCS12 stores (`ssl.keystore.type` / `ssl.truststore.type` = `PKCS12`, with their passwords)
//! are read by [`pkcs12_identity`] and [`pkcs12_certificates`]; JKS is refused.
//!
//! The PEM and PKCS12 helpers ([`certificates`], [`private_key`], [`pkcs12_identity`],
//! [`pkcs12_certificates`]) are the broker's too.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::connection::{DialedStream, Dialer};

/// rustls with ring, the project's one crypto provider (no aws-lc). rustls deprecates it for
/// lacking post-quantum key exchange; its classical suites and groups are what Kafka brokers
/// and clients negotiate today.
#[allow(deprecated)]
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why PEM text gives no certificates or key. Never carries the text itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PemError {
    #[error("not valid PEM: {0}")]
    Invalid(String),
    #[error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    #[error("holds no usable PEM private key: {0}")]
    NoKey(String),
    #[error("holds a key in OpenSSL's legacy encrypted format; convert it to encrypted PKCS#8 (`openssl pkcs8 -topk8 -v2 aes-256-cbc`)")]
    LegacyEncrypted,
    #[error("holds an encrypted key but no password is set")]
    NeedsPassword,
    #[error("holds a key that is not encrypted, but a password is set")]
    NotEncrypted,
    #[error("encrypted key is not valid: {0}")]
    BadEncryptedKey(String),
    #[error("the password does not decrypt the key (wrong password or unsupported cipher)")]
    WrongPassword,
}

/// The certificates of a PEM text (at least one).
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Invalid(e.to_string()))?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(certs)
}

/// The private key of a PEM text: PKCS#8, encrypted (then `password` decrypts it) or not, or a
/// PKCS#1 / SEC1 key without a password.
pub fn private_key(pem: &[u8], password: Option<&str>) -> Result<PrivateKeyDer<'static>, PemError> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let text = String::from_utf8_lossy(pem);
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(PemError::LegacyEncrypted);
    }
    let Some(start) = text.find(BEGIN) else {
        if password.is_some() {
            return Err(PemError::NotEncrypted);
        }
        return PrivateKeyDer::from_pem_slice(pem).map_err(|e| PemError::NoKey(e.to_string()));
    };
    let password = password.ok_or(PemError::NeedsPassword)?;
    let block = &text[start..];
    let end = block
        .find(END)
        .map(|i| i + END.len())
        .ok_or_else(|| PemError::BadEncryptedKey("no END line".into()))?;
    let (_, der) = pkcs8::der::pem::decode_vec(&block.as_bytes()[..end])
        .map_err(|e| PemError::BadEncryptedKey(e.to_string()))?;
    let encrypted = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
        .map_err(|e| PemError::BadEncryptedKey(e.to_string()))?;
    let decrypted = encrypted
        .decrypt(password.as_bytes())
        .map_err(|_| PemError::WrongPassword)?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        decrypted.as_bytes().to_vec(),
    )))
}

/// Why a PKCS12 store gives no key or certificates. Never carries the password.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Pkcs12Error {
    #[error("the password does not open the PKCS12 store (wrong password, or a damaged store)")]
    WrongPassword,
    #[error("is not a readable PKCS12 store: {0}")]
    Corrupt(String),
    #[error("is protected with a scheme Gregor cannot read: {0}")]
    Unsupported(String),
    #[error("holds no private key (a key store holds the key and its certificate chain)")]
    NoKey,
    #[error("holds {0} private keys; Gregor presents one, so the key store must hold one")]
    SeveralKeys(usize),
    #[error("holds no certificate for its private key")]
    NoCertificateForKey,
    #[error("holds no certificate")]
    NoCertificate,
}

/// The bags of a PKCS12 store, its MAC checked and its bags decrypted with `password`.
fn open_pkcs12(store: &[u8], password: &str) -> Result<p12_keystore::Pkcs12Archive, Pkcs12Error> {
    use p12_keystore::error::Error;
    p12_keystore::Pkcs12Archive::from_pkcs12(store, password).map_err(|e| match e {
        // A wrong password fails the MAC check; without a MAC, the decryption's padding.
        Error::MacError(_) | Error::UnpadError => Pkcs12Error::WrongPassword,
        Error::UnsupportedEncryptionScheme | Error::UnsupportedMacAlgorithm => {
            Pkcs12Error::Unsupported(e.to_string())
        }
        e => Pkcs12Error::Corrupt(e.to_string()),
    })
}

/// The certificate chain and private key of a PKCS12 key store (as keytool and
/// `openssl pkcs12 -export` write them): its one private key, the certificate with the key's
/// localKeyId (or the store's only certificate), then that certificate's issuers found in the
/// store. rustls checks later that the key is the certificate's.
pub fn pkcs12_identity(
    store: &[u8],
    password: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Pkcs12Error> {
    let archive = open_pkcs12(store, password)?;
    let key = match archive.keys.as_slice() {
        [] => return Err(Pkcs12Error::NoKey),
        [key] => key,
        keys => return Err(Pkcs12Error::SeveralKeys(keys.len())),
    };
    let certs: Vec<&p12_keystore::Certificate> = archive.certs.iter().map(|b| &b.cert).collect();
    let leaf = key
        .local_key_id
        .as_ref()
        .and_then(|id| {
            archive
                .certs
                .iter()
                .position(|b| b.local_key_id.as_deref() == Some(id.as_ref()))
        })
        .or((certs.len() == 1).then_some(0))
        .ok_or(Pkcs12Error::NoCertificateForKey)?;
    let mut chain = vec![leaf];
    // Each step adds a certificate not in the chain yet, so this ends within certs.len() steps.
    while let Some(&last) = chain.last() {
        let cert = certs[last];
        if cert.issuer() == cert.subject() {
            break;
        }
        match (0..certs.len()).find(|i| !chain.contains(i) && certs[*i].subject() == cert.issuer())
        {
            Some(issuer) => chain.push(issuer),
            None => break,
        }
    }
    let chain = chain
        .into_iter()
        .map(|i| CertificateDer::from(certs[i].as_der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.key.as_der().to_vec()));
    Ok((chain, key))
}

/// The certificates of a PKCS12 trust store: every certificate it holds (a trust store holds
/// CA certificates and no key).
pub fn pkcs12_certificates(
    store: &[u8],
    password: &str,
) -> Result<Vec<CertificateDer<'static>>, Pkcs12Error> {
    let archive = open_pkcs12(store, password)?;
    if archive.certs.is_empty() {
        return Err(Pkcs12Error::NoCertificate);
    }
    Ok(archive
        .certs
        .iter()
        .map(|b| CertificateDer::from(b.cert.as_der().to_vec()))
        .collect())
}

/// The format of a key or trust store (`ssl.keystore.type`, `ssl.truststore.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    Pem,
    Pkcs12,
}

impl StoreType {
    /// The type a `*.type` setting names; the reason it is refused otherwise (JKS has no
    /// reader Gregor trusts; keytool converts it).
    pub fn parse(value: &str) -> Result<StoreType, String> {
        if value.eq_ignore_ascii_case("PEM") {
            Ok(StoreType::Pem)
        } else if value.eq_ignore_ascii_case("PKCS12") {
            Ok(StoreType::Pkcs12)
        } else if value.eq_ignore_ascii_case("JKS") {
            Err("JKS stores are not supported: use PKCS12 or PEM (convert with `keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12`)".to_string())
        } else {
            Err(format!(
                "'{value}' stores are not supported: use PEM or PKCS12"
            ))
        }
    }
}

/// A client TLS setting that cannot work, naming it (never its value).
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsSettingError {
    pub key: String,
    pub reason: String,
}

fn setting_error(key: &str, reason: impl Into<String>) -> TlsSettingError {
    TlsSettingError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The client side of TLS to brokers.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
}

impl ClientTls {
    /// TLS from Kafka client properties; `None` when `security.protocol` is PLAINTEXT (or
    /// unset) or SASL_PLAINTEXT. SASL_SSL is TLS first (the login is `sasl`'s).
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<Option<ClientTls>, TlsSettingError> {
        let props = Props(props);
        let get = |k: &str| props.get(k);
        match get("security.protocol")
            .unwrap_or("PLAINTEXT")
            .to_ascii_uppercase()
            .as_str()
        {
            "PLAINTEXT" | "SASL_PLAINTEXT" => return Ok(None),
            "SSL" | "SASL_SSL" => {}
            _ => {
                return Err(setting_error(
                    "security.protocol",
                    "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
                ))
            }
        }
        let trust_type = store_type(props, "ssl.truststore.type")?;
        let key_type = store_type(props, "ssl.keystore.type")?;
        let roots = Arc::new(trusted(props, trust_type)?);
        let provider = crypto_provider();
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| setting_error("ssl.ca.location", e.to_string()))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| setting_error("security.protocol", e.to_string()))?;
        // Kafka's clients check the broker's host name unless this is set to empty.
        let builder = match props.0.get("ssl.endpoint.identification.algorithm") {
            Some(a) if a.is_empty() => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName(verifier))),
            Some(a) if !a.eq_ignore_ascii_case("https") => {
                return Err(setting_error(
                    "ssl.endpoint.identification.algorithm",
                    "must be https or empty",
                ))
            }
            _ => builder.with_webpki_verifier(verifier),
        };
        let config = match identity(props, key_type)? {
            Some((chain, key, from)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| setting_error(from, format!("unusable key or certificate: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        Ok(Some(ClientTls {
            config: Arc::new(config),
        }))
    }

    /// The client side of the handshake over `stream`, already connected to `addr`
    /// (`host:port`; the certificate is checked against `host`).
    pub async fn connect_over<S>(
        &self,
        addr: &str,
        stream: S,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<S>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let host = addr
            .rsplit_once(':')
            .map_or(addr, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let name = ServerName::try_from(host)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, stream)
            .await
    }

    /// Opens TCP to `host:port` and does the TLS handshake, checking the certificate against
    /// `host`.
    pub fn dialer(&self) -> Dialer {
        let tls = self.clone();
        Dialer::new(move |addr| {
            let tls = tls.clone();
            let addr = addr.to_string();
            Box::pin(async move {
                let tcp = tokio::net::TcpStream::connect(&addr).await?;
                let _ = tcp.set_nodelay(true);
                let stream = tls.connect_over(&addr, tcp).await?;
                Ok(Box::new(stream) as Box<dyn DialedStream>)
            })
        })
    }
}

/// Client properties; an empty value is no value.
#[derive(Clone, Copy)]
struct Props<'a>(&'a BTreeMap<String, String>);

impl<'a> Props<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The store type a `*.type` setting names, if set.
fn store_type(props: Props<'_>, key: &str) -> Result<Option<StoreType>, TlsSettingError> {
    props
        .get(key)
        .map(|t| StoreType::parse(t).map_err(|reason| setting_error(key, reason)))
        .transpose()
}

/// The CA certificates brokers are verified against.
fn trusted(props: Props<'_>, kind: Option<StoreType>) -> Result<RootCertStore, TlsSettingError> {
    let (certs, key) = if kind == Some(StoreType::Pkcs12) {
        pkcs12_trusted(props)?
    } else {
        let (pem, key) = pem_trusted(props)?;
        let certs = certificates(&pem).map_err(|e| setting_error(key, e.to_string()))?;
        (certs, key)
    };
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| setting_error(key, format!("unusable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// The certificates of `ssl.truststore.location`, a PKCS12 trust store, and that setting.
fn pkcs12_trusted(
    props: Props<'_>,
) -> Result<(Vec<CertificateDer<'static>>, &'static str), TlsSettingError> {
    const LOCATION: &str = "ssl.truststore.location";
    const PASSWORD: &str = "ssl.truststore.password";
    for pem_only in ["ssl.ca.location", "ssl.truststore.certificates"] {
        if props.get(pem_only).is_some() {
            return Err(setting_error(
                pem_only,
                "is PEM; with ssl.truststore.type=PKCS12 the CAs come from ssl.truststore.location",
            ));
        }
    }
    let path = props.get(LOCATION).ok_or_else(|| {
        setting_error(
            LOCATION,
            "ssl.truststore.type=PKCS12 needs the trust store file",
        )
    })?;
    let password = props
        .get(PASSWORD)
        .ok_or_else(|| setting_error(PASSWORD, "a PKCS12 trust store is read with its password"))?;
    let store = std::fs::read(path)
        .map_err(|e| setting_error(LOCATION, format!("cannot read {path}: {e}")))?;
    let certs = pkcs12_certificates(&store, password).map_err(|e| match e {
        Pkcs12Error::WrongPassword => setting_error(PASSWORD, format!("for {LOCATION}: {e}")),
        e => setting_error(LOCATION, e.to_string()),
    })?;
    Ok((certs, LOCATION))
}

/// The PEM text of the CA certificates, and the setting it came from.
fn pem_trusted(props: Props<'_>) -> Result<(Vec<u8>, &'static str), TlsSettingError> {
    let get = |k: &str| props.get(k);
    let (pem, key) = match (
        get("ssl.ca.location").or(get("ssl.truststore.location")),
        get("ssl.truststore.certificates"),
    ) {
        (Some(path), None) => {
            let key = if get("ssl.ca.location").is_some() {
                "ssl.ca.location"
            } else {
                "ssl.truststore.location"
            };
            let pem = std::fs::read(path)
                .map_err(|e| setting_error(key, format!("cannot read {path}: {e}")))?;
            (pem, key)
        }
        (None, Some(inline)) => (inline.as_bytes().to_vec(), "ssl.truststore.certificates"),
        (Some(_), Some(_)) => {
            return Err(setting_error(
                "ssl.truststore.certificates",
                "set it or a CA file (ssl.ca.location, ssl.truststore.location), not both",
            ))
        }
        (None, None) => {
            return Err(setting_error(
                "ssl.ca.location",
                "security.protocol=SSL needs the CA certificates to verify brokers with (ssl.ca.location or ssl.truststore.location)",
            ))
        }
    };
    Ok((pem, key))
}

/// A client certificate chain and key, and the setting the key came from.
type Identity = (
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
    &'static str,
);

/// The client's certificate and key, when it has one (for `ssl.client.auth` on the broker).
/// `ssl.keystore.location` is a PKCS12 store with `ssl.keystore.type=PKCS12`, or when the type
/// is unset and `ssl.keystore.password` is set: librdkafka's keystore is always PKCS12, and a
/// PEM store takes no store password in Kafka.
fn identity(
    props: Props<'_>,
    kind: Option<StoreType>,
) -> Result<Option<Identity>, TlsSettingError> {
    let get = |k: &str| props.get(k);
    let pkcs12 = match kind {
        Some(kind) => kind == StoreType::Pkcs12,
        None => get("ssl.keystore.password").is_some(),
    };
    if pkcs12 && get("ssl.key.location").is_none() {
        return pkcs12_identity_of(props);
    }
    let read = |key: &'static str| -> Result<Option<Vec<u8>>, TlsSettingError> {
        get(key)
            .map(|path| {
                std::fs::read(path)
                    .map_err(|e| setting_error(key, format!("cannot read {path}: {e}")))
            })
            .transpose()
    };
    let password = get("ssl.key.password");
    let (chain_pem, chain_key, key_pem, key_key) = if let Some(key) = read("ssl.key.location")? {
        let chain = read("ssl.certificate.location")?.ok_or_else(|| {
            setting_error(
                "ssl.key.location",
                "needs ssl.certificate.location beside it",
            )
        })?;
        (chain, "ssl.certificate.location", key, "ssl.key.location")
    } else if let Some(store) = read("ssl.keystore.location")? {
        (
            store.clone(),
            "ssl.keystore.location",
            store,
            "ssl.keystore.location",
        )
    } else if let Some(key) = get("ssl.keystore.key") {
        let chain = get("ssl.keystore.certificate.chain").ok_or_else(|| {
            setting_error(
                "ssl.keystore.key",
                "needs ssl.keystore.certificate.chain beside it",
            )
        })?;
        let chain = chain.as_bytes().to_vec();
        (
            chain,
            "ssl.keystore.certificate.chain",
            key.as_bytes().to_vec(),
            "ssl.keystore.key",
        )
    } else {
        return Ok(None);
    };
    let chain = certificates(&chain_pem).map_err(|e| setting_error(chain_key, e.to_string()))?;
    let key = private_key(&key_pem, password).map_err(|e| match e {
        PemError::WrongPassword | PemError::NotEncrypted => {
            setting_error("ssl.key.password", format!("for {key_key}: {e}"))
        }
        e => setting_error(key_key, e.to_string()),
    })?;
    Ok(Some((chain, key, key_key)))
}

/// The client's chain and key from `ssl.keystore.location`, a PKCS12 key store, if set.
fn pkcs12_identity_of(props: Props<'_>) -> Result<Option<Identity>, TlsSettingError> {
    const LOCATION: &str = "ssl.keystore.location";
    const PASSWORD: &str = "ssl.keystore.password";
    for pem_only in ["ssl.keystore.key", "ssl.keystore.certificate.chain"] {
        if props.get(pem_only).is_some() {
            return Err(setting_error(
                pem_only,
                "is PEM; with ssl.keystore.type=PKCS12 the key comes from ssl.keystore.location",
            ));
        }
    }
    let Some(path) = props.get(LOCATION) else {
        return Ok(None);
    };
    let password = props.get(PASSWORD).ok_or_else(|| {
        setting_error(
            PASSWORD,
            "a PKCS12 key store (ssl.keystore.location) needs its password",
        )
    })?;
    if props.get("ssl.key.password").is_some_and(|k| k != password) {
        return Err(setting_error("ssl.key.password", PKCS12_KEY_PASSWORD));
    }
    let store = std::fs::read(path)
        .map_err(|e| setting_error(LOCATION, format!("cannot read {path}: {e}")))?;
    let (chain, key) = pkcs12_identity(&store, password).map_err(|e| match e {
        Pkcs12Error::WrongPassword => setting_error(PASSWORD, format!("for {LOCATION}: {e}")),
        e => setting_error(LOCATION, e.to_string()),
    })?;
    Ok(Some((chain, key, LOCATION)))
}

/// Why `ssl.key.password` is refused beside a PKCS12 key store's different password.
pub const PKCS12_KEY_PASSWORD: &str = "differs from ssl.keystore.password: a PKCS12 key store's key is read with the store's password (keytool and openssl give both one password); leave it unset or set it to the same";

/// Verifies brokers' certificates as webpki does, except their host names
/// (`ssl.endpoint.identification.algorithm=` empty, as Kafka's clients allow).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        ClientTls::from_properties(&props(pairs))
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn plaintext_needs_no_tls_and_ssl_settings_that_cannot_work_are_named() {
        let none = ClientTls::from_properties(&props(&[])).expect("valid");
        assert!(none.is_none());
        let plain = ClientTls::from_properties(&props(&[("security.protocol", "PLAINTEXT")]));
        assert!(plain.expect("valid").is_none());
        let sasl = ClientTls::from_properties(&props(&[("security.protocol", "SASL_PLAINTEXT")]));
        assert!(sasl.expect("valid").is_none(), "SASL_PLAINTEXT: no TLS");
        let e = refused(&[("security.protocol", "SASL_SSL")]);
        assert!(e.starts_with("ssl.ca.location:"), "SASL_SSL is TLS: {e}");
        let e = refused(&[("security.protocol", "TLS")]);
        assert!(e.starts_with("security.protocol:"), "{e}");
        let e = refused(&[("security.protocol", "SSL")]);
        assert!(e.starts_with("ssl.ca.location:"), "{e}");
        let e = refused(&[("security.protocol", "SSL"), ("ssl.truststore.type", "JKS")]);
        assert!(e.starts_with("ssl.truststore.type:"), "{e}");
        let e = refused(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/nonexistent/ca.pem"),
        ]);
        assert!(e.starts_with("ssl.ca.location: cannot read"), "{e}");
        let e = refused(&[
            ("security.protocol", "ssl"),
            ("ssl.truststore.certificates", "not pem"),
        ]);
        assert!(e.starts_with("ssl.truststore.certificates:"), "{e}");
    }

    #[test]
    fn pem_keys_encrypted_or_not() {
        assert!(matches!(
            private_key(b"nothing", None),
            Err(PemError::NoKey(_))
        ));
        let legacy = b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n";
        assert_eq!(
            private_key(legacy, None).map(|_| ()),
            Err(PemError::LegacyEncrypted)
        );
        let encrypted =
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert_eq!(
            private_key(encrypted, None).map(|_| ()),
            Err(PemError::NeedsPassword)
        );
        assert!(matches!(
            private_key(encrypted, Some("pw")),
            Err(PemError::BadEncryptedKey(_))
        ));
        assert_eq!(certificates(b"").map(|_| ()), Err(PemError::NoCertificate));
    }
}

#[cfg(test)]
#[path = "tls_pkcs12_tests.rs"]
mod pkcs12_tests;
