//! Limits written on a command line: `--limit "ip=10/1s,burst=20"`.
//!
//! ```text
//! <key>=<count>/<period>[,burst=<n>]
//!   key     ip | ip/<v6 prefix> | client | client-forwarded | route | global | header:<name>
//!   period  <n>ms | <n>s | <n>m | <n>h      (a bare number is seconds)
//!   burst   the funnel's capacity (default: count)
//! ```
//!
//! `count` requests per `period`: one unit comes back every `period / count` (`10/1s`: one
//! every 100 ms), and up to `burst` requests may come at once.
//!
//! `ip` is the peer address (IPv6 grouped by /64 unless a prefix is given); `client` the
//! address from `X-Forwarded-For` when the peer is a trusted proxy, `client-forwarded` the
//! same from RFC 7239 `Forwarded` (for proxies that write that one); the policy's name is the
//! key part (`ip`, `client`, `route`, `x-api-key`, ...).

use std::time::Duration;

use funnel::Quota;
use http::HeaderName;

use crate::key::{KeyBy, Net};

/// A parsed `--limit`.
#[derive(Debug)]
pub struct PolicySpec {
    /// The policy's name.
    pub name: String,
    /// How the key is taken.
    pub key: KeyBy,
    /// The quota.
    pub quota: Quota,
}

/// What is wrong with a `--limit`.
#[derive(Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

/// Parses one `--limit`; `trusted` are the proxies a `client` key trusts.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel_tower::spec::parse_limit;
///
/// let p = parse_limit("ip=10/1s,burst=20", &[])?;
/// assert_eq!((p.name.as_str(), p.quota.limit()), ("ip", 20));
/// assert_eq!(p.quota.emission_interval(), Duration::from_millis(100));
/// // Without a burst, the burst is the count.
/// assert_eq!(parse_limit("route=1000/60s", &[])?.quota.limit(), 1000);
/// assert!(parse_limit("ip=10/1y", &[]).is_err());
/// # Ok::<(), funnel_tower::spec::SpecError>(())
/// ```
///
/// # Errors
///
/// A [`SpecError`] naming the part that is wrong.
pub fn parse_limit(spec: &str, trusted: &[Net]) -> Result<PolicySpec, SpecError> {
    let err = |m: String| SpecError(format!("--limit {spec:?}: {m}"));
    let (key, rest) = spec
        .split_once('=')
        .ok_or_else(|| err("expected <key>=<count>/<period>".into()))?;
    let (name, key) = match key.trim() {
        "ip" => ("ip".to_string(), KeyBy::PeerIp { v6_prefix: 64 }),
        "client" => (
            "client".to_string(),
            KeyBy::ClientIp {
                trusted: trusted.to_vec(),
                v6_prefix: 64,
            },
        ),
        "client-forwarded" => (
            "client".to_string(),
            KeyBy::ClientIpForwarded {
                trusted: trusted.to_vec(),
                v6_prefix: 64,
            },
        ),
        "route" => ("route".to_string(), KeyBy::Route),
        "global" => ("global".to_string(), KeyBy::Global),
        k if k.starts_with("ip/") => {
            let prefix: u8 = k[3..]
                .parse()
                .ok()
                .filter(|p| *p <= 128)
                .ok_or_else(|| err(format!("bad IPv6 prefix in {k:?}")))?;
            (k.to_string(), KeyBy::PeerIp { v6_prefix: prefix })
        }
        k if k.starts_with("header:") => {
            let h = HeaderName::try_from(&k[7..])
                .map_err(|_| err(format!("bad header name in {k:?}")))?;
            (h.as_str().to_string(), KeyBy::Header(h))
        }
        k => {
            return Err(err(format!(
                "unknown key {k:?} (ip, ip/<prefix>, client, client-forwarded, route, global, \
                 header:<name>)"
            )))
        }
    };
    let mut parts = rest.split(',');
    let rate = parts.next().unwrap_or_default();
    let (count, period) = rate
        .split_once('/')
        .ok_or_else(|| err(format!("expected <count>/<period>, got {rate:?}")))?;
    let count: u64 = count
        .trim()
        .parse()
        .ok()
        .filter(|c| *c > 0)
        .ok_or_else(|| err(format!("bad count {count:?}")))?;
    let period =
        parse_period(period.trim()).ok_or_else(|| err(format!("bad period {period:?}")))?;
    let mut quota = Quota::per_period(count, period).map_err(|e| err(e.to_string()))?;
    for extra in parts {
        match extra.trim().split_once('=') {
            Some(("burst", n)) => {
                let n: u64 = n
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| err(format!("bad burst {n:?}")))?;
                quota = quota.with_limit(n).map_err(|e| err(e.to_string()))?;
            }
            _ => return Err(err(format!("unknown option {extra:?} (burst=<n>)"))),
        }
    }
    Ok(PolicySpec { name, key, quota })
}

fn parse_period(p: &str) -> Option<Duration> {
    let (digits, unit) = p.split_at(p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len()));
    let n: u64 = digits.parse().ok().filter(|n| *n > 0)?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_parse() {
        let s = parse_limit("ip=10/1s,burst=20", &[]).unwrap();
        assert_eq!(s.name, "ip");
        assert_eq!(s.quota.limit(), 20);
        assert_eq!(s.quota.emission_interval(), Duration::from_millis(100));
        let s = parse_limit("route=1000/60s", &[]).unwrap();
        assert_eq!((s.name.as_str(), s.quota.limit()), ("route", 1000));
        let s = parse_limit("header:X-Api-Key=100/1m", &[]).unwrap();
        assert_eq!(s.name, "x-api-key");
        assert!(matches!(
            parse_limit("ip/56=5/1h", &[]).unwrap().key,
            KeyBy::PeerIp { v6_prefix: 56 }
        ));
        assert!(parse_limit("global=1/500ms", &[]).is_ok());
    }

    #[test]
    fn bad_limits_are_named_errors() {
        for bad in [
            "ip",
            "ip=10",
            "ip=0/1s",
            "ip=10/0s",
            "ip=10/1y",
            "nope=1/1s",
            "ip=1/1s,burst=0",
            "ip=1/1s,foo=1",
            "ip/129=1/1s",
            "header:bad header=1/1s",
            "ip=x/1s",
        ] {
            let e = parse_limit(bad, &[]).unwrap_err();
            assert!(e.0.contains(bad), "{e}");
        }
    }
}
