//! The TLS settings of `rediss://` servers (cargo feature `tls`): the authority their
//! certificates must chain to, the certificate this client presents, and whether the host name
//! is checked. One value serves every kind of target, so a single server, a cluster's nodes,
//! the sentinels and the primary they name are reached alike.
//!
//! Skipping the host name keeps the chain checked: the `redis` crate's
//! `danger_accept_invalid_hostnames` wraps rustls's WebPKI verifier, which checks the chain
//! against the roots before it compares the name, and forgives only a name that does not match
//! (`CertificateError::NotValidForName`). Its `#insecure` URL fragment, which checks nothing,
//! is refused by the builder instead (`refuse_insecure`).

use redis::{ConnectionAddr, ConnectionInfo, RedisResult};

use crate::error::Error;

/// How `rediss://` servers are checked, and what this client shows them.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// The authority (PEM) servers' certificates must chain to, instead of the system's roots.
    pub(crate) root: Option<Vec<u8>>,
    /// The client's certificate chain and private key (PEM), for servers that require one
    /// (`tls-auth-clients yes`).
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept a certificate whose names do not include the host dialed, once it chains to a
    /// trusted root.
    pub(crate) skip_hostname_verification: bool,
}

impl Tls {
    /// A client for `info` with these settings. An address that is not `rediss://` is
    /// refused when a certificate is given, as the `redis` crate refuses it.
    pub(crate) fn client(&self, info: ConnectionInfo) -> RedisResult<redis::Client> {
        let client = match self.certificates() {
            Some(certificates) => redis::Client::build_with_tls(info, certificates)?,
            None => redis::Client::open(info)?,
        };
        if !self.skip_hostname_verification {
            return Ok(client);
        }
        let mut info = client.get_connection_info().clone();
        info.addr.set_danger_accept_invalid_hostnames(true);
        redis::Client::open(info)
    }

    /// A cluster client's builder with these settings.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
    ) -> redis::cluster::ClusterClientBuilder {
        let builder = match self.certificates() {
            Some(certificates) => builder.certs(certificates),
            None => builder,
        };
        builder.danger_accept_invalid_hostnames(self.skip_hostname_verification)
    }

    /// The certificates in the `redis` crate's form, when any is given.
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.root.is_none() && self.identity.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .identity
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root.clone(),
        })
    }

    /// Checks that the client certificate, when given, is a PEM chain of at least one
    /// certificate and its key a PEM private key, so that a wrong file fails the build rather
    /// than every connection.
    pub(crate) fn check(&self) -> Result<(), Error> {
        use rustls_pki_types::pem::PemObject as _;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let Some((cert, key)) = &self.identity else {
            return Ok(());
        };
        let invalid = |reason: String| Error::InvalidSetting {
            setting: "tls_client_certificate",
            reason,
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("the certificate is not PEM: {e}")))?;
        if chain.is_empty() {
            return Err(invalid("no CERTIFICATE block in the certificate".into()));
        }
        PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| invalid(format!("no PEM private key in the key: {e}")))?;
        Ok(())
    }
}

/// Refuses a `rediss://...#insecure` address: the `redis` crate would check no certificate at
/// all on it, where [`Tls::skip_hostname_verification`] still checks the chain.
pub(crate) fn refuse_insecure(info: &ConnectionInfo) -> Result<(), Error> {
    if matches!(info.addr, ConnectionAddr::TcpTls { insecure: true, .. }) {
        return Err(Error::InvalidSetting {
            setting: "url",
            reason: "#insecure would check no certificate at all: trust a private authority \
                     with tls_root_certificate, or accept a certificate for another name with \
                     tls_skip_hostname_verification"
                .into(),
        });
    }
    Ok(())
}
