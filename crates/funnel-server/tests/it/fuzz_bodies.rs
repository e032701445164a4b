//! The fuzz bodies (`src/fuzzing.rs`) on stable: every committed input of the cargo-fuzz
//! targets `server_config` and `server_request` (the seed corpus `fuzz/corpus/<target>/` and
//! the regressions `tests/fuzz_regressions/<target>/`), and each input with every byte in turn
//! replaced and with every truncation, a bounded deterministic sweep.

use std::path::PathBuf;

/// The seed corpus of `target`, then its regressions (a target may have none yet).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("fuzz/corpus").join(target);
    let regressions = manifest.join("tests/fuzz_regressions").join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .chain(std::fs::read_dir(regressions).into_iter().flatten())
        .map(|e| {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect();
    out.sort();
    out
}

fn sweep(data: &[u8], body: fn(&[u8])) {
    body(data);
    for cut in 0..data.len() {
        body(&data[..cut]);
    }
    let mut m = data.to_vec();
    for i in 0..m.len() {
        let old = m[i];
        for b in [
            0u8,
            b'\n',
            b':',
            b'-',
            b'{',
            0xff,
            old ^ 0x20,
            old.wrapping_add(1),
        ] {
            m[i] = b;
            body(&m);
        }
        m[i] = old;
    }
}

#[test]
fn the_config_corpus_replays() {
    for (path, data) in corpus("server_config") {
        eprintln!("{}", path.display());
        sweep(&data, funnel_server::fuzzing::config);
    }
}

#[test]
fn the_request_corpus_replays() {
    for (path, data) in corpus("server_request") {
        eprintln!("{}", path.display());
        // Requests are decided on a live configuration: the sweep stays on small inputs.
        if data.len() <= 200 {
            sweep(&data, funnel_server::fuzzing::request);
        } else {
            funnel_server::fuzzing::request(&data);
        }
    }
}
