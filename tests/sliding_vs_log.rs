//! The sliding window counter against the exact sliding log (one entry per admitted unit, as a
//! Redis sorted set keeps it: entries in `(now - W, now]` are counted, a request of `n` passes
//! while `count + n <= limit`). Both see the same requests, each with its own history; the test
//! counts the requests they decide differently and the most units the counter admits in any
//! window of length `W`, prints the table (`--nocapture`) and asserts the bounds that
//! `docs/DESIGN.md`, "Window algorithms", reports.

use funnel_testkit::rng;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::window::{SlidingWindow, SlidingWindowQuota};
use funnel::Timestamp;
use rng::Rng;

const S: u64 = 1_000_000_000;

/// The exact sliding log.
struct Log {
    limit: u64,
    window: u64,
    entries: VecDeque<u64>,
}

impl Log {
    fn new(limit: u64, window: u64) -> Log {
        Log {
            limit,
            window,
            entries: VecDeque::new(),
        }
    }

    fn decide(&mut self, now: u64, n: u64) -> bool {
        while self
            .entries
            .front()
            .is_some_and(|t| *t + self.window <= now)
        {
            self.entries.pop_front();
        }
        let ok = self.entries.len() as u64 + n <= self.limit;
        if ok {
            self.entries.extend(std::iter::repeat_n(now, n as usize));
        }
        ok
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    requests: u64,
    /// The counter admitted, the log denied.
    looser: u64,
    /// The counter denied, the log admitted.
    stricter: u64,
    /// Units admitted: counter, log.
    admitted: (u64, u64),
    /// The most units the counter admitted within any `(t - W, t]`.
    worst_window: u64,
    /// On the log's own history (the counter's estimate computed from the units the log
    /// admitted), requests the estimate decides differently from the exact count.
    same_history: u64,
}

impl Tally {
    fn disagreement(&self) -> f64 {
        (self.looser + self.stricter) as f64 / self.requests.max(1) as f64
    }

    fn same_history_rate(&self) -> f64 {
        self.same_history as f64 / self.requests.max(1) as f64
    }
}

/// Runs one key's requests `(time, units)` through both.
fn compare(limit: u64, window: u64, requests: &[(u64, u64)]) -> Tally {
    let q = SlidingWindowQuota::new(limit, Duration::from_nanos(window)).unwrap();
    let counter = SlidingWindow::with_clock(q, ManualClock::new());
    let mut log = Log::new(limit, window);
    let mut tally = Tally::default();
    let mut admitted_times: VecDeque<u64> = VecDeque::new();
    let mut per_window: HashMap<u64, u64> = HashMap::new();
    for &(now, n) in requests {
        let c = counter
            .check_n_at(n, Timestamp::from_nanos(now).unwrap())
            .is_allowed();
        // The sliding counter's formula on the log's history, before the log decides.
        let k = now / window;
        let in_window = |j: u64| per_window.get(&j).copied().unwrap_or(0) as u128;
        let prev = if k == 0 { 0 } else { in_window(k - 1) };
        let estimate = prev * u128::from(window - now % window)
            + (in_window(k) + u128::from(n)) * u128::from(window);
        let would = estimate <= u128::from(limit) * u128::from(window);
        let l = log.decide(now, n);
        tally.same_history += u64::from(would != l);
        if l {
            *per_window.entry(k).or_default() += n;
        }
        tally.requests += 1;
        tally.looser += u64::from(c && !l);
        tally.stricter += u64::from(!c && l);
        if c {
            tally.admitted.0 += n;
            admitted_times.extend(std::iter::repeat_n(now, n as usize));
            while admitted_times.front().is_some_and(|t| *t + window <= now) {
                admitted_times.pop_front();
            }
            tally.worst_window = tally.worst_window.max(admitted_times.len() as u64);
        }
        if l {
            tally.admitted.1 += n;
        }
    }
    tally
}

/// Poisson arrivals at `load` times the limit's rate for 200 windows, starting at a random
/// phase of the window; unit requests.
fn poisson(limit: u64, window: u64, load: f64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    let rate = load * limit as f64 / window as f64; // per ns
    let mut t = 10 * S + rng.below(window);
    let end = t + 200 * window;
    let mut out = Vec::new();
    while t < end {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        t += (-(1.0 - u).ln() / rate).ceil().max(1.0) as u64;
        out.push((t, 1));
    }
    out
}

/// On-off traffic: bursts of `4 * limit` requests spread over a tenth of a window, then
/// silence for between half a window and two windows.
fn bursty(limit: u64, window: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    let mut t = 10 * S + rng.below(window);
    let mut out = Vec::new();
    for _ in 0..200 {
        for _ in 0..4 * limit {
            t += 1 + rng.below(window / 10 / (4 * limit));
            out.push((t, 1));
        }
        t += window / 2 + rng.below(3 * window / 2);
    }
    out
}

/// One key's limit, window (ns) and requests `(time, units)`.
type KeyTrace = (u64, u64, Vec<(u64, u64)>);

/// The replay file's CL.THROTTLE lines read as `count` units per `period` seconds, per key.
fn replay_trace() -> HashMap<String, KeyTrace> {
    let text = include_str!("../examples/data/replay.txt");
    let mut keys: HashMap<String, KeyTrace> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parse = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        let (Some(now), Some(_burst), Some(count), Some(period)) =
            (parse(0), parse(2), parse(3), parse(4))
        else {
            continue; // the file's deliberately bad lines
        };
        let n = if f.len() > 5 {
            match parse(5) {
                Some(n) => n,
                None => continue,
            }
        } else {
            1
        };
        if count == 0 || period == 0 || count > 32_767 {
            continue;
        }
        let entry = keys
            .entry(f[1].to_owned())
            .or_insert((count, period * S, Vec::new()));
        entry.2.push((now, n));
    }
    keys
}

#[test]
fn the_sliding_counter_stays_close_to_the_exact_sliding_log() {
    let window = 10 * S;
    println!("| trace | limit | requests | disagree | counter looser | counter stricter | same history | admitted counter / log | most in any window |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let (mut worst_rate, mut worst_same): (f64, f64) = (0.0, 0.0);
    for limit in [10u64, 100] {
        let mut traces: Vec<(String, Vec<(u64, u64)>)> = [0.5, 0.9, 1.0, 1.2, 2.0, 5.0]
            .iter()
            .map(|load| {
                (
                    format!("Poisson {load}x"),
                    poisson(limit, window, *load, limit),
                )
            })
            .collect();
        traces.push(("bursty on-off".into(), bursty(limit, window, limit)));
        for (name, trace) in traces {
            let t = compare(limit, window, &trace);
            println!(
                "| {name} | {limit} | {} | {:.2}% | {} | {} | {:.2}% | {} / {} | {} |",
                t.requests,
                100.0 * t.disagreement(),
                t.looser,
                t.stricter,
                100.0 * t.same_history_rate(),
                t.admitted.0,
                t.admitted.1,
                t.worst_window
            );
            worst_rate = worst_rate.max(t.disagreement());
            worst_same = worst_same.max(t.same_history_rate());
            // The estimate can exceed the exact count in a window, never by more than the
            // previous window's share it assumed gone: at most twice the limit.
            assert!(t.worst_window <= 2 * limit, "{name}: {t:?}");
            // Neither admits much more than the other over the whole trace.
            let (c, l) = (t.admitted.0 as f64, t.admitted.1 as f64);
            assert!((c - l).abs() <= 0.15 * l, "{name}: {t:?}");
        }
    }
    assert!(worst_rate < 0.40, "worst disagreement {worst_rate}");
    assert!(
        worst_same < 0.65,
        "worst same-history disagreement {worst_same}"
    );
    let mut replay = Tally::default();
    for (limit, period, requests) in replay_trace().values() {
        let t = compare(*limit, *period, requests);
        replay.requests += t.requests;
        replay.looser += t.looser;
        replay.stricter += t.stricter;
        replay.same_history += t.same_history;
    }
    println!(
        "| examples/data/replay.txt | per line | {} | {:.2}% | {} | {} | {:.2}% | | |",
        replay.requests,
        100.0 * replay.disagreement(),
        replay.looser,
        replay.stricter,
        100.0 * replay.same_history_rate()
    );
    assert!(replay.requests >= 10);
}
