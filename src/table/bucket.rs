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
//! * `lock` is the creation lock of the keys whose home this bucket is (`create.rs`).
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
    /// Creation lock of the keys whose home bucket this is.
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
const SEVEN_BITS: u64 = 0x7F7F_7F7F_7F7F_7F7F;
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
#[inline]
pub(crate) fn tag_of(fp: u64) -> u64 {
    let t = fp & 0xFF;
    t + u64::from(t == 0)
}

/// Bit `8i + 7` is set for every slot `i` whose tag byte equals `tag`: an exact zero-byte test
/// of `tags ^ tag * 0x0101..` (no false positives from borrows, unlike the shorter
/// `(x - 0x01..) & !x & 0x80..` form).
#[inline]
pub(crate) fn match_tag(tags: u64, tag: u64) -> u64 {
    let x = tags ^ tag.wrapping_mul(LOW_BITS);
    !(((x & SEVEN_BITS) + SEVEN_BITS) | x | SEVEN_BITS) & SLOT_HIGH_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(tags: u64, tag: u64) -> u64 {
        (0..SLOTS_PER_BUCKET)
            .filter(|i| (tags >> (8 * i)) & 0xFF == tag)
            .map(|i| 0x80 << (8 * i))
            .sum()
    }

    #[test]
    fn the_swar_match_equals_a_byte_by_byte_compare() {
        let mut rng = funnel_testkit::Rng::new(0x1234_5678_9ABC_DEF1);
        for round in 0..20_000u64 {
            let x = rng.next_u64();
            // Plant the tag in a few bytes, including 0x80 and 0x00 neighbours.
            let tag = 1 + (round % 255);
            let mut tags = x;
            for i in 0..8 {
                if (x >> (i + 40)) & 3 == 0 {
                    tags = (tags & !(0xFF << (8 * i))) | (tag << (8 * i));
                }
            }
            assert_eq!(match_tag(tags, tag), naive(tags, tag), "{tags:#x} {tag:#x}");
            assert_eq!(match_tag(tags ^ 0x80, tag), naive(tags ^ 0x80, tag));
        }
    }

    #[test]
    fn tags_are_never_zero_so_unbound_slots_match_nothing() {
        assert_eq!(tag_of(0xFFFF_FFFF_FFFF_FF00), 1);
        assert_eq!(tag_of(0x0000_0000_0000_00AB), 0xAB);
        for tag in 1..=255 {
            assert_eq!(match_tag(0, tag), 0);
        }
    }

    #[test]
    fn set_tag_changes_only_its_own_byte() {
        let b = Bucket::new();
        b.set_tag(0, 0xAA);
        b.set_tag(SLOTS_PER_BUCKET - 1, 0xBB);
        b.set_tag(0, 0xCC);
        let tags = b.tags.load(Ordering::Relaxed);
        assert_eq!(match_tag(tags, 0xCC), 0x80);
        assert_eq!(match_tag(tags, 0xAA), 0);
        assert_eq!(match_tag(tags, 0xBB), 0x80 << (8 * (SLOTS_PER_BUCKET - 1)));
    }
}
