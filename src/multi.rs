//! Several limits, all or nothing: one request decided against several `(limiter, key, quota,
//! cost)` entries, admitted only if every one admits it, charged to none of them otherwise.
//!
//! No lock spans the entries: they are charged one by one in the caller's order, and when one
//! denies, the earlier charges are rolled back with an exact refund. Each charge is a lock-free
//! update when its key is present; charging a key not yet tracked creates it, under that key's
//! per-stripe creation lock, as any new key is. The argument (why a rollback restores
//! exactly what the charge took, and why the charge's brief presence only makes concurrent
//! requests stricter) is in `docs/design/policies.md`, "Several limits, all or nothing".

use std::hash::Hash;

use crate::clock::{Clock, Timestamp};
use crate::decision::{Decision, Outcome};
use crate::gcra;
use crate::limiter::Limiter;
use crate::quota::Quota;
use crate::table::Updated;

#[cfg(all(test, funnel_loom))]
mod loom;

/// One limit a request must pass: something that can be charged, rolled back exactly, and
/// asked what it would answer without being charged. [`Limiter::cost`] makes one for a key of
/// any limiter, so one request can be checked against limiters of different key types (per
/// IP, per route, global) with [`check_all`], as `&dyn Charge` entries.
///
/// Implement it for a limit of your own only if `undo` gives back exactly what `charge` took
/// and never more: [`check_all`]'s guarantees rest on it.
pub trait Charge {
    /// Decides the request at `now` and charges it when allowed.
    fn charge(&self, now: Timestamp) -> Decision;

    /// Gives back what [`charge`](Self::charge) took when it returned `charged` (nothing when
    /// `charged` stored nothing), and answers what the request would get now, charging
    /// nothing.
    fn undo(&self, charged: &Decision, now: Timestamp) -> Decision;

    /// What the request would get at `now`, charging nothing and creating nothing (a
    /// check-only decision).
    fn peek(&self, now: Timestamp) -> Decision;
}

/// A reference to an entry is an entry, so [`check_all`] takes `&[&CheckAllEntry]` and
/// `&[&dyn Charge]` (limiters of different types) as well as `&[CheckAllEntry]`.
impl<T: Charge + ?Sized> Charge for &T {
    #[inline]
    fn charge(&self, now: Timestamp) -> Decision {
        (**self).charge(now)
    }

    #[inline]
    fn undo(&self, charged: &Decision, now: Timestamp) -> Decision {
        (**self).undo(charged, now)
    }

    #[inline]
    fn peek(&self, now: Timestamp) -> Decision {
        (**self).peek(now)
    }
}

/// A request of `cost` units for one key of one [`Limiter`], under a quota: an entry for
/// [`check_all`]. Made by [`Limiter::cost`] (the limiter's quota) and
/// [`WithQuota::cost`](crate::WithQuota::cost) (another quota, or a
/// [`LiveLimiter`](crate::LiveLimiter)'s current one).
///
/// # Examples
///
/// ```
/// use funnel::{clock::ManualClock, Charge, Limiter, Quota};
///
/// let limiter = Limiter::<str>::builder(Quota::per_second(2)?).clock(ManualClock::new()).build()?;
/// let now = limiter.now();
/// let entry = limiter.cost("k", 2);
/// assert_eq!(entry.peek(now).remaining(), 0); // check only: nothing charged
/// assert!(entry.charge(now).is_allowed());
/// assert!(!entry.peek(now).is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
pub struct CheckAllEntry<'a, K: ?Sized, C> {
    limiter: &'a Limiter<K, C>,
    key: &'a K,
    quota: Quota,
    n: u64,
}

impl<'a, K: ?Sized, C> CheckAllEntry<'a, K, C> {
    /// The same entry under `quota` instead of the limiter's own: what
    /// [`WithQuota::cost`](crate::WithQuota::cost) makes.
    pub(crate) fn under(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self
    }

    /// The units charged.
    pub fn units(&self) -> u64 {
        self.n
    }

    /// The quota the entry is decided under.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

impl<'a, K: ?Sized, C> Clone for CheckAllEntry<'a, K, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<'a, K: ?Sized, C> Copy for CheckAllEntry<'a, K, C> {}

impl<'a, K: ?Sized, C> std::fmt::Debug for CheckAllEntry<'a, K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckAllEntry")
            .field("quota", &self.quota)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + ?Sized, C: Clock> Limiter<K, C> {
    /// An entry charging `n` units to `key` under the limiter's quota, for [`check_all`].
    pub fn cost<'a>(&'a self, key: &'a K, n: u64) -> CheckAllEntry<'a, K, C> {
        CheckAllEntry {
            limiter: self,
            key,
            quota: *self.quota(),
            n,
        }
    }
}

impl<'a, K: Hash + ?Sized, C: Clock> Charge for CheckAllEntry<'a, K, C> {
    fn charge(&self, now: Timestamp) -> Decision {
        self.limiter.decide_at(self.key, &self.quota, self.n, now)
    }

    fn undo(&self, charged: &Decision, now: Timestamp) -> Decision {
        // Only `Allowed` stored a charge (`AllowedUntracked` stored nothing).
        if charged.outcome() != Outcome::Allowed || self.n == 0 {
            return self.peek(now);
        }
        let back = self.n.saturating_mul(self.quota.t);
        let at = now.as_nanos();
        // The refund of `Limiter::refund_at`: back by exactly the charge, never below `now`.
        let tat = match self.limiter.update_at(self.key, now, |tat| {
            (tat > at).then(|| tat.saturating_sub(back).max(at))
        }) {
            Updated::Written(_, tat) | Updated::Unchanged(tat) => tat,
            Updated::Full => 0, // only when f creates, which it never does (f(0) is None)
        };
        gcra::decide(tat, at, &self.quota, self.n).0
    }

    fn peek(&self, now: Timestamp) -> Decision {
        let at = now.as_nanos();
        // A report, as a peek is: lock-free where the key is found (`Table::arrival_time`).
        let tat = self.limiter.arrival_time(self.key);
        gcra::decide(tat, at, &self.quota, self.n).0
    }
}

/// The answer to a request decided against several limits by [`check_all`].
///
/// * Admitted: every entry was charged, and each decision is that entry's charge.
/// * Denied: [`denied_by`](Self::denied_by) names the first entry that denied (its decision is
///   the denial, with its retry time); nothing stays charged. The entries before it were
///   charged and rolled back, those after it were not consulted; for both, the decision is
///   what the entry alone would answer after the rollback (a check-only decision).
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use funnel::{check_all, clock::ManualClock, Charge, Limiter, Quota};
///
/// let clock = ManualClock::new();
/// let per_ip = Limiter::<IpAddr>::builder(Quota::per_second(10)?).clock(clock.clone()).build()?;
/// let per_route = Limiter::<str>::builder(Quota::per_second(2)?).clock(clock.clone()).build()?;
/// let ip: IpAddr = "192.0.2.1".parse().unwrap();
/// let now = clock.now();
/// // Entries of limiters of different key types: `&dyn Charge`.
/// let (ip_cost, route_cost) = (per_ip.cost(&ip, 1), per_route.cost("/search", 1));
/// let entries: [&dyn Charge; 2] = [&ip_cost, &route_cost];
///
/// for _ in 0..2 {
///     assert!(check_all(&entries, now).is_allowed());
/// }
/// let d = check_all(&entries, now);
/// assert_eq!(d.denied_by(), Some(1)); // the route's limit
/// assert!(d.decisions()[1].retry_after().is_some());
/// assert_eq!(per_ip.peek(&ip).remaining(), 8); // the per-IP charge was rolled back
/// # use funnel::Clock;
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a decision does nothing unless its outcome is read"]
pub struct MultiDecision {
    decisions: Decisions,
    denied_by: Option<usize>,
}

/// Entries kept inline without an allocation (a request rarely has more limits).
const INLINE: usize = 4;

/// One decision per entry: inline up to [`INLINE`] entries, on the heap beyond.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decisions {
    Inline {
        len: usize,
        items: [Decision; INLINE],
    },
    Heap(Vec<Decision>),
}

impl Decisions {
    fn with_capacity(n: usize) -> Decisions {
        if n <= INLINE {
            // A placeholder, never read: `len` counts the items written.
            let blank = Decision::allowed(&Quota::view(1, 1), 0);
            Decisions::Inline {
                len: 0,
                items: [blank; INLINE],
            }
        } else {
            Decisions::Heap(Vec::with_capacity(n))
        }
    }

    /// Appends; the caller never pushes more than the capacity it asked for.
    fn push(&mut self, d: Decision) {
        match self {
            Decisions::Inline { len, items } => {
                items[*len] = d;
                *len += 1;
            }
            Decisions::Heap(v) => v.push(d),
        }
    }

    fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::Inline { len, items } => &items[..*len],
            Decisions::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Decision] {
        match self {
            Decisions::Inline { len, items } => &mut items[..*len],
            Decisions::Heap(v) => v,
        }
    }
}

impl MultiDecision {
    /// True when every limit admitted the request (and every one was charged).
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// The index of the entry that denied the request, if one did.
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// One decision per entry, in the order given (see the type's documentation for what
    /// each holds when denied).
    pub fn decisions(&self) -> &[Decision] {
        self.decisions.as_slice()
    }

    /// The decision to build response headers from: the denial when denied, otherwise the
    /// entry with the fewest units remaining (the first of equals). `None` for no entries.
    pub fn strictest(&self) -> Option<&Decision> {
        match self.denied_by {
            Some(i) => self.decisions().get(i),
            None => self.decisions().iter().min_by_key(|d| d.remaining()),
        }
    }
}

/// Decides one request against every entry at `now`, all or nothing: admitted only if every
/// entry admits it; then each is charged. When one denies, the charges already made are rolled
/// back exactly and nothing stays charged. No entries is an admitted request.
///
/// Entries are funnels: [`Limiter::cost`] and [`WithQuota::cost`](crate::WithQuota::cost)
/// (another quota, or a [`LiveLimiter`](crate::LiveLimiter)'s current one), given as a slice of any entry type: `&[a,
/// b]` or a `Vec` of entries of one limiter type, and `&[&dyn Charge]` (a `Vec<&dyn Charge>`
/// coerces without casts) to mix limiters of different key or clock types. The window counters
/// have no `cost` and cannot take part (their rollback is not built).
///
/// **A zero-cost entry is not a free pass.** An entry of `0` units asks what a peek asks
/// ([`Limiter::peek`]): on a key in debt beyond its tolerance (charged past its limit by
/// [`Limiter::settle`], or kept as time through a quota change) it answers limited, and so
/// denies the whole request.
///
/// `now` may be read from any of the limiters: every default clock of a process counts from
/// one origin (`clock` module). Limiters on a [`ManualClock`](crate::clock::ManualClock) should
/// share one (clones share their time).
///
/// Entries are charged in the order given. **Use one order for every request** (for example
/// global, then route, then client): two requests taking two limits in opposite orders can each
/// hold the other's last unit for a moment and both be denied. While a request's charge is in
/// place, a concurrent request sees less room than it will have after a rollback: it may be
/// denied where a sequential order would have admitted it (stricter), never admitted where
/// none would (`docs/design/policies.md`, "Several limits, all or nothing").
///
/// # Examples
///
/// ```
/// use funnel::{check_all, clock::ManualClock, Limiter, Quota};
///
/// let clock = ManualClock::new();
/// let burst = Limiter::<u64>::builder(Quota::per_second(5)?).clock(clock.clone()).build()?;
/// let daily = Limiter::<u64>::builder(Quota::per_period(3, std::time::Duration::from_secs(86_400))?)
///     .clock(clock.clone())
///     .build()?;
/// let user = 42;
/// let now = burst.now();
/// let admitted = (0..5)
///     .filter(|_| check_all(&[burst.cost(&user, 1), daily.cost(&user, 1)], now).is_allowed())
///     .count();
/// assert_eq!(admitted, 3); // the daily limit
/// assert_eq!(burst.peek(&user).remaining(), 2); // the burst limit holds only the 3 admitted
/// # Ok::<(), funnel::Error>(())
/// ```
pub fn check_all<E: Charge>(limits: &[E], now: Timestamp) -> MultiDecision {
    let mut decisions = Decisions::with_capacity(limits.len());
    for (i, limit) in limits.iter().enumerate() {
        let decision = limit.charge(now);
        if decision.is_allowed() {
            decisions.push(decision);
            continue;
        }
        // Roll back the earlier charges, latest first, and report what each would answer now.
        let charged = decisions.as_mut_slice();
        for (j, earlier) in limits[..i].iter().enumerate().rev() {
            charged[j] = earlier.undo(&charged[j], now);
        }
        decisions.push(decision);
        for later in &limits[i + 1..] {
            decisions.push(later.peek(now));
        }
        return MultiDecision {
            decisions,
            denied_by: Some(i),
        };
    }
    MultiDecision {
        decisions,
        denied_by: None,
    }
}
