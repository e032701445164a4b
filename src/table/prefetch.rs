//! Software prefetch: asks the CPU to start loading a cache line without waiting for it, so
//! that a batch of lookups overlaps the memory misses of different keys, and a single lookup
//! the misses of its own lines (the funnel words' line with the tags').
//!
//! One of the crate's few `unsafe` blocks. It buys a measured win: at 10 M keys,
//! `check_batch_at` decided in about 20 ns a key with a prefetch instruction against about
//! 104 ns with plain loads whose values are dropped (those block retirement until the line
//! arrives, so only a few misses overlap), and about 70-80 ns for single `check_at` calls,
//! which themselves took 85-101 ns before they prefetched their word lines
//! (`crates/lab/examples/icount.rs`, the `batch` and `u64` modes, 10,000,000 keys; docs/DESIGN.md).

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
/// cache and below, not the L1 (`_MM_HINT_T1`). What a batch's look-ahead asks for. At 10 M
/// keys on the Intel Xeon guest a batch of 32 decided in 1,605-1,635 against 1,726-1,825 ns
/// allowed and 1,342-1,371 against 1,573-1,604 ns denied with every line asked for this way
/// rather than into the L1, and the same at Zipf 1 M (773-840 against 774-974 ns allowed,
/// 590-640 against 561-820 denied; `crates/lab/examples/icount.rs`, `batch` mode, alternating builds),
/// likely because the L1's few fill buffers then no longer limit how many lines are on their
/// way. Keeping only the tag lines in the L1 request gained less (1,612-1,620 and 1,450-1,471
/// ns at 10 M), and a non-temporal hint lost (1,886-1,895 and 1,657-1,681 ns). On an AMD EPYC
/// guest (family 25, model 17; 1 MiB L2 a core, 32 MiB L3) the difference is far larger: at
/// 10 M keys a batch of 32 took 718-846 ns with this hint against 1,996-2,475 ns with
/// `_MM_HINT_T0` (about 24 against 67 ns a key, allowed and denied together, four rounds of
/// alternating builds); at Zipf 1 M, whose table fits that L3, 507-587 against 535-649 ns
/// (two rounds).
/// A single lookup's [`hint`] keeps `_MM_HINT_T0`: with `_MM_HINT_T1` there, single
/// decisions on that AMD guest were no faster (Zipf 1 M 48-54 against 42-48 ns, 10 M 86-104
/// against 71-89 ns).
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
