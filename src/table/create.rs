//! Creating a key: the locked slow path. A creator takes the creation lock of the key's home
//! bucket, looks the key up again, picks a victim slot (EMPTY, then recovered, then
//! [`WhenFull`]), reserves it, and binds the key (`docs/DESIGN.md`, "The slot protocol").

use super::bucket::{tag_of, Bucket, SLOTS_PER_BUCKET};
use super::{Home, Table};
use crate::state::{self, SlotState};
use crate::sync::{spin, AtomicBool, Ordering};

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

/// A slot of a bucket, with the funnel word it was seen holding.
#[derive(Clone, Copy)]
struct Seen<'a> {
    bucket: &'a Bucket,
    /// The slot's index in its bucket.
    i: usize,
    word: u64,
}

/// The least indebted live slot seen so far: the victim of last resort.
#[derive(Clone, Copy)]
struct Indebted<'a> {
    seen: Seen<'a>,
    /// Its funnel's arrival time (after `now`: still in debt).
    tat: u64,
}

/// How the slot a creator takes was freed, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// EMPTY, or a funnel that had fully recovered: nobody loses anything.
    Free,
    /// A funnel still in debt, evicted under [`WhenFull::Evict`].
    Forced,
}

/// Free slots of one candidate bucket, as seen by a creator.
#[derive(Default)]
struct Scan<'a> {
    /// How many slots are EMPTY or recovered.
    free: usize,
    /// The one to take: the first EMPTY slot if any (so a recovered key keeps its slot while
    /// there is room, and need not be created again on its next request), else the first
    /// recovered one.
    slot: Option<Seen<'a>>,
}

impl Table {
    pub(super) fn create(&self, home: &Home, now: u64, new_tat: u64) -> Created {
        let _lock = lock(&self.buckets[home.first].lock);
        // A racing creator of the same key may have finished while we waited: the lock's
        // Acquire makes its binding (key, tag and word) visible here.
        if self.find(home).is_some() {
            return Created::Exists;
        }
        let mut round = 0;
        loop {
            // Two-choice placement: the candidate bucket with more free slots (EMPTY or
            // recovered) takes the key, the home bucket on a tie; the least indebted live slot
            // of either is the victim of last resort.
            let mut least: Option<Indebted<'_>> = None;
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
            let (victim, taken) = match (free, least) {
                (Some(seen), _) => (seen, Taken::Free),
                (None, Some(Indebted { seen, tat })) => match self.when_full {
                    WhenFull::Evict => (seen, Taken::Forced),
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
            let Seen { bucket, i, word } = victim;
            let gen = state::gen_of(word);
            // Winning this CAS is what matters (an update or another creator that got there
            // first makes it fail); ordering for readers comes from the Release key store below.
            // Acquire on success: pairs with the Release store (or update/reset CAS) of the word
            // we replace, so the previous binding's key store happens before ours and ours is
            // the later one in the key word's order. Creators under different locks (home
            // buckets) share no other ordering; with Relaxed the old key could land last and
            // pair with our funnel (loom model 4a).
            if bucket.words[i]
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
            // funnel word, so it cannot pair the new key with the evicted funnel.
            bucket.keys[i].store(home.fp, Ordering::Release);
            bucket.set_tag(i, tag_of(home.fp));
            // Release: publishes the key store above to readers that Acquire-load this word.
            bucket.words[i].store(
                state::live(state::next_gen(gen), new_tat),
                Ordering::Release,
            );
            let shard = self.shard(home);
            let counter = match state::decode(word) {
                SlotState::Empty => &shard.keys,
                _ if taken == Taken::Forced => &shard.forced,
                _ => &shard.recovered,
            };
            // Relaxed: a statistic; readers sum shards without ordering.
            counter.fetch_add(1, Ordering::Relaxed);
            return Created::Bound;
        }
    }
}

/// Counts `bucket`'s free slots at `now`, and lowers `least` to its least indebted live slot.
fn scan<'a>(bucket: &'a Bucket, now: u64, least: &mut Option<Indebted<'a>>) -> Scan<'a> {
    let mut found = Scan::default();
    for i in 0..SLOTS_PER_BUCKET {
        // Relaxed: the creator's CAS validates whatever slot it picks.
        let word = bucket.words[i].load(Ordering::Relaxed);
        let seen = Seen { bucket, i, word };
        match state::decode(word) {
            SlotState::Empty => {
                if !matches!(found.slot, Some(s) if s.word == state::EMPTY) {
                    found.slot = Some(seen);
                }
            }
            SlotState::Live { tat, .. } if tat <= now => {
                found.slot.get_or_insert(seen);
            }
            SlotState::Live { tat, .. } => {
                if least.is_none_or(|l| tat < l.tat) {
                    *least = Some(Indebted { seen, tat });
                }
                continue;
            }
            SlotState::Reserved => continue,
        }
        found.free += 1;
    }
    found
}

struct CreationLock<'a>(&'a AtomicBool);

impl Drop for CreationLock<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `lock`.
        self.0.store(false, Ordering::Release);
    }
}

fn lock(lock: &AtomicBool) -> CreationLock<'_> {
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
