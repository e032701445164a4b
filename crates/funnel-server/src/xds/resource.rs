//! The configuration resource of xDS (`ratelimit.config.ratelimit.v3.RateLimitConfig`, one
//! per domain) read as funnel-server's configuration.
//!
//! Each resource is written out as the YAML document a file of the same domain would hold
//! (in JSON form, which YAML reads) and handed to the file loader, so a configuration pushed
//! over xDS is read, and refused, exactly as the same configuration in files: as
//! envoyproxy/ratelimit turns its resources into its YAML structures before loading them.
//! A field left at its proto3 default is left out of the document, as a file would leave it
//! out: an empty `value` is no value, a `unit` of `UNKNOWN` is no unit (so `unlimited` needs
//! none and a counted rule without one is refused), empty lists and maps are absent.

use std::path::PathBuf;

use prost::Message;
use serde_json::{json, Map, Value};

use crate::config::{parse_domain, Config, ConfigError};
use crate::proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// The type URL of the resources funnel-server subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Reads every resource of one discovery response into one configuration; the first
/// resource that does not decode or load refuses the whole set, naming the resource.
pub fn load(resources: &[prost_types::Any]) -> Result<Config, String> {
    let mut documents = Vec::with_capacity(resources.len());
    for (i, any) in resources.iter().enumerate() {
        let config = decode(any).map_err(|e| format!("resource #{i}: {e}"))?;
        documents.push((origin(&config, i), document(&config)));
    }
    config_of(&documents).map_err(|e| e.to_string())
}

/// Decodes one resource, refusing one of another type.
pub fn decode(any: &prost_types::Any) -> Result<RateLimitConfig, String> {
    // The message's full name after the last `/`, as any Any resolver reads a type URL.
    let want = TYPE_URL.rsplit('/').next().unwrap_or(TYPE_URL);
    let got = any.type_url.rsplit('/').next().unwrap_or(&any.type_url);
    if got != want {
        return Err(format!("of type {:?}, expected {TYPE_URL:?}", any.type_url));
    }
    RateLimitConfig::decode(any.value.as_slice()).map_err(|e| format!("does not decode: {e}"))
}

/// What a loader error names as the "file": the resource's name (its index when unnamed).
fn origin(config: &RateLimitConfig, index: usize) -> PathBuf {
    if config.name.is_empty() {
        PathBuf::from(format!("xDS resource #{index}"))
    } else {
        PathBuf::from(format!("xDS resource {:?}", config.name))
    }
}

/// The adapter between xDS and the file loader: each `(origin, YAML text)` read as one file
/// of a configuration directory would be, a domain given twice refused as in files.
pub fn config_of(documents: &[(PathBuf, String)]) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    for (origin, text) in documents {
        config.add(parse_domain(text, origin)?, false)?;
    }
    Ok(config)
}

/// The YAML document (JSON form, one field a line) of one resource. Error lines from the
/// loader count in this text; it is logged at debug level when a resource is refused.
pub fn document(config: &RateLimitConfig) -> String {
    let mut root = Map::new();
    root.insert("domain".into(), json!(config.domain));
    if !config.descriptors.is_empty() {
        root.insert("descriptors".into(), descriptors(&config.descriptors));
    }
    // Serialising a tree of strings, numbers and booleans cannot fail.
    serde_json::to_string_pretty(&Value::Object(root)).unwrap_or_default()
}

fn descriptors(list: &[RateLimitDescriptor]) -> Value {
    Value::Array(list.iter().map(descriptor).collect())
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(d.key));
    if !d.value.is_empty() {
        m.insert("value".into(), json!(d.value));
    }
    if let Some(p) = &d.rate_limit {
        m.insert("rate_limit".into(), policy(p));
    }
    if !d.descriptors.is_empty() {
        m.insert("descriptors".into(), descriptors(&d.descriptors));
    }
    for (field, set) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if set {
            m.insert(field.into(), Value::Bool(true));
        }
    }
    if let Some(meta) = d.metadata.as_ref().filter(|s| !s.fields.is_empty()) {
        m.insert("metadata".into(), structure(meta));
    }
    Value::Object(m)
}

fn policy(p: &RateLimitPolicy) -> Value {
    let mut m = Map::new();
    match RateLimitUnit::try_from(p.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => {
            m.insert("unit".into(), json!(unit.as_str_name()));
        }
        // A number the enum does not define: the loader refuses it as an unknown unit.
        Err(_) => {
            m.insert("unit".into(), json!(p.unit.to_string()));
        }
    }
    m.insert("requests_per_unit".into(), json!(p.requests_per_unit));
    if p.unlimited {
        m.insert("unlimited".into(), Value::Bool(true));
    }
    if !p.name.is_empty() {
        m.insert("name".into(), json!(p.name));
    }
    if !p.replaces.is_empty() {
        let list = p
            .replaces
            .iter()
            .map(|r| json!({ "name": r.name }))
            .collect();
        m.insert("replaces".into(), Value::Array(list));
    }
    Value::Object(m)
}

fn structure(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    )
}

fn value(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ratelimit::config::ratelimit::v3::RateLimitReplace;

    fn any(config: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: TYPE_URL.into(),
            value: config.encode_to_vec(),
        }
    }

    fn limited(key: &str, value: &str, unit: RateLimitUnit, n: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            value: value.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: n,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn domain(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    #[test]
    fn a_resource_reads_as_the_same_yaml_file_would() {
        let mut outer = limited("client", "", RateLimitUnit::Minute, 5);
        let mut inner = limited("path", "/login", RateLimitUnit::Second, 1);
        inner.shadow_mode = true;
        inner.rate_limit.as_mut().unwrap().name = "login".into();
        outer.descriptors.push(inner);
        let mut replacing = limited("vip", "yes", RateLimitUnit::Hour, 100);
        replacing.rate_limit.as_mut().unwrap().replaces = vec![RateLimitReplace {
            name: "login".into(),
        }];
        let config = load(&[any(&domain("edge", "edge", vec![outer, replacing]))]).unwrap();
        let yaml = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: MINUTE, requests_per_unit: 5}\n    descriptors:\n      - key: path\n        value: /login\n        shadow_mode: true\n        rate_limit: {unit: SECOND, requests_per_unit: 1, name: login}\n  - key: vip\n    value: \"yes\"\n    rate_limit:\n      unit: HOUR\n      requests_per_unit: 100\n      replaces: [{name: login}]\n";
        let file = parse_domain(yaml, std::path::Path::new("edge.yaml")).unwrap();
        let strip = |d: &crate::config::Domain| -> String {
            // The same tree, lines and file names aside.
            format!(
                "{:?} {:?}",
                d.domain,
                d.descriptors
                    .iter()
                    .map(|x| without_lines(x.clone()))
                    .collect::<Vec<_>>()
            )
        };
        assert_eq!(strip(&config.domains[0]), strip(&file));
    }

    fn without_lines(mut d: crate::config::Descriptor) -> crate::config::Descriptor {
        d.line = 0;
        d.file = std::path::Path::new("").into();
        d.descriptors = d.descriptors.into_iter().map(without_lines).collect();
        d
    }

    #[test]
    fn unlimited_needs_no_unit_and_a_counted_rule_does() {
        let mut free = limited("internal", "", RateLimitUnit::Unknown, 0);
        free.rate_limit.as_mut().unwrap().unlimited = true;
        let config = load(&[any(&domain("d", "d", vec![free]))]).unwrap();
        assert!(
            config.domains[0].descriptors[0]
                .rate_limit
                .as_ref()
                .unwrap()
                .unlimited
        );
        let e = load(&[any(&domain(
            "d",
            "d",
            vec![limited("k", "", RateLimitUnit::Unknown, 3)],
        ))])
        .unwrap_err();
        assert!(
            e.contains("xDS resource \"d\"") && e.contains("unit"),
            "{e}"
        );
    }

    #[test]
    fn a_unit_number_the_enum_lacks_is_refused() {
        let mut d = limited("k", "", RateLimitUnit::Second, 3);
        d.rate_limit.as_mut().unwrap().unit = 42;
        let e = load(&[any(&domain("d", "d", vec![d]))]).unwrap_err();
        assert!(e.contains("unknown unit \"42\""), "{e}");
    }

    #[test]
    fn the_same_domain_twice_is_refused_naming_both() {
        let a = domain("first", "shared", vec![]);
        let b = domain("second", "shared", vec![]);
        let e = load(&[any(&a), any(&b)]).unwrap_err();
        assert!(e.contains("\"second\"") && e.contains("\"first\""), "{e}");
    }

    #[test]
    fn a_resource_of_another_type_or_undecodable_is_refused() {
        let wrong = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: vec![],
        };
        assert!(load(&[wrong]).unwrap_err().contains("resource #0"));
        let garbage = prost_types::Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        };
        assert!(load(&[garbage]).unwrap_err().contains("does not decode"));
    }

    #[test]
    fn strings_that_yaml_would_read_otherwise_stay_strings() {
        // Values YAML would take for a number, a boolean, null, an alias or a comment.
        for v in [
            "123",
            "true",
            "null",
            "~",
            "*star",
            "# not a comment",
            "a: b",
            "line\nbreak",
            "\"quoted\"",
        ] {
            let config = load(&[any(&domain(
                "d",
                "d",
                vec![limited("k", v, RateLimitUnit::Second, 1)],
            ))])
            .unwrap_or_else(|e| panic!("{v:?}: {e}"));
            assert_eq!(config.domains[0].descriptors[0].value.as_deref(), Some(v));
        }
    }

    #[test]
    fn quota_mode_and_metadata_reach_the_loader_as_a_file_writes_them() {
        use prost_types::value::Kind;
        let mut d = limited("k", "", RateLimitUnit::Second, 1);
        d.quota_mode = true;
        let entry = |kind| prost_types::Value { kind: Some(kind) };
        d.metadata = Some(prost_types::Struct {
            fields: [
                ("team".to_owned(), entry(Kind::StringValue("edge".into()))),
                ("weight".to_owned(), entry(Kind::NumberValue(2.5))),
            ]
            .into_iter()
            .collect(),
        });
        let text = document(&domain("d", "d", vec![d]));
        let v: Value = serde_json::from_str(&text).unwrap();
        let written = &v["descriptors"][0];
        assert_eq!(written["quota_mode"], json!(true));
        assert_eq!(written["metadata"], json!({"team": "edge", "weight": 2.5}));
        // Fields at their defaults are left out, as a file leaves them out.
        let plain = document(&domain(
            "d",
            "d",
            vec![limited("k", "", RateLimitUnit::Second, 1)],
        ));
        for absent in [
            "value",
            "shadow_mode",
            "quota_mode",
            "metadata",
            "unlimited",
            "name",
        ] {
            assert!(
                !plain.contains(&format!("\"{absent}\"")),
                "{absent} in {plain}"
            );
        }
    }

    #[test]
    fn no_resources_is_an_empty_configuration() {
        assert!(load(&[]).unwrap().domains.is_empty());
    }
}
