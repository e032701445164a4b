//! Replay lines with garbage: every bad line is a [`LineError`] naming its field (negative
//! numbers are [`funnel::Error::Negative`], like every other bad argument), odd but valid
//! lines are decided, random bytes never panic and leave the state alone, and the messages say
//! the expected format.

use std::time::Duration;

use funnel::replay::{parse_line, LineError, Replay};
use funnel::Error;
use funnel_testkit::Rng;

/// `Timestamp::MAX` in nanoseconds, as documented: `3 * 2^60 - 32`.
const MAX_NANOS: u64 = 3 * (1 << 60) - 32;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

// ---------------------------------------------------------------------------------------------
// Replay lines with garbage
// ---------------------------------------------------------------------------------------------

fn negative(argument: &'static str, value: i64) -> LineError {
    LineError::Invalid(Error::Negative { argument, value })
}

fn not_an_integer(field: &'static str, text: &str) -> LineError {
    LineError::NotAnInteger {
        field,
        text: text.to_owned(),
    }
}

#[test]
fn garbage_replay_lines_are_errors_naming_the_field() {
    let cases: Vec<(&[u8], LineError)> = vec![
        (b"", LineError::Missing("now_ns")),
        (b" \t \r", LineError::Missing("now_ns")),
        (b"5", LineError::Missing("key")),
        (b"5 k", LineError::Missing("max_burst")),
        (b"5 k 1", LineError::Missing("count")),
        (b"5 k 1 2", LineError::Missing("period_s")),
        (b"5 k 1 2 3 4 5", LineError::TooManyFields),
        (b"1e3 k 1 2 3", not_an_integer("now_ns", "1e3")),
        (b"0x10 k 1 2 3", not_an_integer("now_ns", "0x10")),
        (b"\0 k 1 2 3", not_an_integer("now_ns", "\0")),
        (b"5 k 1.5 2 3", not_an_integer("max_burst", "1.5")),
        (b"5 k \xff 2 3", not_an_integer("max_burst", "\u{fffd}")),
        (b"5 k 1 two 3", not_an_integer("count", "two")),
        (b"5 k 1 2 3s", not_an_integer("period_s", "3s")),
        (b"5 k 1 2 3 q", not_an_integer("quantity", "q")),
        (b"5 k 1 2 3 --1", not_an_integer("quantity", "--1")),
        (
            b"9223372036854775808 k 1 2 3",
            not_an_integer("now_ns", "9223372036854775808"),
        ),
        (
            b"5 k 1 2 3 9223372036854775808",
            not_an_integer("quantity", "9223372036854775808"),
        ),
        (
            b"5 k 1 2 3 18446744073709551615",
            not_an_integer("quantity", "18446744073709551615"),
        ),
        (b"-1 k 1 2 3", negative("now_ns", -1)),
        (
            b"-9223372036854775808 k 1 2 3",
            negative("now_ns", i64::MIN),
        ),
        (b"5 k 1 2 3 -1", negative("quantity", -1)),
        (b"5 k -1 2 3", negative("max_burst", -1)),
        (
            b"3458764513820540897 k 1 2 3",
            LineError::Invalid(Error::TimeOutOfRange {
                nanos: u128::from(MAX_NANOS) + 1,
                max_nanos: MAX_NANOS,
            }),
        ),
        (b"5 k 1 0 3", LineError::Invalid(Error::ZeroCount)),
        (b"5 k 1 2 0", LineError::Invalid(Error::ZeroPeriod)),
        (
            b"5 k -1 2 3",
            LineError::Invalid(Error::Negative {
                argument: "max_burst",
                value: -1,
            }),
        ),
        (
            b"5 k 1 2000000001 2",
            LineError::Invalid(Error::EmissionIntervalTooSmall {
                period: secs(2),
                count: 2_000_000_001,
            }),
        ),
    ];
    let replay = Replay::with_capacity(16).unwrap();
    for (line, expected) in cases {
        let shown = String::from_utf8_lossy(line);
        assert_eq!(parse_line(line), Err(expected.clone()), "line {shown:?}");
        assert_eq!(
            replay.line(line),
            format!("error: {expected}"),
            "line {shown:?}"
        );
    }
    assert!(
        replay.limiter().is_empty(),
        "a bad line changed the replay's state"
    );
}

#[test]
fn odd_but_valid_replay_lines_are_decided() {
    let replay = Replay::with_capacity(16).unwrap();
    // Non-UTF-8 keys are raw bytes, as Redis keys are (redis-cell aborts the server on them).
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "0 2 1 -1 2");
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "0 2 0 -1 3");
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "1 2 0 2 3");
    // An explicit plus sign, tabs, a trailing CR.
    assert_eq!(replay.line(b"+5\tplus\t+1\t+2\t+3\t+0\r"), "0 2 2 -1 0");
    // The largest quantity is a cost that can never pass.
    assert_eq!(
        replay.line(b"5 big 1 2 3 9223372036854775807"),
        "1 2 2 -1 0"
    );
    // A line earlier than the previous one is decided at its own time: stricter.
    assert_eq!(replay.line(b"0 \xff\xfe 1 2 3"), "1 2 0 2 3");
}

#[test]
fn a_replay_never_panics_on_random_lines_and_garbage_leaves_the_state_alone() {
    let tokens: [&[u8]; 24] = [
        b"0",
        b"1",
        b"-1",
        b"2",
        b"60",
        b"+7",
        b"007",
        b"1000000000",
        b"1000000001",
        b"1152921504",
        b"3458764513820540896",
        b"3458764513820540897",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"9223372036854775808",
        b"18446744073709551615",
        b"k",
        b"\xff",
        b"\0",
        b"1e9",
        b"",
        b" ",
        b"\t",
        b"\r",
    ];
    let mut rng = Rng::new(99);
    let replay = Replay::with_capacity(64).unwrap();
    for i in 0..5_000 {
        let mut line = Vec::new();
        for _ in 0..rng.below(9) {
            if rng.chance(1, 8) {
                let len = rng.below(6) as usize;
                line.extend(rng.bytes(len));
            } else {
                let token: &&[u8] = rng.pick(&tokens);
                line.extend_from_slice(token);
            }
            line.push(b' ');
        }
        let out = replay.line(&line);
        let ints = out.split(' ').all(|x| x.parse::<i64>().is_ok()) && out.split(' ').count() == 5;
        assert!(
            out.starts_with("error: ") || ints,
            "line {i} {:?} gave {out:?}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(out.starts_with("error: "), parse_line(&line).is_err());
    }
    // The garbage neither stopped the replay nor touched a key it did not name.
    let out = replay.line(b"0 fresh-key-after-garbage 15 30 60");
    assert_eq!(out, "0 16 15 -1 2");
}

#[test]
fn replay_line_errors_name_the_field_and_the_expected_format() {
    let text = LineError::Missing("period_s").to_string();
    assert!(
        text.contains("<period_s>") && text.contains("<now_ns> <key> <max_burst>"),
        "{text}"
    );
    let text = not_an_integer("count", "two").to_string();
    assert!(text.contains("<count>") && text.contains("two"), "{text}");
    let text = negative("quantity", -3).to_string();
    assert!(text.contains("quantity") && text.contains("-3"), "{text}");
    let text = negative("now_ns", -1).to_string();
    assert!(text.contains("now_ns") && text.contains("-1"), "{text}");
}
