//! One cuckoo step: when both candidate buckets of a key are full of funnels in debt, move one
//! of their keys to its own other candidate bucket, if that one has a free slot, so the key
//! finds room without evicting anybody or growing the table.
//!
//! Two-choice placement alone fills about 70% of the slots before some key first finds its 14
//! candidates full; with one cuckoo step 87–93% (`crates/lab/examples/layouts.rs`, `fill`;
//! docs/design/table.md). The move is the growth's move (`grow/migrate.rs`, `relocate`: the
//! PENDING target, the sealed source, readers completing a move they find half done), made at
//! the level in use: its races are argued in docs/design/growing.md, and checked by the
//! loom models of `grow/loom.rs` and `loom.rs`.

use super::bucket::SLOTS_PER_BUCKET;
use super::create::{try_lock, Placement};
use super::grow::{Mode, Relocated, FIRST_FP};
use super::tags::tag_of;
use super::{prefetch, Home, Table};
use crate::quota_kind::QuotaKind;
use crate::sync::{AtomicBool, Ordering};

/// A creator tries a cuckoo step only while fewer than this share of the slots (in twentieths)
/// hold keys: past it, a step almost never finds room, and scanning for one would only slow
/// every new key of a flood that keeps the table full.
const STEP_BELOW_TWENTIETHS: u64 = 19;

/// The most residents two buckets list: each of their keys with up to two other buckets.
const MOST_RESIDENTS: usize = 4 * SLOTS_PER_BUCKET;

/// A key of a full candidate bucket, and its other candidate bucket.
#[derive(Clone, Copy, Default)]
struct Resident {
    bucket: usize,
    slot: usize,
    fp: u64,
    other: usize,
}

impl Table {
    /// Whether a creator of `fp` whose key found both candidates full should try a cuckoo
    /// step: the table holds keys in fewer than 95% of its slots (`holds_fewer_than`, an
    /// estimate from the creator's own stripe of counters in a large table: a flood that keeps
    /// the table full then pays two loads of a line it writes next, rather than loads of every
    /// stripe, lines other creators are writing).
    #[inline]
    pub(super) fn worth_a_cuckoo_step(&self, fp: u64) -> bool {
        self.holds_fewer_than(fp, STEP_BELOW_TWENTIETHS)
    }

    /// Frees a slot in one of `fp`'s candidate buckets (both full of funnels in debt) by moving
    /// one of their keys to its other candidate bucket at the level in use, if that one has a
    /// free slot: one cuckoo step. The caller holds `fp`'s creation lock. The key moved needs
    /// its own: taken only if free (never waited for, so two creators cannot deadlock), or
    /// already held when it is the caller's. True when a slot was freed.
    ///
    /// Used by creators of every table, and by a growth's migration, whose moved keys fill a
    /// new bucket before the old buckets they could also use have been split (those still
    /// hold the keys leaving them, and look full).
    // Out of line, and given the fingerprint only, so that `create`, which almost never calls
    // it, keeps its registers for its own path. Its test of how full the table is stays inline,
    // so that a flood into a full table does not pay for the call.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room_for<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q) -> bool {
        // The key's candidates at the level in use (during a migration, the level it moves
        // to). Recomputed here rather than passed in: a creator's loop keeps its own `Home`
        // in registers only if no call takes its address.
        let home = self.home(fp);
        let mut residents = [Resident::default(); MOST_RESIDENTS];
        let n = self.residents(home.buckets(), &mut residents);
        let held = self.stripe(fp) as *const AtomicBool;
        residents[..n].iter().any(|r| {
            has_free_slot(self, r.other, now, quota) && self.move_resident(r, held, now, quota)
        })
    }

    /// Two cuckoo steps, for a migration's move, or a creator in the middle of a migration, that
    /// found `fp`'s candidates full and no key of theirs with room in its other bucket
    /// (`make_room_for`): frees a slot in one of those
    /// other buckets by moving one of its keys on, then moves the first key into it. In the
    /// middle of a migration the other buckets are often old-level ones not split yet, still
    /// holding keys that are leaving them, and the second step moves one of those. The caller
    /// holds `fp`'s creation lock; every other lock is only tried. True when a slot of `fp`'s
    /// candidates was freed.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room_two_steps<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q) -> bool {
        let home = self.home(fp);
        let held = self.stripe(fp) as *const AtomicBool;
        let mut residents = [Resident::default(); MOST_RESIDENTS];
        let n = self.residents(home.buckets(), &mut residents);
        let mut onward = [Resident::default(); MOST_RESIDENTS];
        for r in &residents[..n] {
            let m = self.residents(std::iter::once(r.other), &mut onward);
            let freed = onward[..m].iter().any(|o| {
                o.other != r.bucket
                    && has_free_slot(self, o.other, now, quota)
                    && self.move_resident(o, held, now, quota)
            });
            if freed && self.move_resident(r, held, now, quota) {
                return true;
            }
        }
        false
    }

    /// Lists the live keys of `buckets`, each with its other candidate bucket at the level in
    /// use (both, for a key leaving its bucket in the middle of a migration), into `out`, and
    /// asks for each other bucket at once (a prefetch), so that on a table larger than the
    /// caches their misses overlap instead of queueing. Returns how many it listed.
    fn residents(
        &self,
        buckets: impl Iterator<Item = usize>,
        out: &mut [Resident; MOST_RESIDENTS],
    ) -> usize {
        let mut n = 0;
        for c in buckets {
            let bucket = &self.buckets[c];
            for slot in 0..SLOTS_PER_BUCKET {
                // Acquire, both: as a reader's; `relocate` validates again.
                let resident = bucket.keys[slot].load(Ordering::Acquire);
                if resident < FIRST_FP
                    || !crate::state::is_live(bucket.words[slot].load(Ordering::Acquire))
                {
                    continue;
                }
                // The resident's candidates at the level in use, in either shape of table: its
                // other one, or, for a key leaving `c` (an old-level bucket in the middle of a
                // migration, not one of the key's candidates at the new level), either.
                for other in self.home(resident).buckets().filter(|&o| o != c) {
                    // At most two buckets of seven slots, each key with at most two other
                    // buckets: `MOST_RESIDENTS`, so `out` never runs out.
                    debug_assert!(n < out.len());
                    self.each_line_of(other, prefetch::prefetch);
                    out[n] = Resident {
                        bucket: c,
                        slot,
                        fp: resident,
                        other,
                    };
                    n += 1;
                }
            }
        }
        n
    }

    /// Moves the resident `r` to its other bucket, under its creation lock: taken if free,
    /// or already held when it is `held` (the caller's). False if the lock was busy, the
    /// resident is gone from its slot, or its other bucket has no free slot any more.
    fn move_resident<Q: QuotaKind>(
        &self,
        r: &Resident,
        held: *const AtomicBool,
        now: u64,
        quota: &Q,
    ) -> bool {
        let stripe = self.stripe(r.fp);
        let _lock = if std::ptr::eq(stripe, held) {
            None // ours already
        } else {
            match try_lock(stripe) {
                Some(lock) => Some(lock),
                None => return false,
            }
        };
        let to = Home {
            fp: r.fp,
            tag: tag_of(r.fp),
            first: r.other,
            second: r.other,
        };
        // `relocate` checks again that the source still holds the key, live (it may have
        // been updated, evicted or moved since the scan): `Gone` if not.
        self.relocate(r.fp, r.bucket, r.slot, &to, now, quota, Mode::Cuckoo) == Relocated::Done
    }
}

/// Whether bucket `b` has a slot a creator could take at `now` (EMPTY, dead, or recovered).
fn has_free_slot<Q: QuotaKind>(table: &Table, b: usize, now: u64, quota: &Q) -> bool {
    let home = Home {
        fp: FIRST_FP,
        tag: 0,
        first: b,
        second: b,
    };
    matches!(table.place(&home, now, quota), Placement::Free(_))
}
