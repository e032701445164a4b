//! The short table the harness prints when it ends: funnel against governor (default and ahash
//! hashers), the Mutex<HashMap> funnel and the GCRA Lua script on Redis, one thread, in under
//! 100 columns. The wide tables go to the run's files.

use std::fmt::Write as _;

use crate::report::{fmt_rate, fmt_ratio, Row, Section};
use crate::tables::{find, main_workloads, ratio, Table, KEY_TYPES, QUOTAS};
use crate::Ctx;

/// The in-process competitors of the short table, and their column names.
const COMPETITORS: [(&str, &str); 3] = [
    ("governor-keyed", "governor"),
    ("governor-keyed-ahash", "gov-ahash"),
    ("mutex-map", "mutex-map"),
];

/// Decisions/s on one thread per workload, key type and quota, with funnel's ratio to each.
fn in_process(ctx: &Ctx, threads: usize) -> Table {
    let mut headers = vec!["workload", "keys", "quota", "funnel"];
    headers.extend(COMPETITORS.iter().map(|c| c.1));
    let ratios: Vec<String> = COMPETITORS.iter().map(|c| format!("÷{}", c.1)).collect();
    headers.extend(ratios.iter().map(String::as_str));
    let mut right = vec![false, false, false];
    right.extend(std::iter::repeat_n(true, 1 + 2 * COMPETITORS.len()));
    let mut t = Table::new(&headers, &right);
    for (wl, _) in main_workloads(ctx) {
        for kt in KEY_TYPES {
            for q in QUOTAS {
                let get = |c: &str| find(&ctx.rows, Section::InProc, &wl, kt, q, threads, 1, c);
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

/// funnel on one thread against the GCRA script over one connection and pipelined.
fn redis(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "quota",
            "funnel (1 thread)",
            "GCRA script",
            "conns × pipeline",
            "funnel ÷ script",
        ],
        &[false, true, true, true, true],
    );
    for q in QUOTAS {
        let funnel = find(
            &ctx.rows,
            Section::InProc,
            "hot-1k",
            "String",
            q,
            1,
            1,
            "funnel",
        );
        for r in ctx
            .rows
            .iter()
            .filter(|r| r.section == Section::Redis && r.competitor == "redis-gcra" && r.quota == q)
            .filter(|r| r.threads == 1 || r.pipeline > 1)
        {
            t.rows.push(vec![
                q.to_string(),
                funnel.map_or("–".into(), |f| fmt_rate(f.median())),
                fmt_rate(r.median()),
                format!("{} × {}", r.threads, r.pipeline),
                ratio(funnel, Some(r)).map_or("–".into(), fmt_ratio),
            ]);
        }
    }
    t
}

/// The short report printed at the end of a run.
pub fn text(ctx: &Ctx) -> String {
    let mut s = String::new();
    let t = in_process(ctx, 1);
    if !t.rows.is_empty() {
        let _ = writeln!(
            s,
            "\nIn process, 1 thread, decisions/s (median of {} runs, {} clock); ÷X = funnel ÷ X\n",
            ctx.opts.runs,
            ctx.opts.clock.label()
        );
        s.push_str(&t.text());
    }
    let r = redis(ctx);
    if r.rows.is_empty() {
        let _ = writeln!(s, "\nRedis: {}", ctx.redis_status);
    } else {
        let _ = writeln!(
            s,
            "\nThrough Redis, 1,000 String keys (the GCRA Lua script)\n"
        );
        s.push_str(&r.text());
    }
    let cache = crate::fleet_rows::cache_table(ctx);
    if !cache.rows.is_empty() {
        let _ = writeln!(s, "\nfunnel-redis (the funnel kept in Redis for a fleet), without and with its deny cache\n");
        s.push_str(&cache.text());
    }
    let targets = crate::targets::targets(ctx);
    let met = targets.iter().filter(|t| t.met == Some(true)).count();
    let missed = targets.iter().filter(|t| t.met == Some(false)).count();
    let _ = writeln!(
        s,
        "\nTargets: {met} met, {missed} missed (each with its figures in summary.md)."
    );
    s
}
