//! The `redis_reply` fuzz body (`funnel_redis::fuzzing::reply`) on stable: every committed
//! seed in this crate's fuzz workspace (`fuzz/corpus/redis_reply/`, beside the target) and
//! every crash kept in this crate's `tests/fuzz_regressions/redis_reply/`, then a bounded number of
//! mutations of the seeds. The body panics when a property fails (an admitted decision from a
//! reply Redis did not admit with, a reading that disagrees with the late-reply count), and a
//! panic anywhere fails this test.
//!
//! The seeds must keep reaching every path: the script's replies admitted and denied,
//! `CL.THROTTLE`'s admitted and denied, error replies sorted, and values that are no reply.

use std::collections::HashSet;
use std::path::{Path as FsPath, PathBuf};

use funnel_redis::fuzzing::{self, Path, HEADER};
use funnel_testkit::{redis_reply, Rng};

/// The crate's directory, where its fuzz workspace keeps its seed corpus.
fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The body with its reference, as the fuzz target runs it.
fn reply(data: &[u8]) -> (bool, Path) {
    fuzzing::reply(data, redis_reply::admitted)
}

fn inputs(dir: &FsPath) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_committed_seeds_reach_every_path_and_keep_every_property() {
    let seeds = inputs(&crate_dir().join("fuzz/corpus/redis_reply"));
    assert!(seeds.len() >= 20, "{} seeds", seeds.len());
    let mut reached = HashSet::new();
    for (path, bytes) in &seeds {
        let outcome = std::panic::catch_unwind(|| reply(bytes))
            .unwrap_or_else(|_| panic!("{} fails a property", path.display()));
        reached.insert(outcome);
    }
    for needed in [
        (false, Path::Admitted),
        (false, Path::Denied),
        (true, Path::Admitted),
        (true, Path::Denied),
        (false, Path::Sorted),
        (false, Path::Unreadable),
        (true, Path::Unreadable),
    ] {
        assert!(reached.contains(&needed), "no seed reaches {needed:?}");
    }
    for (path, bytes) in
        inputs(&FsPath::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/redis_reply"))
    {
        std::panic::catch_unwind(|| reply(&bytes))
            .unwrap_or_else(|_| panic!("{} fails a property", path.display()));
    }
}

/// Mutations of the seeds (bytes flipped, inserted, removed, truncated, headers swapped),
/// a bounded number: a short random budget for `cargo test`, not a fuzzer.
#[test]
fn mutated_seeds_keep_every_property() {
    let seeds = inputs(&crate_dir().join("fuzz/corpus/redis_reply"));
    let mut rng = Rng::new(0x5eed_4ed1);
    for _ in 0..20_000 {
        let (_, seed) = rng.pick(&seeds);
        let mut bytes = seed.clone();
        for _ in 0..=rng.below(4) {
            let len = bytes.len() as u64;
            match rng.below(5) {
                0 if len > 0 => {
                    let i = rng.below(len) as usize;
                    bytes[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(len + 1) as usize;
                    bytes.insert(i, rng.below(256) as u8);
                }
                2 if len > 0 => {
                    bytes.remove(rng.below(len) as usize);
                }
                3 => bytes.truncate(rng.below(len + 1) as usize),
                _ => {
                    let (_, other) = rng.pick(&seeds);
                    let n = HEADER.min(bytes.len()).min(other.len());
                    bytes[..n].copy_from_slice(&other[..n]);
                }
            }
        }
        if std::panic::catch_unwind(|| reply(&bytes)).is_err() {
            panic!("a mutated seed fails a property: {bytes:?}");
        }
    }
}
