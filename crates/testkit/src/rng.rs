//! A tiny seeded PRNG for property tests: SplitMix64 (Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014), the generator Java's `SplittableRandom` and
//! xoshiro's seeding use. Deterministic per seed, so a failing seed printed in an assertion
//! message replays exactly; no dependency.

/// SplitMix64's increment: the odd integer nearest `2^64 / φ`.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output for a generator whose state is `x`: the state advanced by one step and
/// mixed. A bijection on `u64`, so `mix(i)` for distinct `i` gives distinct, well-spread values.
#[inline]
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: a 64-bit counter pushed through a mixing function.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for `seed`; every seed, including 0, gives a good stream.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let out = mix(self.state);
        self.state = self.state.wrapping_add(GAMMA);
        out
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift; the bias is below 2^-64 * n.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no values");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`, with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(), // the whole u64 range
        }
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// A uniformly chosen element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Shuffles `items` in place, every order equally likely (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// Random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_matches_the_reference_splitmix64() {
        // First outputs of the reference implementation (Vigna's splitmix64.c) for seed 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_shuffle_is_a_permutation_that_depends_on_the_seed() {
        let shuffled = |seed| {
            let mut v: Vec<u32> = (0..100).collect();
            Rng::new(seed).shuffle(&mut v);
            v
        };
        let (a, b) = (shuffled(1), shuffled(2));
        assert_ne!(a, b);
        assert_eq!(a, shuffled(1));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn mix_is_the_stream_of_a_generator_seeded_with_its_argument() {
        for seed in [0, 1, 0x5eed, u64::MAX] {
            assert_eq!(mix(seed), Rng::new(seed).next_u64());
        }
    }
}
