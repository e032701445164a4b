//! Deciding and updating a key that is present: one CAS loop on its funnel word (lock-free); a
//! denial writes nothing and reads the word a second time instead; an absent key falls back to
//! creation (`create.rs`).

use super::create::Created;
use super::lookup::{reread, still_bound, Found, Probe};
use super::{Home, Table};
use crate::decision::Decision;
use crate::quota_kind::QuotaKind;
use crate::state;
use crate::sync::Ordering;

/// How a [`Table::update`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Updated {
    /// `f` chose to write nothing; the arrival time it saw (`0` for an absent key).
    Unchanged(u64),
    /// The key's arrival time went from the first value (`0` for an absent key) to the second.
    Written(u64, u64),
    /// The key was absent, `f` wanted to create it, and the table was full
    /// ([`WhenFull::Deny`](crate::WhenFull::Deny) or [`WhenFull::Allow`](crate::WhenFull::Allow)):
    /// nothing was stored.
    Full,
}

impl Table {
    /// Decides a request of `n` units at `now` for the key at `home`, creating its funnel if
    /// the request is allowed and the key is absent.
    ///
    /// The hot path (the key is present at the level in use) is inlined into the caller:
    /// hash, tag match, validation, the arithmetic and the second read of the word (a CAS, or a
    /// denial's load). Everything else is out of line in [`decide_slow`](Self::decide_slow),
    /// which takes only the fingerprint, so the hot path keeps its state in registers.
    #[inline(always)]
    pub(crate) fn decide<Q: QuotaKind>(
        &self,
        home: &Home,
        now: u64,
        quota: &Q,
        n: u64,
    ) -> Decision {
        self.decide_loaded(self.start_words(home), now, quota, n)
    }

    /// [`decide`](Self::decide) for a lookup whose buckets the caller has started loading
    /// ([`start_loading`](Self::start_loading), before its clock read).
    #[inline(always)]
    pub(crate) fn decide_loaded<Q: QuotaKind>(
        &self,
        probe: Probe<'_>,
        now: u64,
        quota: &Q,
        n: u64,
    ) -> Decision {
        let fp = probe.fp();
        if let Some(found) = Self::find(probe) {
            if let Some(decision) = charge(found, fp, now, quota, n) {
                return decision;
            }
        }
        self.decide_slow(fp, now, quota, n)
    }

    /// [`decide`](Self::decide) when the key was not found where the hot path looks, or its
    /// slot was rebound or sealed under us.
    #[cold]
    #[inline(never)]
    fn decide_slow<Q: QuotaKind>(&self, fp: u64, now: u64, quota: &Q, n: u64) -> Decision {
        // Absent is the same as a fresh funnel (TAT = now): the answer an absent key gets, and
        // whether it would be created.
        let (decision, write) = quota.decide(0, now, n);
        // A report (a peek, or a request no funnel could admit: nothing to write even for a
        // fresh funnel) that finds nothing trusts its miss only if no move of the key ran
        // meanwhile, so it reads the key's move count before any lookup (`moves.rs`). A
        // request that would create its key finds out under the creation lock instead.
        let before = write.is_none().then(|| self.moves_before(fp));
        // A key no slot is tagged for is absent: skip the full lookup the first time (a
        // new key's common case; the creation below looks again under the lock, exactly).
        let mut look = !self.untagged(fp);
        loop {
            if let Some(found) = look.then(|| self.locate(fp)).flatten() {
                match charge(found, fp, now, quota, n) {
                    Some(decision) => {
                        // While the table grows, a key not moved yet moves now if it can
                        // without waiting, so its next request is a hit.
                        self.nudge(fp, now, quota);
                        return decision;
                    }
                    // Rebound or sealed between the decision's two reads of the word (an allowed
                    // request's CAS failed, or a denial's second load found another key's word):
                    // look again.
                    None => continue,
                }
            }
            let Some(new_tat) = write else {
                // Denied or a peek: nothing to write, so no creation, whose lock would look
                // again. The lookups above may have missed a present key while one of its moves
                // ran (`moves.rs`); if one did, look once more under the key's creation lock,
                // where no move runs, and answer from the word read there.
                if before.is_some_and(|before| self.moved_since(fp, before)) {
                    if let Some(found) = self.locate_locked(fp) {
                        if let Some(decision) = charge(found, fp, now, quota, n) {
                            return decision;
                        }
                        look = true;
                        continue;
                    }
                }
                return decision;
            };
            // While the table grows, every creation moves a chunk of keys (it takes locks
            // anyway; a request for a key that is present never does, so it never waits).
            self.help_before_creating(fp, now, quota);
            match self.create(fp, now, new_tat, quota) {
                Created::Bound => return decision,
                Created::Exists => {
                    look = true;
                    continue;
                }
                Created::TurnedAway(retry) => return decision.turned_away_for(retry),
                Created::Untracked => return decision.untracked(),
            }
        }
    }

    /// Applies `f` to the key's arrival time (`0` when the key is absent, which is the same as
    /// a fresh funnel) and stores what it returns, retrying with the new value when a
    /// concurrent update moves the word first. `None` writes nothing; `Some` on an absent key
    /// creates it, subject to the table's [`WhenFull`](crate::WhenFull). The building block of
    /// every operation other than a plain decision (refunds, raising a key to a known arrival
    /// time); `f` may run several times and must be a pure function of its argument. Values
    /// above `MAX_TAT` are clamped.
    pub(crate) fn update<Q: QuotaKind>(
        &self,
        home: &Home,
        now: u64,
        quota: &Q,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Updated {
        let fp = home.fp;
        'lookup: loop {
            let Some(Found {
                bucket,
                slot: i,
                mut word,
            }) = self.locate(fp)
            else {
                let Some(new_tat) = f(0) else {
                    // Nothing to write for an absent key (a refund, a rollback): make sure it is
                    // absent. (Writing creates it, and creation looks again under the lock.)
                    if self.locate_locked(fp).is_some() {
                        continue 'lookup;
                    }
                    return Updated::Unchanged(0);
                };
                let new_tat = new_tat.min(state::MAX_TAT);
                self.help_before_creating(fp, now, quota);
                match self.create(fp, now, new_tat, quota) {
                    Created::Bound => return Updated::Written(0, new_tat),
                    Created::Exists => continue 'lookup,
                    Created::TurnedAway(_) | Created::Untracked => return Updated::Full,
                }
            };
            loop {
                if !state::is_live(word) {
                    continue 'lookup; // sealed by a move, or being rebound
                }
                let tat = state::tat_of(word);
                let Some(new_tat) = f(tat) else {
                    // Nothing to write: read the word again, as a denial does, so that the
                    // answer is the key's; a changed word is decided again (`reread`).
                    match reread(bucket, i, word) {
                        Ok(()) => return Updated::Unchanged(tat),
                        Err(current) if still_bound(bucket, i, fp) => word = current,
                        Err(_) => continue 'lookup,
                    }
                    continue;
                };
                let new_tat = new_tat.min(state::MAX_TAT);
                // Release on success / Acquire on failure: as in `charge`.
                match bucket.words[i].compare_exchange_weak(
                    word,
                    state::with_tat(word, new_tat),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Updated::Written(tat, new_tat),
                    // A rebind sends us back to the lookup.
                    Err(current) if still_bound(bucket, i, fp) => word = current,
                    Err(_) => continue 'lookup,
                }
            }
        }
    }

    /// [`locate`](Self::locate) under the key's creation lock: exact about a key that is
    /// present. Unlocked, a lookup can miss a present key whose whole move ran while it scanned
    /// (the tags read before the target was bound, the source dead by the time it was
    /// examined); every move of a key runs under its creation lock, and every binding of it was
    /// made under that lock, whose Acquire shows us all of them. For the answers that must not
    /// take a present key for an absent one and create nothing to find out: a refund or a
    /// rollback (which would leave the charge in place), a reset, and the reports (a peek, a
    /// request no funnel could admit, a key's arrival time).
    #[cold]
    fn locate_locked(&self, fp: u64) -> Option<Found<'_>> {
        let _lock = super::create::lock(self.stripe(fp));
        self.locate_held(fp)
    }

    /// The key's arrival time, `0` when it is absent (the same as a fresh funnel): a report, as
    /// a peek is, read without a lock unless its lookups miss the key while one of its moves
    /// runs (then once more under its lock, as `decide_slow` does). The word it answers from is
    /// read a second time, as a decision's is (`Found::confirmed`); a word that changed in
    /// between is looked up again.
    pub(crate) fn arrival_time(&self, home: &Home) -> u64 {
        let fp = home.fp;
        let before = self.moves_before(fp);
        loop {
            let Some(found) = Self::find(self.start_words(home))
                .or_else(|| self.locate(fp))
                .or_else(|| {
                    if self.moved_since(fp, before) {
                        self.locate_locked(fp)
                    } else {
                        None
                    }
                })
            else {
                return 0;
            };
            if let Some(found) = found.confirmed() {
                return state::tat_of(found.word);
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
            }) = self.locate(home.fp).or_else(|| self.locate_locked(home.fp))
            else {
                return false;
            };
            // The binding (and so its generation) stays: an updater that loaded `word` fails its
            // CAS on the TAT alone, and if the TAT climbs back to the very same value the word is
            // this key's true state again, so a late CAS from it is right. Keeping the generation
            // means resets never help another binding's word come back (`docs/design/slot-protocol.md`, ABA).
            let fresh = state::with_tat(word, 0);
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

/// Charges a request to the slot `found` for the key `fp`, starting from its validated live
/// word. `None` when the slot was rebound to another key or sealed by a move meanwhile (the
/// caller looks the key up again).
#[inline(always)]
fn charge<Q: QuotaKind>(
    found: Found<'_>,
    fp: u64,
    now: u64,
    quota: &Q,
    n: u64,
) -> Option<Decision> {
    let Found {
        bucket,
        slot: i,
        mut word,
    } = found;
    loop {
        let (decision, write) = quota.decide(state::tat_of(word), now, n);
        // Every decision ends on a second read of its word: `word` is the key's only if the
        // word has not changed since the key was read (`docs/design/slot-protocol.md`, "Every decision reads its
        // word twice").
        let current = match write {
            // A denial or a peek writes nothing: read the word again.
            None => match reread(bucket, i, word) {
                Ok(()) => return Some(decision),
                Err(current) => current,
            },
            // Release on success: readers that Acquire this word see our binding's key
            // (transitively, the creator's key store). Acquire on failure: as `reread`'s load.
            Some(new_tat) => match bucket.words[i].compare_exchange_weak(
                word,
                state::with_tat(word, new_tat),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(decision),
                Err(current) => current,
            },
        };
        // The word moved: a concurrent update of our key (decide again on it), a rebind or a
        // seal (give up).
        if !state::is_live(current) || !still_bound(bucket, i, fp) {
            return None;
        }
        word = current;
    }
}
