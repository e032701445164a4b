//! Reading every tracked key's state while other threads go on deciding: what
//! `Limiter::save` writes (`docs/design/persistence.md`).
//!
//! A scan reads each slot as a reader of the slot protocol does (key word, funnel word, key word
//! again, all Acquire), so every state it records is the recorded key's at the moment its word
//! was read. What a plain pass over the buckets can get wrong is a key that **moves** (a cuckoo
//! step, a growth's migration) from a slot the pass has not reached yet to one it has already
//! passed: the pass then sees it in neither. Every move runs under its key's creation lock and
//! counts itself in that lock's move count (`moves.rs`), odd while it runs, so the scan reads
//! every count before a pass and again after it, as a sequence lock's reader does: a lock whose
//! count was even and unchanged had no move of its keys overlap the pass, and the pass saw every
//! one of its keys that stayed in the table throughout. The locks whose keys did move are
//! passed over again (their keys' states from every pass merged, the largest kept: a state
//! only grows within a binding, so the largest is the latest) until each has had a quiet pass;
//! the locks still busy after a few passes are all held while one last pass runs, which no
//! move of their keys can overlap. That makes only those locks' new keys wait, for one pass.

use std::collections::HashMap;

use super::create::lock;
use super::grow::FIRST_FP;
use super::{Shape, Table};
use crate::state::{self, SlotState};
use crate::sync::{fence, AtomicBool, AtomicU32, Ordering};

/// Passes without locks before the locks still busy are taken one at a time.
const UNLOCKED_PASSES: usize = 4;

impl Table {
    /// Every key present throughout the call, with a state at least as recent as the call's
    /// start: `(fingerprint, state)` pairs, one per key, for states that have not expired by
    /// `now` (`expiry`: a recovered funnel is the same as an absent key and is left out).
    /// Lock-free for deciders; creators of new keys wait at most for one pass if their lock's
    /// keys kept moving through the unlocked passes.
    pub(crate) fn snapshot(&self, now: u64, expiry: impl Fn(u64) -> u64) -> Vec<(u64, u64)> {
        let mut found: HashMap<u64, u64> = HashMap::new();
        let locks = self.stripes();
        // `busy[i]`: lock `i` has had no pass free of its keys' moves yet.
        let mut busy = vec![true; locks.len()];
        for _ in 0..UNLOCKED_PASSES {
            // Acquire: pairs with the Release end of a move (`Moving::drop`): a pass that starts
            // after reading an even count sees that move's every write.
            let before: Vec<u32> = locks
                .iter()
                .map(|(_, c)| c.load(Ordering::Acquire))
                .collect();
            self.pass(now, &expiry, &mut found);
            // Acquire fence, then Relaxed loads: a pass that read any write of a move (a PENDING
            // target, a sealed or dead source) synchronises with the mover's Release fence after
            // its odd add, so these loads see the add (`moves.rs`, module doc).
            fence(Ordering::Acquire);
            let mut any = false;
            for (i, (_, count)) in locks.iter().enumerate() {
                let after = count.load(Ordering::Relaxed);
                if busy[i] && before[i] % 2 == 0 && after == before[i] {
                    busy[i] = false;
                }
                any |= busy[i];
            }
            if !any {
                return found.into_iter().collect();
            }
        }
        // No move of a lock's keys runs while we hold it (every move holds it). Taken in order
        // and all held for one pass: a holder of a creation lock never waits for another one
        // (a cuckoo step only tries, a growth's barrier takes each in turn holding none), so
        // holding several while taking the next cannot deadlock.
        let held: Vec<_> = locks
            .iter()
            .zip(&busy)
            .filter(|(_, busy)| **busy)
            .map(|((stripe, _), _)| lock(stripe))
            .collect();
        self.pass(now, &expiry, &mut found);
        drop(held);
        found.into_iter().collect()
    }

    /// Every creation lock with its move count.
    fn stripes(&self) -> Vec<(&AtomicBool, &AtomicU32)> {
        match &self.shape {
            Shape::Fixed { .. } => self.buckets.iter().map(|b| (&b.lock, &b.moves)).collect(),
            Shape::Grows(g) => g.stripes().collect(),
        }
    }

    /// One pass over the buckets in use, merging each key's state into `found` (the largest).
    fn pass(&self, now: u64, expiry: &impl Fn(u64) -> u64, found: &mut HashMap<u64, u64>) {
        // During a growth the buckets in use include the level being filled; a key moved beyond
        // this bound after it was read is a move, which the move counts catch.
        let in_use = self.buckets_in_use();
        for bucket in self.buckets[..in_use].iter() {
            for i in 0..super::SLOTS_PER_BUCKET {
                // Acquire, three times, as the slot protocol's slow path reads a slot
                // (`docs/design/slot-protocol.md`, orderings): a word read between two
                // reads of the same key belongs to that key's binding.
                let key = bucket.keys[i].load(Ordering::Acquire);
                if key < FIRST_FP {
                    continue;
                }
                let word = bucket.words[i].load(Ordering::Acquire);
                if bucket.keys[i].load(Ordering::Acquire) != key {
                    continue;
                }
                let value = match state::decode(word) {
                    SlotState::Live { tat, .. } => tat,
                    // A sealed source: the key's state until its move ends.
                    SlotState::Moved { tat } => tat,
                    // A PENDING target's state is still its source's; the rest hold no key.
                    _ => continue,
                };
                if expiry(value) <= now {
                    continue;
                }
                let kept = found.entry(key).or_insert(value);
                *kept = (*kept).max(value);
            }
        }
    }
}
