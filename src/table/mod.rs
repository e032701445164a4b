//! The keyed table: a fixed array of 128-byte buckets of seven slots (`bucket.rs`), every slot
//! a key fingerprint and a funnel word (`state.rs`). Each key may live in two candidate
//! buckets; a new key goes to the candidate bucket with more free slots (two-choice placement).
//!
//! The slot protocol (EMPTY / LIVE / RESERVED, who moves a slot between them and why two racing
//! threads cannot both win) is written out in `docs/DESIGN.md`, "The slot protocol"; the
//! comments here name the step of that argument they implement.
//!
//! * **Finding** a key loads the tag words of both candidate buckets together and matches them
//!   into one bitmask: no branch per slot, and the two buckets' cache misses overlap.
//! * **Updating** a key that is present is lock-free: validate the slot, compute, one CAS on
//!   the funnel word; a denial writes nothing and reads the funnel word once.
//! * **Creating** a key is serialised per home bucket by a one-byte spin lock (`create.rs`),
//!   so two creators of one key cannot bind two slots. Updates never take it.
//! * **Evicting** is lazy: a creator reuses an EMPTY slot or one whose funnel has recovered
//!   (`TAT <= now`), and only when none is left applies [`WhenFull`].
//!
//! Modules, one job each: `bucket.rs` (layout, tags, the SWAR match), `lookup.rs` (finding and
//! validating a key's slot, prefetching), `update.rs` (deciding and updating a present key,
//! falling back to creation), `create.rs` (the creation lock, victim choice, [`WhenFull`]),
//! `stats.rs` (striped counters, [`Stats`]), `invariants.rs` (the checker tests and fuzzing
//! run), `prefetch.rs` (the one `unsafe`), and `loom.rs` (the slot protocol's loom models).

mod bucket;
mod create;
mod invariants;
mod lookup;
mod prefetch;
mod stats;
mod update;

#[cfg(all(test, funnel_loom))]
mod loom;

use crate::error::Error;

pub(crate) use bucket::SLOTS_PER_BUCKET;
use bucket::{tag_of, Bucket};
pub use create::WhenFull;
pub use stats::Stats;
use stats::{StatShard, STAT_SHARDS};
pub(crate) use update::Updated;

/// The largest capacity accepted, in keys: a table of at most 2^40 slots (16 TiB).
pub const MAX_CAPACITY: usize = if usize::BITS >= 64 { 1 << 40 } else { 1 << 24 };

/// Where a key may live.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Home {
    /// Fingerprint, never 0.
    fp: u64,
    /// Its tag (`bucket.rs`).
    tag: u64,
    /// Home bucket; also the index of the key's creation lock.
    first: usize,
    /// Second candidate bucket (equal to `first` in a one-bucket table).
    second: usize,
}

pub(crate) struct Table {
    buckets: Box<[Bucket]>,
    /// `buckets.len()`, as the multiplier of the bucket reduction.
    len: u64,
    stats: [StatShard; STAT_SHARDS],
    /// What a new key does when its candidate buckets are full of funnels in debt.
    when_full: WhenFull,
}

impl Table {
    /// A table with room for at least `capacity` keys (rounded up to a whole bucket), whose
    /// new keys follow `when_full` once their candidate buckets are full.
    pub(crate) fn with_capacity(capacity: usize, when_full: WhenFull) -> Result<Table, Error> {
        if capacity == 0 {
            return Err(Error::ZeroCapacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(Error::CapacityTooLarge {
                requested: capacity,
                max: MAX_CAPACITY,
            });
        }
        // Any number of buckets: `home` maps hashes with a multiply, not a mask, so the table
        // is as large as asked for (to the next whole bucket), not the next power of two.
        let buckets = capacity.div_ceil(SLOTS_PER_BUCKET);
        let oom = Error::OutOfMemory {
            bytes: buckets.saturating_mul(std::mem::size_of::<Bucket>()),
        };
        let mut table: Vec<Bucket> = Vec::new();
        table.try_reserve_exact(buckets).map_err(|_| oom)?;
        table.extend((0..buckets).map(|_| Bucket::new()));
        Ok(Table {
            buckets: table.into_boxed_slice(),
            len: buckets as u64,
            stats: Default::default(),
            when_full,
        })
    }

    /// Slots in the table.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Bytes the table occupies (buckets, with their locks, and counters).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets) + std::mem::size_of_val(&self.stats)
    }

    /// Where the key with this 64-bit hash lives.
    #[inline]
    pub(crate) fn home(&self, hash: u64) -> Home {
        let fp = if hash == 0 { 1 } else { hash };
        // Buckets come from `fp`, not `hash`: keys of one fingerprint are one key, and must
        // share one home bucket and so one creation lock (hashes 0 and 1 would not).
        //
        // `reduce(x)` maps a 64-bit value onto the buckets by its top bits (a multiply and a
        // shift, Lemire's reduction). The home bucket takes the fingerprint's top bits, the
        // second bucket its middle bits (bits 8-31 for tables under 16 M buckets), the tag its
        // low byte: three independent choices. The second differs from the first whenever the
        // table has two buckets or more.
        let reduce = |x: u64| ((u128::from(x) * u128::from(self.len)) >> 64) as usize;
        let first = reduce(fp);
        let mut second = reduce(fp.rotate_left(32));
        if second == first {
            second = if first + 1 == self.buckets.len() {
                0
            } else {
                first + 1
            };
        }
        Home {
            fp,
            tag: tag_of(fp),
            first,
            second,
        }
    }
}
