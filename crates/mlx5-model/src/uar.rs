//! The device's UAR pages, as the pages of a file: each SQ's doorbell page is page `index` of
//! one memfd, mapped shared, so that a second mapping of the same page (what a process gets from
//! `mmap(cmd_fd, page, uar_mmap_offset)` on hardware) reaches the same doorbell.
//!
//! On hardware a UAR page is a page of the device's BAR; mlx5_ib maps it into a process when
//! the process mmaps its uverbs fd (`cmd_fd`) at the page's offset (`mlx5_ib_mmap` ->
//! `uar_mmap`, drivers/infiniband/hw/mlx5/main.c), and libmlx5 hands that offset out as
//! `mlx5dv_qp.uar_mmap_offset` (providers/mlx5/mlx5.c `mlx5dv_get_qp`, from
//! `get_uar_mmap_offset`: the page index times the page size for regular pages). DPDK's
//! secondary processes map a TX queue's doorbell that way (drivers/net/mlx5/linux/mlx5_os.c
//! `mlx5_tx_uar_init_secondary`). The model's `cmd_fd` is this file, and the offset of page
//! `index` is `index * 4096`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// Bytes in a UAR page (`MLX5_ADAPTER_PAGE_SIZE`).
pub const UAR_PAGE: usize = 4096;

/// The file the UAR pages live in, and which pages are taken.
pub(super) struct UarSpace {
    fd: OwnedFd,
    /// `taken[i]`: page i belongs to a live queue. Freed pages are reused, as the kernel reuses
    /// UAR indices.
    taken: Mutex<Vec<bool>>,
}

impl UarSpace {
    pub(super) fn new() -> std::io::Result<Arc<UarSpace>> {
        // SAFETY: memfd_create with a NUL-terminated name; the fd returned is owned here.
        let fd = unsafe { libc::memfd_create(c"rawpkt-model-uar".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(UarSpace {
            // SAFETY: a fresh fd nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            taken: Mutex::new(Vec::new()),
        }))
    }

    /// The file: `mmap(fd, UAR_PAGE, offset)` maps the page at `offset / UAR_PAGE`.
    pub(super) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Maps a free page (zeroed: a fresh page of the file, or one whose last queue is gone and
    /// was cleared when it was freed).
    pub(super) fn take(self: &Arc<Self>) -> Result<UarPage, String> {
        let index = {
            let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
            let i = taken.iter().position(|t| !t).unwrap_or(taken.len());
            if i == taken.len() {
                taken.push(true);
                let len = (taken.len() * UAR_PAGE) as libc::off_t;
                // SAFETY: ftruncate on the owned memfd; growing it only adds zero pages.
                if unsafe { libc::ftruncate(self.fd(), len) } != 0 {
                    taken.pop();
                    return Err(format!("UAR page: {}", std::io::Error::last_os_error()));
                }
            } else {
                taken[i] = true;
            }
            i
        };
        // SAFETY: a shared mapping of one page of the owned memfd, inside its length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                UAR_PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd(),
                (index * UAR_PAGE) as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            self.release(index);
            return Err(format!("UAR page: {e}"));
        }
        Ok(UarPage {
            base: p.cast(),
            index: index as u32,
            space: self.clone(),
        })
    }

    fn release(&self, index: usize) {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = taken.get_mut(index) {
            *t = false;
        }
    }
}

/// One UAR page, mapped; the page goes back to the space (cleared) when this drops.
pub(super) struct UarPage {
    base: *mut u8,
    index: u32,
    space: Arc<UarSpace>,
}

// SAFETY: the mapping is plain shared memory; the pointer is only an address, and every access
// through it is an atomic or volatile word access made under the device's rules.
unsafe impl Send for UarPage {}
// SAFETY: as above.
unsafe impl Sync for UarPage {}

impl UarPage {
    pub(super) fn base(&self) -> *mut u8 {
        self.base
    }

    /// The page's index in the space: its mmap offset is `index * UAR_PAGE`.
    pub(super) fn index(&self) -> u32 {
        self.index
    }
}

impl Drop for UarPage {
    fn drop(&mut self) {
        // SAFETY: the whole page this value mapped; every holder of pointers into it holds the
        // queue's memory that owns this value, which is being dropped now. The page is cleared
        // first so that its next queue finds it as a fresh one.
        unsafe {
            std::ptr::write_bytes(self.base, 0, UAR_PAGE);
            libc::munmap(self.base.cast(), UAR_PAGE);
        }
        self.space.release(self.index as usize);
    }
}
