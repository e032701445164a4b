//! The minimal loop a new user writes, apart from the harness: one thread draws a key below
//! 1,000 with a small PRNG and decides it. funnel (time handed in, `RecentClock`, `QuantaClock`)
//! at its default capacity and at a compact one, governor with ahash (`QuantaUpkeepClock`,
//! `QuantaClock`), and the **layout floor**: the bare lookup of funnel's bucket layout (both
//! candidate buckets' tags matched at once, the slot's key, its word, one CAS) with none of
//! funnel's protocol, at both sizes. The variants alternate; each run is timed on the wall
//! clock, so the figures mean something on an idle machine only.
//!
//! Built in one codegen unit, as the comparison harness is, so that which variant's code
//! lands in which unit does not move with the others:
//!
//! ```sh
//! cargo run --release -p funnel-lab --config 'profile.release.package.funnel-lab.codegen-units=1' \
//!     --example minimal_loop -- allow 21
//! cargo run --release -p funnel-lab --config 'profile.release.package.funnel-lab.codegen-units=1' \
//!     --example minimal_loop -- deny 21
//! ```
//!
//! The floor answers how far funnel's own code is from what its tag match costs on the
//! machine: a faster funnel that matches tags can gain at most the difference. At the default
//! capacity funnel's table is sparse and reads each key's preferred slot first, which the floor
//! does not (docs/design/table.md).
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::{Limiter, Quota};
use governor::clock::{QuantaClock as GQ, QuantaUpkeepClock};
use governor::RateLimiter;

use floor::LayoutFloor;

struct Rng(u64);
impl Rng {
    #[inline(always)]
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z as u128 * n as u128) >> 64) as u64
    }
}

/// Decisions per run.
const N: u64 = 2_000_000;
/// Keys.
const KEYS: u64 = 1_000;
/// The compact capacity: 1.25 slots a key.
const COMPACT: usize = 1_250;

/// ns per decision of one run. Never inlined, so each variant's loop is compiled on its own,
/// as in a program that has only that loop.
#[inline(never)]
fn time(mut f: impl FnMut(&mut Rng) -> bool, seed: u64) -> f64 {
    let mut r = Rng(seed);
    let started = Instant::now();
    let mut a = 0u64;
    for _ in 0..N {
        a += f(&mut r) as u64;
    }
    black_box(a);
    started.elapsed().as_nanos() as f64 / N as f64
}

fn main() {
    let usage = || -> ! {
        eprintln!("usage: minimal_loop [allow|deny] [runs, at least 1]");
        std::process::exit(2)
    };
    let allow = match std::env::args().nth(1).as_deref() {
        None | Some("allow") => true,
        Some("deny") => false,
        Some(_) => usage(),
    };
    let reps: usize = match std::env::args().nth(2).map(|v| v.parse()) {
        None => 11,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => usage(),
    };
    let fq = if allow {
        Quota::per_second(1000)
            .unwrap()
            .with_limit(4_000_000_000)
            .unwrap()
    } else {
        Quota::per_hour(1).unwrap()
    };
    let gq = if allow {
        governor::Quota::per_second(NonZeroU32::new(1000).unwrap())
            .allow_burst(NonZeroU32::new(4_000_000_000).unwrap())
    } else {
        governor::Quota::per_hour(NonZeroU32::new(1).unwrap())
    };
    let recent = RecentClock::shared().unwrap();
    let upkeep = QuantaUpkeepClock::from_interval(RecentClock::DEFAULT_INTERVAL).unwrap();
    // As a new user builds them: the default capacity.
    let f_real = Limiter::<u64>::builder(fq).build().unwrap();
    let f_recent = Limiter::<u64>::builder(fq)
        .clock(recent.clone())
        .build()
        .unwrap();
    let f_compact = Limiter::<u64>::builder(fq)
        .capacity(COMPACT)
        .clock(recent.clone())
        .build()
        .unwrap();
    let g_real: RateLimiter<u64, _, GQ> =
        RateLimiter::dashmap_with_hasher(gq, ahash::RandomState::new());
    let g_upkeep =
        RateLimiter::dashmap_with_clock_and_hasher(gq, upkeep.clone(), ahash::RandomState::new());
    let floor_default = LayoutFloor::new(funnel::DEFAULT_CAPACITY, KEYS, allow);
    let floor_compact = LayoutFloor::new(COMPACT, KEYS, allow);
    let clock = QuantaClock::new();
    for k in 0..KEYS {
        let _ = f_real.check(&k);
        let _ = f_recent.check(&k);
        let _ = f_compact.check(&k);
        let _ = g_real.check_key(&k);
        let _ = g_upkeep.check_key(&k);
    }
    let names = [
        "funnel, time handed in (check_at)",
        "funnel, RecentClock",
        "funnel, QuantaClock (default)",
        "funnel compact, RecentClock",
        "governor-ahash, QuantaUpkeepClock",
        "governor-ahash, QuantaClock (default)",
        "layout floor",
        "layout floor compact",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for rep in 0..reps {
        for i in 0..names.len() {
            let v = (i + rep) % names.len();
            let seed = rep as u64 * 7 + v as u64;
            let ns = match v {
                0 => {
                    // The time a caller would hand in: read once every 1,024 decisions.
                    let mut now = clock.now();
                    let mut c = 0u32;
                    time(
                        |r| {
                            c = c.wrapping_add(1);
                            if c % 1024 == 0 {
                                now = clock.now();
                            }
                            f_recent.check_at(&r.below(KEYS), now).is_allowed()
                        },
                        seed,
                    )
                }
                1 => time(|r| f_recent.check(&r.below(KEYS)).is_allowed(), seed),
                2 => time(|r| f_real.check(&r.below(KEYS)).is_allowed(), seed),
                3 => time(|r| f_compact.check(&r.below(KEYS)).is_allowed(), seed),
                4 => time(|r| g_upkeep.check_key(&r.below(KEYS)).is_ok(), seed),
                5 => time(|r| g_real.check_key(&r.below(KEYS)).is_ok(), seed),
                6 => time(|r| floor_default.check(r.below(KEYS), recent.now()), seed),
                _ => time(|r| floor_compact.check(r.below(KEYS), recent.now()), seed),
            };
            res[v].push(ns);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mode = if allow { "allow" } else { "deny" };
    for (i, n) in names.iter().enumerate() {
        let mut v = res[i].clone();
        v.sort_by(f64::total_cmp);
        println!(
            "{mode} {n}: median {:.2} ns (min {:.2}, max {:.2}, {} runs)",
            median(&v),
            v[0],
            v[v.len() - 1],
            v.len()
        );
    }
    let governor = median(&res[4]);
    for (i, what) in [
        (1, "funnel"),
        (3, "funnel compact"),
        (6, "layout floor"),
        (7, "layout floor compact"),
    ] {
        println!(
            "{mode} governor-ahash upkeep / {what} recent: {:.2}x",
            governor / median(&res[i])
        );
    }
}

/// The bare lookup of funnel's bucket layout, the floor under its keyed decision: 128-byte
/// buckets of seven slots (a tag word, seven fingerprints, seven funnel words), two candidate
/// buckets a key (Lemire's reduction of the hash and of the hash rotated), both tag words
/// matched in one SSE2 compare, the first matching slot's fingerprint and word, the GCRA step
/// and one CAS, with funnel's orderings (Acquire reads of the slot, a Release CAS; Relaxed for
/// the tags, a filter, and the setup, done before the timed loop), so the floor pays
/// for the same fences. None of funnel's protocol: no slot states or generations, no second
/// read of the word for a denial, no growable shape, no creation (every key is placed up front, first free
/// slot of the first bucket, then of the second).
mod floor {
    use std::sync::atomic::{AtomicU64, Ordering};

    use funnel::Timestamp;

    #[repr(C, align(128))]
    #[derive(Default)]
    struct Bucket {
        tags: AtomicU64,
        keys: [AtomicU64; 7],
        words: [AtomicU64; 7],
    }

    pub struct LayoutFloor {
        buckets: Vec<Bucket>,
        hasher: ahash::RandomState,
        /// Emission interval and tolerance, ns.
        t: u64,
        tau: u64,
    }

    impl LayoutFloor {
        /// Room for `capacity` keys, holding keys `0..keys`, under the minimal loop's allowing
        /// quota (1,000 a second, four billion at once) or its denying one (a tolerance of one
        /// interval, and every key already charged).
        pub fn new(capacity: usize, keys: u64, allow: bool) -> LayoutFloor {
            let (t, tau) = if allow {
                (1_000_000, 4_000_000_000 * 1_000_000)
            } else {
                (3_600_000_000_000, 3_600_000_000_000)
            };
            let floor = LayoutFloor {
                buckets: (0..capacity.div_ceil(7))
                    .map(|_| Bucket::default())
                    .collect(),
                hasher: ahash::RandomState::new(),
                t,
                tau,
            };
            for key in 0..keys {
                let fp = floor.fingerprint(key);
                let (first, second) = floor.candidates(fp);
                let free = [first, second].into_iter().find_map(|b| {
                    let bucket = &floor.buckets[b];
                    (0..7)
                        .find(|&i| bucket.keys[i].load(Ordering::Relaxed) == 0)
                        .map(|i| (bucket, i))
                });
                if let Some((bucket, i)) = free {
                    bucket.keys[i].store(fp, Ordering::Relaxed);
                    // Denying: charged far ahead, so every request is refused.
                    let word = if allow { 0 } else { u64::MAX >> 2 };
                    bucket.words[i].store(word, Ordering::Relaxed);
                    bucket
                        .tags
                        .fetch_or((fp & 0xFF) << (8 * i), Ordering::Relaxed);
                }
            }
            floor
        }

        #[inline(always)]
        fn fingerprint(&self, key: u64) -> u64 {
            // Odd, so the low byte (the tag) is never 0, the byte of an empty slot.
            self.hasher.hash_one(key) | 1
        }

        #[inline(always)]
        fn candidates(&self, fp: u64) -> (usize, usize) {
            let len = self.buckets.len() as u128;
            let reduce = |x: u64| ((u128::from(x) * len) >> 64) as usize;
            (reduce(fp), reduce(fp.rotate_left(32)))
        }

        /// One unit for `key` at `now`: true if allowed (and charged).
        #[inline(always)]
        pub fn check(&self, key: u64, now: Timestamp) -> bool {
            let now = now.as_nanos();
            let fp = self.fingerprint(key);
            let (first, second) = self.candidates(fp);
            let (first, second) = (&self.buckets[first], &self.buckets[second]);
            let mut slots = matches(
                first.tags.load(Ordering::Relaxed),
                second.tags.load(Ordering::Relaxed),
                fp & 0xFF,
            );
            while slots != 0 {
                let bit = slots.trailing_zeros();
                let bucket = if bit & 8 != 0 { second } else { first };
                let i = (bit & 7) as usize;
                if bucket.keys[i].load(Ordering::Acquire) == fp {
                    let tat = bucket.words[i].load(Ordering::Acquire);
                    let new = tat.max(now) + self.t;
                    return new <= now + self.tau
                        && bucket.words[i]
                            .compare_exchange(tat, new, Ordering::Release, Ordering::Relaxed)
                            .is_ok();
                }
                slots &= slots - 1;
            }
            false
        }
    }

    /// The slots of two tag words whose byte is `tag`: bit `i` for slot `i` of the first, bit
    /// `8 + i` of the second.
    #[inline(always)]
    fn matches(first: u64, second: u64, tag: u64) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{
                _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x,
            };
            // SAFETY: SSE2 is part of the x86_64 baseline; these intrinsics work on registers
            // only and have no other precondition.
            #[allow(unsafe_code)]
            unsafe {
                let both = _mm_set_epi64x(second as i64, first as i64);
                _mm_movemask_epi8(_mm_cmpeq_epi8(both, _mm_set1_epi8(tag as u8 as i8))) as u32
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let byte = |w: u64, i: u32| (w >> (8 * i)) & 0xFF == tag;
            (0..7).fold(0, |m, i| {
                m | (u32::from(byte(first, i)) << i) | (u32::from(byte(second, i)) << (8 + i))
            })
        }
    }
}
