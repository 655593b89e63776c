//! TLS on `SSL` listeners: the rustls server configuration built from Kafka's `ssl.*` settings
//! (per listener, `listener.name.<name>.ssl.*` winning over `ssl.*`), the handshake of an
//! accepted connection, and the principal of a client certificate (its subject name in RFC 2253
//! form, through `ssl.principal.mapping.rules`).
//!
//! Keystores and truststores are PEM (`ssl.keystore.type=PEM`, the default): a file or inline
//! text, keys possibly encrypted PKCS#8 with `ssl.key.password`; or PKCS12 files with their store
//! passwords (read by gregor-client's loader). JKS stores are refused with a message saying how
//! to convert them. Error messages name settings, never their values.
//!
//! A listener's stores are reloaded when IncrementalAlterConfigs changes them
//! ([`ListenerTlsSet`]): each accepted connection takes the configuration served at that moment,
//! and each connection the node opens with a listener's settings ([`PeerTls`]) the client side
//! of that moment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use gregor_client::tls::{ClientTls, Pkcs12Error, StoreType};
use gregor_meta::config::{broker_config, dynamic_listener_ssl, StaticBrokerConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{info, warn};

use crate::security::{KafkaPrincipal, PrincipalMappingRules};

/// The crypto provider of every TLS connection, the client's and the listeners'.
pub use gregor_client::tls::crypto_provider;

/// A problem with a listener's TLS settings, naming the setting (never its value).
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("{key}: {reason}")]
    Setting { key: String, reason: String },
    #[error("{key}: cannot read {path}: {source}")]
    Read {
        key: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listener {listener}: {reason}")]
    Listener { listener: String, reason: String },
}

fn setting_error(key: &str, reason: impl Into<String>) -> TlsConfigError {
    TlsConfigError::Setting {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// One effective setting: the key it came from (a per-listener override or the plain one) and
/// its value.
#[derive(Clone)]
struct Setting {
    key: String,
    value: String,
}

/// The `ssl.*` settings of one listener.
struct SslSettings<'a> {
    settings: &'a StaticBrokerConfig,
    /// `listener.name.<lowercase name>.`
    prefix: String,
}

impl SslSettings<'_> {
    fn of<'a>(settings: &'a StaticBrokerConfig, listener: &str) -> SslSettings<'a> {
        SslSettings {
            settings,
            prefix: format!("listener.name.{}.", listener.to_lowercase()),
        }
    }

    /// The listener's value of `key`: its override, else the plain setting, else the default.
    fn get(&self, key: &str) -> Option<Setting> {
        let overridden = format!("{}{key}", self.prefix);
        if let Some(v) = self.settings.raw(&overridden) {
            return Some(Setting {
                key: overridden,
                value: v.to_string(),
            });
        }
        let value = match self.settings.raw(key) {
            Some(v) => v.to_string(),
            None => broker_config(key)?.default?.to_string(),
        };
        Some(Setting {
            key: key.to_string(),
            value,
        })
        .filter(|s| !s.value.is_empty())
    }
}

/// A TLS listener: what it serves (swapped whole when its stores are reloaded, see
/// [`ListenerTlsSet`]) and how client certificates map to principals. Clones share what is
/// served.
#[derive(Debug, Clone)]
pub struct TlsListener {
    served: Arc<RwLock<Arc<Served>>>,
    pub client_auth: ClientAuth,
    pub rules: Arc<PrincipalMappingRules>,
}

/// The rustls configuration of a listener and the stores it was built from.
struct Served {
    config: Arc<ServerConfig>,
    stores: Stores,
    /// The end-entity certificate, whose names a replacement must keep.
    leaf: CertificateDer<'static>,
}

/// The PEM text the key store (file or inline key and chain) and the trust store held when
/// read: a reload that finds the same text changes nothing. It holds the private key, so
/// `Served` is never printed with it.
#[derive(Clone, PartialEq, Eq)]
struct Stores {
    keystore: Vec<u8>,
    chain: Option<String>,
    truststore: Option<Vec<u8>>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("subject", &subject_name(&self.leaf).ok())
            .finish_non_exhaustive()
    }
}

/// A listener's reloaded stores, checked and ready to serve ([`TlsListener::install`]).
pub struct Replacement(Served);

/// The rustls configuration of a listener's settings, reading its stores now.
fn serve(ssl: &SslSettings<'_>, client_auth: ClientAuth) -> Result<Served, TlsConfigError> {
    let provider = crypto_provider();
    let versions = protocol_versions(ssl)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| setting_error("ssl.enabled.protocols", e.to_string()))?;
    let (builder, trusted) = match client_auth {
        ClientAuth::None => (builder.with_no_client_auth(), None),
        auth => {
            let (roots, pem) = truststore(ssl, auth)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| setting_error("ssl.client.auth", e.to_string()))?;
            (builder.with_client_cert_verifier(verifier), Some(pem))
        }
    };
    let store = keystore(ssl)?;
    let leaf = store
        .chain
        .first()
        .cloned()
        .ok_or_else(|| setting_error(&store.key_setting, "holds no certificate"))?;
    // rustls checks that the key is the certificate's.
    let config = builder
        .with_single_cert(store.chain, store.key)
        .map_err(|e| {
            setting_error(
                &store.key_setting,
                format!("unusable key or certificate: {e}"),
            )
        })?;
    Ok(Served {
        config: Arc::new(config),
        stores: Stores {
            keystore: store.pem,
            chain: store.inline_chain,
            truststore: trusted,
        },
        leaf,
    })
}

impl TlsListener {
    /// Builds the TLS configuration of listener `listener` from the settings (reading the key
    /// and trust stores now, so that a bad store stops start-up).
    pub fn from_settings(
        settings: &StaticBrokerConfig,
        listener: &str,
    ) -> Result<TlsListener, TlsConfigError> {
        let ssl = SslSettings::of(settings, listener);
        let client_auth = client_auth(&ssl)?;
        let served = serve(&ssl, client_auth)?;
        let rules_setting = ssl.get("ssl.principal.mapping.rules");
        let rules = PrincipalMappingRules::parse(
            rules_setting
                .as_ref()
                .map_or("DEFAULT", |s| s.value.as_str()),
        )
        .map_err(|e| {
            let key = rules_setting
                .as_ref()
                .map_or("ssl.principal.mapping.rules", |s| &s.key);
            setting_error(key, e.to_string())
        })?;
        Ok(TlsListener {
            served: Arc::new(RwLock::new(Arc::new(served))),
            client_auth,
            rules: Arc::new(rules),
        })
    }

    /// What the listener serves now.
    fn current(&self) -> Arc<Served> {
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The certificate the listener presents now (its end entity).
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.current().leaf.clone()
    }

    /// The listener's stores as `settings` give them now, read again: `None` when they hold
    /// what is served, else a replacement that loads (the key matches its certificate) and
    /// keeps the served certificate's subject and subjectAltNames unless
    /// `ssl.allow.dn.changes` / `ssl.allow.san.changes` allow otherwise (Kafka's rules).
    pub fn reloaded(
        &self,
        settings: &StaticBrokerConfig,
        listener: &str,
    ) -> Result<Option<Replacement>, TlsConfigError> {
        let ssl = SslSettings::of(settings, listener);
        let served = serve(&ssl, self.client_auth)?;
        let current = self.current();
        if served.stores == current.stores {
            return Ok(None);
        }
        let allowed = |key: &str| {
            ssl.get(key)
                .is_some_and(|s| s.value.eq_ignore_ascii_case("true"))
        };
        names_compatible(
            &current.leaf,
            &served.leaf,
            allowed("ssl.allow.dn.changes"),
            allowed("ssl.allow.san.changes"),
        )
        .map_err(|reason| TlsConfigError::Listener {
            listener: listener.to_string(),
            reason,
        })?;
        Ok(Some(Replacement(served)))
    }

    /// Serves `replacement` to connections accepted from now on; open ones keep their session.
    pub fn install(&self, replacement: Replacement) {
        *self.served.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(replacement.0);
    }

    /// The principal of a connection that presented `peer_certificates` (the end entity's
    /// first): its subject name through the mapping rules; `User:ANONYMOUS` without one.
    pub fn principal(
        &self,
        peer_certificates: Option<&[CertificateDer<'_>]>,
    ) -> Result<KafkaPrincipal, PrincipalError> {
        let Some(cert) = peer_certificates.and_then(|c| c.first()) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let dn = subject_name(cert)?;
        let name = self.rules.name_of(&dn)?;
        Ok(KafkaPrincipal::user(name))
    }
}

/// What the connections a node opens with a listener's settings are for (named in errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// Replica fetchers, to other brokers' inter-broker listener.
    InterBroker,
    /// Quorum RPCs, registration, heartbeats and forwarding, to the controllers.
    Controller,
    /// The console's requests to other nodes' metrics listeners.
    ConsolePeers,
}

impl PeerRole {
    fn describe(self) -> &'static str {
        match self {
            PeerRole::InterBroker => "as the inter-broker listener, connecting to other brokers",
            PeerRole::Controller => "as the controller listener, connecting to the controllers",
            PeerRole::ConsolePeers => "as a client of other nodes' consoles",
        }
    }
}

/// The client side of TLS for connections this broker opens to other brokers' `listener` (the
/// inter-broker listener, for replication): that listener's trust store verifies them, its key
/// store is presented if they ask for a certificate, and `ssl.endpoint.identification.algorithm`
/// (`https`, or empty for none) decides whether their host names are checked.
pub fn inter_broker_client(
    settings: &StaticBrokerConfig,
    listener: &str,
) -> Result<PeerTls, TlsConfigError> {
    PeerTls::from_settings(settings, listener, PeerRole::InterBroker)
}

/// The client side of TLS for connections this node opens to the controllers' `listener` (the
/// first of `controller.listener.names`): quorum RPCs, registration, heartbeats and forwarded
/// requests. As in Kafka, the controller listener's own settings are used as a client (see
/// [`inter_broker_client`]).
pub fn controller_client(
    settings: &StaticBrokerConfig,
    listener: &str,
) -> Result<PeerTls, TlsConfigError> {
    PeerTls::from_settings(settings, listener, PeerRole::Controller)
}

/// Kafka's client properties for `listener`'s peers from that listener's `ssl.*` settings
/// (pure: the stores are named, not read).
fn client_properties(settings: &StaticBrokerConfig, listener: &str) -> BTreeMap<String, String> {
    let ssl = SslSettings::of(settings, listener);
    let mut props = BTreeMap::from([("security.protocol".to_string(), "SSL".to_string())]);
    for key in [
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.truststore.password",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.password",
        "ssl.key.password",
    ] {
        if let Some(s) = ssl.get(key) {
            props.insert(key.to_string(), s.value);
        }
    }
    // Set to empty, it turns the host name check off: the empty value counts.
    let algorithm = "ssl.endpoint.identification.algorithm";
    let identification = settings
        .raw(&format!("{}{algorithm}", ssl.prefix))
        .or(settings.raw(algorithm))
        .unwrap_or("https");
    props.insert(algorithm.to_string(), identification.to_string());
    props
}

/// The client side of TLS to a listener's peers, taken by each new connection when it
/// connects, and replaced whole when the listener's stores are reloaded ([`ListenerTlsSet`]):
/// open connections keep their session. Clones share it.
#[derive(Clone)]
pub struct PeerTls {
    listener: String,
    role: PeerRole,
    built: Arc<RwLock<Arc<PeerClient>>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("listener", &self.listener)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// A client configuration and what it was built from. It holds the key, so it is never printed.
struct PeerClient {
    tls: ClientTls,
    /// The client properties and the store texts they named when read: a rebuild that finds
    /// the same changes nothing.
    source: (BTreeMap<String, String>, Stores),
    /// The certificate presented to peers, if the listener has a key store.
    leaf: Option<CertificateDer<'static>>,
}

/// A reloaded client side, checked and ready for new connections ([`PeerTls::install`]).
pub struct PeerReplacement(PeerClient);

/// The client of `listener`'s peers its settings give now, reading its stores now.
fn peer_client(
    settings: &StaticBrokerConfig,
    listener: &str,
    role: PeerRole,
) -> Result<PeerClient, TlsConfigError> {
    let ssl = SslSettings::of(settings, listener);
    let props = client_properties(settings, listener);
    let has_keystore =
        ssl.get("ssl.keystore.location").is_some() || ssl.get("ssl.keystore.key").is_some();
    let store = has_keystore.then(|| keystore(&ssl)).transpose()?;
    let truststore = pem_source(
        &ssl,
        "ssl.truststore.certificates",
        "ssl.truststore.location",
    )?;
    let tls = match ClientTls::from_properties(&props) {
        Ok(Some(tls)) => tls,
        Ok(None) => return Err(setting_error("security.protocol", "SSL expected")),
        Err(e) => {
            return Err(TlsConfigError::Listener {
                listener: listener.to_string(),
                reason: format!("{}: {e}", role.describe()),
            })
        }
    };
    let leaf = store.as_ref().and_then(|s| s.chain.first().cloned());
    let stores = Stores {
        keystore: store.as_ref().map(|s| s.pem.clone()).unwrap_or_default(),
        chain: store.and_then(|s| s.inline_chain),
        truststore: truststore.map(|(pem, _)| pem),
    };
    Ok(PeerClient {
        tls,
        source: (props, stores),
        leaf,
    })
}

impl PeerTls {
    /// The client of `listener`'s peers, for `role`, from that listener's settings (reading
    /// its stores now, so that a bad store stops start-up).
    pub fn from_settings(
        settings: &StaticBrokerConfig,
        listener: &str,
        role: PeerRole,
    ) -> Result<PeerTls, TlsConfigError> {
        let built = peer_client(settings, listener, role)?;
        Ok(PeerTls {
            listener: listener.to_lowercase(),
            role,
            built: Arc::new(RwLock::new(Arc::new(built))),
        })
    }

    /// The configuration a connection opened now uses.
    pub fn current(&self) -> ClientTls {
        self.built
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .tls
            .clone()
    }

    /// The certificate presented to peers now, if any.
    pub fn certificate(&self) -> Option<CertificateDer<'static>> {
        self.built
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .leaf
            .clone()
    }

    /// The client `settings` give now, read again: `None` when it is what is used, else a
    /// replacement that loads and, as Kafka's `SslFactory` requires of any reconfiguration,
    /// keeps a key store if there was one (and adds none) and keeps its certificate's subject
    /// and subjectAltNames unless `ssl.allow.dn.changes` / `ssl.allow.san.changes` allow it.
    pub fn reloaded(
        &self,
        settings: &StaticBrokerConfig,
    ) -> Result<Option<PeerReplacement>, TlsConfigError> {
        let new = peer_client(settings, &self.listener, self.role)?;
        let current = self
            .built
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if new.source == current.source {
            return Ok(None);
        }
        let refused = |reason: String| TlsConfigError::Listener {
            listener: self.listener.clone(),
            reason: format!("{}: {reason}", self.role.describe()),
        };
        match (&current.leaf, &new.leaf) {
            (None, None) => {}
            (Some(old), Some(leaf)) => {
                let ssl = SslSettings::of(settings, &self.listener);
                let allowed = |key: &str| {
                    ssl.get(key)
                        .is_some_and(|s| s.value.eq_ignore_ascii_case("true"))
                };
                names_compatible(
                    old,
                    leaf,
                    allowed("ssl.allow.dn.changes"),
                    allowed("ssl.allow.san.changes"),
                )
                .map_err(refused)?;
            }
            (Some(_), None) => return Err(refused("the key store cannot be removed".into())),
            (None, Some(_)) => {
                return Err(refused(
                    "a key store cannot be added where none was configured at start-up".into(),
                ))
            }
        }
        Ok(Some(PeerReplacement(new)))
    }

    /// Connections opened from now on use `replacement`; open ones keep their session.
    pub fn install(&self, replacement: PeerReplacement) {
        *self.built.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(replacement.0);
    }
}

/// The TLS a node's listeners serve and the client side of its connections to other nodes,
/// reloaded when IncrementalAlterConfigs changes a listener's stores
/// (`listener.name.<l>.ssl.keystore.location` and the other
/// [`gregor_meta::config::DYNAMIC_LISTENER_SSL_CONFIGS`], on this node's broker resource), as
/// Kafka's dynamic SSL update does: the client listeners, the controller listener a controller
/// serves, and, as a client, the inter-broker listener (replica fetchers) and the controller
/// listener (connections to the controllers). The node validates a change before the
/// controller commits it ([`ListenerTlsSet::validate`]) and uses it once its metadata image has
/// it ([`ListenerTlsSet::apply`]), re-reading the files even when the setting is set to the same
/// value. New connections get the new stores; open ones keep their session.
#[derive(Clone)]
pub struct ListenerTlsSet {
    static_config: StaticBrokerConfig,
    /// TLS listeners this node serves, by lower-case name.
    listeners: BTreeMap<String, TlsListener>,
    /// The client side of connections to other nodes, by the lower-case name of the listener
    /// whose settings they use.
    peers: Vec<(String, PeerTls)>,
}

impl ListenerTlsSet {
    /// The set over `listeners` (name, TLS: served here) and `peers` (the client side of
    /// connections to other nodes), whose static settings are `static_config`.
    pub fn new<'a>(
        static_config: &StaticBrokerConfig,
        listeners: impl IntoIterator<Item = (&'a str, &'a TlsListener)>,
        peers: impl IntoIterator<Item = &'a PeerTls>,
    ) -> ListenerTlsSet {
        ListenerTlsSet {
            static_config: static_config.clone(),
            listeners: listeners
                .into_iter()
                .map(|(name, tls)| (name.to_lowercase(), tls.clone()))
                .collect(),
            peers: peers
                .into_iter()
                .map(|p| (p.listener.clone(), p.clone()))
                .collect(),
        }
    }

    /// The static settings with this node's dynamic overrides (`overrides`, the configs of
    /// its broker resource) of the listeners' stores.
    fn settings(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Result<StaticBrokerConfig, TlsConfigError> {
        let mut settings = self.static_config.clone();
        for (key, value) in overrides {
            if dynamic_listener_ssl(key).is_some() {
                settings
                    .set(key, value)
                    .map_err(|e| setting_error(key, e.to_string()))?;
            }
        }
        Ok(settings)
    }

    /// The peers' clients that use `listener`'s settings.
    fn peers_of<'a>(&'a self, listener: &'a str) -> impl Iterator<Item = &'a PeerTls> + 'a {
        self.peers
            .iter()
            .filter(move |(name, _)| name == listener)
            .map(|(_, p)| p)
    }

    /// Checks what `overrides` (this node's broker configs once a change is applied) would
    /// give the listeners a change names (`touched`, lower-case): each must be a TLS listener
    /// this node serves or connects to others with, whose new stores load and keep the
    /// certificate's names (see [`TlsListener::reloaded`], [`PeerTls::reloaded`]). Nothing is
    /// used yet.
    pub fn validate(
        &self,
        overrides: &BTreeMap<String, String>,
        touched: &BTreeSet<String>,
    ) -> Result<(), TlsConfigError> {
        let settings = self.settings(overrides)?;
        for name in touched {
            let served = self.listeners.get(name);
            if served.is_none() && self.peers_of(name).next().is_none() {
                return Err(TlsConfigError::Listener {
                    listener: name.clone(),
                    reason: "this node neither serves an SSL or SASL_SSL listener of that name nor connects to other nodes with its settings".to_string(),
                });
            }
            if let Some(tls) = served {
                tls.reloaded(&settings, name)?;
            }
            for peer in self.peers_of(name) {
                peer.reloaded(&settings)?;
            }
        }
        Ok(())
    }

    /// Uses on each listener and peer client what `overrides` (this node's broker configs,
    /// just applied) give it, re-reading its stores; one whose stores hold what it uses is
    /// left alone, and one whose new stores do not load, or change the certificate's names,
    /// keeps what it uses (logged: the change was validated when made, so the files changed
    /// since).
    pub fn apply(&self, overrides: Option<&BTreeMap<String, String>>) {
        let empty = BTreeMap::new();
        let settings = match self.settings(overrides.unwrap_or(&empty)) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "dynamic listener TLS settings not applied");
                return;
            }
        };
        for (name, tls) in &self.listeners {
            match tls.reloaded(&settings, name) {
                Ok(None) => {}
                Ok(Some(replacement)) => {
                    let subject = subject_name(&replacement.0.leaf).unwrap_or_default();
                    tls.install(replacement);
                    info!(listener = %name, %subject, "serving the listener's reloaded key and trust stores");
                }
                Err(e) => {
                    warn!(listener = %name, error = %e, "listener keeps its certificate: its reloaded stores are unusable");
                }
            }
        }
        for (name, peer) in &self.peers {
            match peer.reloaded(&settings) {
                Ok(None) => {}
                Ok(Some(replacement)) => {
                    peer.install(replacement);
                    info!(listener = %name, role = ?peer.role, "new connections to other nodes use the listener's reloaded key and trust stores");
                }
                Err(e) => {
                    warn!(listener = %name, role = ?peer.role, error = %e, "connections to other nodes keep their certificate: the listener's reloaded stores are unusable");
                }
            }
        }
    }
}

/// Kafka's rule for a replacement key store: the end-entity certificate keeps its subject
/// (compared as RFC 2253 names, ignoring case) unless `allow_dn`, and the same set of
/// subjectAltNames unless `allow_san`, so clients that check names keep connecting.
fn names_compatible(
    old: &CertificateDer<'_>,
    new: &CertificateDer<'_>,
    allow_dn: bool,
    allow_san: bool,
) -> Result<(), String> {
    let unreadable = |e: PrincipalError| format!("new certificate: {e}");
    if !allow_dn {
        let (was, is) = (
            subject_name(old).map_err(unreadable)?,
            subject_name(new).map_err(unreadable)?,
        );
        if !was.eq_ignore_ascii_case(&is) {
            return Err(format!(
                "the new certificate's subject '{is}' differs from the served one's '{was}' (set ssl.allow.dn.changes=true to allow it)"
            ));
        }
    }
    if !allow_san
        && subject_alt_names(old).map_err(unreadable)?
            != subject_alt_names(new).map_err(unreadable)?
    {
        return Err("the new certificate's subjectAltNames differ from the served one's (set ssl.allow.san.changes=true to allow it)".to_string());
    }
    Ok(())
}

/// The DER encodings of a certificate's subjectAltName entries.
fn subject_alt_names(cert: &CertificateDer<'_>) -> Result<BTreeSet<Vec<u8>>, PrincipalError> {
    use x509_cert::der::oid::AssociatedOid;
    use x509_cert::der::{Decode, Encode};
    use x509_cert::ext::pkix::SubjectAltName;
    let bad = |e: x509_cert::der::Error| PrincipalError::Certificate(e.to_string());
    let cert = x509_cert::Certificate::from_der(cert.as_ref()).map_err(bad)?;
    let mut names = BTreeSet::new();
    let extensions = cert.tbs_certificate.extensions.unwrap_or_default();
    for ext in extensions
        .iter()
        .filter(|e| e.extn_id == SubjectAltName::OID)
    {
        let san = SubjectAltName::from_der(ext.extn_value.as_bytes()).map_err(bad)?;
        for name in san.0 {
            names.insert(name.to_der().map_err(bad)?);
        }
    }
    Ok(names)
}

/// Why a TLS connection did not get as far as its first request.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("TLS handshake not finished within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
}

impl TlsListener {
    /// The server side of the handshake on an accepted connection, bounded by `timeout` (a
    /// client that never finishes it must not hold a connection slot), and the principal it
    /// authenticated as.
    pub async fn accept<IO>(
        &self,
        io: IO,
        timeout: Option<Duration>,
    ) -> Result<(tokio_rustls::server::TlsStream<IO>, KafkaPrincipal), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self.current().config.clone();
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(io);
        let stream = match timeout {
            Some(t) => tokio::time::timeout(t, handshake)
                .await
                .map_err(|_| HandshakeError::TimedOut(t))?,
            None => handshake.await,
        }
        .map_err(HandshakeError::Handshake)?;
        let principal = self.principal(stream.get_ref().1.peer_certificates())?;
        Ok((stream, principal))
    }
}

/// Why a client certificate gives no principal.
#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    #[error("client certificate is not valid X.509: {0}")]
    Certificate(String),
    #[error(transparent)]
    NoMatchingRule(#[from] crate::security::NoMatchingRule),
}

/// `ssl.enabled.protocols` (with `ssl.protocol=TLSv1.2` ruling out TLSv1.3, as in Kafka).
fn protocol_versions(
    ssl: &SslSettings<'_>,
) -> Result<Vec<&'static SupportedProtocolVersion>, TlsConfigError> {
    let enabled = ssl
        .get("ssl.enabled.protocols")
        .ok_or_else(|| setting_error("ssl.enabled.protocols", "must name TLSv1.2 or TLSv1.3"))?;
    let cap_at_12 = match ssl.get("ssl.protocol") {
        Some(p) => match p.value.as_str() {
            "TLSv1.3" | "TLS" => false,
            "TLSv1.2" => true,
            other => {
                return Err(setting_error(
                    &p.key,
                    format!("'{other}' is not supported; use TLSv1.3 or TLSv1.2"),
                ))
            }
        },
        None => false,
    };
    let mut versions = Vec::new();
    for name in enabled
        .value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        match name {
            "TLSv1.3" if !cap_at_12 => versions.push(&rustls::version::TLS13),
            "TLSv1.3" => {}
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            other => {
                return Err(setting_error(
                    &enabled.key,
                    format!("'{other}' is not supported: Gregor speaks only TLSv1.2 and TLSv1.3"),
                ))
            }
        }
    }
    if versions.is_empty() {
        return Err(setting_error(
            &enabled.key,
            "enables no protocol Gregor speaks (TLSv1.2, TLSv1.3)",
        ));
    }
    Ok(versions)
}

fn client_auth(ssl: &SslSettings<'_>) -> Result<ClientAuth, TlsConfigError> {
    let Some(s) = ssl.get("ssl.client.auth") else {
        return Ok(ClientAuth::None);
    };
    match s.value.as_str() {
        "none" => Ok(ClientAuth::None),
        "requested" => Ok(ClientAuth::Requested),
        "required" => Ok(ClientAuth::Required),
        _ => Err(setting_error(&s.key, "must be none, requested or required")),
    }
}

/// The store type `key` (`ssl.keystore.type`, `ssl.truststore.type`) names: PEM or PKCS12;
/// others (JKS) are refused, saying how to convert.
fn store_type(ssl: &SslSettings<'_>, key: &str) -> Result<StoreType, TlsConfigError> {
    match ssl.get(key) {
        None => Ok(StoreType::Pem),
        Some(t) => StoreType::parse(&t.value).map_err(|reason| setting_error(&t.key, reason)),
    }
}

/// Refuses PEM-only settings (inline stores) beside a PKCS12 store, which is a file.
fn check_no_inline(
    ssl: &SslSettings<'_>,
    keys: &[&str],
    location: &str,
) -> Result<(), TlsConfigError> {
    match keys.iter().find_map(|k| ssl.get(k)) {
        Some(s) => Err(setting_error(
            &s.key,
            format!("is PEM; a PKCS12 store is a file, set with {location}"),
        )),
        None => Ok(()),
    }
}

/// A PKCS12 store: the file `location_key` names, the password `password_key` names, and the
/// settings they came from.
fn pkcs12_source(
    ssl: &SslSettings<'_>,
    location_key: &str,
    password_key: &str,
) -> Result<Option<(Vec<u8>, String, Setting)>, TlsConfigError> {
    let Some(location) = ssl.get(location_key) else {
        return Ok(None);
    };
    let password = ssl.get(password_key).ok_or_else(|| {
        setting_error(
            password_key,
            format!(
                "a PKCS12 store ({}) is read with its password",
                location.key
            ),
        )
    })?;
    let path = PathBuf::from(&location.value);
    let bytes = std::fs::read(&path).map_err(|source| TlsConfigError::Read {
        key: location.key.clone(),
        path,
        source,
    })?;
    Ok(Some((bytes, location.key, password)))
}

/// A PKCS12 loader's error, naming the password's setting when the password is the problem,
/// else the store's.
fn pkcs12_error(e: Pkcs12Error, store: &str, password: &Setting) -> TlsConfigError {
    match e {
        Pkcs12Error::WrongPassword => setting_error(&password.key, format!("for {store}: {e}")),
        e => setting_error(store, e.to_string()),
    }
}

/// Refuses a store password: PEM stores have none (only the key has, `ssl.key.password`).
fn check_no_store_password(ssl: &SslSettings<'_>, key: &str) -> Result<(), TlsConfigError> {
    match ssl.get(key) {
        Some(s) => Err(setting_error(
            &s.key,
            "PEM stores take no store password (an encrypted key takes ssl.key.password)",
        )),
        None => Ok(()),
    }
}

/// PEM text from `inline_key` or the file `location_key` names; the setting it came from.
fn pem_source(
    ssl: &SslSettings<'_>,
    inline_key: &str,
    location_key: &str,
) -> Result<Option<(Vec<u8>, String)>, TlsConfigError> {
    match (ssl.get(inline_key), ssl.get(location_key)) {
        (Some(inline), Some(location)) => Err(setting_error(
            &inline.key,
            format!("set it or {}, not both", location.key),
        )),
        (Some(inline), None) => Ok(Some((inline.value.into_bytes(), inline.key))),
        (None, Some(location)) => {
            let path = PathBuf::from(&location.value);
            let bytes = std::fs::read(&path).map_err(|source| TlsConfigError::Read {
                key: location.key.clone(),
                path,
                source,
            })?;
            Ok(Some((bytes, location.key)))
        }
        (None, None) => Ok(None),
    }
}

/// Certificates of a PEM text; an error naming `key` when it holds none.
fn certificates(pem: &[u8], key: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    gregor_client::tls::certificates(pem).map_err(|e| setting_error(key, e.to_string()))
}

/// The trust store client certificates are verified against, and its PEM text.
fn truststore(
    ssl: &SslSettings<'_>,
    auth: ClientAuth,
) -> Result<(RootCertStore, Vec<u8>), TlsConfigError> {
    let pkcs12 = store_type(ssl, "ssl.truststore.type")? == StoreType::Pkcs12;
    if pkcs12 {
        check_no_inline(
            ssl,
            &["ssl.truststore.certificates"],
            "ssl.truststore.location",
        )?;
    } else {
        check_no_store_password(ssl, "ssl.truststore.password")?;
    }
    let source = if pkcs12 {
        pkcs12_source(ssl, "ssl.truststore.location", "ssl.truststore.password")?
            .map(|(bytes, key, password)| (bytes, key, Some(password)))
    } else {
        pem_source(
            ssl,
            "ssl.truststore.certificates",
            "ssl.truststore.location",
        )?
        .map(|(bytes, key)| (bytes, key, None))
    };
    let Some((pem, key, password)) = source else {
        let mode = if auth == ClientAuth::Required {
            "required"
        } else {
            "requested"
        };
        return Err(setting_error(
            "ssl.client.auth",
            format!("'{mode}' needs the CA certificates to verify clients with: set ssl.truststore.location or ssl.truststore.certificates"),
        ));
    };
    let certs = match &password {
        Some(password) => gregor_client::tls::pkcs12_certificates(&pem, &password.value)
            .map_err(|e| pkcs12_error(e, &key, password))?,
        None => certificates(&pem, &key)?,
    };
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| setting_error(&key, format!("unusable CA certificate: {e}")))?;
    }
    Ok((roots, pem))
}

/// A listener's key store as read.
struct KeyStore {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// The setting the key came from.
    key_setting: String,
    /// The key store file's text, or the inline key's.
    pem: Vec<u8>,
    /// The inline certificate chain (`ssl.keystore.certificate.chain`), if the key is inline.
    inline_chain: Option<String>,
}

/// The listener's certificate chain and private key.
fn keystore(ssl: &SslSettings<'_>) -> Result<KeyStore, TlsConfigError> {
    if store_type(ssl, "ssl.keystore.type")? == StoreType::Pkcs12 {
        return pkcs12_keystore(ssl);
    }
    check_no_store_password(ssl, "ssl.keystore.password")?;
    let password = ssl.get("ssl.key.password");
    if let Some((pem, key)) = pem_source(ssl, "ssl.keystore.key", "ssl.keystore.location")? {
        // A keystore file holds the key and its chain; inline, the chain is a setting of its own.
        let (chain, inline_chain) = if key.ends_with("ssl.keystore.key") {
            let chain = ssl.get("ssl.keystore.certificate.chain").ok_or_else(|| {
                setting_error(&key, "needs ssl.keystore.certificate.chain beside it")
            })?;
            (
                certificates(chain.value.as_bytes(), &chain.key)?,
                Some(chain.value),
            )
        } else {
            if let Some(chain) = ssl.get("ssl.keystore.certificate.chain") {
                return Err(setting_error(
                    &chain.key,
                    format!("set it with ssl.keystore.key, not with {key}"),
                ));
            }
            (certificates(&pem, &key)?, None)
        };
        let private_key = private_key(&pem, &key, password.as_ref())?;
        return Ok(KeyStore {
            chain,
            key: private_key,
            key_setting: key,
            pem,
            inline_chain,
        });
    }
    Err(setting_error(
        "ssl.keystore.location",
        "an SSL listener needs its certificate and key: set ssl.keystore.location (a PEM file with the key and its certificate chain) or ssl.keystore.key with ssl.keystore.certificate.chain",
    ))
}

/// The listener's chain and key from a PKCS12 key store (`ssl.keystore.location` with
/// `ssl.keystore.password`; `ssl.key.password`, if set, must be the same, as the store's key is
/// read with the store's password).
fn pkcs12_keystore(ssl: &SslSettings<'_>) -> Result<KeyStore, TlsConfigError> {
    check_no_inline(
        ssl,
        &["ssl.keystore.key", "ssl.keystore.certificate.chain"],
        "ssl.keystore.location",
    )?;
    let Some((store, key, password)) =
        pkcs12_source(ssl, "ssl.keystore.location", "ssl.keystore.password")?
    else {
        return Err(setting_error(
            "ssl.keystore.location",
            "an SSL listener needs its certificate and key: with ssl.keystore.type=PKCS12, set ssl.keystore.location (and ssl.keystore.password)",
        ));
    };
    if let Some(k) = ssl.get("ssl.key.password") {
        if k.value != password.value {
            return Err(setting_error(
                &k.key,
                gregor_client::tls::PKCS12_KEY_PASSWORD,
            ));
        }
    }
    let (chain, private_key) = gregor_client::tls::pkcs12_identity(&store, &password.value)
        .map_err(|e| pkcs12_error(e, &key, &password))?;
    Ok(KeyStore {
        chain,
        key: private_key,
        key_setting: key,
        pem: store,
        inline_chain: None,
    })
}

/// The private key of a PEM text (see [`gregor_client::tls::private_key`]); errors name `key`,
/// or the password's setting when the password is the problem.
fn private_key(
    pem: &[u8],
    key: &str,
    password: Option<&Setting>,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    use gregor_client::tls::PemError;
    gregor_client::tls::private_key(pem, password.map(|p| p.value.as_str())).map_err(|e| {
        match (&e, password) {
            (PemError::NeedsPassword, _) => {
                setting_error(key, "holds an encrypted key: set ssl.key.password")
            }
            (PemError::WrongPassword | PemError::NotEncrypted, Some(p)) => {
                setting_error(&p.key, format!("for {key}: {e}"))
            }
            _ => setting_error(key, e.to_string()),
        }
    })
}

/// The certificate's subject name as Java's `X500Principal.getName()` writes it (RFC 2253):
/// last RDN first, `,` between RDNs, `+` within one, known attribute names (CN, OU, ...), other
/// attributes as `OID=#hex`.
pub fn subject_name(cert: &CertificateDer<'_>) -> Result<String, PrincipalError> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(cert.as_ref())
        .map_err(|e| PrincipalError::Certificate(e.to_string()))?;
    let rdns: Vec<String> = cert
        .tbs_certificate
        .subject
        .0
        .iter()
        .rev()
        .map(|rdn| rdn.0.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Ok(rdns.join(","))
}

/// One `type=value` of a subject name.
fn attribute(atv: &x509_cert::attr::AttributeTypeAndValue) -> String {
    use x509_cert::der::{Encode, Tag, Tagged};
    let oid = atv.oid.to_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        _ => None,
    };
    let text = match atv.value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::VisibleString => {
            std::str::from_utf8(atv.value.value())
                .ok()
                .map(str::to_string)
        }
        // ISO 8859-1, as Java reads it.
        Tag::TeletexString => Some(atv.value.value().iter().map(|b| char::from(*b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = atv
                .value
                .value()
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    };
    match (keyword, text) {
        (Some(k), Some(t)) => format!("{k}={}", escape(&t)),
        (k, _) => {
            let der = atv.value.to_der().unwrap_or_default();
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", k.unwrap_or(&oid))
        }
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "tls_pkcs12_tests.rs"]
mod pkcs12_tests;
