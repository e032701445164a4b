//! A move count beside each creation lock: how a report about a key that its unlocked lookups
//! did not find learns, without taking the key's lock, that no move of the key ran meanwhile.
//!
//! Every move of a key (a migration's, a cuckoo step's, a nudge's: `grow/migrate.rs`,
//! `relocate`) runs under the key's creation lock, so the moves of one lock's keys come one at a
//! time (a move that makes room by moving other keys of the same lock, a cuckoo step inside a
//! migration's move, runs them inside its own, and counts only itself: `Moving::begin`), and a
//! count per lock, odd while one runs, tells a reader whether one ran while it looked, as a
//! sequence lock does. A reader that missed a present key can only have missed it
//! because a move of the key ran during its lookups (its whole move during `locate`'s scan, or
//! a move and then another key bound in the slot it left, which rewrites the tag byte that let
//! the reader skip `locate`): every other change that takes a key away (an eviction, a drop of
//! a recovered funnel) makes it absent in fact. So a report that finds nothing and sees the
//! count unchanged and even is exact; otherwise it looks once more under the lock, where no
//! move runs (`update.rs`).
//!
//! Why a reader that saw anything of a move sees the count changed: the mover adds one, then a
//! Release fence, before its first write of the move; the reader loads the count again after
//! an Acquire fence that follows its lookups. A lookup that read a write of the move (the
//! target's PENDING word or tag, the sealed or dead source) then synchronises with the
//! mover's fence, and the second load sees the odd count or later. A lookup that read the
//! binding another key made later in the slot the move left (its key word, or its tag byte,
//! which is why tags are written with Release, `Bucket::set_tag`) sees it through that
//! creator's Acquire of the move's Release DEAD word, which is later still. Loom models
//! `a_peek_racing_two_moves_of_its_key_reports_its_own_debt`,
//! `a_peek_racing_a_move_and_a_rebind_of_the_left_slot_reports_its_own_debt` and
//! `an_arrival_time_racing_a_move_and_a_rebind_of_the_left_slot_is_the_keys` fail when a report
//! trusts its miss without this count. They do not pin the two orderings argued here (the
//! mover's Release fence, the tags' Release): with either weakened to Relaxed they still pass,
//! as loom does not produce that reordering in them (and x86 never does: both compile to the
//! same instructions there), so those two rest on the argument above.

use super::{fixed_candidates, Shape, Table};
use crate::sync::{fence, AtomicU32, Ordering};

/// A move under way, counted in its key's lock's move count from [`begin`](Moving::begin) to
/// its drop. Made only under the key's creation lock.
pub(super) struct Moving<'a>(Option<&'a AtomicU32>);

impl<'a> Moving<'a> {
    /// Counts a move starting (the count turns odd), before any write of it; or nothing, for a
    /// move made inside another move of the same lock's keys (a cuckoo step a migration's move
    /// takes to make room, `grow/migrate.rs`), whose odd count already covers it: counted
    /// again, the count would turn even in the middle of the outer move, and a reader could
    /// read the same even value before and after missing the inner one's key.
    pub(super) fn begin(count: &'a AtomicU32) -> Self {
        // Relaxed: only the holder of this count's lock writes it, and we hold the lock, so
        // this load is exact. The lock's Acquire shows us the previous holder's last add, and
        // every move ends (the count even) before its lock is released.
        if count.load(Ordering::Relaxed) % 2 == 1 {
            return Moving(None);
        }
        // Relaxed, then a Release fence: the count's writers hold the lock, one at a time, so
        // the add needs no ordering of its own among them; the fence orders it before every
        // write of the move (and of the moves nested in it), so a reader that reads one of
        // those writes and then fences with Acquire sees this add (module doc).
        count.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        Moving(Some(count))
    }
}

impl Drop for Moving<'_> {
    fn drop(&mut self) {
        if let Some(count) = self.0 {
            // Release: a reader whose first load of the count (Acquire) reads this even value
            // sees every write of the move, the key where the move left it.
            count.fetch_add(1, Ordering::Release);
        }
    }
}

/// A key's move count, read before its unlocked lookups. 32 bits: it would take 2^31 moves of
/// the keys of one lock during one report's lookups for the count to come back to the same
/// value (a growth near the largest table moves about half of up to 2^31 keys, spread over
/// 16,384 locks).
#[derive(Clone, Copy)]
pub(super) struct Before(u32);

impl Table {
    /// The move count of `fp`'s creation lock ([`stripe`](Table::stripe)): in a fixed table
    /// beside the lock, in the key's first bucket; in a growable one in the table's own array.
    pub(super) fn moves(&self, fp: u64) -> &AtomicU32 {
        match &self.shape {
            Shape::Fixed { len } => &self.buckets[fixed_candidates(fp, *len).0].moves,
            Shape::Grows(g) => g.moves(fp),
        }
    }

    /// `fp`'s move count before a lookup whose miss may need [`moved_since`](Self::moved_since).
    pub(super) fn moves_before(&self, fp: u64) -> Before {
        // Acquire: pairs with the Release end of a move (`Moving::drop`), so a lookup that
        // starts after reading an even count sees that move's every write.
        Before(self.moves(fp).load(Ordering::Acquire))
    }

    /// Whether a move of `fp` was under way at `before` or began since: then a lookup made in
    /// between may have missed the key, and must look again under its lock.
    pub(super) fn moved_since(&self, fp: u64, before: Before) -> bool {
        // Acquire fence, then a Relaxed load: the fence makes every write of a move that the
        // lookups before it read (with any ordering) a reason for this load to see the move's
        // count (module doc).
        fence(Ordering::Acquire);
        let after = self.moves(fp).load(Ordering::Relaxed);
        before.0 % 2 == 1 || after != before.0
    }
}

#[cfg(all(test, not(funnel_loom)))]
mod tests {
    use super::*;

    /// A move inside a move of the same lock's keys keeps the count odd until the outer one
    /// ends (a helper's review found the count turning even in the middle of the outer move).
    #[test]
    fn a_move_inside_a_move_keeps_the_count_odd_until_the_outer_one_ends() {
        let count = AtomicU32::new(4);
        let outer = Moving::begin(&count);
        assert_eq!(count.load(Ordering::Relaxed), 5);
        {
            let _inner = Moving::begin(&count);
            assert_eq!(count.load(Ordering::Relaxed), 5);
        }
        assert_eq!(
            count.load(Ordering::Relaxed),
            5,
            "the inner move ended the count"
        );
        drop(outer);
        assert_eq!(count.load(Ordering::Relaxed), 6);
    }
}
