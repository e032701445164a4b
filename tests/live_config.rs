//! `LiveConfig` under load: a writer replaces the configuration 2,000 times while three readers
//! read it in a loop. Every read is one whole configuration, never older than the reader's
//! previous one, and old configurations are freed once no reader holds them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use funnel::LiveConfig;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// A configuration whose every field says which one it is, and that counts its drops.
struct Policies {
    version: u64,
    entries: Vec<u64>,
}

impl Policies {
    fn new(version: u64) -> Policies {
        Policies {
            version,
            entries: vec![version; (version % 7 + 1) as usize],
        }
    }
}

impl Drop for Policies {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn readers_see_whole_configurations_in_order_and_old_ones_are_freed() {
    const STORES: u64 = 2_000;
    const READERS: usize = 3;
    let config = LiveConfig::new(Policies::new(0));
    let done = AtomicBool::new(false);
    let mut readers: Vec<_> = (0..READERS).map(|_| config.reader()).collect();
    thread::scope(|s| {
        for reader in readers.iter_mut() {
            let done = &done;
            s.spawn(move || {
                let mut last = 0;
                let mut reads = 0u64;
                // Relaxed: a stop flag; the final read below is checked after the join.
                while !done.load(Ordering::Relaxed) || reads < 1_000 {
                    let p = reader.get();
                    assert!(p.entries.iter().all(|e| *e == p.version), "a torn config");
                    assert_eq!(p.entries.len() as u64, p.version % 7 + 1);
                    assert!(p.version >= last, "went back from {last} to {}", p.version);
                    last = p.version;
                    reads += 1;
                }
            });
        }
        for v in 1..=STORES {
            config.store(Policies::new(v));
            if v % 100 == 0 {
                thread::yield_now();
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    for reader in readers.iter_mut() {
        assert_eq!(reader.get().version, STORES);
        assert_eq!(reader.version(), STORES);
    }
    assert_eq!(config.version(), STORES);
    // Every configuration but the current one has been freed.
    assert_eq!(DROPPED.load(Ordering::Relaxed), STORES);
    drop(readers);
    drop(config);
    assert_eq!(DROPPED.load(Ordering::Relaxed), STORES + 1);
}
