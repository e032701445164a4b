//! The packed funnel word: one `u64` per key holding the funnel's theoretical arrival time (TAT)
//! and, in the keyed table, a 2-bit binding generation. Pure bit arithmetic, no atomics.
//!
//! Layout (see `docs/design/table.md`, "The packed word"):
//!
//! ```text
//!  63 62 61                                                            0
//! +-----+---------------------------------------------------------------+
//! | gen |  payload (62 bits)                                             |
//! +-----+---------------------------------------------------------------+
//! ```
//!
//! * `gen` in `1..=3`: `LIVE`, the payload is the TAT (ns since the clock's origin). So a word
//!   is live exactly when it is at least `2^62`: one comparison.
//! * `gen` 0 marks the states a slot passes through without a funnel of its own:
//!   * `0`: `EMPTY`, a slot never bound to a key;
//!   * `RESERVED(g)`, near the top of the payload range: a creator is binding the slot; `g` is
//!     the generation it had, so the next binding can be numbered from it;
//!   * `PENDING(g)`: the slot is the target of a move (a cuckoo step, or a growth:
//!     `table/grow/`); its key is bound, its funnel is still the source slot's;
//!   * `DEAD(g)`: the source of a finished move (or an abandoned target): free, like `EMPTY`,
//!     but `g` is its last binding's generation, so the next binding is numbered from it;
//!   * any other payload `x`: `MOVED(x)`, the sealed source of a move in progress; `x` is the
//!     TAT it had when sealed, which the target takes.
//!
//! The single-key [`Funnel`](crate::Funnel) stores the bare TAT (generation 0; `0` means
//! "never used", which the arithmetic treats exactly like a recovered funnel).

/// Bits of the payload (TAT) field.
pub(crate) const TAT_BITS: u32 = 62;
/// Mask of the payload field.
pub(crate) const TAT_MASK: u64 = (1 << TAT_BITS) - 1;
/// The largest tolerance (`emission interval * limit`) a quota may have: 2^60 ns, 36.5 years.
/// Public as [`Quota::MAX_TOLERANCE_NANOS`](crate::Quota::MAX_TOLERANCE_NANOS).
pub(crate) const MAX_TOLERANCE_NANOS: u64 = 1 << 60;
/// The largest time the arithmetic accepts: `3 * 2^60 - 32` ns, about 109.6 years. Any TAT it
/// writes is at most `now + tolerance <= 2^62 - 32`, below every marker payload.
pub(crate) const MAX_TIME_NANOS: u64 = 3 * (1 << 60) - 32;
/// The largest TAT ever stored.
pub(crate) const MAX_TAT: u64 = MAX_TIME_NANOS + MAX_TOLERANCE_NANOS;
/// The smallest marker payload; `RESERVED`, `PENDING` and `DEAD` words sit at and above it.
const MARKS: u64 = TAT_MASK - 15;
/// The smallest live word: generation 1, TAT 0.
const LIVE_MIN: u64 = 1 << TAT_BITS;

/// The word of a slot that was never bound.
pub(crate) const EMPTY: u64 = 0;

const _: () = assert!(
    MAX_TAT < MARKS,
    "a stored or moved TAT must never look like a marker"
);
const _: () = assert!(
    MAX_TIME_NANOS as u128 > 100 * 365 * 24 * 3600 * 1_000_000_000,
    "at least 100 years of uptime"
);

/// A decoded slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Never bound.
    Empty,
    /// Being bound by a creator; its key word is not to be trusted.
    Reserved,
    /// The target of a move: the key is bound, its funnel is still in the source slot.
    Pending {
        /// The generation this binding will keep once live.
        gen: u64,
    },
    /// The sealed source of a move in progress (or of a recovered key being dropped by a
    /// move): its funnel is the key's until the move ends, and the slot is not free.
    Moved {
        /// The TAT the key had when sealed (at least 1).
        tat: u64,
    },
    /// A finished move's source, or a move's abandoned target: free, as `Empty`; the key word
    /// still holds the key that left, which no reader pairs with this word.
    Dead {
        /// The generation of the slot's last binding, `1..=3`.
        gen: u64,
    },
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
    let payload = word & TAT_MASK;
    if word >= LIVE_MIN {
        SlotState::Live {
            gen: word >> TAT_BITS,
            tat: payload,
        }
    } else if word == EMPTY {
        SlotState::Empty
    } else if payload < MARKS {
        SlotState::Moved { tat: payload }
    } else if payload < MARKS + 4 {
        SlotState::Reserved
    } else if payload < MARKS + 8 {
        SlotState::Pending {
            gen: payload - MARKS - 4,
        }
    } else {
        SlotState::Dead {
            gen: payload - MARKS - 8,
        }
    }
}

/// True for a live word: the hot path's whole state check.
#[inline(always)]
pub(crate) fn is_live(word: u64) -> bool {
    word >= LIVE_MIN
}

/// The TAT of a live word.
#[inline(always)]
pub(crate) fn tat_of(word: u64) -> u64 {
    word & TAT_MASK
}

/// The word of a live slot.
#[inline]
pub(crate) fn live(gen: u64, tat: u64) -> u64 {
    debug_assert!((1..=3).contains(&gen), "live generations are 1..=3");
    debug_assert!(tat <= MAX_TAT, "TAT beyond range");
    (gen << TAT_BITS) | tat
}

/// The same binding as the live word `word`, with arrival time `tat`.
#[inline(always)]
pub(crate) fn with_tat(word: u64, tat: u64) -> u64 {
    debug_assert!(is_live(word) && tat <= MAX_TAT);
    // `word - tat_of(word)` is the word's generation bits (`word & !TAT_MASK`); written so,
    // it reuses the TAT the caller has just read out of the word, and needs no mask constant.
    word - tat_of(word) + tat
}

/// The word of a slot reserved by a creator. It keeps the generation it had (0 for a slot that
/// held no binding) so that the next binding can be numbered from it.
#[inline]
pub(crate) fn reserved(gen: u64) -> u64 {
    debug_assert!(gen <= 3);
    MARKS + gen
}

/// The word of a move's target, to become `live(gen, tat)` with the source's sealed TAT.
#[inline]
pub(crate) fn pending(gen: u64) -> u64 {
    debug_assert!((1..=3).contains(&gen));
    MARKS + 4 + gen
}

/// The word of a move's sealed source; `tat` is what the target takes (0 is kept as 1: the
/// payload 0 is `EMPTY`, and either is a recovered funnel at any `now >= 1`).
#[inline]
pub(crate) fn moved(tat: u64) -> u64 {
    debug_assert!(tat <= MAX_TAT);
    tat.max(1)
}

/// The word of a slot freed by a move: its source once the target is live (or the key was
/// dropped), or its target when the move is abandoned. `gen` is the generation of the binding
/// that leaves, which the slot's next binding counts from.
#[inline]
pub(crate) fn dead(gen: u64) -> u64 {
    debug_assert!((1..=3).contains(&gen));
    MARKS + 8 + gen
}

/// The generation of the next binding of a slot whose current generation is `gen`
/// (`0` for an empty slot). Cycles 1, 2, 3, 1, ... so a live word is never `EMPTY`.
#[inline]
pub(crate) fn next_gen(gen: u64) -> u64 {
    gen % 3 + 1
}

/// The generation a slot carries into its next binding: a live word's own, the one a
/// reservation, a pending move or a dead slot kept, 0 for an empty or moved slot.
#[inline]
pub(crate) fn gen_of(word: u64) -> u64 {
    match decode(word) {
        SlotState::Live { gen, .. } | SlotState::Pending { gen } | SlotState::Dead { gen } => gen,
        SlotState::Reserved => word - MARKS,
        SlotState::Empty | SlotState::Moved { .. } => 0,
    }
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
            assert!(!is_live(reserved(gen)));
        }
    }

    #[test]
    fn pending_dead_and_moved_words_are_neither_live_nor_markers_of_each_other() {
        for gen in 1..=3 {
            assert_eq!(decode(pending(gen)), SlotState::Pending { gen });
            assert_eq!(gen_of(pending(gen)), gen);
            assert!(!is_live(pending(gen)));
            assert_eq!(decode(dead(gen)), SlotState::Dead { gen });
            assert_eq!(gen_of(dead(gen)), gen);
            assert!(!is_live(dead(gen)));
            assert!(dead(gen) <= TAT_MASK, "a dead word has generation bits 0");
        }
        for tat in [1, 2, 1 << 40, MAX_TIME_NANOS, MAX_TAT] {
            assert_eq!(decode(moved(tat)), SlotState::Moved { tat });
            assert!(!is_live(moved(tat)));
            assert_eq!(gen_of(moved(tat)), 0);
        }
        assert_eq!(decode(moved(0)), SlotState::Moved { tat: 1 });
    }

    #[test]
    fn a_live_word_keeps_its_generation_when_its_tat_changes() {
        for gen in 1..=3 {
            let w = with_tat(live(gen, 5), MAX_TAT);
            assert_eq!(decode(w), SlotState::Live { gen, tat: MAX_TAT });
            assert_eq!(tat_of(w), MAX_TAT);
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
