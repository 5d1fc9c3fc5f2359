//! One AF_XDP socket per (port, hardware queue), with its UMEM registered over the whole of the
//! queue's pool memory, so that a UMEM frame *is* a pool buffer: the descriptor address of buffer
//! `i` at offset `o` is `i * buf_size + o` (aligned chunk mode, chunk = buffer).
//!
//! The socket carries all four rings. Its RX half (fill + RX rings, [`RxRings`]) is taken by the
//! `RxQueue` and its TX half (TX + completion rings, [`TxRings`]) by the `TxQueue` of the same
//! queue id, so a queue id used for both directions needs a single bind (the kernel allows one
//! socket per (device, queue) unless `XDP_SHARED_UMEM` is used). Each half records which buffers
//! the kernel holds, and only its own methods change that record; when the socket closes (both
//! halves back) those buffers go back to the pool, since after `close` the kernel no longer
//! writes into the UMEM.
//!
//! Two sockets over the same pool (RX on port A, TX on port B, as in l2-xconnect) register the
//! same memory twice, each as its own UMEM: a buffer received on A can be posted on B's TX ring
//! by its offset, and B's completion gives it back to the pool. No `XDP_SHARED_UMEM` is needed.

use std::any::Any;
use std::cell::RefCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

use super::ring::Ring;
use crate::mem::region::Region;
use crate::sys::xsk::{self, XdpDesc, XDP_COPY, XDP_USE_NEED_WAKEUP, XDP_ZEROCOPY};
use crate::Pool;

/// The kernel's fixed headroom in front of received data (`XDP_PACKET_HEADROOM`,
/// include/uapi/linux/bpf.h): received frames start this far into their chunk.
pub(crate) const XDP_PACKET_HEADROOM: u32 = 256;

/// Which pool buffers the kernel holds through one half of a socket: 1 per buffer.
struct Held(Box<[u8]>);

impl Held {
    fn new(cap: u32) -> Held {
        Held(vec![0; cap as usize].into_boxed_slice())
    }

    #[inline(always)]
    fn set(&mut self, buf: u32) {
        self.0[buf as usize] = 1;
    }

    /// Clears `buf`'s mark; false when the kernel did not hold it (a bad descriptor).
    #[inline(always)]
    fn clear(&mut self, buf: u64) -> bool {
        match self.0.get_mut(buf as usize) {
            Some(h) if *h != 0 => {
                *h = 0;
                true
            }
            _ => false,
        }
    }

    fn collect(&self, out: &mut Vec<u32>) {
        out.extend(
            self.0
                .iter()
                .enumerate()
                .filter(|(_, &h)| h != 0)
                .map(|(i, _)| i as u32),
        );
    }
}

/// The RX half: the fill ring (buffers given to the kernel) and the RX ring (frames received).
pub(crate) struct RxRings {
    fill: Ring<u64>,
    rx: Ring<XdpDesc>,
    held: Held,
    /// Buffers on the fill ring or in the kernel, not yet received.
    posted: u32,
    shift: u32,
}

impl RxRings {
    pub(crate) fn size(&self) -> u32 {
        self.fill.size()
    }

    /// Fill slots not holding a buffer.
    #[inline(always)]
    pub(crate) fn unposted(&self) -> u32 {
        self.fill.size() - self.posted
    }

    /// Whether the kernel asked for a `recvfrom` to look at the fill ring again.
    #[inline(always)]
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Free fill slots, up to `max`.
    #[inline(always)]
    pub(crate) fn fill_room(&mut self, max: u32) -> u32 {
        self.fill.reserve(max).1
    }

    /// Gives the kernel `bufs` (at most [`fill_room`](Self::fill_room) of them) through the fill ring.
    #[inline(always)]
    pub(crate) fn fill(&mut self, bufs: &[u32]) {
        let (at, room) = self.fill.reserve(bufs.len() as u32);
        debug_assert_eq!(room as usize, bufs.len());
        for (k, &idx) in bufs[..room as usize].iter().enumerate() {
            self.fill.write(at.wrapping_add(k as u32), u64::from(idx) << self.shift);
            self.held.set(idx);
        }
        self.fill.submit(room);
        self.posted += room;
    }

    /// Received descriptors ready to read, up to `max`: (first index, count).
    #[inline(always)]
    pub(crate) fn peek(&mut self, max: u32) -> (u32, u32) {
        self.rx.peek(max)
    }

    /// The received descriptor at index `i` and its buffer, or None when it names a buffer the
    /// kernel was not given (never to be handed up).
    #[inline(always)]
    pub(crate) fn take(&mut self, i: u32) -> Option<(u32, XdpDesc)> {
        let d = self.rx.read(i);
        let buf = d.addr >> self.shift;
        if self.held.clear(buf) {
            self.posted -= 1;
            Some((buf as u32, d))
        } else {
            None
        }
    }

    /// Hands `n` read RX slots back to the kernel.
    #[inline(always)]
    pub(crate) fn release(&mut self, n: u32) {
        self.rx.release(n);
    }
}

/// The TX half: the TX ring (frames to send) and the completion ring (buffers sent).
pub(crate) struct TxRings {
    tx: Ring<XdpDesc>,
    comp: Ring<u64>,
    held: Held,
    /// Buffers on the TX ring or in the kernel, not yet completed.
    in_flight: u32,
    shift: u32,
}

impl TxRings {
    pub(crate) fn size(&self) -> u32 {
        self.comp.size()
    }

    #[inline(always)]
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Whether the kernel asked for a `sendto` to look at the TX ring again.
    #[inline(always)]
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.tx.needs_wakeup()
    }

    /// Posted frames the kernel has not yet reported taking from the TX ring (it may report
    /// late: this can count high, never low).
    #[inline(always)]
    pub(crate) fn unconsumed(&self) -> u32 {
        self.tx.unconsumed()
    }

    /// Free TX slots, up to `max`: (first index, count).
    #[inline(always)]
    pub(crate) fn reserve(&mut self, max: u32) -> (u32, u32) {
        self.tx.reserve(max)
    }

    /// Writes the frame `len` bytes at offset `off` of buffer `buf` into reserved slot `i`.
    #[inline(always)]
    pub(crate) fn write(&mut self, i: u32, buf: u32, off: u16, len: u16) {
        self.tx.write(
            i,
            XdpDesc {
                addr: (u64::from(buf) << self.shift) + u64::from(off),
                len: u32::from(len),
                options: 0,
            },
        );
        self.held.set(buf);
    }

    /// Publishes `n` written slots to the kernel.
    #[inline(always)]
    pub(crate) fn submit(&mut self, n: u32) {
        self.tx.submit(n);
        self.in_flight += n;
    }

    /// Reads every completion into `out` (which has room for the ring's size): returns the
    /// buffers written to `out`, and the completions that named a buffer the kernel did not
    /// hold.
    #[inline(always)]
    pub(crate) fn complete(&mut self, out: &mut [u32]) -> (usize, u32) {
        let (at, n) = self.comp.peek(self.comp.size());
        if n == 0 {
            return (0, 0);
        }
        let mut k = 0;
        for i in 0..n {
            let buf = self.comp.read(at.wrapping_add(i)) >> self.shift;
            if self.held.clear(buf) {
                out[k] = buf as u32;
                k += 1;
            }
        }
        self.comp.release(n);
        self.in_flight -= k as u32;
        (k, n - k as u32)
    }
}

/// What binding a socket needs from the control path.
pub(crate) struct BindArgs<'a> {
    pub pool: &'a Rc<Pool>,
    pub ifindex: u32,
    pub hw_queue: u32,
    /// Entries per ring (a power of two).
    pub size: u32,
    pub zerocopy: bool,
    /// Most frames one copy-mode `sendto` sends (see `xsk::set_tx_budget`).
    pub tx_budget: u32,
}

/// A bound socket: the descriptor, its UMEM (the pool's memory) and the halves not taken by a
/// queue.
pub(crate) struct Socket {
    fd: Option<OwnedFd>,
    pool: Rc<Pool>,
    rx: RefCell<Option<RxRings>>,
    tx: RefCell<Option<TxRings>>,
    /// Whether the kernel bound it in zero-copy mode, and the TX budget it accepted.
    zerocopy: bool,
    tx_budget: Option<u32>,
    /// Keeps the UMEM's memory mapped for as long as the socket may use it.
    _region: Arc<Region>,
    /// Whatever the control path ties to the socket's life (its claim on the queue id); dropped
    /// after the socket is closed.
    owner: Option<Box<dyn Any>>,
}

impl Socket {
    /// Binds `fd` (a fresh `AF_XDP` socket made in the interface's network namespace) to
    /// `ifindex`/`hw_queue` with a UMEM over `pool`'s memory and all four rings.
    pub(crate) fn bind(fd: OwnedFd, a: &BindArgs<'_>) -> std::io::Result<Socket> {
        let pool = a.pool;
        let size = a.size;
        let region = pool.region().clone();
        xsk::umem_reg(&fd, region.base() as u64, region.len() as u64, pool.buf_size(), 0)?;
        xsk::ring_size(&fd, xsk::XDP_UMEM_FILL_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_UMEM_COMPLETION_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_RX_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_TX_RING, size)?;
        // In copy mode every frame is sent inside our `sendto`, 32 per call by default: let one
        // call drain what a burst posted. Older kernels keep 32, which only costs more calls.
        let budget = size.min(a.tx_budget);
        let tx_budget = xsk::set_tx_budget(&fd, budget).is_ok().then_some(budget);
        let off = xsk::mmap_offsets(&fd)?;
        let fill = Ring::map(&fd, &off.fr, size, xsk::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(&fd, &off.cr, size, xsk::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = Ring::map(&fd, &off.rx, size, xsk::XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(&fd, &off.tx, size, xsk::XDP_PGOFF_TX_RING)?;
        let flags = XDP_USE_NEED_WAKEUP | if a.zerocopy { XDP_ZEROCOPY } else { XDP_COPY };
        bind_retrying(&fd, a.ifindex, a.hw_queue, flags)?;
        let zerocopy = xsk::is_zerocopy(&fd).unwrap_or(a.zerocopy);
        let (cap, shift) = (pool.capacity(), pool.buf_size().trailing_zeros());
        Ok(Socket {
            fd: Some(fd),
            pool: pool.clone(),
            rx: RefCell::new(Some(RxRings {
                fill,
                rx,
                held: Held::new(cap),
                posted: 0,
                shift,
            })),
            tx: RefCell::new(Some(TxRings {
                tx,
                comp,
                held: Held::new(cap),
                in_flight: 0,
                shift,
            })),
            zerocopy,
            tx_budget,
            _region: region,
            owner: None,
        })
    }

    /// Ties `owner` to the socket: it is dropped after the socket closes.
    pub(crate) fn owned_by(mut self, owner: Box<dyn Any>) -> Socket {
        self.owner = Some(owner);
        self
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    pub(crate) fn pool(&self) -> &Rc<Pool> {
        &self.pool
    }

    pub(crate) fn is_zerocopy(&self) -> bool {
        self.zerocopy
    }

    /// Frames per copy-mode `sendto`, or None when the kernel kept its default (32).
    pub(crate) fn tx_budget(&self) -> Option<u32> {
        self.tx_budget
    }

    /// The RX half, once (None when a queue already holds it).
    pub(crate) fn take_rx(&self) -> Option<RxRings> {
        self.rx.borrow_mut().take()
    }

    /// The TX half, once (None when a queue already holds it).
    pub(crate) fn take_tx(&self) -> Option<TxRings> {
        self.tx.borrow_mut().take()
    }

    /// Gives a half back when its queue is dropped: the buffers it records return to the pool
    /// when the socket closes.
    pub(crate) fn put_rx(&self, h: RxRings) {
        *self.rx.borrow_mut() = Some(h);
    }

    pub(crate) fn put_tx(&self, h: TxRings) {
        *self.tx.borrow_mut() = Some(h);
    }
}

/// `bind`, retried briefly on `EBUSY`: a socket closed just before may still be holding the
/// queue. Closing an AF_XDP socket does not free the interface queue at once: the kernel drops
/// the socket's buffer pool (its UMEM registration) from a deferred work item, and only then
/// clears the queue's slot; a `bind` to that queue in between finds it taken and fails with
/// EBUSY. This happens when a port is reopened, or a queue recreated, right after a close.
fn bind_retrying(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match xsk::bind(fd, ifindex, queue, flags) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 10 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let mut held = Vec::new();
        if let Some(h) = self.rx.get_mut().take() {
            h.held.collect(&mut held);
        }
        if let Some(h) = self.tx.get_mut().take() {
            h.held.collect(&mut held);
        }
        // Rings are unmapped above; closing the socket unbinds it (synchronize_net in
        // xsk_release), after which the kernel no longer writes into our buffers.
        drop(self.fd.take());
        self.pool.free_bulk(&held);
        // Only now may the control path let another socket take the queue.
        drop(self.owner.take());
    }
}
