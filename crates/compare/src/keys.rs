//! Keys: a small PRNG, a Zipf sampler, the two key types, and the per-thread request arrays
//! every competitor replays. Keys are generated before any timing starts; a timed loop only
//! walks an array.

use std::hash::Hash;

pub use funnel_testkit::Rng;

/// Zipf over ranks `0..n` with exponent `s` (`0 < s < 1`), by the method of Gray et al.,
/// "Quickly generating billion-record synthetic databases" (SIGMOD 1994), the sampler YCSB
/// uses: O(n) setup to compute the generalised harmonic number, O(1) per draw.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
    half_pow_s: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(
            n >= 2 && s > 0.0 && s < 1.0,
            "Zipf needs n >= 2 and 0 < s < 1"
        );
        let zeta = |m: u64| (1..=m).map(|i| (i as f64).powf(-s)).sum::<f64>();
        let zeta_n = zeta(n);
        let zeta_2 = zeta(2);
        let nf = n as f64;
        Zipf {
            n: nf,
            s,
            zeta_n,
            alpha: 1.0 / (1.0 - s),
            eta: (1.0 - (2.0 / nf).powf(1.0 - s)) / (1.0 - zeta_2 / zeta_n),
            half_pow_s: 0.5f64.powf(s),
        }
    }

    /// A rank in `0..n`; rank 0 is the most frequent.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_s {
            return 1;
        }
        let r = (self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n as u64 - 1)
    }

    /// The probability of rank `r` (for reporting the legitimate keys' known rates).
    pub fn probability(&self, r: u64) -> f64 {
        ((r + 1) as f64).powf(-self.s) / self.zeta_n
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ranks_follow_the_distribution() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut counts = vec![0u32; 1000];
        let draws = 1_000_000;
        for _ in 0..draws {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        for r in [0u64, 1, 9, 99] {
            let expect = z.probability(r) * draws as f64;
            let got = f64::from(counts[r as usize]);
            assert!(
                (got - expect).abs() < expect * 0.1 + 50.0,
                "rank {r}: {got} vs {expect}"
            );
        }
    }
}
