//! The response's `dynamic_metadata` (`--response-dynamic-metadata`), with the fields
//! envoyproxy/ratelimit writes there, which Envoy stores under the rate-limit filter's name
//! for access logs and later filters:
//!
//! * `domain`: the request's domain;
//! * `descriptors`: per request descriptor, `entries` as `"key=value"` strings, `limit` (a
//!   limit sent with the descriptor, as text) and `hitsAddend` (its own, when set);
//! * `hitsAddend`: the request's, when not 0;
//! * `metadata`: the `metadata` of the rules of every descriptor that was not over the limit,
//!   merged in request order; where two rules give the same field, the first one's stays, and
//!   two structs under one field are merged field by field.

use std::collections::BTreeMap;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

use crate::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitUnit};

fn string(s: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn object(fields: BTreeMap<String, Value>) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

/// A rule's `metadata` from the configuration, as the protobuf `Struct` the response carries.
pub fn from_config(map: &serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect(),
    }
}

fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value {
            kind: Some(Kind::NullValue(0)),
        },
        J::Bool(b) => Value {
            kind: Some(Kind::BoolValue(*b)),
        },
        // Struct holds every number as a double, as JSON does.
        J::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => string(s.clone()),
        J::Array(a) => list(a.iter().map(from_json).collect()),
        J::Object(o) => Value {
            kind: Some(Kind::StructValue(from_config(o))),
        },
    }
}

/// One descriptor as the metadata shows it.
fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut fields = BTreeMap::new();
    let entries = d
        .entries
        .iter()
        .map(|e| string(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(l) = &d.limit {
        let unit = RateLimitUnit::try_from(l.unit)
            .map_or_else(|_| l.unit.to_string(), |u| u.as_str_name().to_owned());
        fields.insert(
            "limit".to_owned(),
            string(format!(
                "requests_per_unit:{} unit:{unit}",
                l.requests_per_unit
            )),
        );
    }
    if let Some(n) = d.hits_addend {
        // A JSON number, as protobuf's Struct holds every number (exact up to 2^53).
        fields.insert("hitsAddend".to_owned(), number(n as f64));
    }
    object(fields)
}

/// Merges `src` into `dest`: a field `dest` lacks is added; a struct under a field both have
/// is merged the same way; any other field of `dest` stays as it is.
pub fn merge(dest: &mut Struct, src: &Struct) {
    for (k, v) in &src.fields {
        match dest.fields.get_mut(k) {
            None => {
                dest.fields.insert(k.clone(), v.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(d)),
            }) => {
                if let Some(Kind::StructValue(s)) = &v.kind {
                    merge(d, s);
                }
            }
            Some(_) => {}
        }
    }
}

/// The metadata of a request, given the `metadata` of the rules of its descriptors that were
/// not over the limit, in request order.
pub fn build<'a>(req: &RateLimitRequest, passed: impl IntoIterator<Item = &'a Struct>) -> Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_owned(), string(req.domain.clone()));
    fields.insert(
        "descriptors".to_owned(),
        list(req.descriptors.iter().map(descriptor).collect()),
    );
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_owned(), number(f64::from(req.hits_addend)));
    }
    let mut merged = Struct::default();
    for m in passed {
        merge(&mut merged, m);
    }
    if !merged.fields.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            Value {
                kind: Some(Kind::StructValue(merged)),
            },
        );
    }
    Struct { fields }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rate_limit_descriptor::{Entry, RateLimitOverride};

    fn st(fields: &[(&str, Value)]) -> Struct {
        Struct {
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn the_first_value_stays_and_structs_merge() {
        let a = st(&[
            ("name", string("first")),
            ("svc", object(st(&[("tier", string("gold"))]).fields)),
        ]);
        let b = st(&[
            ("name", string("second")),
            ("other", string("x")),
            (
                "svc",
                object(st(&[("tier", string("silver")), ("zone", string("eu"))]).fields),
            ),
        ]);
        let mut merged = Struct::default();
        merge(&mut merged, &a);
        merge(&mut merged, &b);
        let want = st(&[
            ("name", string("first")),
            ("other", string("x")),
            (
                "svc",
                object(st(&[("tier", string("gold")), ("zone", string("eu"))]).fields),
            ),
        ]);
        assert_eq!(merged, want);
    }

    #[test]
    fn the_request_is_described() {
        let req = RateLimitRequest {
            domain: "shop".into(),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "user".into(),
                        value: "ann".into(),
                    }],
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 7,
                        unit: 2,
                    }),
                    hits_addend: Some(3),
                    is_negative_hits: false,
                },
                RateLimitDescriptor::default(),
            ],
            hits_addend: 2,
        };
        let rule = st(&[("plan", string("gold"))]);
        let got = build(&req, [&rule]);
        let want = st(&[
            ("domain", string("shop")),
            (
                "descriptors",
                list(vec![
                    object(
                        st(&[
                            ("entries", list(vec![string("user=ann")])),
                            ("limit", string("requests_per_unit:7 unit:MINUTE")),
                            ("hitsAddend", number(3.0)),
                        ])
                        .fields,
                    ),
                    object(st(&[("entries", list(vec![]))]).fields),
                ]),
            ),
            ("hitsAddend", number(2.0)),
            ("metadata", object(rule.fields.clone())),
        ]);
        assert_eq!(got, want);
        let none = build(
            &RateLimitRequest {
                domain: "d".into(),
                ..Default::default()
            },
            [],
        );
        assert!(!none.fields.contains_key("metadata"));
        assert!(!none.fields.contains_key("hitsAddend"));
    }
}
