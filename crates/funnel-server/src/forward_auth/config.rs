//! The forward-auth file (`--forward-auth <file>`): who may name the client's address, which
//! headers carry the original request, and, per domain, the descriptors to build from a
//! request with Envoy's rate-limit actions. Every error names the file and the line.
//!
//! ```yaml
//! client_address:
//!   trusted_proxies: ["127.0.0.1", "10.0.0.0/8"]
//!   header: x-forwarded-for       # or `forwarded` (RFC 7239), or `x-real-ip`
//!   ipv6_prefix: 64
//! original_request:               # the defaults
//!   method_header: x-forwarded-method
//!   uri_header: x-forwarded-uri
//!   host_header: x-forwarded-host
//! domains:
//!   web:
//!     - actions:
//!         - remote_address: {}
//! ```

use std::collections::HashMap;
use std::path::Path;

use axum::http::HeaderName;
use funnel_tower::{KeyBy, Net};
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode};
use marked_yaml::Node;

use crate::config::{ConfigError, ConfigErrorKind, MAX_FILE_BYTES};
use crate::limits::{MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES, MAX_ENTRY_BYTES};

use super::actions::{Action, HeaderMatch, Matcher, Source};

/// The whole file, compiled.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How the client's address is read: a [`KeyBy`] address variant, so that the trusted
    /// hops are walked exactly as funnel-tower walks them.
    pub client: KeyBy,
    /// `header: x-real-ip`: the address is read from `X-Real-IP`, one hop, through the same
    /// walk as an `X-Forwarded-For` holding only it.
    pub real_ip: bool,
    /// The header naming the original method.
    pub method_header: HeaderName,
    /// The header naming the original URI (path and query).
    pub uri_header: HeaderName,
    /// The header naming the original host.
    pub host_header: HeaderName,
    /// Per domain, its descriptors: each a list of actions.
    pub domains: HashMap<String, Vec<Vec<Action>>>,
}

impl Settings {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let whole = |message: String| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            kind: ConfigErrorKind::ForwardAuth(message),
        };
        let len = std::fs::metadata(path)
            .map_err(|e| whole(format!("cannot read: {e}")))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(whole(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read: {e}")))?;
        Settings::parse(&text, path)
    }

    /// Parses the file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Settings, ConfigError> {
        let p = Parser { file };
        let root = marked_yaml::parse_yaml_with_options(
            0,
            text,
            marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true),
        )
        .map_err(|e| p.line(0, format!("not a YAML mapping: {e}")))?;
        let map = p.mapping(&root, "the file")?;
        p.only(map, &["client_address", "original_request", "domains"])?;
        let (client, real_ip) = match map.get_node("client_address") {
            Some(n) => p.client(n)?,
            None => (KeyBy::PeerIp { v6_prefix: 64 }, false),
        };
        let (mut method_header, mut uri_header, mut host_header) = (
            HeaderName::from_static("x-forwarded-method"),
            HeaderName::from_static("x-forwarded-uri"),
            HeaderName::from_static("x-forwarded-host"),
        );
        if let Some(n) = map.get_node("original_request") {
            let m = p.mapping(n, "`original_request`")?;
            p.only(m, &["method_header", "uri_header", "host_header"])?;
            for (field, slot) in [
                ("method_header", &mut method_header),
                ("uri_header", &mut uri_header),
                ("host_header", &mut host_header),
            ] {
                if let Some(n) = m.get_node(field) {
                    *slot = p.header_name(n, field)?;
                }
            }
        }
        let domains_node = map
            .get_node("domains")
            .ok_or_else(|| p.at(map, "missing field `domains`".into()))?;
        let domains_map = p.mapping(domains_node, "`domains`")?;
        let mut domains = HashMap::new();
        for (name, node) in domains_map.iter() {
            let domain = name.as_str();
            if domain.is_empty() || domain.len() > MAX_DOMAIN_BYTES {
                return Err(p.scalar_at(
                    name,
                    format!("a domain must be 1 to {MAX_DOMAIN_BYTES} bytes"),
                ));
            }
            domains.insert(domain.to_owned(), p.rate_limits(node)?);
        }
        Ok(Settings {
            client,
            real_ip,
            method_header,
            uri_header,
            host_header,
            domains,
        })
    }
}

struct Parser<'a> {
    file: &'a Path,
}

fn line_of(node: &Node) -> usize {
    node.span().start().map_or(0, |m| m.line())
}

impl Parser<'_> {
    fn line(&self, line: usize, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line,
            kind: ConfigErrorKind::ForwardAuth(message),
        }
    }

    fn at(&self, map: &MarkedMappingNode, message: String) -> ConfigError {
        self.line(map.span().start().map_or(0, |m| m.line()), message)
    }

    fn node_at(&self, node: &Node, message: String) -> ConfigError {
        self.line(line_of(node), message)
    }

    fn scalar_at(&self, s: &MarkedScalarNode, message: String) -> ConfigError {
        self.line(s.span().start().map_or(0, |m| m.line()), message)
    }

    fn mapping<'n>(
        &self,
        node: &'n Node,
        what: &str,
    ) -> Result<&'n MarkedMappingNode, ConfigError> {
        node.as_mapping()
            .ok_or_else(|| self.node_at(node, format!("{what} must be a mapping")))
    }

    fn str<'n>(&self, node: &'n Node, what: &str) -> Result<&'n str, ConfigError> {
        node.as_scalar()
            .map(|s| s.as_str())
            .ok_or_else(|| self.node_at(node, format!("`{what}` must be a scalar")))
    }

    fn only(&self, map: &MarkedMappingNode, allowed: &[&str]) -> Result<(), ConfigError> {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.scalar_at(
                    key,
                    format!(
                        "unknown field `{}` (expected one of: {})",
                        key.as_str(),
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn bool(
        &self,
        map: &MarkedMappingNode,
        field: &str,
        default: bool,
    ) -> Result<bool, ConfigError> {
        match map.get_node(field) {
            None => Ok(default),
            Some(n) => n
                .as_scalar()
                .and_then(|s| s.as_bool())
                .ok_or_else(|| self.node_at(n, format!("`{field}` must be true or false"))),
        }
    }

    fn header_name(&self, node: &Node, what: &str) -> Result<HeaderName, ConfigError> {
        let s = self.str(node, what)?;
        HeaderName::from_bytes(s.to_ascii_lowercase().as_bytes())
            .map_err(|_| self.node_at(node, format!("`{what}`: {s:?} is not a header name")))
    }

    /// A value written into a descriptor: 1 to [`MAX_ENTRY_BYTES`] bytes.
    fn entry(&self, node: &Node, what: &str) -> Result<String, ConfigError> {
        let s = self.str(node, what)?;
        if s.is_empty() || s.len() > MAX_ENTRY_BYTES {
            return Err(self.node_at(
                node,
                format!("`{what}` must be 1 to {MAX_ENTRY_BYTES} bytes"),
            ));
        }
        Ok(s.to_owned())
    }

    fn client(&self, node: &Node) -> Result<(KeyBy, bool), ConfigError> {
        let m = self.mapping(node, "`client_address`")?;
        self.only(m, &["trusted_proxies", "header", "ipv6_prefix"])?;
        let v6_prefix = match m.get_node("ipv6_prefix") {
            None => 64,
            Some(n) => n
                .as_scalar()
                .and_then(|s| s.as_u8())
                .filter(|p| *p <= 128)
                .ok_or_else(|| self.node_at(n, "`ipv6_prefix` must be 0 to 128".into()))?,
        };
        let mut trusted = Vec::new();
        if let Some(n) = m.get_node("trusted_proxies") {
            let seq = n.as_sequence().ok_or_else(|| {
                self.node_at(n, "`trusted_proxies` must be a list of networks".into())
            })?;
            for item in seq.iter() {
                let s = self.str(item, "trusted_proxies")?;
                trusted.push(Net::parse(s).ok_or_else(|| {
                    self.node_at(
                        item,
                        format!("{s:?} is not an address or a network (a.b.c.d/n, x::y/n)"),
                    )
                })?);
            }
        }
        let header = match m.get_node("header") {
            None => "x-forwarded-for",
            Some(n) => self.str(n, "header")?,
        };
        let (by, real_ip) = match header.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => (KeyBy::ClientIp { trusted, v6_prefix }, false),
            "x-real-ip" => (KeyBy::ClientIp { trusted, v6_prefix }, true),
            "forwarded" => (KeyBy::ClientIpForwarded { trusted, v6_prefix }, false),
            other => {
                return Err(self.node_at(
                    m.get_node("header").unwrap_or(node),
                    format!(
                        "`header`: {other:?} (expected x-forwarded-for, forwarded or x-real-ip)"
                    ),
                ))
            }
        };
        match by {
            KeyBy::ClientIp { trusted, .. } | KeyBy::ClientIpForwarded { trusted, .. }
                if trusted.is_empty() =>
            {
                Ok((KeyBy::PeerIp { v6_prefix }, false))
            }
            by => Ok((by, real_ip)),
        }
    }

    fn rate_limits(&self, node: &Node) -> Result<Vec<Vec<Action>>, ConfigError> {
        let seq = node.as_sequence().ok_or_else(|| {
            self.node_at(node, "a domain must be a list of `- actions: [...]`".into())
        })?;
        if seq.len() > MAX_DESCRIPTORS {
            return Err(self.node_at(node, format!("at most {MAX_DESCRIPTORS} descriptors")));
        }
        let mut out = Vec::with_capacity(seq.len());
        for item in seq.iter() {
            let m = self.mapping(item, "a rate limit")?;
            self.only(m, &["actions"])?;
            let actions = m
                .get_node("actions")
                .ok_or_else(|| self.at(m, "missing field `actions`".into()))?;
            let list = actions
                .as_sequence()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| {
                    self.node_at(actions, "`actions` must be a non-empty list".into())
                })?;
            if list.len() > MAX_ENTRIES {
                return Err(self.node_at(actions, format!("at most {MAX_ENTRIES} actions")));
            }
            out.push(
                list.iter()
                    .map(|a| self.action(a))
                    .collect::<Result<_, _>>()?,
            );
        }
        Ok(out)
    }

    fn action(&self, node: &Node) -> Result<Action, ConfigError> {
        let m = self.mapping(node, "an action")?;
        const KINDS: [&str; 4] = [
            "remote_address",
            "request_headers",
            "generic_key",
            "header_value_match",
        ];
        self.only(m, &KINDS)?;
        let mut it = m.iter();
        let (Some((kind, body)), None) = (it.next(), it.next()) else {
            return Err(self.at(
                m,
                format!("an action is one of: {} (exactly one)", KINDS.join(", ")),
            ));
        };
        let body = self.mapping(body, &format!("`{}`", kind.as_str()))?;
        let key = |default: &str| -> Result<String, ConfigError> {
            match body.get_node("descriptor_key") {
                Some(n) => self.entry(n, "descriptor_key"),
                None => Ok(default.to_owned()),
            }
        };
        Ok(match kind.as_str() {
            "remote_address" => {
                self.only(body, &[])?;
                Action::RemoteAddress
            }
            "request_headers" => {
                self.only(body, &["header_name", "descriptor_key", "skip_if_absent"])?;
                let n = body
                    .get_node("header_name")
                    .ok_or_else(|| self.at(body, "missing field `header_name`".into()))?;
                Action::RequestHeader {
                    source: self.source(n)?,
                    descriptor_key: match body.get_node("descriptor_key") {
                        Some(n) => self.entry(n, "descriptor_key")?,
                        None => return Err(self.at(body, "missing field `descriptor_key`".into())),
                    },
                    skip_if_absent: self.bool(body, "skip_if_absent", false)?,
                }
            }
            "generic_key" => {
                self.only(body, &["descriptor_key", "descriptor_value"])?;
                let v = body
                    .get_node("descriptor_value")
                    .ok_or_else(|| self.at(body, "missing field `descriptor_value`".into()))?;
                Action::GenericKey {
                    descriptor_key: key("generic_key")?,
                    descriptor_value: self.entry(v, "descriptor_value")?,
                }
            }
            _ => {
                self.only(
                    body,
                    &[
                        "descriptor_key",
                        "descriptor_value",
                        "expect_match",
                        "headers",
                    ],
                )?;
                let v = body
                    .get_node("descriptor_value")
                    .ok_or_else(|| self.at(body, "missing field `descriptor_value`".into()))?;
                let h = body
                    .get_node("headers")
                    .ok_or_else(|| self.at(body, "missing field `headers`".into()))?;
                let list = h
                    .as_sequence()
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| self.node_at(h, "`headers` must be a non-empty list".into()))?;
                Action::HeaderValueMatch {
                    descriptor_key: key("header_match")?,
                    descriptor_value: self.entry(v, "descriptor_value")?,
                    expect_match: self.bool(body, "expect_match", true)?,
                    headers: list
                        .iter()
                        .map(|n| self.header_match(n))
                        .collect::<Result<_, _>>()?,
                }
            }
        })
    }

    /// A header name, or one of the pseudo-headers of the original request.
    fn source(&self, node: &Node) -> Result<Source, ConfigError> {
        Ok(match self.str(node, "header_name")? {
            ":method" => Source::Method,
            ":path" => Source::Path,
            ":authority" => Source::Authority,
            _ => Source::Header(self.header_name(node, "header_name")?),
        })
    }

    fn header_match(&self, node: &Node) -> Result<HeaderMatch, ConfigError> {
        let m = self.mapping(node, "a header matcher")?;
        const MATCHERS: [&str; 5] = [
            "exact_match",
            "prefix_match",
            "suffix_match",
            "contains_match",
            "present_match",
        ];
        let mut allowed = vec!["name", "invert_match"];
        allowed.extend(MATCHERS);
        self.only(m, &allowed)?;
        let name = m
            .get_node("name")
            .ok_or_else(|| self.at(m, "missing field `name`".into()))?;
        let mut found = MATCHERS
            .iter()
            .filter_map(|k| m.get_node(k).map(|n| (*k, n)));
        let (Some((kind, n)), None) = (found.next(), found.next()) else {
            return Err(self.at(
                m,
                format!(
                    "a header matcher has exactly one of: {}",
                    MATCHERS.join(", ")
                ),
            ));
        };
        let text = || self.str(n, kind).map(str::to_owned);
        let matcher = match kind {
            "exact_match" => Matcher::Exact(text()?),
            "prefix_match" => Matcher::Prefix(text()?),
            "suffix_match" => Matcher::Suffix(text()?),
            "contains_match" => Matcher::Contains(text()?),
            _ => Matcher::Present(self.bool(m, "present_match", true)?),
        };
        Ok(HeaderMatch {
            source: self.source(name)?,
            matcher,
            invert: self.bool(m, "invert_match", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        Settings::parse(text, Path::new("fa.yaml"))
    }

    fn error(text: &str) -> String {
        parse(text).expect_err("refused").to_string()
    }

    #[test]
    fn every_action_and_setting_parses() {
        let s = parse(
            "client_address:
  trusted_proxies: [\"10.0.0.0/8\", \"::1\"]
  header: forwarded
  ipv6_prefix: 56
original_request:
  uri_header: X-Original-URI
domains:
  web:
    - actions:
        - remote_address: {}
        - request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}
    - actions:
        - generic_key: {descriptor_value: all}
        - header_value_match:
            descriptor_value: api
            expect_match: false
            headers:
              - {name: \":path\", prefix_match: /api/, invert_match: true}
              - {name: x-debug, present_match: true}
",
        )
        .unwrap();
        assert!(matches!(
            &s.client,
            KeyBy::ClientIpForwarded { trusted, v6_prefix: 56 } if trusted.len() == 2
        ));
        assert_eq!(s.uri_header, "x-original-uri");
        assert_eq!(s.method_header, "x-forwarded-method");
        let web = &s.domains["web"];
        assert_eq!((web.len(), web[0].len(), web[1].len()), (2, 2, 2));
        assert!(
            matches!(&web[1][0], Action::GenericKey { descriptor_key, .. } if descriptor_key == "generic_key")
        );
        assert!(matches!(
            &web[1][1],
            Action::HeaderValueMatch { expect_match: false, headers, .. } if headers.len() == 2
        ));
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client() {
        let s = parse("domains: {web: [{actions: [{remote_address: {}}]}]}").unwrap();
        assert!(matches!(s.client, KeyBy::PeerIp { v6_prefix: 64 }));
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        let e = error("domains:\n  web:\n    - actions:\n        - generic_key: {}\n");
        assert!(
            e.starts_with("fa.yaml:4:") && e.contains("descriptor_value"),
            "{e}"
        );
        let e = error("client_address:\n  trusted_proxies: [10.0.0.0/33]\ndomains: {}\n");
        assert!(
            e.starts_with("fa.yaml:2:") && e.contains("10.0.0.0/33"),
            "{e}"
        );
        let e = error(
            "client_address:\n  header: x-client\n  trusted_proxies: [\"::1\"]\ndomains: {}\n",
        );
        assert!(e.starts_with("fa.yaml:2:") && e.contains("x-client"), "{e}");
        let e = error("domains:\n  web:\n    - actions:\n        - remote_address: {}\n          generic_key: {descriptor_value: a}\n");
        assert!(e.contains("exactly one"), "{e}");
        let e = error("domains:\n  web:\n    - actions:\n        - request_headers: {header_name: \"bad name\", descriptor_key: k}\n");
        assert!(
            e.starts_with("fa.yaml:4:") && e.contains("not a header name"),
            "{e}"
        );
        let e = error("domains:\n  web:\n    - actions:\n        - header_value_match:\n            descriptor_value: v\n            headers: [{name: a, exact_match: x, prefix_match: y}]\n");
        assert!(
            e.starts_with("fa.yaml:6:") && e.contains("exactly one of"),
            "{e}"
        );
        let e = error("domains:\n  web:\n    - actions: []\n");
        assert!(e.contains("non-empty"), "{e}");
        let too_many = format!(
            "domains:\n  web:\n    - actions: [{}]\n",
            vec!["{remote_address: {}}"; MAX_ENTRIES + 1].join(", ")
        );
        assert!(error(&too_many).contains("at most 16 actions"));
        assert!(error("domain: web\n").contains("unknown field `domain`"));
        assert!(error("client_address: {}\n").contains("missing field `domains`"));
        assert!(error("[1, 2]").contains("fa.yaml"));
    }
}
