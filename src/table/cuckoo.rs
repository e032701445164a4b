//! One cuckoo step: when both candidate buckets of a key are full of funnels in debt, move one
//! of their keys to its own other candidate bucket, if that one has a free slot, so the key
//! finds room without evicting anybody or growing the table.
//!
//! Two-choice placement alone fills about 70% of the slots before some key first finds its 14
//! candidates full; with one cuckoo step 87–93% (`examples/layouts.rs`, `fill`;
//! docs/DESIGN.md, "The table"). The move is the growth's move (`grow::relocate`, the
//! PENDING target, the sealed source, readers completing a move they find half done), made at
//! the level in use: its races are argued in docs/DESIGN.md, "Growing", and checked by the
//! loom models of `grow/loom.rs` and `loom.rs`.

use super::bucket::SLOTS_PER_BUCKET;
use super::create::{try_lock, Placement};
use super::grow::{Mode, FIRST_FP};
use super::stats::STAT_SHARDS;
use super::tags::tag_of;
use super::{prefetch, Home, Table};
use crate::meter::Meter;
use crate::sync::{AtomicBool, Ordering};

/// A creator tries a cuckoo step only while fewer than this share of the slots (in twentieths)
/// hold keys: past it, a step almost never finds room, and scanning for one would only slow
/// every new key of a flood that keeps the table full.
const STEP_BELOW_TWENTIETHS: u64 = 19;

/// Slots from which one stripe's count of keys held, times the number of stripes, estimates
/// the table's closely enough: a stripe then counts a thousand keys or more at the threshold,
/// so the estimate is within a few percent.
const ESTIMATE_ABOVE: u64 = 16 * 1024;

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
    /// step: the table holds keys in fewer than 95% of its slots. In a table of
    /// [`ESTIMATE_ABOVE`] slots or more that is estimated from the one stripe of counters the
    /// creator counts in anyway (creations spread evenly over the stripes, by fingerprint
    /// bits), so a flood that keeps the table full pays two loads of a line it writes next, not
    /// 32 loads of lines other creators write (which, measured with a loop of new keys into a
    /// full table of the default size, cost it about three times as much as the estimate).
    #[inline]
    pub(super) fn worth_a_cuckoo_step(&self, fp: u64) -> bool {
        let capacity = self.capacity() as u64;
        let held = if capacity >= ESTIMATE_ABOVE {
            self.shard(fp).keys_held() * STAT_SHARDS as u64
        } else {
            self.keys_held()
        };
        held * 20 < capacity * STEP_BELOW_TWENTIETHS
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
    // Out of line, and given the fingerprint only: inlined into `create`, or given the
    // creator's `Home` by reference, it slowed every creation of the comparison harness's churn
    // workload (a flood of new keys) by 13-22%, called or not. Its test of how full the table
    // is stays inline: behind the call it cost such a flood 2 ns more a key.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room_for<Q: Meter>(&self, fp: u64, now: u64, quota: &Q) -> bool {
        // The key's candidates at the level in use (during a migration, the level it moves
        // to). Recomputed here rather than passed in: a creator's loop keeps its own `Home`
        // in registers only if no call takes its address.
        let home = self.home(fp);
        // First every resident's other bucket, each asked for at once (a prefetch), so that on
        // a table larger than the caches their misses overlap instead of queueing.
        let mut residents = [Resident::default(); 2 * SLOTS_PER_BUCKET];
        let mut n = 0;
        for c in home.buckets() {
            let bucket = &self.buckets[c];
            for slot in 0..SLOTS_PER_BUCKET {
                // Acquire, both: as a reader's; `relocate` validates again.
                let resident = bucket.keys[slot].load(Ordering::Acquire);
                if resident < FIRST_FP
                    || !crate::state::is_live(bucket.words[slot].load(Ordering::Acquire))
                {
                    continue;
                }
                // The resident's candidates at the level in use, in either shape of table.
                let Home { first, second, .. } = self.home(resident);
                let other = if first == c { second } else { first };
                if other == c {
                    continue;
                }
                prefetch::prefetch(&self.buckets[other].tags);
                prefetch::prefetch(&self.buckets[other].words[0]);
                residents[n] = Resident {
                    bucket: c,
                    slot,
                    fp: resident,
                    other,
                };
                n += 1;
            }
        }
        let held = self.stripe(fp) as *const AtomicBool;
        for r in &residents[..n] {
            if !has_free_slot(self, r.other, now, quota) {
                continue;
            }
            let stripe = self.stripe(r.fp);
            let _lock = if std::ptr::eq(stripe, held) {
                None // ours already
            } else {
                match try_lock(stripe) {
                    Some(lock) => Some(lock),
                    None => continue,
                }
            };
            let to = Home {
                fp: r.fp,
                tag: tag_of(r.fp),
                first: r.other,
                second: r.other,
            };
            // `relocate` checks again that the source still holds the key, live (it may have
            // been updated, evicted or moved since the scan): false if not.
            if self.relocate(r.fp, r.bucket, r.slot, &to, now, quota, Mode::Cuckoo) {
                return true;
            }
        }
        false
    }
}

/// Whether bucket `b` has a slot a creator could take at `now` (EMPTY, dead, or recovered).
fn has_free_slot<Q: Meter>(table: &Table, b: usize, now: u64, quota: &Q) -> bool {
    let home = Home {
        fp: FIRST_FP,
        tag: 0,
        first: b,
        second: b,
    };
    matches!(table.place(&home, now, quota), Placement::Free(_))
}
