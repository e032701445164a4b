//! Limits written on a command line: `--limit "ip=10/1s,burst=20"`.
//!
//! ```text
//! <key>=<count>/<period>[,burst=<n>]
//!   key     ip | ip/<v6 prefix> | client | client-forwarded | route | global | header:<name>
//!   period  <n>ms | <n>s | <n>m | <n>h      (a bare number is seconds)
//!   burst   the funnel's capacity (default: count)
//! ```
//!
//! Numbers are decimal digits only (no sign); spaces around any field are ignored; an option
//! given twice is an error.
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
            let prefix: u8 = digits(&k[3..])
                .and_then(|p| u8::try_from(p).ok())
                .filter(|p| *p <= 128)
                .ok_or_else(|| err(format!("bad IPv6 prefix in {k:?}")))?;
            // Named as written without leading zeros: `ip/064` is the policy `ip/64`.
            (format!("ip/{prefix}"), KeyBy::PeerIp { v6_prefix: prefix })
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
    let count: u64 = digits(count.trim())
        .filter(|c| *c > 0)
        .ok_or_else(|| err(format!("bad count {count:?}")))?;
    let period =
        parse_period(period.trim()).ok_or_else(|| err(format!("bad period {period:?}")))?;
    let mut burst = None;
    for extra in parts {
        match extra.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("burst", _)) if burst.is_some() => {
                return Err(err(format!("burst given twice ({extra:?})")))
            }
            Some(("burst", n)) => {
                let n = digits(n)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| err(format!("bad burst {n:?}")))?;
                burst = Some(n);
            }
            _ => return Err(err(format!("unknown option {extra:?} (burst=<n>)"))),
        }
    }
    let quota = match burst {
        None => Quota::per_period(count, period),
        Some(b) => {
            // The interval of `count` per `period`, with the burst as capacity: built from the
            // interval alone, so a burst below `count` is not refused for the tolerance
            // `count` itself would need.
            match u64::try_from(period.as_nanos() / u128::from(count)) {
                Ok(t) if t > 0 => Quota::per_period(1, Duration::from_nanos(t)),
                _ => Quota::per_period(count, period),
            }
            .and_then(|q| q.with_limit(b))
        }
    }
    .map_err(|e| err(e.to_string()))?;
    Ok(PolicySpec { name, key, quota })
}

/// A decimal number: ASCII digits only, no sign, fitting a `u64`.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_period(p: &str) -> Option<Duration> {
    let (n, unit) = p.split_at(p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len()));
    let n: u64 = digits(n).filter(|n| *n > 0)?;
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
        assert_eq!(parse_limit("ip/056=5/1h", &[]).unwrap().name, "ip/56");
        assert!(parse_limit("global=1/500ms", &[]).is_ok());
        // Spaces around any field, the option's name included.
        let s = parse_limit(" ip = 10 / 1s , burst = 20 ", &[]).unwrap();
        assert_eq!((s.name.as_str(), s.quota.limit()), ("ip", 20));
    }

    #[test]
    fn a_burst_below_the_count_is_the_quota_it_names_at_any_period() {
        // Two per 50 years with a burst of one: one every 25 years, one at once. The count's
        // own capacity (two of those) is over funnel's largest tolerance; the burst's is not.
        let s = parse_limit("global=2/438000h,burst=1", &[]).unwrap();
        assert_eq!(s.quota.limit(), 1);
        assert_eq!(
            s.quota.emission_interval(),
            Duration::from_secs(219_000 * 3600)
        );
        assert!(parse_limit("global=2/438000h", &[]).is_err());
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
            // Signs, a repeated option: the grammar has neither.
            "ip=+10/1s",
            "ip/+64=1/1s",
            "ip=1/+1s",
            "ip=1/1s,burst=+2",
            "ip=1/1s,burst=2,burst=3",
        ] {
            let e = parse_limit(bad, &[]).unwrap_err();
            assert!(e.0.contains(bad), "{e}");
        }
    }
}
