//! summary.md (every table of a run) and latest.md (the short report published under
//! docs/bench/).

use std::fmt::Write as _;

use crate::inproc::workloads;
use crate::limiters::QuotaKind;
use crate::numbers::fmt_int;
use crate::tables::{
    appendix_table, attack_table, churn_table, funnel_table_table, main_table, memory_table,
    over_table, prefill_table, published_table, redis_table, Table,
};
use crate::weak::weak_spots;
use crate::Ctx;

/// The Markdown summary; `chart_prefix` is where the charts are, relative to the document.
pub fn markdown(
    ctx: &Ctx,
    run_id: &str,
    charts: &[(String, String)],
    chart_prefix: &str,
    short: bool,
) -> String {
    let o = &ctx.opts;
    let m = &ctx.machine;
    let mut s = String::new();
    // The published file is dated, not named after the run: the run id (its start time) names
    // the results directory, which is not in the repository.
    if short {
        let _ = writeln!(s, "# Latest results ({})\n", run_date(run_id));
    } else {
        let _ = writeln!(s, "### Run `{run_id}`\n");
    }
    let _ = writeln!(
        s,
        "Every figure in this {} comes from one invocation of:\n\n```sh\n{}\n```\n",
        if short { "file" } else { "section" },
        o.command
    );
    let parts: Vec<String> = ctx
        .timings
        .iter()
        .map(|(n, d)| format!("{n} {}", crate::progress::fmt_secs(d.as_secs_f64())))
        .collect();
    let _ = writeln!(
        s,
        "It took {} ({}) on the machine below. Load average (1, 5, 15 min) at the start: {}; at the end: {}. \
         On a machine shared with other work, treat differences under ~1.5× in memory-bound and two-thread cells as noise.\n",
        crate::progress::fmt_secs(ctx.progress.elapsed().as_secs_f64()),
        parts.join(", "),
        m.load_start,
        ctx.load_end
    );
    let shares: Vec<f64> = {
        let mut v: Vec<f64> = ctx
            .rows
            .iter()
            .flat_map(|r| r.runs.iter().map(|x| x.cpu_share))
            .filter(|x| x.is_finite())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    if !shares.is_empty() {
        let _ = writeln!(
            s,
            "The limiters' threads were on a CPU for a median {:.0}% of their runs' wall time (lowest {:.0}%; \
             /proc/thread-self/schedstat); {} of {} in-process runs were repeated because that share was \
             under {:.0}%, keeping the run with the larger share (`--retries {}`, `--min-cpu`).\n",
            100.0 * crate::report::median(&shares),
            100.0 * shares[0],
            ctx.repeated,
            ctx.kept,
            100.0 * o.min_cpu,
            o.retries
        );
    }
    let _ = writeln!(
        s,
        "#### Machine\n\nRead with `{}`.\n",
        crate::machine::COMMANDS
    );
    let mut t = Table::new(&["", ""], &[false, false]);
    t.rows.push(vec!["CPU".into(), m.cpu.clone()]);
    t.rows.push(vec!["cores".into(), m.cores.to_string()]);
    t.rows.push(vec!["memory".into(), m.memory.clone()]);
    t.rows.push(vec![
        "OS, kernel".into(),
        format!("{}, Linux {}", m.os, m.kernel),
    ]);
    t.rows.push(vec!["Rust".into(), m.rustc.clone()]);
    t.rows.push(vec![
        "Redis".into(),
        ctx.redis_version
            .clone()
            .unwrap_or_else(|| ctx.redis_status.clone()),
    ]);
    t.rows.push(vec![
        "crates".into(),
        m.crates
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    ]);
    s.push_str(&t.markdown());
    let _ = writeln!(s, "\n#### Run parameters\n");
    let mut p = Table::new(&["", ""], &[false, false]);
    p.rows.push(vec![
        "timed runs per configuration".into(),
        format!(
            "{} of {:.2} s (Redis: {:.2} s)",
            o.runs,
            o.duration.as_secs_f64(),
            o.redis_duration.as_secs_f64()
        ),
    ]);
    p.rows.push(vec![
        "threads".into(),
        o.threads
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    ]);
    p.rows.push(vec![
        "keys drawn per thread".into(),
        format!(
            "{} (churn: {} new keys)",
            fmt_int(
                workloads(o.quick)
                    .first()
                    .map(|w| w.array_len as u64)
                    .unwrap_or(0)
            ),
            fmt_int(
                workloads(o.quick)
                    .iter()
                    .find(|w| w.role == "W5")
                    .map(|w| w.array_len as u64)
                    .unwrap_or(0)
            ),
        ),
    ]);
    p.rows.push(vec![
        "clock (workloads 1–5)".into(),
        o.clock.describe().into(),
    ]);
    p.rows.push(vec![
        "quota `allow`".into(),
        QuotaKind::Allow.describe().into(),
    ]);
    p.rows.push(vec![
        "quota `deny`".into(),
        QuotaKind::Deny.describe().into(),
    ]);
    s.push_str(&p.markdown());
    s.push('\n');
    for f in &ctx.facts {
        let _ = writeln!(s, "* {f}");
    }
    let _ = writeln!(s, "\n#### In process: decisions/s, median [ns per decision per thread] (funnel ÷ competitor)\n");
    s.push_str(&main_table(ctx).markdown());
    if !ctx.clock_rows.is_empty() {
        let _ = writeln!(
            s,
            "\n#### Each limiter on each clock: ns per decision on a CPU, 1,000 `u64` keys, 1 thread, median (min–max) of alternating rounds\n\n\
             *harness*: the harness's loop (a spawned thread walking a pre-drawn key array); \
             *minimal*: a loop on the calling thread that draws a key below 1,000 and decides it. \
             *real*: the TSC through quanta; *recent*: a time an upkeep thread refreshes every \
             millisecond (funnel `RecentClock`, governor `QuantaUpkeepClock`); *manual*: a frozen \
             counter; *handed in*: funnel's `check_at` with the time read once per 1,024 decisions. \
             Time on a CPU is the thread's (/proc/thread-self/schedstat), so that other work on \
             the machine lengthens the run more than the figures.\n"
        );
        s.push_str(&crate::clocks::decision_table(ctx).markdown());
        let _ = writeln!(s, "\n#### A clock read alone, ns per read on a CPU\n");
        s.push_str(&crate::clocks::read_table(ctx).markdown());
    }
    if !ctx.sketch.is_empty() {
        let _ = writeln!(
            s,
            "\n#### pingora-limits' `Rate` (a count-min sketch per interval) against an exact counter\n\n\
             {} per key per window, {} requests per key on average, keys drawn uniformly, one \
             window; a request is admitted while `observe(key, 1)` is within the limit. Over- \
             and under-admission are counted per key against the exact counter.\n",
            crate::sketch::LIMIT,
            crate::sketch::REQUESTS_PER_KEY
        );
        s.push_str(&crate::sketch::table(ctx).markdown());
    }
    let funnel_tables = funnel_table_table(ctx);
    if !short && !funnel_tables.rows.is_empty() {
        let _ = writeln!(
            s,
            "\n#### funnel's table in each workload (after the prefill, and after all runs of the first thread count)\n"
        );
        s.push_str(&funnel_tables.markdown());
    }
    let prefill = prefill_table(ctx);
    if !short && !prefill.rows.is_empty() {
        let _ = writeln!(
            s,
            "\n#### First request of a key: prefill time per key per thread (key spaces ≥ 100,000; key formatting included)\n"
        );
        s.push_str(&prefill.markdown());
    }
    let churn = churn_table(ctx);
    if !short && !churn.rows.is_empty() {
        let _ = writeln!(s, "\n#### Churn: keys held at the end of one run\n");
        s.push_str(&churn.markdown());
    }
    if !charts.is_empty() {
        let _ = writeln!(s, "\n#### Charts\n");
        for (file, caption) in charts {
            let _ = writeln!(s, "![{caption}]({chart_prefix}{file})\n");
        }
    }
    let attack = attack_table(ctx);
    if !attack.rows.is_empty() {
        let _ = writeln!(
            s,
            "\n#### Attack mix: 90% legitimate Zipf keys, 10% unique-key flood\n"
        );
        s.push_str(&attack.markdown());
    }
    let _ = writeln!(
        s,
        "\n#### Redis-backed limiters (1,000 String keys, the same key stream as hot-1k)\n"
    );
    let redis = redis_table(ctx);
    if redis.rows.is_empty() {
        let _ = writeln!(s, "{}\n", ctx.redis_status);
    } else {
        let _ = writeln!(s, "{}.\n", ctx.redis_status);
        s.push_str(&redis.markdown());
    }
    let cache = crate::fleet_rows::cache_table(ctx);
    if !cache.rows.is_empty() {
        let _ = writeln!(s, "\n#### funnel-redis: what the local deny cache saves\n");
        s.push_str(&cache.markdown());
    }
    let _ = writeln!(s, "\n#### Over-admission under contention\n");
    s.push_str(&over_table(ctx).markdown());
    let _ = writeln!(s, "\n#### Memory per key\n");
    s.push_str(&memory_table(ctx).markdown());
    if !short {
        let _ = writeln!(
            s,
            "\n#### Published Redis and Mutex<HashMap> figures next to ours\n"
        );
        s.push_str(&published_table(ctx).markdown());
    }
    let _ = writeln!(s, "\n#### Where funnel is not clearly ahead in this run\n");
    let weak = weak_spots(ctx);
    if weak.is_empty() {
        let _ = writeln!(
            s,
            "No cell under 1.5×, and no wrong decision in the attack mix."
        );
    }
    for w in weak {
        let _ = writeln!(s, "* {w}");
    }
    if !ctx.warnings.is_empty() || !ctx.errors.is_empty() {
        let _ = writeln!(s, "\n#### Warnings and errors\n");
        for w in &ctx.warnings {
            let _ = writeln!(s, "* warning: {w}");
        }
        for e in &ctx.errors {
            let _ = writeln!(s, "* error: {e}");
        }
    }
    if short {
        // A document of its own: its sections one level under its title.
        s = s.replace("\n#### ", "\n## ");
        let _ = writeln!(
            s,
            "\nEvery configuration with its min and max: the run's `summary.md`; every timed run: \
             `results.csv` and `runs.csv` beside this file."
        );
    } else {
        let _ = writeln!(
            s,
            "\n#### Appendix: every configuration, median with min–max\n"
        );
        s.push_str(&appendix_table(ctx).markdown());
    }
    s
}

/// The date of a run id (`20261127T114045Z` → `2026-11-27`); the id itself when it is not one.
fn run_date(run_id: &str) -> String {
    match run_id.get(..8) {
        Some(d) if d.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{}-{}-{}", &d[..4], &d[4..6], &d[6..8])
        }
        _ => run_id.to_string(),
    }
}
