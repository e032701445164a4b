//! Envoy's rate-limit actions, applied to the request a proxy asks about: each list of
//! actions builds one descriptor, one entry per action, as Envoy's route `rate_limits` do.
//!
//! * `remote_address`: (`remote_address`, the client's address) — always an entry; without
//!   a peer address the value is `unknown`.
//! * `request_headers`: (`descriptor_key`, the header's value). A missing header drops the
//!   whole descriptor, unless `skip_if_absent`, which drops only the entry.
//! * `generic_key`: (`descriptor_key`, `descriptor_value`), always.
//! * `header_value_match`: (`descriptor_key`, `descriptor_value`) when every matcher matches
//!   (`expect_match: true`) or not every one does (`false`); otherwise the descriptor is
//!   dropped.
//!
//! `:method`, `:path` and `:authority` name the original request's method, URI and host.
//! A header value that is not UTF-8 is read lossily; one longer than [`MAX_ENTRY_BYTES`] is
//! replaced by one shared value ([`OVERSIZED`]), so such requests share one count rather than
//! escape it or fail.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName};

use crate::limits::MAX_ENTRY_BYTES;
use crate::proto::rate_limit_descriptor::Entry;
use crate::proto::RateLimitDescriptor;

/// The value standing for every header value too long to be a descriptor value.
pub const OVERSIZED: &str = "\u{0}oversized";

/// Where an action reads a value.
#[derive(Clone, Debug)]
pub enum Source {
    /// `:method`.
    Method,
    /// `:path`: the original URI, path and query.
    Path,
    /// `:authority`: the original host.
    Authority,
    /// A request header.
    Header(HeaderName),
}

/// How a header's value is compared.
#[derive(Clone, Debug)]
pub enum Matcher {
    /// Equal.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Ends with.
    Suffix(String),
    /// Contains.
    Contains(String),
    /// The header is present (`true`) or absent (`false`).
    Present(bool),
}

/// One of `header_value_match`'s matchers.
#[derive(Clone, Debug)]
pub struct HeaderMatch {
    /// What is compared.
    pub source: Source,
    /// How.
    pub matcher: Matcher,
    /// `invert_match`.
    pub invert: bool,
}

/// One action.
#[derive(Clone, Debug)]
pub enum Action {
    /// `remote_address`.
    RemoteAddress,
    /// `request_headers`.
    RequestHeader {
        /// `header_name`.
        source: Source,
        /// `descriptor_key`.
        descriptor_key: String,
        /// `skip_if_absent`.
        skip_if_absent: bool,
    },
    /// `generic_key`.
    GenericKey {
        /// `descriptor_key` (`generic_key` by default).
        descriptor_key: String,
        /// `descriptor_value`.
        descriptor_value: String,
    },
    /// `header_value_match`.
    HeaderValueMatch {
        /// `descriptor_key` (`header_match` by default).
        descriptor_key: String,
        /// `descriptor_value`.
        descriptor_value: String,
        /// `expect_match` (true by default).
        expect_match: bool,
        /// `headers`: all must match.
        headers: Vec<HeaderMatch>,
    },
}

/// The request a proxy asks about, as the actions see it.
pub struct Original<'a> {
    /// The original method.
    pub method: String,
    /// The original URI, when the proxy sent it.
    pub path: Option<String>,
    /// The original host, when the proxy sent it.
    pub authority: Option<String>,
    /// The headers the proxy sent along.
    pub headers: &'a HeaderMap,
    /// The client's address, grouped as the configuration says.
    pub client: Option<IpAddr>,
}

impl Original<'_> {
    /// The value `source` names, if present, bounded as the module says.
    fn value(&self, source: &Source) -> Option<String> {
        let raw = match source {
            Source::Method => return Some(bounded(self.method.as_bytes())),
            Source::Path => self.path.as_ref()?.as_bytes(),
            Source::Authority => self.authority.as_ref()?.as_bytes(),
            Source::Header(name) => self.headers.get(name)?.as_bytes(),
        };
        Some(bounded(raw))
    }
}

/// A value within [`MAX_ENTRY_BYTES`], or [`OVERSIZED`].
pub fn bounded(raw: &[u8]) -> String {
    if raw.len() > MAX_ENTRY_BYTES {
        return OVERSIZED.to_owned();
    }
    let s = String::from_utf8_lossy(raw);
    // Lossy decoding may lengthen the text (each bad byte becomes three).
    if s.len() > MAX_ENTRY_BYTES {
        OVERSIZED.to_owned()
    } else {
        s.into_owned()
    }
}

impl HeaderMatch {
    fn matches(&self, req: &Original<'_>) -> bool {
        let value = req.value(&self.source);
        let hit = match (&self.matcher, value.as_deref()) {
            (Matcher::Present(want), v) => v.is_some() == *want,
            (_, None) => false,
            (Matcher::Exact(m), Some(v)) => v == m,
            (Matcher::Prefix(m), Some(v)) => v.starts_with(m.as_str()),
            (Matcher::Suffix(m), Some(v)) => v.ends_with(m.as_str()),
            (Matcher::Contains(m), Some(v)) => v.contains(m.as_str()),
        };
        hit != self.invert
    }
}

/// The descriptors of `req`: one per list of actions that produces at least one entry.
pub fn descriptors(rate_limits: &[Vec<Action>], req: &Original<'_>) -> Vec<RateLimitDescriptor> {
    rate_limits
        .iter()
        .filter_map(|actions| descriptor(actions, req))
        .collect()
}

fn descriptor(actions: &[Action], req: &Original<'_>) -> Option<RateLimitDescriptor> {
    let mut entries = Vec::with_capacity(actions.len());
    for a in actions {
        let (key, value) = match a {
            Action::RemoteAddress => (
                "remote_address".to_owned(),
                req.client
                    .map_or_else(|| "unknown".to_owned(), |ip| ip.to_string()),
            ),
            Action::RequestHeader {
                source,
                descriptor_key,
                skip_if_absent,
            } => match req.value(source) {
                Some(v) => (descriptor_key.clone(), v),
                None if *skip_if_absent => continue,
                None => return None,
            },
            Action::GenericKey {
                descriptor_key,
                descriptor_value,
            } => (descriptor_key.clone(), descriptor_value.clone()),
            Action::HeaderValueMatch {
                descriptor_key,
                descriptor_value,
                expect_match,
                headers,
            } => {
                if headers.iter().all(|h| h.matches(req)) != *expect_match {
                    return None;
                }
                (descriptor_key.clone(), descriptor_value.clone())
            }
        };
        entries.push(Entry { key, value });
    }
    (!entries.is_empty()).then(|| RateLimitDescriptor {
        entries,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(headers: &'a HeaderMap, client: Option<&str>) -> Original<'a> {
        Original {
            method: "POST".into(),
            path: Some("/api/v1?x=1".into()),
            authority: None,
            headers,
            client: client.map(|c| c.parse().unwrap()),
        }
    }

    fn pairs(d: &RateLimitDescriptor) -> Vec<(&str, &str)> {
        d.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect()
    }

    fn header(name: &'static str, key: &str, skip: bool) -> Action {
        Action::RequestHeader {
            source: Source::Header(HeaderName::from_static(name)),
            descriptor_key: key.into(),
            skip_if_absent: skip,
        }
    }

    #[test]
    fn each_action_list_is_one_descriptor_in_order() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        let limits = vec![
            vec![Action::RemoteAddress],
            vec![
                Action::GenericKey {
                    descriptor_key: "generic_key".into(),
                    descriptor_value: "all".into(),
                },
                header("x-api-key", "api_key", false),
                Action::RequestHeader {
                    source: Source::Method,
                    descriptor_key: "method".into(),
                    skip_if_absent: false,
                },
            ],
        ];
        let d = descriptors(&limits, &req(&h, Some("192.0.2.1")));
        assert_eq!(d.len(), 2);
        assert_eq!(pairs(&d[0]), [("remote_address", "192.0.2.1")]);
        assert_eq!(
            pairs(&d[1]),
            [
                ("generic_key", "all"),
                ("api_key", "k1"),
                ("method", "POST")
            ]
        );
    }

    #[test]
    fn a_missing_header_drops_the_descriptor_unless_skipped() {
        let h = HeaderMap::new();
        let gone = vec![vec![Action::RemoteAddress, header("x-user", "user", false)]];
        assert!(descriptors(&gone, &req(&h, Some("192.0.2.1"))).is_empty());
        let skipped = vec![vec![Action::RemoteAddress, header("x-user", "user", true)]];
        let d = descriptors(&skipped, &req(&h, Some("192.0.2.1")));
        assert_eq!(pairs(&d[0]), [("remote_address", "192.0.2.1")]);
        // Every entry skipped: no descriptor at all.
        let empty = vec![vec![header("x-user", "user", true)]];
        assert!(descriptors(&empty, &req(&h, None)).is_empty());
    }

    #[test]
    fn header_value_match_adds_its_entry_only_on_the_expected_outcome() {
        let mut h = HeaderMap::new();
        h.insert("x-plan", "free-tier".parse().unwrap());
        let rule = |expect_match, matcher, invert| {
            vec![vec![Action::HeaderValueMatch {
                descriptor_key: "header_match".into(),
                descriptor_value: "free".into(),
                expect_match,
                headers: vec![HeaderMatch {
                    source: Source::Header(HeaderName::from_static("x-plan")),
                    matcher,
                    invert,
                }],
            }]]
        };
        let r = req(&h, None);
        let n = |l: Vec<Vec<Action>>| descriptors(&l, &r).len();
        assert_eq!(n(rule(true, Matcher::Prefix("free".into()), false)), 1);
        assert_eq!(n(rule(true, Matcher::Prefix("paid".into()), false)), 0);
        assert_eq!(n(rule(false, Matcher::Prefix("paid".into()), false)), 1);
        assert_eq!(n(rule(true, Matcher::Prefix("paid".into()), true)), 1);
        assert_eq!(n(rule(true, Matcher::Suffix("tier".into()), false)), 1);
        assert_eq!(n(rule(true, Matcher::Contains("e-t".into()), false)), 1);
        assert_eq!(n(rule(true, Matcher::Exact("free".into()), false)), 0);
        assert_eq!(n(rule(true, Matcher::Present(true), false)), 1);
        assert_eq!(n(rule(true, Matcher::Present(false), false)), 0);
    }

    #[test]
    fn oversized_and_non_utf8_values_stay_bounded() {
        assert_eq!(bounded(&[b'a'; MAX_ENTRY_BYTES]).len(), MAX_ENTRY_BYTES);
        assert_eq!(bounded(&[b'a'; MAX_ENTRY_BYTES + 1]), OVERSIZED);
        assert_eq!(bounded(&[0xff; MAX_ENTRY_BYTES]), OVERSIZED);
        assert_eq!(bounded(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn without_a_client_address_the_value_is_unknown() {
        let h = HeaderMap::new();
        let d = descriptors(&[vec![Action::RemoteAddress]], &req(&h, None));
        assert_eq!(pairs(&d[0]), [("remote_address", "unknown")]);
    }
}
