//! Growing a table. A growable table reserves its largest size in one zeroed allocation
//! (`bucket::empty_buckets`: only what is touched becomes resident) and uses the first
//! `2^level` buckets. A key's buckets come from fingerprint bits above the tag (bits 8.. and,
//! rotated, 36..), masked to the level, so doubling turns bucket `b` into `b` and `b + 2^level`:
//! a key either keeps its bucket or belongs in a bucket of the new, upper half. No array is ever
//! replaced, so nothing is reclaimed and readers pin nothing.
//!
//! A growth (`docs/design/growing.md`):
//!
//! 1. A creator whose key finds no free slot starts it (one grower at a time): it publishes the
//!    new level as *migrating* (readers and creators use the new level from then on, readers
//!    also look at the old one), then takes and drops every creation lock in turn, a barrier
//!    after which no creator still places keys by the old level.
//! 2. The old level's buckets are then split, a chunk at a time, by every request that takes
//!    the slow path (new keys, keys not moved yet): each live key whose bucket is not one of its
//!    candidates at the new level is moved there. Meanwhile new keys leave a quarter of the new
//!    level to the keys still to move (`help_before_creating`), and a move that finds its
//!    targets full makes room by one or two cuckoo steps, or retries, before it evicts.
//! 3. The helper that splits the last chunk publishes the new level as settled.
//!
//! Moving a key, under its creation lock, without ever blocking its updaters: reserve a target
//! slot and bind it PENDING (key and tag set, no funnel of its own), then seal the source with a
//! CAS from its live word to `MOVED(tat)` (an update that lands first makes the CAS fail; read
//! again and retry), then complete the target to `LIVE(tat)`, then mark the source `DEAD`
//! with its generation, which frees the slot. A reader that finds the
//! target pending and the source sealed (and still sealed once the target was read, so the two
//! are one move's) completes the target itself (`lookup::complete`) with the sealed arrival
//! time.

#[cfg(all(test, funnel_loom))]
mod loom;
mod migrate;

pub(super) use migrate::{Mode, Relocated};

use super::create::lock;
use super::tags::tag_of;
use super::{Home, Shape, Table};
use crate::quota_kind::QuotaKind;
use crate::sync::{spin, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Fingerprints start here: the key word 0 is no key.
pub(super) const FIRST_FP: u64 = 1;
/// A growable table's first bucket index starts at this fingerprint bit (bits 0-7 are the tag).
const FIRST_SHIFT: u32 = 8;
/// ... and its second at this one (the fingerprint rotated), so the two are independent up to
/// 2^28 buckets.
const SECOND_ROTATE: u32 = 36;
/// The most creation locks: 16,384, one byte each (a growth's barrier takes each once).
const MAX_STRIPE_LEVEL: u32 = 14;
/// How many times a migration's move whose target buckets are full of funnels in debt tries
/// cuckoo steps, releasing the key's lock and waiting between tries (`sync::spin`: spins, then
/// yields), before it evicts the least indebted of them. Full buckets in the middle of a
/// migration are mostly a passing state: new keys crowd into the new level's upper buckets
/// while the lower ones still hold the keys leaving them, which other helpers are moving out.
/// Under loom two tries: one wait, which a model runs while another thread frees a slot
/// (`grow/loom.rs`); the models check what happens, not how long.
#[cfg(not(funnel_loom))]
const MIGRATE_TRIES: u32 = 256;
#[cfg(funnel_loom)]
const MIGRATE_TRIES: u32 = 2;
/// While a migration is under way, new keys are created only while fewer than this share of the
/// new level's slots (in twentieths) hold keys; past it, their creators help the migration or
/// wait for it to end (`help_before_creating`). A growth starts when the old level is full
/// (about 90% of its slots with the cuckoo step, which stops at 95%), so about 45% of the new
/// one; the keys still to move need room there. Without this reserve, creators on other
/// threads could fill the whole new level while one helper is preempted in the middle of its
/// chunk, whose keys would then find no slot anywhere and evict a key in debt, admitted too
/// early on its next request (the `growth` tests with more threads than cores exercise it).
#[cfg(not(funnel_loom))]
const MIGRATION_FILL_TWENTIETHS: u64 = 15;
/// Buckets of the old level a helper splits per slow-path request.
#[cfg(not(funnel_loom))]
const CHUNK: u64 = 8;
#[cfg(funnel_loom)]
const CHUNK: u64 = 1;
/// `next` holds the new level above this many bits, the next bucket to claim below.
const INDEX_BITS: u32 = 48;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// An index no table reaches: the migration's chunks may not be claimed yet.
const NOT_READY: u64 = 1 << 47;

/// What a growable table's `state` word says: the level in use and whether keys are still
/// being moved into it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Level {
    /// `2^level - 1` for the level in use (while migrating, the new level's).
    mask: u64,
    /// Whether keys are still being moved into it from the level below.
    migrating: bool,
}

impl Level {
    /// The level a `state` word holds.
    #[inline(always)]
    fn decode(state: u64) -> Level {
        Level {
            mask: state >> 1,
            migrating: state & 1 == 1,
        }
    }

    /// The `state` word that holds this level: `(mask << 1) | migrating`.
    fn encode(self) -> u64 {
        (self.mask << 1) | u64::from(self.migrating)
    }
}

/// The state of a growable table.
pub(super) struct Growth {
    /// The level in use, [`Level::encode`]d.
    state: AtomicU64,
    /// The largest level.
    max: u32,
    /// `(new level << INDEX_BITS) | next old bucket to split`, claimed a chunk at a time;
    /// `NOT_READY` until the growth's barrier has passed.
    next: AtomicU64,
    /// Old buckets split in this migration.
    done: AtomicUsize,
    /// Held by the one thread starting a growth.
    growing: AtomicBool,
    /// The creation locks (`stripe`): `2^min(max, 14)` of them.
    locks: Box<[AtomicBool]>,
    /// Each lock's move count (`moves.rs`).
    moves: Box<[AtomicU32]>,
    /// Growths started, for [`Stats`](crate::Stats).
    growths: AtomicU64,
}

impl Growth {
    pub(super) fn new(min: u32, max: u32) -> Growth {
        let stripes = 1u64 << max.min(MAX_STRIPE_LEVEL);
        Growth {
            state: AtomicU64::new(
                Level {
                    mask: (1 << min) - 1,
                    migrating: false,
                }
                .encode(),
            ),
            max,
            next: AtomicU64::new(NOT_READY),
            done: AtomicUsize::new(0),
            growing: AtomicBool::new(false),
            locks: (0..stripes).map(|_| AtomicBool::new(false)).collect(),
            moves: (0..stripes).map(|_| AtomicU32::new(0)).collect(),
            growths: AtomicU64::new(0),
        }
    }

    /// The level in use.
    #[inline(always)]
    fn level(&self) -> Level {
        // Acquire: pairs with the Release stores that publish a level (`start_growth`,
        // `help_migrate`). The hot path needs no more than a mask (a stale one only makes it
        // miss and take the slow path, which reads the state again); creators read it under
        // their lock, which the barrier argument needs.
        Level::decode(self.state.load(Ordering::Acquire))
    }

    /// The bucket mask of the level in use.
    #[inline(always)]
    pub(super) fn mask_in_use(&self) -> u64 {
        self.level().mask
    }

    /// Whether keys are being moved into the level in use.
    #[cfg(not(funnel_loom))]
    fn migrating(&self) -> bool {
        self.level().migrating
    }

    pub(super) fn buckets_in_use(&self) -> usize {
        (self.mask_in_use() + 1) as usize
    }

    /// `fp`'s creation lock, the same at every level: one of `locks`, chosen by the bits that
    /// choose its first bucket.
    ///
    /// The table's own array, sized for its largest level (a lock per bucket up to 16,384),
    /// not the locks of the buckets in use: with only the locks of its initial buckets, a table
    /// grown far past its start would have its creators, and the moves they carry while it
    /// grows, queue behind one another's locks, and with more threads than cores behind
    /// preempted holders (`docs/design/growing.md`, "Creating keys under oversubscription";
    /// `cargo bench --bench creation_tail` measures the tail). The cost is 16 KiB at most.
    pub(super) fn stripe(&self, fp: u64) -> &AtomicBool {
        &self.locks[self.stripe_index(fp)]
    }

    /// Every creation lock with its move count (`snapshot.rs`).
    pub(super) fn stripes(&self) -> impl Iterator<Item = (&AtomicBool, &AtomicU32)> {
        self.locks.iter().zip(self.moves.iter())
    }

    /// The move count of `fp`'s creation lock (`moves.rs`).
    pub(super) fn moves(&self, fp: u64) -> &AtomicU32 {
        &self.moves[self.stripe_index(fp)]
    }

    fn stripe_index(&self, fp: u64) -> usize {
        let stripes = self.locks.len() as u64 - 1;
        ((fp >> FIRST_SHIFT) & stripes) as usize
    }

    /// Bytes of the creation locks and their move counts.
    pub(super) fn locks_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.locks) + std::mem::size_of_val(&*self.moves)
    }

    /// Growths started so far.
    pub(super) fn growths(&self) -> u64 {
        // Relaxed: a statistic.
        self.growths.load(Ordering::Relaxed)
    }
}

/// A growable table's candidate buckets of `fp` under `mask`.
#[inline(always)]
pub(super) fn candidates(fp: u64, mask: u64) -> (usize, usize) {
    let first = ((fp >> FIRST_SHIFT) & mask) as usize;
    let second = (fp.rotate_right(SECOND_ROTATE) & mask) as usize;
    (first, super::distinct(first, second, mask as usize + 1))
}

impl Table {
    fn growth(&self) -> Option<&Growth> {
        match &self.shape {
            Shape::Fixed { .. } => None,
            Shape::Grows(g) => Some(g),
        }
    }

    /// Growths started so far (0 for a fixed table).
    pub(crate) fn growths(&self) -> u64 {
        self.growth().map_or(0, Growth::growths)
    }

    /// The key's candidates at the level in use and, while the table grows, at the level it
    /// grows from (where a key not moved yet still is).
    pub(super) fn homes(&self, fp: u64) -> (Home, Option<Home>) {
        let Some(g) = self.growth() else {
            return (self.home(fp), None);
        };
        let level = g.level();
        let at = |mask: u64| {
            let (first, second) = candidates(fp, mask);
            Home {
                fp,
                tag: tag_of(fp),
                first,
                second,
            }
        };
        (at(level.mask), level.migrating.then(|| at(level.mask >> 1)))
    }

    /// Whether the table is migrating keys into the level whose bucket mask is `mask`.
    fn migrating_to(&self, mask: u64) -> bool {
        self.growth().is_some_and(|g| {
            g.level()
                == Level {
                    mask,
                    migrating: true,
                }
        })
    }

    /// What a creator of `fp` does before creating it in a growable table: while a migration
    /// is under way, split a chunk of it (every creation helps), and, while the new level holds
    /// keys in [`MIGRATION_FILL_TWENTIETHS`] of its slots or more, go on helping, or wait for
    /// the migration to end. Nothing in a fixed table.
    #[inline(always)]
    pub(super) fn help_before_creating<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q) {
        if let Shape::Grows(g) = &self.shape {
            self.help_growing(g, fp, now, quota);
        }
    }

    /// [`help_before_creating`](Self::help_before_creating) in a growable table. Out of line,
    /// so that a fixed table's slow path, which never calls it, stays as short as without it.
    /// Not under loom: the reserve is a policy, and reading its counters would only multiply
    /// the models' interleavings.
    #[inline(never)]
    fn help_growing<Q: QuotaKind>(&self, g: &Growth, fp: u64, now: u64, quota: &Q) {
        self.help_migrate(now, quota);
        #[cfg(not(funnel_loom))]
        {
            let mut round = 0;
            while g.migrating() && !self.holds_fewer_than(fp, MIGRATION_FILL_TWENTIETHS) {
                if !self.help_migrate(now, quota) {
                    spin(round);
                    round += 1;
                }
            }
        }
        #[cfg(funnel_loom)]
        let _ = (g, fp);
    }

    /// Whether a full table could still make room by growing: growable, and below its largest
    /// level or in the middle of a migration.
    pub(super) fn can_grow(&self) -> bool {
        self.growth().is_some_and(|g| {
            let level = g.level();
            level.migrating || level_of(level.mask) < g.max
        })
    }

    /// For the new key `fp` that found its candidates full in a table that can still grow:
    /// while a migration is open, splits the key's own candidates that are buckets of the old
    /// level (not split yet, they still hold keys that are leaving; splitting is idempotent, so
    /// doing it ahead of the helper that will claim them is harmless) and one claimed chunk;
    /// otherwise starts a growth; or, when another thread is starting one, waits a little
    /// (`round` counts the waits, for backing off). The caller looks again.
    pub(super) fn make_room<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q, round: &mut u32) {
        if let (home, Some(_)) = self.homes(fp) {
            let new_mask = self.growth().map_or(0, Growth::mask_in_use);
            let old_buckets = (new_mask >> 1) as usize + 1;
            for c in home.buckets().filter(|&c| c < old_buckets) {
                self.split(c, new_mask, now, quota);
            }
            if self.help_migrate(now, quota) {
                return;
            }
        } else if self.start_growth() {
            return;
        }
        spin(*round);
        *round += 1;
    }

    /// Starts a growth if none is under way and the table is below its largest level: step 1
    /// of the module doc.
    pub(super) fn start_growth(&self) -> bool {
        let Some(g) = self.growth() else {
            return false;
        };
        // Acquire: pairs with the previous grower's Release below.
        if g.growing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false; // another thread is starting one
        }
        // Acquire (`Growth::level`): pairs with the Release that settled the previous
        // migration, so its moves are all done before we publish a new one.
        let in_use = g.level();
        let level = level_of(in_use.mask);
        let start = !in_use.migrating && level < g.max;
        if start {
            // Relaxed: published to helpers by the Release store of `next` below, which they
            // Acquire before adding to `done`.
            g.done.store(0, Ordering::Relaxed);
            g.next.store(
                (u64::from(level + 1) << INDEX_BITS) | NOT_READY,
                Ordering::Relaxed,
            );
            // Release: pairs with the Acquire loads of the state, so a creator that reads the
            // new level under its lock places by it; the barrier below makes sure no creator
            // that read the old one is still placing.
            let next = Level {
                mask: (in_use.mask << 1) | 1,
                migrating: true,
            };
            g.state.store(next.encode(), Ordering::Release);
            for stripe in g.locks.iter() {
                // Taking each lock once: a creator that read the old level under it has unlocked
                // (Release), and our Acquire makes its binding visible here, so to every helper
                // that Acquires `next` after our Release store below.
                drop(lock(stripe));
            }
            // Release: helpers claim chunks with an Acquire RMW of `next`, and then see every
            // binding made before the barrier, and `done` reset.
            g.next
                .store(u64::from(level + 1) << INDEX_BITS, Ordering::Release);
            // Relaxed: a statistic.
            g.growths.fetch_add(1, Ordering::Relaxed);
        }
        // Release: pairs with the next grower's Acquire above.
        g.growing.store(false, Ordering::Release);
        start
    }
}

/// The level whose bucket mask is `mask`.
fn level_of(mask: u64) -> u32 {
    (mask + 1).trailing_zeros()
}

#[cfg(all(test, not(funnel_loom)))]
mod tests {
    use super::super::bucket::SLOTS_PER_BUCKET;
    use super::*;
    use crate::state;

    /// The creation locks are sized by the largest level, capped at 2^14, never by the
    /// initial one: a table started small keeps few locks otherwise (`Growth::stripe`).
    #[test]
    fn a_growable_table_has_a_lock_per_bucket_of_its_largest_size_up_to_16_384() {
        assert_eq!(Growth::new(8, 21).locks.len(), 1 << 14);
        assert_eq!(Growth::new(8, 11).locks.len(), 1 << 11);
        assert_eq!(Growth::new(0, 0).locks.len(), 1);
        let g = Growth::new(8, 21);
        assert_eq!(g.locks_bytes(), 5 * (16 << 10));
        // Keys differing only above the lock bits share a lock; below them, they do not.
        let fp = 0xABCD_EF01_2345_6789;
        assert!(std::ptr::eq(g.stripe(fp), g.stripe(fp ^ (1 << 40))));
        assert!(!std::ptr::eq(
            g.stripe(fp),
            g.stripe(fp ^ (1 << FIRST_SHIFT))
        ));
    }

    /// A fingerprint whose candidate buckets are `first` and `second` at four buckets (so
    /// `first & 1` and `second & 1` at two), with tag `tag`.
    const fn fp(first: u64, second: u64, tag: u64) -> u64 {
        (first << FIRST_SHIFT) | (second << SECOND_ROTATE) | tag
    }

    /// A table of 64 buckets growing to 128 (a migration of 64 / CHUNK = 8 chunks), built for a
    /// creator that finds its candidates full in the middle of the migration: two buckets
    /// `recovering` full of keys whose funnels recover at time 10, then, for each bucket pair of
    /// `in_debt`, a bucket's worth of keys with those candidates in debt until time 500 (each
    /// pair's first bucket is filled when its second one is full), the growth started. Every
    /// key stays where it is at 128 buckets. Returns the table and the keys in debt.
    fn crowded_migration(recovering: (u64, u64), in_debt: &[(u64, u64)]) -> (Table, Vec<u64>) {
        let table = Table::growable(64 * 7, 128 * 7, crate::WhenFull::Deny, false).unwrap();
        let slots = SLOTS_PER_BUCKET as u64;
        let recover = (0..2 * slots).map(|i| fp(recovering.0, recovering.1, 0x10 + i));
        for f in recover {
            assert!(matches!(
                table.create(f, 0, 10, &unit_quota()),
                super::super::create::Created::Bound
            ));
        }
        let mut keys = Vec::new();
        for (n, &(first, second)) in in_debt.iter().enumerate() {
            for i in 0..slots {
                let f = fp(first, second, 0x20 + 0x10 * n as u64 + i);
                assert!(matches!(
                    table.create(f, 0, 500, &unit_quota()),
                    super::super::create::Created::Bound
                ));
                keys.push(f);
            }
        }
        assert!(table.start_growth());
        (table, keys)
    }

    /// How many of `keys` `table` holds in bucket `b`.
    fn held_in(table: &Table, keys: &[u64], b: usize) -> usize {
        keys.iter()
            .filter(|&&f| {
                table
                    .locate(f)
                    .is_some_and(|found| std::ptr::eq(found.bucket, &table.buckets[b]))
            })
            .count()
    }

    /// Limit 1,000 units, one every nanosecond: at time 0 a funnel's arrival time is its debt.
    fn unit_quota() -> crate::quota::Quota {
        crate::quota::Quota::per_period(1, std::time::Duration::from_nanos(1))
            .unwrap()
            .with_limit(1_000)
            .unwrap()
    }

    /// Creates `new` (arrival time 600) at time 20 in a [`crowded_migration`] and checks that it
    /// was bound with the migration still open, nobody evicted or turned away, and every key in
    /// debt still holding its debt.
    fn create_in_the_middle(table: &Table, new: u64, in_debt: &[u64]) {
        assert!(matches!(
            table.create(new, 20, 600, &unit_quota()),
            super::super::create::Created::Bound
        ));
        assert!(
            table.homes(new).1.is_some(),
            "the creation went on splitting until the migration ended"
        );
        let stats = table.stats();
        assert_eq!(
            (stats.forced_evictions, stats.turned_away),
            (0, 0),
            "{stats:?}"
        );
        let tat = |fp: u64| table.locate(fp).map(|found| state::tat_of(found.word));
        assert_eq!(tat(new), Some(600));
        for &f in in_debt {
            assert_eq!(tat(f), Some(500), "a key in debt lost it");
        }
    }

    /// A new key whose two candidates stay full of funnels in debt once split (their keys
    /// belong there at the new level too) makes room as a migration's mover does, by a cuckoo
    /// step, instead of helping the migration chunk after chunk until it ends, which would make
    /// one request split the whole old level itself (the tail `growth_latency` in the lab
    /// crate measures).
    #[test]
    fn a_creation_whose_split_candidates_stay_full_does_not_finish_the_migration_itself() {
        // Buckets 5 and 6 recover; keys of 0 or 5 fill 0, keys of 1 or 0 fill 1 (`distinct`: a
        // key's two buckets differ). At time 20 one of bucket 0's keys can move to 5.
        let (table, in_debt) = crowded_migration((5, 6), &[(0, 5), (1, 0)]);
        create_in_the_middle(&table, fp(0, 1, 0x70), &in_debt);
        while table.help_migrate(20, &unit_quota()) {}
        table.check_invariants().unwrap();
    }

    /// The same creator when no key of its candidates has room in its other bucket, but a key of
    /// one of those other buckets has room in its own: two cuckoo steps (the onward key moves
    /// first, then the first key into the slot it freed), every key keeping its debt. Before,
    /// the creation went on splitting until the migration ended, and then, at the table's
    /// largest size, where a creator takes one step only, was turned away.
    #[test]
    fn a_creation_in_a_migration_makes_room_by_two_cuckoo_steps() {
        // Buckets 9 and 10 recover; keys of 5 or 9 fill 5, keys of 0 or 5 fill 0, keys of 1 or
        // 0 fill 1. At time 20 bucket 0's keys can go only to 5, full, and bucket 1's only to
        // 0; bucket 5's keys can go to 9.
        let (table, in_debt) = crowded_migration((9, 10), &[(5, 9), (0, 5), (1, 0)]);
        create_in_the_middle(&table, fp(0, 1, 0x70), &in_debt);
        assert_eq!(
            held_in(&table, &in_debt[..SLOTS_PER_BUCKET], 9),
            1,
            "one key of bucket 5 should have moved on to 9"
        );
        while table.help_migrate(20, &unit_quota()) {}
        table.check_invariants().unwrap();
    }

    /// The creator's fall-back when neither search makes room: its candidates are full of keys
    /// in debt whose other bucket is the other candidate, so no cuckoo step, one or two, can move
    /// any of them. It helps the migration on (the only way left that may free a slot), and
    /// once the migration ends, at the table's largest size, `WhenFull` decides: here it is
    /// turned away, told when the least indebted candidate recovers, with every key keeping its
    /// debt and nobody evicted.
    #[test]
    fn a_creation_no_cuckoo_step_can_help_helps_the_migration_to_its_end_then_obeys_when_full() {
        use super::super::create::Created;
        // Keys of 0 or 1 fill 0 and 1 (their two candidates); buckets 5 and 6 recover.
        let (table, in_debt) = crowded_migration((5, 6), &[(0, 1), (1, 0)]);
        assert_eq!(
            (held_in(&table, &in_debt, 0), held_in(&table, &in_debt, 1)),
            (SLOTS_PER_BUCKET, SLOTS_PER_BUCKET)
        );
        let new = fp(0, 1, 0x70);
        assert!(table.homes(new).1.is_some(), "the migration is open");
        let created = table.create(new, 20, 600, &unit_quota());
        // The least indebted candidate (arrival time 500) recovers 480 ns after time 20.
        assert!(
            matches!(created, Created::TurnedAway(480)),
            "not turned away"
        );
        assert!(
            table.homes(new).1.is_none(),
            "the migration should have ended"
        );
        assert!(!table.can_grow(), "the table is at its largest size");
        let stats = table.stats();
        assert_eq!(
            (stats.forced_evictions, stats.turned_away),
            (0, 1),
            "{stats:?}"
        );
        assert!(
            table.locate(new).is_none(),
            "a key turned away holds no slot"
        );
        for &f in &in_debt {
            assert_eq!(
                table.locate(f).map(|found| state::tat_of(found.word)),
                Some(500),
                "a key in debt lost it"
            );
        }
        table.check_invariants().unwrap();
    }

    /// The last resort of a migration's move, which no stress test reaches: the key to move
    /// finds both its new buckets full of funnels in debt that no cuckoo step can move (each of
    /// their keys' other bucket is the other full target), and in the end evicts the least
    /// indebted of them, counted as a forced eviction, even in a table whose `WhenFull` turns
    /// new keys away. The moved
    /// key keeps its debt, the migration settles, and no key is bound twice. (That the
    /// eviction waits for the last try is `move_key`'s loop; this test does not time it.)
    #[test]
    fn a_move_with_no_room_after_its_last_try_evicts_the_least_indebted_and_counts_it() {
        use super::super::create::Created;
        use crate::quota::Quota;
        use crate::WhenFull;
        use std::time::Duration;

        let slots = SLOTS_PER_BUCKET;
        let table = Table::growable(2 * slots, 4 * slots, WhenFull::Deny, false).unwrap();
        // Limit 1,000 units, one every nanosecond: at time 0 a funnel's arrival time is its debt.
        let quota = Quota::per_period(1, Duration::from_nanos(1))
            .unwrap()
            .with_limit(1_000)
            .unwrap();
        // K lives in bucket 0 or 1 of the two, and belongs in bucket 2 or 3 of the four.
        let k = fp(2, 3, 0x11);
        assert!(matches!(table.create(k, 0, 500, &quota), Created::Bound));
        assert!(table.start_growth());
        // Fill buckets 2 and 3 of the new level, before any chunk is split, with keys whose
        // candidates are those two buckets only; the least indebted (arrival time 100) is the
        // one K's move must evict.
        let fill: Vec<u64> = (0..2 * slots as u64)
            .map(|i| fp(2 + i % 2, 3 - i % 2, 0x20 + i))
            .collect();
        for (i, &f) in fill.iter().enumerate() {
            let tat = 100 + 10 * i as u64;
            assert!(matches!(table.create(f, 0, tat, &quota), Created::Bound));
        }
        assert_eq!(table.stats().forced_evictions, 0);

        while table.help_migrate(0, &quota) {}

        assert!(table.homes(k).1.is_none(), "the migration did not settle");
        let stats = table.stats();
        assert_eq!(
            (stats.forced_evictions, stats.moved_keys),
            (1, 1),
            "{stats:?}"
        );
        let tat = |fp: u64| table.locate(fp).map(|found| state::tat_of(found.word));
        assert_eq!(tat(k), Some(500), "K lost its debt in the move");
        assert_eq!(
            tat(fill[0]),
            None,
            "the least indebted key should have been evicted"
        );
        for (i, &f) in fill.iter().enumerate().skip(1) {
            assert_eq!(tat(f), Some(100 + 10 * i as u64), "key {i} of the fill");
        }
        table.check_invariants().unwrap();
    }
}
