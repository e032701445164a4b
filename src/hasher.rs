//! The keys' hash: a randomly seeded [`ahash`], with one change. When a key's hash stream ends
//! with a single byte (the terminator every `str` and `String` key ends with), that byte is
//! folded into the 64-bit result by an exclusive or instead of costing a multiply of its own,
//! one multiply less on the path from the key to its bucket.

use std::hash::{BuildHasher, Hash, Hasher};

/// The limiter's seeded hash of keys (`Limiter::hasher`). It keeps its four seed words, which a
/// saved state records so that a limiter restored from it fingerprints keys as the saver did.
#[derive(Clone)]
pub(crate) struct KeyHash(ahash::RandomState, [u64; 4]);

impl KeyHash {
    /// A hash seeded from the operating system's randomness: four words drawn from a randomly
    /// keyed ahash (its keys come from the system's random source), kept so they can be saved.
    pub(crate) fn random() -> KeyHash {
        let draw = ahash::RandomState::new();
        let [a, b, c, d] = [0u64, 1, 2, 3].map(|i| draw.hash_one(i));
        KeyHash::with_seeds(a, b, c, d)
    }

    /// A hash seeded from four words.
    pub(crate) fn with_seeds(a: u64, b: u64, c: u64, d: u64) -> KeyHash {
        KeyHash(ahash::RandomState::with_seeds(a, b, c, d), [a, b, c, d])
    }

    /// The four seed words.
    pub(crate) fn seeds(&self) -> [u64; 4] {
        self.1
    }

    /// The 64-bit hash of `key`.
    #[inline(always)]
    pub(crate) fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        let mut h = LastByte {
            inner: self.0.build_hasher(),
            last: 0,
        };
        key.hash(&mut h);
        h.finish()
    }
}

/// An [`ahash::AHasher`] that holds back the stream's latest single byte until something
/// follows it. Whatever follows feeds the byte to ahash first, in order, so ahash sees the
/// stream exactly as written except for a final byte, which `finish` folds in as
/// `0x100 | byte`, and a stream with no final byte as `0`. Two streams that differ therefore
/// differ in what ahash saw (then their hashes are as unrelated as ahash makes them) or only in
/// their final byte, or its presence (then their hashes differ, always).
struct LastByte {
    inner: ahash::AHasher,
    /// `0x100 | byte` while a final byte is held back, `0` otherwise.
    last: u64,
}

impl LastByte {
    #[inline(always)]
    fn flush(&mut self) {
        if self.last != 0 {
            self.inner.write_u8(self.last as u8);
            self.last = 0;
        }
    }
}

/// The fixed-size writes: whatever came before goes to ahash first (`flush`), then the value,
/// through ahash's own method for its size (the `Hasher` defaults would go through `write`).
macro_rules! forward_to_ahash {
    ($($method:ident: $ty:ty),*) => {
        $(
            #[inline(always)]
            fn $method(&mut self, i: $ty) {
                self.flush();
                self.inner.$method(i);
            }
        )*
    };
}

impl Hasher for LastByte {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.inner.finish() ^ self.last
    }

    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        self.flush();
        self.inner.write(bytes);
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.flush();
        self.last = 0x100 | u64::from(i);
    }

    forward_to_ahash!(
        write_u16: u16,
        write_u32: u32,
        write_u64: u64,
        write_u128: u128,
        write_usize: usize
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn h() -> KeyHash {
        KeyHash::with_seeds(1, 2, 3, 4)
    }

    #[test]
    fn a_final_byte_and_its_absence_never_collide() {
        let h = h();
        for x in 0..10_000u64 {
            let bare = h.hash(&x);
            assert_ne!(bare, h.hash(&(x, 0u8)));
            assert_ne!(h.hash(&(x, 0u8)), h.hash(&(x, 1u8)));
            assert_ne!(h.hash(&(x, 7u8)), h.hash(&(x, 7u8, 7u8)));
        }
    }

    #[test]
    fn a_held_back_byte_reaches_ahash_when_something_follows() {
        let h = h();
        // The same final byte after different middle bytes: those reach ahash, in order.
        let mut seen = HashSet::new();
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert!(seen.insert(h.hash(&(a, b, 9u8))), "({a}, {b}, 9)");
            }
        }
        // Strings end in a terminator byte; how they split into strings still counts.
        assert_ne!(h.hash(&("ab", "c")), h.hash(&("a", "bc")));
        assert_ne!(h.hash("user:1"), h.hash("user:10"));
    }

    #[test]
    fn string_keys_spread_over_all_64_bits() {
        let h = h();
        let hashes: Vec<u64> = (0..100_000).map(|i| h.hash(&format!("user:{i}"))).collect();
        assert_eq!(hashes.iter().collect::<HashSet<_>>().len(), hashes.len());
        let (mut or, mut and) = (0u64, u64::MAX);
        for &x in &hashes {
            or |= x;
            and &= x;
        }
        assert_eq!((or, and), (u64::MAX, 0), "some bit is stuck");
    }

    #[test]
    fn the_same_seeds_give_the_same_hashes_and_random_ones_differ() {
        assert_eq!(h().hash("k"), h().hash("k"));
        assert_ne!(KeyHash::random().hash("k"), KeyHash::random().hash("k"));
    }
}
