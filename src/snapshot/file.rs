//! Writing a saved state to a file so that a crash never leaves half of one:
//! [`write_atomically`], used by [`Limiter::save_to`](crate::Limiter::save_to).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter that makes each temporary file's name unique within the process.
static TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to the file at `path` atomically: they go to a new file in the same
/// directory (readable and writable by its owner only, on Unix), which is flushed to disk and
/// then renamed over `path`, and the directory is flushed too. A crash at any moment leaves
/// either the old file or the new one, never a part of one.
///
/// Fails when `path` names no file, or the file cannot be written, flushed or renamed (the
/// temporary file is then removed, and `path` left as it was).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut temporary = name.to_owned();
    // Relaxed: only uniqueness matters.
    let n = TEMPORARY.fetch_add(1, Ordering::Relaxed);
    temporary.push(format!(".{}.{n}.tmp", std::process::id()));
    let temporary = dir.join(temporary);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&temporary).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e);
    }
    // The rename is durable once the directory is (on Unix; elsewhere a directory cannot be
    // opened as a file, and the rename is as durable as the platform makes it).
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all())?;
    Ok(())
}
