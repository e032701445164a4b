//! Fuzz body `tower_path`: exempt-path matching ([`Builder::exempt_path`](funnel_tower::Builder::exempt_path)).
//!
//! Each input picks exempt prefixes (usual ones, odd ones, any bytes) and a request path made
//! of segments that matter to a server normalising it (`.`, `..`, `%2e`, `%2f`, `%5c`, `\`,
//! `;` parameters, `%3b`, empty segments, near misses like `healthz`) and raw bytes, as a
//! server delivers it (`http::Uri`'s path). Checks:
//!
//! * a prefix is accepted exactly when it starts with `/`, and the builder says the same;
//! * the path is exempt exactly when a plain reference says so (segment by segment, with the
//!   path's segments percent-decoded);
//! * an exempt path, normalised as the most lenient upstream would (every `%XX` decoded once,
//!   `\` read as `/`, `;` parameters dropped, dot segments resolved), still lies under one of
//!   the prefixes that has no such segment itself: no request gets out of the limiter by
//!   reaching, through the upstream, a path no prefix covers.

use super::{note, Input};
use funnel_tower::fuzzing::{exempt_prefix, path_is_exempt};

const PREFIXES: &[&str] = &[
    "/health", "/health/", "/", "//", "/static", "/a/b", "/api/v1/", "/x%2e", "/h;p", "/a/../b",
    "health", "",
];

const SEGMENTS: &[&[u8]] = &[
    b"health",
    b"static",
    b"a",
    b"b",
    b"api",
    b"v1",
    b"admin",
    b"..",
    b".",
    b"%2e",
    b"%2E%2e",
    b".%2e",
    b"..;",
    b"..;x",
    b"%2e%2e%3b",
    b".;jsessionid=1",
    b"..%3B",
    b"%2f",
    b"%2F",
    b"%5c",
    b"\\",
    b"..\\..",
    b"",
    b"healthz",
    b"%68ealth",
    b";p",
    b"h;p",
    b"x;y",
    b"...",
    b".well-known",
    b"%252e",
    b"%",
    b"%2",
    b"%zz",
    b"?q=/../x",
];

/// The fuzz body.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut prefixes = Vec::new();
    let mut raw_prefixes = Vec::new();
    for _ in 0..=input.below(3) {
        let p = if input.one_in(6) {
            String::from_utf8_lossy(input.bytes(12)).into_owned()
        } else {
            input.choose(PREFIXES).to_string()
        };
        match exempt_prefix(p.clone()) {
            Ok(norm) => {
                assert!(p.starts_with('/'), "{p:?} accepted");
                assert!(norm.len() == 1 || !norm.ends_with('/'), "{p:?} -> {norm:?}");
                prefixes.push(norm);
                raw_prefixes.push(p);
            }
            Err(funnel_tower::Error::BadExemptPath(back)) => {
                assert!(!p.starts_with('/') && back == p, "{p:?} rejected");
                note("prefix refused");
            }
            Err(e) => panic!("{p:?}: {e}"),
        }
    }
    if input.one_in(32) {
        builder_agrees(&raw_prefixes);
    }
    let mut target = Vec::new();
    for _ in 0..=input.below(6) {
        target.push(if input.one_in(8) { b'\\' } else { b'/' });
        if input.one_in(4) {
            target.extend_from_slice(input.bytes(6));
        } else {
            target.extend_from_slice(input.choose(SEGMENTS));
        }
    }
    if !target.starts_with(b"/") {
        target.insert(0, b'/');
    }
    // What a server hands the layer: the URI's path, if the target is one at all.
    let Ok(uri) = http::Uri::try_from(target.as_slice()) else {
        return;
    };
    let path = uri.path();
    let exempt = path_is_exempt(&prefixes, path);
    assert_eq!(
        exempt,
        reference::exempt(&prefixes, path.as_bytes()),
        "{prefixes:?} {path:?}"
    );
    note(if exempt {
        "exempt"
    } else if reference::unsafe_segments(path.as_bytes()) {
        "a path an upstream may normalise"
    } else {
        "not under a prefix"
    });
    if exempt {
        let clean: Vec<&Box<str>> = prefixes
            .iter()
            .filter(|p| !reference::unsafe_segments(p.as_bytes()))
            .collect();
        if clean.len() == prefixes.len() {
            let served = reference::normalise(path.as_bytes());
            assert!(
                clean
                    .iter()
                    .any(|p| reference::under(&reference::normalise(p.as_bytes()), &served)),
                "{path:?} is exempt under {prefixes:?}, but an upstream serves {:?}",
                String::from_utf8_lossy(&served)
            );
        }
    }
}

/// The builder accepts the same prefixes.
fn builder_agrees(raw: &[String]) {
    let q = funnel::Quota::per_second(1).expect("a valid quota");
    let mut b = funnel_tower::Builder::default().policy_with_capacity(
        "g",
        funnel_tower::KeyBy::Global,
        q,
        1,
    );
    for p in raw {
        b = b.exempt_path(p.clone());
    }
    assert!(b.build().is_ok(), "{raw:?}");
}

mod reference {
    fn percent_decode(b: &[u8]) -> Vec<u8> {
        let hex = |c: u8| (c as char).to_digit(16);
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        out
    }

    fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    }

    /// A segment without its parameters.
    fn bare(seg: &[u8]) -> &[u8] {
        &seg[..seg.iter().position(|b| *b == b';').unwrap_or(seg.len())]
    }

    /// A `\`, an encoded `/` or `\`, or a segment that decodes to `.` or `..` (parameters
    /// aside).
    pub(super) fn unsafe_segments(path: &[u8]) -> bool {
        path.contains(&b'\\')
            || contains_ci(path, b"%2f")
            || contains_ci(path, b"%5c")
            || path.split(|b| *b == b'/').any(|seg| {
                let d = percent_decode(seg);
                matches!(bare(&d), b"." | b"..")
            })
    }

    /// The documented rule: no unsafe segment, and the prefix's segments begin the path's.
    pub(super) fn exempt(prefixes: &[Box<str>], path: &[u8]) -> bool {
        !prefixes.is_empty()
            && !unsafe_segments(path)
            && prefixes.iter().any(|p| {
                if &**p == "/" {
                    return true;
                }
                let ps: Vec<&[u8]> = p.as_bytes().split(|b| *b == b'/').collect();
                let xs: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
                xs.len() >= ps.len() && ps.iter().zip(&xs).all(|(a, b)| a == b)
            })
    }

    /// The path the most lenient upstream serves: decoded once, `\` as `/`, parameters
    /// dropped, dot segments resolved (RFC 3986 section 5.2.4), a leading `/` kept.
    pub(super) fn normalise(path: &[u8]) -> Vec<u8> {
        let decoded: Vec<u8> = percent_decode(path)
            .into_iter()
            .map(|b| if b == b'\\' { b'/' } else { b })
            .collect();
        let mut out: Vec<&[u8]> = Vec::new();
        let segs: Vec<&[u8]> = decoded.split(|b| *b == b'/').skip(1).collect();
        let last = segs.len().saturating_sub(1);
        for (i, seg) in segs.iter().enumerate() {
            match bare(seg) {
                b"." => {
                    if i == last {
                        out.push(b"");
                    }
                }
                b".." => {
                    out.pop();
                    if i == last {
                        out.push(b"");
                    }
                }
                s => out.push(s),
            }
        }
        let mut p = Vec::new();
        for seg in out {
            p.push(b'/');
            p.extend_from_slice(seg);
        }
        if p.is_empty() {
            p.push(b'/');
        }
        p
    }

    /// Whether `path` is `prefix` or below it, by whole segments (`prefix` normalised).
    pub(super) fn under(prefix: &[u8], path: &[u8]) -> bool {
        let prefix = match prefix.strip_suffix(b"/") {
            Some(p) => p,
            None => prefix,
        };
        prefix.is_empty()
            || path == prefix
            || (path.starts_with(prefix) && path[prefix.len()] == b'/')
    }
}
