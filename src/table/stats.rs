//! The table's counters: keys held, evictions, turned-away and untracked keys, growths and
//! moves, striped over cache lines so creators of different keys do not share one.

use std::sync::atomic::AtomicU64 as StatCounter;

use super::Table;
use crate::sync::Ordering;

/// Counters of a keyed limiter, summed over its shards (each read is a snapshot; concurrent
/// updates may land between shards).
///
/// # Examples
///
/// ```
/// use funnel::{Limiter, Quota};
///
/// let limiter = Limiter::<u64>::new(Quota::per_second(5)?);
/// limiter.check(&7);
/// let stats = limiter.stats();
/// assert_eq!(stats.keys, 1);
/// assert_eq!(stats.forced_evictions, 0);
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Slots holding a key. A key stays counted after its funnel recovers, until a new key
    /// reuses its slot; never above the capacity.
    pub keys: usize,
    /// New keys placed in the slot of a key whose funnel had fully recovered (free: that key
    /// loses nothing).
    pub recovered_evictions: u64,
    /// New keys placed by evicting a funnel still in debt
    /// ([`WhenFull::Evict`](crate::WhenFull::Evict)), and keys a growing table's migration
    /// could find no other room for (a last resort, whatever the
    /// [`WhenFull`](crate::WhenFull)).
    pub forced_evictions: u64,
    /// New keys turned away because the table was full
    /// ([`WhenFull::Deny`](crate::WhenFull::Deny)).
    pub turned_away: u64,
    /// New keys let through untracked because the table was full
    /// ([`WhenFull::Allow`](crate::WhenFull::Allow)).
    pub admitted_untracked: u64,
    /// Times a growable table doubled (0 for a fixed table).
    pub growths: u64,
    /// Keys moved to another of their candidate buckets: to make room for a new key when both
    /// of its candidates were full (one cuckoo step, in any table), or to their bucket of a
    /// larger size while the table grew.
    pub moved_keys: u64,
    /// Keys whose funnel had recovered when the table grew: dropped instead of moved, as an
    /// absent key is the same as a recovered one.
    pub dropped_keys: u64,
    /// Whether the kernel took the advice to back the table with transparent huge pages
    /// ([`Builder::huge_pages`](crate::Builder::huge_pages), by default asked for a fixed table
    /// of 8 MiB or more): false when they were not asked for, elsewhere than Linux, for a table smaller than a page, or on a kernel without
    /// them. Taken advice is not a promise: the kernel backs with huge pages what it can when
    /// the memory is first touched, and `AnonHugePages` in `/proc/self/smaps` says how much.
    pub huge_pages: bool,
}

/// Statistics, striped over cache lines so creators on different buckets do not share one.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct StatShard {
    /// Slots that started holding a key (from EMPTY, or dead after a move).
    pub(super) bound: StatCounter,
    /// Slots that stopped holding a key (a move's source, an abandoned move's target).
    pub(super) vacated: StatCounter,
    pub(super) recovered: StatCounter,
    pub(super) forced: StatCounter,
    pub(super) turned_away: StatCounter,
    pub(super) untracked: StatCounter,
    pub(super) moved: StatCounter,
    pub(super) dropped: StatCounter,
}

impl StatShard {
    /// Slots this stripe counts as holding a key (a snapshot).
    pub(super) fn keys_held(&self) -> u64 {
        // Relaxed: a statistic.
        let bound = self.bound.load(Ordering::Relaxed);
        bound.saturating_sub(self.vacated.load(Ordering::Relaxed))
    }
}

/// Stripes of counters; a creator of key `fp` counts in stripe `(fp >> 8) % STAT_SHARDS`.
pub(super) const STAT_SHARDS: usize = 16;

/// Slots from which one stripe's count of keys held, times the number of stripes, estimates
/// the table's closely enough: a stripe then counts a thousand keys or more at 95% full, so the
/// estimate is within a few percent.
const ESTIMATE_ABOVE: u64 = 16 * 1024;

impl Table {
    /// The stripe a creator (or mover) of the key `fp` counts in.
    pub(super) fn shard(&self, fp: u64) -> &StatShard {
        &self.stats[(fp >> 8) as usize % STAT_SHARDS]
    }

    /// One counter summed over the shards.
    fn sum(&self, counter: fn(&StatShard) -> &StatCounter) -> u64 {
        // Relaxed: a snapshot of statistics; see `Stats`.
        self.stats
            .iter()
            .map(|s| counter(s).load(Ordering::Relaxed))
            .sum()
    }

    /// Whether fewer than `twentieths` / 20 of the slots in use hold a key, as a creator of
    /// `fp` sees it: in a table of [`ESTIMATE_ABOVE`] slots or more, estimated from the one
    /// stripe of counters that creator counts in (creations spread evenly over the stripes, by
    /// fingerprint bits); in a smaller one, summed over all of them.
    #[inline]
    pub(super) fn holds_fewer_than(&self, fp: u64, twentieths: u64) -> bool {
        let capacity = self.capacity() as u64;
        let held = if capacity >= ESTIMATE_ABOVE {
            self.shard(fp).keys_held() * STAT_SHARDS as u64
        } else {
            self.keys_held()
        };
        held * 20 < capacity * twentieths
    }

    /// Slots holding a key, summed over the shards (a snapshot, as `stats`).
    pub(super) fn keys_held(&self) -> u64 {
        // Vacated never outruns bound in one snapshot by more than the moves in flight.
        self.sum(|s| &s.bound)
            .saturating_sub(self.sum(|s| &s.vacated))
    }

    pub(crate) fn stats(&self) -> Stats {
        let sum = |counter| self.sum(counter);
        Stats {
            keys: usize::try_from(self.keys_held()).unwrap_or(usize::MAX),
            recovered_evictions: sum(|s| &s.recovered),
            forced_evictions: sum(|s| &s.forced),
            turned_away: sum(|s| &s.turned_away),
            admitted_untracked: sum(|s| &s.untracked),
            growths: self.growths(),
            moved_keys: sum(|s| &s.moved),
            dropped_keys: sum(|s| &s.dropped),
            huge_pages: self.huge_pages,
        }
    }
}
