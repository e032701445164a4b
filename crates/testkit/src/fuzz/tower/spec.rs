//! Fuzz body `tower_spec`: the example proxy's `--limit` grammar ([`funnel_tower::spec`]).
//!
//! Each input is a spec: grammar pieces (keys, counts, periods, options, at their edges and
//! just past them) with separators and raw text between them, or any text. Checks:
//!
//! * a spec is accepted exactly when a plain reference parser reads it and the quota it names
//!   is one funnel can hold (interval `period / count` in whole nanoseconds, at least one;
//!   capacity `burst`, else `count`; interval × capacity at most
//!   [`Quota::MAX_TOLERANCE_NANOS`]);
//! * an accepted spec has the reference's name and key, and exactly that interval and
//!   capacity; written back in the grammar's own words it parses to the same quota;
//! * a rejected spec's error names the spec and says what is wrong.

use std::time::Duration;

use funnel::Quota;

use super::{note, Input};
use funnel_tower::spec::{parse_limit, PolicySpec};

const KEYS: &[&str] = &[
    "ip",
    "client",
    "client-forwarded",
    "route",
    "global",
    "ip/64",
    "ip/0",
    "ip/128",
    "ip/129",
    "ip/256",
    "ip/+5",
    "ip/",
    "ip/0064",
    "header:x-api-key",
    "header:X-Api-Key",
    "header:",
    "header:bad name",
    "header:\u{e9}",
    "IP",
    " ip ",
    "nope",
    "",
];
const COUNTS: &[&str] = &[
    "1",
    "10",
    "0",
    "+5",
    "007",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    " 5 ",
    "1e3",
    "",
    "\u{663}",
];
const PERIODS: &[&str] = &[
    "1s",
    "1",
    "500ms",
    "60s",
    "1m",
    "1h",
    "0s",
    "1y",
    "1.5s",
    "ms",
    "s",
    "18446744073709551615h",
    "18446744073709551615ms",
    "307445734561825860m",
    "1 s",
    " 1s ",
    "1S",
    "1000000000000ms",
    "438000h",
    "+1s",
];
const OPTIONS: &[&str] = &[
    ",burst=20",
    ",burst=1",
    ",burst=0",
    ",burst=",
    ", burst = 5 ",
    ",burst=5,burst=6",
    ",foo=1",
    ",",
    ",burst=18446744073709551615",
    ",burst",
    ",BURST=2",
    ",burst==2",
];
const NOISE: &[&str] = &["=", "/", ",", " ", "\t", ":", "\u{a0}", "\0"];

/// The fuzz body.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let spec = if input.one_in(8) {
        String::from_utf8_lossy(input.bytes(64)).into_owned()
    } else {
        let mut s = String::new();
        s.push_str(input.choose(KEYS));
        s.push('=');
        s.push_str(input.choose(COUNTS));
        s.push('/');
        s.push_str(input.choose(PERIODS));
        for _ in 0..input.below(3) {
            s.push_str(input.choose(OPTIONS));
        }
        // Noise at a few char boundaries.
        for _ in 0..input.below(3) {
            let at = input.below(s.len() + 1);
            if s.is_char_boundary(at) {
                s.insert_str(at, input.choose(NOISE));
            }
        }
        s
    };
    check(&spec);
}

fn check(spec: &str) {
    let got = parse_limit(spec, &[]);
    let want = reference::parse(spec).and_then(|r| r.quota().map(|q| (r, q)));
    match (&got, &want) {
        (Ok(p), Some((r, (t, limit)))) => {
            assert_eq!(p.name, r.name, "{spec:?}");
            assert_eq!(format!("{:?}", p.key), r.key_debug(), "{spec:?}");
            assert_eq!(p.quota.emission_interval().as_nanos(), u128::from(*t));
            assert_eq!(p.quota.limit(), *limit, "{spec:?}");
            round_trip(spec, p, r);
            note(if r.burst.is_some() {
                "accepted with a burst"
            } else {
                "accepted"
            });
        }
        (Err(e), None) => {
            let named = format!("--limit {spec:?}: ");
            assert!(
                e.0.starts_with(&named) && e.0.len() > named.len(),
                "{spec:?}: {e}"
            );
            note(if r_grammar_ok(spec) {
                "refused: a quota funnel cannot hold"
            } else {
                "refused: not the grammar"
            });
        }
        (Ok(p), None) => panic!("{spec:?} accepted as {p:?}; the reference refuses it"),
        (Err(e), Some(r)) => panic!("{spec:?} refused ({e}); the reference reads {r:?}"),
    }
}

/// The reference reads the spec (whatever its quota).
fn r_grammar_ok(spec: &str) -> bool {
    reference::parse(spec).is_some()
}

/// The accepted spec, written back in the grammar's words, names the same quota.
fn round_trip(spec: &str, p: &PolicySpec, r: &reference::Spec) {
    let again = format!(
        "{}={}/{},burst={}",
        r.key,
        r.count,
        reference::period_text(r.period),
        p.quota.limit()
    );
    let q = parse_limit(&again, &[]).unwrap_or_else(|e| panic!("{spec:?} -> {again:?}: {e}"));
    assert_eq!(q.quota, p.quota, "{spec:?} -> {again:?}");
    assert_eq!(q.name, p.name, "{spec:?} -> {again:?}");
}

/// The grammar of `funnel_tower::spec`, read plainly.
mod reference {
    use super::*;

    #[derive(Debug)]
    pub(super) struct Spec {
        /// The key as written back: `ip/<n>` canonical, `header:<lowercase name>`.
        pub(super) key: String,
        pub(super) name: String,
        pub(super) count: u64,
        pub(super) period: Duration,
        pub(super) burst: Option<u64>,
    }

    impl Spec {
        /// The quota's interval (ns) and capacity, if funnel can hold it.
        pub(super) fn quota(&self) -> Option<(u64, u64)> {
            let t = u64::try_from(self.period.as_nanos() / u128::from(self.count)).ok()?;
            let limit = self.burst.unwrap_or(self.count);
            (t >= 1 && u128::from(t) * u128::from(limit) <= u128::from(Quota::MAX_TOLERANCE_NANOS))
                .then_some((t, limit))
        }

        /// How `KeyBy`'s `Debug` writes this key (no trusted proxies are given).
        pub(super) fn key_debug(&self) -> String {
            match self.key.as_str() {
                "client" => "ClientIp(0 trusted, /64)".into(),
                "client-forwarded" => "ClientIpForwarded(0 trusted, /64)".into(),
                "route" => "Route".into(),
                "global" => "Global".into(),
                "ip" => "PeerIp(/64)".into(),
                k => match k.strip_prefix("ip/") {
                    Some(n) => format!("PeerIp(/{n})"),
                    None => format!("Header({})", &k["header:".len()..]),
                },
            }
        }
    }

    /// A field with spaces around it ignored (`str::trim`'s whitespace).
    fn field(s: &str) -> &str {
        s.trim()
    }

    /// A field holding a number.
    fn number(s: &str) -> Option<u64> {
        digits(field(s))
    }

    /// Decimal digits, nothing else.
    fn digits(s: &str) -> Option<u64> {
        if s.is_empty() || s.bytes().any(|b| !b.is_ascii_digit()) {
            return None;
        }
        s.bytes().try_fold(0u64, |n, d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    }

    pub(super) fn parse(spec: &str) -> Option<Spec> {
        let (key, rest) = spec.split_once('=')?;
        let key = field(key);
        let (key, name) = match key {
            "ip" | "client" | "route" | "global" => (key.to_string(), key.to_string()),
            "client-forwarded" => (key.to_string(), "client".to_string()),
            _ => {
                if let Some(n) = key.strip_prefix("ip/") {
                    let n = digits(n).filter(|n| *n <= 128)?;
                    (format!("ip/{n}"), format!("ip/{n}"))
                } else {
                    let h = key.strip_prefix("header:")?;
                    let h = http::HeaderName::from_bytes(h.as_bytes()).ok()?;
                    (format!("header:{h}"), h.to_string())
                }
            }
        };
        let mut fields = rest.split(',');
        let (count, period) = fields.next()?.split_once('/')?;
        let count = number(count).filter(|c| *c > 0)?;
        let period = field(period);
        let unit_at = period
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(period.len());
        let n = number(&period[..unit_at]).filter(|n| *n > 0)?;
        let secs = |mul: u64| n.checked_mul(mul).map(Duration::from_secs);
        let period = match &period[unit_at..] {
            "ms" => Some(Duration::from_millis(n)),
            "" | "s" => secs(1),
            "m" => secs(60),
            "h" => secs(3600),
            _ => None,
        }?;
        let mut burst = None;
        for option in fields {
            let (k, v) = option.split_once('=')?;
            if field(k) != "burst" || burst.is_some() {
                return None;
            }
            burst = Some(number(v).filter(|b| *b > 0)?);
        }
        Some(Spec {
            key,
            name,
            count,
            period,
            burst,
        })
    }

    /// A period in the grammar's largest unit that writes it exactly.
    pub(super) fn period_text(p: Duration) -> String {
        let ms = p.as_millis();
        if ms % 3_600_000 == 0 {
            format!("{}h", ms / 3_600_000)
        } else if ms % 60_000 == 0 {
            format!("{}m", ms / 60_000)
        } else if ms % 1000 == 0 {
            format!("{}s", ms / 1000)
        } else {
            format!("{ms}ms")
        }
    }
}
