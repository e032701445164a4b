//! TLS on the gRPC listener, as envoyproxy/ratelimit's `GRPC_SERVER_USE_TLS` reads it: the
//! server's certificate chain and key (`--grpc-tls-cert`, `--grpc-tls-key`); with a client
//! CA (`--grpc-tls-client-ca`), mutual TLS: a client certificate signed by it is required;
//! with a client SAN too (`--grpc-tls-client-san`), the certificate must also carry that
//! name, compared as Go's `VerifyHostname` does (an IP address against the IP SANs, anything
//! else against the DNS SANs, wildcards included; never the subject's common name).
//!
//! The pair is read again when its files change (a Kubernetes secret's update swaps the
//! directory's `..data` symlink, so the directories are watched, as `reload` watches the
//! configuration's); a new pair that cannot be read or does not match is logged and the one
//! in force keeps serving. New handshakes take the new pair; open connections keep theirs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::client::verify_server_name;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{
    ClientHello, ParsedCertificate, ResolvesServerCert, WebPkiClientVerifier,
};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio_rustls::TlsAcceptor;

/// The gRPC listener's TLS settings (the command line's `--grpc-tls-*`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GrpcTls {
    /// The PEM certificate chain, the server's own first.
    pub cert: PathBuf,
    /// The PEM private key of the chain's first certificate.
    pub key: PathBuf,
    /// The PEM CA a client certificate must be signed by; none: no client certificate asked.
    pub client_ca: Option<PathBuf>,
    /// A DNS name or IP address the client certificate's SANs must include (with
    /// `client_ca`).
    pub client_san: Option<String>,
}

impl GrpcTls {
    /// TLS with this certificate chain and key, no client certificate asked.
    pub fn new(cert: PathBuf, key: PathBuf) -> GrpcTls {
        GrpcTls {
            cert,
            key,
            client_ca: None,
            client_san: None,
        }
    }
}

/// Why the gRPC listener's TLS could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    Read {
        /// The setting that names it.
        setting: TlsSetting,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file was read but holds no usable PEM item of the kind its setting needs.
    Content {
        /// The setting that names it.
        setting: TlsSetting,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the key of the chain's first certificate.
    Mismatch {
        /// The certificate chain.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
    },
    /// The client SAN is neither a DNS name nor an IP address.
    ClientSan {
        /// The value given.
        san: String,
    },
    /// The files' directories could not be watched for a new pair.
    Watch {
        /// The directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A setting of the gRPC listener's TLS, named by its flag and its variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsSetting {
    /// `--grpc-tls-cert`, `GRPC_SERVER_TLS_CERT`.
    Cert,
    /// `--grpc-tls-key`, `GRPC_SERVER_TLS_KEY`.
    Key,
    /// `--grpc-tls-client-ca`, `GRPC_CLIENT_TLS_CACERT`.
    ClientCa,
}

impl fmt::Display for TlsSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsSetting::Cert => "--grpc-tls-cert (GRPC_SERVER_TLS_CERT)",
            TlsSetting::Key => "--grpc-tls-key (GRPC_SERVER_TLS_KEY)",
            TlsSetting::ClientCa => "--grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT)",
        })
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { setting, path, .. } => {
                write!(f, "{setting} {}: cannot read it", path.display())
            }
            TlsError::Content {
                setting,
                path,
                reason,
            } => write!(f, "{setting} {}: {reason}", path.display()),
            TlsError::Mismatch { cert, key } => write!(
                f,
                "{} {}: not the key of {} {}",
                TlsSetting::Key,
                key.display(),
                TlsSetting::Cert,
                cert.display()
            ),
            TlsError::ClientSan { san } => write!(
                f,
                "--grpc-tls-client-san (GRPC_CLIENT_TLS_SAN) {san:?}: \
                 neither a DNS name nor an IP address"
            ),
            TlsError::Watch { dir, reason } => write!(
                f,
                "cannot watch {} for a new gRPC certificate: {reason}",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The acceptor of the gRPC listener's handshakes, and the watcher that swaps its
/// certificate when the files change (it stops when dropped).
pub fn acceptor(tls: &GrpcTls) -> Result<(TlsAcceptor, notify::RecommendedWatcher), TlsError> {
    let provider = Arc::new(ring::default_provider());
    let pair = load_pair(&tls.cert, &tls.key, &provider)?;
    let resolver = Arc::new(Resolver(ArcSwap::new(pair)));
    let verifier = match &tls.client_ca {
        None => WebPkiClientVerifier::no_client_auth(),
        Some(ca) => {
            let roots = client_roots(ca)?;
            let webpki = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsError::Content {
                    setting: TlsSetting::ClientCa,
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
            match &tls.client_san {
                None => webpki,
                Some(san) => Arc::new(NamedClient {
                    inner: webpki,
                    name: ServerName::try_from(san.trim().to_owned()).map_err(|_| {
                        TlsError::ClientSan {
                            san: san.to_owned(),
                        }
                    })?,
                }),
            }
        }
    };
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Content {
            setting: TlsSetting::Cert,
            path: tls.cert.clone(),
            reason: e.to_string(),
        })?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver.clone());
    // gRPC runs on HTTP/2, which clients (grpc-go, grpc-core) ask for by ALPN.
    config.alpn_protocols = vec![b"h2".to_vec()];
    let watcher = watch(resolver, tls.cert.clone(), tls.key.clone(), provider)?;
    Ok((TlsAcceptor::from(Arc::new(config)), watcher))
}

/// The certificate chain and its key, checked to belong together.
fn load_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain_pem = read(TlsSetting::Cert, cert)?;
    let chain = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(TlsSetting::Cert, cert, format!("not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(content(TlsSetting::Cert, cert, "no PEM certificate in it"));
    }
    let key_pem = read(TlsSetting::Key, key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        content(
            TlsSetting::Key,
            key,
            format!("no PEM private key in it: {e}"),
        )
    })?;
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| content(TlsSetting::Key, key, format!("unusable private key: {e}")))?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) => Ok(Arc::new(pair)),
        Err(tokio_rustls::rustls::Error::InconsistentKeys(
            tokio_rustls::rustls::InconsistentKeys::KeyMismatch,
        )) => Err(TlsError::Mismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
        }),
        Err(e) => Err(content(TlsSetting::Cert, cert, e.to_string())),
    }
}

/// The client CA's certificates.
fn client_roots(ca: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let pem = read(TlsSetting::ClientCa, ca)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| content(TlsSetting::ClientCa, ca, format!("not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| content(TlsSetting::ClientCa, ca, e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(content(
            TlsSetting::ClientCa,
            ca,
            "no PEM certificate in it",
        ));
    }
    Ok(Arc::new(roots))
}

fn read(setting: TlsSetting, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

fn content(setting: TlsSetting, path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Content {
        setting,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The pair in force, for every new handshake.
#[derive(Debug)]
struct Resolver(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// Changes closer together than this are read as one (a secret's files change together).
const SETTLE: Duration = Duration::from_millis(100);

/// Watches the directories of `cert` and `key`; on a change reads the pair again and swaps
/// it in, or logs why not and keeps the one in force.
fn watch(
    resolver: Arc<Resolver>,
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
) -> Result<notify::RecommendedWatcher, TlsError> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let names: Vec<_> = [&cert, &key]
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
        .collect();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event {
            let relevant = e.paths.iter().any(|p| {
                p.file_name().is_some_and(|n| {
                    // `..data` and its timestamped targets: a Kubernetes secret's swap.
                    n.to_string_lossy().starts_with("..") || names.iter().any(|f| f == n)
                })
            });
            if relevant && !e.kind.is_access() {
                // A full channel already holds a pending reload.
                let _ = tx.try_send(());
            }
        }
    })
    .map_err(|e| TlsError::Watch {
        dir: directory(&cert),
        reason: e.to_string(),
    })?;
    let mut dirs = vec![directory(&cert), directory(&key)];
    dirs.dedup();
    for dir in dirs {
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| TlsError::Watch {
                dir: dir.clone(),
                reason: e.to_string(),
            })?;
    }
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            match load_pair(&cert, &key, &provider) {
                Ok(pair) => {
                    resolver.0.store(pair);
                    tracing::info!(cert = %cert.display(), key = %key.display(), "gRPC certificate reloaded");
                }
                Err(e) => {
                    tracing::error!(error = %e, "gRPC certificate not reloaded; the previous one stays in force");
                }
            }
        }
    });
    Ok(watcher)
}

/// The directory holding `path` (`.` for a bare file name).
fn directory(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// A client verifier that also requires a name among the certificate's SANs
/// (`GRPC_CLIENT_TLS_SAN`), after the chain checks of `inner`.
#[derive(Debug)]
struct NamedClient {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for NamedClient {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_name(&cert, &self.name).inspect_err(|e| {
            tracing::warn!(error = %e, expected = ?self.name, "gRPC client certificate refused: the SAN is not among its names");
        })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
