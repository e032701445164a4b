//! The keyed table: an array of 128-byte buckets of seven slots (`bucket.rs`), every slot a key
//! fingerprint and a funnel word (`state.rs`). Each key may live in two candidate buckets; a new
//! key goes to the candidate bucket with more free slots (two-choice placement), or while the
//! table is sparse to its preferred slot (`preferred.rs`).
//!
//! The slot protocol (EMPTY / RESERVED / LIVE, and PENDING / MOVED / DEAD when a key moves, by a
//! cuckoo step or while a table grows; who moves a slot between them and why two racing threads
//! cannot both win) is written out in `docs/design/slot-protocol.md` and "Growing"; the
//! comments here name the step of that argument they implement.
//!
//! * **Finding** a key loads the tag words of both candidate buckets together and matches them
//!   into one bitmask: no branch per slot, and the two buckets' cache misses overlap. While the
//!   table is sparse, the key's preferred slot is read first (`preferred.rs`).
//! * **Updating** a key that is present is lock-free: validate the slot, compute, one CAS on
//!   the funnel word; a denial writes nothing and reads the funnel word once.
//! * **Creating** a key is serialised per lock stripe by a one-byte spin lock (`create.rs`), so
//!   two creators of one key cannot bind two slots. Updates never take it.
//! * **Evicting** is lazy: a creator reuses an EMPTY slot or one whose funnel has recovered
//!   (`TAT <= now`), and only when none is left applies [`WhenFull`], or grows the table.
//! * **Growing** (a table built with a maximum capacity) doubles the buckets in use inside one
//!   allocation reserved at the maximum size, moving the keys whose buckets change while
//!   updates go on (`grow/`).
//!
//! Modules, one job each: `bucket.rs` (layout, setting a tag, the zeroed allocation), `tags.rs`
//! (tags and their match over both buckets), `lookup.rs` (finding and validating a key's slot,
//! prefetching), `preferred.rs` (the slot a key reads first while the table is sparse),
//! `update.rs` (deciding and updating a present key, falling back to creation),
//! `create.rs` (the creation lock, victim choice, [`WhenFull`]), `grow/` (levels, the move of a
//! key, migration), `stats.rs` (striped counters, [`Stats`]), `invariants.rs` (the checker tests
//! and fuzzing run), `prefetch.rs` (the prefetch hint), and `loom.rs` (the slot protocol's loom
//! models).

mod bucket;
mod create;
mod cuckoo;
mod grow;
mod huge;
#[cfg(any(test, feature = "invariants"))]
mod invariants;
mod lookup;
mod moves;
mod preferred;
mod prefetch;
mod snapshot;
mod stats;
mod tags;
mod update;

#[cfg(all(test, funnel_loom))]
pub(crate) mod loom;

use crate::error::Error;
use crate::sync::AtomicBool;

pub(crate) use bucket::SLOTS_PER_BUCKET;
use bucket::{empty_buckets, Bucket, Buckets};
pub use create::WhenFull;
use grow::Growth;
pub use stats::Stats;
use stats::{StatShard, STAT_SHARDS};
use tags::tag_of;
pub(crate) use update::Updated;

/// The largest capacity accepted, in keys: a table of at most 2^40 slots (16 TiB).
pub const MAX_CAPACITY: usize = if usize::BITS >= 64 { 1 << 40 } else { 1 << 24 };

/// Where a key may live.
///
/// Invariant: `first` and `second` are below the number of buckets allocated, which never
/// changes after the table is built (a growable table allocates its largest level at once).
/// Every `Home` is made in this module from the table's own candidates at some level
/// ([`Table::home`], `homes`, `rehome`, `grow::candidates`) or from a bucket index the table
/// itself holds, and `Table::probe` (`lookup.rs`) indexes its buckets without a bounds check on
/// that ground.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Home {
    /// Fingerprint, never 0.
    fp: u64,
    /// Its tag (`bucket.rs`).
    tag: u64,
    /// First candidate bucket.
    first: usize,
    /// Second candidate bucket (may equal `first`; the key then has seven candidate slots).
    second: usize,
}

pub(crate) struct Table {
    buckets: Buckets,
    shape: Shape,
    /// Whether lookups read a key's preferred slot first (`preferred.rs`).
    prefer: preferred::Preference,
    stats: [StatShard; STAT_SHARDS],
    /// What a new key does when its candidate buckets are full of funnels in debt (and the table
    /// cannot grow).
    when_full: WhenFull,
    /// Whether the kernel took the advice to back the buckets with transparent huge pages
    /// (`huge.rs`): false when it was not asked for.
    huge_pages: bool,
}

/// How keys map to buckets.
enum Shape {
    /// A fixed number of buckets, any number: a key's buckets come from its fingerprint by a
    /// multiply (Lemire's reduction), so the table is as large as asked for, to the bucket.
    Fixed {
        /// The number of buckets.
        len: u64,
    },
    /// A power of two of buckets in use, doubling up to the whole allocation (`grow/`).
    Grows(Growth),
}

impl Table {
    /// A fixed table with room for at least `capacity` keys (rounded up to a whole bucket),
    /// whose new keys follow `when_full` once their candidate buckets are full, on transparent
    /// huge pages if `huge_pages` says so, or, when it is `None`, if the table takes
    /// [`huge::AUTOMATIC_FROM`] bytes or more (`huge.rs`).
    pub(crate) fn with_capacity(
        capacity: usize,
        when_full: WhenFull,
        huge_pages: Option<bool>,
    ) -> Result<Table, Error> {
        check_capacity(capacity)?;
        // Any number of buckets: `home` maps hashes with a multiply, not a mask, so the table
        // is as large as asked for (to the next whole bucket), not the next power of two.
        let len = capacity.div_ceil(SLOTS_PER_BUCKET);
        let huge_pages = huge_pages.unwrap_or_else(|| {
            len.saturating_mul(std::mem::size_of::<Bucket>()) >= huge::AUTOMATIC_FROM
        });
        let (buckets, advised) = allocate(len, huge_pages)?;
        // A fixed table is all in use: touch every bucket now, so that the operating system's
        // first-touch page faults (a microsecond or two each) happen at build time, not in the
        // first requests to reach each page.
        for bucket in buckets.iter() {
            // Relaxed: a write of the value the lock already has; nobody else sees the table yet.
            bucket.lock.store(false, crate::sync::Ordering::Relaxed);
        }
        Ok(Table {
            shape: Shape::Fixed {
                len: buckets.len() as u64,
            },
            buckets,
            prefer: preferred::Preference::new(),
            stats: Default::default(),
            when_full,
            huge_pages: advised,
        })
    }

    /// A table that starts with room for `initial` keys and doubles, while new keys find their
    /// candidate buckets full of funnels in debt, up to room for `max` keys; both round up to a
    /// power of two of buckets. The whole maximum is allocated at once but only the part in
    /// use is ever touched, so only that part is resident (`bucket::empty_buckets`).
    pub(crate) fn growable(
        initial: usize,
        max: usize,
        when_full: WhenFull,
        huge_pages: bool,
    ) -> Result<Table, Error> {
        check_capacity(initial)?;
        check_capacity(max)?;
        if max < initial {
            return Err(Error::MaxCapacityBelowCapacity {
                capacity: initial,
                max_capacity: max,
            });
        }
        let level = |keys: usize| keys.div_ceil(SLOTS_PER_BUCKET).next_power_of_two().ilog2();
        let (min, max) = (level(initial), level(max));
        let (buckets, advised) = allocate(1 << max, huge_pages)?;
        // The initial size is in use from the start: touch it now, as a fixed table's, so its
        // first-touch page faults happen here and not in requests (the rest is touched as the
        // table grows into it, by the creations that move keys there). The byte written is the
        // bucket's lock, unused in a growable table (`Growth::stripe`): only the touch matters.
        for bucket in &buckets[..1 << min] {
            // Relaxed: as in `with_capacity`.
            bucket.lock.store(false, crate::sync::Ordering::Relaxed);
        }
        Ok(Table {
            buckets,
            shape: Shape::Grows(Growth::new(min, max)),
            prefer: preferred::Preference::new(),
            stats: Default::default(),
            when_full,
            huge_pages: advised,
        })
    }

    /// Buckets in use: all of them for a fixed table, `2^level` for a growable one (both
    /// halves while it moves keys into the upper one).
    pub(crate) fn buckets_in_use(&self) -> usize {
        match &self.shape {
            Shape::Fixed { .. } => self.buckets.len(),
            Shape::Grows(g) => g.buckets_in_use(),
        }
    }

    /// Slots in use.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets_in_use() * SLOTS_PER_BUCKET
    }

    /// The most slots the table can ever have.
    pub(crate) fn max_capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Bytes of the buckets in use, with their locks, a growable table's own array of
    /// creation locks, and the counters: the table's resident memory once every bucket in use
    /// has been touched.
    pub(crate) fn memory_bytes(&self) -> usize {
        let locks = match &self.shape {
            Shape::Fixed { .. } => 0,
            Shape::Grows(g) => g.locks_bytes(),
        };
        self.buckets_in_use() * std::mem::size_of::<Bucket>()
            + locks
            + std::mem::size_of_val(&self.stats)
    }

    /// Where the key with this 64-bit hash lives now.
    #[inline(always)]
    pub(crate) fn home(&self, hash: u64) -> Home {
        // The fingerprint 0 is no key (the key word of a slot never bound).
        let fp = hash.max(grow::FIRST_FP);
        let (first, second) = match &self.shape {
            Shape::Fixed { len } => fixed_candidates(fp, *len),
            Shape::Grows(g) => grow::candidates(fp, g.mask_in_use()),
        };
        Home {
            fp,
            tag: tag_of(fp),
            first,
            second,
        }
    }

    /// `home` as [`home`](Self::home) would give it now: the same unless a growable table has
    /// grown since `home` was computed, as it may between a batch's look-ahead and the key's
    /// turn. An old home is safe to look up in (its buckets are the first half of the new
    /// level's, and a lookup acts only on the key's own live slot), but it can find a key the
    /// migration has not moved yet where a call at that moment would miss it and move the key
    /// on (`nudge`); from then on the two tables would place new keys differently. So the batch
    /// decides each key at the home of the moment, as single calls do.
    ///
    /// It repeats `home`'s growable arm rather than sharing a helper with it: with both calling
    /// one `candidates` function the compiled hot path and the batch both got longer.
    #[inline(always)]
    pub(crate) fn rehome(&self, home: &Home) -> Home {
        match &self.shape {
            Shape::Fixed { .. } => *home,
            Shape::Grows(g) => {
                let (first, second) = grow::candidates(home.fp, g.mask_in_use());
                Home {
                    first,
                    second,
                    ..*home
                }
            }
        }
    }

    /// The creation lock of the key `fp`: every creator of the key, and every move of it while
    /// the table grows, takes this one lock. In a fixed table it is the lock of the key's first
    /// bucket; in a growable one, one of the table's own array of locks (`Growth::stripe`),
    /// chosen by fingerprint bits that do not depend on the size.
    fn stripe(&self, fp: u64) -> &AtomicBool {
        match &self.shape {
            Shape::Fixed { len } => &self.buckets[fixed_candidates(fp, *len).0].lock,
            Shape::Grows(g) => g.stripe(fp),
        }
    }
}

/// A fixed table's candidate buckets of `fp` among `len`: the fingerprint's top bits choose
/// the first, its middle bits (the fingerprint rotated by 32) the second, its low byte the tag
/// (`tag_of`): three independent choices. `reduce(x)` is Lemire's multiply-and-shift.
#[inline(always)]
fn fixed_candidates(fp: u64, len: u64) -> (usize, usize) {
    let reduce = |x: u64| ((u128::from(x) * u128::from(len)) >> 64) as usize;
    let first = reduce(fp);
    (
        first,
        distinct(first, reduce(fp.rotate_left(32)), len as usize),
    )
}

/// `second`, or when it coincides with `first` the bucket after it, so a key in a table of two
/// buckets or more always has two (a rare, well-predicted branch in a large table; in a small
/// one it doubles the slots a key may use).
#[inline(always)]
fn distinct(first: usize, second: usize, len: usize) -> usize {
    if second != first {
        second
    } else if first + 1 == len {
        0
    } else {
        first + 1
    }
}

fn check_capacity(capacity: usize) -> Result<(), Error> {
    if capacity == 0 {
        return Err(Error::ZeroCapacity);
    }
    if capacity > MAX_CAPACITY {
        return Err(Error::CapacityTooLarge {
            requested: capacity,
            max: MAX_CAPACITY,
        });
    }
    Ok(())
}

/// `buckets` zeroed buckets, advised onto transparent huge pages if `huge_pages`, and whether
/// the kernel took that advice.
fn allocate(buckets: usize, huge_pages: bool) -> Result<(Buckets, bool), Error> {
    let allocated = empty_buckets(buckets).ok_or(Error::OutOfMemory {
        bytes: buckets.saturating_mul(std::mem::size_of::<Bucket>()),
    })?;
    // Before anything touches the memory, so that its first-touch faults can take huge pages.
    // Advice only: a table the kernel keeps on small pages works the same.
    let advised = huge_pages && huge::advise(&allocated);
    Ok((allocated, advised))
}
