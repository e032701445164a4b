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
    "grep -m1 'model name' /proc/cpuinfo; grep -m1 'cpu family' /proc/cpuinfo; \
grep -m1 '^model[[:space:]]' /proc/cpuinfo; cat /sys/devices/system/cpu/cpu0/cache/index3/size; nproc; \
grep MemTotal /proc/meminfo; grep PRETTY_NAME /etc/os-release; uname -r; rustc -V; \
redis-server --version; cat /proc/loadavg";

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

/// The value of the first line of `cpuinfo` whose field name is exactly `field`.
fn cpuinfo_field(cpuinfo: &str, field: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        (name.trim() == field).then(|| value.trim().to_string())
    })
}

/// The CPU's name, with its family and model numbers and its L3 size where the system gives
/// them: guests of one cloud can share a name ("AMD EPYC") and differ in all of these, which
/// change every rate of a run.
fn cpu_description(cpuinfo: &str, l3: &str) -> String {
    let name = cpuinfo_field(cpuinfo, "model name").unwrap_or_else(|| "unknown".into());
    let mut details = Vec::new();
    if let (Some(family), Some(model)) = (
        cpuinfo_field(cpuinfo, "cpu family"),
        cpuinfo_field(cpuinfo, "model"),
    ) {
        details.push(format!("family {family} model {model}"));
    }
    let l3 = l3.trim();
    if !l3.is_empty() {
        details.push(format!("L3 {l3}"));
    }
    if details.is_empty() {
        name
    } else {
        format!("{name} ({})", details.join(", "))
    }
}

pub fn detect() -> Machine {
    let cpu = cpu_description(
        &read("/proc/cpuinfo"),
        &read("/sys/devices/system/cpu/cpu0/cache/index3/size"),
    );
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
    let wanted = [
        "governor",
        "dashmap",
        "quanta",
        "ahash",
        "pingora-limits",
        "redis",
    ];
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_named_with_its_family_model_and_l3() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
                       model\t\t: 17\nmodel name\t: AMD EPYC\nstepping\t: 1\n";
        assert_eq!(
            cpu_description(cpuinfo, "32768K\n"),
            "AMD EPYC (family 25 model 17, L3 32768K)"
        );
        assert_eq!(
            cpu_description(cpuinfo, ""),
            "AMD EPYC (family 25 model 17)"
        );
        assert_eq!(cpu_description("model name : X\n", ""), "X");
        assert_eq!(cpu_description("", ""), "unknown");
    }
}
