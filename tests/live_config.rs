//! `LiveConfig` under load: two writers replace the configuration 2,000 times each while
//! three readers read it in a loop. Every read is one whole configuration, never older than
//! the reader's previous one and never one already dropped, and in the end every
//! configuration is dropped exactly once: the epoch-reclaimed pointer is neither freed early,
//! nor twice, nor leaked. (The exact reclamation bound, which needs no other test to pin the
//! epoch meanwhile, is in `tests/live_config_reclaim.rs`.)

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;

use funnel::LiveConfig;

/// What a dropped configuration's entries are overwritten with, so that a read of a freed one
/// is likely to show.
const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// A configuration whose every entry says which one it is (`writer * STORES + n`), and that
/// counts its drops in a table shared by the test.
struct Policies {
    id: u64,
    entries: Vec<u64>,
    drops: Arc<Vec<AtomicU32>>,
}

impl Policies {
    fn new(id: u64, drops: &Arc<Vec<AtomicU32>>) -> Policies {
        Policies {
            id,
            entries: vec![id; (id % 7 + 1) as usize],
            drops: drops.clone(),
        }
    }

    /// Checks that this configuration is whole and has not been dropped.
    fn check(&self) {
        assert!(
            self.entries.iter().all(|e| *e == self.id),
            "a torn or freed configuration: {:x?}",
            self.entries
        );
        assert_eq!(self.entries.len() as u64, self.id % 7 + 1);
        // Relaxed: the drop that would set it runs only after every reader let go; any
        // ordering shows a drop that happened before this read began.
        let drops = self.drops[self.id as usize].load(Ordering::Relaxed);
        assert_eq!(drops, 0, "configuration {} read after its drop", self.id);
    }
}

impl Drop for Policies {
    fn drop(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = POISON);
        // Relaxed: counted, and read after the threads are joined.
        self.drops[self.id as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Pins and flushes crossbeam's default collector until `done` holds, so that the nodes the
/// writers retired are reclaimed (each flush advances the epoch by at most one step and frees
/// at most a few bags).
fn reclaim(done: impl Fn() -> bool) {
    for _ in 0..100_000 {
        if done() {
            return;
        }
        crossbeam_epoch::pin().flush();
        thread::yield_now();
    }
    assert!(done(), "retired configurations were never reclaimed");
}

#[test]
fn readers_see_whole_live_configurations_in_order_and_each_is_dropped_exactly_once() {
    const STORES: u64 = 2_000;
    const WRITERS: u64 = 2;
    const READERS: usize = 3;
    let ids = (WRITERS * STORES + 1) as usize; // id 0 is the first configuration
    let drops: Arc<Vec<AtomicU32>> = Arc::new((0..ids).map(|_| AtomicU32::new(0)).collect());
    let config = LiveConfig::new(Policies::new(0, &drops));
    let done = AtomicBool::new(false);
    let mut readers: Vec<_> = (0..READERS).map(|_| config.reader()).collect();
    thread::scope(|s| {
        for reader in readers.iter_mut() {
            let done = &done;
            s.spawn(move || {
                let mut last = reader.version();
                let mut reads = 0u64;
                // Relaxed: a stop flag; the final read below is checked after the join.
                while !done.load(Ordering::Relaxed) || reads < 1_000 {
                    reader.get().check();
                    assert!(reader.version() >= last, "went back from {last}");
                    last = reader.version();
                    reads += 1;
                }
            });
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (config, drops) = (config.clone(), &drops);
                s.spawn(move || {
                    for n in 1..=STORES {
                        config.store(Policies::new(w * STORES + n, drops));
                        if n % 100 == 0 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    // Every store published a version, in the order of their swaps.
    assert_eq!(config.version(), WRITERS * STORES);
    let current = config.load();
    current.check();
    for reader in readers.iter_mut() {
        assert_eq!(reader.get().id, current.id);
        assert_eq!(reader.version(), WRITERS * STORES);
    }
    // Once the readers moved on and the epoch advanced, every configuration but the current
    // one has been dropped, each exactly once.
    let total = || {
        drops
            .iter()
            .map(|d| u64::from(d.load(Ordering::Relaxed)))
            .sum::<u64>()
    };
    reclaim(|| total() == WRITERS * STORES);
    for (id, d) in drops.iter().enumerate() {
        let want = u32::from(id as u64 != current.id);
        assert_eq!(d.load(Ordering::Relaxed), want, "configuration {id}");
    }
    drop((readers, current, config));
    assert_eq!(
        total(),
        WRITERS * STORES + 1,
        "the current one when the last handle went"
    );
    assert!(drops.iter().all(|d| d.load(Ordering::Relaxed) == 1));
}

#[test]
fn a_reader_holding_an_old_configuration_keeps_it_until_its_next_read() {
    let drops: Arc<Vec<AtomicU32>> = Arc::new((0..3).map(|_| AtomicU32::new(0)).collect());
    let config = LiveConfig::new(Policies::new(0, &drops));
    let mut reader = config.reader();
    let held = config.load();
    config.store(Policies::new(1, &drops));
    config.store(Policies::new(2, &drops));
    reclaim(|| drops[1].load(Ordering::Relaxed) == 1);
    // Configuration 1's node was reclaimed, and 1 with it; configuration 0's node was retired
    // first, but the reader and `held` still hold configuration 0 itself.
    assert_eq!(drops[0].load(Ordering::Relaxed), 0);
    held.check();
    drop(held);
    assert_eq!(
        drops[0].load(Ordering::Relaxed),
        0,
        "the reader still holds it"
    );
    assert_eq!(reader.get().id, 2);
    assert_eq!(
        drops[0].load(Ordering::Relaxed),
        1,
        "freed by the reader's refresh"
    );
    drop(reader);
    drop(config);
    assert_eq!(drops[2].load(Ordering::Relaxed), 1);
}
