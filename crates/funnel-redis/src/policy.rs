//! What a limiter answers when Redis cannot decide ([`OnFailure`]), and the counters of every
//! path a decision can take ([`Stats`]).

use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use funnel::{Decision, Limiter, Quota, Timestamp};

use crate::error::{Error, Failure};
use crate::{Checked, Source};

/// What a [`RedisLimiter`](crate::RedisLimiter) answers when Redis cannot decide: a
/// [`Failure`] (no reply within the timeout, no connection, or a reply such as `LOADING`,
/// `READONLY` or `OOM`; see [`Failure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnFailure {
    /// Allow the request as a fresh funnel would. Redis being down never blocks traffic, and
    /// no limit holds meanwhile.
    Open,
    /// Deny the request. Redis being down blocks all traffic. The denial's retry-after is the
    /// outage's, not the quota's ([`Builder::outage_retry_after`](crate::Builder::outage_retry_after),
    /// by default the link's longest reconnect backoff, 1 s, within which the limiter is
    /// connected again once Redis is back): a quota of one an hour does not tell clients to
    /// come back in an hour for a blip of milliseconds.
    Closed,
    /// Decide on a local funnel whose limit and rate are the quota's divided by `instances`
    /// (the fleet's size), so the fleet as a whole stays near its limit while Redis is down.
    /// The local funnels start empty: a key's debt in Redis is not carried over.
    Local {
        /// Instances sharing the quota; at least 1.
        instances: u32,
    },
    /// Return [`Error::Unavailable`] and let the caller decide. The only policy under which
    /// [`Builder::build`](crate::Builder::build) waits for a first connection and fails
    /// without one.
    Report,
}

/// Counters, each a snapshot. Every failure is counted once by its cause (a timeout, an
/// overload or another error) and once by the path that answered it: `timeouts + overloaded +
/// redis_errors == failed_open + failed_closed + answered_locally + reported`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests to Redis that came back with a reply, errors included: a command, or a
    /// [`check_many`](crate::RedisLimiter::check_many) pipeline, is one; a `NOSCRIPT` reply
    /// and the resend that loads the script are two.
    pub round_trips: u64,
    /// Decisions taken by Redis.
    pub redis_decisions: u64,
    /// Denials answered by the deny cache, with no round trip.
    pub cache_denials: u64,
    /// Decisions that failed because no reply came within the timeout.
    pub timeouts: u64,
    /// Decisions that failed for another [`Failure`] (connection, `LOADING`, `READONLY`,
    /// `OOM`, ...), except [`Failure::Overloaded`].
    pub redis_errors: u64,
    /// Requests not sent because [`Builder::max_pending`](crate::Builder::max_pending)
    /// requests were already waiting on Redis ([`Failure::Overloaded`]).
    pub overloaded: u64,
    /// Failures answered by [`OnFailure::Open`].
    pub failed_open: u64,
    /// Failures answered by [`OnFailure::Closed`].
    pub failed_closed: u64,
    /// Failures answered by [`OnFailure::Local`].
    pub answered_locally: u64,
    /// Failures returned as [`Error::Unavailable`] ([`OnFailure::Report`]).
    pub reported: u64,
    /// Calls answered with another [`Error`] (`WRONGTYPE`, a script error, ...).
    pub typed_errors: u64,
    /// Times a reply showed that Redis had lost data since this instance's previous reply (a
    /// restart with nothing kept, a `FLUSHALL`, a failover to a replica that missed writes;
    /// see the crate documentation, "When Redis loses its data"): each emptied the deny
    /// cache. [`Backend::Script`](crate::Backend::Script) only.
    pub data_losses: u64,
    /// Replies that came after the caller's timeout, when the policy had answered: Redis ran
    /// those requests late (a frozen server thawing, a slow one catching up).
    pub late_replies: u64,
    /// Of those, the requests Redis admitted, and so charged to their keys, although the caller
    /// got the policy's answer (see [`Builder::timeout`](crate::Builder::timeout)).
    pub late_charges: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) round_trips: AtomicU64,
    pub(crate) redis_decisions: AtomicU64,
    pub(crate) cache_denials: AtomicU64,
    timeouts: AtomicU64,
    redis_errors: AtomicU64,
    overloaded: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
    answered_locally: AtomicU64,
    reported: AtomicU64,
    pub(crate) typed_errors: AtomicU64,
    pub(crate) data_losses: AtomicU64,
    pub(crate) late_replies: AtomicU64,
    pub(crate) late_charges: AtomicU64,
}

impl Counters {
    /// Adds `n` (Relaxed: statistics, read as a snapshot).
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        // Relaxed: a snapshot of independent statistics.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            round_trips: get(&self.round_trips),
            redis_decisions: get(&self.redis_decisions),
            cache_denials: get(&self.cache_denials),
            timeouts: get(&self.timeouts),
            redis_errors: get(&self.redis_errors),
            overloaded: get(&self.overloaded),
            failed_open: get(&self.failed_open),
            failed_closed: get(&self.failed_closed),
            answered_locally: get(&self.answered_locally),
            reported: get(&self.reported),
            typed_errors: get(&self.typed_errors),
            data_losses: get(&self.data_losses),
            late_replies: get(&self.late_replies),
            late_charges: get(&self.late_charges),
        }
    }
}

/// The policy with what it needs: the quota, and the local funnels of [`OnFailure::Local`].
pub(crate) struct Policy {
    on_failure: OnFailure,
    quota: Quota,
    /// The retry-after of a denial under [`OnFailure::Closed`].
    outage_retry_after: Duration,
    local: Option<Limiter<str>>,
}

impl Policy {
    /// The policy; `outage_retry_after` must be checked by the caller (more than zero).
    pub(crate) fn new(
        on_failure: OnFailure,
        quota: Quota,
        outage_retry_after: Duration,
    ) -> Result<Policy, Error> {
        let local = match on_failure {
            OnFailure::Local { instances } => {
                Some(Limiter::<str>::builder(local_share(&quota, instances)?).build()?)
            }
            _ => None,
        };
        Ok(Policy {
            on_failure,
            quota,
            outage_retry_after,
            local,
        })
    }

    pub(crate) fn on_failure(&self) -> OnFailure {
        self.on_failure
    }

    /// The policy's answer to a request of `n` units for `key` that Redis could not decide,
    /// at the local monotonic time `now`; counted.
    pub(crate) fn answer(
        &self,
        key: &str,
        n: u64,
        failure: Failure,
        now: Timestamp,
        counters: &Counters,
    ) -> Result<Checked, Error> {
        let cause = match failure {
            Failure::Timeout => &counters.timeouts,
            Failure::Overloaded => &counters.overloaded,
            _ => &counters.redis_errors,
        };
        Counters::add(cause, 1);
        let (decision, source, path) = match (self.on_failure, &self.local) {
            (OnFailure::Local { .. }, Some(local)) => (
                local.check_n_at(key, n, now),
                Source::LocalFallback,
                &counters.answered_locally,
            ),
            (OnFailure::Closed, _) => (
                self.closed(n, now),
                Source::FailedClosed,
                &counters.failed_closed,
            ),
            (OnFailure::Open, _) => (
                self.quota.decide_at(Timestamp::ZERO, now, n).0,
                Source::FailedOpen,
                &counters.failed_open,
            ),
            _ => {
                Counters::add(&counters.reported, 1);
                return Err(Error::Unavailable(failure));
            }
        };
        Counters::add(path, 1);
        Ok(Checked {
            decision,
            source,
            server_now: None,
            failure: Some(failure),
        })
    }

    /// [`OnFailure::Closed`]'s denial of `n` units at `now`: the decision of a funnel so full
    /// that the request fits again after `outage_retry_after` (its arrival time `now + τ − n·T +
    /// R`). A peek (`n = 0`) sees a funnel filled to its tolerance, and a request over the
    /// limit is turned away as it would be by Redis.
    fn closed(&self, n: u64, now: Timestamp) -> Decision {
        let tau = self.quota.tolerance();
        let full = now.saturating_add(tau);
        if n == 0 || n > self.quota.limit() {
            return self.quota.decide_at(full, now, n).0;
        }
        // n ≤ limit, so n·T ≤ τ = limit·T.
        let units = self.quota.emission_interval().as_nanos() * u128::from(n);
        let room = tau.as_nanos() - units;
        let ahead = Duration::from_nanos(u64::try_from(room).unwrap_or(u64::MAX))
            .saturating_add(self.outage_retry_after);
        self.quota.decide_at(now.saturating_add(ahead), now, n).0
    }
}

/// The quota divided among `instances`: the limit divided (at least 1), the interval
/// multiplied.
pub(crate) fn local_share(quota: &Quota, instances: u32) -> Result<Quota, Error> {
    let n = u64::from(instances.max(1));
    let limit = (quota.limit() / n).max(1);
    let interval = quota
        .emission_interval()
        .checked_mul(instances.max(1))
        .ok_or(Error::Funnel(funnel::Error::ToleranceTooLarge {
            tolerance_nanos: quota.emission_interval().as_nanos() * u128::from(n),
            max_nanos: Quota::MAX_TOLERANCE_NANOS,
        }))?;
    Ok(Quota::per_period(1, interval)?.with_limit(limit)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_share_divides_the_limit_and_the_rate_by_the_instances() {
        let q = Quota::per_second(100).unwrap(); // 100/s, limit 100
        let share = local_share(&q, 4).unwrap();
        assert_eq!(share.limit(), 25);
        assert_eq!(share.emission_interval(), Duration::from_millis(40));
        // A limit smaller than the fleet still lets one request through per instance.
        let share = local_share(&Quota::per_second(1).unwrap().with_limit(2).unwrap(), 8).unwrap();
        assert_eq!(share.limit(), 1);
        assert_eq!(share.emission_interval(), Duration::from_secs(8));
    }

    /// Closed's retry-after is the outage's, whatever the quota and the request's size; a
    /// peek and a request over the limit are answered as before.
    #[test]
    fn a_closed_denial_carries_the_outage_retry_after() {
        let now = Timestamp::from_nanos(7_000_000_000).unwrap();
        let counters = Counters::default();
        for quota in [
            Quota::per_hour(1).unwrap(),
            Quota::per_hour(1).unwrap().with_limit(5).unwrap(),
            Quota::per_second(1000).unwrap().with_limit(3).unwrap(),
        ] {
            for retry in [Duration::from_millis(1), Duration::from_secs(1)] {
                let p = Policy::new(OnFailure::Closed, quota, retry).unwrap();
                for n in 1..=quota.limit() {
                    let c = p.answer("k", n, Failure::Timeout, now, &counters).unwrap();
                    assert!(!c.decision.is_allowed());
                    assert_eq!(c.decision.retry_after(), Some(retry), "{quota:?} n={n}");
                }
                let over = p.answer("k", quota.limit() + 1, Failure::Timeout, now, &counters);
                assert!(over.unwrap().decision.cost_exceeds_limit());
            }
        }
    }

    #[test]
    fn each_policy_counts_its_own_answers_and_the_cause() {
        let q = Quota::per_second(1).unwrap().with_limit(2).unwrap();
        let now = Timestamp::from_nanos(1_000_000_000).unwrap();
        for (policy, allowed) in [
            (OnFailure::Open, Some(true)),
            (OnFailure::Closed, Some(false)),
            (OnFailure::Local { instances: 2 }, Some(true)),
            (OnFailure::Report, None),
        ] {
            let p = Policy::new(policy, q, Duration::from_secs(1)).unwrap();
            let c = Counters::default();
            let timed_out = p.answer("k", 1, Failure::Timeout, now, &c);
            let refused = p.answer("k", 1, Failure::Connection, now, &c);
            match allowed {
                Some(allowed) => {
                    let a = timed_out.unwrap();
                    assert_eq!(a.decision.is_allowed(), allowed, "{policy:?}");
                    assert_eq!(a.failure, Some(Failure::Timeout));
                    assert_eq!(refused.unwrap().failure, Some(Failure::Connection));
                }
                None => {
                    assert!(matches!(
                        timed_out,
                        Err(Error::Unavailable(Failure::Timeout))
                    ));
                    assert!(matches!(
                        refused,
                        Err(Error::Unavailable(Failure::Connection))
                    ));
                }
            }
            let s = c.snapshot();
            assert_eq!((s.timeouts, s.redis_errors), (1, 1), "{policy:?}");
            let by_path = [
                s.failed_open,
                s.failed_closed,
                s.answered_locally,
                s.reported,
            ];
            assert_eq!(by_path.iter().sum::<u64>(), 2, "{policy:?}");
            let expected = match policy {
                OnFailure::Open => [2, 0, 0, 0],
                OnFailure::Closed => [0, 2, 0, 0],
                OnFailure::Local { .. } => [0, 0, 2, 0],
                _ => [0, 0, 0, 2],
            };
            assert_eq!(by_path, expected, "{policy:?}");
        }
    }
}
