//! Where funnel is not clearly ahead in a run: the cells the report lists under that heading.

use crate::numbers::{fmt_int, fmt_rate, fmt_ratio};
use crate::report::{Row, Section};
use crate::tables::{find, ratio};
use crate::Ctx;

/// Cells where funnel is not clearly ahead: slower than a competitor, or within the machine's
/// noise (under 1.5×).
pub fn weak_spots(ctx: &Ctx) -> Vec<String> {
    let mut out = Vec::new();
    for r in ctx.rows.iter().filter(|r| {
        matches!(r.section, Section::InProc | Section::Sweep) && !r.competitor.starts_with("funnel")
    }) {
        // The row of `competitor` in the same cell.
        let same_cell = |competitor: &str| {
            find(
                &ctx.rows,
                r.section,
                &r.workload,
                r.key_type,
                &r.quota,
                r.threads,
                1,
                competitor,
            )
        };
        let f = same_cell("funnel");
        // Against governor's direct limiter, also its like-for-like: funnel's `Funnel`.
        let direct = (r.competitor == "governor-direct")
            .then(|| {
                let d = same_cell("funnel-direct")?;
                Some(format!(
                    "; funnel-direct (single-key `Funnel`) {}/s ({})",
                    fmt_rate(d.median()),
                    fmt_ratio_near_one(ratio(Some(d), Some(r))?)
                ))
            })
            .flatten()
            .unwrap_or_default();
        if let Some(x) = ratio(f, Some(r)) {
            if x < 1.5 {
                out.push(format!(
                    "{} {} {} {}t: funnel {}/s vs {} {}/s ({}){}{direct}",
                    r.workload,
                    r.key_type,
                    r.quota,
                    r.threads,
                    fmt_rate(f.map(Row::median).unwrap_or(0.0)),
                    r.competitor,
                    fmt_rate(r.median()),
                    fmt_ratio_near_one(x),
                    if x < 1.0 {
                        " — funnel slower"
                    } else {
                        " — within noise"
                    }
                ));
            }
        }
    }
    for r in ctx
        .rows
        .iter()
        .filter(|r| r.section == Section::Attack && r.competitor.starts_with("funnel"))
    {
        let (legit, wa, wd) = r.attack_errors();
        if wa + wd > 0 {
            out.push(format!(
                "attack {} {}t {}: {} legitimate requests wrongly admitted and {} wrongly denied of {} ({:.3}%)",
                r.key_type,
                r.threads,
                r.competitor,
                fmt_int(wa),
                fmt_int(wd),
                fmt_int(legit),
                100.0 * (wa + wd) as f64 / legit.max(1) as f64
            ));
        }
    }
    out
}

/// A ratio, with a third decimal within half a percent of 1, where two would round a cell
/// below 1 up to `1.00×`.
fn fmt_ratio_near_one(x: f64) -> String {
    if (x - 1.0).abs() < 0.005 {
        format!("{x:.3}×")
    } else {
        fmt_ratio(x)
    }
}
