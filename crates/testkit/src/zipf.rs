//! The Zipf sampler of the comparison harness's Zipf workloads and of `crates/lab/examples/icount.rs`.

use crate::Rng;

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
