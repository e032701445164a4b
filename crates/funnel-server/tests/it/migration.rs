//! MIGRATING.md kept true: its configuration files (the ```` ```yaml config/NAME ```` blocks)
//! are loaded by the binary, and every call of its sequences (the ```` ```console sequence
//! FLAGS ```` blocks: a `$ curl ... -d 'BODY' .../json` line, then the answer) is sent to
//! `POST /json` of a server started with FLAGS, and answered exactly as the guide shows. The
//! seconds until reset change with the clock: they are checked to lie within the unit and
//! compared as a placeholder.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;

const GUIDE: &str = include_str!("../../MIGRATING.md");

/// The fenced blocks whose info string starts with `info`: (the rest of the info string, the
/// text).
fn blocks(info: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = GUIDE.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("```").and_then(|l| l.strip_prefix(info)) else {
            continue;
        };
        let mut text = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        out.push((rest.trim().to_owned(), text));
    }
    out
}

/// `s` with every `"durationUntilReset":"Ns"` made `"durationUntilReset":"_s"`, and the Ns.
fn without_durations(s: &str) -> (String, Vec<u64>) {
    const FIELD: &str = "\"durationUntilReset\":\"";
    let mut out = String::new();
    let mut seconds = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find(FIELD) {
        let (head, tail) = rest.split_at(at + FIELD.len());
        out.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        seconds.push(tail[..digits].parse().unwrap_or(u64::MAX));
        out.push('_');
        rest = &tail[digits..];
    }
    out.push_str(rest);
    (out, seconds)
}

/// The calls of a sequence: (request body, expected answer).
fn calls(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(cmd) = line.strip_prefix("$ ") else {
            panic!("a sequence line that is not a command: {line:?}")
        };
        let body = cmd
            .split_once("-d '")
            .and_then(|(_, b)| b.split_once('\''))
            .map(|(b, _)| b.to_owned())
            .unwrap_or_else(|| panic!("no -d '...' in {cmd:?}"));
        let answer = lines
            .next()
            .unwrap_or_else(|| panic!("no answer after {cmd:?}"));
        out.push((body, answer.to_owned()));
    }
    out
}

/// Waits until at least `margin` is left in the current Unix minute, so that a sequence runs
/// within one window of the minute limits.
fn away_from_a_minute_boundary(margin: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_nanos((now.as_nanos() % 60_000_000_000) as u64);
    let left = Duration::from_secs(60) - into;
    if left < margin {
        std::thread::sleep(left + Duration::from_millis(200));
    }
}

#[test]
fn the_guide_s_sequences_get_the_answers_it_shows() {
    let dir = scratch("migration");
    let config = dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    let files = blocks("yaml config/");
    assert!(files.len() >= 2, "the guide's configuration files");
    for (name, text) in &files {
        write_config(&config, name, text);
    }
    let sequences = blocks("console sequence");
    assert!(sequences.len() >= 2, "the guide's sequences");
    let mut flags: Vec<String> = Vec::new();
    for (f, _) in &sequences {
        if !flags.contains(f) {
            flags.push(f.clone());
        }
    }
    for f in flags {
        let calls: Vec<(String, String)> = sequences
            .iter()
            .filter(|(g, _)| *g == f)
            .flat_map(|(_, text)| calls(text))
            .collect();
        let mut args = vec!["--no-watch"];
        args.extend(f.split_whitespace());
        away_from_a_minute_boundary(Duration::from_secs(25));
        let s = Server::start(&config, &args);
        for (body, expected) in &calls {
            let (code, answer) = s.post_json(body);
            let (answer, seconds) = without_durations(answer.trim());
            let (expected, _) = without_durations(expected);
            assert_eq!(answer, expected, "flags {f:?}, request {body}");
            assert!(
                seconds.iter().all(|s| (1..=60).contains(s)),
                "whole seconds within the unit: {seconds:?} for {body}"
            );
            let over = expected.contains("\"overallCode\":\"OVER_LIMIT\"");
            assert_eq!(code, if over { 429 } else { 200 }, "{body}");
        }
    }
}

/// The flags of other programs the guide shows (cargo's).
const OTHER_PROGRAMS: &[&str] = &["--path"];

#[test]
fn the_guide_s_flags_are_the_binary_s() {
    let (_, help) = {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_funnel-server"))
            .arg("--help")
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let mut named = 0;
    for word in GUIDE.split(|c: char| c.is_whitespace() || "`|,()".contains(c)) {
        let flag = word.trim_end_matches(['.', ':', ';']);
        let name = flag.split('=').next().unwrap_or(flag);
        if OTHER_PROGRAMS.contains(&name) {
            continue;
        }
        if name.starts_with("--") && name.chars().nth(2).is_some_and(char::is_alphabetic) {
            assert!(help.contains(name), "{name} is not a flag of funnel-server");
            named += 1;
        }
    }
    assert!(named > 5, "the guide names its flags");
}
