//! The summary's tables: in process with ratios against funnel, attack mix, Redis, memory,
//! over-admission, published figures, and the appendix with every configuration.

use crate::inproc::{workloads, Comp};
use crate::numbers::{fmt_int, fmt_ns, fmt_rate, fmt_ratio};
use crate::redis_rows::settings;
use crate::report::{Row, Section};
use crate::Ctx;

pub use crate::table::Table;

#[allow(clippy::too_many_arguments)]
pub fn find<'a>(
    rows: &'a [Row],
    section: Section,
    workload: &str,
    key_type: &str,
    quota: &str,
    threads: usize,
    pipeline: usize,
    competitor: &str,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.section == section
            && r.workload == workload
            && r.key_type == key_type
            && r.quota == quota
            && r.threads == threads
            && r.pipeline == pipeline
            && r.competitor == competitor
    })
}

pub fn ratio(funnel: Option<&Row>, other: Option<&Row>) -> Option<f64> {
    let (f, o) = (funnel?.median(), other?.median());
    (f > 0.0 && o > 0.0).then_some(f / o)
}

pub const KEY_TYPES: [&str; 2] = ["u64", "String"];
pub const QUOTAS: [&str; 2] = ["allow", "deny"];

/// Workload names of the main table, in order (whatever the run's scale).
pub fn main_workloads(ctx: &Ctx) -> Vec<(String, &'static str)> {
    workloads(ctx.opts.quick)
        .into_iter()
        .filter(|w| w.section == Section::InProc)
        .map(|w| (w.name, w.role))
        .collect()
}

pub fn main_table(ctx: &Ctx) -> Table {
    let mut headers = vec!["workload", "keys", "quota", "thr"];
    let comps: Vec<&str> = Comp::IN_TABLE.iter().map(|c| c.label()).collect();
    headers.extend(comps.iter().copied());
    let mut right = vec![false, false, false, true];
    right.extend(std::iter::repeat_n(true, comps.len()));
    let mut t = Table::new(&headers, &right);
    for (wl, _) in main_workloads(ctx) {
        for kt in KEY_TYPES {
            for q in QUOTAS {
                for &th in &ctx.opts.threads {
                    let f = find(&ctx.rows, Section::InProc, &wl, kt, q, th, 1, "funnel");
                    let Some(fr) = f else { continue };
                    let mut cells = vec![wl.clone(), kt.to_string(), q.to_string(), th.to_string()];
                    cells.push(format!(
                        "{} [{}]",
                        fmt_rate(fr.median()),
                        fmt_ns(fr.ns_per_decision())
                    ));
                    for c in &comps[1..] {
                        let o = find(&ctx.rows, Section::InProc, &wl, kt, q, th, 1, c);
                        cells.push(match (o, ratio(f, o)) {
                            (Some(o), Some(x)) => {
                                format!("{} ({})", fmt_rate(o.median()), fmt_ratio(x))
                            }
                            _ => "–".into(),
                        });
                    }
                    t.rows.push(cells);
                }
            }
        }
    }
    t
}

pub fn attack_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "keys",
            "quota",
            "thr",
            "competitor",
            "capacity",
            "decisions/s (min–max)",
            "ns/decision/thread",
            "funnel (first capacity) ÷ this",
            "legit requests",
            "wrongly admitted",
            "wrongly denied",
        ],
        &[
            false, false, true, false, true, true, true, true, true, true, true,
        ],
    );
    let attack: Vec<&Row> = ctx
        .rows
        .iter()
        .filter(|r| r.section == Section::Attack)
        .collect();
    let base_label = format!(
        "funnel (capacity {})",
        fmt_int(crate::attack::params(&ctx.opts).capacities[0] as u64)
    );
    for r in &attack {
        let base = attack
            .iter()
            .find(|b| {
                b.key_type == r.key_type
                    && b.quota == r.quota
                    && b.threads == r.threads
                    && b.competitor == base_label
            })
            .copied();
        let (legit, wa, wd) = r.attack_errors();
        let pct = |n: u64| {
            format!(
                "{} ({:.3}%)",
                fmt_int(n),
                100.0 * n as f64 / legit.max(1) as f64
            )
        };
        t.rows.push(vec![
            r.key_type.to_string(),
            r.quota.clone(),
            r.threads.to_string(),
            r.competitor.clone(),
            r.capacity.clone(),
            format!(
                "{} ({}–{})",
                fmt_rate(r.median()),
                fmt_rate(r.min()),
                fmt_rate(r.max())
            ),
            fmt_ns(r.ns_per_decision()),
            ratio(base, Some(r))
                .map(fmt_ratio)
                .unwrap_or_else(|| "–".into()),
            fmt_int(legit),
            pct(wa),
            pct(wd),
        ]);
    }
    t
}

pub fn redis_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "script",
            "workload",
            "conns",
            "pipeline",
            "quota",
            "decisions/s (min–max)",
            "µs/decision/conn",
            "allowed",
            "funnel ÷ this",
        ],
        &[false, false, true, true, false, true, true, true, true],
    );
    for r in ctx.rows.iter().filter(|r| r.section == Section::Redis) {
        let f = find(
            &ctx.rows,
            Section::InProc,
            "hot-1k",
            "String",
            &r.quota,
            r.threads,
            1,
            "funnel",
        );
        t.rows.push(vec![
            r.competitor.clone(),
            r.workload.clone(),
            r.threads.to_string(),
            r.pipeline.to_string(),
            r.quota.clone(),
            format!(
                "{} ({}–{})",
                fmt_rate(r.median()),
                fmt_rate(r.min()),
                fmt_rate(r.max())
            ),
            format!("{:.1}", r.ns_per_decision() / 1000.0),
            format!("{:.3}", r.allowed_fraction()),
            ratio(f, Some(r))
                .map(fmt_ratio)
                .unwrap_or_else(|| "–".into()),
        ]);
    }
    t
}

pub fn memory_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "store",
            "key type",
            "keys",
            "bytes/key",
            "peak bytes/key",
            "how",
        ],
        &[false, false, true, true, true, false],
    );
    for m in &ctx.memory {
        t.rows.push(vec![
            m.store.clone(),
            m.key_type.clone(),
            if m.keys == 0 {
                "–".into()
            } else {
                fmt_int(m.keys)
            },
            format!("{:.1}", m.bytes_per_key),
            m.peak_per_key
                .map(|p| format!("{p:.1}"))
                .unwrap_or_else(|| "–".into()),
            m.method.clone(),
        ]);
    }
    t
}

pub fn over_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &["limiter", "admitted over the limit", "how"],
        &[false, true, false],
    );
    for o in &ctx.over {
        t.rows.push(vec![
            o.who.clone(),
            fmt_int(o.admitted_over_limit),
            o.method.clone(),
        ]);
    }
    t
}

/// Every configuration with min and max.
pub fn appendix_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "section",
            "workload",
            "keys",
            "quota",
            "thr",
            "pipe",
            "competitor",
            "capacity",
            "median/s",
            "min – max",
            "ns/decision/thread",
            "allowed",
            "CPU share",
            "÷ CPU share",
            "runs",
        ],
        &[
            false, false, false, false, true, true, false, true, true, true, true, true, true,
            true, true,
        ],
    );
    for r in &ctx.rows {
        t.rows.push(vec![
            r.section.label().into(),
            r.workload.clone(),
            r.key_type.into(),
            r.quota.clone(),
            r.threads.to_string(),
            r.pipeline.to_string(),
            r.competitor.clone(),
            r.capacity.clone(),
            fmt_rate(r.median()),
            format!("{} – {}", fmt_rate(r.min()), fmt_rate(r.max())),
            fmt_ns(r.ns_per_decision()),
            format!("{:.3}", r.allowed_fraction()),
            if r.cpu_share().is_finite() {
                format!("{:.2}", r.cpu_share())
            } else {
                "–".into()
            },
            fmt_rate(r.median_per_cpu()),
            r.runs.len().to_string(),
        ]);
    }
    t
}

/// Published figures next to this run's.
pub fn published_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &["source", "in memory", "through Redis", "ratio"],
        &[false, true, true, true],
    );
    t.rows.push(vec![
        "a published comparison: an Erlang ETS funnel vs its author's Redis limiter".into(),
        "about 270,000/s".into(),
        "about 20,000/s".into(),
        "about 13.5×".into(),
    ]);
    for (competitor, name) in [
        ("redis-gcra", "GCRA script"),
        ("redis-cell", "redis-cell's CL.THROTTLE"),
    ] {
        for (conns, pipe) in settings(ctx.opts.max_threads()) {
            let f = find(
                &ctx.rows,
                Section::InProc,
                "hot-1k",
                "String",
                "allow",
                conns,
                1,
                "funnel",
            );
            let r = find(
                &ctx.rows,
                Section::Redis,
                "hot-1k",
                "String",
                "allow",
                conns,
                pipe,
                competitor,
            );
            if let (Some(fr), Some(rr)) = (f, r) {
                t.rows.push(vec![
                    format!("this run: funnel {conns} thread(s) vs {name}, {conns} conn(s) × pipeline {pipe} (1,000 String keys, allow)"),
                    format!("{}/s", fmt_rate(fr.median())),
                    format!("{}/s", fmt_rate(rr.median())),
                    ratio(f, r).map(fmt_ratio).unwrap_or_default(),
                ]);
            }
        }
    }
    if let Some(o) = ctx.over.iter().find(|o| o.who.contains("naive")) {
        t.rows.push(vec![
            "a funnel's fields in a Redis hash, read–compute–write (not atomic): requests admitted over the limit".into(),
            "–".into(),
            fmt_int(o.admitted_over_limit),
            o.method.clone(),
        ]);
    }
    t
}

/// funnel's table in each in-process workload: capacity, keys held after the prefill and after
/// the runs, evictions.
pub fn funnel_table_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "workload",
            "keys",
            "quota",
            "slots",
            "key space",
            "held after prefill",
            "held after runs",
            "forced evictions",
            "recovered slots reused",
            "huge pages",
        ],
        &[
            false, false, false, true, true, true, true, true, true, false,
        ],
    );
    let first_threads = ctx.opts.threads.first().copied().unwrap_or(1);
    for r in ctx.rows.iter().filter(|r| {
        matches!(r.section, Section::InProc | Section::Sweep)
            && r.competitor == "funnel"
            && r.threads == first_threads
    }) {
        let Some(end) = r.table_end else { continue };
        let pre = r.table_prefill;
        t.rows.push(vec![
            r.workload.clone(),
            r.key_type.to_string(),
            r.quota.clone(),
            fmt_int(end.slots as u64),
            if r.key_space == 0 {
                "new keys".into()
            } else {
                fmt_int(r.key_space)
            },
            pre.map(|p| fmt_int(p.held as u64))
                .unwrap_or_else(|| "–".into()),
            fmt_int(end.held as u64),
            fmt_int(end.forced),
            fmt_int(end.recovered),
            if end.huge_pages { "yes" } else { "no" }.into(),
        ]);
    }
    t
}

/// The prefill: the first request of every key of the key space (an insert), per key and
/// thread, for key spaces of 100,000 keys or more.
pub fn prefill_table(ctx: &Ctx) -> Table {
    let comps: Vec<&str> = Comp::IN_TABLE
        .iter()
        .filter(|c| !c.is_direct())
        .map(|c| c.label())
        .collect();
    let mut headers = vec!["workload", "keys", "quota"];
    headers.extend(comps.iter().copied());
    let mut right = vec![false, false, false];
    right.extend(std::iter::repeat_n(true, comps.len()));
    let mut t = Table::new(&headers, &right);
    let first_threads = ctx.opts.threads.first().copied().unwrap_or(1);
    let mut seen = Vec::new();
    for r in ctx.rows.iter().filter(|r| {
        matches!(r.section, Section::InProc | Section::Sweep)
            && r.key_space >= 100_000
            && r.threads == first_threads
            && r.prefill.is_some()
    }) {
        let id = (r.workload.clone(), r.key_type, r.quota.clone());
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let mut cells = vec![r.workload.clone(), r.key_type.to_string(), r.quota.clone()];
        for c in &comps {
            let cell = ctx
                .rows
                .iter()
                .find(|o| {
                    o.section == r.section
                        && o.workload == r.workload
                        && o.key_type == r.key_type
                        && o.quota == r.quota
                        && o.competitor == *c
                })
                .and_then(|o| o.prefill)
                .map(|(secs, threads)| fmt_ns(secs * 1e9 * threads as f64 / r.key_space as f64))
                .unwrap_or_else(|| "–".into());
            cells.push(cell);
        }
        t.rows.push(cells);
    }
    t
}

/// Keys each competitor held at the end of a churn run (funnel: bounded by its table).
pub fn churn_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "keys",
            "quota",
            "threads",
            "competitor",
            "keys held after one run",
            "decisions/s",
        ],
        &[false, false, true, false, true, true],
    );
    for r in ctx.rows.iter().filter(|r| r.workload == "churn") {
        let held = r.table_end.map(|s| s.held).or(r.held_end);
        let Some(held) = held else { continue };
        t.rows.push(vec![
            r.key_type.to_string(),
            r.quota.clone(),
            r.threads.to_string(),
            r.competitor.clone(),
            fmt_int(held as u64),
            fmt_rate(r.median()),
        ]);
    }
    t
}
