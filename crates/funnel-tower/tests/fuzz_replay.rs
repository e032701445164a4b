//! funnel-tower's fuzz bodies on stable: every committed input of this crate's fuzz
//! workspace's seed corpus (`fuzz/corpus/<target>/`, beside the targets) and of its
//! `tests/fuzz_regressions/<target>/` (minimised finds, kept as regression cases) runs through
//! the body the fuzzer runs (`funnel_testkit::fuzz::tower::<body>`), then a short budget of
//! seeded pseudo-random inputs.
//!
//! * `FUZZ_REPLAY_MS` sets each random test's budget (default 600 ms; 0 skips them);
//!   `FUZZ_REPLAY_SEED` picks the generator's seed (default fixed, so CI is repeatable).
//! * A failing random input is written to `$CARGO_TARGET_TMPDIR/fuzz-replay/<target>/` and
//!   named in the failure: copy it into `tests/fuzz_regressions/<target>/` to keep it.
//! * Coverage-guided fuzzing needs nightly: `cargo +nightly fuzz run <target>` in `fuzz/`.
//!
//! The counting allocator is installed here as in the fuzz targets, so the key body's check
//! that reading a key allocates nothing runs on stable too.

use std::path::{Path, PathBuf};

use funnel_testkit::alloc::{allocated_bytes, CountingAlloc};
use funnel_testkit::corpus::{self, Body};
use funnel_testkit::fuzz::tower as fuzzing;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The key body with the counting allocator's probe.
fn key_body(data: &[u8]) {
    fuzzing::key::run(data, allocated_bytes);
}

/// Runs every committed input of `target` through `body`: the fuzz workspace's seed corpus
/// and this crate's regressions.
fn replay_committed(target: &str, body: Body) -> usize {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = corpus::replay_committed(
        &manifest.join("fuzz/corpus"),
        &manifest.join("tests/fuzz_regressions"),
        target,
        body,
    );
    assert!(
        files >= 8,
        "{target}: only {files} committed inputs under fuzz/corpus/{target}/"
    );
    eprintln!("{target}: {files} committed inputs pass");
    files
}

/// Feeds `body` random bytes until the budget runs out.
fn random_inputs(target: &str, body: Body) {
    let failures = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-replay");
    corpus::random_inputs(target, body, corpus::bytes, &failures);
}

#[test]
fn the_counting_allocator_is_installed() {
    let before = allocated_bytes().expect("CountingAlloc is the global allocator");
    let v = vec![0u8; 1000];
    let after = allocated_bytes().unwrap();
    assert!(after - before >= 1000);
    drop(v);
}

/// Runs the committed inputs of `target`, then checks that they still reach `events` (noted
/// by the body on this test's thread), so a change in how a body decodes its input cannot
/// silently leave the corpus short of the paths that matter.
fn committed_inputs_reach(target: &str, body: Body, events: &[&str]) {
    fuzzing::clear_seen();
    replay_committed(target, body);
    eprintln!("{target}: reached {}", fuzzing::seen_summary());
    let missed: Vec<_> = events.iter().filter(|e| fuzzing::seen(e) == 0).collect();
    assert!(
        missed.is_empty(),
        "{target}: the committed inputs never reach {missed:?}: refresh fuzz/corpus/{target}/"
    );
}

#[test]
fn tower_key_committed_inputs_pass_and_reach_every_fallback() {
    committed_inputs_reach(
        "tower_key",
        key_body,
        &[
            "no peer",
            "trusted peer",
            "untrusted peer",
            "chain",
            "chain past 32 trusted hops",
            "a client address from a header",
            "a header key over 256 bytes",
        ],
    );
}

#[test]
fn tower_path_committed_inputs_pass_and_reach_each_outcome() {
    committed_inputs_reach(
        "tower_path",
        fuzzing::path::run,
        &[
            "prefix refused",
            "exempt",
            "a path an upstream may normalise",
            "not under a prefix",
        ],
    );
}

#[test]
fn tower_spec_committed_inputs_pass_and_reach_each_outcome() {
    committed_inputs_reach(
        "tower_spec",
        fuzzing::spec::run,
        &[
            "accepted",
            "accepted with a burst",
            "refused: a quota funnel cannot hold",
            "refused: not the grammar",
        ],
    );
}

#[test]
fn tower_key_random_inputs_pass() {
    random_inputs("tower_key", key_body);
}

#[test]
fn tower_path_random_inputs_pass() {
    random_inputs("tower_path", fuzzing::path::run);
}

#[test]
fn tower_spec_random_inputs_pass() {
    random_inputs("tower_spec", fuzzing::spec::run);
}

/// For refreshing a seed corpus: `FUZZ_EVENTS_DIR=<dir> FUZZ_EVENTS_TARGET=<target> cargo test
/// --test fuzz_replay -- --ignored --nocapture events_of_each_input` prints, for every file
/// of `dir`, the events its input reaches, so the committed seeds can be picked to reach them
/// all.
#[test]
#[ignore = "a tool for refreshing the seed corpus, run by hand"]
fn events_of_each_input() {
    let dir = std::env::var("FUZZ_EVENTS_DIR").expect("FUZZ_EVENTS_DIR");
    let target = std::env::var("FUZZ_EVENTS_TARGET").expect("FUZZ_EVENTS_TARGET");
    let body: Body = match target.as_str() {
        "tower_key" => key_body,
        "tower_path" => fuzzing::path::run,
        "tower_spec" => fuzzing::spec::run,
        other => panic!("unknown target {other}"),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("a directory")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        fuzzing::clear_seen();
        body(&std::fs::read(&file).unwrap());
        println!("events {} {}", file.display(), fuzzing::seen_summary());
    }
}
