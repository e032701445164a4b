//! The YAML as envoyproxy/ratelimit reads it, and its shape as serde structs.
//!
//! envoyproxy/ratelimit reads YAML 1.1 (`gopkg.in/yaml.v2`): a plain `yes`, `on` or `y` is a
//! boolean, `0x10` is 16, `~` and an empty value are null and leave a field at its zero value,
//! and a number with a fraction is refused anywhere outside `metadata`. [`normalize`] brings
//! the parsed tree to that reading before [`marked_yaml::from_node`] fills the structs below,
//! so that what loads there loads here, and reads the same.

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode};
use marked_yaml::{Node, Span, Spanned};
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::error::ConfigErrorKind;

/// One file: a domain and its descriptors, plus funnel's default `algorithm`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileYaml {
    #[serde(default)]
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Vec<Spanned<DescriptorYaml>>,
    #[serde(default)]
    pub algorithm: Option<Spanned<String>>,
}

/// One descriptor.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DescriptorYaml {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub rate_limit: Option<Spanned<RateLimitYaml>>,
    #[serde(default)]
    pub descriptors: Vec<Spanned<DescriptorYaml>>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: bool,
    /// Read from the node itself ([`metadata_json`]): its scalars keep their YAML types.
    #[serde(default)]
    pub metadata: Option<IgnoredAny>,
    /// Accepted and ignored at this level, as envoyproxy/ratelimit does; `replaces` belongs
    /// in `rate_limit`.
    #[serde(default, rename = "replaces")]
    pub _replaces: Option<IgnoredAny>,
}

/// A `rate_limit` block.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RateLimitYaml {
    #[serde(default)]
    pub requests_per_unit: u32,
    #[serde(default)]
    pub unit: Option<Spanned<String>>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Vec<Spanned<ReplacesYaml>>,
    #[serde(default)]
    pub burst: Option<Spanned<u32>>,
    #[serde(default)]
    pub algorithm: Option<Spanned<String>>,
}

/// An entry of `replaces`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplacesYaml {
    #[serde(default)]
    pub name: String,
}

/// Every field name the configuration knows, at any level.
const KNOWN: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "burst",
    "algorithm",
];
const BOOLEANS: &[&str] = &[
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
];
const INTEGERS: &[&str] = &["requests_per_unit", "burst"];

/// What a plain scalar is in YAML 1.1.
#[derive(Debug, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str,
}

fn resolve(s: &str) -> Scalar {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false)
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        _ => {}
    }
    if let Some(i) = integer(s) {
        return Scalar::Int(i);
    }
    let plain = s.replace('_', "");
    if is_float(&plain) {
        if let Ok(f) = plain.parse::<f64>() {
            return Scalar::Float(f);
        }
    }
    Scalar::Str
}

/// An integer as yaml.v2 reads one: underscores dropped, an optional sign, then decimal,
/// `0x` hexadecimal, `0o` or leading-`0` octal, or `0b` binary.
fn integer(s: &str) -> Option<i128> {
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match plain.as_bytes().first()? {
        b'-' => (true, &plain[1..]),
        b'+' => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    let (radix, body) = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, h)
    } else if let Some(b) = digits
        .strip_prefix("0b")
        .or_else(|| digits.strip_prefix("0B"))
    {
        (2, b)
    } else if let Some(o) = digits
        .strip_prefix("0o")
        .or_else(|| digits.strip_prefix("0O"))
    {
        (8, o)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(body, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// yaml.v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// The line a span starts on (0 when unknown).
pub(super) fn line_of(span: &Span) -> usize {
    span.start().map_or(0, |m| m.line())
}

/// The line of the node at `path` (as serde renders it: `descriptors[0].rate_limit.unit`), or
/// of the deepest node on the way that exists; a path ending in a mapping's key gives the
/// key's line.
pub(super) fn line_of_path(root: &Node, path: &str) -> usize {
    let mut node = root;
    let mut line = line_of(root.span());
    for segment in path.split('.') {
        let (key, indices) = match segment.find('[') {
            Some(at) => (&segment[..at], &segment[at..]),
            None => (segment, ""),
        };
        if !key.is_empty() {
            let Some(map) = node.as_mapping() else {
                return line;
            };
            let Some((k, v)) = map.iter().find(|(k, _)| k.as_str() == key) else {
                return line;
            };
            line = line_of(k.span());
            node = v;
        }
        for index in indices.split(['[', ']']).filter(|i| !i.is_empty()) {
            let Some(next) = index
                .parse::<usize>()
                .ok()
                .and_then(|i| node.as_sequence()?.get(i))
            else {
                return line;
            };
            node = next;
            line = line_of(node.span());
        }
    }
    line
}

/// Brings a parsed file to yaml.v2's reading: a known field whose value is null is dropped
/// (it keeps its zero value), booleans and integers in YAML 1.1's spellings are rewritten in
/// the spelling serde reads, and a number with a fraction is refused, all outside `metadata`,
/// which is read as it stands ([`metadata_json`]).
pub(super) fn normalize(node: &mut Node) -> Result<(), (usize, ConfigErrorKind)> {
    match node {
        Node::Scalar(s) => {
            if s.may_coerce() && matches!(resolve(s.as_str()), Scalar::Float(_)) {
                return Err((
                    line_of(s.span()),
                    ConfigErrorKind::Fraction(s.as_str().to_owned()),
                ));
            }
            Ok(())
        }
        Node::Sequence(seq) => seq.iter_mut().try_for_each(normalize),
        Node::Mapping(map) => normalize_mapping(map),
    }
}

fn normalize_mapping(map: &mut MarkedMappingNode) -> Result<(), (usize, ConfigErrorKind)> {
    let nulls: Vec<MarkedScalarNode> = map
        .iter()
        .filter(|(k, v)| {
            KNOWN.contains(&k.as_str())
                && v.as_scalar()
                    .is_some_and(|s| s.may_coerce() && resolve(s.as_str()) == Scalar::Null)
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in &nulls {
        map.remove(k);
    }
    for (k, v) in map.iter_mut() {
        let field = k.as_str();
        if field == "metadata" {
            if v.as_mapping().is_none() {
                return Err((line_of(v.span()), ConfigErrorKind::MetadataNotMapping));
            }
            continue;
        }
        if let Node::Scalar(s) = v {
            if s.may_coerce() {
                let rewritten = match resolve(s.as_str()) {
                    Scalar::Bool(b) if BOOLEANS.contains(&field) => Some(b.to_string()),
                    Scalar::Int(i) if INTEGERS.contains(&field) => Some(i.to_string()),
                    _ => None,
                };
                if let Some(text) = rewritten {
                    *s = MarkedScalarNode::new(*s.span(), text);
                    continue;
                }
            }
        }
        normalize(v)?;
    }
    Ok(())
}

/// `metadata` as JSON, each scalar typed as yaml.v2 types it (a quoted scalar stays a
/// string); it is sent back as response dynamic metadata, a `google.protobuf.Struct`.
pub(super) fn metadata_json(node: &Node) -> serde_json::Value {
    use serde_json::Value;
    match node {
        Node::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().to_owned(), metadata_json(v)))
                .collect(),
        ),
        Node::Sequence(s) => Value::Array(s.iter().map(metadata_json).collect()),
        Node::Scalar(s) if !s.may_coerce() => Value::String(s.as_str().to_owned()),
        Node::Scalar(s) => match resolve(s.as_str()) {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => match i64::try_from(i) {
                Ok(i) => Value::from(i),
                // Struct numbers are doubles: a larger integer is one too.
                Err(_) => serde_json::Number::from_f64(i as f64).map_or(Value::Null, Value::Number),
            },
            // JSON has no infinity nor NaN.
            Scalar::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
            Scalar::Str => Value::String(s.as_str().to_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_resolve_as_yaml_1_1() {
        assert_eq!(resolve("~"), Scalar::Null);
        assert_eq!(resolve("yes"), Scalar::Bool(true));
        assert_eq!(resolve("Off"), Scalar::Bool(false));
        assert_eq!(resolve("0x1F"), Scalar::Int(31));
        assert_eq!(resolve("010"), Scalar::Int(8));
        assert_eq!(resolve("1_000"), Scalar::Int(1000));
        assert_eq!(resolve("-5"), Scalar::Int(-5));
        assert_eq!(resolve("0.25"), Scalar::Float(0.25));
        assert_eq!(resolve("1e3"), Scalar::Float(1000.0));
        assert_eq!(resolve(".5"), Scalar::Float(0.5));
        assert_eq!(resolve("1.2.3"), Scalar::Str);
        assert_eq!(resolve("foo*"), Scalar::Str);
        assert_eq!(resolve("0x"), Scalar::Str);
        // Not octal, so yaml.v2 reads it as a float.
        assert_eq!(resolve("09"), Scalar::Float(9.0));
    }
}
