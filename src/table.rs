//! The keyed table: a fixed array of 128-byte buckets, eight slots each, every slot a key
//! fingerprint word and a funnel word (`state.rs`). Each key may live in two candidate buckets;
//! a new key goes to the candidate bucket with more free slots (two-choice placement).
//!
//! The slot protocol (EMPTY / LIVE / RESERVED, who moves a slot between them and why two racing
//! threads cannot both win) is written out in `docs/DESIGN.md`, "The slot protocol"; the
//! comments here name the step of that argument they implement.
//!
//! * **Updating** a key that is present is lock-free: find its slot, compute, one CAS on the
//!   funnel word; a denial is validated by re-reading the word and writes nothing.
//! * **Creating** a key is serialised per home bucket by a one-byte spin lock, so two creators
//!   of one key cannot bind two slots. Updates never take it.
//! * **Evicting** is lazy: a creator reuses an EMPTY slot or one whose funnel has recovered
//!   (`TAT <= now`), and only when none is left applies [`WhenFull`].

use std::sync::atomic::AtomicU64 as StatCounter;

use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::gcra;
use crate::quota::Quota;
use crate::state::{self, SlotState};
use crate::sync::{spin, AtomicBool, AtomicU64, Ordering};

/// Slots per bucket: eight `{key, state}` pairs fill two cache lines (128 bytes). With two
/// candidate buckets and two-choice placement, about 70% of the slots can hold funnels in debt
/// before a new key first finds no free candidate (12–40% with one-line buckets filled in
/// order; `docs/DESIGN.md`, "The table"). Loom models use buckets of four, which keeps their
/// state space small; the protocol does not depend on the bucket size.
#[cfg(not(funnel_loom))]
pub(crate) const SLOTS_PER_BUCKET: usize = 8;
#[cfg(funnel_loom)]
pub(crate) const SLOTS_PER_BUCKET: usize = 4;

/// The largest capacity accepted, in keys: a table of at most 2^40 slots (16 TiB).
pub const MAX_CAPACITY: usize = if usize::BITS >= 64 { 1 << 40 } else { 1 << 24 };

/// What a new key does when every slot it may use holds a funnel still in debt.
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
    /// count it in [`Stats::forced_evictions`]. The default.
    #[default]
    Evict,
    /// Turn the new key away ([`Outcome::TurnedAway`], fail-closed) and count it in
    /// [`Stats::turned_away`]. Beware: under a key flood this locks out new legitimate users.
    Deny,
    /// Let the new key's request through as a fresh funnel would, without recording it
    /// ([`Outcome::AllowedUntracked`], fail-open), and count it in [`Stats::admitted_untracked`].
    Allow,
}

/// Counters of a keyed limiter, summed over its shards (each read is a snapshot; concurrent
/// updates may land between shards).
///
/// # Examples
///
/// ```
/// use funnel::{Limiter, Quota};
///
/// let limiter = Limiter::<u64>::new(Quota::per_second(5)?);
/// limiter.check(&7);
/// let stats = limiter.stats();
/// assert_eq!(stats.keys, 1);
/// assert_eq!(stats.forced_evictions, 0);
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Slots holding a key. A key stays counted after its funnel recovers, until a new key
    /// reuses its slot; never above the capacity.
    pub keys: usize,
    /// New keys placed in the slot of a key whose funnel had fully recovered (free: that key
    /// loses nothing).
    pub recovered_evictions: u64,
    /// New keys placed by evicting a funnel still in debt ([`WhenFull::Evict`]).
    pub forced_evictions: u64,
    /// New keys turned away because the table was full ([`WhenFull::Deny`]).
    pub turned_away: u64,
    /// New keys let through untracked because the table was full ([`WhenFull::Allow`]).
    pub admitted_untracked: u64,
}

struct Slot {
    /// The key's 64-bit fingerprint, never 0 once bound.
    key: AtomicU64,
    /// The packed funnel word (`state.rs`).
    state: AtomicU64,
}

#[repr(C, align(128))]
struct Bucket {
    slots: [Slot; SLOTS_PER_BUCKET],
}

#[cfg(not(funnel_loom))]
const _: () = assert!(
    std::mem::size_of::<Bucket>() == 128,
    "a bucket is two cache lines"
);

/// Statistics, striped over cache lines so creators on different buckets do not share one.
#[repr(align(64))]
#[derive(Default)]
struct StatShard {
    keys: StatCounter,
    recovered: StatCounter,
    forced: StatCounter,
    turned_away: StatCounter,
    untracked: StatCounter,
}

const STAT_SHARDS: usize = 16;

/// Where a key may live.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Home {
    /// Fingerprint, never 0.
    fp: u64,
    /// Home bucket; also the index of the key's creation lock.
    first: usize,
    /// Second candidate bucket (equal to `first` in a one-bucket table).
    second: usize,
}

/// How a [`Table::update`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Updated {
    /// `f` chose to write nothing; the arrival time it saw (`0` for an absent key).
    Unchanged(u64),
    /// The key's arrival time went from the first value (`0` for an absent key) to the second.
    Written(u64, u64),
    /// The key was absent, `f` wanted to create it, and the table was full
    /// ([`WhenFull::Deny`] or [`WhenFull::Allow`]): nothing was stored.
    Full,
}

/// How a creation attempt ended.
enum Created {
    /// The key now owns a slot and the request was charged to it.
    Bound,
    /// A racing creator bound the key first: update it instead.
    Exists,
    /// Table full, [`WhenFull::Deny`]: ns until the least indebted candidate recovers.
    TurnedAway(u64),
    /// Table full, [`WhenFull::Allow`].
    Untracked,
}

pub(crate) struct Table {
    buckets: Box<[Bucket]>,
    /// One creation lock per bucket; a key takes the lock of its home bucket.
    locks: Box<[AtomicBool]>,
    mask: usize,
    stats: [StatShard; STAT_SHARDS],
}

impl Table {
    /// A table with room for at least `capacity` keys (rounded up to a power of two of buckets).
    pub(crate) fn with_capacity(capacity: usize) -> Result<Table, Error> {
        if capacity == 0 {
            return Err(Error::ZeroCapacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(Error::CapacityTooLarge {
                requested: capacity,
                max: MAX_CAPACITY,
            });
        }
        let buckets = capacity.div_ceil(SLOTS_PER_BUCKET).next_power_of_two();
        let oom = Error::OutOfMemory {
            bytes: buckets.saturating_mul(std::mem::size_of::<Bucket>() + 1),
        };
        let mut table: Vec<Bucket> = Vec::new();
        table.try_reserve_exact(buckets).map_err(|_| oom.clone())?;
        table.extend((0..buckets).map(|_| Bucket {
            slots: std::array::from_fn(|_| Slot {
                key: AtomicU64::new(0),
                state: AtomicU64::new(state::EMPTY),
            }),
        }));
        let mut locks: Vec<AtomicBool> = Vec::new();
        locks.try_reserve_exact(buckets).map_err(|_| oom)?;
        locks.extend((0..buckets).map(|_| AtomicBool::new(false)));
        Ok(Table {
            buckets: table.into_boxed_slice(),
            locks: locks.into_boxed_slice(),
            mask: buckets - 1,
            stats: Default::default(),
        })
    }

    /// Slots in the table.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Bytes the table occupies (buckets, locks and counters).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
            + std::mem::size_of_val(&*self.locks)
            + std::mem::size_of_val(&self.stats)
    }

    /// Where the key with this 64-bit hash lives.
    #[inline]
    pub(crate) fn home(&self, hash: u64) -> Home {
        let fp = if hash == 0 { 1 } else { hash };
        // Buckets come from `fp`, not `hash`: keys of one fingerprint are one key, and must
        // share one home bucket and so one creation lock (hashes 0 and 1 would not).
        let hash = fp;
        let first = (hash as usize) & self.mask;
        // The second bucket comes from the hash's high half, so the two choices are
        // independent; it differs from the first whenever the table has two buckets or more.
        let step = ((hash >> 32) as usize) & self.mask;
        let second = first ^ if step == 0 { 1 & self.mask } else { step };
        Home { fp, first, second }
    }

    /// Decides a request of `n` units at `now` for the key at `home`, creating its funnel if
    /// the request is allowed and the key is absent.
    #[inline]
    pub(crate) fn decide(
        &self,
        home: &Home,
        now: u64,
        quota: &Quota,
        n: u64,
        when_full: WhenFull,
    ) -> Decision {
        // The hot path (the key is present) stays small enough to inline; everything else is
        // out of line.
        let absent = match self.find(home) {
            Some((slot, word)) => match charge(slot, word, home.fp, now, quota, n) {
                Some(decision) => return decision,
                None => false, // rebound under us; the key may be elsewhere now
            },
            None => true,
        };
        self.decide_slow(home, now, quota, n, when_full, absent)
    }

    /// [`decide`](Self::decide) when the key was `absent` (just looked up) or its slot was
    /// rebound under us.
    #[cold]
    #[inline(never)]
    fn decide_slow(
        &self,
        home: &Home,
        now: u64,
        quota: &Quota,
        n: u64,
        when_full: WhenFull,
        mut absent: bool,
    ) -> Decision {
        loop {
            let found = if absent { None } else { self.find(home) };
            absent = false;
            if let Some((slot, word)) = found {
                match charge(slot, word, home.fp, now, quota, n) {
                    Some(decision) => return decision,
                    None => continue, // the slot was rebound under us: look again
                }
            }
            // Absent is the same as a fresh funnel (TAT = now).
            let (decision, write) = gcra::decide(0, now, quota, n);
            let Some(new_tat) = write else {
                return decision; // denied or a peek: an absent key stays absent
            };
            match self.create(home, now, new_tat, when_full) {
                Created::Bound => return decision,
                Created::Exists => continue,
                Created::TurnedAway(retry) => {
                    return Decision::new(Outcome::TurnedAway, quota.limit, quota.t, retry, retry)
                }
                Created::Untracked => {
                    return Decision::new(
                        Outcome::AllowedUntracked,
                        quota.limit,
                        quota.t,
                        new_tat - now,
                        0,
                    )
                }
            }
        }
    }

    /// Applies `f` to the key's arrival time (`0` when the key is absent, which is the same as
    /// a fresh funnel) and stores what it returns, retrying with the new value when a
    /// concurrent update moves the word first. `None` writes nothing; `Some` on an absent key
    /// creates it, subject to `when_full`. The building block of every operation other than a
    /// plain decision (refunds, raising a key to a known arrival time); `f` may run several
    /// times and must be a pure function of its argument. Values above `MAX_TAT` are clamped.
    pub(crate) fn update(
        &self,
        home: &Home,
        now: u64,
        when_full: WhenFull,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Updated {
        'lookup: loop {
            let Some((slot, mut word)) = self.find(home) else {
                let Some(new_tat) = f(0) else {
                    return Updated::Unchanged(0);
                };
                let new_tat = new_tat.min(state::MAX_TAT);
                match self.create(home, now, new_tat, when_full) {
                    Created::Bound => return Updated::Written(0, new_tat),
                    Created::Exists => continue 'lookup,
                    Created::TurnedAway(_) | Created::Untracked => return Updated::Full,
                }
            };
            loop {
                let SlotState::Live { gen, tat } = state::decode(word) else {
                    continue 'lookup;
                };
                let Some(new_tat) = f(tat) else {
                    return Updated::Unchanged(tat);
                };
                let new_tat = new_tat.min(state::MAX_TAT);
                // Release on success / Acquire on failure: as in `charge`.
                match slot.state.compare_exchange_weak(
                    word,
                    state::live(gen, new_tat),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Updated::Written(tat, new_tat),
                    Err(current) => {
                        // Acquire: as in `find`; a rebind sends us back to the lookup.
                        if slot.key.load(Ordering::Acquire) != home.fp {
                            continue 'lookup;
                        }
                        word = current;
                    }
                }
            }
        }
    }

    /// Empties the key's funnel; true if the key was tracked.
    pub(crate) fn reset(&self, home: &Home) -> bool {
        loop {
            let Some((slot, word)) = self.find(home) else {
                return false;
            };
            // The binding (and so its generation) stays: an updater that loaded `word` fails its
            // CAS on the TAT alone, and if the TAT climbs back to the very same value the word is
            // this key's true state again, so a late CAS from it is right. Keeping the generation
            // means resets never help another binding's word come back (docs/DESIGN.md, ABA).
            let fresh = state::live(state::gen_of(word), 0);
            // Release on success: as an update; Relaxed on failure: we look the key up again.
            if slot
                .state
                .compare_exchange(word, fresh, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// The funnel word bound to the key at `home`, if any; for the loom models' oracles.
    #[cfg(all(test, funnel_loom))]
    pub(crate) fn word_of(&self, home: &Home) -> Option<u64> {
        self.find(home).map(|(_, word)| word)
    }

    /// The live slot bound to `home.fp`, with the funnel word that was validated against it.
    #[inline]
    fn find(&self, home: &Home) -> Option<(&Slot, u64)> {
        if let Some(found) = find_in(&self.buckets[home.first], home.fp) {
            return Some(found);
        }
        if home.second == home.first {
            return None;
        }
        find_in(&self.buckets[home.second], home.fp)
    }

    fn create(&self, home: &Home, now: u64, new_tat: u64, when_full: WhenFull) -> Created {
        let _lock = self.lock(home.first);
        // A racing creator of the same key may have finished while we waited: the lock's
        // Acquire makes its binding visible here.
        if self.find(home).is_some() {
            return Created::Exists;
        }
        let mut round = 0;
        loop {
            // Two-choice placement: the candidate bucket with more free slots (EMPTY or
            // recovered) takes the key, the home bucket on a tie; the least indebted live slot
            // of either is the victim of last resort.
            let mut least: Option<(&Slot, u64, u64)> = None;
            let first = scan(&self.buckets[home.first], now, &mut least);
            let second = if home.second == home.first {
                Scan::default()
            } else {
                scan(&self.buckets[home.second], now, &mut least)
            };
            let free = if second.free > first.free {
                second.slot
            } else {
                first.slot
            };
            let (slot, word, forced) = match (free, least) {
                (Some((slot, word)), _) => (slot, word, false),
                (None, Some((slot, word, tat))) => match when_full {
                    WhenFull::Evict => (slot, word, true),
                    WhenFull::Deny => {
                        // Relaxed: counters are statistics; they order nothing.
                        self.shard(home).turned_away.fetch_add(1, Ordering::Relaxed);
                        return Created::TurnedAway(tat - now);
                    }
                    WhenFull::Allow => {
                        // Relaxed: a statistic, as above.
                        self.shard(home).untracked.fetch_add(1, Ordering::Relaxed);
                        return Created::Untracked;
                    }
                },
                (None, None) => {
                    // Every candidate is being rebound by other creators this instant.
                    spin(round);
                    round += 1;
                    continue;
                }
            };
            let gen = state::gen_of(word);
            // Winning this CAS is what matters (an update or another creator that got there
            // first makes it fail); ordering for readers comes from the Release key store below.
            // Acquire on success: pairs with the Release store (or update/reset CAS) of the word
            // we replace, so the previous binding's key store happens before ours and ours is
            // the later one in the key word's order. Creators under different locks (home
            // buckets) share no other ordering; with Relaxed the old key could land last and
            // pair with our funnel (loom model 4a).
            if slot
                .state
                .compare_exchange(
                    word,
                    state::reserved(gen),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue; // the slot moved; choose again
            }
            // Release: a reader that Acquire-loads this key also sees RESERVED (or newer) in the
            // state word, so it cannot pair the new key with the evicted funnel.
            slot.key.store(home.fp, Ordering::Release);
            // Release: publishes the key store above to readers that Acquire-load this word.
            slot.state.store(
                state::live(state::next_gen(gen), new_tat),
                Ordering::Release,
            );
            let shard = self.shard(home);
            let counter = match state::decode(word) {
                SlotState::Empty => &shard.keys,
                _ if forced => &shard.forced,
                _ => &shard.recovered,
            };
            // Relaxed: a statistic; readers sum shards without ordering.
            counter.fetch_add(1, Ordering::Relaxed);
            return Created::Bound;
        }
    }

    fn lock(&self, bucket: usize) -> CreationLock<'_> {
        let lock = &self.locks[bucket];
        let mut round = 0;
        loop {
            // Acquire: pairs with the Release in `CreationLock::drop`, so the previous
            // holder's bindings are visible to our rescan.
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

    fn shard(&self, home: &Home) -> &StatShard {
        &self.stats[home.first % STAT_SHARDS]
    }

    pub(crate) fn stats(&self) -> Stats {
        // Relaxed: a snapshot of statistics; see `Stats`.
        let sum = |f: fn(&StatShard) -> &StatCounter| -> u64 {
            self.stats
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum()
        };
        Stats {
            keys: usize::try_from(sum(|s| &s.keys)).unwrap_or(usize::MAX),
            recovered_evictions: sum(|s| &s.recovered),
            forced_evictions: sum(|s| &s.forced),
            turned_away: sum(|s| &s.turned_away),
            admitted_untracked: sum(|s| &s.untracked),
        }
    }

    /// Checks the table's invariants while no other thread uses it: no RESERVED slot, no key
    /// bound twice, every key in one of its candidate buckets, the key count equal to the
    /// bound slots. For tests and fuzzing.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut seen = std::collections::HashMap::new();
        let mut bound = 0usize;
        for (b, bucket) in self.buckets.iter().enumerate() {
            for (i, slot) in bucket.slots.iter().enumerate() {
                // Acquire: the table is at rest (caller's contract); Acquire makes the last
                // writers' stores visible even if they ran on other threads.
                let word = slot.state.load(Ordering::Acquire);
                let key = slot.key.load(Ordering::Acquire);
                match state::decode(word) {
                    SlotState::Empty if key == 0 => {}
                    SlotState::Empty => {
                        return Err(format!("slot {b}.{i} is EMPTY but has key {key:#x}"))
                    }
                    SlotState::Reserved => return Err(format!("slot {b}.{i} is RESERVED at rest")),
                    SlotState::Live { tat, .. } => {
                        bound += 1;
                        if tat > state::MAX_TAT {
                            return Err(format!("slot {b}.{i} has TAT {tat} beyond range"));
                        }
                        let home = self.home(key);
                        if b != home.first && b != home.second {
                            return Err(format!(
                                "key {key:#x} in bucket {b}, not one of its candidates"
                            ));
                        }
                        if let Some(other) = seen.insert(key, (b, i)) {
                            return Err(format!(
                                "key {key:#x} bound twice: {other:?} and {:?}",
                                (b, i)
                            ));
                        }
                    }
                }
            }
        }
        let counted = self.stats().keys;
        if counted != bound {
            return Err(format!("key counter says {counted}, table holds {bound}"));
        }
        Ok(())
    }
}

/// Free slots of one candidate bucket, as seen by a creator.
#[derive(Default)]
struct Scan<'a> {
    /// How many slots are EMPTY or recovered.
    free: usize,
    /// The one to take, with the word it was seen holding: the first EMPTY slot if any (so a
    /// recovered key keeps its slot while there is room, and need not be created again on its
    /// next request), else the first recovered one.
    slot: Option<(&'a Slot, u64)>,
}

/// Counts `bucket`'s free slots at `now`, and lowers `least` to its least indebted live slot.
fn scan<'a>(bucket: &'a Bucket, now: u64, least: &mut Option<(&'a Slot, u64, u64)>) -> Scan<'a> {
    let mut found = Scan::default();
    for slot in &bucket.slots {
        // Relaxed: the creator's CAS validates whatever slot it picks.
        let word = slot.state.load(Ordering::Relaxed);
        match state::decode(word) {
            SlotState::Empty => {
                if !matches!(found.slot, Some((_, w)) if w == state::EMPTY) {
                    found.slot = Some((slot, word));
                }
            }
            SlotState::Live { tat, .. } if tat <= now => {
                found.slot.get_or_insert((slot, word));
            }
            SlotState::Live { tat, .. } => {
                if least.is_none_or(|(_, _, min)| tat < min) {
                    *least = Some((slot, word, tat));
                }
                continue;
            }
            SlotState::Reserved => continue,
        }
        found.free += 1;
    }
    found
}

/// The live slot of `bucket` bound to `fp`, with its validated funnel word.
#[inline]
fn find_in(bucket: &Bucket, fp: u64) -> Option<(&Slot, u64)> {
    for slot in &bucket.slots {
        // Relaxed: only a filter; a match is validated below. A stale miss sends us to the
        // creation path, whose locked rescan sees every completed binding.
        if slot.key.load(Ordering::Relaxed) != fp {
            continue;
        }
        // Acquire: pairs with the Release store that published this word's binding (create)
        // or the Release CAS of a later update, so the key load below reads that binding's key
        // or a newer one.
        let word = slot.state.load(Ordering::Acquire);
        if !matches!(state::decode(word), SlotState::Live { .. }) {
            continue; // EMPTY, or RESERVED: being rebound, its key word is not to be trusted
        }
        // Acquire: if this reads the key of a rebind that began after `word`, it pairs with that
        // rebind's Release key store, so our later validation of `word` (the CAS in `charge`,
        // or its re-load) sees RESERVED or newer and fails.
        if slot.key.load(Ordering::Acquire) == fp {
            return Some((slot, word));
        }
    }
    None
}

/// Charges a request to the live `slot` whose validated word is `word`. `None` when the slot
/// was rebound to another key meanwhile (the caller looks the key up again).
#[inline]
fn charge(
    slot: &Slot,
    mut word: u64,
    fp: u64,
    now: u64,
    quota: &Quota,
    n: u64,
) -> Option<Decision> {
    loop {
        let SlotState::Live { gen, tat } = state::decode(word) else {
            return None;
        };
        let (decision, write) = gcra::decide(tat, now, quota, n);
        let current = match write {
            None => {
                // A denial or a peek writes nothing, but must still prove that `word` belonged
                // to our key: re-read it. Acquire: if it changed, the key re-check below must
                // see the binding of the new word.
                let current = slot.state.load(Ordering::Acquire);
                if current == word {
                    return Some(decision);
                }
                current
            }
            Some(new_tat) => {
                // Release on success: readers that Acquire this word see our key load's
                // binding (transitively, the creator's key store). Acquire on failure: as the
                // re-load above.
                match slot.state.compare_exchange_weak(
                    word,
                    state::live(gen, new_tat),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(decision),
                    Err(current) => current,
                }
            }
        };
        // The word moved: a concurrent update of our key (retry with it) or a rebind (give up).
        // Acquire: as in `find`.
        if slot.key.load(Ordering::Acquire) != fp {
            return None;
        }
        word = current;
    }
}

struct CreationLock<'a>(&'a AtomicBool);

impl Drop for CreationLock<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `Table::lock`.
        self.0.store(false, Ordering::Release);
    }
}
