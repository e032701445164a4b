//! Creating a key: the locked slow path. A creator takes the key's creation lock (its stripe),
//! looks the key up again, picks a victim slot (EMPTY, then recovered, then [`WhenFull`] or a
//! growth), reserves it, and binds the key (`docs/design/slot-protocol.md`). A move
//! while the table grows (`grow/`) places its key with the same victim choice.

use super::bucket::{Bucket, SLOTS_PER_BUCKET};
use super::tags::tag_of;
use super::{Home, Table};
use crate::quota_kind::QuotaKind;
use crate::state::{self, SlotState};
use crate::sync::{spin, AtomicBool, Ordering};

/// What a new key does when every slot it may use holds a funnel still in debt, and the table
/// cannot grow (a fixed table, or a growable one at its maximum capacity).
///
/// # Examples
///
/// ```
/// use funnel::{Limiter, Quota, WhenFull};
///
/// let limiter = Limiter::<str>::builder(Quota::per_second(10)?)
///     .capacity(1_000)
///     .when_full(WhenFull::Deny)
///     .build()?;
/// assert!(limiter.check("client-1").is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WhenFull {
    /// Evict the candidate with the smallest arrival time: the funnel whose loss admits the
    /// fewest extra requests (one-shot flood keys go first, heavily limited keys last), and
    /// count it in [`Stats::forced_evictions`](crate::Stats::forced_evictions). The default.
    #[default]
    Evict,
    /// Turn the new key away ([`Outcome::TurnedAway`](crate::Outcome::TurnedAway),
    /// fail-closed) and count it in [`Stats::turned_away`](crate::Stats::turned_away). Beware:
    /// under a key flood this locks out new legitimate users.
    Deny,
    /// Let the new key's request through as a fresh funnel would, without recording it
    /// ([`Outcome::AllowedUntracked`](crate::Outcome::AllowedUntracked), fail-open), and count
    /// it in [`Stats::admitted_untracked`](crate::Stats::admitted_untracked).
    Allow,
}

/// How a creation attempt ended.
pub(super) enum Created {
    /// The key now owns a slot and the request was charged to it.
    Bound,
    /// A racing creator bound the key first: update it instead.
    Exists,
    /// Table full, [`WhenFull::Deny`]: ns until the least indebted candidate recovers.
    TurnedAway(u64),
    /// Table full, [`WhenFull::Allow`].
    Untracked,
}

/// A slot a creator may take, with the word it was seen holding and the generation its next
/// binding counts from.
#[derive(Clone, Copy)]
pub(super) struct Victim<'a> {
    pub(super) bucket: &'a Bucket,
    /// The slot's index in its bucket.
    pub(super) slot: usize,
    word: u64,
    /// The generation the slot's last binding had (0 if none).
    gen: u64,
    /// How taking it frees it.
    taken: Taken,
}

/// How the slot a creator takes was freed, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Taken {
    /// EMPTY, or a dead slot left by a move: no key loses anything, one more slot holds a key.
    Unbound,
    /// A funnel that had fully recovered: its key loses nothing.
    Recovered,
    /// A funnel still in debt, evicted.
    Forced,
    /// Not taken: a key sealed in the middle of a move, which counts when choosing a victim
    /// but is never one (`place` waits for the move instead).
    Moving,
}

/// The outcome of looking for a slot among a key's candidates.
pub(super) enum Placement<'a> {
    /// A free slot (EMPTY, dead, or recovered).
    Free(Victim<'a>),
    /// None free; the least indebted live slot (the earliest to expire), the victim of last
    /// resort, and when it expires.
    Full(Victim<'a>, u64),
    /// Every candidate is being bound or moved by another thread this instant.
    Busy,
}

/// What a reserved slot becomes.
pub(super) enum BindAs {
    /// A new key's funnel with this arrival time.
    Live(u64),
    /// A move's target, pending until its source is sealed.
    Pending,
}

/// Free slots of one candidate bucket, as seen by a creator.
#[derive(Default)]
struct Scan<'a> {
    /// How many slots are free (EMPTY, dead, or recovered).
    free: usize,
    /// The one to take: the first unbound slot if any (so a recovered key keeps its slot while
    /// there is room, and need not be created again on its next request), else the first
    /// recovered one.
    slot: Option<Victim<'a>>,
}

impl Table {
    /// Creates the key `fp` with arrival time `new_tat` (its first request, charged), unless a
    /// racing creator already has.
    #[inline(always)]
    pub(super) fn create<Q: QuotaKind>(
        &self,
        fp: u64,
        now: u64,
        new_tat: u64,
        quota: &Q,
    ) -> Created {
        if self.prefer.first() {
            if let Some(created) = self.create_preferred(fp, new_tat) {
                return created;
            }
        }
        self.create_placed(fp, now, new_tat, quota)
    }

    /// While the table is sparse: creates the key `fp` in its preferred slot if that slot is
    /// unbound (EMPTY, or dead after a move), over two-choice placement (`preferred.rs`), or
    /// finds that a racing creator already has; `None` leaves the key to
    /// [`create_placed`](Self::create_placed). A function of its own, apart from `place` and
    /// `create_placed`, so that the two-choice path is compiled as it would be without it.
    #[inline(never)]
    fn create_preferred(&self, fp: u64, new_tat: u64) -> Option<Created> {
        let _lock = lock(self.stripe(fp));
        // As in `create_placed`: the lock's Acquire shows a racing creator's binding.
        if self.locate_held(fp).is_some() {
            return Some(Created::Exists);
        }
        let (home, from) = self.homes(fp);
        if from.is_some() {
            // Moving keys between levels: `create_placed` knows how to place them meanwhile.
            return None;
        }
        let bucket = &self.buckets[home.first];
        let slot = super::preferred::slot(fp);
        // Relaxed: as in `scan`, the RESERVED CAS validates the word.
        let word = bucket.words[slot].load(Ordering::Relaxed);
        if !matches!(
            state::decode(word),
            SlotState::Empty | SlotState::Dead { .. }
        ) {
            return None;
        }
        let victim = Victim {
            bucket,
            slot,
            word,
            gen: state::gen_of(word),
            taken: Taken::Unbound,
        };
        self.bind(fp, victim, BindAs::Live(new_tat))
            .map(|_| Created::Bound)
    }

    /// [`create`](Self::create) by two-choice placement.
    fn create_placed<Q: QuotaKind>(&self, fp: u64, now: u64, new_tat: u64, quota: &Q) -> Created {
        let mut round = 0;
        // Whether this creation last made room by helping a migration (`make_room`, which then
        // split its candidates of the old level).
        let mut helped = false;
        loop {
            let lock = lock(self.stripe(fp));
            // A racing creator of the same key may have finished while we waited: the lock's
            // Acquire makes its binding (key, tag and word) visible here.
            if self.locate_held(fp).is_some() {
                return Created::Exists;
            }
            // The level is read under the lock: a growth that starts later waits for our unlock
            // before moving anything (`grow/`, the barrier), so it sees what we bind.
            let (home, from) = self.homes(fp);
            let victim = match self.place(&home, now, quota) {
                Placement::Free(victim) => victim,
                Placement::Full(least, expiry) => {
                    // Both candidate buckets are full of funnels in debt. First try to make room
                    // by moving one of their keys to its other candidate bucket (one cuckoo
                    // step, `cuckoo.rs`), which evicts nobody and grows nothing, then look
                    // again. While the table moves keys between levels, not before the
                    // migration has split this key's candidates (`make_room`, below): until
                    // then their keys may still be leaving, and the split frees room cheaper.
                    if from.is_none()
                        && self.worth_a_cuckoo_step(fp)
                        && self.make_room_for(fp, now, quota)
                    {
                        continue;
                    }
                    // In the middle of a migration, candidates still full once split hold keys
                    // that stay there at the new level too: no later chunk of the migration
                    // frees them, and helping on until it ends would make one request split the
                    // whole old level itself. Make room as the migration's movers do:
                    // one cuckoo step, then two (the new level is about half full).
                    if from.is_some()
                        && helped
                        && (self.make_room_for(fp, now, quota)
                            || self.make_room_two_steps(fp, now, quota))
                    {
                        continue;
                    }
                    if self.can_grow() {
                        // A table that can still grow never evicts a key in debt: make room
                        // (or wait for the growth under way) and look again. Growing takes
                        // every creation lock in turn: never while holding one.
                        drop(lock);
                        self.make_room(fp, now, quota, &mut round);
                        helped = from.is_some();
                        continue;
                    }
                    if from.is_some() {
                        // The migration we looked in has ended since, at the table's largest
                        // size: look again in the settled table, where a cuckoo step may still
                        // make room, before evicting or turning anyone away. Without this a
                        // creator that saw the migration (and so skipped the step above) evicted
                        // a key in debt that one step would have spared (loom model
                        // `a_creators_cuckoo_step_in_a_migration_racing_a_split_into_the_same_bucket_keeps_every_debt`).
                        // Once: no growth starts at the largest size.
                        continue;
                    }
                    match self.when_full {
                        WhenFull::Evict => least,
                        WhenFull::Deny => return self.turn_away(fp, expiry - now),
                        WhenFull::Allow => return self.admit_untracked(fp),
                    }
                }
                Placement::Busy => {
                    drop(lock);
                    spin(round);
                    round += 1;
                    continue;
                }
            };
            if self.bind(fp, victim, BindAs::Live(new_tat)).is_some() {
                return Created::Bound;
            }
            // The slot moved under us (an update or another creator got there first): choose
            // again.
        }
    }

    fn turn_away(&self, fp: u64, retry: u64) -> Created {
        // Relaxed: counters are statistics; they order nothing.
        self.shard(fp).turned_away.fetch_add(1, Ordering::Relaxed);
        Created::TurnedAway(retry)
    }

    fn admit_untracked(&self, fp: u64) -> Created {
        // Relaxed: a statistic, as above.
        self.shard(fp).untracked.fetch_add(1, Ordering::Relaxed);
        Created::Untracked
    }

    /// Two-choice placement: the candidate bucket of `home` with more free slots (EMPTY, dead,
    /// or recovered) offers its slot, the first bucket on a tie, except that an unbound slot
    /// in either bucket comes before a recovered one in the other; the least indebted live
    /// slot of either is the victim of last resort. (While the table is sparse, a new key
    /// first tries its preferred slot: [`create_preferred`](Self::create_preferred).)
    ///
    /// Unbound first, across both buckets as within one (`Scan::slot`): a recovered key
    /// evicted while there was room elsewhere is created again on its next request, through
    /// the lock and this scan. Under an allowing quota (funnels recover between a key's
    /// requests), counting recovered slots like unbound ones across the buckets left many
    /// times more keys absent after a prefill, and evicted many times more recovered keys,
    /// than taking unbound slots first (docs/design/table.md, two-choice placement).
    pub(super) fn place<Q: QuotaKind>(&self, home: &Home, now: u64, quota: &Q) -> Placement<'_> {
        let mut least: Option<(Victim<'_>, u64)> = None;
        let first = self.scan(&self.buckets[home.first], now, quota, &mut least);
        let second = if home.second == home.first {
            Scan::default()
        } else {
            self.scan(&self.buckets[home.second], now, quota, &mut least)
        };
        let unbound = |scan: &Scan<'_>| matches!(scan.slot, Some(v) if v.taken == Taken::Unbound);
        let free = if unbound(&first) != unbound(&second) {
            if unbound(&first) {
                first.slot
            } else {
                second.slot
            }
        } else if second.free > first.free {
            second.slot
        } else {
            first.slot
        };
        match (free, least) {
            (Some(victim), _) => Placement::Free(victim),
            // The least indebted funnel is a key in the middle of a move: wait for the move to
            // end rather than evict a more indebted key (docs/design/table.md, "Lazy eviction").
            (None, Some((victim, _))) if victim.taken == Taken::Moving => Placement::Busy,
            (None, Some((victim, expiry))) => Placement::Full(victim, expiry),
            (None, None) => Placement::Busy,
        }
    }

    /// Reserves `victim` and binds `fp` to it as `bind`: the RESERVED CAS, the key, the tag,
    /// then the live (or pending) word, which it returns. `None` when the slot changed since it
    /// was chosen.
    pub(super) fn bind(&self, fp: u64, victim: Victim<'_>, bind: BindAs) -> Option<u64> {
        let Victim {
            bucket,
            slot: i,
            word,
            gen,
            taken,
        } = victim;
        debug_assert_ne!(
            taken,
            Taken::Moving,
            "a key in the middle of a move is never a victim"
        );
        // Winning this CAS is what matters (an update or another creator that got there first
        // makes it fail); ordering for readers comes from the Release key store below.
        // Acquire on success: pairs with the Release store (or update/reset CAS) of the word we
        // replace, so the previous binding's key store happens before ours and ours is the
        // later one in the key word's order. A DEAD word is a mover's Release write: a finished
        // move's, made after its Acquire validation read the binding that left
        // (`migrate::live_word`), or an abandoned target's, whose key store was the mover's
        // own; either way the chain holds through it. Creators under different locks share no other
        // ordering; with Relaxed the old key could land last and pair with our funnel (loom
        // model 4a).
        if bucket.words[i]
            .compare_exchange(
                word,
                state::reserved(gen),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return None;
        }
        // Release: a reader that Acquire-loads this key also sees RESERVED (or newer) in the
        // funnel word, so it cannot pair the new key with the evicted funnel.
        bucket.keys[i].store(fp, Ordering::Release);
        bucket.set_tag(i, tag_of(fp));
        let gen = state::next_gen(gen);
        let word = match bind {
            BindAs::Live(tat) => state::live(gen, tat),
            BindAs::Pending => state::pending(gen),
        };
        // Release: publishes the key store above to readers that Acquire-load this word.
        bucket.words[i].store(word, Ordering::Release);
        let shard = self.shard(fp);
        let counter = match taken {
            Taken::Unbound => &shard.bound,
            Taken::Recovered => &shard.recovered,
            // `place` never offers a moving key (it answers Busy instead).
            Taken::Forced | Taken::Moving => &shard.forced,
        };
        // Relaxed: a statistic; readers sum shards without ordering.
        let counted = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if taken == Taken::Unbound {
            // One more slot holds a key.
            self.keep_preference(fp, counted);
        }
        Some(word)
    }

    /// Counts `bucket`'s free slots at `now`, and lowers `least` to its least indebted live
    /// slot (the earliest to expire under `quota`'s algorithm).
    fn scan<'a, Q: QuotaKind>(
        &'a self,
        bucket: &'a Bucket,
        now: u64,
        quota: &Q,
        least: &mut Option<(Victim<'a>, u64)>,
    ) -> Scan<'a> {
        let mut found = Scan::default();
        for slot in 0..SLOTS_PER_BUCKET {
            // Relaxed: the creator's CAS validates whatever slot it picks (`bind`).
            let word = bucket.words[slot].load(Ordering::Relaxed);
            let victim = |gen, taken| Victim {
                bucket,
                slot,
                word,
                gen,
                taken,
            };
            match state::decode(word) {
                SlotState::Empty | SlotState::Dead { .. } => {
                    // Never bound, or left by a finished move or an abandoned target: free,
                    // its next binding numbered from the generation it kept (`gen_of`: 0 for
                    // EMPTY). The RESERVED CAS revalidates the word.
                    if !matches!(found.slot, Some(v) if v.taken == Taken::Unbound) {
                        found.slot = Some(victim(state::gen_of(word), Taken::Unbound));
                    }
                }
                SlotState::Moved { tat } => {
                    // A move in progress: no slot to take, but the key's funnel (its sealed
                    // arrival time) still counts when choosing the victim.
                    let expiry = quota.expiry(tat);
                    if least.is_none_or(|(_, e)| expiry < e) {
                        *least = Some((victim(0, Taken::Moving), expiry));
                    }
                    continue;
                }
                SlotState::Live { gen, tat } if quota.expiry(tat) <= now => {
                    found.slot.get_or_insert(victim(gen, Taken::Recovered));
                }
                SlotState::Live { gen, tat } => {
                    let expiry = quota.expiry(tat);
                    if least.is_none_or(|(_, e)| expiry < e) {
                        *least = Some((victim(gen, Taken::Forced), expiry));
                    }
                    continue;
                }
                SlotState::Reserved | SlotState::Pending { .. } => continue,
            }
            found.free += 1;
        }
        found
    }
}

/// A held creation lock; dropping it unlocks.
pub(super) struct CreationLock<'a>(&'a AtomicBool);

impl Drop for CreationLock<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `lock`.
        self.0.store(false, Ordering::Release);
    }
}

/// Takes a creation lock if it is free, without waiting.
pub(super) fn try_lock(lock: &AtomicBool) -> Option<CreationLock<'_>> {
    // Acquire: as in `lock`.
    let taken = lock
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_ok();
    // The guard is built only once the lock is ours: a guard is an unlock waiting to happen.
    // `taken.then_some(CreationLock(lock))` builds one on a failed attempt too, and drops it,
    // unlocking whoever holds the lock: every failed try (a nudge, a cuckoo step) released
    // another thread's lock, and two creators of one key could both bind it
    // (`a_failed_try_leaves_the_lock_with_its_holder`).
    if taken {
        Some(CreationLock(lock))
    } else {
        None
    }
}

/// Takes a creation lock: a one-byte spin lock that yields after 64 spins.
pub(super) fn lock(lock: &AtomicBool) -> CreationLock<'_> {
    let mut round = 0;
    loop {
        // Acquire: pairs with the Release in `CreationLock::drop`, so the previous holder's
        // bindings are visible to our rescan.
        if lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return CreationLock(lock);
        }
        // Relaxed: only a hint to retry; the CAS above is what acquires.
        while lock.load(Ordering::Relaxed) {
            spin(round);
            round += 1;
        }
    }
}

#[cfg(all(test, not(funnel_loom)))]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use std::time::Duration;

    /// Binds slot `i` of bucket `b` to a key whose arrival time is `tat`.
    fn bind_at(table: &Table, b: usize, i: usize, tat: u64) {
        let bucket = &table.buckets[b];
        bucket.keys[i].store(100 + (b * SLOTS_PER_BUCKET + i) as u64, Ordering::Relaxed);
        bucket.words[i].store(state::live(1, tat), Ordering::Relaxed);
    }

    /// Bucket 0 full of recovered keys (7 free slots), bucket 1 full of keys in debt but for
    /// one slot never bound (1 free slot).
    fn recovered_beside_one_empty() -> Table {
        let table =
            Table::with_capacity(2 * SLOTS_PER_BUCKET, WhenFull::default(), Some(false)).unwrap();
        assert_eq!(table.buckets.len(), 2);
        for i in 0..SLOTS_PER_BUCKET {
            bind_at(&table, 0, i, 10);
        }
        for i in 1..SLOTS_PER_BUCKET {
            bind_at(&table, 1, i, 1_000);
        }
        table
    }

    fn home(first: usize, second: usize) -> Home {
        Home {
            fp: 99,
            tag: tag_of(99),
            first,
            second,
        }
    }

    #[test]
    fn a_failed_try_leaves_the_lock_with_its_holder() {
        let stripe = AtomicBool::new(false);
        let held = lock(&stripe);
        assert!(try_lock(&stripe).is_none(), "the lock is held");
        assert!(
            stripe.load(Ordering::Relaxed),
            "a failed try must not unlock the holder's lock"
        );
        assert!(try_lock(&stripe).is_none(), "still held");
        drop(held);
        assert!(!stripe.load(Ordering::Relaxed));
        let again = try_lock(&stripe);
        assert!(again.is_some(), "free again, so taken");
        assert!(stripe.load(Ordering::Relaxed));
    }

    #[test]
    fn a_key_in_the_middle_of_a_move_that_is_the_least_indebted_is_waited_for_not_skipped() {
        let table =
            Table::with_capacity(2 * SLOTS_PER_BUCKET, WhenFull::default(), Some(false)).unwrap();
        for b in 0..2 {
            for i in 0..SLOTS_PER_BUCKET {
                bind_at(&table, b, i, 1_000);
            }
        }
        let quota = Quota::per_period(1, Duration::from_nanos(1)).unwrap();
        // Both buckets full of keys in debt: the least indebted live one is the victim.
        assert!(matches!(
            table.place(&home(0, 1), 500, &quota),
            Placement::Full(_, 1_000)
        ));
        // Slot 3 of bucket 1 sealed for a move in progress with a smaller
        // arrival time than every live key: wait for the move rather than evict a live key.
        table.buckets[1].words[3].store(state::moved(600), Ordering::Relaxed);
        assert!(matches!(
            table.place(&home(0, 1), 500, &quota),
            Placement::Busy
        ));
        // A moving key more indebted than some live one does not hold anybody up.
        table.buckets[1].words[3].store(state::moved(2_000), Ordering::Relaxed);
        assert!(matches!(
            table.place(&home(0, 1), 500, &quota),
            Placement::Full(_, 1_000)
        ));
        // Once the move is over the slot is dead: free, and its next binding is numbered from
        // the generation of the binding that left.
        table.buckets[1].words[3].store(state::dead(2), Ordering::Relaxed);
        let Placement::Free(v) = table.place(&home(0, 1), 500, &quota) else {
            panic!("a dead slot is free");
        };
        assert!(std::ptr::eq(v.bucket, &table.buckets[1]));
        assert_eq!((v.slot, v.taken), (3, Taken::Unbound));
        let word = table.bind(99, v, BindAs::Live(700)).unwrap();
        assert_eq!(state::decode(word), SlotState::Live { gen: 3, tat: 700 });
    }

    #[test]
    fn a_slot_never_bound_is_taken_before_a_recovered_key_in_the_other_bucket() {
        let table = recovered_beside_one_empty();
        let quota = Quota::per_period(1, Duration::from_nanos(1)).unwrap();
        // Either bucket first: the empty slot of bucket 1 wins over bucket 0's seven
        // recovered keys, which keep their slots.
        for home in [home(0, 1), home(1, 0)] {
            let Placement::Free(v) = table.place(&home, 500, &quota) else {
                panic!("a free slot exists");
            };
            assert!(std::ptr::eq(v.bucket, &table.buckets[1]));
            assert_eq!((v.slot, v.taken), (0, Taken::Unbound));
        }
    }

    #[test]
    fn with_no_slot_never_bound_the_bucket_with_more_free_slots_gives_one() {
        let table = recovered_beside_one_empty();
        bind_at(&table, 1, 0, 1_000);
        // Bucket 1 now has no free slot at all, and bucket 0 seven recovered ones.
        let quota = Quota::per_period(1, Duration::from_nanos(1)).unwrap();
        let Placement::Free(v) = table.place(&home(1, 0), 500, &quota) else {
            panic!("bucket 0 has recovered slots");
        };
        assert!(std::ptr::eq(v.bucket, &table.buckets[0]));
        assert_eq!(v.taken, Taken::Recovered);
        // Once they are in debt again, nothing is free: the least indebted is the victim.
        assert!(matches!(
            table.place(&home(1, 0), 5, &quota),
            Placement::Full(_, 10)
        ));
    }

    #[test]
    fn a_creator_finds_its_key_placed_elsewhere_before_it_takes_its_freed_preferred_slot() {
        let table = Table::with_capacity(7 * 64, WhenFull::Deny, Some(false)).unwrap();
        let home = table.home(0x9E37_79B9_7F4A_7C15 ^ (1 << 7));
        // Two requests a second, so the key's request is admitted only where its debt is found.
        let quota = Quota::per_period(1, Duration::from_secs(1))
            .unwrap()
            .with_limit(2)
            .unwrap();
        let first = &table.buckets[home.first];
        let preferred = super::super::preferred::slot(home.fp);
        // Another key in debt holds the preferred slot, so the key goes elsewhere.
        first.keys[preferred].store(home.fp ^ 0xFF00, Ordering::Relaxed);
        first.words[preferred].store(crate::state::live(1, 1 << 40), Ordering::Relaxed);
        assert!(table.decide(&home, 1_000, &quota, 1).is_allowed());
        // That key moves away: its slot is dead, and free.
        first.words[preferred].store(crate::state::dead(1), Ordering::Relaxed);
        // A creator that raced the first one, and looks only now, must find the key.
        assert!(matches!(
            table.create(home.fp, 1_000, 2_000, &quota),
            Created::Exists
        ));
        assert_eq!(table.stats().keys, 1, "the key was bound once");
    }
}
