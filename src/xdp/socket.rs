//! One AF_XDP socket per (port, hardware queue, thread), with its UMEM registered over the whole
//! of the queue's pool memory, so that a UMEM frame *is* a pool buffer: the descriptor address
//! of buffer `i` at offset `o` is `i * buf_size + o` (aligned chunk mode, chunk = buffer).
//!
//! The socket carries all four rings. Its RX half (fill + RX rings) is taken by the `RxQueue`
//! and its TX half (TX + completion rings) by the `TxQueue` made for the same queue id on the
//! same thread, so a queue id used for both directions needs a single bind (the kernel allows one
//! socket per (device, queue) unless `XDP_SHARED_UMEM` is used). Each half records which buffers
//! the kernel holds; when the socket closes (both halves dropped) those buffers go back to the
//! pool, since after `close` the kernel no longer writes into the UMEM.
//!
//! Two sockets over the same pool (RX on port A, TX on port B, as in l2-xconnect) register the
//! same memory twice, each as its own UMEM: a buffer received on A can be posted on B's TX ring
//! by its offset, and B's completion gives it back to the pool. No `XDP_SHARED_UMEM` is needed.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};
use std::sync::Arc;

use super::port::PortShared;
use super::ring::Ring;
use crate::mem::region::Region;
use crate::sys::xsk::{self, XdpDesc, XDP_COPY, XDP_USE_NEED_WAKEUP, XDP_ZEROCOPY};
use crate::{Error, Pool};

/// Most frames one copy-mode `sendto` sends (see `xsk::set_tx_budget`); the env override is for
/// measuring its effect.
fn tx_budget() -> u32 {
    std::env::var("RAWPKT_XDP_TX_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// The kernel's fixed headroom in front of received data (`XDP_PACKET_HEADROOM`,
/// include/uapi/linux/bpf.h): received frames start this far into their chunk.
pub(crate) const XDP_PACKET_HEADROOM: u32 = 256;

/// How to bind: let the kernel's driver decide, or force one mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindMode {
    Auto,
    Copy,
    ZeroCopy,
}

pub(crate) struct RxHalf {
    pub fill: Ring<u64>,
    pub rx: Ring<XdpDesc>,
    /// 1 for each pool buffer given to the kernel through the fill ring and not yet received.
    pub held: Box<[u8]>,
    pub posted: u32,
}

pub(crate) struct TxHalf {
    pub tx: Ring<XdpDesc>,
    pub comp: Ring<u64>,
    /// 1 for each pool buffer on the TX ring or in the kernel, not yet completed.
    pub held: Box<[u8]>,
    pub in_flight: u32,
}

pub(crate) struct Xsk {
    fd: Option<OwnedFd>,
    pub port: Arc<PortShared>,
    pub hw_queue: u32,
    pub pool: Rc<Pool>,
    pub rx: RefCell<Option<RxHalf>>,
    pub tx: RefCell<Option<TxHalf>>,
    /// Keeps the UMEM's memory mapped for as long as the socket may use it.
    _region: Arc<Region>,
}

thread_local! {
    /// This thread's sockets by (port id, hardware queue).
    static SOCKETS: RefCell<Vec<(u64, u32, Weak<Xsk>)>> = const { RefCell::new(Vec::new()) };
}

impl Xsk {
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// This thread's socket for `hw_queue` of `port` over `pool`, created (and bound) on first
    /// use.
    pub fn get(port: &Arc<PortShared>, hw_queue: u32, pool: &Rc<Pool>, size: u32) -> Result<Rc<Xsk>, Error> {
        let found = SOCKETS.with(|s| {
            let mut s = s.borrow_mut();
            s.retain(|(_, _, w)| w.strong_count() > 0);
            s.iter()
                .find(|(id, q, _)| *id == port.id && *q == hw_queue)
                .and_then(|(_, _, w)| w.upgrade())
        });
        if let Some(x) = found {
            if !Rc::ptr_eq(&x.pool, pool) {
                return Err(Error::Config(format!(
                    "{} queue {hw_queue}: this thread already has a socket on that queue over another pool; \
                     its RX and TX queues must share one pool",
                    port.name()
                )));
            }
            return Ok(x);
        }
        let x = Rc::new(Xsk::open(port, hw_queue, pool, size)?);
        SOCKETS.with(|s| s.borrow_mut().push((port.id, hw_queue, Rc::downgrade(&x))));
        Ok(x)
    }

    fn open(port: &Arc<PortShared>, hw_queue: u32, pool: &Rc<Pool>, size: u32) -> Result<Xsk, Error> {
        let name = port.name();
        let chunk = pool.buf_size();
        // Aligned mode: chunks are powers of two from XDP_UMEM_MIN_CHUNK_SIZE (2048) to the page
        // size (net/xdp/xdp_umem.c, xdp_umem_reg).
        if !(2048..=4096).contains(&chunk) {
            return Err(Error::Config(format!(
                "{name}: AF_XDP needs pool buffers of 2048 or 4096 bytes (a UMEM chunk is a buffer), not {chunk}"
            )));
        }
        if pool.data_room() < XDP_PACKET_HEADROOM + 64 {
            return Err(Error::Config(format!(
                "{name}: pool headroom leaves no room for frames"
            )));
        }
        let modes = match port.bind {
            BindMode::Auto => vec![BindMode::ZeroCopy, BindMode::Copy],
            m => vec![m],
        };
        let mut last = None;
        for (k, &mode) in modes.iter().enumerate() {
            match Xsk::try_bind(port, hw_queue, pool, size, mode) {
                Ok(x) => return Ok(x),
                // Zero-copy not offered by this driver (veth, most virtual devices): fall back.
                Err(e) if k + 1 < modes.len() && matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                    last = Some(e)
                }
                Err(e) if mode == BindMode::ZeroCopy && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    return Err(no_zero_copy(port, hw_queue))
                }
                Err(e) => return Err(port.io_error(&format!("queue {hw_queue}"), e)),
            }
        }
        Err(port.io_error(
            &format!("queue {hw_queue}"),
            last.unwrap_or_else(|| std::io::Error::other("no bind mode")),
        ))
    }

    fn try_bind(
        port: &Arc<PortShared>,
        hw_queue: u32,
        pool: &Rc<Pool>,
        size: u32,
        mode: BindMode,
    ) -> std::io::Result<Xsk> {
        // The socket belongs to the namespace it is created in, which decides what its bind's
        // ifindex names: create it where the port was opened.
        let fd = port.in_netns(xsk::socket)??;
        let region = pool.region().clone();
        xsk::umem_reg(&fd, region.base() as u64, region.len() as u64, pool.buf_size(), 0)?;
        xsk::ring_size(&fd, xsk::XDP_UMEM_FILL_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_UMEM_COMPLETION_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_RX_RING, size)?;
        xsk::ring_size(&fd, xsk::XDP_TX_RING, size)?;
        // In copy mode every frame is sent inside our `sendto`, 32 per call by default: let one
        // call drain what a burst posted. Older kernels keep 32, which only costs more calls.
        let budget = size.min(tx_budget());
        let budget_set = xsk::set_tx_budget(&fd, budget).is_ok();
        let off = xsk::mmap_offsets(&fd)?;
        let fill = Ring::map(&fd, &off.fr, size, xsk::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(&fd, &off.cr, size, xsk::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = Ring::map(&fd, &off.rx, size, xsk::XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(&fd, &off.tx, size, xsk::XDP_PGOFF_TX_RING)?;
        let flags = XDP_USE_NEED_WAKEUP
            | match mode {
                BindMode::ZeroCopy => XDP_ZEROCOPY,
                _ => XDP_COPY,
            };
        bind_retrying(&fd, port.ifindex, hw_queue, flags)?;
        let zerocopy = xsk::is_zerocopy(&fd).unwrap_or(mode == BindMode::ZeroCopy);
        let cap = pool.capacity() as usize;
        port.bound
            .store(if zerocopy { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "rawpkt: {} queue {hw_queue}: AF_XDP socket bound in {} mode, need_wakeup on, {} frames per sendto; XDP program in {} mode",
            port.name(),
            if zerocopy { "zero-copy" } else { "copy" },
            if budget_set { budget } else { 32 },
            port.attach_mode,
        );
        Ok(Xsk {
            fd: Some(fd),
            port: port.clone(),
            hw_queue,
            pool: pool.clone(),
            rx: RefCell::new(Some(RxHalf {
                fill,
                rx,
                held: vec![0; cap].into_boxed_slice(),
                posted: 0,
            })),
            tx: RefCell::new(Some(TxHalf {
                tx,
                comp,
                held: vec![0; cap].into_boxed_slice(),
                in_flight: 0,
            })),
            _region: region,
        })
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

impl Drop for Xsk {
    fn drop(&mut self) {
        // No XSKMAP entry to clear: only an RX queue sets one, it clears it when dropped, and it
        // holds this socket, so it is always gone first.
        let mut held = Vec::new();
        let collect = |map: &[u8], out: &mut Vec<u32>| {
            out.extend(map.iter().enumerate().filter(|(_, &h)| h != 0).map(|(i, _)| i as u32));
        };
        if let Some(h) = self.rx.borrow_mut().take() {
            collect(&h.held, &mut held);
        }
        if let Some(h) = self.tx.borrow_mut().take() {
            collect(&h.held, &mut held);
        }
        // Rings are unmapped above; closing the socket unbinds it (synchronize_net in
        // xsk_release), after which the kernel no longer writes into our buffers.
        drop(self.fd.take());
        self.pool.free_bulk(&held);
    }
}

/// `bind=zerocopy` on an interface whose driver has no zero-copy AF_XDP (`XDP_ZEROCOPY` bind:
/// EOPNOTSUPP, net/xdp/xsk_buff_pool.c `xp_assign_dev`: the driver has no `ndo_xsk_wakeup` or
/// XDP_SETUP_XSK_POOL): what the user asked for cannot be had on this device.
fn no_zero_copy(port: &Arc<PortShared>, hw_queue: u32) -> Error {
    let driver = port
        .in_netns(|| crate::sys::netdev::driver(&port.ifname))
        .ok()
        .flatten()
        .map_or(String::new(), |d| format!(" ({d})"));
    Error::Config(format!(
        "{} queue {hw_queue}: the driver of {}{driver} has no zero-copy AF_XDP; use bind=copy, or leave bind \
         unset to fall back to copy mode",
        port.name(),
        port.ifname
    ))
}
