//! Which key a request is limited by.

#[cfg(feature = "axum")]
use std::net::SocketAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http::request::Parts;
use http::HeaderName;

/// The peer's socket address, as a request extension. A server inserts it for each connection
/// (`req.extensions_mut().insert(PeerAddr(addr))`). With the `axum` feature the layer also
/// reads axum's `ConnectInfo<SocketAddr>` (from `into_make_service_with_connect_info`) when
/// there is no `PeerAddr`. Without either, the IP keys fall back to one shared "missing" key.
///
/// # Examples
///
/// ```
/// use funnel_tower::PeerAddr;
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.1:4711".parse().unwrap()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// A network: an address and a prefix length, e.g. `10.0.0.0/8` or `2001:db8::/32`.
///
/// # Examples
///
/// ```
/// use funnel_tower::Net;
///
/// let lan = Net::parse("10.0.0.0/8").unwrap();
/// assert!(lan.contains("10.1.2.3".parse().unwrap()));
/// assert!(!lan.contains("192.0.2.1".parse().unwrap()));
/// assert!(Net::parse("2001:db8::1").is_some()); // one host
/// assert!(Net::parse("10.0.0.0/33").is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// `addr/prefix`; `None` when the prefix is longer than the address (32 or 128 bits). An
    /// IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) is its IPv4 network (`10.0.0.0/8`),
    /// as [`contains`](Self::contains) takes mapped addresses for IPv4 ones.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Net> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if (96..=128).contains(&prefix) => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            _ => (addr, prefix),
        };
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

    /// Whether `ip` lies in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

/// A caller's key function: the key bytes of a request, or `None`.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync>;

/// How a policy picks the key of a request. No key ever fails a request: what cannot be read
/// falls back as each variant says.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use funnel_tower::{KeyBy, Net};
///
/// let per_ip = KeyBy::PeerIp { v6_prefix: 64 };
/// let behind_lb = KeyBy::ClientIp { trusted: vec![Net::parse("10.0.0.0/8").unwrap()], v6_prefix: 64 };
/// let per_token = KeyBy::Header(http::HeaderName::from_static("x-api-key"));
/// // The tenant from the first path segment: /t/acme/... is keyed "acme".
/// let per_tenant = KeyBy::Custom(Arc::new(|parts: &http::request::Parts| {
///     let rest = parts.uri.path().strip_prefix("/t/")?;
///     Some(rest.split('/').next()?.as_bytes().to_vec())
/// }));
/// # let _ = (per_ip, behind_lb, per_token, per_tenant);
/// ```
#[derive(Clone)]
pub enum KeyBy {
    /// The peer's address ([`PeerAddr`]); IPv6 addresses grouped by their first `v6_prefix`
    /// bits (64 is the usual end-site allocation, so rotating addresses inside it does not
    /// get around the limit). IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`) are their IPv4
    /// address. No peer address: one shared "missing" key.
    PeerIp {
        /// Bits of an IPv6 address that form the key.
        v6_prefix: u8,
    },
    /// The client's address behind the proxies in `trusted`, from the `X-Forwarded-For`
    /// header they append to. Only when the peer is trusted is the header read. Its hops are
    /// walked from the right, the entry of the nearest proxy first, skipping trusted proxies;
    /// the first address that is not trusted is the client (if every hop is trusted, the
    /// left-most). Entries left of the client are what the client itself sent and are never
    /// read, so it cannot choose its key by sending a header of its own. RFC 7239 `Forwarded`
    /// is not read: a proxy that writes it passes the client's own `X-Forwarded-For` through,
    /// and whichever of the two a proxy does not write is the client's to fill. Proxies that
    /// write `Forwarded` take [`KeyBy::ClientIpForwarded`].
    ///
    /// Falls back to the peer's address when the peer is not trusted, when there is no
    /// forwarding header, and when the walk meets, before finding the client, a hop that is
    /// not an address (garbage, non-UTF-8 bytes, an entry over 64 bytes, a `Forwarded`
    /// element without `for=`, an obfuscated `for=_hidden` or `for=unknown`, an IPv6 zone)
    /// or 32 trusted hops, even with no hop left of them. Entries are split at every comma;
    /// spaces and tabs around an entry (and around `for`, `=` and its node) are ignored, no
    /// other whitespace. No peer address: one shared "missing" key.
    ClientIp {
        /// The trusted proxies.
        trusted: Vec<Net>,
        /// As for [`KeyBy::PeerIp`].
        v6_prefix: u8,
    },
    /// As [`KeyBy::ClientIp`], from the RFC 7239 `Forwarded` header (its `for=` parameters)
    /// that the proxies in `trusted` append to; `X-Forwarded-For` is not read. The same walk
    /// and the same fallbacks.
    ClientIpForwarded {
        /// The trusted proxies.
        trusted: Vec<Net>,
        /// As for [`KeyBy::PeerIp`].
        v6_prefix: u8,
    },
    /// A header's value (e.g. an API key), as raw bytes (any bytes a header may hold). A
    /// request without it, or with a value over 256 bytes, shares one "missing" key; with
    /// several, the first counts.
    Header(HeaderName),
    /// The route. With the `axum` feature, the route template axum matched
    /// (`/users/{id}`, from `MatchedPath`), so `/users/1` and `/users/2` share one limit;
    /// this needs the layer inside the router (`Router::layer` or `route_layer`), where axum
    /// has routed the request. Otherwise, and for requests without a matched route (a
    /// fallback, a hyper server), the raw path: every distinct path is its own key.
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
            KeyBy::ClientIpForwarded { trusted, v6_prefix } => {
                write!(
                    f,
                    "ClientIpForwarded({} trusted, /{v6_prefix})",
                    trusted.len()
                )
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
/// How many forwarding hops are examined at most, from the right: a chain of more trusted
/// proxies than this falls back to the peer.
const MAX_HOPS: usize = 32;
/// The longest hop worth parsing (a bracketed IPv6 address with a port and quotes is 49
/// bytes): a longer one is malformed without being read.
const MAX_HOP_LEN: usize = 64;

/// The key bytes of one request, without an allocation unless a [`KeyBy::Custom`] function
/// made them: an address is built inline, a header value or a path is borrowed.
pub(crate) enum KeyBytes<'a> {
    /// An address key: `4` and four octets, or `6` and sixteen (masked to the prefix).
    Ip([u8; 17], u8),
    /// A header value, a path, or one of the constant keys.
    Borrowed(&'a [u8]),
    /// What a [`KeyBy::Custom`] function returned.
    Owned(Vec<u8>),
}

impl KeyBytes<'_> {
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Ip(buf, len) => &buf[..usize::from(*len)],
            KeyBytes::Borrowed(b) => b,
            KeyBytes::Owned(v) => v,
        }
    }
}

impl KeyBy {
    /// The key bytes of a request.
    #[inline]
    pub(crate) fn key<'a>(&self, parts: &'a Parts) -> KeyBytes<'a> {
        match self {
            KeyBy::PeerIp { v6_prefix } => ip_key(peer(parts), *v6_prefix),
            KeyBy::ClientIp { trusted, v6_prefix } => {
                ip_key(client_ip(parts, trusted, Header::XForwardedFor), *v6_prefix)
            }
            KeyBy::ClientIpForwarded { trusted, v6_prefix } => {
                ip_key(client_ip(parts, trusted, Header::Forwarded), *v6_prefix)
            }
            KeyBy::Header(name) => match parts.headers.get(name) {
                Some(v) if v.len() <= MAX_HEADER_KEY => KeyBytes::Borrowed(v.as_bytes()),
                _ => KeyBytes::Borrowed(MISSING),
            },
            KeyBy::Route => KeyBytes::Borrowed(route(parts).as_bytes()),
            KeyBy::Global => KeyBytes::Borrowed(&[]),
            KeyBy::Custom(f) => f(parts).map_or(KeyBytes::Borrowed(MISSING), KeyBytes::Owned),
        }
    }
}

impl KeyBy {
    /// The address this key stands for, as the IP variants read it: the peer
    /// ([`KeyBy::PeerIp`]) or the client behind the trusted proxies ([`KeyBy::ClientIp`],
    /// [`KeyBy::ClientIpForwarded`], with their walk and fallbacks), IPv4-mapped IPv6 as IPv4,
    /// IPv6 masked to `v6_prefix` bits. `None` for the other variants and without a peer
    /// address. For a service that keys requests on behalf of a proxy (funnel-server's
    /// forward-auth endpoint) with the rules this layer applies.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel_tower::{KeyBy, Net, PeerAddr};
    ///
    /// let by = KeyBy::ClientIp { trusted: vec![Net::parse("10.0.0.0/8").unwrap()], v6_prefix: 64 };
    /// let mut req = http::Request::builder()
    ///     .header("x-forwarded-for", "198.51.100.7, 2001:db8:1:2:3:4:5:6")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert(PeerAddr("10.0.0.2:4711".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(by.address(&parts), Some("2001:db8:1:2::".parse().unwrap()));
    /// ```
    pub fn address(&self, parts: &Parts) -> Option<IpAddr> {
        let (ip, v6_prefix) = match self {
            KeyBy::PeerIp { v6_prefix } => (peer(parts)?, *v6_prefix),
            KeyBy::ClientIp { trusted, v6_prefix } => (
                client_ip(parts, trusted, Header::XForwardedFor)?,
                *v6_prefix,
            ),
            KeyBy::ClientIpForwarded { trusted, v6_prefix } => {
                (client_ip(parts, trusted, Header::Forwarded)?, *v6_prefix)
            }
            _ => return None,
        };
        Some(match ip {
            IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, v6_prefix)),
            v4 => v4,
        })
    }
}

/// The route of a request: axum's matched route template when the `axum` feature is on and
/// the router put one on the request, else the raw path.
fn route(parts: &Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(m) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return m.as_str();
    }
    parts.uri.path()
}

/// The peer's address: [`PeerAddr`], else (feature `axum`) axum's `ConnectInfo<SocketAddr>`.
fn peer(parts: &Parts) -> Option<IpAddr> {
    let addr = parts.extensions.get::<PeerAddr>().map(|p| p.0);
    #[cfg(feature = "axum")]
    let addr = addr.or_else(|| {
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0)
    });
    addr.map(|a| canonical(a.ip()))
}

/// Where the walk over the forwarding hops ended.
enum Walk {
    /// The first hop, from the right, that is not a trusted proxy; or the left-most hop when
    /// every one is trusted.
    Client(IpAddr),
    /// No hop at all.
    Empty,
    /// A malformed hop, or [`MAX_HOPS`] trusted ones or more, before the client was found.
    Malformed,
}

/// The forwarding header a policy's trusted proxies append to.
#[derive(Clone, Copy)]
enum Header {
    XForwardedFor,
    Forwarded,
}

impl Header {
    fn name(self) -> &'static str {
        match self {
            Header::XForwardedFor => "x-forwarded-for",
            Header::Forwarded => "forwarded",
        }
    }

    /// The address of one comma-separated entry.
    fn hop(self, entry: &[u8]) -> Option<IpAddr> {
        match self {
            Header::XForwardedFor => xff_hop(entry),
            Header::Forwarded => forwarded_hop(entry),
        }
    }
}

/// The client address behind trusted proxies. Only a trusted peer's `header` counts (the other
/// forwarding header may be the client's own). Its hops are walked from the right (the
/// nearest proxy's entry first), skipping trusted proxies; the first hop that is not trusted
/// is the client, and nothing to its left (what the client itself sent) is read. A malformed
/// hop before that, [`MAX_HOPS`] trusted hops or more, or no header: the peer.
fn client_ip(parts: &Parts, trusted: &[Net], header: Header) -> Option<IpAddr> {
    let peer = peer(parts)?;
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return Some(peer);
    }
    // Several lines of the header are one list, in order; walked from the last entry.
    let hops = parts
        .headers
        .get_all(header.name())
        .iter()
        .rev()
        .flat_map(|v| v.as_bytes().rsplit(|b| *b == b','));
    match walk(hops.map(|entry| header.hop(entry)), is_trusted) {
        Walk::Client(ip) => Some(ip),
        // Documented fallback: the peer itself (a trusted proxy), never a guess.
        Walk::Empty | Walk::Malformed => Some(peer),
    }
}

/// Walks hops (nearest first) until one is not trusted, examining at most [`MAX_HOPS`].
fn walk(hops: impl Iterator<Item = Option<IpAddr>>, is_trusted: impl Fn(IpAddr) -> bool) -> Walk {
    let mut last = Walk::Empty;
    for (i, hop) in hops.enumerate() {
        let Some(ip) = hop else {
            return Walk::Malformed;
        };
        let ip = canonical(ip);
        if !is_trusted(ip) {
            return Walk::Client(ip);
        }
        // The documented limit: 32 trusted hops fall back, even when no hop is left (the
        // left-most of a chain that long is no more believable than the rest).
        if i + 1 == MAX_HOPS {
            return Walk::Malformed;
        }
        last = Walk::Client(ip);
    }
    last
}

/// One `X-Forwarded-For` entry: an address, optional whitespace around it.
fn xff_hop(entry: &[u8]) -> Option<IpAddr> {
    if entry.len() > MAX_HOP_LEN {
        return None;
    }
    std::str::from_utf8(entry)
        .ok()?
        .trim_matches(ows)
        .parse()
        .ok()
}

/// HTTP's optional whitespace: spaces and tabs, nothing else.
fn ows(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// One `Forwarded` element (`for=...;proto=...`): its `for` address. An element without one,
/// or with an obfuscated identifier (`for=_hidden`, `for=unknown`), is malformed.
fn forwarded_hop(element: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(element).ok()?;
    let value = text.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim_matches(ows)
            .eq_ignore_ascii_case("for")
            .then_some(v.trim_matches(ows))
    })?;
    if value.len() > MAX_HOP_LEN {
        return None;
    }
    forwarded_for(value)
}

/// A `Forwarded` `for=` node (RFC 7239 section 6): `192.0.2.1`, `"192.0.2.1:80"`,
/// `"[2001:db8::1]"`, `"[2001:db8::1]:80"` (a port may be obfuscated, `:_abc`). Quotes must be
/// balanced and brackets closed; an obfuscated or `unknown` node is not an address.
fn forwarded_for(v: &str) -> Option<IpAddr> {
    let v = match v.strip_prefix('"') {
        Some(inner) => inner.strip_suffix('"')?,
        None => v,
    };
    let port_ok = |port: Option<&str>| match port {
        None => true,
        Some(p) => {
            let obfuscated = p.len() > 1
                && p.starts_with('_')
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            obfuscated || (!p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        }
    };
    if let Some(rest) = v.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            a => Some(a.strip_prefix(':')?),
        };
        return port_ok(port).then(|| host.parse::<Ipv6Addr>().ok().map(IpAddr::V6))?;
    }
    let (host, port) = match v.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (v, None),
    };
    port_ok(port).then(|| host.parse::<Ipv4Addr>().ok().map(IpAddr::V4))?
}

/// The key of an address, inline: `4` and four octets, `6` and sixteen masked to the prefix,
/// or [`MISSING`] without an address.
fn ip_key(ip: Option<IpAddr>, v6_prefix: u8) -> KeyBytes<'static> {
    let mut buf = [0u8; 17];
    let len = match ip {
        Some(IpAddr::V4(v4)) => {
            buf[0] = 4;
            buf[1..5].copy_from_slice(&v4.octets());
            5
        }
        Some(IpAddr::V6(v6)) => {
            buf[0] = 6;
            buf[1..17].copy_from_slice(&mask_v6(v6, v6_prefix).octets());
            17
        }
        None => return KeyBytes::Borrowed(MISSING),
    };
    KeyBytes::Ip(buf, len)
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
        IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, prefix)),
    }
}

fn mask_v6(v6: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let m = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    };
    Ipv6Addr::from(u128::from(v6) & m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn parts(peer: &str, headers: &[(&str, &[u8])]) -> Parts {
        let mut b = http::Request::builder().uri("/x");
        for (k, v) in headers {
            b = b.header(*k, http::HeaderValue::from_bytes(v).unwrap());
        }
        let mut req = b.body(()).unwrap();
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::new(peer.parse().unwrap(), 1234)));
        req.into_parts().0
    }

    fn key(by: &KeyBy, p: &Parts) -> Vec<u8> {
        by.key(p).as_slice().to_vec()
    }

    fn client(trusted: &str) -> KeyBy {
        KeyBy::ClientIp {
            trusted: trusted.split(' ').map(|n| Net::parse(n).unwrap()).collect(),
            v6_prefix: 64,
        }
    }

    fn client_fwd(trusted: &str) -> KeyBy {
        KeyBy::ClientIpForwarded {
            trusted: trusted.split(' ').map(|n| Net::parse(n).unwrap()).collect(),
            v6_prefix: 64,
        }
    }

    /// The key [`KeyBy::PeerIp`] gives a request from `ip`.
    fn ip(ip: &str) -> Vec<u8> {
        key(&KeyBy::PeerIp { v6_prefix: 64 }, &parts(ip, &[]))
    }

    #[test]
    fn an_ipv4_mapped_network_is_its_ipv4_network() {
        let mapped = Net::parse("::ffff:10.0.0.0/104").unwrap();
        assert_eq!(mapped, Net::parse("10.0.0.0/8").unwrap());
        for ip in ["10.0.0.1", "::ffff:10.0.0.1"] {
            assert!(mapped.contains(ip.parse().unwrap()), "{ip}");
            assert!(Net::parse("::ffff:10.0.0.1")
                .unwrap()
                .contains(ip.parse().unwrap()));
        }
        assert!(!mapped.contains("11.0.0.1".parse().unwrap()));
        // Shorter than the mapped prefix: an IPv6 network like any other.
        assert!(Net::parse("::ffff:0:0/95")
            .unwrap()
            .contains("::fffe:0:1".parse().unwrap()));
    }

    #[test]
    fn ipv6_addresses_in_one_64_share_a_key_and_others_do_not() {
        assert_eq!(
            ip("2001:db8:1:2::1"),
            ip("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        let exact = KeyBy::PeerIp { v6_prefix: 128 };
        assert_ne!(
            key(&exact, &parts("2001:db8::1", &[])),
            key(&exact, &parts("2001:db8::2", &[]))
        );
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let by = client("10.0.0.0/8");
        let xff: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.7, 10.1.1.1")];
        // From a trusted proxy: the right-most untrusted hop.
        assert_eq!(key(&by, &parts("10.0.0.1", xff)), ip("198.51.100.7"));
        // From anyone else: the peer, whatever the header says.
        assert_eq!(key(&by, &parts("203.0.113.9", xff)), ip("203.0.113.9"));
        // RFC 7239 Forwarded, with a port and brackets, for the key that reads it.
        let by_fwd = client_fwd("10.0.0.0/8");
        let fwd: &[(&str, &[u8])] = &[("forwarded", br#"for="[2001:db8::7]:4711";proto=https"#)];
        assert_eq!(key(&by_fwd, &parts("10.0.0.1", fwd)), ip("2001:db8::99"));
        let fwd: &[(&str, &[u8])] = &[("forwarded", b"for=192.0.2.60;proto=http, for=10.0.0.3")];
        assert_eq!(key(&by_fwd, &parts("10.0.0.1", fwd)), ip("192.0.2.60"));
        // Several header lines are one list, in order.
        let lines: &[(&str, &[u8])] = &[
            ("x-forwarded-for", b"192.0.2.8"),
            ("x-forwarded-for", b"10.0.0.5"),
        ];
        assert_eq!(key(&by, &parts("10.0.0.1", lines)), ip("192.0.2.8"));
        // Every hop trusted: the left-most.
        let inside: &[(&str, &[u8])] = &[("x-forwarded-for", b"10.9.9.9, 10.0.0.5")];
        assert_eq!(key(&by, &parts("10.0.0.1", inside)), ip("10.9.9.9"));
    }

    #[test]
    fn what_the_client_wrote_left_of_its_own_address_is_never_read() {
        let by = client("10.0.0.0/8");
        for sent in [
            &b"1.2.3.4, 198.51.100.7"[..],
            b"not-an-ip, 198.51.100.7",
            b"\xff\xfe, 198.51.100.7",
            b", , 198.51.100.7",
        ] {
            let h: &[(&str, &[u8])] = &[("x-forwarded-for", sent)];
            assert_eq!(
                key(&by, &parts("10.0.0.1", h)),
                ip("198.51.100.7"),
                "{sent:?}"
            );
        }
    }

    #[test]
    fn a_malformed_or_oversized_chain_falls_back_to_the_peer() {
        let by = client("10.0.0.0/8");
        let long_entry = format!("{}1.2.3.4", " ".repeat(100));
        let many_proxies = vec!["10.0.0.9"; 40].join(", ");
        for bad in [
            &b"198.51.100.7, not-an-ip"[..],
            b"198.51.100.7, \xff",
            b"",
            b"198.51.100.7,",
            b"198.51.100.7:80",
            long_entry.as_bytes(),
            many_proxies.as_bytes(),
        ] {
            let h: &[(&str, &[u8])] = &[("x-forwarded-for", bad)];
            assert_eq!(key(&by, &parts("10.0.0.1", h)), ip("10.0.0.1"), "{bad:?}");
        }
        for bad in [
            &b"for=unknown"[..],
            b"for=_hidden",
            b"proto=https",
            b"for=\"[2001:db8::7\"",
            b"for=\xff",
        ] {
            let h: &[(&str, &[u8])] = &[("forwarded", bad)];
            let by = client_fwd("10.0.0.0/8");
            assert_eq!(key(&by, &parts("10.0.0.1", h)), ip("10.0.0.1"), "{bad:?}");
        }
    }

    #[test]
    fn thirty_two_trusted_hops_fall_back_to_the_peer() {
        // Found by the `tower_key` fuzz target: exactly 32 trusted hops, and nothing left of
        // them, gave the left-most hop instead of the documented fallback.
        let by = client("10.0.0.0/8");
        let chain = |n: usize| vec!["10.0.0.9"; n].join(", ");
        let with_client = |n: usize| format!("198.51.100.7, {}", chain(n));
        let h = |v: &str| vec![("x-forwarded-for", v.as_bytes().to_vec())];
        let k = |v: &str| {
            let h = h(v);
            let h: Vec<(&str, &[u8])> = h.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            key(&by, &parts("10.0.0.1", &h))
        };
        assert_eq!(k(&chain(31)), ip("10.0.0.9"));
        assert_eq!(k(&chain(32)), ip("10.0.0.1"));
        assert_eq!(k(&with_client(31)), ip("198.51.100.7"));
        assert_eq!(k(&with_client(32)), ip("10.0.0.1"));
    }

    #[test]
    fn only_spaces_and_tabs_around_an_entry_are_whitespace() {
        // `str::trim` would also strip Unicode spaces (a no-break space, U+3000), which
        // are not HTTP whitespace: such an entry is malformed.
        let by = client("10.0.0.0/8");
        let h: &[(&str, &[u8])] = &[("x-forwarded-for", b" \t198.51.100.7\t ")];
        assert_eq!(key(&by, &parts("10.0.0.1", h)), ip("198.51.100.7"));
        for bad in [&b"\xc2\xa0198.51.100.7"[..], b"198.51.100.7\xe3\x80\x80"] {
            let h: &[(&str, &[u8])] = &[("x-forwarded-for", bad)];
            assert_eq!(key(&by, &parts("10.0.0.1", h)), ip("10.0.0.1"), "{bad:?}");
            let mut fwd = b"for=".to_vec();
            fwd.extend_from_slice(bad);
            let h: &[(&str, &[u8])] = &[("forwarded", &fwd)];
            let by = client_fwd("10.0.0.0/8");
            assert_eq!(key(&by, &parts("10.0.0.1", h)), ip("10.0.0.1"), "{bad:?}");
        }
    }

    #[test]
    fn each_client_key_reads_only_the_header_its_proxies_write() {
        // A proxy that writes `Forwarded` passes the client's own `X-Forwarded-For` through
        // (and the other way round): the header a key does not read cannot pick its key.
        let both = |xff: &'static [u8]| -> Vec<(&'static str, &'static [u8])> {
            vec![("forwarded", b"for=198.51.100.7"), ("x-forwarded-for", xff)]
        };
        let by_fwd = client_fwd("10.0.0.0/8");
        for spoof in [&b"203.0.113.1"[..], b"203.0.113.2"] {
            let h = both(spoof);
            assert_eq!(key(&by_fwd, &parts("10.0.0.1", &h)), ip("198.51.100.7"));
        }
        let by_xff = client("10.0.0.0/8");
        let h: &[(&str, &[u8])] = &[
            ("x-forwarded-for", b"198.51.100.7"),
            ("forwarded", b"for=203.0.113.1"),
        ];
        assert_eq!(key(&by_xff, &parts("10.0.0.1", h)), ip("198.51.100.7"));
        // Only the other header: the peer.
        let h: &[(&str, &[u8])] = &[("forwarded", b"for=203.0.113.1")];
        assert_eq!(key(&by_xff, &parts("10.0.0.1", h)), ip("10.0.0.1"));
    }

    #[test]
    fn a_missing_peer_or_header_falls_back_to_a_shared_key() {
        let req = http::Request::builder().uri("/").body(()).unwrap();
        let (p, _) = req.into_parts();
        assert_eq!(key(&KeyBy::PeerIp { v6_prefix: 64 }, &p), MISSING);
        assert_eq!(key(&client("10.0.0.0/8"), &p), MISSING);
        let h = KeyBy::Header(HeaderName::from_static("x-api-key"));
        assert_eq!(key(&h, &p), MISSING);
        let long = "k".repeat(300);
        assert_eq!(
            key(&h, &parts("192.0.2.1", &[("x-api-key", long.as_bytes())])),
            MISSING
        );
        assert_eq!(
            key(&h, &parts("192.0.2.1", &[("x-api-key", b"\xffkey")])),
            b"\xffkey"
        );
        let f = KeyBy::Custom(Arc::new(|_: &Parts| None));
        assert_eq!(key(&f, &p), MISSING);
    }

    #[test]
    fn the_route_is_the_raw_path_without_a_matched_route() {
        let p = http::Request::builder()
            .uri("/users/1?x=2")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        assert_eq!(key(&KeyBy::Route, &p), b"/users/1");
    }

    #[test]
    fn forwarded_nodes_parse_as_rfc_7239_writes_them() {
        for (node, ip) in [
            ("192.0.2.43", Some("192.0.2.43")),
            ("\"192.0.2.43:47011\"", Some("192.0.2.43")),
            ("\"192.0.2.43:_port\"", Some("192.0.2.43")),
            ("\"[2001:db8:cafe::17]\"", Some("2001:db8:cafe::17")),
            ("\"[2001:db8:cafe::17]:4711\"", Some("2001:db8:cafe::17")),
            ("\"[2001:db8:cafe::17\"", None),
            ("\"[2001:db8:cafe::17]4711\"", None),
            ("\"192.0.2.43", None),
            ("192.0.2.43:123456", None),
            ("2001:db8::1", None),
            ("[192.0.2.43]", None),
            ("unknown", None),
            ("_hidden", None),
        ] {
            assert_eq!(
                forwarded_for(node),
                ip.map(|i| i.parse().unwrap()),
                "{node}"
            );
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
