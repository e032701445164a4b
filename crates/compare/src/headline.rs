//! The short tables the harness prints when it ends: funnel against governor (default and ahash
//! hashers), the `Mutex<HashMap>` funnel, pingora-limits' sketch, and the GCRA Lua script and
//! the redis-cell module on Redis, one thread, in under 100 columns; each limiter on each clock; the sketch's errors.
//! The wide tables go to the run's files.

use std::fmt::Write as _;

use crate::numbers::{fmt_rate, fmt_ratio};
use crate::report::{Row, Section};
use crate::tables::{find, main_workloads, ratio, Table, KEY_TYPES, QUOTAS};
use crate::Ctx;

/// The in-process competitors of the short table: the row's competitor, its column and the
/// column of funnel's ratio to it (short, so that the table fits in 100 columns).
const COMPETITORS: [(&str, &str, &str); 4] = [
    ("governor-keyed", "gov", "÷gov"),
    ("governor-keyed-ahash", "gov-ah", "÷ahash"),
    ("mutex-map", "mutex", "÷mutex"),
    ("pingora", "pingora", "÷ping"),
];

/// Decisions/s on `threads` threads per workload, key type and quota, with funnel's ratio to
/// each competitor.
fn in_process(rows: &[Row], workloads: &[String], threads: usize) -> Table {
    let mut headers = vec!["workload", "keys", "quota", "funnel"];
    headers.extend(COMPETITORS.iter().map(|c| c.1));
    headers.extend(COMPETITORS.iter().map(|c| c.2));
    let mut right = vec![false, false, false];
    right.extend(std::iter::repeat_n(true, 1 + 2 * COMPETITORS.len()));
    let mut t = Table::new(&headers, &right);
    for wl in workloads {
        for kt in KEY_TYPES {
            for q in QUOTAS {
                let get = |c: &str| find(rows, Section::InProc, wl, kt, q, threads, 1, c);
                let Some(funnel) = get("funnel") else {
                    continue;
                };
                let others: Vec<Option<&Row>> = COMPETITORS.iter().map(|c| get(c.0)).collect();
                let mut cells = vec![wl.clone(), kt.to_string(), q.to_string()];
                cells.push(fmt_rate(funnel.median()));
                cells.extend(
                    others
                        .iter()
                        .map(|o| o.map_or("–".into(), |r| fmt_rate(r.median()))),
                );
                cells.extend(
                    others
                        .iter()
                        .map(|o| ratio(Some(funnel), *o).map_or("–".into(), fmt_ratio)),
                );
                t.rows.push(cells);
            }
        }
    }
    t
}

/// The Redis competitors of the short table: the row's competitor and its name there.
const IN_REDIS: [(&str, &str); 2] = [("redis-gcra", "GCRA script"), ("redis-cell", "CL.THROTTLE")];

/// funnel on one thread against the GCRA script and the redis-cell module (where it was
/// built) over one connection and pipelined.
fn redis(rows: &[Row]) -> Table {
    let mut t = Table::new(
        &[
            "quota",
            "funnel (1 thread)",
            "in Redis",
            "decisions/s",
            "conns × pipeline",
            "funnel ÷ it",
        ],
        &[false, true, false, true, true, true],
    );
    for q in QUOTAS {
        let funnel = find(rows, Section::InProc, "hot-1k", "String", q, 1, 1, "funnel");
        for (competitor, name) in IN_REDIS {
            for r in rows
                .iter()
                .filter(|r| {
                    r.section == Section::Redis && r.competitor == competitor && r.quota == q
                })
                .filter(|r| r.threads == 1 || r.pipeline > 1)
            {
                t.rows.push(vec![
                    q.to_string(),
                    funnel.map_or("–".into(), |f| fmt_rate(f.median())),
                    name.to_string(),
                    fmt_rate(r.median()),
                    format!("{} × {}", r.threads, r.pipeline),
                    ratio(funnel, Some(r)).map_or("–".into(), fmt_ratio),
                ]);
            }
        }
    }
    t
}

/// Whether `rows` has a Redis row of `competitor`.
fn rows_of(rows: &[Row], competitor: &str) -> bool {
    rows.iter()
        .any(|r| r.section == Section::Redis && r.competitor == competitor)
}

/// The short report printed at the end of a run.
pub fn text(ctx: &Ctx) -> String {
    let mut s = String::new();
    let workloads: Vec<String> = main_workloads(ctx).into_iter().map(|w| w.0).collect();
    let t = in_process(&ctx.rows, &workloads, 1);
    if !t.rows.is_empty() {
        let _ = writeln!(
            s,
            "\nIn process, 1 thread, decisions/s (median of {} runs, {} clock)\n\
             gov: governor (its default hasher); gov-ah: governor with ahash; mutex: a \
             Mutex<HashMap> funnel;\npingora: pingora-limits' Rate at its default size; \
             ÷x: funnel's rate ÷ x's\n",
            ctx.opts.runs,
            ctx.opts.clock.label()
        );
        s.push_str(&t.text());
    }
    let c = crate::clocks::short_table(ctx);
    if !c.rows.is_empty() {
        let _ = writeln!(
            s,
            "\nEach limiter on each clock: ns per decision on a CPU, 1,000 u64 keys, 1 thread \
             (median of alternating\nrounds; the harness's loop, and a minimal loop that draws \
             a key and decides it)\n"
        );
        s.push_str(&c.text());
        let _ = writeln!(s, "\nA clock read alone, ns on a CPU\n");
        s.push_str(&crate::clocks::read_table(ctx).text());
    }
    let k = crate::sketch::table(ctx);
    if !k.rows.is_empty() {
        let _ = writeln!(
            s,
            "\npingora-limits' Rate (count-min sketch) against an exact counter: {} per key per \
             window,\n{} requests per key on average, uniform keys, one window\n",
            crate::sketch::LIMIT,
            crate::sketch::REQUESTS_PER_KEY
        );
        s.push_str(&k.text());
    }
    let r = redis(&ctx.rows);
    if r.rows.is_empty() {
        let _ = writeln!(s, "\nRedis: {}", ctx.redis_status);
    } else {
        let _ = writeln!(s, "\nThrough Redis, 1,000 String keys\n");
        s.push_str(&r.text());
        if !rows_of(&ctx.rows, "redis-cell") {
            let _ = writeln!(s, "({})", ctx.redis_status);
        }
    }
    let cache = crate::fleet_rows::cache_table(ctx);
    if !cache.rows.is_empty() {
        let _ = writeln!(s, "\nfunnel-redis (the funnel kept in Redis for a fleet), without and with its deny cache\n");
        s.push_str(&cache.text());
    }
    s
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::inproc::workloads;
    use crate::runner::Run;

    /// The short table's width limit, separator line included.
    const COLUMNS: usize = 100;

    /// A row of `rate` decisions/s (one run of one second).
    fn row(section: Section, workload: &str, kt: &'static str, q: &str, c: &str, rate: u64) -> Row {
        Row {
            section,
            workload: workload.into(),
            key_space: 0,
            key_type: kt,
            quota: q.into(),
            threads: 1,
            pipeline: if section == Section::Redis { 64 } else { 1 },
            competitor: c.into(),
            clock: String::new(),
            capacity: String::new(),
            runs: vec![Run {
                decisions: rate,
                allowed: rate,
                elapsed: Duration::from_secs(1),
                legit: 0,
                wrongly_admitted: 0,
                wrongly_denied: 0,
                round_trips: 0,
                cpu_share: 1.0,
            }],
            note: String::new(),
            prefill: None,
            table_prefill: None,
            table_end: None,
            held_end: None,
        }
    }

    /// Every line of `text`, the separator included, fits in [`COLUMNS`].
    fn fits(text: &str) {
        for line in text.lines() {
            let width = line.chars().count();
            assert!(width <= COLUMNS, "{width} columns: {line:?}\n{text}");
        }
    }

    #[test]
    fn the_short_tables_fit_in_100_columns_with_the_widest_figures() {
        // The longest workload names of a full and a quick run; the widest rates (`123 M`)
        // and ratios (`1,234×` for funnel, `12.3×` against it).
        let mut names: Vec<String> = workloads(false)
            .into_iter()
            .chain(workloads(true))
            .filter(|w| w.section == Section::InProc)
            .map(|w| w.name)
            .collect();
        names.sort();
        names.dedup();
        let mut rows = Vec::new();
        for wl in &names {
            for kt in KEY_TYPES {
                for q in QUOTAS {
                    rows.push(row(Section::InProc, wl, kt, q, "funnel", 123_456_789));
                    for (i, c) in COMPETITORS.iter().enumerate() {
                        let rate = [99_999, 12_345_678, 123_456_789, 1_234_567][i];
                        rows.push(row(Section::InProc, wl, kt, q, c.0, rate));
                    }
                }
            }
        }
        for q in QUOTAS {
            for (competitor, _) in IN_REDIS {
                rows.push(row(
                    Section::Redis,
                    "hot-1k",
                    "String",
                    q,
                    competitor,
                    9_999,
                ));
            }
        }
        let t = in_process(&rows, &names, 1);
        assert_eq!(t.rows.len(), names.len() * 4);
        let text = t.text();
        fits(&text);
        // The separator is as wide as the widest line, no wider.
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert_eq!(text.lines().nth(1).unwrap().chars().count(), widest);
        let r = redis(&rows);
        assert_eq!(r.rows.len(), QUOTAS.len() * IN_REDIS.len());
        fits(&r.text());
    }
}
