//! When `LiveConfig` frees a replaced configuration, exactly: the bound that
//! `docs/DESIGN.md`, "Live reconfiguration", states. Alone in its test binary, because the
//! bound depends on which threads of the process are pinned to crossbeam's epoch: a test
//! running beside it could hold reclamation back.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use funnel::LiveConfig;

/// A configuration that counts its drops by id.
struct Counted {
    id: usize,
    drops: Arc<Vec<AtomicU32>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        // Relaxed: read by the same thread, or after a join or a channel receive.
        self.drops[self.id].fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_replaced_configuration_is_freed_before_store_returns_unless_a_reader_or_a_pinned_thread_holds_it(
) {
    const STALLED_STORES: usize = 10;
    let drops: Arc<Vec<AtomicU32>> = Arc::new((0..64).map(|_| AtomicU32::new(0)).collect());
    let counted = |id| Counted {
        id,
        drops: drops.clone(),
    };
    let dropped = |id: usize| drops[id].load(Ordering::Relaxed);

    // No reader holds it and no thread is pinned: freed before `store` returns.
    let config = LiveConfig::new(counted(0));
    config.store(counted(1));
    assert_eq!(dropped(0), 1);
    config.store(counted(2));
    assert_eq!((dropped(1), dropped(2)), (1, 0));

    // A reader holds the configuration it last saw until its next read, and no longer.
    let mut reader = config.reader();
    config.store(counted(3));
    assert_eq!(dropped(2), 0, "the reader still holds it");
    assert_eq!(reader.get().id, 3);
    assert_eq!(dropped(2), 1, "freed by the reader's refresh");
    drop(reader);

    // A thread pinned when a node is replaced holds that node (and so its configuration)
    // back until it unpins: one more retained configuration per store meanwhile.
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let stalled = thread::spawn(move || {
        let guard = crossbeam_epoch::pin();
        pinned_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        drop(guard);
    });
    pinned_rx.recv().unwrap();
    for id in 4..4 + STALLED_STORES {
        config.store(counted(id));
    }
    let held_back = (3..3 + STALLED_STORES)
        .filter(|&id| dropped(id) == 0)
        .count();
    assert_eq!(
        held_back, STALLED_STORES,
        "every replaced node is held back"
    );
    release_tx.send(()).unwrap();
    stalled.join().unwrap();
    // The next store, with nothing pinned, reclaims the backlog and its own predecessor.
    config.store(counted(4 + STALLED_STORES));
    for id in 3..4 + STALLED_STORES {
        assert_eq!(dropped(id), 1, "configuration {id}");
    }

    // Dropping the last handle frees the current one.
    drop(config);
    assert!(drops[..5 + STALLED_STORES]
        .iter()
        .all(|d| d.load(Ordering::Relaxed) == 1));
}
