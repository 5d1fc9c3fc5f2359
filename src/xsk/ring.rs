//! The four AF_XDP rings in our own Rust: single-producer/single-consumer rings of `u64`
//! addresses (fill, completion) or `xdp_desc` (RX, TX) shared with the kernel through `mmap`.
//!
//! The protocol is that of `Documentation/networking/af_xdp.rst` and libxdp's `xsk.h`
//! (`xsk_ring_prod__reserve/submit`, `xsk_ring_cons__peek/release`): free-running 32-bit
//! producer and consumer indices; the side that writes entries publishes its index with a
//! release store after writing them, the other side reads it with an acquire load before reading
//! them. Each side caches the other's index and reloads it only when the cache says the ring is
//! full (producer) or empty (consumer), so a burst costs one shared load and one store.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::xsk::{self, RingOffset, XDP_RING_NEED_WAKEUP};

/// One mapped ring: the mapping, the two index words, the flags word and the entries.
pub(crate) struct Ring<T> {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    size: u32,
    /// Producer side: our producer index and the last consumer index seen plus `size`.
    /// Consumer side: our consumer index and the last producer index seen.
    cached_prod: u32,
    cached_cons: u32,
}

impl<T> Ring<T> {
    /// Maps the ring of `size` entries at `pgoff` with the kernel's offsets `off`.
    pub(crate) fn map(fd: &OwnedFd, off: &RingOffset, size: u32, pgoff: libc::off_t) -> std::io::Result<Ring<T>> {
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = xsk::mmap_ring(fd, map_len, pgoff)?;
        // The kernel's offsets are inside the mapping it just gave us (xsk_mmap checks the
        // length against the ring's own size).
        let at = |o: u64| map.wrapping_add(o as usize);
        Ok(Ring {
            map,
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc).cast(),
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
        })
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asked for a wake-up syscall (`xsk_ring_prod__needs_wakeup`).
    #[inline(always)]
    pub(crate) fn needs_wakeup(&self) -> bool {
        // SAFETY: flags points into our live mapping; the kernel writes it concurrently, hence
        // the atomic access.
        unsafe { (*self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 }
    }

    #[inline(always)]
    fn load_producer(&self) -> u32 {
        // SAFETY: as in needs_wakeup. Acquire: entries up to the index are visible after it.
        unsafe { (*self.producer).load(Ordering::Acquire) }
    }

    #[inline(always)]
    fn load_consumer(&self) -> u32 {
        // SAFETY: as in needs_wakeup. Acquire: the kernel is done with the slots it consumed
        // before we overwrite them.
        unsafe { (*self.consumer).load(Ordering::Acquire) }
    }

    /// Consumer side: entries ready to read, up to `max`, reloading the producer index only
    /// when the cache shows fewer than `max` (`xsk_cons_nb_avail`). Returns (first index, count).
    #[inline(always)]
    pub(crate) fn peek(&mut self, max: u32) -> (u32, u32) {
        let mut avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail < max {
            self.cached_prod = self.load_producer();
            avail = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        (self.cached_cons, avail.min(max))
    }

    /// Consumer side: hands `n` read entries back to the kernel (one release store).
    #[inline(always)]
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // SAFETY: as in needs_wakeup. Release: our reads of the entries happen before the kernel
        // may reuse the slots.
        unsafe { (*self.consumer).store(self.cached_cons, Ordering::Release) }
    }

    /// Producer side: free slots, up to `max` (`xsk_prod_nb_free`). Returns (first index, count).
    #[inline(always)]
    pub(crate) fn reserve(&mut self, max: u32) -> (u32, u32) {
        let mut free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free < max {
            self.cached_cons = self.load_consumer().wrapping_add(self.size);
            free = self.cached_cons.wrapping_sub(self.cached_prod);
        }
        (self.cached_prod, free.min(max))
    }

    /// Producer side: entries published that the kernel has not yet reported consumed (one shared
    /// load). The kernel updates its consumer index lazily, so this can count high, never low.
    #[inline(always)]
    pub(crate) fn unconsumed(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.load_consumer())
    }

    /// Producer side: publishes `n` written entries (one release store).
    #[inline(always)]
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        // SAFETY: as in needs_wakeup. Release: the entries are written before the kernel can
        // see the new index.
        unsafe { (*self.producer).store(self.cached_prod, Ordering::Release) }
    }

    /// Entry at free-running index `i`.
    #[inline(always)]
    pub(crate) fn read(&self, i: u32) -> T
    where
        T: Copy,
    {
        // SAFETY: i & mask < size, inside the mapped entries; the caller reads only entries the
        // producer index says are written (peek), so the kernel is not writing this slot.
        unsafe { std::ptr::read_volatile(self.desc.add((i & self.mask) as usize)) }
    }

    /// Writes the entry at free-running index `i`.
    #[inline(always)]
    pub(crate) fn write(&mut self, i: u32, v: T) {
        // SAFETY: i & mask < size, inside the mapped entries; the caller writes only slots that
        // reserve said are free, which the kernel does not read until submit.
        unsafe { std::ptr::write_volatile(self.desc.add((i & self.mask) as usize), v) }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: map/map_len are exactly what mmap_ring returned, and the ring is the only
        // user of the mapping.
        unsafe { xsk::munmap_ring(self.map, self.map_len) }
    }
}
