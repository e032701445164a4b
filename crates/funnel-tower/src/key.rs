//! Which key a request is limited by.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;
use http::HeaderName;

/// The peer's socket address, as a request extension. A server inserts it for each connection
/// (`req.extensions_mut().insert(PeerAddr(addr))`); axum users can insert it from
/// `ConnectInfo<SocketAddr>`. Without it, IP keys fall back to one shared "unknown" key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// A network: an address and a prefix length, e.g. `10.0.0.0/8` or `2001:db8::/32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// `addr/prefix`; `None` when the prefix is longer than the address (32 or 128 bits).
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Net> {
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then_some(Net {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Parses `a.b.c.d/n`, `x::y/n`, or a bare address (a single host).
    pub fn parse(s: &str) -> Option<Net> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?),
            None => {
                let a = s.parse::<IpAddr>().ok()?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        Net::new(addr, prefix)
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

/// A caller's key function: the key bytes of a request, or `None`.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync>;

/// How a policy picks the key of a request.
#[derive(Clone)]
pub enum KeyBy {
    /// The peer's address ([`PeerAddr`]); IPv6 addresses grouped by their first `v6_prefix`
    /// bits (64 is the usual end-site allocation, so rotating addresses inside it does not
    /// get around the limit).
    PeerIp {
        /// Bits of an IPv6 address that form the key.
        v6_prefix: u8,
    },
    /// The client's address from `X-Forwarded-For` or `Forwarded`, trusted only when the peer
    /// is in `trusted` (the proxies in front of this one): the right-most address that is not
    /// itself a trusted proxy. A missing, malformed or untrusted header falls back to the peer.
    ClientIp {
        /// The trusted proxies.
        trusted: Vec<Net>,
        /// As for [`KeyBy::PeerIp`].
        v6_prefix: u8,
    },
    /// A header's value (e.g. an API key). A request without it, or with a value over 256
    /// bytes, shares one "missing" key.
    Header(HeaderName),
    /// The request's path.
    Route,
    /// One key for every request: a global cap.
    Global,
    /// A function of the request's head; `None` shares one "missing" key.
    Custom(KeyFn),
}

impl std::fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyBy::PeerIp { v6_prefix } => write!(f, "PeerIp(/{v6_prefix})"),
            KeyBy::ClientIp { trusted, v6_prefix } => {
                write!(f, "ClientIp({} trusted, /{v6_prefix})", trusted.len())
            }
            KeyBy::Header(h) => write!(f, "Header({h})"),
            KeyBy::Route => f.write_str("Route"),
            KeyBy::Global => f.write_str("Global"),
            KeyBy::Custom(_) => f.write_str("Custom"),
        }
    }
}

const MISSING: &[u8] = b"\0missing";
const MAX_HEADER_KEY: usize = 256;
/// How many forwarding hops are examined at most: a longer header is treated as malformed.
const MAX_HOPS: usize = 32;

impl KeyBy {
    /// Runs `f` on the key bytes of a request without copying them where it can: an address
    /// is built on the stack, a header value or the path is borrowed from the request.
    pub(crate) fn with_key<R>(&self, parts: &Parts, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            KeyBy::PeerIp { v6_prefix } => {
                let (buf, len) = ip_key_bytes(peer(parts), *v6_prefix);
                f(&buf[..len])
            }
            KeyBy::ClientIp { trusted, v6_prefix } => {
                let (buf, len) = ip_key_bytes(client_ip(parts, trusted), *v6_prefix);
                f(&buf[..len])
            }
            KeyBy::Header(name) => match parts.headers.get(name) {
                Some(v) if v.len() <= MAX_HEADER_KEY => f(v.as_bytes()),
                _ => f(MISSING),
            },
            KeyBy::Route => f(parts.uri.path().as_bytes()),
            KeyBy::Global => f(&[]),
            KeyBy::Custom(g) => match g(parts) {
                Some(k) => f(&k),
                None => f(MISSING),
            },
        }
    }

    /// The key bytes of a request.
    pub(crate) fn key(&self, parts: &Parts) -> Vec<u8> {
        match self {
            KeyBy::PeerIp { v6_prefix } => ip_key(peer(parts), *v6_prefix),
            KeyBy::ClientIp { trusted, v6_prefix } => ip_key(client_ip(parts, trusted), *v6_prefix),
            KeyBy::Header(name) => match parts.headers.get(name) {
                Some(v) if v.len() <= MAX_HEADER_KEY => v.as_bytes().to_vec(),
                _ => MISSING.to_vec(),
            },
            KeyBy::Route => parts.uri.path().as_bytes().to_vec(),
            KeyBy::Global => Vec::new(),
            KeyBy::Custom(f) => f(parts).unwrap_or_else(|| MISSING.to_vec()),
        }
    }
}

fn peer(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<PeerAddr>()
        .map(|p| canonical(p.0.ip()))
}

/// The client address behind trusted proxies: walk the forwarding chain from the right,
/// skipping trusted proxies; the first untrusted hop is the client. Anything malformed stops
/// the walk at the last good address.
fn client_ip(parts: &Parts, trusted: &[Net]) -> Option<IpAddr> {
    let peer = peer(parts)?;
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return Some(peer);
    }
    let mut hops: Vec<IpAddr> = Vec::new();
    let mut malformed = false;
    for value in parts.headers.get_all("x-forwarded-for") {
        let Ok(text) = value.to_str() else {
            malformed = true;
            break;
        };
        for item in text.split(',') {
            match item.trim().parse::<IpAddr>() {
                Ok(ip) => hops.push(canonical(ip)),
                Err(_) => malformed = true,
            }
        }
    }
    if hops.is_empty() && !malformed {
        for value in parts.headers.get_all("forwarded") {
            let Ok(text) = value.to_str() else {
                malformed = true;
                break;
            };
            for element in text.split(',') {
                for pair in element.split(';') {
                    let Some((k, v)) = pair.trim().split_once('=') else {
                        continue;
                    };
                    if k.trim().eq_ignore_ascii_case("for") {
                        match forwarded_for(v.trim()) {
                            Some(ip) => hops.push(canonical(ip)),
                            None => malformed = true,
                        }
                    }
                }
            }
        }
    }
    if malformed || hops.len() > MAX_HOPS {
        // Documented fallback: the peer itself (a trusted proxy), never a guess.
        return Some(peer);
    }
    let mut client = peer;
    for ip in hops.into_iter().rev() {
        client = ip;
        if !is_trusted(ip) {
            break;
        }
    }
    Some(client)
}

/// A `Forwarded` `for=` value: `192.0.2.1`, `"192.0.2.1:80"`, `"[2001:db8::1]:80"`.
fn forwarded_for(v: &str) -> Option<IpAddr> {
    let v = v.trim_matches('"');
    if let Some(rest) = v.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let host = match v.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => h,
        _ => v,
    };
    host.parse().ok()
}

/// The key of an address in a stack buffer: `4` and four octets, `6` and sixteen (masked to
/// the prefix), or [`MISSING`]; the same bytes as [`ip_key`].
fn ip_key_bytes(ip: Option<IpAddr>, v6_prefix: u8) -> ([u8; 17], usize) {
    let mut buf = [0u8; 17];
    let len = match ip {
        Some(IpAddr::V4(v4)) => {
            buf[0] = 4;
            buf[1..5].copy_from_slice(&v4.octets());
            5
        }
        Some(ip @ IpAddr::V6(_)) => {
            buf[0] = 6;
            if let IpAddr::V6(masked) = mask(ip, v6_prefix) {
                buf[1..17].copy_from_slice(&masked.octets());
                17
            } else {
                1
            }
        }
        None => {
            buf[..MISSING.len()].copy_from_slice(MISSING);
            MISSING.len()
        }
    };
    (buf, len)
}

fn ip_key(ip: Option<IpAddr>, v6_prefix: u8) -> Vec<u8> {
    match ip {
        Some(IpAddr::V4(v4)) => {
            let mut k = vec![4];
            k.extend_from_slice(&v4.octets());
            k
        }
        Some(ip @ IpAddr::V6(_)) => {
            let mut k = vec![6];
            if let IpAddr::V6(masked) = mask(ip, v6_prefix) {
                k.extend_from_slice(&masked.octets());
            }
            k
        }
        None => MISSING.to_vec(),
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are their IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri("/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut req = b.body(()).unwrap();
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::new(peer.parse().unwrap(), 1234)));
        req.into_parts().0
    }

    #[test]
    fn ipv6_addresses_in_one_64_share_a_key_and_others_do_not() {
        let by = KeyBy::PeerIp { v6_prefix: 64 };
        let a = by.key(&parts("2001:db8:1:2::1", &[]));
        assert_eq!(a, by.key(&parts("2001:db8:1:2:ffff:ffff:ffff:ffff", &[])));
        assert_ne!(a, by.key(&parts("2001:db8:1:3::1", &[])));
        assert_eq!(
            by.key(&parts("::ffff:192.0.2.1", &[])),
            by.key(&parts("192.0.2.1", &[]))
        );
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let trusted = vec![Net::parse("10.0.0.0/8").unwrap()];
        let by = KeyBy::ClientIp {
            trusted,
            v6_prefix: 64,
        };
        let peer = KeyBy::PeerIp { v6_prefix: 64 };
        let xff = [("x-forwarded-for", "198.51.100.7, 10.1.1.1")];
        // From a trusted proxy: the right-most untrusted hop.
        assert_eq!(
            by.key(&parts("10.0.0.1", &xff)),
            peer.key(&parts("198.51.100.7", &[]))
        );
        // From anyone else: the peer, whatever the header says.
        assert_eq!(
            by.key(&parts("203.0.113.9", &xff)),
            peer.key(&parts("203.0.113.9", &[]))
        );
        // A spoofed left-most entry does not help: the right-most untrusted hop wins.
        let spoof = [("x-forwarded-for", "1.2.3.4, 198.51.100.7")];
        assert_eq!(
            by.key(&parts("10.0.0.1", &spoof)),
            peer.key(&parts("198.51.100.7", &[]))
        );
        // Malformed: the peer.
        let bad = [("x-forwarded-for", "198.51.100.7, not-an-ip")];
        assert_eq!(
            by.key(&parts("10.0.0.1", &bad)),
            peer.key(&parts("10.0.0.1", &[]))
        );
        // RFC 7239 Forwarded.
        let fwd = [("forwarded", r#"for="[2001:db8::7]:4711";proto=https"#)];
        assert_eq!(
            by.key(&parts("10.0.0.1", &fwd)),
            peer.key(&parts("2001:db8::99", &[]))
        );
    }

    #[test]
    fn a_missing_peer_or_header_falls_back_to_a_shared_key() {
        let req = http::Request::builder().uri("/").body(()).unwrap();
        let (p, _) = req.into_parts();
        assert_eq!(KeyBy::PeerIp { v6_prefix: 64 }.key(&p), MISSING);
        let h = KeyBy::Header(HeaderName::from_static("x-api-key"));
        assert_eq!(h.key(&p), MISSING);
        let long = "k".repeat(300);
        assert_eq!(h.key(&parts("192.0.2.1", &[("x-api-key", &long)])), MISSING);
    }

    #[test]
    fn the_borrowed_key_is_the_same_bytes_as_the_owned_one() {
        let trusted = vec![Net::parse("10.0.0.0/8").unwrap()];
        let kinds = [
            KeyBy::PeerIp { v6_prefix: 64 },
            KeyBy::PeerIp { v6_prefix: 0 },
            KeyBy::PeerIp { v6_prefix: 128 },
            KeyBy::ClientIp {
                trusted,
                v6_prefix: 56,
            },
            KeyBy::Header(HeaderName::from_static("x-api-key")),
            KeyBy::Route,
            KeyBy::Global,
            KeyBy::Custom(Arc::new(|p: &Parts| {
                p.headers.get("x-api-key").map(|v| v.as_bytes().to_vec())
            })),
        ];
        let requests = [
            parts("192.0.2.1", &[]),
            parts("2001:db8:1:2::1", &[("x-api-key", "abc")]),
            parts("::ffff:192.0.2.7", &[("x-forwarded-for", "2001:db8::9")]),
            parts("10.1.2.3", &[("x-forwarded-for", "198.51.100.4, 10.0.0.1")]),
            http::Request::builder().uri("/").body(()).unwrap().into_parts().0,
        ];
        for by in &kinds {
            for p in &requests {
                assert_eq!(by.with_key(p, <[u8]>::to_vec), by.key(p));
            }
        }
    }

    #[test]
    fn networks_parse_and_contain() {
        assert!(Net::parse("10.0.0.0/8")
            .unwrap()
            .contains("10.9.9.9".parse().unwrap()));
        assert!(!Net::parse("10.0.0.0/8")
            .unwrap()
            .contains("11.0.0.1".parse().unwrap()));
        assert!(Net::parse("2001:db8::/32")
            .unwrap()
            .contains("2001:db8:ff::1".parse().unwrap()));
        assert!(Net::parse("10.0.0.0/33").is_none());
        assert!(Net::parse("nonsense").is_none());
    }
}
