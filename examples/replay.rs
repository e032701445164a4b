//! Replays CL.THROTTLE traffic through funnel: "what would this limit have done to my traffic?"
//!
//! Reads lines `<now_ns> <key> <max_burst> <count> <period_s> [<quantity>]` on stdin and writes,
//! per line, the five integers of CL.THROTTLE separated by single spaces, or `error: <reason>`.
//! A bad line never stops the run.
//!
//! ```text
//! cargo run --release --features replay --example replay < examples/data/replay.txt
//! cargo run --release --features replay --example replay -- --capacity 4000000 < traffic.txt
//! ```

use std::io::{BufRead, BufWriter, Write};
use std::process::ExitCode;

use funnel::replay::Replay;

fn main() -> ExitCode {
    let mut capacity = Replay::DEFAULT_CAPACITY;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|v| v.parse::<usize>())) {
            ("--capacity", Some(Ok(n))) => capacity = n,
            _ => {
                eprintln!("usage: replay [--capacity <keys>] < lines");
                return ExitCode::from(2);
            }
        }
    }
    let replay = match Replay::with_capacity(capacity) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.split(b'\n') {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        };
        if writeln!(out, "{}", replay.line(&line)).is_err() {
            return ExitCode::SUCCESS; // stdout closed (e.g. piped into head)
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}
