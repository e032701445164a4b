//! Deciding and updating a key that is present: one CAS loop on its funnel word (lock-free), a
//! denial reads one word and writes nothing; an absent key falls back to creation
//! (`create.rs`).

use super::create::Created;
use super::lookup::Found;
use super::{Home, Table};
use crate::decision::Decision;
use crate::gcra;
use crate::quota::Quota;
use crate::state::{self, SlotState};
use crate::sync::Ordering;

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

/// Where the slow path of [`Table::decide`] starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// The key was just looked up and is absent: go straight to creation.
    Absent,
    /// The key's slot was rebound under us: look it up again.
    Again,
}

impl Table {
    /// Decides a request of `n` units at `now` for the key at `home`, creating its funnel if
    /// the request is allowed and the key is absent.
    #[inline]
    pub(crate) fn decide(&self, home: &Home, now: u64, quota: &Quota, n: u64) -> Decision {
        // The hot path (the key is present) stays small enough to inline; everything else is
        // out of line.
        let start = match self.find(home) {
            Some(found) => match charge(found, home.fp, now, quota, n) {
                Some(decision) => return decision,
                None => Lookup::Again, // rebound under us; the key may be elsewhere now
            },
            None => Lookup::Absent,
        };
        self.decide_slow(home, now, quota, n, start)
    }

    /// [`decide`](Self::decide) when the key was just found absent, or its slot was rebound
    /// under us (`start` says which).
    #[cold]
    #[inline(never)]
    fn decide_slow(
        &self,
        home: &Home,
        now: u64,
        quota: &Quota,
        n: u64,
        mut start: Lookup,
    ) -> Decision {
        loop {
            let found = match start {
                Lookup::Absent => None,
                Lookup::Again => self.find(home),
            };
            start = Lookup::Again;
            if let Some(found) = found {
                match charge(found, home.fp, now, quota, n) {
                    Some(decision) => return decision,
                    None => continue, // the slot was rebound under us: look again
                }
            }
            // Absent is the same as a fresh funnel (TAT = now).
            let (decision, write) = gcra::decide(0, now, quota, n);
            let Some(new_tat) = write else {
                return decision; // denied or a peek: an absent key stays absent
            };
            match self.create(home, now, new_tat) {
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
    /// creates it, subject to the table's [`WhenFull`](crate::WhenFull). The building block of every operation other than a
    /// plain decision (refunds, raising a key to a known arrival time); `f` may run several
    /// times and must be a pure function of its argument. Values above `MAX_TAT` are clamped.
    pub(crate) fn update(
        &self,
        home: &Home,
        now: u64,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Updated {
        'lookup: loop {
            let Some(Found {
                bucket,
                slot: i,
                mut word,
            }) = self.find(home)
            else {
                let Some(new_tat) = f(0) else {
                    return Updated::Unchanged(0);
                };
                let new_tat = new_tat.min(state::MAX_TAT);
                match self.create(home, now, new_tat) {
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
            let Some(Found {
                bucket,
                slot: i,
                word,
            }) = self.find(home)
            else {
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
}

/// Charges a request to the slot `found` for the key `fp`, starting from its validated word.
/// `None` when the slot was rebound to another key meanwhile (the caller looks the key up
/// again).
#[inline]
fn charge(found: Found<'_>, fp: u64, now: u64, quota: &Quota, n: u64) -> Option<Decision> {
    let Found {
        bucket,
        slot: i,
        mut word,
    } = found;
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
