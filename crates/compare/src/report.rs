//! Results: one [`Row`] per configuration (all its runs), medians with min and max. Numbers
//! are written by `numbers.rs`.

use std::path::Path;

use crate::runner::Run;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Workloads 1–5, the main table.
    InProc,
    /// The key-space sweep (uniform, u64), for the key-space chart.
    Sweep,
    /// Workload 6.
    Attack,
    Redis,
}

impl Section {
    pub fn label(self) -> &'static str {
        match self {
            Section::InProc => "inproc",
            Section::Sweep => "sweep",
            Section::Attack => "attack",
            Section::Redis => "redis",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub section: Section,
    pub workload: String,
    /// Distinct keys the workload draws from (0: every key new).
    pub key_space: u64,
    pub key_type: &'static str,
    pub quota: String,
    pub threads: usize,
    pub pipeline: usize,
    pub competitor: String,
    pub clock: String,
    pub capacity: String,
    pub runs: Vec<Run>,
    pub note: String,
    /// Wall time of the prefill (one request for every key of the key space), and its threads.
    pub prefill: Option<(f64, usize)>,
    /// funnel's table after the prefill and after the last run.
    pub table_prefill: Option<TableState>,
    pub table_end: Option<TableState>,
    /// Keys an unbounded competitor held after the last run (churn).
    pub held_end: Option<usize>,
}

/// A snapshot of funnel's table.
#[derive(Clone, Copy, Debug)]
pub struct TableState {
    pub slots: usize,
    pub held: usize,
    pub forced: u64,
    pub recovered: u64,
    /// Whether the kernel took the advice to back the table with huge pages (`Stats::huge_pages`:
    /// by default a fixed table of 8 MiB or more asks; advice taken, not pages in use).
    pub huge_pages: bool,
}

impl Row {
    fn rates(&self) -> Vec<f64> {
        let mut r: Vec<f64> = self.runs.iter().map(Run::per_sec).collect();
        r.sort_by(f64::total_cmp);
        r
    }

    pub fn median(&self) -> f64 {
        median(&self.rates())
    }

    pub fn min(&self) -> f64 {
        self.rates().first().copied().unwrap_or(0.0)
    }

    pub fn max(&self) -> f64 {
        self.rates().last().copied().unwrap_or(0.0)
    }

    /// Wall time per decision on each thread (connection), at the median rate.
    pub fn ns_per_decision(&self) -> f64 {
        let m = self.median();
        if m > 0.0 {
            self.threads as f64 * 1e9 / m
        } else {
            f64::NAN
        }
    }

    pub fn allowed_fraction(&self) -> f64 {
        let d: u64 = self.runs.iter().map(|r| r.decisions).sum();
        let a: u64 = self.runs.iter().map(|r| r.allowed).sum();
        if d == 0 {
            f64::NAN
        } else {
            a as f64 / d as f64
        }
    }

    /// Median over runs of decisions/s ÷ CPU share: an estimate of the rate had the threads kept
    /// their CPUs (NaN when the share was not measured).
    pub fn median_per_cpu(&self) -> f64 {
        let mut v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.cpu_share.is_finite() && r.cpu_share > 0.0)
            .map(|r| r.per_sec() / r.cpu_share)
            .collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            f64::NAN
        } else {
            median(&v)
        }
    }

    /// Median share of thread-time on a CPU over the runs (NaN when not measured).
    pub fn cpu_share(&self) -> f64 {
        let mut v: Vec<f64> = self
            .runs
            .iter()
            .map(|r| r.cpu_share)
            .filter(|s| s.is_finite())
            .collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            f64::NAN
        } else {
            median(&v)
        }
    }

    /// Attack mix: (legitimate requests, wrongly admitted, wrongly denied), medians over runs.
    pub fn attack_errors(&self) -> (u64, u64, u64) {
        let med = |f: fn(&Run) -> u64| {
            let mut v: Vec<u64> = self.runs.iter().map(f).collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        (
            med(|r| r.legit),
            med(|r| r.wrongly_admitted),
            med(|r| r.wrongly_denied),
        )
    }
}

pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}
