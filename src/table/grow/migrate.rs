//! Moving keys: a migration's split of the old level's buckets (steps 2 and 3 of a growth,
//! in the parent module's doc), the move itself, a request's nudge of its own key, and the
//! cuckoo step's move (`cuckoo.rs`), which is the same move into a free slot only.

use super::super::bucket::{Bucket, SLOTS_PER_BUCKET};
use super::super::create::{lock, try_lock, BindAs, Placement};
use super::super::lookup::{complete, Found};
use super::super::moves::Moving;
use super::super::tags::tag_of;
use super::super::{Home, Table};
use super::{candidates, Level, CHUNK, FIRST_FP, INDEX_BITS, INDEX_MASK, MIGRATE_TRIES};
use crate::quota_kind::QuotaKind;
use crate::state::{self, SlotState};
use crate::sync::{spin, Ordering};

impl Table {
    /// Splits one chunk of the old level's buckets (step 2), if a migration is under way and
    /// has chunks left to claim; the helper that finishes the last one settles the new level
    /// (step 3). True when it split something.
    pub(in crate::table) fn help_migrate<Q: QuotaKind>(&self, now: u64, quota: &Q) -> bool {
        let Some(g) = self.growth() else {
            return false;
        };
        // Relaxed: a cheap look before the RMW below, which is what claims.
        let peek = g.next.load(Ordering::Relaxed);
        if !has_chunk(peek) {
            return false;
        }
        // AcqRel: Acquire pairs with the grower's Release store after its barrier (the bindings
        // it made visible, and `done` reset); the claim itself only needs to be unique.
        let claim = g.next.fetch_add(CHUNK, Ordering::AcqRel);
        if !has_chunk(claim) {
            return false;
        }
        // The claim names its level: a helper that read an older state still splits the
        // buckets of the migration it claimed from.
        let level = (claim >> INDEX_BITS) as u32;
        let old = 1u64 << (level - 1);
        let start = claim & INDEX_MASK;
        let end = (start + CHUNK).min(old);
        let new_mask = (1u64 << level) - 1;
        for b in start..end {
            self.split(b as usize, new_mask, now, quota);
        }
        let split = (end - start) as usize;
        // AcqRel: Release publishes our moves to the helper that finishes; Acquire makes every
        // other helper's moves visible to us if we are that helper.
        let done = g.done.fetch_add(split, Ordering::AcqRel) + split;
        if done as u64 == old {
            // Release: readers and creators that Acquire the settled state see every move, so
            // they stop looking at the old level only once nothing is left there.
            let settled = Level {
                mask: new_mask,
                migrating: false,
            };
            g.state.store(settled.encode(), Ordering::Release);
        }
        true
    }

    /// Moves every live key of old bucket `b` whose candidates under `new_mask` do not include
    /// `b`.
    pub(super) fn split<Q: QuotaKind>(&self, b: usize, new_mask: u64, now: u64, quota: &Q) {
        let bucket = &self.buckets[b];
        for slot in 0..SLOTS_PER_BUCKET {
            // Acquire, both: as a reader's (`lookup::validate`); `move_key` validates again under
            // the key's lock.
            let fp = bucket.keys[slot].load(Ordering::Acquire);
            if fp < FIRST_FP || !state::is_live(bucket.words[slot].load(Ordering::Acquire)) {
                continue; // no key, or a slot being bound, moved, or dead
            }
            let (first, second) = candidates(fp, new_mask);
            if first != b && second != b {
                self.move_key(fp, b, slot, new_mask, now, quota);
            }
        }
    }

    /// Moves the key `fp` out of slot `slot` of old bucket `b` into one of its candidates under
    /// `new_mask`, or drops it if its funnel has recovered by `now` (a recovered funnel is an
    /// absent key). The parent module's doc (`grow/mod.rs`) gives the steps.
    fn move_key<Q: QuotaKind>(
        &self,
        fp: u64,
        b: usize,
        slot: usize,
        new_mask: u64,
        now: u64,
        quota: &Q,
    ) {
        let (first, second) = candidates(fp, new_mask);
        let home = Home {
            fp,
            tag: tag_of(fp),
            first,
            second,
        };
        for round in 1..=MIGRATE_TRIES {
            {
                // Under the key's lock no creator or other mover of `fp` runs; the source may
                // still be updated by its readers, reset, or evicted by a creator of another
                // key.
                let _lock = lock(self.stripe(fp));
                if !self.migrating_to(new_mask) {
                    // A split made ahead of its chunk (`make_room`) can outlive its migration:
                    // the chunk's helper has moved every key that had to go, and this one is
                    // where a later level wants it.
                    return;
                }
                let evict = round == MIGRATE_TRIES;
                match self.relocate(fp, b, slot, &home, now, quota, Mode::Migrate { evict }) {
                    // Moved or dropped; or gone: evicted by a creator of another key, or moved
                    // out already by a cuckoo step this move made for room. Nothing to move.
                    Relocated::Done | Relocated::Gone => return,
                    Relocated::NoRoom => {}
                }
            }
            // No room yet among the key's candidates: wait, without the key's lock (another
            // mover's cuckoo step may need it), and try again.
            spin(round);
        }
    }

    /// The move itself, under `fp`'s creation lock (held by the caller): from slot `slot` of
    /// bucket `b` to a slot of `to`'s buckets, or a drop if the funnel has recovered by `now`.
    /// Nothing moves when the source no longer holds the key ([`Relocated::Gone`]) or no target
    /// slot can be had ([`Relocated::NoRoom`]: every mode but a migration's last try,
    /// `Mode::Migrate { evict: true }`, which evicts rather than fail, unless the key has
    /// reached one of its targets meanwhile).
    // The move's source, target and who moves: one call site each.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::table) fn relocate<Q: QuotaKind>(
        &self,
        fp: u64,
        b: usize,
        slot: usize,
        to: &Home,
        now: u64,
        quota: &Q,
        mode: Mode,
    ) -> Relocated {
        // Counted from before its first write to after its last (`moves.rs`); we hold the key's
        // creation lock, as every move does.
        let _moving = Moving::begin(self.moves(fp));
        let source = &self.buckets[b];
        let mut target: Option<Found<'_>> = None;
        loop {
            let Some(word) = live_word(source, slot, fp) else {
                // Evicted (or being evicted) by a creator of another key: nothing to move.
                if let Some(target) = target {
                    self.abandon(fp, target);
                }
                return Relocated::Gone;
            };
            let tat = state::tat_of(word);
            if quota.expiry(tat) > now && target.is_none() {
                match self.pending_target(to, now, quota, mode) {
                    Some(placed) => target = Some(placed),
                    None => return Relocated::NoRoom,
                }
                continue; // the source may have changed while we placed the target
            }
            // Release: a reader or helper that Acquires the sealed word sees the target's key
            // and PENDING word, stored before. Relaxed on failure: we read the word again.
            if source.words[slot]
                .compare_exchange(
                    word,
                    state::moved(tat),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue; // updated meanwhile: seal the new value
            }
            if let Some(target) = target {
                complete(target, tat);
            }
            // The move is over (the target is live; no reader needs the source any more): the
            // slot is dead, and free. Nobody else writes a sealed word, so a store: no CAS ever
            // expects a MOVED value (creators CAS EMPTY, DEAD or LIVE words, updates and resets
            // LIVE ones, completers and `abandon` PENDING ones), and the only other plain stores
            // are a creator's, to a slot it holds RESERVED. Release: a creator whose RESERVED CAS
            // reads the dead word (Acquire) binds after the move, and its key store comes after
            // the leaving binding's (`create::bind`): that store happened before our Acquire
            // validation of it (`live_word`), and was made under the key's creation lock, which
            // we hold. A Relaxed store fails the model
            // `a_creator_never_takes_the_sealed_source_of_a_move_in_progress`.
            source.words[slot].store(state::dead(state::gen_of(word)), Ordering::Release);
            let shard = self.shard(fp);
            // Relaxed: statistics.
            shard.vacated.fetch_add(1, Ordering::Relaxed);
            let counter = if target.is_some() {
                &shard.moved
            } else {
                &shard.dropped
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return Relocated::Done;
        }
    }

    /// While the table grows: if the key `fp` is still in a bucket of the old level that is not
    /// one of its candidates at the new one, moves it now, if its creation lock is free and a
    /// slot is free, so its next request is a hit on the hot path again. Never waits: a request
    /// for a key that is present must not depend on another thread (updates stay lock-free);
    /// the migration moves whatever is left.
    pub(in crate::table) fn nudge<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q) {
        let (home, Some(old)) = self.homes(fp) else {
            return;
        };
        for b in old
            .buckets()
            .filter(|&b| b != home.first && b != home.second)
        {
            for slot in 0..SLOTS_PER_BUCKET {
                if live_word(&self.buckets[b], slot, fp).is_some() {
                    if let Some(_lock) = try_lock(self.stripe(fp)) {
                        self.relocate(fp, b, slot, &home, now, quota, Mode::Nudge);
                    }
                    return;
                }
            }
        }
    }

    /// Reserves a slot among `home`'s candidates and binds it PENDING for the key: the target of
    /// a move. With no free slot, [`Mode::Migrate`] first tries to make one by moving a key out
    /// of a candidate bucket to its other candidate (one cuckoo step, `make_room_for`, then
    /// two, `make_room_two_steps`); if no key can go, it answers `None`, or on its last try
    /// (`evict`) evicts the least indebted live one (a migration's move cannot fail for ever),
    /// whatever the table's [`WhenFull`](crate::WhenFull). It also waits out slots that other
    /// threads are binding. The other modes neither evict nor wait: `None`.
    pub(super) fn pending_target<Q: QuotaKind>(
        &self,
        home: &Home,
        now: u64,
        quota: &Q,
        mode: Mode,
    ) -> Option<Found<'_>> {
        let mut round = 0;
        loop {
            let victim = match (self.place(home, now, quota), mode) {
                (Placement::Free(victim), _) => victim,
                (Placement::Full(least, _), Mode::Migrate { evict }) => {
                    // One cuckoo step, then two, before giving up (and, as a last resort,
                    // evicting).
                    if self.make_room_for(home.fp, now, quota)
                        || self.make_room_two_steps(home.fp, now, quota)
                    {
                        continue;
                    }
                    if !evict {
                        return None;
                    }
                    // The second of two steps may have moved this very key on (a resident of an
                    // old bucket, its lock ours already) into one of its targets. It then needs
                    // no target, and evicting a key in debt for one would lose that key's debt
                    // for nothing; `relocate` finds the source gone on its next look.
                    if Self::find(self.probe(home)).is_some() {
                        return None;
                    }
                    least
                }
                (Placement::Busy, Mode::Migrate { .. }) => {
                    spin(round);
                    round += 1;
                    continue;
                }
                (Placement::Full(..) | Placement::Busy, Mode::Nudge | Mode::Cuckoo) => return None,
            };
            if let Some(word) = self.bind(home.fp, victim, BindAs::Pending) {
                return Some(Found {
                    bucket: victim.bucket,
                    slot: victim.slot,
                    word,
                });
            }
        }
    }

    /// Gives up a move whose source was evicted before it could be sealed: the pending target,
    /// which no helper can complete (no sealed source of the key exists), becomes a dead slot.
    fn abandon(&self, fp: u64, target: Found<'_>) {
        let Found { bucket, slot, word } = target;
        let gen = state::gen_of(word);
        // Release: as the DEAD word of a finished move (`relocate`), so a creator that takes
        // the slot binds after our key store. (This RMW also continues the release sequence of
        // our own Release PENDING store, which came after that key store; the loom model
        // `an_abandoned_target_taken_by_another_creator_keeps_every_funnel` fails only if this
        // write is a plain Relaxed store.) It cannot fail: only a helper that saw this key's
        // sealed source, still sealed after it read this target, could change a pending word
        // (`lookup::locate`), and there is none: an earlier move's source is dead by then.
        let freed = bucket.words[slot].compare_exchange(
            word,
            state::dead(gen),
            Ordering::Release,
            Ordering::Relaxed,
        );
        debug_assert!(freed.is_ok(), "a pending target changed under its mover");
        // Relaxed: a statistic.
        self.shard(fp).vacated.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a [`Table::relocate`] ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::table) enum Relocated {
    /// Moved, or dropped because its funnel had recovered: the source is sealed and vacated.
    Done,
    /// The source no longer held the key live: evicted by a creator of another key (or being
    /// evicted), or moved out already by a cuckoo step that a move of it made for room. Any
    /// target already placed was abandoned.
    Gone,
    /// No target was placed: no slot could be had and the mode may not evict, or the cuckoo
    /// steps tried for room moved this key itself into one of its targets. They may also have
    /// moved other keys; the caller's next try sees where the key is.
    NoRoom,
}

/// Who moves a key, which decides what a move may do when its target buckets are full.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::table) enum Mode {
    /// A migration's split (a creator's help, holding the key's lock by waiting for it): must
    /// move the key in the end, so may make room by one or two cuckoo steps, waits out slots
    /// other threads are binding, and, only when `evict` (its last try), evicts.
    Migrate {
        /// Whether to evict the least indebted candidate when no room can be made.
        evict: bool,
    },
    /// A request moving its own key out of the old level (holding the key's lock only if it
    /// was free): moves it if a slot is free, else leaves it for the migration.
    Nudge,
    /// One cuckoo step (`cuckoo.rs`), a creator's or a migration's: into a free slot only.
    Cuckoo,
}

/// The live word of slot `slot` of `bucket` while it is bound to `fp`.
pub(super) fn live_word(bucket: &Bucket, slot: usize, fp: u64) -> Option<u64> {
    // Acquire, all three: the reader's validation (`lookup::validate`).
    if bucket.keys[slot].load(Ordering::Acquire) != fp {
        return None;
    }
    let word = bucket.words[slot].load(Ordering::Acquire);
    let still = bucket.keys[slot].load(Ordering::Acquire) == fp;
    (still && matches!(state::decode(word), SlotState::Live { .. })).then_some(word)
}

/// Whether a claim value of `next` names a bucket of its migration's old level.
fn has_chunk(claim: u64) -> bool {
    let level = (claim >> INDEX_BITS) as u32;
    level >= 1 && (claim & INDEX_MASK) < (1u64 << (level - 1))
}
