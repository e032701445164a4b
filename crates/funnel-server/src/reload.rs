//! Live reload: the configuration's file or directory is watched (`notify`); on a change it
//! is read and compiled again and swapped in whole, while requests keep flowing on the old
//! one until the swap. A configuration that fails to load is logged and counted
//! (`ratelimit_service_config_load_error`) and the one in force stays. [`apply`] is the swap
//! itself, shared with the configuration that arrives over xDS ([`crate::xds`]).
//!
//! The watch is on the directory (the file's own directory for a file), so an editor's
//! rename-over-the-file and Kubernetes' swap of a ConfigMap's `..data` symlink are both seen.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::decide::Decider;

/// Changes closer together than this are read as one.
const SETTLE: Duration = Duration::from_millis(100);

/// Loads `path` again and swaps it in; on failure the configuration in force stays.
/// `merge_domains`: a domain may be split over several files ([`Config::load`]).
pub async fn reload(decider: &Decider, path: &Path, merge_domains: bool) -> Result<(), String> {
    let loaded = Config::load(path, merge_domains).map_err(|e| e.to_string());
    apply(decider, loaded, &path.display().to_string())
        .await
        .map(|_| ())
}

/// Compiles a configuration loaded from `origin` (a path, or an xDS version) and swaps it in,
/// counting the load; on failure (`loaded` an error, or a compile error) the configuration in
/// force stays. The number of domains now in force on success.
pub async fn apply(
    decider: &Decider,
    loaded: Result<Config, String>,
    origin: &str,
) -> Result<usize, String> {
    let result = match loaded {
        Ok(config) => decider
            .registry()
            .compile(&config)
            .await
            .map(|rules| (rules, config.domains.len()))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match result {
        Ok((rules, domains)) => {
            decider.set_rules(rules);
            decider
                .stats()
                .config_load_success
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(origin, domains, "configuration loaded");
            Ok(domains)
        }
        Err(e) => {
            decider
                .stats()
                .config_load_error
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(origin, error = %e, "configuration rejected; the previous one stays in force");
            Err(e)
        }
    }
}

/// Watches `path` and reloads on every change, until the returned watcher is dropped.
pub fn watch(
    decider: Arc<Decider>,
    path: PathBuf,
    merge_domains: bool,
) -> Result<notify::RecommendedWatcher, String> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let is_dir = path.is_dir();
    let file_name = path.file_name().map(|n| n.to_os_string());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event {
            let relevant = e.paths.iter().any(|p| {
                let Some(name) = p.file_name() else {
                    return false;
                };
                let n = name.to_string_lossy();
                // `..data` and its timestamped targets: a Kubernetes ConfigMap's swap.
                let swapped = n.starts_with("..");
                if is_dir {
                    swapped || n.ends_with(".yaml") || n.ends_with(".yml")
                } else {
                    swapped || Some(name) == file_name.as_deref()
                }
            });
            if relevant && !e.kind.is_access() {
                // A full channel already holds a pending reload.
                let _ = tx.try_send(());
            }
        }
    })
    .map_err(|e| format!("cannot watch the configuration: {e}"))?;
    let dir = if path.is_dir() {
        path.clone()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    };
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            let _ = reload(&decider, &path, merge_domains).await;
        }
    });
    Ok(watcher)
}
