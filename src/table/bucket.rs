//! One bucket of the keyed table: 128 bytes, two cache lines, seven slots.
//!
//! ```text
//!  line 0: | tags (8 B) | fingerprint 0 | fingerprint 1 | ... | fingerprint 6 |
//!  line 1: | word 0     | word 1        | ...           | word 6 | lock (1 B) | moves (4 B) |
//! ```
//!
//! * `tags` holds one byte per slot, the tag of the bound key (`tags.rs`: its fingerprint's low
//!   byte, never 0, so a slot that was never bound matches no key; the bucket comes from other
//!   bits). A lookup matches both candidate buckets' tag words at once into one bitmask
//!   (`tags.rs`), so finding a key, or learning that it is absent, takes no data-dependent
//!   branch per slot. Tags are a filter only: every match is validated on the full 64-bit
//!   fingerprint.
//! * `keys[i]` is the fingerprint bound to slot `i`, `words[i]` its packed funnel word
//!   (`state.rs`). A hit reads its tag word, one fingerprint and its funnel word; in a sparse
//!   table, a hit at the key's preferred slot reads no tag word (`preferred.rs`).
//! * `lock` is, in a fixed table, the creation lock of the keys whose first bucket this is
//!   (`create.rs`), and `moves` the count of those keys' moves (`moves.rs`); a growable table
//!   has arrays of its own (`grow/`) and leaves both unused.
//!
//! Loom models use buckets of four slots, which keeps their state space small; the protocol
//! does not depend on the bucket size.

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

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
    /// In a fixed table, the move count of that lock's keys (`moves.rs`); in the padding after
    /// the lock, so the bucket stays 128 bytes.
    pub(crate) moves: AtomicU32,
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
            moves: AtomicU32::new(0),
        }
    }

    /// Records that slot `i` now holds a key tagged `tag`. Called by the creator that owns the
    /// slot (it holds it RESERVED), so no other writer changes byte `i` meanwhile; other bytes
    /// may change under us, hence the read-modify-write.
    pub(crate) fn set_tag(&self, i: usize, tag: u64) {
        let shift = 8 * i;
        // Release on the write: tags are a filter, and a reader that misses a fresh tag takes
        // the locked slow path; the lock's Release/Acquire pair (the tag is written before the
        // creator unlocks) shows it to every later creator of the same key. The Release is for
        // the reports that trust a miss without the lock (`moves.rs`): a reader that reads this
        // byte, where another key's tag was, and then fences with Acquire, sees the move count
        // of the key that left the slot changed. (A read-modify-write, so a later write of
        // another byte continues its release sequence.) Relaxed on failure: we retry.
        let _ = self
            .tags
            .fetch_update(Ordering::Release, Ordering::Relaxed, |t| {
                Some((t & !(0xFF << shift)) | (tag << shift))
            });
    }
}

/// `n` empty buckets. The all-zero bucket is exactly `Bucket::new` (no tags, no keys, EMPTY
/// words, unlocked), so the table asks the allocator for zeroed memory instead of writing it:
/// the operating system hands out zero pages lazily, so a table's resident memory is the part
/// of it that has been touched. That is what lets a growable table reserve its maximum size
/// up front and start with the resident memory of its initial size (`grow/`); the buckets in
/// use from the start are touched by the table when it is built, so that first-touch page
/// faults happen then and not in requests. `None` when the allocation fails.
///
/// The memory is asked for with the alignment of a `u64`, not a bucket's 128 bytes, and the
/// buckets start at the first 128-byte boundary inside it: the standard library zeroes an
/// allocation aligned beyond 16 bytes by writing it (`alloc` then a memset), which made every
/// page of a growable table's whole reservation resident at once (262 MB for a table that may
/// grow to 10 M keys, `tests/resident.rs`), while an ordinary alignment goes to `calloc`, which
/// gets large blocks from the kernel as they are, zero and untouched.
#[cfg(not(funnel_loom))]
pub(crate) fn empty_buckets(n: usize) -> Option<Buckets> {
    let size = n.checked_mul(std::mem::size_of::<Bucket>())?;
    // Room to move the start up to a bucket's alignment.
    let padded = size.checked_add(std::mem::align_of::<Bucket>())?;
    let layout = std::alloc::Layout::from_size_align(padded, std::mem::align_of::<u64>()).ok()?;
    // SAFETY: `layout` has a non-zero size (at least the 128 bytes of padding), as
    // `alloc_zeroed` requires. A null pointer (allocation failure) is checked below.
    #[allow(unsafe_code)]
    let base = unsafe { std::alloc::alloc_zeroed(layout) };
    let base = std::ptr::NonNull::new(base)?;
    let offset = base.as_ptr().align_offset(std::mem::align_of::<Bucket>());
    debug_assert!(offset < std::mem::align_of::<Bucket>());
    // SAFETY: `offset` is below the 128 bytes of padding, so `base + offset` and the `size`
    // bytes after it lie inside the allocation.
    #[allow(unsafe_code)]
    let first = unsafe { base.add(offset) }.cast::<Bucket>();
    Some(Buckets {
        first,
        len: n,
        base,
        layout,
    })
}

/// A table's buckets: `len` of them from `first`, inside an allocation made at `base` with
/// `layout` (`empty_buckets`), freed when this is dropped.
#[cfg(not(funnel_loom))]
pub(crate) struct Buckets {
    first: std::ptr::NonNull<Bucket>,
    len: usize,
    base: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: `Buckets` owns its memory as a `Box<[Bucket]>` would, and `Bucket` (atomics only) is
// `Send` and `Sync`, so sharing and sending the owner is as safe as for that box.
#[cfg(not(funnel_loom))]
#[allow(unsafe_code)]
unsafe impl Send for Buckets {}
// SAFETY: as for `Send` above.
#[cfg(not(funnel_loom))]
#[allow(unsafe_code)]
unsafe impl Sync for Buckets {}

#[cfg(not(funnel_loom))]
impl std::ops::Deref for Buckets {
    type Target = [Bucket];

    fn deref(&self) -> &[Bucket] {
        // SAFETY:
        // * `first` is 128-byte aligned (`align_offset`) and non-null, and `len` buckets from it
        //   lie inside the live allocation this value owns (`empty_buckets`);
        // * that memory was zero-filled by `alloc_zeroed`, and all-zero bytes are a valid
        //   `Bucket`: every field is an `AtomicU64` or `AtomicU32` (the representation of a
        //   `u64`, a `u32`) or an `AtomicBool` (of a `bool`, 0 = false), and `#[repr(C)]` leaves
        //   only padding besides, which needs no value (`a_zeroed_bucket_is_a_new_bucket` checks
        //   the fields);
        // * it is only ever reached through shared references (every write goes through the
        //   atomics), and it lives as long as `self`, which the returned slice borrows.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.first.as_ptr(), self.len)
        }
    }
}

#[cfg(not(funnel_loom))]
impl Drop for Buckets {
    fn drop(&mut self) {
        // SAFETY: `base` was returned by `alloc_zeroed` with exactly `layout`, from the global
        // allocator, and is freed only here, once. `Bucket` needs no drop of its own (atomics).
        #[allow(unsafe_code)]
        unsafe {
            std::alloc::dealloc(self.base.as_ptr(), self.layout);
        }
    }
}

/// Under loom, buckets are built one by one (below).
#[cfg(funnel_loom)]
pub(crate) type Buckets = Box<[Bucket]>;

/// Under loom the atomics carry the model's state, so zeroed memory is not a valid bucket:
/// build each one.
#[cfg(funnel_loom)]
pub(crate) fn empty_buckets(n: usize) -> Option<Buckets> {
    Some((0..n).map(|_| Bucket::new()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_tag_changes_only_its_own_byte() {
        let b = Bucket::new();
        b.set_tag(0, 0xAA);
        b.set_tag(SLOTS_PER_BUCKET - 1, 0xBB);
        b.set_tag(0, 0xCC);
        let tags = b.tags.load(Ordering::Relaxed);
        assert_eq!(tags & 0xFF, 0xCC);
        assert_eq!(tags >> (8 * (SLOTS_PER_BUCKET - 1)), 0xBB);
        assert_eq!(tags & !(0xFF | (0xFF << (8 * (SLOTS_PER_BUCKET - 1)))), 0);
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
            assert_eq!(
                b.moves.load(Ordering::Relaxed),
                new.moves.load(Ordering::Relaxed)
            );
        }
        assert!(empty_buckets(0).unwrap().is_empty());
    }
}
