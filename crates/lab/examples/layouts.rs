//! Why funnel's buckets look the way they do: two candidate buckets of seven slots, each bucket
//! two cache lines (tags and fingerprints, then funnel words), against the alternatives.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example layouts -- fill    # slots in use when a key first finds no room
//! cargo run --release -p funnel-lab --example layouts -- probe   # lookups on two layouts, three key streams
//! ```
//!
//! * `fill` puts keys that all stay in debt into a table of two-choice buckets (each key to
//!   the candidate with more free slots, the first on a tie, as funnel places them) until one
//!   finds both candidates full, and prints the share of slots then in use, for buckets of 4,
//!   7 and 8 slots; then the same for funnel's own table, whose creators also take a cuckoo
//!   step before they evict (its first forced eviction); then forced evictions and moves when
//!   a million or ten million keys in debt enter funnel tables 1.15-1.25 times their number.
//! * `probe` times bare lookups (hash, match, validation; `allow` adds the CAS that writes the
//!   funnel) on two layouts holding the same keys: `two-line/7`, funnel's (a tag word and seven
//!   fingerprints in one line, seven funnel words in the next, both candidates' tag words
//!   matched in one SSE2 compare, the word lines prefetched while the tags load), and
//!   `one-line/4` (four fingerprints and their four words in one line, so both candidates are
//!   two lines in all), and `first-first`: funnel's buckets, but keys kept in their first
//!   candidate while it has room and looked up there first, so that a key at home costs one
//!   bucket's lines. Only the table differs; no funnel arithmetic, no `Decision`.
//!
//! Wall times: they mean something on an idle machine only. The tag match and the prefetch
//! are funnel's own on x86_64 (SSE2, `prefetcht0`); elsewhere a plain match and no prefetch.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use funnel::{clock::ManualClock, Limiter, Quota, Timestamp};
use funnel_testkit::{Rng, Zipf};

/// Lemire's multiply-and-shift: `x` scaled into `0..n`.
fn reduce(x: u64, n: usize) -> usize {
    ((u128::from(x) * n as u128) >> 64) as usize
}

/// Two distinct candidate buckets among `n`, from independent bits of `fp` (as funnel's).
fn candidates(fp: u64, n: usize) -> (usize, usize) {
    let first = reduce(fp, n);
    let second = reduce(fp.rotate_left(32), n);
    (
        first,
        if second == first {
            (first + 1) % n
        } else {
            second
        },
    )
}

/// Slots in use, as a share of all, when the first key finds both candidates full, for
/// buckets of `size` slots and `slots` slots in all.
fn fill_share(size: usize, slots: usize, seed: u64) -> f64 {
    let buckets = slots / size;
    let mut used = vec![0usize; buckets];
    let mut rng = Rng::new(seed);
    let mut placed = 0;
    loop {
        let (a, b) = candidates(rng.next_u64(), buckets);
        let to = if used[b] < used[a] { b } else { a };
        if used[to] == size {
            return placed as f64 / (buckets * size) as f64;
        }
        used[to] += 1;
        placed += 1;
    }
}

/// The same for funnel's table: keys that stay in debt (one request each, one an hour allowed)
/// until the first forced eviction.
fn funnel_fill_share(keys: usize) -> f64 {
    let now = Timestamp::from_nanos(1_000_000_000).expect("1 s");
    let limiter = Limiter::<u64>::builder(Quota::per_hour(1).expect("a valid quota"))
        .capacity(keys)
        .clock(ManualClock::starting_at(now))
        .build()
        .expect("a valid capacity");
    let mut rng = Rng::new(keys as u64);
    loop {
        let held = limiter.len();
        let _ = limiter.check(&rng.next_u64());
        if limiter.stats().forced_evictions > 0 {
            return held as f64 / limiter.capacity() as f64;
        }
    }
}

fn fill() {
    println!("slots in use when a key first finds both candidates full (min-max of 5 tables)");
    for size in [4, 7, 8] {
        let mut line = format!("buckets of {size}:");
        for kib in [16, 64, 256] {
            let slots = kib * 1024 / size * size;
            let shares: Vec<f64> = (0..5).map(|s| fill_share(size, slots, s + 1)).collect();
            let (lo, hi) = min_max(&shares);
            line += &format!("  {kib} Ki slots {:.0}-{:.0}%", lo * 100.0, hi * 100.0);
        }
        println!("{line}");
    }
    println!("funnel's table (its first forced eviction; it takes one cuckoo step before one):");
    let mut line = "buckets of 7:".to_string();
    for kib in [16, 64, 256] {
        // Capacities a little apart, since one capacity is one table.
        let shares: Vec<f64> = (0..5)
            .map(|s| funnel_fill_share(kib * 1024 + 7 * s))
            .collect();
        let (lo, hi) = min_max(&shares);
        line += &format!("  {kib} Ki slots {:.0}-{:.0}%", lo * 100.0, hi * 100.0);
    }
    println!("{line}");
    println!("funnel's table holding keys that are all in debt, sized at a multiple of them:");
    for keys in [1_000_000, 10_000_000] {
        for times in [1.15, 1.2, 1.25] {
            let (forced, moved) = funnel_sized(keys, times);
            println!("  {keys} keys in {times} x as many slots: {forced} forced evictions, {moved} keys moved");
        }
    }
}

/// Forced evictions and cuckoo moves while `keys` keys, each kept in debt, enter a table of
/// `times` as many slots.
fn funnel_sized(keys: u64, times: f64) -> (u64, u64) {
    let limiter = Limiter::<u64>::builder(Quota::per_hour(1).expect("a valid quota"))
        .capacity((keys as f64 * times) as usize)
        .clock(ManualClock::new())
        .build()
        .expect("a valid capacity");
    for k in 0..keys {
        let _ = limiter.check(&k);
    }
    let stats = limiter.stats();
    (stats.forced_evictions, stats.moved_keys)
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// A fingerprint's tag: its low byte, never 0 (as funnel's).
fn tag_of(fp: u64) -> u64 {
    let t = fp & 0xFF;
    t + u64::from(t == 0)
}

/// funnel's bucket: line 0 the tag word and seven fingerprints, line 1 the seven words.
#[repr(C, align(128))]
#[derive(Default)]
struct TwoLine {
    tags: AtomicU64,
    keys: [AtomicU64; 7],
    words: [AtomicU64; 7],
    _pad: u64,
}

/// One line: four fingerprints, then their four words.
#[repr(C, align(64))]
#[derive(Default)]
struct OneLine {
    keys: [AtomicU64; 4],
    words: [AtomicU64; 4],
}

/// A bucket as the builds see it: its free slots, and binding a key in one of them.
trait Slots {
    fn free(&self) -> usize;
    /// Binds `fp` in a free slot with funnel word 1; false when none is free.
    fn bind(&self, fp: u64) -> bool;
}

impl Slots for TwoLine {
    fn free(&self) -> usize {
        free_slots(&self.keys)
    }
    fn bind(&self, fp: u64) -> bool {
        let Some(i) = bind_in(&self.keys, &self.words, fp) else {
            return false;
        };
        let tags = self.tags.load(Ordering::Relaxed);
        self.tags
            .store(tags | tag_of(fp) << (8 * i), Ordering::Relaxed);
        true
    }
}

impl Slots for OneLine {
    fn free(&self) -> usize {
        free_slots(&self.keys)
    }
    fn bind(&self, fp: u64) -> bool {
        bind_in(&self.keys, &self.words, fp).is_some()
    }
}

/// Slots whose key word is 0 (never bound).
fn free_slots(keys: &[AtomicU64]) -> usize {
    keys.iter()
        .filter(|k| k.load(Ordering::Relaxed) == 0)
        .count()
}

/// Binds `fp` with funnel word 1 in the first free slot, and says which.
fn bind_in(keys: &[AtomicU64], words: &[AtomicU64], fp: u64) -> Option<usize> {
    let i = keys.iter().position(|k| k.load(Ordering::Relaxed) == 0)?;
    keys[i].store(fp, Ordering::Relaxed);
    words[i].store(1, Ordering::Relaxed);
    Some(i)
}

/// Two-choice placement of `fp`: the candidate with more free slots, the first on a tie; but
/// the first whenever it has at least `keep_first` free slots.
fn place<T: Slots>(table: &[T], fp: u64, keep_first: usize) -> bool {
    let (a, b) = candidates(fp, table.len());
    let (free_a, free_b) = (table[a].free(), table[b].free());
    let to = if free_a < keep_first && free_b > free_a {
        b
    } else {
        a
    };
    table[to].bind(fp)
}

/// A table of either layout, filled by the two-choice rule; `find` returns the funnel word of
/// the key and its value, read as funnel's hot path reads a slot (the word, then the key; the
/// caller reads the word a second time, by its CAS or, for a denial, a load).
trait Layout: Sync {
    fn with_slots(slots: usize) -> Self;
    fn insert(&self, fp: u64) -> bool;
    fn find(&self, fp: u64) -> Option<(&AtomicU64, u64)>;
}

// Relaxed loads throughout the builds (one thread, before timing); the lookups use funnel's
// orderings (Acquire on the word and key loads, and on a denial's second load of the word),
// which on x86_64 are plain loads either way.

/// The word, then the key: the word is the key's if a second read finds it unchanged.
#[inline(always)]
fn validate(key: &AtomicU64, word: &AtomicU64, fp: u64) -> Option<u64> {
    let w = word.load(Ordering::Acquire);
    (key.load(Ordering::Acquire) == fp).then_some(w)
}

#[inline(always)]
fn prefetch(word: &AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is `unsafe` only as an SSE intrinsic (SSE is part of the x86_64
    // baseline); a prefetch reads nothing the program observes and cannot fault.
    #[allow(unsafe_code)]
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(word).cast::<i8>());
    }
}

/// Bit `i` (first bucket) or `8 + i` (second) set where slot `i`'s tag byte is `tag`.
#[inline(always)]
fn tag_match(first: u64, second: u64, tag: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x,
        };
        // SAFETY: SSE2 intrinsics, `unsafe` only for their target feature, which is part of
        // the x86_64 baseline; they work on registers only.
        #[allow(unsafe_code)]
        let mask = unsafe {
            let both = _mm_set_epi64x(second as i64, first as i64);
            _mm_movemask_epi8(_mm_cmpeq_epi8(both, _mm_set1_epi8(tag as u8 as i8)))
        };
        mask as u32
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (0..16)
            .filter(|b| {
                let word = if b & 8 == 0 { first } else { second };
                (word >> (8 * (b & 7))) & 0xFF == tag
            })
            .fold(0, |m, b| m | 1 << b)
    }
}

impl Layout for Box<[TwoLine]> {
    fn with_slots(slots: usize) -> Self {
        (0..slots.div_ceil(7)).map(|_| TwoLine::default()).collect()
    }
    fn insert(&self, fp: u64) -> bool {
        place(self, fp, usize::MAX)
    }
    #[inline(always)]
    fn find(&self, fp: u64) -> Option<(&AtomicU64, u64)> {
        let (a, b) = candidates(fp, self.len());
        let (a, b) = (&self[a], &self[b]);
        prefetch(&a.words[0]);
        prefetch(&b.words[0]);
        let mut mask = tag_match(
            a.tags.load(Ordering::Relaxed),
            b.tags.load(Ordering::Relaxed),
            tag_of(fp),
        );
        while mask != 0 {
            let bit = mask.trailing_zeros();
            let t = if bit & 8 != 0 { b } else { a };
            let i = (bit & 7) as usize;
            if i < 7 {
                if let Some(w) = validate(&t.keys[i], &t.words[i], fp) {
                    return Some((&t.words[i], w));
                }
            }
            mask &= mask - 1;
        }
        None
    }
}

/// funnel's buckets, but a key goes to its first bucket while that has at least 3 free slots
/// (else to the candidate with more), and a lookup reads the second bucket only when the key
/// is not in the first: fewer lines for the keys at home, at the price of a branch on where
/// the key is and of room (keys find both candidates full sooner).
struct FirstFirst(Box<[TwoLine]>);

impl Layout for FirstFirst {
    fn with_slots(slots: usize) -> Self {
        FirstFirst(Layout::with_slots(slots))
    }
    fn insert(&self, fp: u64) -> bool {
        place(&self.0, fp, 3)
    }
    #[inline(always)]
    fn find(&self, fp: u64) -> Option<(&AtomicU64, u64)> {
        let (a, b) = candidates(fp, self.0.len());
        for t in [&self.0[a], &self.0[b]] {
            prefetch(&t.words[0]);
            let mut mask = tag_match(t.tags.load(Ordering::Relaxed), 0, tag_of(fp));
            while mask != 0 {
                let i = mask.trailing_zeros() as usize;
                if i < 7 {
                    if let Some(w) = validate(&t.keys[i], &t.words[i], fp) {
                        return Some((&t.words[i], w));
                    }
                }
                mask &= mask - 1;
            }
        }
        None
    }
}

impl Layout for Box<[OneLine]> {
    fn with_slots(slots: usize) -> Self {
        (0..slots.div_ceil(4)).map(|_| OneLine::default()).collect()
    }
    fn insert(&self, fp: u64) -> bool {
        place(self, fp, usize::MAX)
    }
    #[inline(always)]
    fn find(&self, fp: u64) -> Option<(&AtomicU64, u64)> {
        let (a, b) = candidates(fp, self.len());
        let (a, b) = (&self[a], &self[b]);
        // Both lines' fingerprints compared into one mask, without a branch per slot.
        let mut mask = 0u32;
        for i in 0..4 {
            mask |= u32::from(a.keys[i].load(Ordering::Relaxed) == fp) << i;
            mask |= u32::from(b.keys[i].load(Ordering::Relaxed) == fp) << (4 + i);
        }
        while mask != 0 {
            let bit = mask.trailing_zeros();
            let t = if bit & 4 != 0 { b } else { a };
            let i = (bit & 3) as usize;
            if let Some(w) = validate(&t.keys[i], &t.words[i], fp) {
                return Some((&t.words[i], w));
            }
            mask &= mask - 1;
        }
        None
    }
}

/// Builds layout `L` at `slots_per_key` slots a key, inserts every key, and times lookups over
/// `stream` (best of three passes after a warm-up one); `allow` adds a CAS on the word found.
fn probe_one<L: Layout>(
    name: &str,
    keys: &[u64],
    stream: &[u64],
    slots_per_key: f64,
    allow: bool,
) -> String {
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let fp = |k: &u64| hasher.hash_one(k).max(1);
    let table = L::with_slots((keys.len() as f64 * slots_per_key) as usize);
    let full = keys.iter().filter(|k| !table.insert(fp(k))).count();
    let mut best = Duration::MAX;
    let mut sink = 0u64;
    for round in 0..4 {
        let started = Instant::now();
        for k in stream {
            if let Some((word, v)) = table.find(fp(black_box(k))) {
                sink = sink.wrapping_add(if allow {
                    // AcqRel: the CAS funnel's update makes.
                    u64::from(
                        word.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok(),
                    )
                } else {
                    // A denial's second read of the word.
                    u64::from(word.load(Ordering::Acquire) == v)
                });
            }
        }
        if round > 0 {
            best = best.min(started.elapsed());
        }
    }
    black_box(sink);
    let ns = best.as_nanos() as f64 / stream.len() as f64;
    let note = if full > 0 {
        format!(" ({full} keys found no room)")
    } else {
        String::new()
    };
    format!("{name} {ns:5.1} ns{note}")
}

fn probe() {
    println!("ns per lookup (deny: find and read the word; allow: and CAS it)");
    for (label, n, zipf) in [
        ("uniform 1,000 keys", 1_000usize, None),
        ("Zipf 0.99, 1 M keys", 1_000_000, Some(0.99)),
        ("uniform 10 M keys", 10_000_000, None),
    ] {
        let keys: Vec<u64> = (0..n as u64).collect();
        let mut rng = Rng::new(7);
        let sampler = zipf.map(|s| Zipf::new(n as u64, s));
        let stream: Vec<u64> = (0..n.max(1 << 22))
            .map(|_| match &sampler {
                Some(z) => z.sample(&mut rng),
                None => rng.below(n as u64),
            })
            .collect();
        for allow in [false, true] {
            let two = probe_one::<Box<[TwoLine]>>(
                "two-line/7 (funnel's), 1.6 slots a key:",
                &keys,
                &stream,
                1.6,
                allow,
            );
            let first = probe_one::<FirstFirst>("first-first, 1.6:", &keys, &stream, 1.6, allow);
            let one = probe_one::<Box<[OneLine]>>("one-line/4 at 2.4:", &keys, &stream, 2.4, allow);
            let quota = if allow { "allow" } else { "deny " };
            println!("{label:<20} {quota}  {two}  {first}  {one}");
        }
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("fill") => fill(),
        Some("probe") => probe(),
        _ => {
            eprintln!("usage: layouts fill | probe");
            std::process::exit(2);
        }
    }
}
