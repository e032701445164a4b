//! Saving and restoring a keyed limiter's debts (`Limiter::save`, `Builder::restore`): the
//! debts come back less the wall-clock time since the save, under concurrent traffic too; a
//! state that is damaged in any way, or meant for another limiter, is a typed error and loads
//! nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use funnel::clock::ManualClock;
use funnel::{Error, Limiter, Quota, Snapshot, SnapshotError, WhenFull};

/// A key's debt now (how long until its funnel has drained), in ns.
fn debt<C: funnel::Clock>(limiter: &Limiter<u64, C>, key: u64) -> u64 {
    limiter.peek(&key).reset_after().as_nanos() as u64
}

fn saved(limiter: &Limiter<u64, ManualClock>) -> Vec<u8> {
    let mut file = Vec::new();
    limiter.save(&mut file).unwrap();
    file
}

/// Ten per hour, bursts of ten: an emission interval of 360 s, so the milliseconds a test
/// takes drain almost nothing.
fn hourly() -> Quota {
    Quota::per_hour(10).unwrap()
}

fn charged(seed: u64) -> Limiter<u64, ManualClock> {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(5));
    let limiter = Limiter::<u64>::builder(hourly())
        .seed(seed)
        .clock(clock)
        .build()
        .unwrap();
    for key in 0..50u64 {
        assert!(limiter.check_n(&key, key % 10 + 1).is_allowed());
    }
    limiter
}

/// The restored debt of every key is its saved debt less the wall-clock time between the save
/// and the restore, measured from outside: at least `saved - (after - saved_at)`, at most the
/// saved debt less the time before the restore began.
#[test]
fn restored_debts_are_the_saved_ones_less_the_wall_clock_time_since() {
    let before = charged(7);
    let file = saved(&before);
    std::thread::sleep(Duration::from_millis(30));
    let snapshot = Snapshot::read(&file[..]).unwrap();
    assert_eq!(snapshot.len(), 50);
    let saved_at = snapshot.saved_at();
    let started = SystemTime::now();
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000)); // another process: another clock reading
    let after = Limiter::<u64>::builder(hourly())
        .clock(clock)
        .restore(snapshot)
        .unwrap()
        .build()
        .unwrap();
    let elapsed_max = saved_at.elapsed().unwrap().as_nanos() as u64;
    let elapsed_min = started.duration_since(saved_at).unwrap().as_nanos() as u64;
    assert!(elapsed_min >= 30_000_000);
    assert_eq!(after.len(), 50);
    for key in 0..50u64 {
        let (was, is) = (debt(&before, key), debt(&after, key));
        assert_eq!(was, (key % 10 + 1) * 360_000_000_000);
        assert!(
            is >= was - elapsed_max,
            "key {key}: {is} < {was} - {elapsed_max}"
        );
        assert!(
            is <= was - elapsed_min,
            "key {key}: {is} > {was} - {elapsed_min}"
        );
    }
    // Still limited where it was: key 9 used its whole burst.
    assert!(!after.check(&9).is_allowed());
    assert!(after.check(&0).is_allowed());
    after.check_invariants().unwrap();
}

/// A debt that drains between the save and the restore is dropped; a longer one is kept.
#[test]
fn debts_drained_since_the_save_are_dropped() {
    let quota = Quota::per_period(1, Duration::from_millis(40)).unwrap();
    let clock = ManualClock::new();
    let limiter = Limiter::<u64>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check(&1).is_allowed()); // 40 ms of debt
    let long = Quota::per_period(1, Duration::from_secs(3_600)).unwrap();
    let keeper = Limiter::<u64>::builder(long).clock(clock).build().unwrap();
    assert!(keeper.check(&1).is_allowed()); // an hour of debt
    let (mut short_file, mut long_file) = (Vec::new(), Vec::new());
    assert_eq!(limiter.save(&mut short_file).unwrap(), 1);
    assert_eq!(keeper.save(&mut long_file).unwrap(), 1);
    std::thread::sleep(Duration::from_millis(60));
    let restored = Limiter::<u64>::builder(quota)
        .restore(Snapshot::read(&short_file[..]).unwrap())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(restored.len(), 0);
    assert!(restored.check(&1).is_allowed());
    let restored = Limiter::<u64>::builder(long)
        .restore(Snapshot::read(&long_file[..]).unwrap())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(restored.len(), 1);
    assert!(!restored.check(&1).is_allowed());
}

/// A drained funnel is not saved: it is the same as an absent key.
#[test]
fn drained_funnels_are_not_saved() {
    let clock = ManualClock::new();
    let limiter = Limiter::<u64>::builder(hourly())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check(&1).is_allowed());
    clock.advance(Duration::from_secs(100));
    assert!(limiter.check(&2).is_allowed());
    clock.advance(Duration::from_secs(300)); // key 1 drained at 360 s, key 2 owes 60 s more
    assert_eq!(limiter.len(), 2);
    assert_eq!(limiter.save(&mut Vec::new()).unwrap(), 1);
}

fn corrupt_at(file: &[u8], at: usize) -> Vec<u8> {
    let mut bad = file.to_vec();
    bad[at] ^= 0x5a;
    bad
}

/// Every byte of a small file, changed: detected. The magic and version bytes have their own
/// errors; every other byte fails the checksum (or a range check, or the length).
#[test]
fn a_changed_byte_anywhere_is_detected() {
    let file = saved(&charged(1));
    assert_eq!(file.len(), 88 + 16 * 50 + 8);
    for at in 0..file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = file.clone();
            bad[at] ^= flip;
            let err = Snapshot::read(&bad[..]).unwrap_err();
            match at {
                0..=7 => assert!(matches!(err, SnapshotError::NotFunnel), "byte {at}"),
                8..=11 => assert!(matches!(err, SnapshotError::Version { .. }), "byte {at}"),
                _ => assert!(
                    matches!(
                        err,
                        SnapshotError::Corrupt { .. } | SnapshotError::Truncated
                    ),
                    "byte {at}: {err:?}"
                ),
            }
        }
    }
    assert!(matches!(
        Snapshot::read(&corrupt_at(&file, 200)[..]),
        Err(SnapshotError::Corrupt {
            reason: "checksum mismatch"
        })
    ));
}

#[test]
fn a_truncated_file_is_detected_at_every_length() {
    let file = saved(&charged(2));
    for len in 0..file.len() {
        assert!(
            matches!(Snapshot::read(&file[..len]), Err(SnapshotError::Truncated)),
            "length {len}"
        );
    }
    let mut longer = file.clone();
    longer.push(0);
    assert!(matches!(
        Snapshot::read(&longer[..]),
        Err(SnapshotError::Corrupt {
            reason: "bytes after the checksum"
        })
    ));
    assert!(Snapshot::read(&file[..]).is_ok());
}

#[test]
fn another_format_version_or_not_a_state_at_all_is_its_own_error() {
    let file = saved(&charged(3));
    let mut v2 = file.clone();
    v2[8] = 2;
    assert!(matches!(
        Snapshot::read(&v2[..]),
        Err(SnapshotError::Version {
            found: 2,
            supported: 1
        })
    ));
    assert!(matches!(
        Snapshot::read(&b"{\"keys\": []}"[..]),
        Err(SnapshotError::NotFunnel)
    ));
    let missing = std::env::temp_dir().join("funnel-no-such-state");
    let err = Snapshot::read_from(&missing).unwrap_err();
    assert!(matches!(&err, SnapshotError::Io(e) if e.kind() == std::io::ErrorKind::NotFound));
    // The I/O error itself, not a copy of its message.
    let source = std::error::Error::source(&err).expect("an I/O error has a source");
    assert_eq!(
        source.downcast_ref::<std::io::Error>().map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound)
    );
}

/// A state meant for another limiter builds nothing: another quota, another key type, a seed
/// other than its own. The same limiter built without it starts empty.
#[test]
fn a_state_for_another_quota_key_type_or_seed_is_refused() {
    let file = saved(&charged(4));
    let snapshot = || Snapshot::read(&file[..]).unwrap();
    let other = Quota::per_hour(10).unwrap().with_limit(11).unwrap();
    let err = Limiter::<u64>::builder(other)
        .restore(snapshot())
        .unwrap_err();
    assert!(matches!(
        err,
        SnapshotError::Quota {
            saved_interval_nanos: 360_000_000_000,
            saved_limit: 10,
            interval_nanos: 360_000_000_000,
            limit: 11
        }
    ));
    assert!(err.to_string().contains("limit 10"));
    assert!(matches!(
        Limiter::<u32>::builder(hourly()).restore(snapshot()),
        Err(SnapshotError::KeyType)
    ));
    assert!(matches!(
        Limiter::<u64>::builder(hourly())
            .seed(5)
            .restore(snapshot()),
        Err(SnapshotError::Seed)
    ));
    // Another seed given after the state: the build refuses it.
    assert_eq!(
        Limiter::<u64>::builder(hourly())
            .restore(snapshot())
            .unwrap()
            .seed(5)
            .build()
            .unwrap_err(),
        Error::SeedConflict
    );
    // Its own seed, given again: fine.
    let same = Limiter::<u64>::builder(hourly())
        .restore(snapshot())
        .unwrap()
        .seed(4)
        .build()
        .unwrap();
    assert_eq!(same.len(), 50);
    // Starting empty instead.
    let empty = Limiter::<u64>::builder(other).build().unwrap();
    assert!(empty.is_empty());
}

/// A random seed is saved too: the restored limiter finds the keys of a limiter whose seed
/// nobody chose.
#[test]
fn a_random_seed_survives_the_restart() {
    let before = Limiter::<str>::new(hourly());
    for _ in 0..10 {
        assert!(before.check("abuser").is_allowed());
    }
    let mut file = Vec::new();
    before.save(&mut file).unwrap();
    let after = Limiter::<str>::builder(hourly())
        .restore(Snapshot::read(&file[..]).unwrap())
        .unwrap()
        .build()
        .unwrap();
    assert!(!after.check("abuser").is_allowed());
    assert!(after.check("someone else").is_allowed());
    // Two limiters built without a seed fingerprint differently: the seed is what carried it.
    let fresh = Limiter::<str>::new(hourly());
    assert!(fresh.check("abuser").is_allowed());
}

/// A table smaller than the saved state keeps the largest debts (they load first).
#[test]
fn a_smaller_table_keeps_the_largest_debts() {
    let file = saved(&charged(6));
    let small = Limiter::<u64>::builder(hourly())
        .capacity(7)
        .when_full(WhenFull::Deny)
        .restore(Snapshot::read(&file[..]).unwrap())
        .unwrap()
        .build()
        .unwrap();
    assert!(small.len() <= 14);
    // Keys 9, 19, 29, 39, 49 owe the most (a whole burst): all kept.
    for key in [9u64, 19, 29, 39, 49] {
        assert!(!small.check(&key).is_allowed(), "key {key}");
    }
}

#[test]
fn save_to_replaces_the_file_whole_and_leaves_no_temporary_file() {
    let dir = std::env::temp_dir().join(format!("funnel-save-to-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.bin");
    let one = charged(8);
    assert_eq!(one.save_to(&path).unwrap(), 50);
    assert_eq!(std::fs::read(&path).unwrap().len(), 88 + 16 * 50 + 8);
    let two = Limiter::<u64>::builder(hourly()).seed(8).build().unwrap();
    assert!(two.check(&1).is_allowed());
    assert_eq!(two.save_to(&path).unwrap(), 1);
    let back = Snapshot::read_from(&path).unwrap();
    assert_eq!(back.len(), 1);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["state.bin"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the file holds the seed");
    }
    // A directory that does not exist: an error, nothing written.
    let err = two.save_to(dir.join("no/such/dir/state.bin")).unwrap_err();
    assert!(matches!(&err, SnapshotError::Io(e) if e.kind() == std::io::ErrorKind::NotFound));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Saves while three threads charge keys, new ones among them, so the table grows (or, fixed
/// and nearly full, makes room by cuckoo steps) and keys move while the save passes over it.
/// The clock is frozen, so every key's debt only grows: the debt read before a save is a lower
/// bound of what the save must write, the debt read after the threads stop an upper bound.
/// Restored, each key owes at least its lower bound less the wall-clock time since the save,
/// and at most its upper bound.
///
/// `fresh`: the threads also create new keys beyond `keys` all along (a growing table then
/// keeps growing, and its migrations keep moving the checked keys while saves pass).
fn save_under_traffic(
    builder: impl Fn(ManualClock) -> Limiter<u64, ManualClock>,
    keys: u64,
    fresh: bool,
) {
    // One traffic test at a time: three of them at once (each three workers and a saver) on a
    // two-core machine left a saver's time slices without a worker beside it.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let limiter = Arc::new(builder(clock.clone()));
    for key in 0..keys / 4 {
        let _ = limiter.check_n(&key, key % 3 + 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let (limiter, stop, decided) = (limiter.clone(), stop.clone(), decided.clone());
            std::thread::spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t + 1);
                let mut next = keys + t;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let _ = limiter.check(&(x % keys));
                    if fresh && next < keys + 300_000 {
                        let _ = limiter.check(&next);
                        next += 3;
                    }
                    decided.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Saves until four of them overlapped decisions of the other threads (on a machine with
    // few cores a save may run alone in its time slice), each checked below; for at most 30 s.
    let mut rounds = Vec::new();
    let mut overlapped = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let lower: Vec<u64> = (0..keys).map(|k| debt(&limiter, k)).collect();
        let during = decided.load(Ordering::Relaxed);
        let mut file = Vec::new();
        limiter.save(&mut file).unwrap();
        if decided.load(Ordering::Relaxed) > during {
            overlapped += 1;
            rounds.push((lower, file));
        }
        if overlapped == 4 {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(
        overlapped, 4,
        "no save overlapped the other threads' decisions"
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let upper: Vec<u64> = (0..keys).map(|k| debt(&limiter, k)).collect();
    let stats = limiter.stats();
    assert_eq!(stats.forced_evictions, 0);
    let tau = hourly().tolerance().as_nanos() as u64;
    for (lower, file) in rounds {
        let snapshot = Snapshot::read(&file[..]).unwrap();
        let saved_at = snapshot.saved_at();
        let restored = Limiter::<u64>::builder(hourly())
            .capacity(snapshot.len() * 2 + 64)
            .clock(ManualClock::new()) // frozen: only the time before the build drains debts
            .restore(snapshot)
            .unwrap()
            .build()
            .unwrap();
        let elapsed = saved_at.elapsed().unwrap().as_nanos() as u64;
        for key in 0..keys {
            let is = debt(&restored, key);
            let (lo, hi) = (lower[key as usize], upper[key as usize]);
            assert!(
                is >= lo.saturating_sub(elapsed),
                "key {key}: restored {is} < {lo} - {elapsed}"
            );
            assert!(is <= hi.min(tau), "key {key}: restored {is} > {hi}");
        }
    }
    eprintln!("{:?}", stats);
}

#[test]
fn a_save_under_traffic_on_a_growing_table_keeps_every_debt() {
    save_under_traffic(
        |clock| {
            Limiter::<u64>::builder(hourly())
                .capacity(64)
                .max_capacity(1 << 17)
                .seed(11)
                .clock(clock)
                .build()
                .unwrap()
        },
        40_000,
        false,
    );
}

#[test]
fn a_save_under_traffic_on_a_full_fixed_table_keeps_every_debt() {
    save_under_traffic(
        |clock| {
            Limiter::<u64>::builder(hourly())
                .capacity(7_000)
                .when_full(WhenFull::Deny)
                .seed(12)
                .clock(clock)
                .build()
                .unwrap()
        },
        8_000,
        false,
    );
}

#[test]
fn a_save_while_a_table_keeps_growing_keeps_every_debt() {
    save_under_traffic(
        |clock| {
            Limiter::<u64>::builder(hourly())
                .capacity(64)
                .max_capacity(1 << 20)
                .seed(13)
                .clock(clock)
                .build()
                .unwrap()
        },
        20_000,
        true,
    );
}
