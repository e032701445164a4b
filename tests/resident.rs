//! A growable table reserves its largest size when it is built but makes resident only the
//! buckets in use (`Builder::max_capacity`'s memory bound): the reservation is zeroed memory
//! the kernel hands out page by page as it is first touched. Alone in its test binary, so
//! that no other test's allocations move the process's resident memory meanwhile.

#![cfg(target_os = "linux")]

use funnel::{Limiter, Quota};

/// The process's resident memory, from `/proc/self/status`, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024
}

#[test]
fn a_growable_table_is_resident_only_where_it_is_in_use() {
    let before = resident_bytes();
    let limiter = Limiter::<u64>::builder(Quota::per_hour(1).unwrap())
        .capacity(1_024)
        .max_capacity(10_000_000) // a reservation of 256 MiB
        .build()
        .unwrap();
    for key in 0..100_000u64 {
        assert!(limiter.check(&key).is_allowed());
    }
    assert!(limiter.stats().growths >= 1);
    let grown = resident_bytes().saturating_sub(before);
    let in_use = limiter.memory_bytes() as u64;
    assert!(
        grown < 2 * in_use + (8 << 20),
        "resident memory grew by {grown} B for a table using {in_use} B of its reservation"
    );
}
