//! The design most services start with, in Rust: one funnel (quota left, last leak time) per
//! key in a `HashMap` behind one `Mutex`. A competitor for benchmarks, not part of the crate.
//! Integer arithmetic in nanoseconds (the usual float leak rate and its truncation are replaced
//! by exact integers, so the comparison is about structure, not rounding).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

struct Funnel {
    /// Units of quota left, scaled by `emission_interval` (so leaks stay integral).
    left: u64,
    /// Last time the funnel leaked, ns.
    leaked_at: u64,
}

/// `capacity` units, one unit leaking back every `emission_interval_ns`.
pub struct MutexMapLimiter<K, S = std::hash::RandomState> {
    capacity: u64,
    emission_interval_ns: u64,
    funnels: Mutex<HashMap<K, Funnel, S>>,
}

impl<K: Hash + Eq, S: BuildHasher + Default> MutexMapLimiter<K, S> {
    pub fn new(capacity: u64, emission_interval_ns: u64) -> Self {
        MutexMapLimiter {
            capacity,
            emission_interval_ns,
            funnels: Mutex::new(HashMap::with_hasher(S::default())),
        }
    }

    /// One unit request for `key` at `now_ns`: true when allowed.
    pub fn check(&self, key: &K, now_ns: u64) -> bool
    where
        K: Clone,
    {
        let full = self.capacity * self.emission_interval_ns;
        let mut map = self.funnels.lock().unwrap_or_else(|e| e.into_inner());
        let funnel = match map.get_mut(key) {
            Some(f) => f,
            None => map.entry(key.clone()).or_insert(Funnel {
                left: full,
                leaked_at: now_ns,
            }),
        };
        // make_space: leak what the elapsed time allows, capped at the capacity.
        let elapsed = now_ns.saturating_sub(funnel.leaked_at);
        funnel.left = funnel.left.saturating_add(elapsed).min(full);
        funnel.leaked_at = funnel.leaked_at.max(now_ns);
        // watering(1)
        if funnel.left >= self.emission_interval_ns {
            funnel.left -= self.emission_interval_ns;
            true
        } else {
            false
        }
    }

    /// Keys held (the map never forgets one).
    pub fn len(&self) -> usize {
        self.funnels.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// No key held yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
