//! Fuzz body `tower_key`: the key [`KeyBy`] takes from a request.
//!
//! Each input builds one request head: an optional peer address, forwarding headers (both
//! `X-Forwarded-For` and `Forwarded`, any number of lines, any bytes a header value may hold:
//! addresses of every family with ports, brackets, quotes, IPv6 zones, obfuscated nodes,
//! whitespace runs where an obs-fold was unfolded, non-UTF-8 bytes, entries kilobytes long), an
//! API-key header and a path. Then, for every key variant but `Custom`:
//!
//! * the key equals the one a plain reference reading of the documented rules gives
//!   (the `reference` module below, written apart from funnel-tower's `src/key.rs`: bytes, not
//!   `str` methods);
//! * a peer outside the trusted networks gets its own address, whatever it sent;
//! * reading the key allocates nothing (as the caller's allocation probe counts: the test
//!   kit's counting allocator, in the fuzz target and the stable replay), and an address key
//!   is at most 17 bytes, a header key at most 256.
//!
//! Half of the inputs are a chain instead: a client writes any forwarding headers it likes,
//! then one to forty honest trusted proxies each append the address they were connected from
//! (to the last line or on a line of their own, in any of the forms RFC 7239 allows). The key
//! must then be the client's real address, or the nearest proxy's when the chain is longer
//! than the walk's 32 trusted hops: never anything the client wrote.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::{HeaderName, HeaderValue};

use super::{note, Input};
use funnel_tower::fuzzing::read_key;
use funnel_tower::{KeyBy, Net, PeerAddr};

/// A trusted network as `Net::parse` reads it, and the same network written independently:
/// its canonical address (IPv4 for an IPv4-mapped one) and prefix length.
const NETS: &[(&str, [u8; 16], u8, bool)] = &[
    ("10.0.0.0/8", v4([10, 0, 0, 0]), 8, true),
    ("192.168.1.0/24", v4([192, 168, 1, 0]), 24, true),
    ("::ffff:172.16.0.0/108", v4([172, 16, 0, 0]), 12, true),
    ("198.51.100.7", v4([198, 51, 100, 7]), 32, true),
    ("0.0.0.0/0", v4([0; 4]), 0, true),
    (
        "2001:db8::/32",
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        32,
        false,
    ),
    (
        "fd00::1",
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        128,
        false,
    ),
];

const fn v4(o: [u8; 4]) -> [u8; 16] {
    [o[0], o[1], o[2], o[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// Addresses the inputs pick from: inside and outside the networks above, at their edges,
/// IPv4-mapped, link-local.
const ADDRS: &[&str] = &[
    "10.0.0.1",
    "10.255.255.255",
    "11.0.0.0",
    "192.168.1.9",
    "192.168.2.1",
    "172.16.5.4",
    "172.32.0.1",
    "198.51.100.7",
    "198.51.100.8",
    "203.0.113.9",
    "1.2.3.4",
    "0.0.0.0",
    "255.255.255.255",
    "127.0.0.1",
    "2001:db8::1",
    "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
    "2001:db9::1",
    "fd00::1",
    "fd00::2",
    "::1",
    "::",
    "::ffff:10.1.2.3",
    "::ffff:203.0.113.9",
    "fe80::1",
    "2001:db8:1:2:3:4:5:6",
];

/// Pieces of forwarding headers, well and badly formed.
const PIECES: &[&[u8]] = &[
    b",",
    b", ",
    b" , ",
    b";",
    b"=",
    b" ",
    b"\t",
    b"   \t ",
    b"\"",
    b"[",
    b"]",
    b":",
    b"%",
    b"for=",
    b"FOR=",
    b" for = ",
    b"by=",
    b"proto=https",
    b"host=\"a,b\"",
    b"for=unknown",
    b"for=_hidden",
    b"unknown",
    b"_hidden",
    b":80",
    b":_p0rt",
    b":123456",
    b":",
    b"%eth0",
    b"%25eth0",
    b"\xc2\xa0",
    b"\xe3\x80\x80",
    b"\xff\xfe",
    b"0",
    b"01.2.3.4",
    b"1.2.3",
    b"::ffff:",
    b"\\\"",
];

const HEADERS: &[&str] = &[
    "x-forwarded-for",
    "forwarded",
    "x-api-key",
    "x-real-ip",
    "X-Forwarded-For",
];

/// The fuzz body. `allocated` reports the bytes the calling thread has allocated so far
/// (`None` when nothing counts them): the test kit's counting allocator's probe, with which
/// the body checks that reading a key allocates nothing.
pub fn run(data: &[u8], allocated: fn() -> Option<u64>) {
    let mut input = Input::new(data);
    let trusted_ix: Vec<usize> = (0..NETS.len())
        .filter(|i| {
            // The catch-all network rarely: with it, every IPv4 client is trusted.
            let p = if NETS[*i].1 == [0; 16] { 16 } else { 2 };
            input.one_in(p)
        })
        .collect();
    let v6_prefix = match input.below(4) {
        0 => 64,
        1 => input.choose(&[0, 1, 48, 56, 127, 128]),
        _ => input.below(129) as u8,
    };
    let chain = input.byte() & 1 == 1;
    let mut head = Head {
        peer: None,
        headers: Vec::new(),
        path: b"/".to_vec(),
    };
    client_headers(&mut input, &mut head);
    let mut expect_client = None;
    if chain && !trusted_ix.is_empty() {
        expect_client = honest_chain(&mut input, &mut head, &trusted_ix);
    } else if !input.one_in(16) {
        head.peer = Some(addr(&mut input));
    }
    match head.peer {
        None => note("no peer"),
        Some(p) if reference::trusted(p, &trusted_ix) => note("trusted peer"),
        Some(_) => note("untrusted peer"),
    }
    head.path = path(&mut input);
    check(&head, &trusted_ix, v6_prefix, expect_client, allocated);
}

/// A request head in the reference's terms.
struct Head {
    peer: Option<IpAddr>,
    /// In order, names lowercase, values valid header values.
    headers: Vec<(HeaderName, Vec<u8>)>,
    path: Vec<u8>,
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "peer {:?}, path {:?}",
            self.peer,
            String::from_utf8_lossy(&self.path)
        )?;
        for (n, v) in &self.headers {
            let shown = &v[..v.len().min(300)];
            writeln!(
                f,
                "  {n}: {:?} ({} bytes)",
                String::from_utf8_lossy(shown),
                v.len()
            )?;
        }
        Ok(())
    }
}

fn addr(input: &mut Input<'_>) -> IpAddr {
    match input.below(8) {
        0 => IpAddr::V4(Ipv4Addr::from(input.u64() as u32)),
        1 => IpAddr::V6(Ipv6Addr::from(
            (u128::from(input.u64()) << 64) | u128::from(input.u64()),
        )),
        _ => input.choose(ADDRS).parse().expect("a listed address"),
    }
}

/// Forwarding and API-key headers as a client may send them.
fn client_headers(input: &mut Input<'_>, head: &mut Head) {
    let lines = match input.below(8) {
        0 => 0,
        1 => input.below(120),
        _ => input.below(5),
    };
    for _ in 0..lines {
        let name = HeaderName::from_bytes(input.choose(HEADERS).as_bytes()).expect("valid");
        let value = value(input);
        head.headers.push((name, value));
    }
}

/// A header value: pieces, addresses in every rendering, raw bytes, sometimes repeated into
/// kilobytes; then made a valid header value the way a server would deliver it (bytes a
/// value cannot hold become spaces, as an unfolded obs-fold does).
fn value(input: &mut Input<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..input.below(12) {
        let piece: Vec<u8> = match input.below(6) {
            0 | 1 => input.choose(PIECES).to_vec(),
            2 | 3 => {
                let ip = addr(input);
                rendered(input, ip)
            }
            4 => input.bytes(24).to_vec(),
            _ => {
                let piece = input.choose(PIECES).to_vec();
                let times = input.choose(&[2, 33, 100, 2_000]);
                piece.repeat(times)
            }
        };
        v.extend_from_slice(&piece);
        if v.len() > 16 * 1024 {
            break;
        }
    }
    for b in &mut v {
        if (*b < 0x20 && *b != b'\t') || *b == 0x7f {
            *b = b' ';
        }
    }
    v
}

/// An address as a hop may write it, well or badly formed.
fn rendered(input: &mut Input<'_>, ip: IpAddr) -> Vec<u8> {
    let port = input.choose(&["", ":80", ":_x", ":", ":65536", ":0"]);
    match (input.below(10), ip) {
        (0, IpAddr::V6(v6)) => format!("[{v6}]{port}"),
        (1, IpAddr::V6(v6)) => format!("for=\"[{v6}]{port}\""),
        (2, IpAddr::V6(v6)) => format!("for=[{v6}]"),
        (3, IpAddr::V6(v6)) => format!("{v6}%eth0"),
        (4, ip) => format!("for=\"{ip}{port}\""),
        (5, ip) => format!("for={ip}{port}"),
        (6, ip) => format!("for={ip};proto=http"),
        (7, ip) => format!("{ip}{port}"),
        (8, IpAddr::V6(v6)) => v6.to_string().to_uppercase(),
        (_, ip) => ip.to_string(),
    }
    .into_bytes()
}

fn path(input: &mut Input<'_>) -> Vec<u8> {
    let mut p = b"/".to_vec();
    for _ in 0..input.below(6) {
        let seg: &[u8] = match input.below(4) {
            0 => input.choose(&[
                &b"users"[..],
                b"..",
                b"%2e",
                b"%2F",
                b"",
                b"a%20b",
                b"?q=1",
                b"\xff",
            ]),
            _ => input.bytes(8),
        };
        p.extend_from_slice(seg);
        p.push(b'/');
    }
    p
}

/// Honest trusted proxies append to what the client wrote; returns the key the chain must
/// give (the client's address, or the nearest proxy's past 32 trusted hops) and whether the
/// proxies write `Forwarded`.
fn honest_chain(
    input: &mut Input<'_>,
    head: &mut Head,
    trusted_ix: &[usize],
) -> Option<(IpAddr, bool)> {
    let forwarded = input.byte() & 1 == 1;
    let name = HeaderName::from_static(if forwarded {
        "forwarded"
    } else {
        "x-forwarded-for"
    });
    let client = addr(input);
    let hops = match input.below(4) {
        0 => input.choose(&[31, 32, 33, 40]),
        _ => 1 + input.below(4),
    };
    // Hosts of the trusted networks, in reference terms.
    let trusted_hosts: Vec<IpAddr> = ADDRS
        .iter()
        .map(|a| a.parse().expect("a listed address"))
        .filter(|ip| reference::trusted(*ip, trusted_ix))
        .collect();
    if trusted_hosts.is_empty() {
        head.peer = Some(client);
        return None;
    }
    let proxies: Vec<IpAddr> = (0..hops).map(|_| input.choose(&trusted_hosts)).collect();
    // Proxy i appends the address it was connected from: the client, then proxy i - 1.
    let mut from = client;
    for proxy in &proxies {
        let entry = honest(input, from, forwarded);
        let last = head.headers.iter_mut().rev().find(|(n, _)| *n == name);
        match last {
            Some((_, line)) if input.byte() & 1 == 1 => {
                line.extend_from_slice(input.choose(&[&b", "[..], b","]));
                line.extend_from_slice(&entry);
            }
            _ => head.headers.push((name.clone(), entry)),
        }
        from = *proxy;
    }
    head.peer = Some(from);
    // A trusted client may name any key it likes: there is nothing to check then.
    note(if hops <= 32 {
        "chain"
    } else {
        "chain past 32 trusted hops"
    });
    (!reference::trusted(client, trusted_ix))
        .then_some((if hops <= 32 { client } else { from }, forwarded))
}

/// The entry an honest proxy writes for `ip`.
fn honest(input: &mut Input<'_>, ip: IpAddr, forwarded: bool) -> Vec<u8> {
    if !forwarded {
        return ip.to_string().into_bytes();
    }
    let node = match (input.below(3), ip) {
        (0, IpAddr::V4(v4)) => format!("{v4}"),
        (_, IpAddr::V4(v4)) => format!("\"{v4}:{}\"", input.below(65_536)),
        (0, IpAddr::V6(v6)) => format!("\"[{v6}]\""),
        (1, IpAddr::V6(v6)) => format!("\"[{v6}]:_{}\"", input.below(1000)),
        (_, IpAddr::V6(v6)) => format!("\"[{v6}]:{}\"", input.below(65_536)),
    };
    let before = input.choose(&["", "proto=https;", "by=_lb;host=example.com;"]);
    let after = input.choose(&["", ";proto=http", ";by=\"[2001:db8::9]\""]);
    format!("{before}for={node}{after}").into_bytes()
}

/// Builds the request, reads every key and checks it.
fn check(
    head: &Head,
    trusted_ix: &[usize],
    v6_prefix: u8,
    expect_client: Option<(IpAddr, bool)>,
    allocated: fn() -> Option<u64>,
) {
    let mut req = http::Request::new(());
    // A target a server would not accept leaves the default `/`.
    if let Ok(uri) = http::Uri::try_from(head.path.as_slice()) {
        *req.uri_mut() = uri;
    }
    for (name, value) in &head.headers {
        let value = HeaderValue::from_bytes(value).expect("value() makes valid values");
        req.headers_mut().append(name.clone(), value);
    }
    if let Some(ip) = head.peer {
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::new(ip, 4711)));
    }
    let (parts, ()) = req.into_parts();
    let trusted: Vec<Net> = trusted_ix
        .iter()
        .map(|i| Net::parse(NETS[*i].0).expect("a listed network"))
        .collect();
    let api_key = HeaderName::from_static("x-api-key");
    let keys = [
        KeyBy::PeerIp { v6_prefix },
        KeyBy::ClientIp {
            trusted: trusted.clone(),
            v6_prefix,
        },
        KeyBy::ClientIpForwarded { trusted, v6_prefix },
        KeyBy::Header(api_key.clone()),
        KeyBy::Header(HeaderName::from_static("x-forwarded-for")),
        KeyBy::Route,
        KeyBy::Global,
    ];
    for by in &keys {
        let before = allocated();
        // The probe is read before the key is copied out of the reading.
        let (after, key) = read_key(by, &parts, |key| (allocated(), key.to_vec()));
        assert_eq!(after, before, "{by:?}: reading the key allocated");
        let key = key.as_slice();
        let expected = reference::key(by, head, trusted_ix, v6_prefix, parts.uri.path());
        assert_eq!(
            key,
            expected.as_slice(),
            "{by:?}: not the documented key for {head:?}"
        );
        assert!(key.len() <= 256 || matches!(by, KeyBy::Route), "{by:?}");
        let is_peer = key == reference::ip_key(head.peer, v6_prefix).as_slice();
        match by {
            KeyBy::ClientIp { .. } | KeyBy::ClientIpForwarded { .. } if !is_peer => {
                note("a client address from a header")
            }
            KeyBy::Header(name) => {
                let first = head.headers.iter().find(|(n, _)| n == name);
                if first.is_some_and(|(_, v)| v.len() > 256) {
                    note("a header key over 256 bytes");
                }
            }
            _ => {}
        }
        let peer_untrusted = head
            .peer
            .is_some_and(|p| !reference::trusted(p, trusted_ix));
        let client_key = matches!(by, KeyBy::ClientIp { .. } | KeyBy::ClientIpForwarded { .. });
        if client_key && peer_untrusted {
            let own = reference::ip_key(head.peer, v6_prefix);
            assert_eq!(
                key,
                own.as_slice(),
                "{by:?}: an untrusted peer chose its key"
            );
        }
    }
    // The chain's header is the one its proxies wrote; the key reading the other one falls
    // back to the peer, which is checked against the reference above.
    if let Some((client, forwarded)) = expect_client {
        let by = &keys[if forwarded { 2 } else { 1 }];
        let key = read_key(by, &parts, <[u8]>::to_vec);
        assert_eq!(
            key.as_slice(),
            reference::ip_key(Some(client), v6_prefix).as_slice(),
            "{by:?}: behind honest proxies, not the client's real address"
        );
    }
}

/// The documented rules, read plainly. Addresses themselves are parsed by `std`; everything
/// around them (lists, elements, parameters, quotes, brackets, ports, whitespace, limits, the
/// walk) is read here, over bytes.
mod reference {
    use super::*;

    /// The shared key of a request without the part a key reads.
    const MISSING: &[u8] = b"\0missing";

    pub(super) fn canonical(ip: IpAddr) -> IpAddr {
        if let IpAddr::V6(v6) = ip {
            let o = v6.octets();
            if o[..10] == [0; 10] && o[10] == 0xff && o[11] == 0xff {
                return IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
            }
        }
        ip
    }

    /// Whether the first `prefix` bits of `a` and `b` agree.
    fn same_prefix(a: &[u8], b: &[u8], prefix: u8) -> bool {
        (0..usize::from(prefix)).all(|bit| {
            let m = 0x80 >> (bit % 8);
            a[bit / 8] & m == b[bit / 8] & m
        })
    }

    pub(super) fn trusted(ip: IpAddr, trusted_ix: &[usize]) -> bool {
        let ip = canonical(ip);
        trusted_ix.iter().any(|i| {
            let (_, net, prefix, is_v4) = NETS[*i];
            match ip {
                IpAddr::V4(v4) => is_v4 && same_prefix(&v4.octets(), &net[..4], prefix),
                IpAddr::V6(v6) => !is_v4 && same_prefix(&v6.octets(), &net, prefix),
            }
        })
    }

    pub(super) fn ip_key(ip: Option<IpAddr>, v6_prefix: u8) -> Vec<u8> {
        match ip.map(canonical) {
            None => MISSING.to_vec(),
            Some(IpAddr::V4(v4)) => [&[4u8][..], &v4.octets()].concat(),
            Some(IpAddr::V6(v6)) => {
                let mut o = v6.octets();
                for bit in usize::from(v6_prefix.min(128))..128 {
                    o[bit / 8] &= !(0x80 >> (bit % 8));
                }
                [&[6u8][..], &o].concat()
            }
        }
    }

    pub(super) fn key(
        by: &KeyBy,
        head: &Head,
        trusted_ix: &[usize],
        v6_prefix: u8,
        path: &str,
    ) -> Vec<u8> {
        match by {
            KeyBy::PeerIp { .. } => ip_key(head.peer, v6_prefix),
            KeyBy::ClientIp { .. } => {
                ip_key(client(head, trusted_ix, "x-forwarded-for"), v6_prefix)
            }
            KeyBy::ClientIpForwarded { .. } => {
                ip_key(client(head, trusted_ix, "forwarded"), v6_prefix)
            }
            KeyBy::Header(name) => match head.headers.iter().find(|(n, _)| n == name) {
                Some((_, v)) if v.len() <= 256 => v.clone(),
                _ => MISSING.to_vec(),
            },
            KeyBy::Route => {
                // The raw path: the request-target up to `?` (or `#`, which no server
                // forwards) in origin form; otherwise the URI's path, which `http` reads (`*`
                // or an absolute form).
                let target = &head.path;
                if http::Uri::try_from(target.as_slice()).is_ok() && target.starts_with(b"/") {
                    let end = target
                        .iter()
                        .position(|b| matches!(b, b'?' | b'#'))
                        .unwrap_or(target.len());
                    target[..end].to_vec()
                } else {
                    path.as_bytes().to_vec()
                }
            }
            KeyBy::Global => Vec::new(),
            KeyBy::Custom(_) => unreachable!("not fuzzed"),
        }
    }

    /// The client behind trusted proxies, or the peer as every fallback says.
    fn client(head: &Head, trusted_ix: &[usize], header: &str) -> Option<IpAddr> {
        let peer = canonical(head.peer?);
        if !trusted(peer, trusted_ix) {
            return Some(peer);
        }
        let mut entries: Vec<&[u8]> = Vec::new();
        for (name, value) in &head.headers {
            if name.as_str() == header {
                entries.extend(value.split(|b| *b == b','));
            }
        }
        let mut passed = 0;
        let mut leftmost = None;
        for entry in entries.iter().rev() {
            let hop = if header == "forwarded" {
                forwarded_element(entry)
            } else {
                xff_entry(entry)
            };
            let Some(ip) = hop.map(canonical) else {
                return Some(peer);
            };
            if !trusted(ip, trusted_ix) {
                return Some(ip);
            }
            passed += 1;
            if passed == 32 {
                return Some(peer);
            }
            leftmost = Some(ip);
        }
        Some(leftmost.unwrap_or(peer))
    }

    fn ows_trim(mut b: &[u8]) -> &[u8] {
        while let [b' ' | b'\t', rest @ ..] = b {
            b = rest;
        }
        while let [rest @ .., b' ' | b'\t'] = b {
            b = rest;
        }
        b
    }

    fn parse<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
        std::str::from_utf8(b).ok()?.parse().ok()
    }

    /// An `X-Forwarded-For` entry: at most 64 bytes, an address with optional whitespace.
    fn xff_entry(entry: &[u8]) -> Option<IpAddr> {
        if entry.len() > 64 {
            return None;
        }
        parse(ows_trim(entry))
    }

    /// A `Forwarded` element: UTF-8, `;`-separated pairs; the first `for` pair's node, at most
    /// 64 bytes.
    fn forwarded_element(element: &[u8]) -> Option<IpAddr> {
        std::str::from_utf8(element).ok()?;
        for pair in element.split(|b| *b == b';') {
            let Some(eq) = pair.iter().position(|b| *b == b'=') else {
                continue;
            };
            if !ows_trim(&pair[..eq]).eq_ignore_ascii_case(b"for") {
                continue;
            }
            let node = ows_trim(&pair[eq + 1..]);
            if node.len() > 64 {
                return None;
            }
            return forwarded_node(node);
        }
        None
    }

    /// `ip4`, `ip4:port`, `[ip6]`, `[ip6]:port`, each optionally in one pair of quotes.
    fn forwarded_node(node: &[u8]) -> Option<IpAddr> {
        let node = match node {
            [b'"', inner @ .., b'"'] => inner,
            [b'"', ..] => return None,
            _ => node,
        };
        if let [b'[', rest @ ..] = node {
            let close = rest.iter().position(|b| *b == b']')?;
            let after = &rest[close + 1..];
            let port_ok = after.is_empty() || (after[0] == b':' && port(&after[1..]));
            return port_ok
                .then(|| parse::<Ipv6Addr>(&rest[..close]).map(IpAddr::V6))
                .flatten();
        }
        let (host, port_ok) = match node.iter().position(|b| *b == b':') {
            Some(colon) => (&node[..colon], port(&node[colon + 1..])),
            None => (node, true),
        };
        port_ok
            .then(|| parse::<Ipv4Addr>(host).map(IpAddr::V4))
            .flatten()
    }

    /// One to five digits, or `_` and at least one of letters, digits, `.`, `_`, `-`.
    fn port(p: &[u8]) -> bool {
        match p {
            [b'_', rest @ ..] => {
                !rest.is_empty()
                    && rest
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            }
            _ => (1..=5).contains(&p.len()) && p.iter().all(u8::is_ascii_digit),
        }
    }
}
