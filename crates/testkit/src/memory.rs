//! The resident-memory probe: this process's resident set and its peak, from Linux's
//! `/proc/self/status`.

/// This process's resident set size (`VmRSS`) and its peak (`VmHWM`), in bytes; `None` where
/// `/proc/self/status` does not exist or lacks those fields (not Linux).
pub fn rss_bytes() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn a_large_allocation_shows_in_the_resident_set() {
        let (before, _) = super::rss_bytes().expect("Linux has /proc/self/status");
        // Written page by page and kept opaque, so the allocation is really resident.
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let (after, peak) = super::rss_bytes().expect("Linux has /proc/self/status");
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        assert!(peak >= after);
        drop(std::hint::black_box(v));
    }
}
