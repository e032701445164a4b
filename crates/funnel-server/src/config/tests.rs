//! The loader's own cases; envoyproxy/ratelimit's configuration cases are in
//! `crate::conformance`.

use super::*;

fn parse(text: &str) -> Result<Domain, ConfigError> {
    parse_domain(text, Path::new("t.yaml"))
}

#[test]
fn the_readme_example_of_envoyproxy_ratelimit_shape_loads() {
    let d = parse(
        "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    value: default\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 500\n",
    )
    .unwrap();
    assert_eq!(d.domain, "mongo_cps");
    assert_eq!(d.descriptors.len(), 2);
    assert_eq!(
        d.descriptors[1].rate_limit.as_ref().unwrap().unit,
        Unit::Second
    );
    assert_eq!(d.descriptors[1].line, 8);
}

#[test]
fn an_unknown_field_names_its_line() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 3\n").unwrap_err();
    assert_eq!(e.line, 7, "{e}");
    assert!(matches!(e.kind, ConfigErrorKind::Shape { .. }), "{e}");
    assert!(e.to_string().contains("`burts`"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_names_its_line() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: many\n").unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(matches!(e.kind, ConfigErrorKind::Shape { .. }), "{e}");
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n").unwrap_err();
    assert_eq!(e.line, 4, "{e}");
}

#[test]
fn a_bad_unit_names_its_line() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n").unwrap_err();
    assert_eq!(
        (e.line, e.to_string().contains("t.yaml:5")),
        (5, true),
        "{e}"
    );
    assert!(matches!(e.kind, ConfigErrorKind::UnknownUnit(ref u) if u == "fortnight"));
}

#[test]
fn a_duplicate_key_names_its_line() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n")
        .unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(
        matches!(e.kind, ConfigErrorKind::DuplicateDescriptor { ref path, .. } if path == "d.k_v"),
        "{e}"
    );
    // The same key with and without a value is two rules, as in envoyproxy/ratelimit.
    parse("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n").unwrap();
}

#[test]
fn a_field_given_twice_names_its_line() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    key: j\n").unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(matches!(e.kind, ConfigErrorKind::Syntax(_)), "{e}");
}

#[test]
fn burst_belongs_to_gcra() {
    let e = parse("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: fixed_window\n      burst: 3\n").unwrap_err();
    assert_eq!(e.line, 8, "{e}");
    assert!(matches!(
        e.kind,
        ConfigErrorKind::BurstNotGcra(Algorithm::FixedWindow)
    ));
}

#[test]
fn funnel_additions_load() {
    let d = parse("domain: d\nalgorithm: sliding_window\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 10, burst: 3, algorithm: gcra}\n").unwrap();
    let a = d.descriptors[0].rate_limit.as_ref().unwrap();
    let b = d.descriptors[1].rate_limit.as_ref().unwrap();
    assert_eq!((a.algorithm, a.burst), (Algorithm::SlidingWindow, None));
    assert_eq!((b.algorithm, b.burst), (Algorithm::Gcra, Some(3)));
    let e = parse("domain: d\nalgorithm: leaky\n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn yaml_1_1_scalars_read_as_envoyproxy_reads_them() {
    let d = parse("domain: d\ndescriptors:\n  - key: k\n    value: 0x10\n    shadow_mode: yes\n    rate_limit:\n      unit: second\n      requests_per_unit: 0x10\n      burst: 1_0\n").unwrap();
    let k = &d.descriptors[0];
    // A string field keeps the text; numbers and booleans read as YAML 1.1 reads them.
    assert_eq!(k.value.as_deref(), Some("0x10"));
    assert!(k.shadow_mode);
    let r = k.rate_limit.as_ref().unwrap();
    assert_eq!((r.requests_per_unit, r.burst), (16, Some(10)));
    // A number with a fraction is refused, even where a string is expected.
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n").unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(matches!(e.kind, ConfigErrorKind::Fraction(_)), "{e}");
    // Quoted, it is a string.
    parse("domain: d\ndescriptors:\n  - key: k\n    value: \"1.5\"\n").unwrap();
}

#[test]
fn nulls_leave_fields_at_their_zero_value() {
    let d = parse("domain: d\ndescriptors:\n  - key: k\n    value: ~\n    rate_limit:\n    descriptors:\n    shadow_mode:\n").unwrap();
    let k = &d.descriptors[0];
    assert_eq!(k.value, None);
    assert_eq!(k.rate_limit, None);
    assert!(k.descriptors.is_empty() && !k.shadow_mode);
    let e = parse("domain: ~\n").unwrap_err();
    assert!(matches!(e.kind, ConfigErrorKind::EmptyDomain), "{e}");
}

#[test]
fn nesting_is_bounded() {
    let mut text = String::from("domain: d\ndescriptors:\n");
    for depth in 0..=MAX_DEPTH {
        let pad = "  ".repeat(2 * depth);
        text.push_str(&format!("{pad}  - key: k{depth}\n{pad}    descriptors:\n"));
    }
    let e = parse(&text).unwrap_err();
    assert!(matches!(e.kind, ConfigErrorKind::TooDeep), "{e}");
    let e = parse(&format!(
        "domain: d\ndescriptors: {}{}\n",
        "[".repeat(200),
        "]".repeat(200)
    ))
    .unwrap_err();
    assert!(matches!(e.kind, ConfigErrorKind::TooDeep), "{e}");
}

#[test]
fn errors_carry_their_source() {
    use std::error::Error as _;
    let e = parse("domain: [\n").unwrap_err();
    assert!(e.source().is_some(), "{e}");
    let e = Config::load(Path::new("/nonexistent/funnel.yaml"), false).unwrap_err();
    assert!(matches!(e.kind, ConfigErrorKind::Read(_)));
    assert!(e.source().is_some());
}

#[test]
fn an_empty_file_has_no_domain() {
    for text in ["", "# only a comment\n", "descriptors: []\n"] {
        let e = parse(text).unwrap_err();
        assert!(
            matches!(
                e.kind,
                ConfigErrorKind::EmptyDomain | ConfigErrorKind::Syntax(_)
            ),
            "{text:?}: {e}"
        );
    }
}

#[test]
fn quoted_scalars_are_strings() {
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n").unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    let e = parse("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"true\"\n").unwrap_err();
    assert_eq!(e.line, 4, "{e}");
}
