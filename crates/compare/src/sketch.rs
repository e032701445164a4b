//! How far pingora-limits' `Rate` (a count-min sketch per interval) is from an exact counter,
//! at its default size and sized to the keys: the same request stream through both, one
//! window, and per key the requests one admitted and the other did not.
//!
//! The stream: `keys` keys drawn uniformly, [`REQUESTS_PER_KEY`] requests per key on average,
//! a limit of [`LIMIT`] per key per window (a window of an hour, so the whole stream is in one).
//! The exact counter admits a key's first [`LIMIT`] requests. The sketch admits a request while
//! `observe(key, 1)` is within the limit; a counter shared with other keys makes it deny early
//! (over-denial), and it cannot admit more than exact within one window.

use std::collections::HashMap;
use std::time::Duration;

use crate::inproc::workloads;
use crate::keys::Rng;
use crate::limiters::{Pingora, PINGORA_SLOTS};
use crate::numbers::{fmt_int, fmt_rate};
use crate::report::Section;
use crate::table::Table;
use crate::tables::find;
use crate::Ctx;

/// Requests admitted per key per window.
pub const LIMIT: u64 = 10;
/// Requests per key, on average.
pub const REQUESTS_PER_KEY: u64 = 20;

/// One sketch against the exact counter.
#[derive(Clone, Debug)]
pub struct SketchRow {
    /// The in-process workload with the same key space (whose speed the table shows).
    pub workload: String,
    pub keys: u64,
    /// `pingora` or `pingora-sized`.
    pub competitor: &'static str,
    pub slots: usize,
    pub requests: u64,
    pub admitted: u64,
    pub exact: u64,
    pub over_admitted: u64,
    pub over_denied: u64,
}

/// The key spaces measured: those of the hot set and the Zipf workload of this run.
fn key_spaces(ctx: &Ctx) -> Vec<(String, u64)> {
    workloads(ctx.opts.quick)
        .into_iter()
        .filter(|w| matches!(w.role, "W2" | "W3"))
        .map(|w| (w.name, w.key_space))
        .collect()
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    // Two sketches and the exact map over every request: a rough cost a request.
    let keys: u64 = workloads(o.quick)
        .iter()
        .filter(|w| matches!(w.role, "W2" | "W3"))
        .map(|w| w.key_space)
        .sum();
    (keys * REQUESTS_PER_KEY) as f64 * 3.0 * 100e-9
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    for (workload, keys) in key_spaces(ctx) {
        ctx.progress.begin(format!(
            "pingora's sketch against an exact counter, {} keys",
            fmt_int(keys)
        ));
        let requests = keys * REQUESTS_PER_KEY;
        let mut rng = Rng::new(0x5EED ^ keys);
        let stream: Vec<u64> = (0..requests).map(|_| rng.below(keys)).collect();
        let mut exact_counts: HashMap<u64, u64> = HashMap::with_capacity(keys as usize);
        let mut exact_ok = vec![false; stream.len()];
        for (ok, k) in exact_ok.iter_mut().zip(&stream) {
            let c = exact_counts.entry(*k).or_insert(0);
            *c += 1;
            *ok = *c <= LIMIT;
        }
        let mut sketches = vec![("pingora", PINGORA_SLOTS)];
        // Sized to the keys where that is beyond the default size.
        if Pingora::slots_for(keys) > PINGORA_SLOTS {
            sketches.push(("pingora-sized", Pingora::slots_for(keys)));
        }
        for (competitor, slots) in sketches {
            let sketch = Pingora::new(Duration::from_secs(3600), LIMIT, slots);
            let mut per_key: HashMap<u64, (u64, u64)> = HashMap::with_capacity(keys as usize);
            for (k, &exact) in stream.iter().zip(&exact_ok) {
                let ok = sketch.rate.observe(k, 1) <= sketch.limit;
                let e = per_key.entry(*k).or_insert((0, 0));
                e.0 += u64::from(ok);
                e.1 += u64::from(exact);
            }
            let (mut admitted, mut exact, mut over, mut under) = (0, 0, 0, 0);
            for (a, e) in per_key.values() {
                admitted += a;
                exact += e;
                over += a.saturating_sub(*e);
                under += e.saturating_sub(*a);
            }
            ctx.sketch.push(SketchRow {
                workload: workload.clone(),
                keys,
                competitor,
                slots,
                requests,
                admitted,
                exact,
                over_admitted: over,
                over_denied: under,
            });
        }
        ctx.progress.advance((requests as f64) * 3.0 * 100e-9);
    }
    Ok(())
}

/// The sketch's errors beside its speed (and funnel's) in the same key space: `u64` keys,
/// one thread, the allowing quota of the in-process tables.
pub fn table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "keys",
            "limiter",
            "counters",
            "admitted",
            "exact",
            "over-admitted",
            "over-denied",
            "decisions/s (u64, allow, 1 thread)",
        ],
        &[true, false, true, true, true, true, true, true],
    );
    for r in &ctx.sketch {
        let speed = |c: &str| {
            find(
                &ctx.rows,
                Section::InProc,
                &r.workload,
                "u64",
                "allow",
                1,
                1,
                c,
            )
            .map_or("–".into(), |row| fmt_rate(row.median()))
        };
        if r.competitor == "pingora" {
            t.rows.push(vec![
                fmt_int(r.keys),
                "exact counter (speed: funnel)".into(),
                "–".into(),
                fmt_int(r.exact),
                fmt_int(r.exact),
                "0".into(),
                "0".into(),
                speed("funnel"),
            ]);
        }
        t.rows.push(vec![
            fmt_int(r.keys),
            r.competitor.into(),
            format!("4 × {}", fmt_int(r.slots as u64)),
            fmt_int(r.admitted),
            fmt_int(r.exact),
            fmt_int(r.over_admitted),
            format!(
                "{} ({:.1}%)",
                fmt_int(r.over_denied),
                100.0 * r.over_denied as f64 / r.exact.max(1) as f64
            ),
            speed(r.competitor),
        ]);
    }
    t
}
