//! The near-limit signal: a decision that passed but used up at least a given share of its
//! limit (Envoy's `near_limit` statistic), for metrics and early warnings in headers:
//! [`Decision::is_near_limit`].

use crate::decision::Decision;

/// The near-limit signal, inherent on [`Decision`] (no trait to import).
impl Decision {
    /// Units in use after this decision: `limit - remaining`.
    #[inline]
    pub(crate) fn used(&self) -> u64 {
        self.limit().saturating_sub(self.remaining())
    }

    /// True when this decision was allowed with at least `percent`% of its limit in use.
    ///
    /// A decision is **near its limit** at `percent` when it was allowed and the units in use
    /// after it, `limit - remaining`, are at least `percent`% of the limit (compared exactly
    /// in integers: `used * 100 >= percent * limit`). A denied decision is *over* the limit,
    /// not near it, as in Envoy's statistics; `percent` above 100 is never reached.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, Funnel, Quota};
    ///
    /// let funnel = Funnel::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// let mut near = Vec::new();
    /// for _ in 0..11 {
    ///     let d = funnel.check();
    ///     near.push(d.is_near_limit(80));
    /// }
    /// // The 8th, 9th and 10th requests leave 2, 1, 0 of 10 remaining; the 11th is denied.
    /// assert_eq!(near.iter().filter(|n| **n).count(), 3);
    /// assert!(near[7] && !near[6] && !near[10]);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    #[inline]
    pub fn is_near_limit(&self, percent: u8) -> bool {
        self.is_allowed()
            && u128::from(self.used()) * 100 >= u128::from(percent) * u128::from(self.limit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;

    const T: u64 = 1_000;

    /// A decision of `limit` with `remaining` units left after it.
    fn allowed(limit: u64, remaining: u64) -> Decision {
        Decision::allowed(&Quota::view(T, limit), (limit - remaining) * T)
    }

    #[test]
    fn the_threshold_is_inclusive_and_exact_in_integers() {
        // 3 of 10 used is 30%: near at 30, not at 31.
        assert!(allowed(10, 7).is_near_limit(30));
        assert!(!allowed(10, 7).is_near_limit(31));
        // 2 of 3 used is 66.67%: near at 66, not at 67.
        assert!(allowed(3, 1).is_near_limit(66));
        assert!(!allowed(3, 1).is_near_limit(67));
    }

    #[test]
    fn zero_percent_is_every_allowed_decision_and_above_100_none() {
        assert!(allowed(5, 5).is_near_limit(0));
        assert!(allowed(5, 0).is_near_limit(100));
        assert!(!allowed(5, 0).is_near_limit(101));
        assert!(!allowed(5, 0).is_near_limit(u8::MAX));
    }

    #[test]
    fn a_denied_decision_is_over_the_limit_not_near_it() {
        let d = Decision::limited(&Quota::view(T, 4), 4 * T, T);
        assert_eq!(d.used(), 4);
        assert!(!d.is_near_limit(0));
    }

    #[test]
    fn huge_limits_do_not_overflow() {
        let limit = 1 << 60;
        let d = Decision::allowed(&Quota::view(1, limit), limit);
        assert_eq!(d.used(), limit);
        assert!(d.is_near_limit(100));
    }
}
