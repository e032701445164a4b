//! Finding a key. The hot path (`find`): both candidate buckets' tag words matched into one
//! bitmask, each candidate slot read as word then key (the decision reads the word again:
//! `reread`). The slow path (`locate`): every slot of the buckets where the key may be,
//! including, while the table grows, the buckets it had before, and completing a move that
//! another thread left half done.

use super::bucket::Bucket;
use super::tags::{candidates, slot_of};
use super::{preferred, prefetch, Home, Table};
use crate::state::{self, SlotState};
use crate::sync::{AtomicU64, Ordering};

/// A live slot bound to the key looked up, and the funnel word validated against it.
#[derive(Clone, Copy)]
pub(super) struct Found<'a> {
    /// The bucket holding the slot.
    pub(super) bucket: &'a Bucket,
    /// The slot's index in its bucket.
    pub(super) slot: usize,
    /// The funnel word (live): from [`Table::locate`], read while the slot was bound to the
    /// key; from [`Table::find`], the key's only once a second read finds it unchanged
    /// (`update::charge`'s CAS or load, or [`confirmed`](Self::confirmed)).
    pub(super) word: u64,
}

impl Found<'_> {
    /// `self` if a second read of the slot's word finds it unchanged ([`reread`]): what a
    /// caller of [`Table::find`] that neither CASes the word nor goes through `update::charge`
    /// (a report of the key's arrival time) must do before using it.
    pub(super) fn confirmed(self) -> Option<Self> {
        reread(self.bucket, self.slot, self.word)
            .is_ok()
            .then_some(self)
    }
}

/// The second read of slot `slot`'s word that ends a decision or a report writing nothing (an
/// allowed request's CAS is the other kind): `Ok` when it is still `word`, which was then the
/// key's between the two reads (docs/design/slot-protocol.md, "Every decision reads its word twice"); else
/// the word it holds now, for [`still_bound`].
#[inline(always)]
pub(super) fn reread(bucket: &Bucket, slot: usize, word: u64) -> Result<(), u64> {
    // Acquire: as the first read in `validate_live`, for `still_bound` when it changed. And if
    // the key load after the first read saw a later binding's key store, that binding's
    // RESERVED CAS happens before this load, which then cannot return the word it replaced.
    let current = bucket.words[slot].load(Ordering::Acquire);
    if current == word {
        Ok(())
    } else {
        Err(current)
    }
}

/// After a second read (or a failed CAS) found slot `slot`'s word changed: whether the slot
/// still holds `fp`, so the caller may decide again on the word it now read (a concurrent
/// update of the key) rather than look the key up again (a rebind).
#[inline(always)]
pub(super) fn still_bound(bucket: &Bucket, slot: usize, fp: u64) -> bool {
    // Acquire: as the key load in `validate_live` (the decision taken again ends on another
    // second read of the word).
    bucket.keys[slot].load(Ordering::Acquire) == fp
}

/// What one slot holds for a key, read by the validation protocol.
enum Seen<'a> {
    /// The key's funnel.
    Live(Found<'a>),
    /// The target of a move of the key; its funnel is still the source's.
    Pending(Found<'a>),
    /// The sealed source of a move of the key (its word is `MOVED(tat)`), with the arrival
    /// time the target takes.
    Moved(Found<'a>, u64),
    /// Nothing of the key's.
    Nothing,
}

impl Table {
    /// A lookup of `home` with its buckets' funnel-word lines hinted: what
    /// [`find`](Self::find) takes when the caller has not started loading them.
    #[inline(always)]
    pub(super) fn start_words(&self, home: &Home) -> Probe<'_> {
        let probe = self.probe(home);
        // Start loading the funnel words' lines now, so that on a table larger than the caches
        // their misses overlap the tag lines' instead of following them once the tags have
        // matched, although the second bucket's line is wasted whenever the key is in the
        // first; on a cached table a hint is nearly free, and testing the table's size to skip
        // it would cost more (docs/design/table.md). Off x86_64 no hint
        // (`prefetch::hint` says why).
        prefetch::hint(&probe.first.words[0]);
        prefetch::hint(&probe.second.words[0]);
        probe
    }

    /// The hot path: the live slot bound to the key of `probe`, if one of its candidate slots
    /// at the level in use holds it, with the word it held; that word is the key's once a
    /// second read finds it unchanged ([`Found::word`]). Looks in the buckets `probe` indexed,
    /// whose lines the caller has started loading ([`start_words`](Self::start_words), or
    /// [`start_loading`](Self::start_loading) before a clock read). `None` sends the caller to
    /// [`locate`](Self::locate), which also knows the states a growing table passes through.
    #[inline(always)]
    pub(super) fn find(probe: Probe<'_>) -> Option<Found<'_>> {
        let Probe {
            home,
            first,
            second,
            prefer,
        } = probe;
        if prefer {
            // A sparse table: the key's preferred slot first, before any tag word, validated as
            // every candidate below is (`validate_live`'s orderings); a miss costs the tag match
            // that follows (`preferred.rs`).
            let slot = preferred::slot(home.fp);
            if let Some(word) = validate_live(first, slot, home.fp) {
                return Some(Found {
                    bucket: first,
                    slot,
                    word,
                });
            }
        }
        // Relaxed: tags are a filter (`tags.rs`); every candidate is validated below, and a
        // stale miss only sends us to the slow path, which reads every slot of the buckets.
        let mut slots = candidates(
            first.tags.load(Ordering::Relaxed),
            second.tags.load(Ordering::Relaxed),
            home.tag,
        );
        while slots != 0 {
            let bit = slots.trailing_zeros();
            let (in_second, slot) = slot_of(bit);
            let bucket = if in_second { second } else { first };
            if let Some(word) = validate_live(bucket, slot, home.fp) {
                return Some(Found { bucket, slot, word });
            }
            slots &= slots - 1;
        }
        None
    }

    /// The slow path: the live slot bound to `fp` wherever the table may hold it now, or `None`
    /// when the key is absent. Looks at the key's candidate buckets, while the table grows first
    /// at the level it grows from (a key not moved yet is there), then at the level in use (a key
    /// moved or created since), and at every state of the key's slots: a move found half done
    /// (target pending, source sealed) is completed here, so no reader waits for a mover
    /// (`docs/design/growing.md`).
    ///
    /// Slots are found through their tags, as on the hot path: a slot holding the key in any
    /// state (pending, live, sealed) carries the key's tag, set before the slot could be seen in
    /// that state. A stale tag can only hide a binding this instant; creators look again under
    /// the key's creation lock, whose Acquire shows them every binding of the key, tag included
    /// (all were made under that lock).
    #[cold]
    pub(super) fn locate(&self, fp: u64) -> Option<Found<'_>> {
        // A move seen half way through may have advanced past our scan (a target we passed
        // before it was pending, a source we passed before it was sealed); one more scan sees
        // where it stands.
        let mut rescanned = false;
        loop {
            let (home, from) = self.homes(fp);
            let mut pending = None;
            let mut sealed = None;
            for at in from.iter().chain(std::iter::once(&home)) {
                let first = &self.buckets[at.first];
                let second = &self.buckets[at.second];
                // Relaxed: a filter, as on the hot path (see above).
                let mut slots = candidates(
                    first.tags.load(Ordering::Relaxed),
                    second.tags.load(Ordering::Relaxed),
                    at.tag,
                );
                while slots != 0 {
                    let bit = slots.trailing_zeros();
                    slots &= slots - 1;
                    let (in_second, slot) = slot_of(bit);
                    let bucket = if in_second { second } else { first };
                    match examine(bucket, slot, fp) {
                        Seen::Live(found) => return Some(found),
                        Seen::Pending(target) => pending = Some(target),
                        // Acquire (the word load in `validate`): a sealed source shows us its
                        // target, made pending before the seal.
                        Seen::Moved(source, tat) => sealed = Some((source, tat)),
                        Seen::Nothing => {}
                    }
                }
            }
            match (pending, sealed) {
                // Half done: the source is sealed, the target still pending. Complete it (any
                // thread may; the first CAS wins, the others fail on a live word) and look again,
                // once we know the two are one move's. A source seen sealed *before* the target was
                // seen pending may be an earlier move's, finished since: the key, charged in the
                // slot that move made live, then moved again, and the target is the new move's.
                // Completing it with the old move's arrival time would forget every charge in
                // between. Validating the source again settles it: the target's PENDING word was
                // Acquire-loaded in `validate`, every move of a key runs under its creation lock,
                // and a move ends by marking its source DEAD, before that lock is released; so a
                // target made pending by a later move shows us that DEAD word (or a newer
                // binding's), and the source then fails validation. A source that still holds the
                // key and the same sealed word belongs to the move in progress, the target's (a key
                // has one move at a time, and that move's seal is its source's only write once its
                // target is pending), or to a later move of the key back into that slot, sealed
                // with the same arrival time; that one began after our target went live, so
                // `complete`'s CAS fails on it (short of the generation ABA of `docs/design/slot-protocol.md`,
                // which would need three more bindings of the target's slot). A target seen before
                // a source seen sealed needs no check: the target's word is compared by
                // `complete`'s CAS, and a later move's seal shows us the earlier target already
                // live.
                (Some(target), Some((source, tat))) => {
                    if validate(source.bucket, source.slot, fp) == Some(source.word) {
                        complete(target, tat);
                    }
                }
                // Nothing of the key's anywhere: absent.
                (None, None) => return None,
                // A target without its sealed source, or a sealed source without its target:
                // the move went on while we scanned. Look once more.
                _ if !rescanned => rescanned = true,
                // Still: a sealed source whose target is gone (a recovered key dropped, or the
                // moved key evicted since), or a target whose source was evicted (its mover is
                // abandoning it). The key is absent.
                _ => return None,
            }
        }
    }

    /// Whether no candidate slot of `fp` carries its tag, in a table that is not moving keys
    /// between levels: then no slot holds anything of the key's, in any state (every state a
    /// slot of the key passes through carries its tag, set before the slot could be seen in
    /// it; tags are never cleared), and [`locate`](Self::locate) would answer `None` too. A
    /// new key's creation checks this first and skips both of its lookups when it holds
    /// (their scan of every slot state is most of a creation's cost).
    ///
    /// Unlocked it is a filter, as the hot path's tags are (Relaxed: a binding this instant may
    /// not show yet, in which case `locate` would miss it the same way, and the creation
    /// looks again under the lock; and its two tag words, read one after the other, may show a
    /// key that moved between them in neither, once another key is bound in the slot it left,
    /// which is why a report that creates nothing trusts its miss only when no move of the key
    /// ran meanwhile, `moves.rs`). Under the key's creation lock it is exact: every binding of
    /// the key, tag included, was made under that lock, whose Acquire shows it to us, and no
    /// move of the key can run; a growth that starts later waits for our unlock (`grow/`, the
    /// barrier), so a level read here as settled stays so until then.
    pub(super) fn untagged(&self, fp: u64) -> bool {
        let (home, from) = self.homes(fp);
        // Relaxed: see above.
        from.is_none()
            && candidates(
                self.buckets[home.first].tags.load(Ordering::Relaxed),
                self.buckets[home.second].tags.load(Ordering::Relaxed),
                home.tag,
            ) == 0
    }

    /// [`locate`](Self::locate) for a caller that holds `fp`'s creation lock, where it is exact
    /// (no move of the key runs, every binding of it is visible: `untagged`), skipped when no
    /// slot carries the key's tag.
    pub(super) fn locate_held(&self, fp: u64) -> Option<Found<'_>> {
        if self.untagged(fp) {
            None
        } else {
            self.locate(fp)
        }
    }

    /// Starts loading both candidate buckets of `home` (both lines of each) into the L2 cache
    /// without waiting for them, so that a batch of lookups overlaps its cache misses
    /// (`prefetch::ahead`).
    #[inline]
    pub(crate) fn prefetch(&self, home: &Home) {
        self.each_line(home, prefetch::ahead);
    }

    /// A single decision's own start on the lines [`find`](Self::find) reads for `home`: hints
    /// only (`prefetch::hint`), given before the caller reads the clock, which would otherwise
    /// hold the loads back (`Limiter::decide_now`).
    #[inline(always)]
    pub(crate) fn start_loading(&self, home: &Home) -> Probe<'_> {
        self.each_line(home, prefetch::hint)
    }

    /// `touch` on a word of each line of `home`'s buckets: both buckets' tags and funnel words.
    #[inline(always)]
    fn each_line(&self, home: &Home, touch: impl Fn(&AtomicU64)) -> Probe<'_> {
        let probe = self.probe(home);
        lines_of(probe.first, &touch);
        lines_of(probe.second, &touch);
        probe
    }

    /// `touch` on a word of each of bucket `b`'s two lines: its tags and its funnel words.
    #[inline(always)]
    pub(super) fn each_line_of(&self, b: usize, touch: impl Fn(&AtomicU64)) {
        lines_of(&self.buckets[b], touch);
    }

    /// A lookup of `home`: its two candidate buckets, indexed.
    #[inline(always)]
    pub(super) fn probe(&self, home: &Home) -> Probe<'_> {
        debug_assert!(home.first < self.buckets.len() && home.second < self.buckets.len());
        // SAFETY: a `Home`'s buckets are below the number of buckets allocated, which never
        // changes (`Home`'s invariant), so both indices are in bounds. Unchecked because this is
        // every decision's path, and the invariant already guarantees what the checks would
        // (docs/design/table.md).
        #[allow(unsafe_code)]
        let (first, second) = unsafe {
            (
                self.buckets.get_unchecked(home.first),
                self.buckets.get_unchecked(home.second),
            )
        };
        Probe {
            home: *home,
            first,
            second,
            prefer: self.prefer.first(),
        }
    }
}

/// A lookup under way: a key's home and its two candidate buckets (the same one twice when
/// they coincide), indexed once. Made only by the table, from the home it carries, so the
/// buckets are always that key's.
#[derive(Clone, Copy)]
pub(crate) struct Probe<'a> {
    home: Home,
    first: &'a Bucket,
    second: &'a Bucket,
    /// Whether to read the key's preferred slot first (`preferred.rs`).
    prefer: bool,
}

impl Probe<'_> {
    /// The key's fingerprint.
    #[inline(always)]
    pub(super) fn fp(&self) -> u64 {
        self.home.fp
    }
}

/// `touch` on a word of each of `bucket`'s two lines: its tags and its funnel words.
#[inline(always)]
fn lines_of(bucket: &Bucket, touch: impl Fn(&AtomicU64)) {
    touch(&bucket.tags);
    touch(&bucket.words[0]);
}

impl Home {
    /// The key's candidate buckets, each once.
    pub(super) fn buckets(&self) -> impl Iterator<Item = usize> {
        let second = (self.second != self.first).then_some(self.second);
        std::iter::once(self.first).chain(second)
    }
}

/// The hot path's reading of slot `slot` of `bucket` for `fp`: its funnel word, which must be
/// live, then its key, which must be `fp` (`docs/design/slot-protocol.md`, reader steps
/// 2-3). The word is the key's only if it is still the same when the decision ends: the
/// caller's CAS compares it, and a denial reads it again (`update::charge`; `docs/design/slot-protocol.md`, "Every
/// decision reads its word twice").
#[inline(always)]
fn validate_live(bucket: &Bucket, slot: usize, fp: u64) -> Option<u64> {
    // Acquire: pairs with the Release store or CAS that wrote this word (its binding's LIVE
    // store, or an update's CAS), so the key load below sees that binding's key or a later one.
    let word = bucket.words[slot].load(Ordering::Acquire);
    if !state::is_live(word) {
        return None;
    }
    // Acquire: if this reads the key store of a later binding than the word's, it pairs with
    // that Release store, which follows the binding's RESERVED CAS: the caller's second read
    // of the word (its CAS, or a denial's load) then sees RESERVED or newer, not `word`.
    (bucket.keys[slot].load(Ordering::Acquire) == fp).then_some(word)
}

/// Validates slot `slot` of `bucket` as bound to `fp`, returning the word read while it was:
/// the key, then the word, then the key again: the slow path's reading, whose word may be in
/// any state (the caller checks which), some of which no CAS of the caller's compares
/// (`docs/design/slot-protocol.md`, the slow path).
#[inline(always)]
fn validate(bucket: &Bucket, slot: usize, fp: u64) -> Option<u64> {
    // Acquire: if this reads the key store of the binding that bound `fp` here, it pairs with
    // that Release store, which follows the binding's RESERVED CAS: the word load below then
    // sees RESERVED or newer, never the funnel that binding evicted.
    if bucket.keys[slot].load(Ordering::Acquire) != fp {
        return None;
    }
    // Acquire: pairs with the Release store that published this word's binding (or the
    // Release CAS of a later update), so the key re-load below sees that binding's key or a
    // newer one.
    let word = bucket.words[slot].load(Ordering::Acquire);
    // Acquire: if `word` belongs to a later binding than the key loaded first, this sees that
    // binding's key (or a newer one): a key other than `fp`, unless the slot was rebound to
    // `fp` yet again in between (the slow path's residual: `docs/design/slot-protocol.md`, "Every decision reads
    // its word twice").
    (bucket.keys[slot].load(Ordering::Acquire) == fp).then_some(word)
}

/// What slot `slot` of `bucket` holds for the key `fp`.
fn examine(bucket: &Bucket, slot: usize, fp: u64) -> Seen<'_> {
    let Some(word) = validate(bucket, slot, fp) else {
        return Seen::Nothing;
    };
    let found = Found { bucket, slot, word };
    match state::decode(word) {
        SlotState::Live { .. } => Seen::Live(found),
        SlotState::Pending { .. } => Seen::Pending(found),
        SlotState::Moved { tat } => Seen::Moved(found, tat),
        SlotState::Empty | SlotState::Reserved | SlotState::Dead { .. } => Seen::Nothing,
    }
}

/// Completes a move: the pending target becomes live with the arrival time its source was
/// sealed with. The mover does the same; whoever comes first wins and the others' CAS fails
/// on a word that is already live (`docs/design/growing.md`, helping).
pub(super) fn complete(target: Found<'_>, tat: u64) {
    let SlotState::Pending { gen } = state::decode(target.word) else {
        return;
    };
    // AcqRel on success: Acquire pairs with the mover's Release PENDING store (so its key
    // store is visible to us), Release passes the binding on to readers that Acquire the live
    // word. Relaxed on failure: someone else completed it (or the slot moved on); the caller
    // looks again.
    let _ = target.bucket.words[target.slot].compare_exchange(
        target.word,
        state::live(gen, tat),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}
