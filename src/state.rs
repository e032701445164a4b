//! The packed funnel word: one `u64` per key holding the funnel's theoretical arrival time (TAT)
//! and, in the keyed table, a 2-bit binding generation. Pure bit arithmetic, no atomics.
//!
//! Layout (see `docs/DESIGN.md`, "The packed word"):
//!
//! ```text
//!  63 62 61                                                            0
//! +-----+---------------------------------------------------------------+
//! | gen |  TAT: nanoseconds since the clock's origin (62 bits)           |
//! +-----+---------------------------------------------------------------+
//! ```
//!
//! * `0` (gen 0, TAT 0) is `EMPTY`: a slot never bound to a key.
//! * a TAT field of all ones is `RESERVED`: a slot being rebound by a creator.
//! * anything else is `LIVE`, with `gen` in `1..=3`.
//!
//! The single-key [`Funnel`](crate::Funnel) stores the bare TAT (generation 0; `0` means
//! "never used", which the arithmetic treats exactly like a recovered funnel).

/// Bits of the TAT field.
pub(crate) const TAT_BITS: u32 = 62;
/// Mask of the TAT field; also the `RESERVED` marker.
pub(crate) const TAT_MASK: u64 = (1 << TAT_BITS) - 1;
/// The largest tolerance (`emission interval * limit`) a quota may have: 2^60 ns, 36.5 years.
/// Public as [`Quota::MAX_TOLERANCE_NANOS`](crate::Quota::MAX_TOLERANCE_NANOS).
pub(crate) const MAX_TOLERANCE_NANOS: u64 = 1 << 60;
/// The largest time the arithmetic accepts: `3 * 2^60 - 2` ns, about 109.6 years. Any TAT it
/// writes is at most `now + tolerance <= 2^62 - 2`, so it never reaches the `RESERVED` marker.
pub(crate) const MAX_TIME_NANOS: u64 = 3 * (1 << 60) - 2;
/// The largest TAT ever stored.
pub(crate) const MAX_TAT: u64 = MAX_TIME_NANOS + MAX_TOLERANCE_NANOS;

/// The word of a slot that was never bound.
pub(crate) const EMPTY: u64 = 0;

const _: () = assert!(MAX_TAT < TAT_MASK, "a stored TAT must never look RESERVED");
const _: () = assert!(
    MAX_TIME_NANOS as u128 > 100 * 365 * 24 * 3600 * 1_000_000_000,
    "at least 100 years of uptime"
);

/// A decoded slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Never bound.
    Empty,
    /// Being rebound by a creator; its key word is not to be trusted.
    Reserved,
    /// Bound to the key in the slot's key word.
    Live {
        /// Binding generation, `1..=3`; changes on every rebind (not on a reset).
        gen: u64,
        /// The funnel's theoretical arrival time, ns since the clock's origin.
        tat: u64,
    },
}

#[inline]
pub(crate) fn decode(word: u64) -> SlotState {
    let tat = word & TAT_MASK;
    if word == EMPTY {
        SlotState::Empty
    } else if tat == TAT_MASK {
        SlotState::Reserved
    } else {
        SlotState::Live {
            gen: word >> TAT_BITS,
            tat,
        }
    }
}

/// The word of a live slot.
#[inline]
pub(crate) fn live(gen: u64, tat: u64) -> u64 {
    debug_assert!((1..=3).contains(&gen), "live generations are 1..=3");
    debug_assert!(tat <= MAX_TAT, "TAT beyond range");
    (gen << TAT_BITS) | tat
}

/// The word of a slot reserved by a creator. It keeps the generation it had so that the next
/// binding can be numbered from it.
#[inline]
pub(crate) fn reserved(gen: u64) -> u64 {
    (gen << TAT_BITS) | TAT_MASK
}

/// The generation of the next binding of a slot whose current generation is `gen`
/// (`0` for an empty slot). Cycles 1, 2, 3, 1, ... so a live word is never `EMPTY`.
#[inline]
pub(crate) fn next_gen(gen: u64) -> u64 {
    gen % 3 + 1
}

/// The generation bits of any word (0 for `EMPTY`).
#[inline]
pub(crate) fn gen_of(word: u64) -> u64 {
    word >> TAT_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_word_decodes_as_empty() {
        assert_eq!(decode(EMPTY), SlotState::Empty);
    }

    #[test]
    fn live_words_round_trip_for_every_generation_and_edge_tat() {
        for gen in 1..=3 {
            for tat in [0, 1, 2, 1 << 40, MAX_TIME_NANOS, MAX_TAT] {
                let w = live(gen, tat);
                assert_eq!(decode(w), SlotState::Live { gen, tat });
                assert_ne!(w, EMPTY);
                assert_eq!(gen_of(w), gen);
            }
        }
    }

    #[test]
    fn reserved_words_never_look_live_or_empty() {
        for gen in 0..=3 {
            assert_eq!(decode(reserved(gen)), SlotState::Reserved);
            assert_eq!(gen_of(reserved(gen)), gen);
        }
    }

    #[test]
    fn generations_cycle_through_one_to_three_and_never_zero() {
        assert_eq!(next_gen(0), 1);
        assert_eq!(next_gen(1), 2);
        assert_eq!(next_gen(2), 3);
        assert_eq!(next_gen(3), 1);
    }
}
