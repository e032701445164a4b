//! Tags: one byte per slot, and the match of a key's tag against both of its candidate buckets
//! at once, into one bitmask with no branch per slot.
//!
//! A key's tag is its fingerprint's low byte, never 0 (the byte of a slot never bound), so an
//! empty slot matches no key. The match has two forms, which give the same candidates:
//!
//! * on x86_64, SSE2 (part of the x86_64 baseline): both tag words in one 16-byte register, one
//!   byte compare, one `pmovmskb`. Exact, and shorter than the word form on every lookup
//!   (docs/design/table.md);
//! * elsewhere, and under loom, the same in word operations (SWAR).
//!
//! Bits of the mask stand for slots differently in the two forms; [`slot_of`] reads a bit back,
//! and no caller looks at the layout otherwise.

/// The tag of a fingerprint: its low byte, never 0.
#[inline(always)]
pub(crate) fn tag_of(fp: u64) -> u64 {
    let t = fp & 0xFF;
    t + u64::from(t == 0)
}

/// The slots of two buckets whose tag byte may equal `tag`, given their tag words `first` and
/// `second`, as a bitmask: every slot whose tag is `tag` is in it, and the **lowest** bit set is
/// always such a slot. A higher bit may be a false candidate (the word form's borrow, see
/// module `swar`), which the caller's validation of the full fingerprint rejects like any other
/// tag collision. [`slot_of`] says which slot a bit stands for.
#[inline(always)]
pub(crate) fn candidates(first: u64, second: u64, tag: u64) -> u64 {
    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    return sse2::candidates(first, second, tag);
    #[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
    return swar::candidates(first, second, tag);
}

/// The bucket (`false`: the first, `true`: the second) and slot that bit `bit` of a
/// [`candidates`] mask stands for.
#[inline(always)]
pub(crate) fn slot_of(bit: u32) -> (bool, usize) {
    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    return sse2::slot_of(bit);
    #[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
    return swar::slot_of(bit);
}

/// The match in one SSE2 byte compare: byte `i` of the first tag word is bit `i` of the mask,
/// byte `i` of the second bit `8 + i`. Exact. A tag word's eighth byte belongs to no slot and is
/// always 0, which no tag equals.
#[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
mod sse2 {
    use core::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};

    #[inline(always)]
    pub(super) fn candidates(first: u64, second: u64, tag: u64) -> u64 {
        // SAFETY: these four intrinsics are `unsafe` only because they are
        // `#[target_feature(enable = "sse2")]` functions, and SSE2 is part of the x86_64
        // baseline: every x86_64 CPU has it, and every x86_64 target enables it. They work on
        // registers only (no pointer, no memory access) and have no other precondition.
        #[allow(unsafe_code)]
        let mask = unsafe {
            let both = _mm_set_epi64x(second as i64, first as i64);
            let matches = _mm_cmpeq_epi8(both, _mm_set1_epi8(tag as u8 as i8));
            _mm_movemask_epi8(matches)
        };
        // The 16 low bits hold the mask; the rest are 0.
        u64::from(mask as u16)
    }

    #[inline(always)]
    pub(super) fn slot_of(bit: u32) -> (bool, usize) {
        (bit & 8 != 0, (bit & 7) as usize)
    }
}

/// The match in word operations: slot `i` of the first bucket is bit `8i + 7` of the mask, of
/// the second bit `8i + 3`. It uses the short zero-byte test `(x - 0x01..) & !x & 0x80..` on
/// `tags ^ tag * 0x0101..`, which flags every byte equal to `tag` and can also flag a byte
/// `tag ^ 1` sitting above a true match (a borrow travelling up), never below one, so the lowest
/// bit set is always a true match. The exact test is about twice as long for no change in any
/// answer.
#[cfg(any(test, not(all(target_arch = "x86_64", not(funnel_loom)))))]
mod swar {
    use super::super::SLOTS_PER_BUCKET;

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

    #[inline(always)]
    pub(super) fn candidates(first: u64, second: u64, tag: u64) -> u64 {
        let pattern = tag.wrapping_mul(LOW_BITS);
        zero_bytes(first ^ pattern) | (zero_bytes(second ^ pattern) >> 4)
    }

    #[inline(always)]
    pub(super) fn slot_of(bit: u32) -> (bool, usize) {
        (bit & 4 == 0, (bit >> 3) as usize)
    }

    /// Bit 7 of every slot byte of `x` that is zero; possibly also of a byte `0x01` above a
    /// zero byte, never below the lowest zero byte (borrows only travel up).
    #[inline(always)]
    fn zero_bytes(x: u64) -> u64 {
        x.wrapping_sub(LOW_BITS) & !x & SLOT_HIGH_BITS
    }
}

#[cfg(test)]
mod tests {
    use super::super::SLOTS_PER_BUCKET;
    use super::*;

    /// The slots of one tag word whose tag is `tag`, as bit `i` for slot `i`.
    fn naive(tags: u64, tag: u64) -> u64 {
        (0..SLOTS_PER_BUCKET)
            .filter(|i| (tags >> (8 * i)) & 0xFF == tag)
            .map(|i| 1 << i)
            .sum()
    }

    /// A mask of either form read back through its `slot_of`, as (first, second) bit `i` per
    /// slot `i`.
    fn split(mask: u64, slot_of: fn(u32) -> (bool, usize)) -> (u64, u64) {
        let (mut a, mut b) = (0, 0);
        for bit in (0..64).filter(|bit| mask & (1 << bit) != 0) {
            match slot_of(bit) {
                (false, i) => a |= 1 << i,
                (true, i) => b |= 1 << i,
            }
        }
        (a, b)
    }

    /// What the word form promises for one bucket's slots: every true match, and any false
    /// candidate a `tag ^ 1` above a true match.
    fn check_swar(found: u64, tags: u64, tag: u64) {
        let exact = naive(tags, tag);
        assert_eq!(
            found & exact,
            exact,
            "a true match is missing: {tags:#x} {tag:#x}"
        );
        for i in (0..SLOTS_PER_BUCKET).filter(|i| found & !exact & (1 << i) != 0) {
            assert_eq!((tags >> (8 * i)) & 0xFF, tag ^ 1, "false candidate {i}");
            assert!(exact & ((1 << i) - 1) != 0, "no true match below {i}");
        }
    }

    /// Random tag words with `tag`, and `tag ^ 1`, planted in a few slots.
    fn cases() -> impl Iterator<Item = (u64, u64, u64)> {
        let mut rng = funnel_testkit::Rng::new(0x1234_5678_9ABC_DEF1);
        (0..50_000u64).map(move |round| {
            let (x, y) = (rng.next_u64(), rng.next_u64());
            let tag = 1 + (round % 255);
            let plant = |mut tags: u64, bits: u64| {
                for i in 0..SLOTS_PER_BUCKET {
                    match (bits >> (2 * i)) & 7 {
                        0 => tags = (tags & !(0xFF << (8 * i))) | (tag << (8 * i)),
                        1 => tags = (tags & !(0xFF << (8 * i))) | ((tag ^ 1) << (8 * i)),
                        _ => {}
                    }
                }
                // A tag word's bytes beyond the slots are always 0.
                tags & !(u64::MAX << (8 * SLOTS_PER_BUCKET))
            };
            (plant(x, y), plant(y, x), tag)
        })
    }

    #[test]
    fn the_match_finds_every_match_and_starts_with_a_true_one() {
        for (a, b, tag) in cases() {
            let mask = candidates(a, b, tag);
            let (in_a, in_b) = split(mask, slot_of);
            let (exact_a, exact_b) = (naive(a, tag), naive(b, tag));
            assert_eq!(in_a & exact_a, exact_a, "{a:#x} {tag:#x}");
            assert_eq!(in_b & exact_b, exact_b, "{b:#x} {tag:#x}");
            if mask != 0 {
                let lowest = split(mask & mask.wrapping_neg(), slot_of);
                assert!(
                    lowest.0 & exact_a != 0 || lowest.1 & exact_b != 0,
                    "the lowest candidate is not a match: {a:#x} {b:#x} {tag:#x}"
                );
            }
        }
    }

    #[test]
    fn the_word_form_keeps_its_promise() {
        for (a, b, tag) in cases() {
            let mask = swar::candidates(a, b, tag);
            let (in_a, in_b) = split(mask, swar::slot_of);
            check_swar(in_a, a, tag);
            check_swar(in_b, b, tag);
            if mask != 0 {
                let lowest = split(mask & mask.wrapping_neg(), swar::slot_of);
                assert!(lowest.0 & naive(a, tag) != 0 || lowest.1 & naive(b, tag) != 0);
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    #[test]
    fn the_sse2_form_is_exact() {
        for (a, b, tag) in cases() {
            let (in_a, in_b) = split(candidates(a, b, tag), slot_of);
            assert_eq!((in_a, in_b), (naive(a, tag), naive(b, tag)));
        }
    }

    #[test]
    fn tags_are_never_zero_so_unbound_slots_match_nothing() {
        assert_eq!(tag_of(0xFFFF_FFFF_FFFF_FF00), 1);
        assert_eq!(tag_of(0x0000_0000_0000_00AB), 0xAB);
        for tag in 1..=255 {
            assert_eq!(candidates(0, 0, tag), 0);
            assert_eq!(swar::candidates(0, 0, tag), 0);
        }
    }
}
