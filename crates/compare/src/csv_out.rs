//! The CSV files (`csv` + serde): `results.csv` (one record per configuration), `runs.csv` (one
//! per timed run) and `memory.csv` (bytes per key, and over-admission counts).

use std::path::Path;

use serde::Serialize;

use crate::report::{Row, Section};
use crate::Ctx;

#[derive(Serialize)]
struct ResultRecord<'a> {
    section: &'static str,
    workload: &'a str,
    key_space: u64,
    key_type: &'a str,
    quota: &'a str,
    threads: usize,
    pipeline: usize,
    competitor: &'a str,
    clock: &'a str,
    capacity: &'a str,
    runs: usize,
    median_decisions_per_s: u64,
    min_decisions_per_s: u64,
    max_decisions_per_s: u64,
    ns_per_decision_per_thread: f64,
    allowed_fraction: f64,
    cpu_share: f64,
    median_decisions_per_cpu_s: u64,
    /// Only in the attack mix: legitimate requests, and the decisions on them that differ from
    /// an unbounded reference.
    legit_requests: Option<u64>,
    wrongly_admitted: Option<u64>,
    wrongly_denied: Option<u64>,
    note: &'a str,
}

#[derive(Serialize)]
struct RunRecord<'a> {
    section: &'static str,
    workload: &'a str,
    key_type: &'a str,
    quota: &'a str,
    threads: usize,
    pipeline: usize,
    competitor: &'a str,
    run: usize,
    decisions: u64,
    allowed: u64,
    elapsed_s: f64,
    decisions_per_s: u64,
    cpu_share: f64,
}

#[derive(Serialize)]
struct MemoryRecord<'a> {
    store: String,
    key_type: &'a str,
    keys: Option<u64>,
    bytes_per_key: Option<f64>,
    peak_bytes_per_key: Option<f64>,
    admitted_over_limit: Option<u64>,
    method: &'a str,
}

fn writer(dir: &Path, name: &str) -> Result<csv::Writer<std::fs::File>, String> {
    let path = dir.join(name);
    csv::Writer::from_path(&path).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn done(mut w: csv::Writer<std::fs::File>, name: &str) -> Result<(), String> {
    w.flush().map_err(|e| format!("writing {name}: {e}"))
}

/// Rounds a rate to whole decisions per second (the CSV does not need sub-unit digits).
fn whole(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

/// Rounds to `digits` decimals, so the CSV stays readable.
fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Writes `results.csv` and `runs.csv`.
pub fn write_results(dir: &Path, rows: &[Row]) -> Result<(), String> {
    let mut results = writer(dir, "results.csv")?;
    let mut runs = writer(dir, "runs.csv")?;
    for r in rows {
        let attack = r.section == Section::Attack;
        let (legit, wa, wd) = r.attack_errors();
        results
            .serialize(ResultRecord {
                section: r.section.label(),
                workload: &r.workload,
                key_space: r.key_space,
                key_type: r.key_type,
                quota: &r.quota,
                threads: r.threads,
                pipeline: r.pipeline,
                competitor: &r.competitor,
                clock: &r.clock,
                capacity: &r.capacity,
                runs: r.runs.len(),
                median_decisions_per_s: whole(r.median()),
                min_decisions_per_s: whole(r.min()),
                max_decisions_per_s: whole(r.max()),
                ns_per_decision_per_thread: round(r.ns_per_decision(), 2),
                allowed_fraction: round(r.allowed_fraction(), 6),
                cpu_share: round(r.cpu_share(), 3),
                median_decisions_per_cpu_s: whole(r.median_per_cpu()),
                legit_requests: attack.then_some(legit),
                wrongly_admitted: attack.then_some(wa),
                wrongly_denied: attack.then_some(wd),
                note: &r.note,
            })
            .map_err(|e| format!("writing results.csv: {e}"))?;
        for (i, run) in r.runs.iter().enumerate() {
            runs.serialize(RunRecord {
                section: r.section.label(),
                workload: &r.workload,
                key_type: r.key_type,
                quota: &r.quota,
                threads: r.threads,
                pipeline: r.pipeline,
                competitor: &r.competitor,
                run: i + 1,
                decisions: run.decisions,
                allowed: run.allowed,
                elapsed_s: round(run.elapsed.as_secs_f64(), 6),
                decisions_per_s: whole(run.per_sec()),
                cpu_share: round(run.cpu_share, 3),
            })
            .map_err(|e| format!("writing runs.csv: {e}"))?;
        }
    }
    done(results, "results.csv")?;
    done(runs, "runs.csv")
}

/// Writes `memory.csv`: bytes per key of each store, then the over-admission counts.
pub fn write_memory(dir: &Path, ctx: &Ctx) -> Result<(), String> {
    let mut w = writer(dir, "memory.csv")?;
    for m in &ctx.memory {
        w.serialize(MemoryRecord {
            store: m.store.clone(),
            key_type: &m.key_type,
            keys: Some(m.keys),
            bytes_per_key: Some(round(m.bytes_per_key, 2)),
            peak_bytes_per_key: m.peak_per_key.map(|p| round(p, 2)),
            admitted_over_limit: None,
            method: &m.method,
        })
        .map_err(|e| format!("writing memory.csv: {e}"))?;
    }
    for o in &ctx.over {
        w.serialize(MemoryRecord {
            store: format!("over-admission {}", o.who),
            key_type: "",
            keys: None,
            bytes_per_key: None,
            peak_bytes_per_key: None,
            admitted_over_limit: Some(o.admitted_over_limit),
            method: &o.method,
        })
        .map_err(|e| format!("writing memory.csv: {e}"))?;
    }
    done(w, "memory.csv")
}
