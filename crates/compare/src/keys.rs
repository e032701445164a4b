//! Keys: the two key types, and the per-thread request arrays
//! every competitor replays. Keys are generated before any timing starts; a timed loop only
//! walks an array.

use std::hash::Hash;

pub use funnel_testkit::{Rng, Zipf};

/// A key type every competitor accepts: `u64` ids, or `String`s `user:<id>` (6 to 18 bytes).
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {
    /// `u64` or `String`, as in the tables.
    const NAME: &'static str;
    fn from_id(id: u64) -> Self;
}

impl Key for u64 {
    const NAME: &'static str = "u64";
    #[inline]
    fn from_id(id: u64) -> u64 {
        id
    }
}

impl Key for String {
    const NAME: &'static str = "String";
    fn from_id(id: u64) -> String {
        format!("user:{id}")
    }
}

/// How a workload draws key ids.
#[derive(Clone, Debug)]
pub enum Dist {
    /// One key, id 0.
    Hot,
    /// Uniform over ids `0..n`.
    Uniform(u64),
    /// Zipf over ids `0..n` (rank = id).
    Zipf { n: u64, s: f64 },
    /// Every request a new id: thread `t` uses `base + t * stream .. base + (t + 1) * stream`.
    Churn,
}

/// Ids of churn keys start here, so they never meet the ids of other workloads.
pub const CHURN_BASE: u64 = 1 << 40;

/// One request array per thread, `len` keys each, from `dist`; thread `t` draws with seed
/// `seed + t`, so runs are reproducible and threads differ.
pub fn request_arrays<K: Key>(dist: &Dist, threads: usize, len: usize, seed: u64) -> Vec<Vec<K>> {
    let zipf = match dist {
        Dist::Zipf { n, s } => Some(Zipf::new(*n, *s)),
        _ => None,
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let zipf = zipf.clone();
                scope.spawn(move || {
                    let mut rng = Rng::new(seed.wrapping_add(t as u64));
                    (0..len)
                        .map(|i| {
                            let id = match dist {
                                Dist::Hot => 0,
                                Dist::Uniform(n) => rng.below(*n),
                                Dist::Zipf { .. } => {
                                    zipf.as_ref().map_or(0, |z| z.sample(&mut rng))
                                }
                                Dist::Churn => CHURN_BASE + (t * len + i) as u64,
                            };
                            K::from_id(id)
                        })
                        .collect::<Vec<K>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("key generation panicked"))
            .collect()
    })
}
