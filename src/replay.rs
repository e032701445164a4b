//! Offline replay of CL.THROTTLE traffic: one line in, the five integers (or an error) out.
//!
//! Each input line is `<now_ns> <key> <max_burst> <count> <period_s> [<quantity>]`, fields
//! separated by spaces or tabs; times are nanoseconds from any origin (at most
//! [`Timestamp::MAX`]). The answer is the five integers of `CL.THROTTLE` separated by single
//! spaces, or `error: <reason>`. Keys are raw bytes (need not be UTF-8); numbers parse as
//! redis-cell parses them (an optional sign, ASCII digits, `i64` range). A bad line never stops
//! a replay. Times should not decrease; a line earlier than the previous one is decided at
//! its own time, which can only make the answer stricter.
//!
//! This is what `examples/replay.rs` runs over stdin; it lives in the library, behind the cargo
//! feature `replay`, so that tests and the fuzzer drive exactly the same code.

use std::fmt;

use crate::clock::{ManualClock, Timestamp};
use crate::error::Error;
use crate::limiter::Limiter;
use crate::quota::Quota;

/// Why a replay line was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineError {
    /// A required field is missing.
    Missing(&'static str),
    /// More than six fields.
    TooManyFields,
    /// A field is not an `i64` integer.
    NotAnInteger {
        /// Which field.
        field: &'static str,
        /// Its text (lossily decoded).
        text: String,
    },
    /// The time, the quota or the quantity is invalid: a negative number is
    /// [`Error::Negative`] naming its field (a negative quantity is not a refund here), like
    /// every other bad argument.
    Invalid(Error),
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::Missing(field) => write!(
                f,
                "missing <{field}>; expected <now_ns> <key> <max_burst> <count> <period_s> [<quantity>]"
            ),
            LineError::TooManyFields => f.write_str(
                "too many fields; expected <now_ns> <key> <max_burst> <count> <period_s> [<quantity>]",
            ),
            LineError::NotAnInteger { field, text } => {
                write!(f, "<{field}> is not an integer: {text:?}")
            }
            LineError::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LineError {}

/// One parsed line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// The request's time.
    pub now: Timestamp,
    /// The key's bytes.
    pub key: &'a [u8],
    /// The quota from `max_burst`, `count` and `period_s`.
    pub quota: Quota,
    /// The cost (default 1).
    pub quantity: u64,
}

/// Parses one line (without its newline; a trailing `\r` is ignored).
///
/// # Errors
///
/// A [`LineError`] naming the bad field.
pub fn parse_line(line: &[u8]) -> Result<Line<'_>, LineError> {
    let mut fields = line
        .split(|b| *b == b' ' || *b == b'\t' || *b == b'\r')
        .filter(|f| !f.is_empty());
    let mut next = |name| fields.next().ok_or(LineError::Missing(name));
    let now = int("now_ns", next("now_ns")?)?;
    let key = next("key")?;
    let max_burst = int("max_burst", next("max_burst")?)?;
    let count = int("count", next("count")?)?;
    let period = int("period_s", next("period_s")?)?;
    let quantity = match fields.next() {
        Some(q) => int("quantity", q)?,
        None => 1,
    };
    if fields.next().is_some() {
        return Err(LineError::TooManyFields);
    }
    let negative = |argument, value| LineError::Invalid(Error::Negative { argument, value });
    let now = u64::try_from(now).map_err(|_| negative("now_ns", now))?;
    let now = Timestamp::from_nanos(now).map_err(LineError::Invalid)?;
    let quantity = u64::try_from(quantity).map_err(|_| negative("quantity", quantity))?;
    let quota = Quota::from_cl_throttle(max_burst, count, period).map_err(LineError::Invalid)?;
    Ok(Line {
        now,
        key,
        quota,
        quantity,
    })
}

fn int(field: &'static str, text: &[u8]) -> Result<i64, LineError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| LineError::NotAnInteger {
            field,
            text: String::from_utf8_lossy(text).into_owned(),
        })
}

/// A replay: a keyed limiter driven by each line's own time and quota.
///
/// # Examples
///
/// ```
/// use funnel::replay::Replay;
///
/// let replay = Replay::new();
/// assert_eq!(replay.line(b"0 user123 15 30 60"), "0 16 15 -1 2");
/// assert_eq!(replay.line(b"0 user123 15 30 60 0"), "0 16 15 -1 2");
/// assert!(replay.line(b"0 user123 15 0 60").starts_with("error: "));
/// assert!(replay.limiter().capacity() >= Replay::DEFAULT_CAPACITY);
/// ```
#[derive(Debug)]
pub struct Replay {
    limiter: Limiter<[u8], ManualClock>,
}

impl Replay {
    /// The capacity of [`Replay::new`]'s limiter: 2^20 keys (a table of 18.3 MiB).
    pub const DEFAULT_CAPACITY: usize = 1 << 20;

    /// A replay tracking up to [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) keys at once. It
    /// is exact (no funnel in debt is evicted) while the keys in debt together stay below about
    /// 85% of that: a table first evicts a funnel in debt when 87-93% of its slots are in debt
    /// (see [`Builder::capacity`](crate::Builder::capacity)). Replays with more keys in debt at
    /// once need [`with_capacity`](Self::with_capacity), about 1.25 slots for each.
    pub fn new() -> Replay {
        Replay::with_capacity(Replay::DEFAULT_CAPACITY).expect("the default capacity is valid")
    }

    /// A replay tracking up to `capacity` keys.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`](crate::Builder::build).
    pub fn with_capacity(capacity: usize) -> Result<Replay, Error> {
        // The limiter's own quota and clock are never used: every line brings its own.
        let quota = Quota::per_second(1)?;
        let limiter = Limiter::builder(quota)
            .capacity(capacity)
            .clock(ManualClock::new())
            .build()?;
        Ok(Replay { limiter })
    }

    /// Decides one parsed line: CL.THROTTLE's five integers.
    ///
    /// # Errors
    ///
    /// A [`LineError`] for a line that does not parse or carries an invalid quota.
    pub fn apply(&self, line: &[u8]) -> Result<[i64; 5], LineError> {
        let line = parse_line(line)?;
        let decision =
            self.limiter
                .with_quota(line.quota)
                .check_n_at(line.key, line.quantity, line.now);
        Ok(decision.to_cl_throttle())
    }

    /// Decides one line and formats the answer: `a b c d e` or `error: <reason>`.
    pub fn line(&self, line: &[u8]) -> String {
        match self.apply(line) {
            Ok([a, b, c, d, e]) => format!("{a} {b} {c} {d} {e}"),
            Err(e) => format!("error: {e}"),
        }
    }

    /// The limiter underneath, for its counters.
    pub fn limiter(&self) -> &Limiter<[u8], ManualClock> {
        &self.limiter
    }
}

impl Default for Replay {
    fn default() -> Self {
        Replay::new()
    }
}
