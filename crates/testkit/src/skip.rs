//! Skipping a test that needs a tool from outside Cargo, visibly: one rule and one switch for
//! every such tool (redis-server, the redis-cell module, nginx, Caddy, wrk, Python packages).
//!
//! The standard test harness has no skipped state: a test that returns early is reported as
//! passed. So a skipped test says so itself: a line naming the test, the missing tool and how
//! to get it, written to the process's stderr directly (the harness captures only
//! `print!`/`eprint!` output), and a count printed when the test process exits, after the
//! harness's own summary. Under `FUNNEL_REQUIRE_TOOLS=1` (which CI sets) nothing is skipped:
//! a missing tool panics.
//!
//! ```no_run
//! # fn a_test() {
//! let Some(nginx) = funnel_testkit::skip::program("nginx", "apt-get install nginx") else {
//!     return; // skipped, and said so
//! };
//! # let _ = nginx;
//! # }
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// The environment variable that turns a skip into a failure.
pub const REQUIRE: &str = "FUNNEL_REQUIRE_TOOLS";

/// The tests this process skipped.
static SKIPPED: AtomicUsize = AtomicUsize::new(0);
/// Why they were skipped (the first reason given; one program per test binary in practice).
static REASON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
static SUMMARY: Once = Once::new();

/// Whether [`REQUIRE`] is set to anything but empty or `0`.
pub fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Skips the running test (the caller returns at once) because of `reason`: prints that the
/// test, named by its thread as the harness names it, is skipped and why, and counts it for
/// the summary printed at exit.
///
/// # Panics
///
/// Under [`REQUIRE`], with `reason`: a run that must not skip fails instead.
pub fn skip(reason: &str) {
    assert!(!required(), "{REQUIRE} is set and {reason}");
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    // Relaxed: the count is read once, at exit, after the harness has collected every test's
    // result through its channel, which orders every increment before the read.
    SKIPPED.fetch_add(1, Ordering::Relaxed);
    let _ = REASON.set(reason.to_owned());
    SUMMARY.call_once(|| {
        #[cfg(unix)]
        // SAFETY: `summary` is an `extern "C" fn()` that neither unwinds (it only writes to
        // stderr and ignores the result) nor touches anything torn down at exit except
        // stderr, which std leaves usable and unbuffered.
        unsafe {
            libc::atexit(summary);
        }
    });
    // One write per line, so that the line stays whole among the harness's output.
    let line = format!("SKIPPED {test}: {reason}; {REQUIRE}=1 fails instead\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The program `name` on `PATH`, or `None` after [`skip`]ping the running test with a notice
/// that says how to get it (`how`, e.g. `"apt-get install nginx"`).
///
/// # Panics
///
/// Under [`REQUIRE`], when `name` is not on `PATH`.
pub fn program(name: &str, how: &str) -> Option<PathBuf> {
    let found = on_path(name);
    if found.is_none() {
        skip(&format!("`{name}` is not on PATH ({how})"));
    }
    found
}

/// Whether `python3` can import every module of `modules`; when it cannot, the running test is
/// [`skip`]ped with a notice that says how to get them (`how`, e.g.
/// `"pip install envoy-data-plane grpcio"`).
///
/// # Panics
///
/// Under [`REQUIRE`], when `python3` or a module is missing.
pub fn python_modules(modules: &[&str], how: &str) -> bool {
    let Some(python) = on_path("python3") else {
        skip(&format!(
            "`python3` is not on PATH (apt-get install python3; then {how})"
        ));
        return false;
    };
    let probe = std::process::Command::new(python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output();
    match probe {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("").trim().to_owned();
            skip(&format!(
                "python3 cannot import {} ({last}; {how})",
                modules.join(", ")
            ));
            false
        }
        Err(e) => {
            skip(&format!("python3 does not run ({e}; {how})"));
            false
        }
    }
}

/// `name` found in a directory of `PATH` as an executable file.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|cand| is_executable(cand))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// The count of skipped tests, printed when the test process exits.
#[cfg(unix)]
extern "C" fn summary() {
    let n = SKIPPED.load(Ordering::Relaxed);
    let reason = REASON.get().map_or("", String::as_str);
    let binary = std::env::args()
        .next()
        .and_then(|a| {
            let stem = std::path::Path::new(&a).file_stem()?.to_str()?.to_owned();
            // Cargo names test binaries `<target>-<hash>`.
            Some(
                stem.rsplit_once('-')
                    .map_or(stem.clone(), |(t, _)| t.to_owned()),
            )
        })
        .unwrap_or_default();
    let line = format!("SKIPPED {n} test(s) of `{binary}` (counted as passed above): {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}
