//! The redis-cell module (`CL.THROTTLE`) for tests and the comparison harness: where its library
//! is, and a private `redis-server` with it loaded.
//!
//! The module is not a Debian package: `bash .ci/redis-cell.sh` builds the vendored source
//! (`vendor/redis-cell-0.5.0.tar.gz`) into `target/redis-cell/`, where [`library`] finds it;
//! `FUNNEL_REDIS_CELL` names a library elsewhere. A test that needs the module and cannot find
//! it is skipped with a notice ([`crate::skip`]), or fails under `FUNNEL_REQUIRE_TOOLS=1`.

use std::path::{Path, PathBuf};

use crate::redis_server::{available_or_skip, RedisServer};

/// The environment variable that names the module's library, overriding the default location.
pub const ENV: &str = "FUNNEL_REDIS_CELL";

/// How to get the module, for notices.
pub const HOW: &str = "build it with: bash .ci/redis-cell.sh";

/// Where `.ci/redis-cell.sh` puts the library: `target/redis-cell/` of this repository.
pub fn default_location() -> PathBuf {
    let name = if cfg!(target_os = "macos") {
        "libredis_cell.dylib"
    } else {
        "libredis_cell.so"
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/redis-cell")
        .join(name)
}

/// The module's library: the file `FUNNEL_REDIS_CELL` names when it is set, else the default
/// location; `Err` says why there is none (for a notice).
///
/// # Errors
///
/// When the chosen file does not exist.
pub fn library() -> Result<PathBuf, String> {
    library_from(std::env::var_os(ENV))
}

/// [`library`] with `FUNNEL_REDIS_CELL`'s value given.
fn library_from(named: Option<std::ffi::OsString>) -> Result<PathBuf, String> {
    let (path, origin) = match named {
        Some(p) if !p.is_empty() => (PathBuf::from(p), format!("{ENV} names")),
        _ => (default_location(), "the default location".to_owned()),
    };
    if path.is_file() {
        Ok(path.canonicalize().unwrap_or(path))
    } else {
        Err(format!(
            "the redis-cell module is not built: {origin} {}, which is not a file ({HOW}, \
             or set {ENV}=<path to libredis_cell.so>)",
            path.display()
        ))
    }
}

/// The module's library, or `None` after skipping the running test with a notice
/// ([`crate::skip::skip`]).
///
/// # Panics
///
/// Under `FUNNEL_REQUIRE_TOOLS=1`, when the library is missing.
pub fn library_or_skip() -> Option<PathBuf> {
    match library() {
        Ok(path) => Some(path),
        Err(why) => {
            crate::skip::skip(&why);
            None
        }
    }
}

/// A private `redis-server` with the module loaded, or `None` when the test is skipped (no
/// `redis-server`, or no module); panics when both are there and the server does not start.
pub fn server() -> Option<RedisServer> {
    if !available_or_skip() {
        return None;
    }
    let module = library_or_skip()?;
    let module = module
        .to_str()
        .unwrap_or_else(|| panic!("the module's path {} is not UTF-8", module.display()));
    Some(
        RedisServer::start_with(&["--loadmodule", module])
            .unwrap_or_else(|e| panic!("redis-server with the redis-cell module: {e}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_library_that_is_missing_says_how_to_build_it() {
        let missing = std::env::temp_dir().join("no-such-dir-for-funnel/libredis_cell.so");
        let why = library_from(Some(missing.clone().into_os_string())).unwrap_err();
        assert!(why.contains(&missing.display().to_string()), "{why}");
        assert!(why.contains(ENV) && why.contains(HOW), "{why}");
    }

    #[test]
    fn a_named_file_is_taken_and_an_empty_name_means_the_default_location() {
        let file = std::env::temp_dir().join(format!("funnel-cell-{}.so", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let canonical = file.canonicalize().unwrap();
        let found = library_from(Some(file.clone().into_os_string()));
        std::fs::remove_file(&file).unwrap();
        assert_eq!(found.unwrap(), canonical);
        match library_from(Some("".into())) {
            Ok(path) => assert_eq!(path, default_location().canonicalize().unwrap()),
            Err(why) => assert!(why.contains("the default location"), "{why}"),
        }
    }
}
