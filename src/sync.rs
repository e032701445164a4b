//! The atomics of the table's slot protocol: loom's under `--cfg funnel_loom` (so the models
//! in `table/loom.rs` and `multi/loom.rs` explore every interleaving), std's otherwise.

#[cfg(funnel_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(funnel_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

/// Waits politely inside a spin loop. Under loom this yields, or the model never ends.
#[inline]
pub(crate) fn spin(round: u32) {
    #[cfg(funnel_loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(funnel_loom))]
    {
        if round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
