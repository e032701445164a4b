//! A global allocator that counts the bytes each thread allocates, so a test or a fuzz body
//! can check that a path allocates nothing (funnel-tower's: reading a request's key, so memory
//! per request stays bounded whatever the request holds). A fuzz target or a test binary
//! installs it with `#[global_allocator]` and hands [`allocated_bytes`] to the body.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Bytes this thread has asked for. A `const` thread-local without a destructor: reading
    /// it never allocates, so the allocator may use it.
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

/// Set once the allocator served a request. Relaxed: a flag read by the thread that
/// allocated it or later, with no data published through it.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting each thread's allocated bytes.
pub struct CountingAlloc;

fn count(bytes: usize) {
    // `try_with`: during a thread's teardown the counter may be gone; the count is then lost,
    // which only matters to the thread measuring itself, and that one is alive.
    let _ = ALLOCATED.try_with(|c| c.set(c.get().wrapping_add(bytes as u64)));
    INSTALLED.store(true, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so each
// one keeps `System`'s guarantees; the counting touches only a thread-local `Cell` and an
// atomic flag, neither of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; the caller guarantees `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Bytes the calling thread has allocated so far, or `None` when [`CountingAlloc`] is not the
/// global allocator (nothing was counted).
pub fn allocated_bytes() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| ALLOCATED.with(Cell::get))
}
