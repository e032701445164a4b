//! The SVG charts: decisions/s per workload and competitor, decisions/s against key-space size,
//! and in process against Redis on the 1,000-key workload.

use crate::inproc::Comp;
use crate::report::Row;
use crate::report::Section;
use crate::svg::{self, Bar};
use crate::tables::{find, main_workloads, KEY_TYPES, QUOTAS};
use crate::Ctx;

/// Writes the SVG charts into `dir`; returns (file name, caption).
pub fn charts(ctx: &Ctx, dir: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let mut made = Vec::new();
    let comps: Vec<&str> = Comp::IN_TABLE.iter().map(|c| c.label()).collect();
    let bar = |r: &Row| Bar {
        median: r.median(),
        min: r.min(),
        max: r.max(),
    };
    let wls = main_workloads(ctx);
    for kt in KEY_TYPES {
        for q in QUOTAS {
            for &th in &ctx.opts.threads {
                let series: Vec<(String, Vec<Option<Bar>>)> = comps
                    .iter()
                    .map(|c| {
                        let bars = wls
                            .iter()
                            .map(|(wl, _)| {
                                find(&ctx.rows, Section::InProc, wl, kt, q, th, 1, c).map(bar)
                            })
                            .collect();
                        (c.to_string(), bars)
                    })
                    // A competitor with no bar here (governor-direct with String keys) leaves
                    // no gap and no legend entry.
                    .filter(|(_, bars): &(String, Vec<Option<Bar>>)| {
                        bars.iter().any(Option::is_some)
                    })
                    .collect();
                if series.is_empty() {
                    continue;
                }
                let name = format!("throughput-{}-{q}-{th}t.svg", kt.to_ascii_lowercase());
                let title = format!(
                    "Decisions/s by workload: {kt} keys, {q} quota, {th} thread{}",
                    if th == 1 { "" } else { "s" }
                );
                let groups: Vec<String> = wls.iter().map(|(w, _)| w.clone()).collect();
                let text = svg::grouped_bars(
                    &title,
                    "decisions/s (log scale; whisker = min–max)",
                    &groups,
                    &series,
                );
                crate::report::write(dir, &name, &text?)?;
                made.push((name, title));
            }
        }
    }
    // Decisions/s against key-space size: uniform draws over 1 key (hot-1) up to 10M, u64 keys.
    for q in QUOTAS {
        for &th in &ctx.opts.threads {
            let mut series = Vec::new();
            // The direct limiters have no key space.
            for c in comps
                .iter()
                .filter(|c| !matches!(**c, "funnel-direct" | "governor-direct"))
            {
                let pts: Vec<(f64, Bar)> = ctx
                    .rows
                    .iter()
                    .filter(|r| {
                        matches!(r.section, Section::InProc | Section::Sweep)
                            && (r.workload.starts_with("uniform-")
                                || r.workload.starts_with("hot-"))
                            && r.key_type == "u64"
                            && r.quota == q
                            && r.threads == th
                            && r.competitor == *c
                    })
                    .map(|r| (r.key_space as f64, bar(r)))
                    .collect();
                let mut pts = pts;
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push((c.to_string(), pts));
            }
            if series.iter().all(|(_, p)| p.len() < 2) {
                continue;
            }
            let name = format!("keyspace-{q}-{th}t.svg");
            let title = format!(
                "Decisions/s against key-space size (uniform, u64 keys, {q} quota, {th} thread{})",
                if th == 1 { "" } else { "s" }
            );
            let text = svg::lines(
                &title,
                "distinct keys (log scale)",
                "decisions/s (log scale)",
                &series,
            );
            crate::report::write(dir, &name, &text?)?;
            made.push((name, title));
        }
    }
    // In process against Redis on the 1,000-key workload.
    for q in QUOTAS {
        let mut bars = Vec::new();
        for &th in &ctx.opts.threads {
            for c in comps.iter().filter(|c| **c != "governor-direct") {
                if let Some(r) = find(&ctx.rows, Section::InProc, "hot-1k", "String", q, th, 1, c) {
                    bars.push((
                        format!("{c}, {th} thread{}", if th == 1 { "" } else { "s" }),
                        bar(r),
                    ));
                }
            }
        }
        let redis_rows: Vec<&Row> = ctx
            .rows
            .iter()
            .filter(|r| r.section == Section::Redis && r.quota == q)
            .collect();
        if redis_rows.is_empty() {
            continue;
        }
        for r in redis_rows {
            let label = if r.pipeline > 1 {
                format!(
                    "{}, {} conns × pipeline {}",
                    r.competitor, r.threads, r.pipeline
                )
            } else {
                format!(
                    "{}, {} conn{}",
                    r.competitor,
                    r.threads,
                    if r.threads == 1 { "" } else { "s" }
                )
            };
            bars.push((label, bar(r)));
        }
        let name = format!("redis-vs-inproc-{q}.svg");
        let title = format!("1,000 String keys, {q} quota: in process vs through Redis");
        let text = svg::horizontal_bars(&title, "decisions/s (log scale)", &bars);
        crate::report::write(dir, &name, &text?)?;
        made.push((name, title));
    }
    Ok(made)
}
