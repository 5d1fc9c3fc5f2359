//! Packet buffers: a per-core pool of fixed-size buffers carved from one [`Region`], and the
//! [`Burst`] that carries them between queues and the application.
//!
//! Buffers are named by a `u32` index, as in VPP: the NIC sees `base + index * buf_size +
//! offset`, the rings remember indices, and nothing is reference-counted per packet. Every index is
//! at any time in exactly one place: the pool's free stack, a queue's ring, or one `Burst`. That
//! invariant is what makes byte access safe, and what lets tests assert that a pool is full again
//! after its queues and bursts are dropped.
#![allow(unsafe_code)]
// The descriptor writers and bulk moves of the Direct Verbs burst paths: unused in a build
// without them (AF_XDP only).
#![cfg_attr(not(any(feature = "model", feature = "mlx5")), allow(dead_code))]

use std::cell::{Cell, UnsafeCell};
use std::rc::Rc;
use std::sync::Arc;

use super::region::{PageKind, Region};
use crate::Error;

/// Sizes of a pool. The defaults hold one 1518-byte frame per buffer after a 128-byte headroom
/// (DPDK's `RTE_PKTMBUF_HEADROOM`), and 2048-byte buffers divide a 2 MiB page exactly.
///
/// ```
/// use rawpkt::{Pool, PoolConfig};
/// let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
/// assert_eq!(pool.capacity(), 4096);
/// assert_eq!(pool.data_room(), 2048 - 128);
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Buffers in the pool: at least one; what every queue over the pool keeps posted or in
    /// flight, and every burst holds, comes out of it ([`Port::buffers_pinned`](crate::Port::buffers_pinned)
    /// says how many a queue pair pins).
    pub buffers: u32,
    /// Bytes per buffer: a power of two from 256 to 65536 (a buffer never straddles a page).
    pub buf_size: u32,
    /// Bytes kept free in front of each received frame, for headers a loop may prepend; at
    /// least 64 bytes of the buffer stay for the frame, and at most 65535 (frame lengths are
    /// 16-bit, like the NIC's byte counts per buffer).
    pub headroom: u16,
}

setters!(PoolConfig {
    buffers: u32,
    buf_size: u32,
    headroom: u16,
});

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            buffers: 8192,
            buf_size: 2048,
            headroom: 128,
        }
    }
}

/// Free buffer indices; the top is at `len`.
struct FreeStack {
    idx: Box<[u32]>,
    len: usize,
}

/// A per-core pool. It is shared by that core's queues and bursts through `Rc`, so it is neither
/// `Send` nor `Sync`: each pinned loop builds its own.
pub struct Pool {
    region: Arc<Region>,
    buf_size: u32,
    headroom: u16,
    count: u32,
    /// Touched only inside [`Pool::with_free`].
    free: UnsafeCell<FreeStack>,
    alloc_failures: Cell<u64>,
    /// Per buffer, where its segment lies and which buffer follows it, for buffers of chained
    /// packets ([`flags::CHAINED`]); meaningless for any other buffer. Per-buffer metadata as
    /// DPDK keeps in each mbuf (`rte_mbuf::next`, `data_len`, `data_off`), so that a chained
    /// packet moves between bursts and rings as its head index alone. `Cell`: the pool is !Sync
    /// and a link is only read or written by the owner of its buffer.
    links: Box<[Cell<SegLink>]>,
}

/// One segment of a chained packet: its bytes are `len` bytes at `off` of its buffer, and the
/// next segment is in buffer `next` ([`SegLink::END`] after the last).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegLink {
    pub(crate) next: u32,
    pub(crate) len: u16,
    pub(crate) off: u16,
}

impl SegLink {
    pub(crate) const END: u32 = u32::MAX;
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("buffers", &self.count)
            .field("free", &self.free_count())
            .field("buf_size", &self.buf_size)
            .finish()
    }
}

impl Pool {
    /// A pool of `cfg.buffers` buffers of `cfg.buf_size` bytes in one memory region: 2 MiB
    /// hugepages where the system has them free, else 4 KiB pages (said once through the `log`
    /// crate, and in [`Pool::page_kind`]). A config outside the limits [`PoolConfig`]'s fields
    /// give is an [`ErrorKind::Config`](crate::ErrorKind::Config) error; memory the system will
    /// not map, an [`ErrorKind::Memory`](crate::ErrorKind::Memory) one.
    ///
    /// ```
    /// use rawpkt::{ErrorKind, Pool, PoolConfig};
    /// let e = Pool::new(PoolConfig::default().buf_size(1000)).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Config);
    /// ```
    pub fn new(cfg: PoolConfig) -> Result<Rc<Pool>, Error> {
        if cfg.buffers == 0 {
            return Err(Error::config("a pool needs at least one buffer"));
        }
        if !(256..=65536).contains(&cfg.buf_size) || !cfg.buf_size.is_power_of_two() {
            return Err(Error::config(format!(
                "buffer size {} must be a power of two from 256 to 65536",
                cfg.buf_size
            )));
        }
        if cfg.buf_size - u32::from(cfg.headroom) > u32::from(u16::MAX) {
            // Packet lengths are 16-bit, like the NIC's byte counts per buffer.
            return Err(Error::config(format!(
                "a {}-byte buffer with {} bytes of headroom holds more than 65535 bytes of frame",
                cfg.buf_size, cfg.headroom
            )));
        }
        if u32::from(cfg.headroom) + 64 > cfg.buf_size {
            return Err(Error::config(format!(
                "headroom {} leaves less than 64 bytes of a {}-byte buffer",
                cfg.headroom, cfg.buf_size
            )));
        }
        let bytes = u64::from(cfg.buffers) * u64::from(cfg.buf_size);
        let bytes = usize::try_from(bytes).map_err(|_| Error::config("pool too large"))?;
        let region = Region::hugepages_or_fallback(bytes).map_err(|e| Error::memory(e.to_string()).caused_by(e))?;
        // Popped from the end: the lowest indices go out first, which keeps a small working set
        // of buffers cache-hot when the traffic is light.
        let free = FreeStack {
            idx: (0..cfg.buffers).rev().collect(),
            len: cfg.buffers as usize,
        };
        Ok(Rc::new(Pool {
            region: Arc::new(region),
            buf_size: cfg.buf_size,
            headroom: cfg.headroom,
            count: cfg.buffers,
            free: UnsafeCell::new(free),
            alloc_failures: Cell::new(0),
            links: (0..cfg.buffers).map(|_| Cell::new(SegLink::default())).collect(),
        }))
    }

    /// Buffers in the pool ([`PoolConfig::buffers`]).
    pub fn capacity(&self) -> u32 {
        self.count
    }

    /// Buffers free now: [`Pool::capacity`] less what queues keep posted or in flight and
    /// bursts hold. Every buffer comes back when its queues and bursts are dropped.
    ///
    /// ```
    /// use rawpkt::{Burst, Pool, PoolConfig};
    /// let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    /// let mut b = Burst::new(&pool, 8);
    /// assert_eq!(b.alloc(8, 60), 8);
    /// assert_eq!(pool.free_count(), 56);
    /// drop(b);
    /// assert_eq!(pool.free_count(), 64);
    /// ```
    pub fn free_count(&self) -> u32 {
        self.with_free(|f| f.len as u32)
    }

    /// Bytes per buffer ([`PoolConfig::buf_size`]).
    pub fn buf_size(&self) -> u32 {
        self.buf_size
    }

    /// The free stack, for the duration of `f`. A `RefCell` would test and flip a flag on every
    /// bulk operation of every burst; this needs neither, because the pool is not `Sync` and no
    /// `f` in this module calls anything that could reach the pool again (they copy indices
    /// between slices and the stack, nothing else). A `RefCell` here adds instructions to every
    /// `tx_burst` and `rx_burst` (measured with `scripts/callgrind.sh`).
    #[inline(always)]
    fn with_free<R>(&self, f: impl FnOnce(&mut FreeStack) -> R) -> R {
        // SAFETY: `Pool` is !Sync, so only this thread is here, and no closure passed in this
        // module calls back into the pool: this is the only reference to the stack meanwhile.
        f(unsafe { &mut *self.free.get() })
    }

    /// Bytes kept in front of each received frame ([`PoolConfig::headroom`]).
    pub fn headroom(&self) -> u16 {
        self.headroom
    }

    /// Bytes available for a frame in one buffer.
    pub fn data_room(&self) -> u32 {
        self.buf_size - u32::from(self.headroom)
    }

    /// Whether the pool's memory is on 2 MiB hugepages or 4 KiB pages (no hugepages were free:
    /// the device then walks more page-table entries, and `log` says so once).
    pub fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }

    /// Times an allocation found the pool empty (exhaustion is counted, never fatal).
    pub fn alloc_failures(&self) -> u64 {
        self.alloc_failures.get()
    }

    /// The memory a NIC must register (one MR over the whole pool, as VPP does).
    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// The pool's geometry for a hot loop: copied into registers once per burst, so that stores
    /// into ring memory (which the compiler must assume may alias anything) cause no reloads.
    #[inline(always)]
    pub(crate) fn geometry(&self) -> BufGeometry<'_> {
        BufGeometry {
            base: self.region.base(),
            size: u64::from(self.buf_size),
            _pool: std::marker::PhantomData,
        }
    }

    /// Takes up to `out.len()` buffers; returns how many. Counts a failure when it gives fewer.
    #[inline]
    pub(crate) fn alloc_bulk(&self, out: &mut [u32]) -> usize {
        let n = self.with_free(|free| {
            let n = out.len().min(free.len);
            let from = free.len - n;
            out[..n].copy_from_slice(&free.idx[from..free.len]);
            free.len = from;
            n
        });
        if n < out.len() {
            self.alloc_failures.set(self.alloc_failures.get() + 1);
        }
        n
    }

    /// Fills `a` then `b` (a ring's two halves) with buffers as far as the pool allows; returns
    /// how many it gave. Counts a failure when it gives fewer than asked.
    #[inline]
    pub(crate) fn alloc_bulk2(&self, a: &mut [u32], b: &mut [u32]) -> usize {
        let want = a.len() + b.len();
        let n = self.with_free(|free| {
            let n = want.min(free.len);
            let top = free.len;
            let na = n.min(a.len());
            a[..na].copy_from_slice(&free.idx[top - na..top]);
            b[..n - na].copy_from_slice(&free.idx[top - n..top - na]);
            free.len = top - n;
            n
        });
        if n < want {
            self.alloc_failures.set(self.alloc_failures.get() + 1);
        }
        n
    }

    /// Returns buffers to the pool: the concatenation of `a` and `b` (a ring's two halves).
    #[inline]
    pub(crate) fn free_bulk2(&self, a: &[u32], b: &[u32]) {
        self.with_free(|free| {
            let at = free.len;
            // A slice overrun here means a buffer was freed twice: a bug, not a data condition.
            free.idx[at..at + a.len()].copy_from_slice(a);
            free.idx[at + a.len()..at + a.len() + b.len()].copy_from_slice(b);
            free.len = at + a.len() + b.len();
        })
    }

    #[inline]
    pub(crate) fn free_bulk(&self, idx: &[u32]) {
        self.with_free(|free| {
            let at = free.len;
            // As in `free_bulk2`: an overrun is a double free.
            free.idx[at..at + idx.len()].copy_from_slice(idx);
            free.len = at + idx.len();
        })
    }

    #[inline]
    pub(crate) fn free_one(&self, idx: u32) {
        self.free_bulk(&[idx]);
    }

    /// The address of `len` bytes at `off` in buffer `buf`, checked to lie inside that buffer:
    /// the one bound every slice of packet bytes ([`Burst::data`], [`Burst::data_mut`],
    /// [`Burst::segments`]) rests on, whichever backend wrote the descriptor. Two compares; a
    /// descriptor outside its buffer is a backend's bug, and panics here rather than reach
    /// memory it does not own.
    #[inline]
    fn frame_ptr(&self, buf: u32, off: u16, len: u16) -> *mut u8 {
        assert!(
            buf < self.count && u32::from(off) + u32::from(len) <= self.buf_size,
            "packet descriptor outside its buffer (buffer {buf}, bytes {off}..+{len})"
        );
        self.buf_ptr(buf, u32::from(off))
    }

    /// Address of byte `off` of buffer `idx` (no access is made).
    #[inline(always)]
    pub(crate) fn buf_ptr(&self, idx: u32, off: u32) -> *mut u8 {
        debug_assert!(idx < self.count && off <= self.buf_size);
        self.region
            .base()
            .wrapping_add(idx as usize * self.buf_size as usize + off as usize)
    }
}

/// Chained packets: the links between their buffers.
impl Pool {
    #[inline]
    pub(crate) fn link(&self, buf: u32) -> SegLink {
        self.links[buf as usize].get()
    }

    #[inline]
    pub(crate) fn set_link(&self, buf: u32, link: SegLink) {
        self.links[buf as usize].set(link)
    }

    /// The segments of `p` as (buffer, offset, length), head first: one for a plain packet.
    pub(crate) fn segments_of(&self, p: &Packet) -> Segments<'_> {
        if p.flags & flags::CHAINED == 0 {
            Segments {
                pool: self,
                next: SegLink::END,
                first: Some((p.buf, p.off, p.len)),
            }
        } else {
            let l = self.link(p.buf);
            Segments {
                pool: self,
                next: l.next,
                first: Some((p.buf, l.off, l.len)),
            }
        }
    }

    /// Returns every buffer of `p` (each segment of a chained one) to the pool.
    pub(crate) fn free_packet(&self, p: &Packet) {
        for (buf, _, _) in self.segments_of(p) {
            self.free_one(buf);
        }
    }
}

/// See [`Pool::segments_of`].
pub(crate) struct Segments<'a> {
    pool: &'a Pool,
    first: Option<(u32, u16, u16)>,
    next: u32,
}

impl Iterator for Segments<'_> {
    type Item = (u32, u16, u16);
    fn next(&mut self) -> Option<(u32, u16, u16)> {
        if let Some(f) = self.first.take() {
            return Some(f);
        }
        if self.next == SegLink::END {
            return None;
        }
        let buf = self.next;
        let l = self.pool.link(buf);
        self.next = l.next;
        Some((buf, l.off, l.len))
    }
}

/// See [`Pool::geometry`].
#[derive(Clone, Copy)]
pub(crate) struct BufGeometry<'a> {
    base: *mut u8,
    /// Buffer size. A multiply (one `imul` from any register) rather than a shift by a variable
    /// count, which x86 takes only in `cl` and costs a copy per packet.
    size: u64,
    _pool: std::marker::PhantomData<&'a Pool>,
}

impl BufGeometry<'_> {
    /// [`BufGeometry::buf_addr`] as `base + idx * size`: the two terms, for code that computes
    /// many addresses at once (the AVX2 receive refill) with the same formula.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn base_and_size(&self, off: u32) -> (u64, u64) {
        (self.base as u64 + u64::from(off), self.size)
    }

    /// Bus address of packet `p`'s first byte.
    #[inline(always)]
    pub(crate) fn addr(&self, p: &Packet) -> u64 {
        self.base as u64 + u64::from(p.buf) * self.size + u64::from(p.off)
    }

    /// Bus address of byte `off` of buffer `idx`.
    #[inline(always)]
    pub(crate) fn buf_addr(&self, idx: u32, off: u32) -> u64 {
        self.base as u64 + u64::from(idx) * self.size + u64::from(off)
    }

    /// Packet `p`'s bus address and its first 18 bytes (the L2 header a send WQE carries inline)
    /// as a 2-byte and two 8-byte words in memory order. `p` must be a descriptor of a burst the
    /// caller holds (descriptors are made only by this crate, inside their buffer) and at least
    /// 18 bytes long.
    #[inline(always)]
    pub(crate) fn l2_header(&self, p: &Packet) -> (u64, u16, u64, u64) {
        debug_assert!(p.len >= 18);
        let addr = self.addr(p);
        let at = addr as *const u8;
        // SAFETY: the bytes lie in the packet's buffer, mapped while `'a` lives and owned by the
        // caller's burst (no concurrent writer); len >= 18; unaligned reads are allowed.
        unsafe {
            (
                addr,
                std::ptr::read_unaligned(at.cast::<u16>()),
                std::ptr::read_unaligned(at.add(2).cast::<u64>()),
                std::ptr::read_unaligned(at.add(10).cast::<u64>()),
            )
        }
    }
}

/// Bits of [`Packet::flags`]: what a backend reports per received packet (the low bits), and
/// what a sender asks of the device per packet ([`Burst::set_flags`](crate::Burst::set_flags),
/// the `TX_` bits). Receive bits are set where the device says so (mlx5's CQE; the model's);
/// AF_XDP ports report none but `CHAINED`.
///
/// ```
/// use rawpkt::flags;
/// let f = flags::IPV4 | flags::UDP | flags::L3_CSUM_OK | flags::L4_CSUM_OK;
/// assert!(f & flags::UDP != 0 && f & flags::TCP == 0);
/// ```
pub mod flags {
    /// The IPv4 header checksum was checked and is right.
    pub const L3_CSUM_OK: u32 = 1 << 0;
    /// The TCP or UDP checksum was checked and is right.
    pub const L4_CSUM_OK: u32 = 1 << 1;
    /// An IPv4 frame.
    pub const IPV4: u32 = 1 << 2;
    /// An IPv6 frame.
    pub const IPV6: u32 = 1 << 3;
    /// A TCP segment.
    pub const TCP: u32 = 1 << 4;
    /// A UDP datagram.
    pub const UDP: u32 = 1 << 5;
    /// An IP fragment.
    pub const IP_FRAG: u32 = 1 << 6;
    /// An IPv4 header with options.
    pub const IP_OPTIONS: u32 = 1 << 7;
    /// The device stripped an 802.1Q tag ([`Packet::vlan_tci`](crate::Packet::vlan_tci) holds
    /// it); asked with [`QueueConfig::rx_vlan_strip`](crate::QueueConfig::rx_vlan_strip).
    pub const VLAN_STRIPPED: u32 = 1 << 8;
    /// [`Packet::rss_hash`](crate::Packet::rss_hash) holds the device's Toeplitz hash.
    pub const RSS_HASH: u32 = 1 << 9;
    /// [`Packet::timestamp`](crate::Packet::timestamp) holds the receive time; asked with
    /// [`QueueConfig::rx_timestamps`](crate::QueueConfig::rx_timestamps).
    pub const TIMESTAMP: u32 = 1 << 10;
    /// The packet spans several buffers ([`Burst::segments`](crate::Burst::segments)); set
    /// only by the burst and the backends, never by [`Burst::set_flags`](crate::Burst::set_flags).
    pub const CHAINED: u32 = 1 << 11;
    /// Transmit request: the IPv4 header checksum is filled in on the way out (by the NIC on
    /// mlx5 ports, in software by xdp ports, which have no offload in copy mode).
    pub const TX_L3_CSUM: u32 = 1 << 16;
    /// Transmit request: the TCP/UDP checksum is filled in on the way out (as for TX_L3_CSUM).
    pub const TX_L4_CSUM: u32 = 1 << 17;
    /// Transmit request: an 802.1Q tag with [`Packet::vlan_tci`](crate::Packet::vlan_tci) is
    /// inserted after the MAC addresses on the way out (by the NIC: the Ethernet segment's VLAN
    /// insertion; see [`Burst::set_vlan`](crate::Burst::set_vlan)).
    pub const TX_VLAN: u32 = 1 << 18;
}

/// One packet descriptor in a burst: which buffer, where its bytes are, and what the NIC said.
/// `repr(C)` so that `len` and `off` are one aligned 32-bit word (`Packet::set_len_off`).
///
/// ```
/// use rawpkt::{flags, Burst, Pool, PoolConfig};
/// let pool = Pool::new(PoolConfig::default().buffers(8)).unwrap();
/// let mut b = Burst::new(&pool, 8);
/// b.push_copy(&[0u8; 60]);
/// let p = b.packet(0);
/// assert_eq!((p.len(), p.is_chained(), p.flags() & flags::TIMESTAMP), (60, false, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Packet {
    pub(crate) buf: u32,
    pub(crate) len: u16,
    pub(crate) off: u16,
    pub(crate) rss_hash: u32,
    pub(crate) flags: u32,
    pub(crate) timestamp: u64,
    /// The 802.1Q TCI: stripped by the NIC (`flags::VLAN_STRIPPED`) or to insert
    /// (`flags::TX_VLAN`).
    pub(crate) vlan_tci: u16,
    /// A chained packet's whole length (`flags::CHAINED`; `len` is then 0, which every send
    /// fast path's length test already sends to its slow path, so a plain packet's path costs
    /// nothing more).
    pub(crate) chain_len: u32,
}

const _: () = assert!(
    std::mem::offset_of!(Packet, len) == 4
        && std::mem::offset_of!(Packet, off) == 6
        && std::mem::align_of::<Packet>() >= 4
);

impl Packet {
    /// `len | off << 16` in the host's order of the two fields, for [`Packet::set_len_off`].
    #[inline(always)]
    pub(crate) const fn len_off(len: u32, off: u16) -> u32 {
        if cfg!(target_endian = "little") {
            len | (off as u32) << 16
        } else {
            len << 16 | off as u32
        }
    }

    /// Sets `len` and `off` with one store: a value from [`Packet::len_off`] (`len` < 2^16).
    /// The receive loop builds that word once per CQE; storing the two fields separately costs
    /// `rx_burst` instructions on every packet (measured with `scripts/callgrind.sh`).
    #[inline(always)]
    pub(crate) fn set_len_off(&mut self, len_off: u32) {
        // SAFETY: `len` and `off` are adjacent u16 at offsets 4 and 6 of a repr(C) struct
        // aligned to at least 4 (asserted above): together one aligned u32 inside `self`.
        unsafe { std::ptr::addr_of_mut!(self.len).cast::<u32>().write(len_off) }
    }

    /// Sets `len`, `off` and `rss_hash` with one store, from `hash_len` (`hash << 32 | len`, as
    /// the compressed receive path loads an 8-byte mini-CQE:
    /// [`MiniCqe::hash_len`](crate::dv::prm::MiniCqe::hash_len)) and `off_bits`
    /// ([`Packet::len_off`] with a `len` of 0). A `len` of 2^16 or more spills into `off`: the
    /// caller stores it only for a packet it then drops (one longer than its buffer). On a
    /// little-endian host the word stored is `hash_len | off_bits`: one OR per packet.
    #[inline(always)]
    pub(crate) fn set_len_off_hash(&mut self, hash_len: u64, off_bits: u32) {
        const _: () = assert!(std::mem::offset_of!(Packet, rss_hash) == 8);
        let w = if cfg!(target_endian = "little") {
            hash_len | u64::from(off_bits)
        } else {
            u64::from((hash_len as u32) << 16 | off_bits) << 32 | hash_len >> 32
        };
        // SAFETY: `len`/`off` (offsets 4 and 6) and `rss_hash` (offset 8) are adjacent fields of
        // a repr(C) struct (asserted): 8 bytes inside `self`, 4-byte aligned, hence unaligned.
        unsafe { std::ptr::addr_of_mut!(self.len).cast::<u64>().write_unaligned(w) }
    }

    /// Sets the whole descriptor from its four words in memory order: `buf` and `len`/`off` as
    /// one (see [`Packet::len_off`]), `rss_hash` and `flags` ([`Packet::hash_flags`]),
    /// `timestamp`, and `vlan_tci`/`chain_len`.
    #[inline(always)]
    pub(crate) fn set_words(&mut self, w: [u64; 4]) {
        const _: () = assert!(
            std::mem::size_of::<Packet>() == 32
                && std::mem::align_of::<Packet>() == 8
                && std::mem::offset_of!(Packet, timestamp) == 16
                && std::mem::offset_of!(Packet, vlan_tci) == 24
                && std::mem::offset_of!(Packet, chain_len) == 28
        );
        // SAFETY: the 32 bytes of an 8-aligned repr(C) struct of integers (asserted), 2 of them
        // padding: any bytes make valid fields.
        unsafe { (self as *mut Packet).cast::<[u64; 4]>().write(w) }
    }

    /// `rss_hash` and `flags` as one word, for [`Packet::set_hash_flags`].
    #[inline(always)]
    pub(crate) const fn hash_flags(hash: u32, flags: u32) -> u64 {
        if cfg!(target_endian = "little") {
            (flags as u64) << 32 | hash as u64
        } else {
            (hash as u64) << 32 | flags as u64
        }
    }

    /// Sets `rss_hash` and `flags` with one store, from [`Packet::hash_flags`]: a compressed
    /// session gives every packet the title's, and one store less per packet is one instruction
    /// less (as [`Packet::set_len_off`]).
    #[inline(always)]
    pub(crate) fn set_hash_flags(&mut self, v: u64) {
        const _: () = assert!(
            std::mem::offset_of!(Packet, flags) == std::mem::offset_of!(Packet, rss_hash) + 4
                && std::mem::offset_of!(Packet, rss_hash) % 4 == 0
        );
        // SAFETY: `rss_hash` and `flags` are adjacent u32 of a repr(C) struct (asserted): 8
        // bytes inside `self`, 4-byte aligned, hence written unaligned.
        unsafe { std::ptr::addr_of_mut!(self.rss_hash).cast::<u64>().write_unaligned(v) }
    }

    /// Sets the descriptor's first 16 bytes, `buf`, `len`, `off`, `rss_hash` and `flags` in that
    /// order (`buf | len_off << 32`, then [`Packet::hash_flags`], little-endian), with one vector
    /// store: the AVX2 receive paths build them four packets at a time. As with
    /// [`Packet::set_len_off_hash`], a `len` of 2^16 or more spills into `off`, and a `len` past
    /// the buffer's data room is stored only for a packet the caller then drops.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn set_head(&mut self, v: std::arch::x86_64::__m128i) {
        const _: () = assert!(
            std::mem::offset_of!(Packet, buf) == 0
                && std::mem::offset_of!(Packet, rss_hash) == 8
                && std::mem::offset_of!(Packet, flags) == 12
                && std::mem::offset_of!(Packet, timestamp) == 16
        );
        // Bytes 0..16 of this repr(C) struct are `buf`, `len`, `off`, `rss_hash`, `flags` (asserted
        // here and, `len` at 4 and `off` at 6, after the struct): integers, no padding between.
        // SAFETY: 16 bytes inside `self`, written unaligned; any bytes make valid fields.
        unsafe { std::arch::x86_64::_mm_storeu_si128((self as *mut Packet).cast(), v) }
    }

    /// The frame's length (all segments of a chained packet).
    pub fn len(&self) -> usize {
        if self.flags & flags::CHAINED != 0 {
            self.chain_len as usize
        } else {
            self.len as usize
        }
    }
    /// A zero-length frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The frame spans several buffers ([`Burst::segments`]).
    pub fn is_chained(&self) -> bool {
        self.flags & flags::CHAINED != 0
    }
    /// Chained, or asking for a VLAN tag: what a send path's per-packet tests must find.
    pub(crate) fn is_special(&self) -> bool {
        self.flags & (flags::CHAINED | flags::TX_VLAN) != 0
    }
    /// The 802.1Q tag control information: the tag the NIC stripped (valid when
    /// `flags & VLAN_STRIPPED`) or the one to insert (`flags & TX_VLAN`).
    pub fn vlan_tci(&self) -> u16 {
        self.vlan_tci
    }
    /// RSS hash computed by the NIC (valid when `flags & RSS_HASH`).
    pub fn rss_hash(&self) -> u32 {
        self.rss_hash
    }
    /// See [`flags`].
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// NIC timestamp in nanoseconds (valid when `flags & TIMESTAMP`): the device's own clock,
    /// one time base per device (every port and queue of it), which
    /// [`Port::device_clock_ns`](crate::Port::device_clock_ns) reads now; not wall-clock time.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
    /// The index of the packet's (first) buffer in its pool: what tracing or a zero-copy
    /// forwarder's bookkeeping may key on.
    pub fn buffer_index(&self) -> u32 {
        self.buf
    }
}

/// A batch of packets that owns its buffers. Received packets land here, packets to send are
/// taken from its front, and whatever it still holds goes back to the pool when it is cleared or
/// dropped: ownership per batch, not per packet, so the hot path touches no reference count.
pub struct Burst {
    pool: Rc<Pool>,
    pkts: Box<[Packet]>,
    len: usize,
    scratch: Box<[u32]>,
    /// How many of the packets are special: chained, or asking for a VLAN tag
    /// ([`Packet::is_special`]). While 0 (the usual case) freeing and moving descriptors never
    /// looks at chains, and a send path may skip its per-packet tests for them.
    special: usize,
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("len", &self.len)
            .field("capacity", &self.pkts.len())
            .finish()
    }
}

impl Burst {
    /// An empty burst of up to `capacity` packets (at least 1) over `pool`: bursts of 32 to 64
    /// are the usual size, as VPP's frames and DPDK's bursts are.
    ///
    /// ```
    /// use rawpkt::{Burst, Pool, PoolConfig};
    /// let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    /// let mut b = Burst::new(&pool, 32);
    /// assert!(b.push_copy(&[0xab; 60]));
    /// assert_eq!((b.len(), b.room(), b.capacity()), (1, 31, 32));
    /// assert_eq!(b.data(0), &[0xab; 60][..]);
    /// ```
    pub fn new(pool: &Rc<Pool>, capacity: usize) -> Burst {
        let capacity = capacity.max(1);
        Burst {
            pool: pool.clone(),
            pkts: vec![Packet::default(); capacity].into_boxed_slice(),
            len: 0,
            scratch: vec![0; capacity].into_boxed_slice(),
            special: 0,
        }
    }

    /// The pool the burst's buffers come from and go back to.
    pub fn pool(&self) -> &Rc<Pool> {
        &self.pool
    }
    /// Packets in the burst.
    pub fn len(&self) -> usize {
        self.len
    }
    /// No packet in the burst.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Packets the burst holds at most.
    pub fn capacity(&self) -> usize {
        self.pkts.len()
    }
    /// Packets it may still take: what an `rx_burst` fills at most.
    pub fn room(&self) -> usize {
        self.pkts.len() - self.len
    }
    /// The packets, front first. Unchecked slicing: a checked `&self.pkts[..self.len]` adds
    /// instructions to every `tx_burst` (measured with `scripts/callgrind.sh`).
    pub fn packets(&self) -> &[Packet] {
        // SAFETY: `len <= pkts.len()` always: `alloc` adds at most `room()`, `commit` asserts
        // it, `take_from` checks `room()`, and the rest only lower `len`.
        unsafe { self.pkts.get_unchecked(..self.len) }
    }
    /// Packet `i`'s descriptor (panics past [`Burst::len`]).
    pub fn packet(&self, i: usize) -> &Packet {
        &self.packets()[i]
    }

    /// Packet `i`'s bytes; for a chained packet its first segment only (see
    /// [`Burst::segments`], [`Burst::copy_frame`]).
    pub fn data(&self, i: usize) -> &[u8] {
        let p = self.first_segment(i);
        let at = self.pool.frame_ptr(p.buf, p.off, p.len);
        // SAFETY: `frame_ptr` checked the bytes lie inside buffer `buf` of the pool's mapping; the
        // burst owns buf, so no device or burst writes it, and `&self` excludes `data_mut`.
        unsafe { std::slice::from_raw_parts(at, p.len as usize) }
    }

    /// As [`Burst::data`], writable.
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        let p = self.first_segment(i);
        let at = self.pool.frame_ptr(p.buf, p.off, p.len);
        // SAFETY: in bounds (checked) and owned as in `data`; `&mut self` makes this the only
        // reference.
        unsafe { std::slice::from_raw_parts_mut(at, p.len as usize) }
    }

    /// Changes the length of packet `i`, up to the end of its buffer.
    pub fn set_len(&mut self, i: usize, len: usize) -> Result<(), Error> {
        if i >= self.len {
            return Err(Error::config(format!("no packet {i} in a burst of {}", self.len)));
        }
        if self.pkts[i].is_chained() {
            return Err(Error::config(format!(
                "packet {i} is chained over several buffers; its length is fixed"
            )));
        }
        let room = self.pool.buf_size as usize - self.pkts[i].off as usize;
        if len > room {
            return Err(Error::config(format!(
                "length {len} does not fit a buffer of {room} bytes"
            )));
        }
        self.pkts[i].len = len as u16;
        Ok(())
    }

    /// Sets the transmit offload requests ([`flags::TX_L3_CSUM`], [`flags::TX_L4_CSUM`],
    /// [`flags::TX_VLAN`]); whether the packet is chained stays as it is.
    pub fn set_flags(&mut self, i: usize, flags: u32) {
        let p = &mut self.pkts[..self.len][i];
        let was = p.is_special();
        p.flags = flags & !flags::CHAINED | p.flags & flags::CHAINED;
        self.special = self.special + usize::from(p.is_special()) - usize::from(was);
    }

    /// Asks for an 802.1Q tag with `tci` to be inserted into packet `i` on the way out, after
    /// its MAC addresses ([`flags::TX_VLAN`]); `None` takes the request back.
    pub fn set_vlan(&mut self, i: usize, tci: Option<u16>) {
        let p = &mut self.pkts[..self.len][i];
        let was = p.is_special();
        match tci {
            Some(t) => {
                p.flags |= flags::TX_VLAN;
                p.vlan_tci = t;
            }
            None => p.flags &= !flags::TX_VLAN,
        }
        self.special = self.special + usize::from(p.is_special()) - usize::from(was);
    }

    /// Whether any packet is chained or asks for a VLAN tag ([`Packet::is_special`]).
    #[inline(always)]
    pub(crate) fn has_special(&self) -> bool {
        self.special != 0
    }

    /// Appends up to `n` fresh buffers of `len` bytes (contents left as they were); returns how
    /// many it got, fewer when the pool runs dry.
    pub fn alloc(&mut self, n: usize, len: usize) -> usize {
        let len = len.min(self.pool.data_room() as usize) as u16;
        let want = n.min(self.room());
        let got = self.pool.alloc_bulk(&mut self.scratch[..want]);
        let headroom = self.pool.headroom;
        for (slot, &buf) in self.pkts[self.len..self.len + got].iter_mut().zip(&self.scratch[..got]) {
            *slot = Packet {
                buf,
                len,
                off: headroom,
                ..Packet::default()
            };
        }
        self.len += got;
        got
    }

    /// [`Burst::alloc`], then `write(buffer_index, frame)` on each new packet in turn, with the
    /// send offloads `tx_flags` asked of each ([`flags::TX_L3_CSUM`], [`flags::TX_L4_CSUM`];
    /// other bits are left out): what a generator's send loop does per packet, without the
    /// checks [`Burst::data_mut`] makes of a descriptor it did not make itself. Returns how many
    /// packets it added, fewer when the pool runs dry.
    ///
    /// A fresh buffer holds what its last user left in it: a generator that keeps a template in
    /// each buffer of its pool (TRex, MoonGen) tells by the buffer's index what it holds and
    /// writes only the fields that change.
    ///
    /// ```
    /// use rawpkt::{Burst, Pool, PoolConfig};
    /// let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    /// let mut b = Burst::new(&pool, 8);
    /// let mut seq = 0u8;
    /// let n = b.alloc_with(8, 60, 0, |_buffer, frame| {
    ///     frame.fill(0);
    ///     frame[0] = seq;
    ///     seq += 1;
    /// });
    /// assert_eq!(n, 8);
    /// assert_eq!((b.data(7).len(), b.data(7)[0]), (60, 7));
    /// ```
    #[inline(always)]
    pub fn alloc_with(&mut self, n: usize, len: usize, tx_flags: u32, mut write: impl FnMut(u32, &mut [u8])) -> usize {
        let pool = &*self.pool;
        let len = len.min(pool.data_room() as usize);
        let (off, g) = (pool.headroom, pool.geometry());
        let tx_flags = tx_flags & (flags::TX_L3_CSUM | flags::TX_L4_CSUM);
        let want = n.min(self.room());
        let new = &mut self.pkts[self.len..self.len + want];
        // `alloc` without its copy of the indices: the descriptors straight from the stack, each
        // written as whole words (field by field, a descriptor is nine stores).
        let len_off = u64::from(Packet::len_off(len as u32, off));
        let hash_flags = Packet::hash_flags(0, tx_flags);
        let got = pool.with_free(|free| {
            let got = want.min(free.len);
            let from = free.len - got;
            for (slot, &buf) in new.iter_mut().zip(&free.idx[from..free.len]) {
                let head = if cfg!(target_endian = "little") {
                    u64::from(buf) | len_off << 32
                } else {
                    u64::from(buf) << 32 | len_off
                };
                slot.set_words([head, hash_flags, 0, 0]);
            }
            free.len = from;
            got
        });
        if got < want {
            pool.alloc_failures.set(pool.alloc_failures.get() + 1);
        }
        self.len += got;
        for p in &new[..got] {
            // A fresh buffer of this burst alone (no device or burst touches it), `len` at most
            // its data room, the slice living only for this call.
            // SAFETY: so `len` bytes from the headroom lie inside it, written by no one else.
            let frame = unsafe { std::slice::from_raw_parts_mut(g.buf_addr(p.buf, u32::from(off)) as *mut u8, len) };
            write(p.buf, frame);
        }
        got
    }

    /// Appends one packet holding a copy of `frame`; false when full, the pool is dry, or the
    /// frame does not fit a buffer.
    pub fn push_copy(&mut self, frame: &[u8]) -> bool {
        if frame.len() > self.pool.data_room() as usize || self.alloc(1, frame.len()) == 0 {
            return false;
        }
        let i = self.len - 1;
        self.data_mut(i).copy_from_slice(frame);
        true
    }

    /// Returns every buffer to the pool.
    pub fn clear(&mut self) {
        self.drop_front(self.len);
    }

    /// Returns the first `n` packets' buffers to the pool and moves the rest to the front.
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        if self.special != 0 {
            self.free_chain_tails(n);
        }
        for (s, p) in self.scratch.iter_mut().zip(&self.pkts[..n]) {
            *s = p.buf;
        }
        self.pool.free_bulk(&self.scratch[..n]);
        self.forget_front(n);
    }

    /// Removes every descriptor without freeing them: their buffers now belong to whoever took
    /// them (a TX ring).
    #[inline]
    pub(crate) fn forget_all(&mut self) {
        self.len = 0;
        self.special = 0;
    }

    /// Removes the first `n` descriptors without freeing them: their buffers now belong to
    /// whoever took them (a TX ring).
    #[inline]
    pub(crate) fn forget_front(&mut self, n: usize) {
        // Never below 0: `packets()` trusts `len`.
        let n = n.min(self.len);
        if self.special != 0 {
            self.special -= self.pkts[..n].iter().filter(|p| p.is_special()).count();
        }
        if n < self.len {
            self.pkts.copy_within(n..self.len, 0);
        }
        self.len -= n;
    }

    /// The packets from `start` on, to rewrite in place (what a backend handed up last).
    #[cfg(any(feature = "model", feature = "mlx5"))]
    pub(crate) fn packets_mut_from(&mut self, start: usize) -> &mut [Packet] {
        &mut self.pkts[start..self.len]
    }

    /// Free slots for a backend to fill: write descriptors into the slice, then `commit`.
    #[inline]
    pub(crate) fn spare(&mut self) -> &mut [Packet] {
        &mut self.pkts[self.len..]
    }

    #[inline]
    pub(crate) fn commit(&mut self, n: usize) {
        // `packets()` relies on this without a bounds check.
        assert!(n <= self.pkts.len() - self.len, "commit past the burst's capacity");
        self.len += n;
    }

    /// [`Burst::commit`] for a backend that wrote `chains` chained packets among the `n`.
    #[inline]
    pub(crate) fn commit_chained(&mut self, n: usize, chains: usize) {
        self.commit(n);
        self.special += chains;
    }

    /// Packet `i`'s first segment as a plain descriptor (the packet itself when it is not
    /// chained).
    fn first_segment(&self, i: usize) -> Packet {
        let mut p = self.packets()[i];
        if p.is_chained() {
            let l = self.pool.link(p.buf);
            (p.len, p.off) = (l.len, l.off);
        }
        p
    }

    /// How many buffers packet `i` spans (1 unless it is chained).
    pub fn segment_count(&self, i: usize) -> usize {
        self.pool.segments_of(&self.packets()[i]).count()
    }

    /// Packet `i`'s bytes, segment by segment, in frame order: one slice for a plain packet.
    /// The chain is walked in place; nothing is copied.
    pub fn segments(&self, i: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let p = self.packets()[i];
        self.pool.segments_of(&p).map(move |(buf, off, len)| {
            let at = self.pool.frame_ptr(buf, off, len);
            // Every buffer of the chain belongs to this burst's packet, so no device or other
            // burst writes it while `&self` lives.
            // SAFETY: the segment lies inside its buffer (`frame_ptr` checked it), written by no
            // one else (above).
            unsafe { std::slice::from_raw_parts(at, usize::from(len)) }
        })
    }

    /// Copies packet `i`'s whole frame (every segment) to the front of `out`; returns its
    /// length, or None (copying nothing) when `out` is shorter than the frame.
    pub fn copy_frame(&self, i: usize, out: &mut [u8]) -> Option<usize> {
        let len = self.packets()[i].len();
        let out = out.get_mut(..len)?;
        let mut at = 0;
        for s in self.segments(i) {
            out[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        Some(at)
    }

    /// Appends one packet holding a copy of `frame`, chained over as many buffers as it needs
    /// when it is longer than one buffer's data room (a jumbo frame); false, with nothing
    /// taken, when the burst is full, the pool has too few buffers or the frame is longer than
    /// a chain can say (65535 bytes per segment, 2^32 in all).
    pub fn push_frame(&mut self, frame: &[u8]) -> bool {
        let room = self.pool.data_room() as usize;
        if frame.len() <= room {
            return self.push_copy(frame);
        }
        if self.room() == 0 || u32::try_from(frame.len()).is_err() {
            return false;
        }
        let headroom = self.pool.headroom;
        // Built back to front, so that each buffer's link names the next one already taken.
        let mut next = SegLink::END;
        let mut taken = 0usize;
        for piece in frame.chunks(room).rev() {
            let mut one = [0u32];
            if self.pool.alloc_bulk(&mut one) == 0 {
                // Not enough for the whole frame: give back what it took.
                while next != SegLink::END {
                    let l = self.pool.link(next);
                    self.pool.free_one(next);
                    next = l.next;
                }
                return false;
            }
            let buf = one[0];
            // SAFETY: `buf` was just taken from the pool: this burst owns it, and
            // headroom + piece.len() <= buf_size (piece.len() <= data_room).
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), self.pool.buf_ptr(buf, u32::from(headroom)), piece.len())
            };
            self.pool.set_link(
                buf,
                SegLink {
                    next,
                    len: piece.len() as u16,
                    off: headroom,
                },
            );
            next = buf;
            taken += 1;
        }
        debug_assert!(taken > 1);
        self.pkts[self.len] = Packet {
            buf: next,
            len: 0,
            off: headroom,
            flags: flags::CHAINED,
            chain_len: frame.len() as u32,
            ..Packet::default()
        };
        self.len += 1;
        self.special += 1;
        true
    }

    /// Frees the second and later segments of every chained packet among the first `n` (whose
    /// heads the caller frees; `forget_front` counts them out).
    #[cold]
    fn free_chain_tails(&mut self, n: usize) {
        for p in &self.pkts[..n] {
            if p.is_chained() {
                for (buf, _, _) in self.pool.segments_of(p).skip(1) {
                    self.pool.free_one(buf);
                }
            }
        }
    }

    /// Moves packet `i` from `from` to the end of `self` without copying; both bursts must be of
    /// the same pool. On an error nothing moves.
    pub fn take_from(&mut self, from: &mut Burst, i: usize) -> Result<(), TakeError> {
        if !Rc::ptr_eq(&self.pool, &from.pool) {
            return Err(TakeError::ForeignPool);
        }
        if i >= from.len {
            return Err(TakeError::NoSuchPacket {
                index: i,
                len: from.len,
            });
        }
        if self.room() == 0 {
            return Err(TakeError::NoRoom);
        }
        self.pkts[self.len] = from.pkts[i];
        self.len += 1;
        if from.pkts[i].is_special() {
            from.special -= 1;
            self.special += 1;
        }
        from.pkts.copy_within(i + 1..from.len, i);
        from.len -= 1;
        Ok(())
    }
}

/// Why [`Burst::take_from`] moved nothing.
///
/// ```
/// use rawpkt::{Burst, Pool, PoolConfig, TakeError};
/// let pool = Pool::new(PoolConfig::default().buffers(8)).unwrap();
/// let (mut a, mut b) = (Burst::new(&pool, 1), Burst::new(&pool, 1));
/// assert_eq!(b.take_from(&mut a, 0), Err(TakeError::NoSuchPacket { index: 0, len: 0 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TakeError {
    /// The two bursts are of different pools: a buffer cannot change pools.
    ForeignPool,
    /// The receiving burst is full.
    NoRoom,
    /// The giving burst has no packet `index` (it holds `len`).
    NoSuchPacket {
        /// The packet asked for.
        index: usize,
        /// The packets the giving burst holds.
        len: usize,
    },
}

impl std::fmt::Display for TakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TakeError::ForeignPool => write!(f, "the two bursts' buffers belong to different pools"),
            TakeError::NoRoom => write!(f, "the receiving burst is full"),
            TakeError::NoSuchPacket { index, len } => write!(f, "no packet {index} in a burst of {len}"),
        }
    }
}

impl std::error::Error for TakeError {}

impl Drop for Burst {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: u32) -> Rc<Pool> {
        Pool::new(PoolConfig {
            buffers: n,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn burst_returns_everything_on_drop() {
        let p = pool(64);
        {
            let mut b = Burst::new(&p, 32);
            assert_eq!(b.alloc(40, 60), 32);
            assert_eq!(p.free_count(), 32);
            b.data_mut(3)[0] = 0xaa;
            assert_eq!(b.data(3)[0], 0xaa);
            b.drop_front(10);
            assert_eq!(p.free_count(), 42);
            assert_eq!(b.len(), 22);
        }
        assert_eq!(p.free_count(), 64);
    }

    #[test]
    fn exhaustion_is_counted_and_survivable() {
        let p = pool(8);
        let mut a = Burst::new(&p, 16);
        assert_eq!(a.alloc(16, 60), 8);
        assert_eq!(p.alloc_failures(), 1);
        let mut b = Burst::new(&p, 4);
        assert_eq!(b.alloc(4, 60), 0);
        assert!(!b.push_copy(&[0u8; 60]));
        a.clear();
        assert!(b.push_copy(&[7u8; 60]));
        assert_eq!(b.data(0), &[7u8; 60][..]);
        drop((a, b));
        assert_eq!(p.free_count(), 8);
    }

    #[test]
    fn bad_configs_are_errors() {
        assert!(Pool::new(PoolConfig {
            buffers: 0,
            ..PoolConfig::default()
        })
        .is_err());
        assert!(Pool::new(PoolConfig {
            buf_size: 3000,
            ..PoolConfig::default()
        })
        .is_err());
        assert!(Pool::new(PoolConfig {
            headroom: 2000,
            ..PoolConfig::default()
        })
        .is_err());
        let big = Pool::new(PoolConfig {
            buf_size: 65536,
            headroom: 0,
            ..PoolConfig::default()
        });
        assert!(big.unwrap_err().to_string().contains("more than 65535"));
    }

    #[test]
    fn oversized_frames_are_refused_not_truncated() {
        let p = pool(4);
        let mut b = Burst::new(&p, 4);
        assert!(!b.push_copy(&vec![0u8; p.data_room() as usize + 1]));
        assert!(b.push_copy(&vec![1u8; p.data_room() as usize]));
        assert!(b.set_len(0, p.data_room() as usize + 1).is_err());
        assert!(b.set_len(5, 60).is_err(), "no packet 5: an error, not a panic");
    }

    #[test]
    fn take_from_moves_without_copy_and_rejects_other_pools() {
        let p = pool(8);
        let q = pool(8);
        let mut a = Burst::new(&p, 4);
        let mut b = Burst::new(&p, 4);
        let mut c = Burst::new(&q, 4);
        a.push_copy(b"0123456789abcdef");
        let buf = a.packet(0).buffer_index();
        b.take_from(&mut a, 0).unwrap();
        assert_eq!(b.packet(0).buffer_index(), buf);
        assert_eq!(c.take_from(&mut b, 0), Err(TakeError::ForeignPool));
        assert_eq!(
            b.take_from(&mut a, 0),
            Err(TakeError::NoSuchPacket { index: 0, len: 0 })
        );
        assert_eq!((a.len(), b.len()), (0, 1), "a refused move moves nothing");
        let mut full = Burst::new(&p, 1);
        full.push_copy(b"x");
        assert_eq!(full.take_from(&mut b, 0), Err(TakeError::NoRoom));
        assert_eq!((full.len(), b.len()), (1, 1), "a refused move moves nothing");
        drop(full);
        drop((a, b, c));
        assert_eq!(p.free_count(), 8);
        assert_eq!(q.free_count(), 8);
    }

    fn jumbo(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
    }

    #[test]
    fn a_jumbo_frame_is_chained_read_back_whole_and_freed_whole() {
        let p = pool(32);
        let room = p.data_room() as usize;
        let mut b = Burst::new(&p, 2);
        let f = jumbo(9000, 3);
        assert!(b.push_frame(&f));
        assert!(b.push_frame(&f[..100]), "a frame that fits one buffer is not chained");
        let segs = 9000usize.div_ceil(room);
        assert_eq!(p.free_count() as usize, 32 - segs - 1);
        assert!(b.packet(0).is_chained() && !b.packet(1).is_chained());
        assert_eq!(
            (b.packet(0).len(), b.segment_count(0), b.segment_count(1)),
            (9000, segs, 1)
        );
        assert_eq!(b.segments(0).map(<[u8]>::len).collect::<Vec<_>>()[0], room);
        assert_eq!(b.segments(0).flatten().copied().collect::<Vec<_>>(), f);
        assert_eq!(b.data(0), &f[..room], "data() is the first segment");
        let mut out = vec![0u8; 9000];
        assert_eq!(b.copy_frame(0, &mut out[..8999]), None, "too short: nothing copied");
        assert_eq!(b.copy_frame(0, &mut out), Some(9000));
        assert_eq!(out, f);
        assert!(b.set_len(0, 60).is_err(), "a chain's length is fixed");
        b.set_flags(0, 0);
        assert!(b.packet(0).is_chained(), "set_flags keeps the chain");
        // Moving a chained packet moves its chain; dropping frees every segment.
        let mut c = Burst::new(&p, 1);
        c.take_from(&mut b, 0).unwrap();
        b.clear();
        assert_eq!(p.free_count() as usize, 32 - segs);
        assert_eq!(c.segments(0).flatten().copied().collect::<Vec<_>>(), f);
        drop(c);
        assert_eq!(p.free_count(), 32);
    }

    #[test]
    fn a_chain_the_pool_cannot_fill_takes_nothing() {
        let p = pool(4);
        let mut b = Burst::new(&p, 4);
        assert!(!b.push_frame(&jumbo(5 * p.data_room() as usize, 1)));
        assert_eq!((b.len(), p.free_count()), (0, 4));
        assert!(b.push_frame(&jumbo(4 * p.data_room() as usize, 1)));
        assert!(!b.push_frame(&[0u8; 60]));
        b.drop_front(1);
        assert_eq!(p.free_count(), 4);
    }

    #[test]
    fn vlan_requests_are_per_packet() {
        let p = pool(4);
        let mut b = Burst::new(&p, 2);
        b.push_copy(&[0u8; 60]);
        b.set_vlan(0, Some(0x2064));
        assert_eq!(
            (b.packet(0).flags() & flags::TX_VLAN, b.packet(0).vlan_tci()),
            (flags::TX_VLAN, 0x2064)
        );
        b.set_vlan(0, None);
        assert_eq!(b.packet(0).flags() & flags::TX_VLAN, 0);
        // The burst knows when it holds a packet the send paths must look at.
        assert!(!b.has_special());
        b.set_flags(0, flags::TX_VLAN | flags::TX_L4_CSUM);
        assert!(b.has_special());
        let mut c = Burst::new(&p, 2);
        c.take_from(&mut b, 0).unwrap();
        assert!(!b.has_special() && c.has_special());
        c.set_flags(0, 0);
        assert!(!c.has_special());
        c.set_vlan(0, Some(1));
        c.forget_front(1);
        assert!(!c.has_special());
        p.free_one(c.pkts[0].buf);
    }
}
