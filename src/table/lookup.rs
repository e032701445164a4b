//! Finding a key: both candidate buckets' tag words matched into one bitmask, each candidate
//! slot validated (key, word, key again), and prefetching for batches.

use super::bucket::{match_tag, Bucket};
use super::{prefetch, Home, Table};
use crate::state;
use crate::sync::Ordering;

/// A live slot bound to the key looked up, and the funnel word validated against it.
#[derive(Clone, Copy)]
pub(super) struct Found<'a> {
    /// The bucket holding the slot.
    pub(super) bucket: &'a Bucket,
    /// The slot's index in its bucket.
    pub(super) slot: usize,
    /// The funnel word read while the slot was bound to the key.
    pub(super) word: u64,
}

impl Table {
    /// The live slot bound to `home.fp` (its bucket and index), with the funnel word that was
    /// validated against it.
    #[inline]
    pub(super) fn find(&self, home: &Home) -> Option<Found<'_>> {
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
                return Some(Found {
                    bucket,
                    slot: i,
                    word,
                });
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
