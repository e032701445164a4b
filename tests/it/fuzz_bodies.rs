//! The fuzz bodies on stable: every committed input of `fuzz/corpus/<target>/` (the seed
//! corpus) and `tests/fuzz_regressions/<target>/` (minimised crashes, kept as regression cases)
//! runs through the same body the fuzzer runs (`funnel_testkit::fuzz::<target>`, in
//! `crates/testkit/src/fuzz/`), then a short budget of seeded pseudo-random inputs
//! (`funnel_testkit::corpus` runs both).
//!
//! * `FUZZ_REPLAY_MS` sets each random test's budget (default 600 ms; 0 skips them);
//!   `FUZZ_REPLAY_SEED` picks the generator's seed (default fixed, so CI is repeatable).
//! * A failing random input is written to `$CARGO_TARGET_TMPDIR/fuzz-replay/<target>/` and
//!   named in the failure: copy it into `tests/fuzz_regressions/<target>/` to keep it.
//! * Real coverage-guided fuzzing needs nightly: `cargo +nightly fuzz run <target>` in `fuzz/`,
//!   or `.ci/fuzz.sh`.

use funnel_testkit::corpus::{self, bytes, Body};
use funnel_testkit::fuzz::{common, ops, replay_line, state};
use funnel_testkit::Rng;

use std::path::Path;

use common::Event;

/// Runs every committed input of `target` through `body`; returns how many ran.
fn replay_committed(target: &str, body: Body) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    corpus::replay_committed(
        &root.join("fuzz/corpus"),
        &root.join("tests/fuzz_regressions"),
        target,
        body,
    )
}

/// Feeds `body` inputs from `generate` until the budget runs out, then says which events
/// they reached.
fn random_inputs(target: &str, body: Body, generate: fn(&mut Rng) -> Vec<u8>) {
    common::clear_seen();
    let failures = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-replay");
    corpus::random_inputs(target, body, generate, &failures);
    eprintln!(
        "{target}: the random inputs reached {}",
        common::seen_summary()
    );
}

/// Replay lines: mostly well formed over a few keys and rising times, with edge numbers, bad
/// fields, odd separators and raw bytes mixed in.
fn lines(rng: &mut Rng) -> Vec<u8> {
    const NUMBERS: &[&str] = &[
        "0",
        "1",
        "-1",
        "+1",
        "2",
        "15",
        "30",
        "60",
        "1000000000",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "18446744073709551615",
        "3458764513820540896",
        "3458764513820540897",
        "1152921504606846976",
        "007",
        "-0",
        "+",
        "-",
        "1e3",
        "0x10",
        "",
        "12a",
    ];
    const SEPARATORS: &[&[u8]] = &[b" ", b" ", b" ", b"\t", b"  ", b" \r ", b"\r"];
    let mut out = Vec::new();
    let mut now: u64 = 0;
    for _ in 0..rng.below(40) + 1 {
        if rng.below(3) > 0 {
            now += match rng.below(4) {
                0 => 0,
                1 => rng.below(1_000_000_000),
                2 => rng.below(100) * 1_000_000_000,
                _ => rng.below(3_000_000_000),
            };
        } else if rng.below(4) == 0 {
            now = now.saturating_sub(rng.below(5_000_000_000)); // back in time
        }
        let mut fields: Vec<Vec<u8>> = vec![
            now.to_string().into_bytes(),
            format!("k{}", rng.below(4)).into_bytes(),
            rng.below(6).to_string().into_bytes(),
            (rng.below(10) + 1).to_string().into_bytes(),
            (rng.below(10) + 1).to_string().into_bytes(),
        ];
        if rng.below(2) == 0 {
            fields.push(rng.below(8).to_string().into_bytes());
        }
        for _ in 0..rng.below(3) {
            let field = rng.below(fields.len() as u64 + 1) as usize;
            let junk = match rng.below(3) {
                0 => NUMBERS[rng.below(NUMBERS.len() as u64) as usize]
                    .as_bytes()
                    .to_vec(),
                1 => (0..rng.below(6) + 1)
                    .map(|_| rng.next_u64() as u8)
                    .collect(),
                _ => Vec::new(),
            };
            if field < fields.len() {
                fields[field] = junk;
            } else {
                fields.push(junk);
            }
        }
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(SEPARATORS[rng.below(SEPARATORS.len() as u64) as usize]);
            }
            out.extend_from_slice(field);
        }
        out.push(b'\n');
    }
    out
}

/// Runs the committed inputs of `target`, then checks that they still reach `events` (counted
/// on this test's thread), so a change in how bodies decode their input cannot silently turn
/// the corpus into one that no longer evicts, turns away or goes back in time.
fn committed_inputs_reach(target: &str, body: Body, events: &[Event]) {
    common::clear_seen();
    let files = replay_committed(target, body);
    eprintln!(
        "{target}: {files} committed inputs: {}",
        common::seen_summary()
    );
    let missed: Vec<_> = events.iter().filter(|e| common::seen(**e) == 0).collect();
    assert!(
        missed.is_empty() || files == 0,
        "{target}: the {files} committed inputs never reach {missed:?}: refresh fuzz/corpus/{target}/"
    );
}

/// Which keys share a bucket, and which slot a new key takes, are implementation details (the
/// hasher, the order of the eviction scan) that may change and then change what an input
/// evicts. The seeds `fuzz/corpus/ops/one-bucket-*` use a table of one bucket, where neither
/// matters: they keep every event below reached whatever those details become.
#[test]
fn ops_committed_inputs_pass_and_reach_every_divergence() {
    use Event::*;
    let events = [
        NewKey,
        RecoveredEviction,
        ForcedEviction,
        TurnedAway,
        AllowedUntracked,
        Allowed,
        Limited,
        CostExceedsLimit,
        ResetOfATrackedKey,
        ClockAtMax,
    ];
    committed_inputs_reach("ops", ops::run, &events);
}

#[test]
fn state_committed_inputs_pass_and_reach_the_edges() {
    use Event::*;
    let events = [
        Allowed,
        Limited,
        CostExceedsLimit,
        TimeWentBack,
        ClockAtMax,
        TimeRejected,
        QuotaRejected,
    ];
    committed_inputs_reach("state", state::run, &events);
}

#[test]
fn replay_line_committed_inputs_pass_and_reach_errors_and_replies() {
    use Event::*;
    let events = [LineRejected, LineReplied, Limited, TimeWentBack];
    committed_inputs_reach("replay_line", replay_line::run, &events);
}

#[test]
fn ops_random_inputs_pass() {
    random_inputs("ops", ops::run, bytes);
}

#[test]
fn state_random_inputs_pass() {
    random_inputs("state", state::run, bytes);
}

#[test]
fn replay_line_random_inputs_pass() {
    random_inputs("replay_line", replay_line::run, |rng| {
        if rng.below(4) == 0 {
            bytes(rng)
        } else {
            lines(rng)
        }
    });
}

#[test]
fn snapshot_committed_inputs_pass() {
    let files = replay_committed("snapshot", funnel_testkit::fuzz::snapshot::run);
    assert!(files > 0, "fuzz/corpus/snapshot/ is empty");
}

/// Random bytes in each of the body's three modes (its first byte), so the raw reader, the
/// sealed files and the saved-and-damaged files all get inputs.
#[test]
fn snapshot_random_inputs_pass() {
    random_inputs("snapshot", funnel_testkit::fuzz::snapshot::run, bytes);
}
