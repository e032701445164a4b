//! Values spelled as Go spells them, which is how envoyproxy/ratelimit's environment variables
//! and flags are written: durations (`time.ParseDuration`) and booleans (`strconv.ParseBool`).

use std::time::Duration;

/// A Go duration: a sequence of decimal numbers with units (`ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`), as in `10s`, `1m30s`, `1.5s` or `250ms`; `0` alone is zero. A negative duration is
/// refused: nothing here waits for less than nothing.
pub fn duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: expected a duration such as 500ms, 10s or 1m30s");
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() || t.starts_with('-') {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = t.strip_prefix('+').unwrap_or(t);
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            // Go takes both the micro sign (U+00B5) and the Greek mu (U+03BC).
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// A Go boolean: `1`, `t`, `T`, `true`, `TRUE`, `True` and their false counterparts.
pub fn boolean(s: &str) -> Result<bool, String> {
    match s.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{other:?}: expected true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_reads_them() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("+2us"), Ok(Duration::from_micros(2)));
        assert_eq!(duration("3μs"), Ok(Duration::from_micros(3)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "1x", "-1s", "1..2s", "1e3s", "ms10"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn booleans_read_as_go_reads_them() {
        for yes in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(boolean(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(boolean(no), Ok(false), "{no}");
        }
        for bad in ["yes", "on", "tRUE", ""] {
            assert!(boolean(bad).is_err(), "{bad:?}");
        }
    }
}
