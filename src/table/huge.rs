//! Transparent huge pages for a table's buckets, when its builder asks for them
//! ([`Builder::huge_pages`](crate::Builder::huge_pages); by default a fixed table of
//! [`AUTOMATIC_FROM`] bytes or more does): one `madvise(MADV_HUGEPAGE)` over the
//! buckets' memory before the table first touches it, so that Linux backs it with 2 MiB pages
//! where it can. A table of many MiB then takes one TLB entry per 2 MiB instead of per 4 KiB, and
//! a lookup's page walk mostly disappears (docs/design/table.md, names the measurement).
//! Whether the kernel took the advice is in `Stats::huge_pages`.
//!
//! The one `unsafe` block below is an FFI call to `madvise`. Elsewhere than Linux it does
//! nothing.

use super::bucket::Bucket;

/// The size from which a fixed table asks for huge pages when its builder does not say
/// (`Builder::huge_pages`): 8 MiB (about 460,000 slots), about what a CPU's second-level TLB
/// covers with 4 KiB pages (1,536 to 3,072 entries on recent x86_64 cores), so that a table
/// past it takes a page walk on most lookups of keys spread over it, which huge pages save. A
/// fixed table is touched whole when it
/// is built, so its resident memory does not change, and the kernel's work to find the pages
/// happens then, not in requests.
pub(crate) const AUTOMATIC_FROM: usize = 8 << 20;

/// Asks the kernel to back `buckets` with transparent huge pages. True when the advice was
/// taken (the kernel may still fall back to small pages when it has no huge page free, or when
/// `/sys/kernel/mm/transparent_hugepage/enabled` is `never`); false elsewhere than Linux, for an
/// allocation smaller than a page, or when the call fails. Advice only: the memory's contents
/// and validity do not change either way.
#[cfg(all(target_os = "linux", not(funnel_loom)))]
pub(crate) fn advise(buckets: &[Bucket]) -> bool {
    // SAFETY: `sysconf` takes no pointer and has no precondition.
    #[allow(unsafe_code)]
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let Ok(page) = usize::try_from(page) else {
        return false;
    };
    if page == 0 {
        return false;
    }
    let start = buckets.as_ptr() as usize;
    let end = start + std::mem::size_of_val(buckets);
    // `madvise` wants a page-aligned start: advise the whole pages inside the allocation.
    let (first, last) = (start.next_multiple_of(page), end / page * page);
    if last <= first {
        return false;
    }
    // SAFETY: `madvise` with `MADV_HUGEPAGE` is advice about how to back a range, not an access
    // to it: it reads and writes no byte of it, and never changes what the program reads there
    // (a huge page that replaces small ones holds the same bytes). The range `first..last` is
    // page-aligned, as the call requires, and lies inside the allocation `buckets` borrows for
    // the whole call; a failure is reported as a return value, which we check.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_HUGEPAGE,
        )
    };
    rc == 0
}

/// Elsewhere than Linux (and under loom) there is nothing to ask.
#[cfg(not(all(target_os = "linux", not(funnel_loom))))]
pub(crate) fn advise(_buckets: &[Bucket]) -> bool {
    false
}

#[cfg(all(test, target_os = "linux", not(funnel_loom)))]
mod tests {
    use super::super::bucket::empty_buckets;
    use super::*;

    #[test]
    fn a_table_of_many_pages_gets_the_advice_and_stays_zeroed() {
        // 2^15 buckets: 4 MiB.
        let buckets = empty_buckets(1 << 15).unwrap();
        // A kernel built without transparent huge pages has no such directory and refuses the
        // advice (EINVAL); any other takes it, whatever its `enabled` setting.
        let kernel_has_them = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        assert_eq!(
            advise(&buckets),
            kernel_has_them,
            "madvise(MADV_HUGEPAGE) answered otherwise than the kernel's support says"
        );
        let fresh = super::super::bucket::Bucket::new();
        for b in buckets.iter().step_by(997) {
            use crate::sync::Ordering::Relaxed;
            assert_eq!(b.tags.load(Relaxed), fresh.tags.load(Relaxed));
            assert_eq!(b.words[3].load(Relaxed), fresh.words[3].load(Relaxed));
        }
    }

    #[test]
    fn an_allocation_smaller_than_a_page_is_not_advised() {
        let buckets = empty_buckets(1).unwrap();
        assert!(!advise(&buckets));
    }
}
