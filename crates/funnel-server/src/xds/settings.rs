//! The xDS client's settings and the parsers of their text forms, as envoyproxy/ratelimit's
//! environment variables write them: the server's address (`host:port` or a URL), node
//! metadata (`k=v,k=v`), extra request headers (`k:v,k:v`), Go durations (`10s`, `1m30s`).

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

/// How long a reconnection waits, as envoyproxy/ratelimit's backoff computes it: `initial`
/// times `factor` to the power of the attempt, with jitter a random point between `initial`
/// and that, never less than `initial` nor more than `max`. With the default factor 0.5 the
/// wait stays at `initial`; a factor of 2 doubles it each attempt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The least wait, and the first.
    pub initial: Duration,
    /// The most.
    pub max: Duration,
    /// The growth per attempt.
    pub factor: f64,
    /// Whether to draw the wait at random between `initial` and the computed one.
    pub jitter: bool,
}

impl Default for Backoff {
    /// envoyproxy/ratelimit's defaults.
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

impl Backoff {
    /// The wait before reconnection `attempt` (0 for the first), `random` drawn in [0, 1).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let initial = self.initial.as_secs_f64();
        let max = self.max.as_secs_f64().max(initial);
        let exponent = i32::try_from(attempt).unwrap_or(i32::MAX);
        let mut d = initial * self.factor.powi(exponent);
        if self.jitter {
            d = random * (d - initial) + initial;
        }
        // NaN (a factor of 0 to a huge power times 0) falls to `initial` too.
        let d = if d.is_nan() {
            initial
        } else {
            d.clamp(initial, max)
        };
        Duration::from_secs_f64(d)
    }
}

/// Client certificate and trust for TLS to the xDS server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// The PEM file of the CA that signed the server's certificate; the system's roots if
    /// `None`.
    pub ca: Option<PathBuf>,
    /// The PEM files of the client's certificate and key, for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name the server's certificate must carry; the URL's host if `None`.
    pub server_name: Option<String>,
}

/// Everything the xDS client needs.
#[derive(Clone, Debug)]
pub struct XdsOptions {
    /// `http://host:port` or `https://host:port`.
    pub url: String,
    /// The node id the server selects the configuration by.
    pub node_id: String,
    /// The node's metadata, string values.
    pub node_metadata: Vec<(String, String)>,
    /// Headers added to the stream's request.
    pub headers: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    /// TLS, when the URL is `https://`.
    pub tls: Option<Tls>,
    /// Reconnection waits.
    pub backoff: Backoff,
    /// The largest discovery response accepted, in bytes (tonic's 4 MiB if `None`).
    pub max_message_bytes: Option<usize>,
    /// Start serving only once a first response was processed (ACKed or NACKed), as
    /// envoyproxy/ratelimit does unless `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    pub wait_for_first: bool,
    /// Health checks fail until a configuration with at least one domain is in force
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub healthy_needs_domains: bool,
}

/// envoyproxy/ratelimit's default server address.
pub const DEFAULT_SERVER: &str = "localhost:18000";

/// The server address as a URL: `host:port` (a gRPC target, as envoyproxy/ratelimit and
/// Envoy Gateway write it) becomes `http://host:port`, or `https://` with `tls`.
pub fn server_url(s: &str, tls: bool) -> Result<String, String> {
    let s = s.trim();
    let (scheme, rest) = match s.split_once("://") {
        Some(("http", rest)) if !tls => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        Some(("http", _)) => {
            return Err(format!(
                "{s:?}: an http:// URL with TLS asked for; write https:// or host:port"
            ))
        }
        Some((other, _)) => {
            return Err(format!(
                "{s:?}: the scheme {other:?} is not supported (host:port, http:// or https://)"
            ))
        }
        None if s.starts_with("unix:") || s.starts_with("dns:") => {
            return Err(format!(
                "{s:?}: only host:port targets are supported, not unix: or dns: ones"
            ))
        }
        None => (if tls { "https" } else { "http" }, s),
    };
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
        return Err(format!("{s:?}: expected host:port"));
    }
    let url = format!("{scheme}://{authority}");
    url.parse::<tonic::transport::Uri>()
        .map_err(|e| format!("{s:?}: {e}"))?;
    Ok(url)
}

/// Node metadata as `key=value` pairs separated by commas; empty entries are skipped and an
/// entry without `=` is refused (envoyproxy/ratelimit drops it without a word).
pub fn node_metadata(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| format!("node metadata entry {entry:?} is not key=value"))?;
        if k.is_empty() {
            return Err(format!("node metadata entry {entry:?} has an empty key"));
        }
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// Request headers as `name:value` pairs separated by commas (the map syntax of
/// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`).
pub fn headers(s: &str) -> Result<Vec<(AsciiMetadataKey, AsciiMetadataValue)>, String> {
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry
            .split_once(':')
            .ok_or_else(|| format!("header {entry:?} is not name:value"))?;
        let key = AsciiMetadataKey::from_bytes(k.trim().to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("header {entry:?}: {k:?} is not a header name"))?;
        let value = AsciiMetadataValue::try_from(v.trim())
            .map_err(|_| format!("header {entry:?}: the value is not printable ASCII"))?;
        out.push((key, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_backoff_stays_at_its_initial_wait() {
        let b = Backoff::default();
        for attempt in 0..10 {
            for r in [0.0, 0.5, 0.999] {
                assert_eq!(b.delay(attempt, r), Duration::from_secs(10));
            }
        }
    }

    #[test]
    fn a_growing_backoff_doubles_up_to_its_most() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            factor: 2.0,
            jitter: false,
        };
        let waits: Vec<u128> = (0..6).map(|a| b.delay(a, 0.0).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        let jittered = Backoff { jitter: true, ..b };
        assert_eq!(jittered.delay(2, 0.0), Duration::from_millis(100));
        assert_eq!(jittered.delay(2, 0.5), Duration::from_millis(250));
        assert_eq!(jittered.delay(u32::MAX, 0.9), Duration::from_millis(1000));
    }

    #[test]
    fn server_addresses_read_as_urls() {
        assert_eq!(
            server_url("localhost:18000", false).unwrap(),
            "http://localhost:18000"
        );
        assert_eq!(
            server_url("envoy-gateway:18001", true).unwrap(),
            "https://envoy-gateway:18001"
        );
        assert_eq!(
            server_url("http://127.0.0.1:9/", false).unwrap(),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            server_url("https://[::1]:9", false).unwrap(),
            "https://[::1]:9"
        );
        for bad in [
            "",
            "localhost",
            "ftp://h:1",
            "unix:///tmp/s",
            "http://h:1/path",
        ] {
            assert!(server_url(bad, false).is_err(), "{bad:?}");
        }
        assert!(server_url("http://h:1", true).is_err());
    }

    #[test]
    fn node_metadata_is_key_value_pairs() {
        assert_eq!(
            node_metadata("cluster=edge, zone=a=b,").unwrap(),
            [
                ("cluster".to_owned(), "edge".to_owned()),
                ("zone".to_owned(), "a=b".to_owned())
            ]
        );
        assert!(node_metadata("").unwrap().is_empty());
        assert!(node_metadata("key1:val1")
            .unwrap_err()
            .contains("key1:val1"));
        assert!(node_metadata("=v").is_err());
    }

    #[test]
    fn headers_are_name_value_pairs() {
        let h = headers("X-Tenant: blue,authorization:Bearer abc").unwrap();
        assert_eq!(h[0].0.as_str(), "x-tenant");
        assert_eq!(h[0].1.to_str().unwrap(), "blue");
        assert_eq!(h[1].1.to_str().unwrap(), "Bearer abc");
        assert!(headers("novalue").is_err());
        assert!(headers("bad name:v").is_err());
    }
}
