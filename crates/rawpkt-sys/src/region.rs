//! Page-backed memory that a NIC may read and write: packet buffers and ring memory.
//!
//! Regions come from anonymous `mmap`. Packet-buffer regions ask for 2 MiB hugepages first
//! (`MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE`, as ixy.rs and xsk-rs do) because every 4 KiB page
//! costs an MTT entry on the NIC and a TLB entry on the CPU; when none are reserved the region falls
//! back to 4 KiB pages and says so once, since the engine still works, only slower.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

const HUGE_2M: usize = 2 << 20;

/// What backs a [`Region`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// 2 MiB hugepages from the reserved pool (`/proc/sys/vm/nr_hugepages`).
    Huge2M,
    /// Ordinary 4 KiB pages.
    Small4K,
}

/// An owned, zero-filled, page-aligned mapping. It never moves and lives until dropped, so raw
/// addresses into it stay valid for as long as an `Arc<Region>` is held (the MR and the model
/// hold one).
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: a Region is plain memory with no thread affinity; who may touch which bytes is decided
// by the pool and ring protocols built on it, not by the mapping.
unsafe impl Send for Region {}
// SAFETY: shared references only expose the base address and length; byte access goes through the
// owners' own synchronisation (buffer ownership, doorbells, owner bits).
unsafe impl Sync for Region {}

// SAFETY: the mapping is owned by the Region and unmapped only when it drops, so base..base+len
// stays mapped, readable and writable while the MR's Arc of it lives.
#[cfg(feature = "rdma")]
unsafe impl crate::rdma::Registrable for Region {
    fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn len(&self) -> usize {
        self.len
    }
}

static WARNED_NO_HUGEPAGES: AtomicBool = AtomicBool::new(false);

impl Region {
    /// Maps `len` bytes (rounded up to 2 MiB) on hugepages, or on 4 KiB pages with a one-time
    /// warning when no hugepage is available.
    pub fn hugepages_or_fallback(len: usize) -> std::io::Result<Region> {
        let rounded = len.max(1).div_ceil(HUGE_2M) * HUGE_2M;
        match Self::map(rounded, true) {
            Ok(r) => Ok(r),
            Err(err) => {
                if !WARNED_NO_HUGEPAGES.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "warning: no 2 MiB hugepages available ({err}); using 4 KiB pages. \
                         Reserve some with: echo 512 > /proc/sys/vm/nr_hugepages"
                    );
                }
                Self::map(rounded, false)
            }
        }
    }

    /// Maps `len` bytes (rounded up to 4 KiB) on ordinary pages: for rings and doorbell pages.
    pub fn small_pages(len: usize) -> std::io::Result<Region> {
        Self::map(len.max(1).div_ceil(4096) * 4096, false)
    }

    fn map(len: usize, huge: bool) -> std::io::Result<Region> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if huge {
            flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
        }
        // SAFETY: an anonymous private mapping at a kernel-chosen address aliases no existing
        // Rust object; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        let kind = if huge { PageKind::Huge2M } else { PageKind::Small4K };
        let region = Region { base, len, kind };
        // Fork safety: the device DMAs into this memory (packet buffers, and the model's rings),
        // so a child must not share it copy-on-write: after a fork() the parent's first write
        // would move its page while the device keeps the old one (rdma-core `ibv_fork_init` and
        // `ibv_dontfork_range` mark registered memory MADV_DONTFORK for the same reason; kernels
        // from 5.13 copy pinned pages at fork instead, and then rdma-core needs nothing). The
        // child simply does not inherit the mapping.
        // SAFETY: the range is exactly the mapping made above, owned by `region`.
        if unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(region)
    }

    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// Whether `[addr, addr + len)` lies inside this region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let base = self.base.as_ptr() as u64;
        addr >= base && len <= self.len as u64 && addr - base <= self.len as u64 - len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned, and every holder of raw pointers into
        // the region holds the Arc that is being dropped now, so nobody uses them afterwards.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_region_is_zeroed_and_bounded() {
        let r = Region::hugepages_or_fallback(10_000).unwrap();
        assert_eq!(r.len() % HUGE_2M, 0);
        let base = r.base() as u64;
        assert!(r.contains(base, r.len() as u64));
        assert!(!r.contains(base, r.len() as u64 + 1));
        assert!(!r.contains(base - 1, 1));
        assert!(!r.contains(base + r.len() as u64, 1));
    }

    /// The `VmFlags` line of the mapping that starts at `base`, from /proc/self/smaps.
    fn vm_flags(base: *mut u8) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", base as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        assert!(lines.next().is_some(), "no mapping at {start}");
        lines.find(|l| l.starts_with("VmFlags:")).unwrap().to_string()
    }

    #[test]
    fn regions_are_not_inherited_by_a_fork() {
        // `dc`: "do not copy area on fork" (proc(5)), what MADV_DONTFORK sets.
        for r in [
            Region::small_pages(3 * 4096).unwrap(),
            Region::hugepages_or_fallback(10_000).unwrap(),
        ] {
            let flags = vm_flags(r.base());
            assert!(flags.split_whitespace().any(|f| f == "dc"), "{flags}");
        }
    }

    #[test]
    #[ignore = "needs root"]
    fn hugepages_are_used_when_reserved() {
        let path = "/proc/sys/vm/nr_hugepages";
        let before = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, "8").unwrap();
        let r = Region::hugepages_or_fallback(3 << 20);
        std::fs::write(path, before.trim()).unwrap();
        let r = r.unwrap();
        assert_eq!(r.page_kind(), PageKind::Huge2M);
        assert_eq!(r.len(), 4 << 20);
    }
}
