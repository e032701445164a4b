//! The fuzz body of the `redis_reply` target (cargo feature `fuzzing`): everything this crate
//! reads from Redis, fed whatever a server, or anything answering in its place, could send.
//! The cargo-fuzz target (`fuzz/fuzz_targets/redis_reply.rs`) and a stable test
//! (`tests/it/fuzz_bodies.rs`, replaying the committed corpus) call [`reply()`](fn@reply), with
//! the test kit's plain reading of a reply (`funnel_testkit::redis_reply::admitted`) as the
//! reference: the body drives this crate's private readers, so it lives here, and a published
//! crate does not depend on the unpublished test kit.
//!
//! The input picks a request (a quota, a size `n`, the backend: a fixed header, so that seeds
//! can be written by hand) and a reply: either bytes read
//! by the `redis` crate's own RESP parser (so every RESP2 and RESP3 type, error lines, big
//! numbers, attributes), or a [`redis::Value`] of any shape built directly (nested arrays,
//! maps, sets, doubles, booleans, verbatim strings, pushes). The reply then takes the path a
//! real one takes: a script's `{3, message}` turned back into the error reply it stands for,
//! an error reply sorted into a failure or a typed error, a value read into a decision; and,
//! beside it, the other readings of replies (a late reply's verdict, the data-set marker,
//! `INFO`, `MODULE LIST`).
//!
//! Properties, checked on every input:
//!
//! * nothing panics;
//! * **an admitted request is one Redis admitted**: a decision read as allowed comes only from
//!   a reply that is exactly the script's four integers with code 1 (or `CL.THROTTLE`'s five
//!   with `limited` 0), checked against the reference's plain reading of the value;
//! * a decision read from a reply agrees with what a late reply's reading
//!   (`reply::admitted`) would count as charged.

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use funnel::{Quota, Timestamp};
use redis::{PushKind, Value, VerbatimFormat};

use crate::error::sort;
use crate::{cell, marker, reply, script};

/// Where an input's reply went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// The input was too short, or its bytes are not RESP.
    Unparsed,
    /// An error reply, sorted into a failure for the policy or a typed error.
    Sorted,
    /// Read into a decision that admits the request.
    Admitted,
    /// Read into a decision that does not.
    Denied,
    /// A value that is no reply to the request: a typed error.
    Unreadable,
}

/// The length of an input's request header (see [`reply()`](fn@reply)).
pub const HEADER: usize = 17;

/// A plain reading of a reply, independent of `reply.rs`: whether Redis admitted the request
/// (`CL.THROTTLE`'s reply when the flag is true, the script's otherwise).
pub type Reference = fn(bool, &Value) -> bool;

/// Reads one fuzz input and says where its reply went (and whether it was read as
/// `CL.THROTTLE`'s); panics only when a property fails.
///
/// The input is a fixed header, then the reply. Header (little-endian): the quota's emission
/// interval in µs (`u32`, 0 read as 1) and limit (`u16`, 0 read as 1, at most 1,000); the
/// request's size (`u8`: 0, 1, the limit, the limit + 1, 255 for `u64::MAX`, any other byte
/// less 4); the backend (`u8`, odd: `CL.THROTTLE`); the local time the request was sent
/// (`u64` ns); the reply's form (`u8`, even: RESP bytes, odd: a value built from the bytes).
///
/// `redis_admitted` is the reference: whether Redis admitted the request with a value (from
/// `CL.THROTTLE` when its first argument is true).
pub fn reply(data: &[u8], redis_admitted: Reference) -> (bool, Path) {
    let Some((header, rest)) = data.split_first_chunk::<HEADER>() else {
        return (false, Path::Unparsed);
    };
    let t_us = u32::from_le_bytes([header[0], header[1], header[2], header[3]]).max(1);
    let limit = u16::from_le_bytes([header[4], header[5]]).clamp(1, 1_000);
    let quota = Quota::per_period(1, Duration::from_micros(u64::from(t_us)))
        .and_then(|q| q.with_limit(u64::from(limit)));
    let Ok(quota) = quota else {
        return (false, Path::Unparsed);
    };
    let n = match header[6] {
        0 => 0,
        1 => 1,
        2 => quota.limit(),
        3 => quota.limit() + 1,
        255 => u64::MAX,
        b => u64::from(b) - 4,
    };
    let cell = header[7] % 2 == 1;
    let mut sent = [0u8; 8];
    sent.copy_from_slice(&header[8..16]);
    let sent = Timestamp::from_nanos(u64::from_le_bytes(sent).max(1)).unwrap_or(Timestamp::MAX);
    let value = if header[16] % 2 == 0 {
        redis::parse_redis_value(rest).ok()
    } else {
        value(&mut Unstructured::new(rest), 0).ok()
    };
    let Some(value) = value else {
        return (cell, Path::Unparsed);
    };
    (cell, check(&quota, n, cell, sent, value, redis_admitted))
}

/// A value of any shape, nested at most four deep.
fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let leaf = depth >= 4;
    let kind = if leaf {
        u.int_in_range(0u8..=8)?
    } else {
        u.int_in_range(0u8..=14)?
    };
    Ok(match kind {
        0 => Value::Nil,
        1 => Value::Int(int(u)?),
        2 => Value::BulkString(u.arbitrary()?),
        3 => Value::SimpleString(u.arbitrary()?),
        4 => Value::Okay,
        5 => Value::Double(u.arbitrary()?),
        6 => Value::Boolean(u.arbitrary()?),
        7 => Value::VerbatimString {
            format: match u.int_in_range(0u8..=2)? {
                0 => VerbatimFormat::Text,
                1 => VerbatimFormat::Markdown,
                _ => VerbatimFormat::Unknown(u.arbitrary()?),
            },
            text: u.arbitrary()?,
        },
        8 => {
            // An error reply, as the parser makes it from a line.
            let text: String = u.arbitrary()?;
            let line = format!("-{}\r\n", text.replace(['\r', '\n'], " "));
            redis::parse_redis_value(line.as_bytes()).unwrap_or(Value::Nil)
        }
        9 | 10 => Value::Array(items(u, depth)?),
        11 => Value::Set(items(u, depth)?),
        12 => Value::Map(pairs(u, depth)?),
        13 => Value::Attribute {
            data: Box::new(value(u, depth + 1)?),
            attributes: pairs(u, depth)?,
        },
        _ => Value::Push {
            kind: if u.arbitrary()? {
                PushKind::Message
            } else {
                PushKind::Other(u.arbitrary()?)
            },
            data: items(u, depth)?,
        },
    })
}

/// An integer, often one of the values at the edges of the script's and the module's ranges.
fn int(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 3,
        4 => -1,
        5 => i64::MAX,
        6 => i64::MIN,
        _ => u.arbitrary()?,
    })
}

fn items(u: &mut Unstructured<'_>, depth: u32) -> Result<Vec<Value>> {
    let len = u.int_in_range(0usize..=6)?;
    (0..len).map(|_| value(u, depth + 1)).collect()
}

fn pairs(u: &mut Unstructured<'_>, depth: u32) -> Result<Vec<(Value, Value)>> {
    let len = u.int_in_range(0usize..=3)?;
    (0..len)
        .map(|_| Ok((value(u, depth + 1)?, value(u, depth + 1)?)))
        .collect()
}

/// The value as the limiter reads it, and the properties.
fn check(
    quota: &Quota,
    n: u64,
    cell: bool,
    sent: Timestamp,
    value: Value,
    redis_admitted: Reference,
) -> Path {
    // The readings beside a decision: none may panic, whatever they are given.
    let _ = cell::lists_redis_cell(&value);
    if let Value::BulkString(bytes) = &value {
        let text = String::from_utf8_lossy(bytes);
        let _ = marker::info_field(&text, "run_id");
    }
    let counted_as_charged = reply::admitted(cell, &value);
    // The limiter's path: a script's key error becomes the error reply it stands for, an
    // error reply is sorted, any other value is read.
    let value = if cell { value } else { script::reply(value) };
    let value = match value.extract_error() {
        Ok(value) => value,
        Err(e) => {
            let _ = sort(&e, "funnel:key");
            return Path::Sorted;
        }
    };
    let read = if cell {
        reply::cell(quota, n, &value, sent).map(|(decision, _)| decision)
    } else {
        reply::script(quota, n, &value).map(|read| {
            let markers = marker::Markers::single("funnel:");
            let _ = markers.lost(0, read.epoch, read.now_us);
            let _ = markers.lost(0, read.epoch.wrapping_add(1), read.now_us);
            read.decision
        })
    };
    let Ok(decision) = read else {
        return Path::Unreadable;
    };
    if decision.is_allowed() {
        assert!(
            redis_admitted(cell, &value),
            "allowed by a reply Redis did not admit with: {value:?}"
        );
    }
    assert_eq!(
        decision.is_allowed(),
        counted_as_charged,
        "the decision and the late-reply reading differ on {value:?}"
    );
    if decision.is_allowed() {
        Path::Admitted
    } else {
        Path::Denied
    }
}
