//! The table's counters: keys held, evictions, turned-away and untracked keys, striped over
//! cache lines so creators on different buckets do not share one.

use std::sync::atomic::AtomicU64 as StatCounter;

use super::{Home, Table};
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
    /// New keys placed by evicting a funnel still in debt ([`WhenFull::Evict`]).
    pub forced_evictions: u64,
    /// New keys turned away because the table was full ([`WhenFull::Deny`]).
    pub turned_away: u64,
    /// New keys let through untracked because the table was full ([`WhenFull::Allow`]).
    pub admitted_untracked: u64,
}

/// Statistics, striped over cache lines so creators on different buckets do not share one.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct StatShard {
    pub(super) keys: StatCounter,
    pub(super) recovered: StatCounter,
    pub(super) forced: StatCounter,
    pub(super) turned_away: StatCounter,
    pub(super) untracked: StatCounter,
}

/// Stripes of counters; a bucket's creator counts in stripe `home bucket % STAT_SHARDS`.
pub(super) const STAT_SHARDS: usize = 16;

impl Table {
    /// The stripe a creator for `home` counts in.
    pub(super) fn shard(&self, home: &Home) -> &StatShard {
        &self.stats[home.first % STAT_SHARDS]
    }

    pub(crate) fn stats(&self) -> Stats {
        // Relaxed: a snapshot of statistics; see `Stats`.
        let sum = |f: fn(&StatShard) -> &StatCounter| -> u64 {
            self.stats
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum()
        };
        Stats {
            keys: usize::try_from(sum(|s| &s.keys)).unwrap_or(usize::MAX),
            recovered_evictions: sum(|s| &s.recovered),
            forced_evictions: sum(|s| &s.forced),
            turned_away: sum(|s| &s.turned_away),
            admitted_untracked: sum(|s| &s.untracked),
        }
    }
}
