//! One bucket of the keyed table: 128 bytes, two cache lines, seven slots.
//!
//! ```text
//!  line 0: | tags (8 B) | fingerprint 0 | fingerprint 1 | ... | fingerprint 6 |
//!  line 1: | word 0     | word 1        | ...           | word 6 | lock (1 B) + padding |
//! ```
//!
//! * `tags` holds one byte per slot, the low byte of the bound key's fingerprint (never 0, so
//!   a slot that was never bound matches no key; the bucket comes from other bits). A lookup loads the tag words of both
//!   candidate buckets and matches them in a few word operations (SWAR) into one bitmask, so
//!   finding a key, or learning that it is absent, takes no data-dependent branch per slot.
//!   Tags are a filter only: every match is validated on the full 64-bit fingerprint.
//! * `keys[i]` is the fingerprint bound to slot `i`, `words[i]` its packed funnel word
//!   (`state.rs`). A hit reads its tag word, one fingerprint and its funnel word.
//! * `lock` is, in a fixed table, the creation lock of the keys whose first bucket this is
//!   (`create.rs`); a growable table has an array of its own (`grow/`) and leaves it unused.
//!
//! Loom models use buckets of four slots, which keeps their state space small; the protocol
//! does not depend on the bucket size.

use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// Slots per bucket.
#[cfg(not(funnel_loom))]
pub(crate) const SLOTS_PER_BUCKET: usize = 7;
#[cfg(funnel_loom)]
pub(crate) const SLOTS_PER_BUCKET: usize = 4;

#[repr(C, align(128))]
pub(crate) struct Bucket {
    /// Byte `i`: the tag of the key bound to slot `i` (0 if never bound).
    pub(crate) tags: AtomicU64,
    /// The bound keys' 64-bit fingerprints, never 0 once bound.
    pub(crate) keys: [AtomicU64; SLOTS_PER_BUCKET],
    /// The packed funnel words (`state.rs`).
    pub(crate) words: [AtomicU64; SLOTS_PER_BUCKET],
    /// In a fixed table, the creation lock of the keys whose first bucket this is (a growable
    /// table locks through its own array, `Growth::stripe`).
    pub(crate) lock: AtomicBool,
}

#[cfg(not(funnel_loom))]
const _: () = {
    assert!(
        std::mem::size_of::<Bucket>() == 128,
        "a bucket is two cache lines"
    );
    assert!(
        std::mem::offset_of!(Bucket, words) == 64,
        "tags and fingerprints fill the first line, funnel words start the second"
    );
};

impl Bucket {
    /// An empty bucket; outside loom and tests, tables get theirs zeroed by the allocator
    /// (`empty_buckets`).
    #[cfg(any(test, funnel_loom))]
    pub(crate) fn new() -> Bucket {
        Bucket {
            tags: AtomicU64::new(0),
            keys: std::array::from_fn(|_| AtomicU64::new(0)),
            words: std::array::from_fn(|_| AtomicU64::new(crate::state::EMPTY)),
            lock: AtomicBool::new(false),
        }
    }

    /// Records that slot `i` now holds a key tagged `tag`. Called by the creator that owns the
    /// slot (it holds it RESERVED), so no other writer changes byte `i` meanwhile; other bytes
    /// may change under us, hence the read-modify-write.
    pub(crate) fn set_tag(&self, i: usize, tag: u64) {
        let shift = 8 * i;
        // Relaxed: tags are a filter. A reader that misses a fresh tag takes the locked slow
        // path, and the lock's Release/Acquire pair (the tag is written before the creator
        // unlocks) shows it to every later creator of the same key, which is what matters.
        let _ = self
            .tags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some((t & !(0xFF << shift)) | (tag << shift))
            });
    }
}

const LOW_BITS: u64 = 0x0101_0101_0101_0101;
/// The high bit of each byte that belongs to a slot.
const SLOT_HIGH_BITS: u64 = {
    let mut m = 0;
    let mut i = 0;
    while i < SLOTS_PER_BUCKET {
        m |= 0x80 << (8 * i);
        i += 1;
    }
    m
};

/// The tag of a fingerprint: its low byte, never 0.
#[inline(always)]
pub(crate) fn tag_of(fp: u64) -> u64 {
    let t = fp & 0xFF;
    t + u64::from(t == 0)
}

/// The slots of two buckets whose tag byte may equal `tag`, in one mask: slot `i` of the
/// bucket whose tag word is `first` is bit `8i + 7`, of the one whose tag word is `second` bit
/// `8i + 3`; so bit 2 of a candidate's index says which bucket, and the index shifted right by
/// 3 which slot. Every slot whose tag equals `tag` is in the mask, and the **lowest** bit set is
/// always such a slot; a higher bit may also be a slot whose tag is `tag ^ 1` sitting above a
/// true match (a borrow of the short zero-byte test, `(x - 0x01..) & !x & 0x80..`), which the
/// caller's validation of the full fingerprint rejects like any other tag collision. The exact
/// test costs about twice the instructions for no change in any answer.
#[inline(always)]
pub(crate) fn candidates(first: u64, second: u64, tag: u64) -> u64 {
    let pattern = tag.wrapping_mul(LOW_BITS);
    zero_bytes(first ^ pattern) | (zero_bytes(second ^ pattern) >> 4)
}

/// Bit 7 of every slot byte of `x` that is zero; possibly also of a byte `0x01` above a zero
/// byte, never below the lowest zero byte (borrows only travel up).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(LOW_BITS) & !x & SLOT_HIGH_BITS
}

/// `n` empty buckets. The all-zero bucket is exactly [`Bucket::new`] (no tags, no keys, EMPTY
/// words, unlocked), so the table asks the allocator for zeroed memory instead of writing it:
/// the operating system hands out zero pages lazily, so a table's resident memory is the part
/// of it that has been touched. That is what lets a growable table reserve its maximum size
/// up front and start with the resident memory of its initial size (`grow/`); the buckets in
/// use from the start are touched by the table when it is built, so that first-touch page
/// faults happen then and not in requests. `None` when the allocation fails.
#[cfg(not(funnel_loom))]
pub(crate) fn empty_buckets(n: usize) -> Option<Box<[Bucket]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<Bucket>(n).ok()?;
    // SAFETY:
    // * `layout` has a non-zero size (n >= 1 buckets of 128 bytes), as `alloc_zeroed` requires;
    // * a null pointer (allocation failure) is checked before use;
    // * otherwise the pointer is valid for `n` buckets and zero-filled, and all-zero bytes are
    //   a valid `Bucket`: every field is an `AtomicU64` (the representation of a `u64`) or an
    //   `AtomicBool` (of a `bool`, 0 = false), and `#[repr(C)]` leaves only padding besides,
    //   which needs no value (`a_zeroed_bucket_is_a_new_bucket` checks the fields);
    // * `Box<[Bucket]>` frees with `Layout::array::<Bucket>(n)` from the global allocator,
    //   exactly the layout and allocator it was allocated with.
    #[allow(unsafe_code)]
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<Bucket>();
        if ptr.is_null() {
            return None;
        }
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)))
    }
}

/// Under loom the atomics carry the model's state, so zeroed memory is not a valid bucket:
/// build each one.
#[cfg(funnel_loom)]
pub(crate) fn empty_buckets(n: usize) -> Option<Box<[Bucket]>> {
    Some((0..n).map(|_| Bucket::new()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit `8i` for every slot `i` whose tag is `tag`.
    fn naive(tags: u64, tag: u64) -> u64 {
        (0..SLOTS_PER_BUCKET)
            .filter(|i| (tags >> (8 * i)) & 0xFF == tag)
            .map(|i| 1 << (8 * i))
            .sum()
    }

    /// What `candidates` promises for one bucket's part of the mask (`shift` 0 or 4).
    fn check(mask: u64, tags: u64, tag: u64) {
        let exact = naive(tags, tag);
        assert_eq!(
            mask & exact,
            exact,
            "a true match is missing: {tags:#x} {tag:#x}"
        );
        if mask != 0 {
            let lowest = mask & mask.wrapping_neg();
            assert_ne!(lowest & exact, 0, "the lowest candidate is not a match");
        }
        for i in 0..SLOTS_PER_BUCKET {
            if mask & (1 << (8 * i)) != 0 && exact & (1 << (8 * i)) == 0 {
                assert_eq!((tags >> (8 * i)) & 0xFF, tag ^ 1, "false candidate {i}");
                assert!(exact & ((1 << (8 * i)) - 1) != 0, "no true match below {i}");
            }
        }
    }

    /// The two buckets' parts of a `candidates` mask, each as bit `8i` per slot.
    fn split(both: u64) -> (u64, u64) {
        let lanes = (0..SLOTS_PER_BUCKET).map(|i| 1u64 << (8 * i)).sum::<u64>();
        ((both >> 7) & lanes, (both >> 3) & lanes)
    }

    #[test]
    fn the_swar_match_finds_every_match_and_starts_with_a_true_one() {
        let mut rng = funnel_testkit::Rng::new(0x1234_5678_9ABC_DEF1);
        for round in 0..50_000u64 {
            let x = rng.next_u64();
            let y = rng.next_u64();
            // Plant the tag, and its neighbour `tag ^ 1`, in a few bytes.
            let tag = 1 + (round % 255);
            let plant = |mut tags: u64, bits: u64| {
                for i in 0..8 {
                    match (bits >> (2 * i)) & 7 {
                        0 => tags = (tags & !(0xFF << (8 * i))) | (tag << (8 * i)),
                        1 => tags = (tags & !(0xFF << (8 * i))) | ((tag ^ 1) << (8 * i)),
                        _ => {}
                    }
                }
                tags
            };
            let (a, b) = (plant(x, y), plant(y, x));
            let (in_a, in_b) = split(candidates(a, b, tag));
            check(in_a, a, tag);
            check(in_b, b, tag);
        }
    }

    #[test]
    fn tags_are_never_zero_so_unbound_slots_match_nothing() {
        assert_eq!(tag_of(0xFFFF_FFFF_FFFF_FF00), 1);
        assert_eq!(tag_of(0x0000_0000_0000_00AB), 0xAB);
        for tag in 1..=255 {
            assert_eq!(candidates(0, 0, tag), 0);
        }
    }

    #[test]
    fn set_tag_changes_only_its_own_byte() {
        let b = Bucket::new();
        b.set_tag(0, 0xAA);
        b.set_tag(SLOTS_PER_BUCKET - 1, 0xBB);
        b.set_tag(0, 0xCC);
        let tags = b.tags.load(Ordering::Relaxed);
        assert_eq!(naive(tags, 0xCC), 1);
        assert_eq!(naive(tags, 0xAA), 0);
        assert_eq!(naive(tags, 0xBB), 1 << (8 * (SLOTS_PER_BUCKET - 1)));
    }

    #[cfg(not(funnel_loom))]
    #[test]
    fn a_zeroed_bucket_is_a_new_bucket() {
        let zeroed = empty_buckets(3).unwrap();
        let new = Bucket::new();
        for b in zeroed.iter() {
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            assert_eq!(load(&b.tags), load(&new.tags));
            for i in 0..SLOTS_PER_BUCKET {
                assert_eq!(load(&b.keys[i]), load(&new.keys[i]));
                assert_eq!(load(&b.words[i]), load(&new.words[i]));
            }
            assert_eq!(
                b.lock.load(Ordering::Relaxed),
                new.lock.load(Ordering::Relaxed)
            );
        }
        assert!(empty_buckets(0).unwrap().is_empty());
    }
}
