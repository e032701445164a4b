//! Memory per key. funnel's table size is exact (`Limiter::memory_bytes() / capacity()`); for
//! governor and the `Mutex<HashMap>` funnel the harness measures it: a child process (this same
//! binary, `--child-memory <store> <n>`) reads its resident set size (VmRSS in
//! /proc/self/status) before building the limiter and after inserting `n` keys, one request
//! each; bytes per key = growth / n. The peak (VmHWM) is reported too, since a growing hash
//! table briefly holds its old and new arrays.

use std::fmt::Write as _;
use std::process::Command;

use funnel::Limiter;
use governor::RateLimiter;

use crate::inproc::capacity_for;
use crate::limiters::QuotaKind;
use crate::numbers::fmt_int;
use crate::Ctx;
use funnel_testkit::mutex_map::MutexMapLimiter;

#[derive(Clone, Debug)]
pub struct MemRow {
    pub store: String,
    pub key_type: String,
    pub keys: u64,
    pub bytes_per_key: f64,
    /// Peak growth per key, where measured.
    pub peak_per_key: Option<f64>,
    pub method: String,
}

/// The child-measured stores: (name, key type).
const PROBES: [(&str, &str); 7] = [
    ("funnel", "u64"),
    ("funnel", "String"),
    ("governor-keyed", "u64"),
    ("governor-keyed-ahash", "u64"),
    ("governor-keyed", "String"),
    ("mutex-map", "u64"),
    ("mutex-map", "String"),
];

pub fn sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![1_000_000]
    } else {
        vec![1_000_000, 10_000_000]
    }
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    sizes(o.quick)
        .iter()
        .map(|&n| n as f64 * 3.2e-6)
        .sum::<f64>()
        + 0.5
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    let sizes = sizes(ctx.opts.quick);
    let largest = *sizes.last().unwrap_or(&1_000_000);
    // funnel's own accounting, at the capacity the harness gives the largest key space.
    let lim = Limiter::<u64>::builder(QuotaKind::Deny.funnel())
        .capacity(capacity_for(largest))
        .build()
        .map_err(|e| format!("funnel: {e}"))?;
    let (bytes, slots) = (lim.memory_bytes() as f64, lim.capacity() as u64);
    drop(lim);
    ctx.memory.push(MemRow {
        store: "funnel (per slot)".into(),
        key_type: "any".into(),
        keys: slots,
        bytes_per_key: bytes / slots as f64,
        peak_per_key: None,
        method: format!(
            "Limiter::memory_bytes() / capacity() = {} B / {} slots",
            fmt_int(bytes as u64),
            fmt_int(slots)
        ),
    });
    ctx.memory.push(MemRow {
        store: "funnel (per key held, at the harness's capacity)".into(),
        key_type: "any".into(),
        keys: largest,
        bytes_per_key: bytes / largest as f64,
        peak_per_key: None,
        method: format!(
            "Limiter::memory_bytes() / {} keys, capacity {} slots",
            fmt_int(largest),
            fmt_int(slots)
        ),
    });
    // /proc/self/exe runs this binary even if it was rebuilt (replaced on disk) meanwhile.
    let exe = match std::path::Path::new("/proc/self/exe") {
        p if p.exists() => p.to_path_buf(),
        _ => std::env::current_exe()
            .map_err(|e| format!("memory probe: finding this binary: {e}"))?,
    };
    for &n in &sizes {
        for (store, key_type) in PROBES {
            ctx.progress.begin(format!(
                "memory: {store} {key_type}, {} keys (child process)",
                fmt_int(n)
            ));
            let variant = format!("{store}:{key_type}");
            let out = Command::new(&exe)
                .args(["--child-memory", &variant, &n.to_string()])
                .output()
                .map_err(|e| format!("memory probe {variant}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "memory probe {variant} {n}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let nums: Vec<u64> = text
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [before, after, peak] = nums[..] else {
                return Err(format!(
                    "memory probe {variant}: unexpected output {text:?}"
                ));
            };
            ctx.memory.push(MemRow {
                store: store.into(),
                key_type: key_type.into(),
                keys: n,
                bytes_per_key: after.saturating_sub(before) as f64 / n as f64,
                peak_per_key: Some(peak.saturating_sub(before) as f64 / n as f64),
                method: format!(
                    "child process RSS growth: VmRSS {} → {} KiB, VmHWM {} KiB",
                    fmt_int(before / 1024),
                    fmt_int(after / 1024),
                    fmt_int(peak / 1024)
                ),
            });
            ctx.progress
                .advance(n as f64 * 3.2e-6 / PROBES.len() as f64);
        }
    }
    ctx.memory.push(MemRow {
        store: "nginx limit_req (documented)".into(),
        key_type: "IPv4 address".into(),
        keys: 0,
        bytes_per_key: 128.0,
        peak_per_key: None,
        method: "nginx docs, ngx_http_limit_req_module: \"The stored state always occupies 64 bytes on 32-bit platforms and 128 bytes on 64-bit platforms\"".into(),
    });
    ctx.progress.advance(0.5);
    Ok(())
}

/// `(VmRSS, VmHWM)` in bytes, or why not.
fn rss() -> Result<(u64, u64), String> {
    funnel_testkit::memory::rss_bytes()
        .ok_or_else(|| "/proc/self/status has no VmRSS/VmHWM (not Linux?)".to_string())
}

/// The child side: prints `rss_before rss_after peak` in bytes.
pub fn child(variant: &str, n: u64) -> Result<(), String> {
    let (before, _) = rss()?;
    let mut buf = String::new();
    let gq = QuotaKind::Deny.governor();
    let fq = QuotaKind::Deny.funnel();
    let (cap, t) = QuotaKind::Deny.mutex_map();
    // Each arm keeps its limiter alive until the measurement is printed.
    let hold: Box<dyn std::any::Any> = match variant {
        "funnel:u64" => {
            let l = Limiter::<u64>::builder(fq)
                .capacity(capacity_for(n))
                .build()
                .map_err(|e| e.to_string())?;
            for i in 0..n {
                let _ = l.check(&i);
            }
            Box::new(l)
        }
        "funnel:String" => {
            let l = Limiter::<str>::builder(fq)
                .capacity(capacity_for(n))
                .build()
                .map_err(|e| e.to_string())?;
            for i in 0..n {
                let _ = l.check(user_key(&mut buf, i));
            }
            Box::new(l)
        }
        "governor-keyed:u64" => {
            let l = RateLimiter::<u64, _, _>::keyed(gq);
            for i in 0..n {
                let _ = l.check_key(&i);
            }
            Box::new(l)
        }
        "governor-keyed-ahash:u64" => {
            let l = RateLimiter::<u64, _, _>::dashmap_with_hasher(gq, ahash::RandomState::new());
            for i in 0..n {
                let _ = l.check_key(&i);
            }
            Box::new(l)
        }
        "governor-keyed:String" => {
            let l = RateLimiter::<String, _, _>::keyed(gq);
            for i in 0..n {
                let _ = l.check_key(user_key(&mut buf, i));
            }
            Box::new(l)
        }
        "mutex-map:u64" => {
            let l = MutexMapLimiter::<u64, ahash::RandomState>::new(cap, t);
            for i in 0..n {
                l.check(&i, 1);
            }
            Box::new(l)
        }
        "mutex-map:String" => {
            let l = MutexMapLimiter::<String, ahash::RandomState>::new(cap, t);
            for i in 0..n {
                l.check(user_key(&mut buf, i), 1);
            }
            Box::new(l)
        }
        other => return Err(format!("unknown store {other:?}")),
    };
    let (after, peak) = rss()?;
    println!("{before} {after} {peak}");
    drop(hold);
    Ok(())
}

/// `user:<i>` in a reused buffer (the map clones it when it inserts).
fn user_key(buf: &mut String, i: u64) -> &String {
    buf.clear();
    let _ = write!(buf, "user:{i}");
    buf
}
