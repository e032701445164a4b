//! The README's short table of ratios, written from the run it summarises: `readme.md` in the
//! run's directory, which `--publish` puts between the README's markers (`splice`), so the
//! figures there are never copied by hand.

use crate::memory::MemRow;
use crate::numbers::{fmt_int, sig3};
use crate::redis_rows::settings;
use crate::report::{Row, Section};
use crate::tables::{find, main_workloads, ratio, KEY_TYPES, QUOTAS};
use crate::Ctx;

/// The line before the table in README.md.
pub const START: &str = "<!-- funnel-compare:ratios:start -->";
/// The line after it.
pub const END: &str = "<!-- funnel-compare:ratios:end -->";

/// One cell of funnel's ratios to a competitor: the pairs (funnel's row, the competitor's).
type Pairs<'a> = Vec<(Option<&'a Row>, Option<&'a Row>)>;

/// `1.30–1.78×` over the pairs that both ran; `–` when none did.
fn range(pairs: &Pairs<'_>) -> String {
    let ratios: Vec<f64> = pairs.iter().filter_map(|(f, o)| ratio(*f, *o)).collect();
    let Some(lo) = ratios.iter().copied().reduce(f64::min) else {
        return "–".into();
    };
    let hi = ratios.iter().copied().fold(lo, f64::max);
    let num = |x: f64| {
        if x >= 100.0 {
            fmt_int(x.round() as u64)
        } else {
            sig3(x)
        }
    };
    if num(lo) == num(hi) {
        format!("{}×", num(lo))
    } else {
        format!("{}–{}×", num(lo), num(hi))
    }
}

/// funnel against `competitor` in `workload` on `threads` threads, over both key types and
/// both quotas.
fn in_process<'a>(rows: &'a [Row], workload: &str, threads: usize, competitor: &str) -> Pairs<'a> {
    let mut pairs = Vec::new();
    for kt in KEY_TYPES {
        for q in QUOTAS {
            let get = |c: &str| find(rows, Section::InProc, workload, kt, q, threads, 1, c);
            pairs.push((get("funnel"), get(competitor)));
        }
    }
    pairs
}

/// funnel on `conns` threads against the GCRA script over `conns` connections with pipelines of
/// `pipe`, 1,000 `String` keys, both quotas.
fn redis(rows: &[Row], conns: usize, pipe: usize) -> Pairs<'_> {
    QUOTAS
        .iter()
        .map(|q| {
            let funnel = find(
                rows,
                Section::InProc,
                "hot-1k",
                "String",
                q,
                conns,
                1,
                "funnel",
            );
            let script = find(
                rows,
                Section::Redis,
                "hot-1k",
                "String",
                q,
                conns,
                pipe,
                "redis-gcra",
            );
            (funnel, script)
        })
        .collect()
}

/// Bytes per key of `store` with `key_type` keys, and how many keys were measured.
fn memory<'a>(rows: &'a [MemRow], store: &str, key_type: &str) -> Option<&'a MemRow> {
    rows.iter()
        .find(|m| m.store == store && m.key_type == key_type)
}

/// The table, in Markdown.
pub fn table(ctx: &Ctx) -> String {
    let rows = &ctx.rows;
    let workloads = main_workloads(ctx);
    let name = |role: &str| {
        workloads
            .iter()
            .find(|w| w.1 == role)
            .map(|w| w.0.clone())
            .unwrap_or_default()
    };
    let (zipf, uniform) = (name("W3"), name("W4"));
    let mut out = String::from("| funnel against | workload | funnel is |\n|---|---|--:|\n");
    let mut row = |who: &str, workload: String, cell: String| {
        out.push_str(&format!("| {who} | {workload} | {cell} |\n"));
    };
    row(
        "a CL.THROTTLE-style GCRA Lua script in Redis, one connection",
        "1,000 `String` keys".into(),
        format!("{} as fast", range(&redis(rows, 1, 1))),
    );
    if let Some(&(conns, pipe)) = settings(ctx.opts.max_threads()).last() {
        if pipe > 1 {
            row(
                &format!("the same script, {conns} connections × pipelines of {pipe}"),
                "1,000 `String` keys".into(),
                range(&redis(rows, conns, pipe)),
            );
        }
    }
    let ahash = "governor-keyed-ahash";
    row(
        "governor's keyed limiter with ahash",
        "1,000 keys".into(),
        range(&in_process(rows, "hot-1k", 1, ahash)),
    );
    row(
        "a `Mutex<HashMap>` of funnels, one thread (two threads)",
        "1,000 keys".into(),
        format!(
            "{} ({})",
            range(&in_process(rows, "hot-1k", 1, "mutex-map")),
            range(&in_process(rows, "hot-1k", 2, "mutex-map"))
        ),
    );
    let mut far = in_process(rows, &zipf, 1, ahash);
    far.extend(in_process(rows, &uniform, 1, ahash));
    row(
        "governor's keyed limiter with ahash",
        format!("{zipf} and {uniform} keys"),
        range(&far),
    );
    let batch: Pairs<'_> = KEY_TYPES
        .iter()
        .flat_map(|kt| QUOTAS.iter().map(move |q| (kt, q)))
        .map(|(kt, q)| {
            let get = |c: &str| find(rows, Section::InProc, &uniform, kt, q, 1, 1, c);
            (get("funnel-batch"), get(ahash))
        })
        .collect();
    row(
        "the same, funnel through `check_batch`",
        format!("{uniform} keys"),
        range(&batch),
    );
    row(
        "pingora-limits' `Rate` (an approximate count-min sketch) at its default size",
        format!("1,000 keys / {uniform} keys"),
        format!(
            "{} / {}",
            range(&in_process(rows, "hot-1k", 1, "pingora")),
            range(&in_process(rows, &uniform, 1, "pingora"))
        ),
    );
    let per_key = |store: &str, kt: &str| {
        memory(&ctx.memory, store, kt).map(|m| format!("{:.1}", m.bytes_per_key))
    };
    if let (Some(fu), Some(fs), Some(gu), Some(gs)) = (
        per_key("funnel", "u64"),
        per_key("funnel", "String"),
        per_key("governor-keyed", "u64"),
        per_key("governor-keyed", "String"),
    ) {
        let keys = memory(&ctx.memory, "funnel", "u64").map_or(0, |m| m.keys);
        row(
            "governor's keyed limiter: memory per key (process RSS)",
            format!("{} `u64` / `String` keys", fmt_int(keys)),
            format!("{fu} / {fs} B against {gu} / {gs} B"),
        );
    }
    out
}

/// `readme` with the text between its markers replaced by `table`.
pub fn splice(readme: &str, table: &str) -> Result<String, String> {
    let start = readme
        .find(START)
        .ok_or_else(|| format!("README.md has no {START} line"))?;
    let end = readme
        .find(END)
        .filter(|end| *end > start)
        .ok_or_else(|| format!("README.md has no {END} line after {START}"))?;
    Ok(format!(
        "{}{START}\n{}{}",
        &readme[..start],
        table,
        &readme[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_replaces_only_what_is_between_the_markers() {
        let readme = format!("intro\n{START}\n| old |\n{END}\nafter\n");
        let out = splice(&readme, "| new |\n").unwrap();
        assert_eq!(out, format!("intro\n{START}\n| new |\n{END}\nafter\n"));
        assert!(splice("no markers", "| new |\n").is_err());
        assert!(splice(&format!("{END}\n{START}\n"), "x").is_err());
    }
}
