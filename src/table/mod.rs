//! The keyed table: a fixed array of 128-byte buckets of seven slots (`bucket.rs`), every slot
//! a key fingerprint and a funnel word (`state.rs`). Each key may live in two candidate
//! buckets; a new key goes to the candidate bucket with more free slots (two-choice placement).
//!
//! The slot protocol (EMPTY / LIVE / RESERVED, who moves a slot between them and why two racing
//! threads cannot both win) is written out in `docs/DESIGN.md`, "The slot protocol"; the
//! comments here name the step of that argument they implement.
//!
//! * **Finding** a key loads the tag words of both candidate buckets together and matches them
//!   into one bitmask: no branch per slot, and the two buckets' cache misses overlap.
//! * **Updating** a key that is present is lock-free: validate the slot, compute, one CAS on
//!   the funnel word; a denial writes nothing and reads the funnel word once.
//! * **Creating** a key is serialised per home bucket by a one-byte spin lock (`create.rs`),
//!   so two creators of one key cannot bind two slots. Updates never take it.
//! * **Evicting** is lazy: a creator reuses an EMPTY slot or one whose funnel has recovered
//!   (`TAT <= now`), and only when none is left applies [`WhenFull`].

mod bucket;
mod create;
mod prefetch;

use std::sync::atomic::AtomicU64 as StatCounter;

use crate::decision::Decision;
use crate::error::Error;
use crate::gcra;
use crate::quota::Quota;
use crate::state::{self, SlotState};
use crate::sync::Ordering;

pub(crate) use bucket::SLOTS_PER_BUCKET;
use bucket::{match_tag, tag_of, Bucket};
use create::Created;

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
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Home {
    /// Fingerprint, never 0.
    fp: u64,
    /// Its tag (`bucket.rs`).
    tag: u64,
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

pub(crate) struct Table {
    buckets: Box<[Bucket]>,
    /// `buckets.len()`, as the multiplier of the bucket reduction.
    len: u64,
    stats: [StatShard; STAT_SHARDS],
}

impl Table {
    /// A table with room for at least `capacity` keys (rounded up to a whole bucket).
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
        // Any number of buckets: `home` maps hashes with a multiply, not a mask, so the table
        // is as large as asked for (to the next whole bucket), not the next power of two.
        let buckets = capacity.div_ceil(SLOTS_PER_BUCKET);
        let oom = Error::OutOfMemory {
            bytes: buckets.saturating_mul(std::mem::size_of::<Bucket>()),
        };
        let mut table: Vec<Bucket> = Vec::new();
        table.try_reserve_exact(buckets).map_err(|_| oom)?;
        table.extend((0..buckets).map(|_| Bucket::new()));
        Ok(Table {
            buckets: table.into_boxed_slice(),
            len: buckets as u64,
            stats: Default::default(),
        })
    }

    /// Slots in the table.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Bytes the table occupies (buckets, with their locks, and counters).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets) + std::mem::size_of_val(&self.stats)
    }

    /// Where the key with this 64-bit hash lives.
    #[inline]
    pub(crate) fn home(&self, hash: u64) -> Home {
        let fp = if hash == 0 { 1 } else { hash };
        // Buckets come from `fp`, not `hash`: keys of one fingerprint are one key, and must
        // share one home bucket and so one creation lock (hashes 0 and 1 would not).
        //
        // `reduce(x)` maps a 64-bit value onto the buckets by its top bits (a multiply and a
        // shift, Lemire's reduction). The home bucket takes the fingerprint's top bits, the
        // second bucket its middle bits (bits 8-31 for tables under 16 M buckets), the tag its
        // low byte: three independent choices. The second differs from the first whenever the
        // table has two buckets or more.
        let reduce = |x: u64| ((u128::from(x) * u128::from(self.len)) >> 64) as usize;
        let first = reduce(fp);
        let mut second = reduce(fp.rotate_left(32));
        if second == first {
            second = if first + 1 == self.buckets.len() {
                0
            } else {
                first + 1
            };
        }
        Home {
            fp,
            tag: tag_of(fp),
            first,
            second,
        }
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
            Some((bucket, i, word)) => match charge(bucket, i, word, home.fp, now, quota, n) {
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
            if let Some((bucket, i, word)) = found {
                match charge(bucket, i, word, home.fp, now, quota, n) {
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
                Created::TurnedAway(retry) => return Decision::turned_away(quota, retry),
                Created::Untracked => return Decision::allowed_untracked(quota, new_tat - now),
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
            let Some((bucket, i, mut word)) = self.find(home) else {
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
                match bucket.words[i].compare_exchange_weak(
                    word,
                    state::live(gen, new_tat),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Updated::Written(tat, new_tat),
                    Err(current) => {
                        // Acquire: as in `charge`; a rebind sends us back to the lookup.
                        if bucket.keys[i].load(Ordering::Acquire) != home.fp {
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
            let Some((bucket, i, word)) = self.find(home) else {
                return false;
            };
            // The binding (and so its generation) stays: an updater that loaded `word` fails its
            // CAS on the TAT alone, and if the TAT climbs back to the very same value the word is
            // this key's true state again, so a late CAS from it is right. Keeping the generation
            // means resets never help another binding's word come back (docs/DESIGN.md, ABA).
            let fresh = state::live(state::gen_of(word), 0);
            // Release on success: as an update; Relaxed on failure: we look the key up again.
            if bucket.words[i]
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
        self.find(home).map(|(_, _, word)| word)
    }

    /// The live slot bound to `home.fp` (its bucket and index), with the funnel word that was
    /// validated against it.
    #[inline]
    fn find(&self, home: &Home) -> Option<(&Bucket, usize, u64)> {
        let first = &self.buckets[home.first];
        let second = &self.buckets[home.second];
        // Relaxed: tags are a filter (`bucket.rs`); every candidate is validated below, and a
        // stale miss only sends us to the locked slow path, whose rescan sees every completed
        // binding of this key.
        let in_first = match_tag(first.tags.load(Ordering::Relaxed), home.tag);
        let in_second = match_tag(second.tags.load(Ordering::Relaxed), home.tag);
        // Both buckets' candidates in one mask: slot `i` of the first bucket is bit `8i`, of
        // the second bit `8i + 4`. (A one-bucket table checks its bucket twice on a miss.)
        let mut candidates = (in_first >> 7) | (in_second >> 3);
        while candidates != 0 {
            let bit = candidates.trailing_zeros();
            candidates &= candidates - 1;
            let bucket = if bit & 4 == 0 { first } else { second };
            let i = (bit >> 3) as usize;
            if let Some(word) = validate(bucket, i, home.fp) {
                return Some((bucket, i, word));
            }
        }
        None
    }

    /// Starts loading both candidate buckets of `home` (both lines of each) without waiting
    /// for them, so that a batch of lookups overlaps its cache misses (`prefetch.rs`).
    #[inline]
    pub(crate) fn prefetch(&self, home: &Home) {
        for b in [home.first, home.second] {
            let bucket = &self.buckets[b];
            prefetch::prefetch(&bucket.tags);
            prefetch::prefetch(&bucket.words[0]);
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
            // Acquire: the table is at rest (caller's contract); Acquire makes the last
            // writers' stores visible even if they ran on other threads.
            let tags = bucket.tags.load(Ordering::Acquire);
            for i in 0..SLOTS_PER_BUCKET {
                let word = bucket.words[i].load(Ordering::Acquire);
                let key = bucket.keys[i].load(Ordering::Acquire);
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
                        if (tags >> (8 * i)) & 0xFF != tag_of(key) {
                            return Err(format!("slot {b}.{i} has a tag that is not its key's"));
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

/// Validates slot `i` of `bucket` as bound to `fp`, returning its funnel word: the key, then
/// the word, then the key again (`docs/DESIGN.md`, "The slot protocol", reader steps 2-4).
#[inline]
fn validate(bucket: &Bucket, i: usize, fp: u64) -> Option<u64> {
    // Acquire: if this reads the key store of the binding that bound `fp` here, it pairs with
    // that Release store, which follows the binding's RESERVED CAS: the word load below then
    // sees RESERVED or newer, never the funnel that binding evicted.
    if bucket.keys[i].load(Ordering::Acquire) != fp {
        return None;
    }
    // Acquire: pairs with the Release LIVE store that published this word's binding (or the
    // Release CAS of a later update), so the key re-load below sees that binding's key or a
    // newer one.
    let word = bucket.words[i].load(Ordering::Acquire);
    if word == state::EMPTY || word & state::TAT_MASK == state::TAT_MASK {
        return None; // RESERVED: being rebound (EMPTY cannot follow a bound key; kept for clarity)
    }
    // Acquire: if `word` belongs to a later binding than the key loaded first, this sees that
    // binding's key (or a newer one): a key other than `fp`, unless the slot was rebound to
    // `fp` yet again in between (the double-rebind residual, DESIGN.md).
    (bucket.keys[i].load(Ordering::Acquire) == fp).then_some(word)
}

/// Charges a request to slot `i` of `bucket`, whose validated word is `word`. `None` when the
/// slot was rebound to another key meanwhile (the caller looks the key up again).
#[inline]
fn charge(
    bucket: &Bucket,
    i: usize,
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
        let Some(new_tat) = write else {
            // A denial or a peek writes nothing, and needs no second read: `word` was this
            // key's funnel when it was loaded (DESIGN.md, "A denial reads one word").
            return Some(decision);
        };
        // Release on success: readers that Acquire this word see our binding's key
        // (transitively, the creator's key store). Acquire on failure: as the word load in
        // `validate`, for the key re-check below.
        match bucket.words[i].compare_exchange_weak(
            word,
            state::live(gen, new_tat),
            Ordering::Release,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some(decision),
            Err(current) => {
                // The word moved: a concurrent update of our key (retry with it) or a rebind
                // (give up). Acquire: as the key re-load in `validate`.
                if bucket.keys[i].load(Ordering::Acquire) != fp {
                    return None;
                }
                word = current;
            }
        }
    }
}
