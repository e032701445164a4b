//! The fuzz bodies (feature `fuzzing`, not an API): cargo-fuzz targets in
//! `fuzz/fuzz_targets/server_*.rs` call them, and `tests/it/fuzz_bodies.rs` runs them on stable
//! over the committed corpora and regressions. They live here, not in the test kit, because
//! they drive the crate's private configuration reader and decider; they check properties and
//! compare against no reference model.
//!
//! * [`config`]: any text as a configuration file: parsed without panicking; an accepted one
//!   compiles, and every descriptor it holds has a line; a rejected one names a line within
//!   the text.
//! * [`request`]: any bytes as a request, in protobuf (first byte even) or proto3 JSON (odd),
//!   decided against a fixed configuration: never a panic; an answer has one status per
//!   descriptor, and a request the bounds refuse gets no answer.

use std::path::Path;
use std::sync::OnceLock;

use prost::Message;

use crate::clock::UnixClock;
use crate::config::{parse_domain, Config, Descriptor};
use crate::decide::{validate, Decider};
use crate::proto::RateLimitRequest;
use crate::rules::Registry;

/// The configuration the request body decides against: every kind of rule.
const FUZZ_CONFIG: &str = "domain: fuzz
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    value: x
    rate_limit: {unit: minute, requests_per_unit: 1, name: ax}
  - key: w
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: fixed_window}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_window}
  - key: p
    value: pre*
    rate_limit: {unit: hour, requests_per_unit: 5, burst: 2, replaces: [{name: ax}]}
  - key: z
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: u
    rate_limit: {unlimited: true}
  - key: sh
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: n
    descriptors:
      - key: m
        rate_limit: {unit: week, requests_per_unit: 4}
";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(f)
}

fn lines_ok(list: &[Descriptor], max: usize) {
    for d in list {
        assert!(
            d.line >= 1 && d.line <= max,
            "descriptor line {} outside 1..={max}",
            d.line
        );
        lines_ok(&d.descriptors, max);
    }
}

/// Any text as one configuration file.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // YAML's line breaks: `\n`, `\r\n` and a lone `\r`; one more line for an error at the end.
    let breaks =
        text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count();
    let lines = breaks + 2;
    match parse_domain(text, Path::new("fuzz.yaml")) {
        Ok(domain) => {
            lines_ok(&domain.descriptors, lines);
            let registry = Registry::new(UnixClock::new(), 64, None);
            let config = Config {
                domains: vec![domain],
            };
            let _ = block_on(registry.compile(&config));
        }
        Err(e) => {
            assert!(
                e.line <= lines,
                "error line {} outside the text: {e}",
                e.line
            );
            assert!(!e.to_string().is_empty());
        }
    }
}

fn decider() -> &'static Decider {
    static D: OnceLock<Decider> = OnceLock::new();
    D.get_or_init(|| {
        let domain = parse_domain(FUZZ_CONFIG, Path::new("fuzz.yaml"))
            .expect("the fuzz configuration parses");
        let registry = Registry::new(UnixClock::new(), 256, None);
        let rules = block_on(registry.compile(&Config {
            domains: vec![domain],
        }))
        .expect("it compiles");
        Decider::new(rules, registry, true)
    })
}

/// Any bytes as a request.
pub fn request(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let req = if first % 2 == 0 {
        match RateLimitRequest::decode(body) {
            Ok(r) => r,
            Err(_) => return,
        }
    } else {
        match crate::json::request_from_json(body) {
            Ok(r) => r,
            Err(_) => return,
        }
    };
    let valid = validate(&req).is_ok();
    // An `Err` is a refusal: by the bounds, or a refund asked of a rule that has none.
    if let Ok(r) = block_on(decider().decide(&req)) {
        assert!(valid, "an answer to a request the bounds refuse");
        assert_eq!(r.statuses.len(), req.descriptors.len());
        let _ = crate::json::response_to_json(&r);
    }
}
