//! Software prefetch: asks the CPU to start loading a cache line without waiting for it, so
//! that a batch of lookups overlaps the memory misses of different keys, and a single lookup
//! the misses of its own lines (the funnel words' line with the tags').
//!
//! One of the crate's few `unsafe` blocks, for tables beyond the caches: a prefetch
//! instruction lets many misses be in flight at once, where plain loads whose values are
//! dropped block retirement until their line arrives, so only a few misses overlap
//! (docs/design/table.md).

use crate::sync::AtomicU64;

/// A lookup's own hint for `word`'s line: [`prefetch`] where it is a real prefetch
/// instruction, nothing elsewhere. The plain load that stands in for a prefetch off x86_64
/// blocks retirement until its line arrives, and a lookup hints the second bucket's line
/// even when the key is in the first: a wasted miss it would then wait for. A batch, whose
/// look-ahead has many keys' decisions to overlap with, still takes the load.
#[inline(always)]
pub(crate) fn hint(word: &AtomicU64) {
    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    prefetch(word);
    #[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
    let _ = word;
}

/// Starts loading the cache line holding `word` into every cache level.
#[inline(always)]
pub(crate) fn prefetch(word: &AtomicU64) {
    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    x86::prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(word);
    #[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
    load(word);
}

/// Starts loading the cache line holding `word` for a decision some way ahead: into the L2
/// cache and below, not the L1 (`_MM_HINT_T1`). What a batch's look-ahead asks for: the
/// lines are needed some decisions later, and asking for them into the L2 keeps the L1's few
/// fill buffers from limiting how many are on their way (docs/design/table.md). A
/// single lookup's [`hint`] keeps `_MM_HINT_T0`: its lines are needed at once.
#[inline(always)]
pub(crate) fn ahead(word: &AtomicU64) {
    #[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
    x86::prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(word);
    #[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
    load(word);
}

#[cfg(all(target_arch = "x86_64", not(funnel_loom)))]
mod x86 {
    use crate::sync::AtomicU64;

    /// The prefetch instruction with hint `HINT`.
    #[inline(always)]
    pub(super) fn prefetch<const HINT: i32>(word: &AtomicU64) {
        use core::arch::x86_64::_mm_prefetch;
        // SAFETY: `_mm_prefetch` is `unsafe` only because it is a `#[target_feature(enable =
        // "sse")]` intrinsic, and SSE is part of the x86_64 baseline, so every x86_64 CPU has
        // it. The instruction itself reads no memory that the program can observe, cannot
        // fault (a hint on an invalid address is dropped), and writes nothing; here the
        // address is moreover that of a live `AtomicU64` borrowed for the whole call.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<HINT>(std::ptr::from_ref(word).cast::<i8>());
        }
    }
}

/// Where there is no prefetch instruction to call (or under loom): under loom nothing, since a
/// hint has no effect a model could observe and a load would only add interleavings to
/// explore; elsewhere a plain load whose value is dropped (kept by `black_box`), which overlaps
/// fewer misses but needs no `unsafe`.
#[cfg(not(all(target_arch = "x86_64", not(funnel_loom))))]
#[inline(always)]
fn load(word: &AtomicU64) {
    #[cfg(funnel_loom)]
    let _ = word;
    #[cfg(not(funnel_loom))]
    {
        // Relaxed: the value is not used.
        std::hint::black_box(word.load(crate::sync::Ordering::Relaxed));
    }
}
