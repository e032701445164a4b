//! Fuzz body `snapshot`: the reader of saved limiter states ([`Snapshot::read`]) and the
//! restore ([`Builder::restore`](funnel::Builder::restore)). The first byte chooses the mode:
//!
//! * **raw** (`% 3 == 0`): the rest, as a file. Never a panic; accepted exactly when an
//!   independent reading of the documented layout (below, `reference`) accepts it, and
//!   refused with the same kind of error; an accepted file restores into a limiter of its
//!   quota, or is refused for its key type.
//! * **sealed** (`% 3 == 1`): the rest, as a file whose magic, version and checksum are made
//!   right first, so the fuzzer reaches the field checks and the restore behind the checksum.
//! * **saved** (`% 3 == 2`): the rest chooses a quota, a seed, a clock and requests on a real
//!   limiter, which is saved; then one change (none, a byte flipped anywhere, a truncation at
//!   any length, bytes appended, another version). A changed file is always refused, with the
//!   error its change calls for; an unchanged one restores every key with its debt less the
//!   wall-clock time since the save (measured around the restore), and is refused under another
//!   quota, key type or seed.

use std::time::{Duration, SystemTime};

use funnel::clock::ManualClock;
use funnel::{Limiter, Quota, Snapshot, SnapshotError};

use super::common::Input;

const MAGIC: &[u8; 8] = b"FUNNELST";
const HEADER: usize = 88;
/// Keys the saved limiter's requests pick from.
const KEYS: u64 = 24;

/// Runs one input; panics on any divergence.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => raw(rest),
        1 => raw(&seal(rest)),
        _ => saved(rest),
    }
}

/// What the reference reading says of a file.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    NotFunnel,
    Version,
    Truncated,
    Corrupt,
    Io,
    Other,
}

fn kind(e: &SnapshotError) -> Kind {
    match e {
        SnapshotError::NotFunnel => Kind::NotFunnel,
        SnapshotError::Version { .. } => Kind::Version,
        SnapshotError::Truncated => Kind::Truncated,
        SnapshotError::Corrupt { .. } => Kind::Corrupt,
        SnapshotError::Io(_) => Kind::Io,
        _ => Kind::Other,
    }
}

/// A file's fields, as the reference reads them.
#[derive(Debug)]
struct Fields {
    interval: u64,
    limit: u64,
    key_type: u64,
    keys: u64,
    saved_at: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The documented layout, read independently of the crate (`src/snapshot.rs` documents it):
/// the whole length from the count, then the checksum, then every field's range.
fn reference(b: &[u8]) -> Result<Fields, Kind> {
    let m = b.len().min(8);
    if b[..m] != MAGIC[..m] {
        return Err(Kind::NotFunnel);
    }
    if b.len() < 12 {
        return Err(Kind::Truncated);
    }
    if u32_at(b, 8) != 1 {
        return Err(Kind::Version);
    }
    if b.len() < HEADER {
        return Err(Kind::Truncated);
    }
    let n = u64_at(b, 80);
    let need = HEADER as u128 + 16 * u128::from(n) + 8;
    if (b.len() as u128) < need {
        return Err(Kind::Truncated);
    }
    if b.len() as u128 > need {
        return Err(Kind::Corrupt);
    }
    let body = b.len() - 8;
    if fnv(&b[..body]) != u64_at(b, body) {
        return Err(Kind::Corrupt);
    }
    let (interval, limit) = (u64_at(b, 16), u64_at(b, 24));
    let tolerance = u128::from(interval) * u128::from(limit);
    if u32_at(b, 12) != 1 || interval == 0 || limit == 0 || tolerance > 1 << 60 {
        return Err(Kind::Corrupt);
    }
    for i in 0..n as usize {
        let at = HEADER + 16 * i;
        let (fp, debt) = (u64_at(b, at), u64_at(b, at + 8));
        if fp == 0 || debt == 0 || u128::from(debt) > tolerance {
            return Err(Kind::Corrupt);
        }
    }
    Ok(Fields {
        interval,
        limit,
        key_type: u64_at(b, 32),
        keys: n,
        saved_at: u64_at(b, 72),
    })
}

/// `bytes` with the magic and version made right, the count made to fit the length when it
/// can, and the checksum recomputed.
fn seal(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.len() < HEADER + 8 {
        b.resize(HEADER + 8, 0);
    }
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    if b[0x50] & 1 == 0 {
        // Mostly: a count that matches the length (the rest of the length in 16-byte entries).
        let n = (b.len() - HEADER - 8) / 16;
        b.truncate(HEADER + 16 * n + 8);
        b[80..88].copy_from_slice(&(n as u64).to_le_bytes());
    }
    let body = b.len() - 8;
    let sum = fnv(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The key type tag of a `Limiter<u64>` (FNV-1a of the type's name).
fn u64_key_type() -> u64 {
    fnv(std::any::type_name::<u64>().as_bytes())
}

fn raw(bytes: &[u8]) {
    let got = Snapshot::read(bytes);
    let want = reference(bytes);
    match (&got, &want) {
        (Err(e), Err(k)) => assert_eq!(kind(e), *k, "{e:?}"),
        (Ok(s), Ok(f)) => {
            assert_eq!(s.len() as u64, f.keys);
            let saved_at = s.saved_at().duration_since(SystemTime::UNIX_EPOCH).unwrap();
            assert_eq!(saved_at.as_nanos(), u128::from(f.saved_at));
            let quota = Quota::per_period(1, Duration::from_nanos(f.interval))
                .and_then(|q| q.with_limit(f.limit))
                .expect("a quota the reader accepted is valid");
            let restoring = Limiter::<u64>::builder(quota)
                .capacity(64)
                .clock(ManualClock::new())
                .restore(s.clone());
            if f.key_type == u64_key_type() {
                let limiter = restoring
                    .expect("a file of this quota and key type restores")
                    .build()
                    .unwrap();
                assert!(limiter.len() <= s.len());
                limiter.check_invariants().unwrap();
            } else {
                assert!(matches!(restoring, Err(SnapshotError::KeyType)));
            }
        }
        _ => panic!("reader {got:?}, reference {:?}", want.err()),
    }
}

fn saved(data: &[u8]) {
    let mut input = Input::new(data);
    let count = input.u64_in(1..=10);
    let period = Duration::from_secs(input.u64_in(1..=100_000));
    let limit = input.u64_in(1..=20);
    let quota = Quota::per_period(count, period)
        .and_then(|q| q.with_limit(limit))
        .expect("a small quota");
    let t = quota.emission_interval().as_nanos() as u64;
    let seed = input.u64();
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(input.u64_in(0..=1 << 50)));
    let limiter = Limiter::<u64>::builder(quota)
        .capacity(input.usize_in(1..=32))
        .seed(seed)
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..input.usize_in(0..=64) {
        if input.one_in(4) {
            clock.advance(Duration::from_nanos(
                input.span(t, quota.tolerance().as_nanos() as u64) % (1 << 50),
            ));
        }
        let _ = limiter.check_n(&input.u64_in(0..=KEYS - 1), input.u64_in(0..=limit));
    }
    let debt =
        |l: &Limiter<u64, ManualClock>, key: u64| l.peek(&key).reset_after().as_nanos() as u64;
    let debts: Vec<u64> = (0..KEYS).map(|k| debt(&limiter, k)).collect();
    let mut file = Vec::new();
    let written = limiter.save(&mut file).unwrap();
    let in_debt = debts.iter().filter(|d| **d > 0).count();
    // Every key in debt is written; a key evicted from the small table peeks as empty.
    assert_eq!(written, in_debt);
    assert_eq!(file.len(), HEADER + 16 * written + 8);
    assert!(reference(&file).is_ok());

    let len = file.len();
    let (changed, expect) = match input.pick(5) {
        0 => (file.clone(), None),
        1 => {
            let at = input.usize_in(0..=len - 1);
            let mut b = file.clone();
            b[at] ^= input.u64_in(1..=255) as u8;
            let k = match at {
                0..=7 => Kind::NotFunnel,
                8..=11 => Kind::Version,
                // A changed count claims more or fewer keys than follow.
                80..=87 => reference(&b).unwrap_err(),
                _ => Kind::Corrupt,
            };
            (b, Some(k))
        }
        2 => (
            file[..input.usize_in(0..=len - 1)].to_vec(),
            Some(Kind::Truncated),
        ),
        3 => {
            let mut b = file.clone();
            let extra = input.bytes(16);
            b.extend_from_slice(if extra.is_empty() { &[0] } else { extra });
            (b, Some(Kind::Corrupt))
        }
        _ => {
            let mut b = file.clone();
            let v = input.u64_in(2..=u64::from(u32::MAX)) as u32;
            b[8..12].copy_from_slice(&v.to_le_bytes());
            (b, Some(Kind::Version))
        }
    };
    let read = Snapshot::read(&changed[..]);
    let snapshot = match (read, expect) {
        (Ok(s), None) => s,
        (Err(e), Some(k)) => {
            assert_eq!(kind(&e), k, "{e:?}");
            return;
        }
        (got, want) => panic!("read {got:?}, expected {want:?}"),
    };
    assert_eq!(snapshot.len(), written);

    // Refused for another limiter.
    let other = quota.with_limit(limit + 1).unwrap();
    assert!(matches!(
        Limiter::<u64>::builder(other).restore(snapshot.clone()),
        Err(SnapshotError::Quota { .. })
    ));
    assert!(matches!(
        Limiter::<u32>::builder(quota).restore(snapshot.clone()),
        Err(SnapshotError::KeyType)
    ));
    assert!(matches!(
        Limiter::<u64>::builder(quota)
            .seed(seed ^ 1)
            .restore(snapshot.clone()),
        Err(SnapshotError::Seed)
    ));

    // Restored in "another process": another clock reading, the saved seed.
    let saved_at = snapshot.saved_at();
    let started = SystemTime::now();
    let later = ManualClock::new();
    later.advance(Duration::from_nanos(input.u64_in(0..=1 << 50)));
    let restored = Limiter::<u64>::builder(quota)
        .capacity(64)
        .clock(later)
        .restore(snapshot)
        .unwrap()
        .build()
        .unwrap();
    let most = saved_at.elapsed().unwrap_or_default().as_nanos() as u64;
    let least = started
        .duration_since(saved_at)
        .unwrap_or_default()
        .as_nanos() as u64;
    for key in 0..KEYS {
        let (was, is) = (debts[key as usize], debt(&restored, key));
        assert!(
            is >= was.saturating_sub(most),
            "key {key}: {is} < {was} - {most}"
        );
        assert!(
            is <= was.saturating_sub(least),
            "key {key}: {is} > {was} - {least}"
        );
    }
    restored.check_invariants().unwrap();
}
