//! Skipping a test that needs a program the machine does not have, visibly.
//!
//! The standard test harness has no skipped state: a test that returns early is reported as
//! passed. So a skipped test says so itself: a line naming the test and why, written to the
//! process's stderr directly (the harness captures only `print!`/`eprint!` output), and a
//! count printed when the test process exits, after the harness's own summary. Under
//! `FUNNEL_REQUIRE_REDIS=1` (which CI sets) nothing is skipped: a missing program panics.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// The environment variable that turns a skip into a failure.
pub const REQUIRE: &str = "FUNNEL_REQUIRE_REDIS";

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
