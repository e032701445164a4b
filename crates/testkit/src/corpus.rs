//! Fuzz bodies on stable, for the replay tests of funnel (`tests/it/fuzz_bodies.rs`) and of
//! funnel-tower (`crates/funnel-tower/tests/fuzz_replay.rs`): every committed input of a
//! cargo-fuzz target through the body the fuzzer runs, then seeded pseudo-random inputs for a
//! time budget.
//!
//! * `FUZZ_REPLAY_MS` sets each random run's budget (default 600 ms; 0 runs none);
//!   `FUZZ_REPLAY_SEED` picks the generator's seed (default fixed, so CI is repeatable).
//! * A failing random input is saved under the caller's directory for failures, named by a
//!   hash of its bytes, and named in the failure, to be copied into the regressions.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Rng;

/// A fuzz body: any bytes in, a panic on a finding.
pub type Body = fn(&[u8]);

/// Runs every committed input of `target` through `body`: the files of
/// `<corpus>/<target>/` (the seed corpus) and `<regressions>/<target>/` (minimised finds, kept
/// by the crate whose code they exercise), in name order. Fails naming every input whose run
/// panics. Returns how many ran.
pub fn replay_committed(corpus: &Path, regressions: &Path, target: &str, body: Body) -> usize {
    let mut files = Vec::new();
    for dir in [corpus.join(target), regressions.join(target)] {
        // A missing directory is skipped, not failed: a target may have no regressions yet.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        files.extend(entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()));
    }
    files.sort();
    let mut failed = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        if catch_unwind(|| body(&bytes)).is_err() {
            failed.push(file.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} committed inputs fail: {failed:#?}",
        failed.len(),
        files.len()
    );
    files.len()
}

/// Feeds `body` inputs from `generate` until the budget (`FUZZ_REPLAY_MS`) runs out. A
/// failing input is saved in `failures/<target>/` and the run fails naming it. Returns how
/// many ran.
pub fn random_inputs(
    target: &str,
    body: Body,
    generate: fn(&mut Rng) -> Vec<u8>,
    failures: &Path,
) -> u64 {
    let budget_ms =
        std::env::var("FUZZ_REPLAY_MS").map_or(600, |v| v.parse().expect("FUZZ_REPLAY_MS: ms"));
    let seed = std::env::var("FUZZ_REPLAY_SEED")
        .map_or(0x5EED_F022, |v| v.parse().expect("FUZZ_REPLAY_SEED: u64"));
    let mut rng = Rng::new(seed ^ target.len() as u64);
    let deadline = Instant::now() + Duration::from_millis(budget_ms);
    let mut runs = 0;
    while Instant::now() < deadline {
        let input = generate(&mut rng);
        if catch_unwind(AssertUnwindSafe(|| body(&input))).is_err() {
            let path = save_failure(&failures.join(target), &input);
            panic!(
                "{target}: random input #{runs} (seed {seed}) fails; saved as {}; copy it into \
                 tests/fuzz_regressions/{target}/ to keep it",
                path.display()
            );
        }
        runs += 1;
    }
    eprintln!("{target}: {runs} random inputs in {budget_ms} ms");
    runs
}

/// Writes `input` into `dir` as `crash-<FNV-1a of its bytes>`; its path.
fn save_failure(dir: &Path, input: &[u8]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("crash-{hash:016x}"));
    std::fs::write(&path, input).unwrap();
    path
}

/// Random bytes, mostly short: the bodies decode any bytes into choices. Runs of one byte
/// value steer a body (`arbitrary`'s `Unstructured`) towards the same choice again and again.
pub fn bytes(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(4) {
        0 => rng.below(16),
        1 | 2 => rng.below(256),
        _ => rng.below(2_048),
    } as usize;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let b = rng.next_u64() as u8;
        let run = if rng.below(4) == 0 {
            rng.below(8) + 1
        } else {
            1
        };
        out.extend(std::iter::repeat_n(b, run as usize));
    }
    out
}
