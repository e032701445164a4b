//! The machine and versions, read the way the report says they were read.

use std::process::Command;

#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory: String,
    pub os: String,
    pub kernel: String,
    pub rustc: String,
    pub load_start: String,
    pub crates: Vec<(String, String)>,
}

/// The shell commands that give the same facts, printed in the report.
pub const COMMANDS: &str =
    "grep -m1 'model name' /proc/cpuinfo; nproc; grep MemTotal /proc/meminfo; \
grep PRETTY_NAME /etc/os-release; uname -r; rustc -V; redis-server --version; cat /proc/loadavg";

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn command(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub fn load_avg() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn detect() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|s| s.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into());
    Machine {
        cpu,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory,
        os,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        rustc: command("rustc", &["-V"]),
        load_start: load_avg(),
        crates: crate_versions(),
    }
}

/// Versions of the competitors' crates, from the repository's Cargo.lock.
fn crate_versions() -> Vec<(String, String)> {
    let lock = read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"));
    let wanted = ["governor", "dashmap", "quanta", "ahash", "redis"];
    let mut out = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            if wanted.contains(&n.as_str()) {
                out.push((n, v.trim_matches('"').to_string()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
