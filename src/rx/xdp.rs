//! The AF_XDP receive path: received descriptors become packets of the caller's burst (the
//! descriptor's address is the buffer's offset in the pool's region), and the fill ring is topped
//! up from the pool in batches, as the DV path refills its RQ. One acquire load of the RX
//! producer and one release store of its consumer per burst (libxdp `xsk_ring_cons__peek` /
//! `__release`, DPDK `af_xdp_rx_zc`); a `recvfrom` only when the fill ring's `need_wakeup` flag
//! asks for one and nothing arrived.

use std::rc::Rc;

use super::REFILL_BATCH;
use crate::mem::pool::{Burst, Packet};
use crate::sys::xsk;
use crate::xsk::socket::{RxRings, Socket};
use crate::{same_pool, Error, QueueError, QueueStats, RxQueue};

/// Kernel drop counters are read (one `getsockopt`) every this many idle polls or bursts.
const STATS_EVERY_IDLE: u32 = 64;
const STATS_EVERY_BUSY: u32 = 4096;

pub(crate) struct XdpRxQueue {
    half: Option<RxRings>,
    xsk: Rc<Socket>,
    fd: i32,
    mask: u64,
    /// Free fill slots that make a refill worth it: `REFILL_BATCH`, at most a quarter of the ring.
    refill_min: u32,
    scratch: Box<[u32]>,
    stats: QueueStats,
    /// Kernel drop counters when this queue took the socket, and a countdown to the next read.
    drops_base: u64,
    stats_countdown: u32,
    /// The control path's hold on the XSKMAP entry that sends frames here: dropped first.
    steering: Option<Box<dyn std::any::Any>>,
}

fn kernel_drops(fd: i32) -> u64 {
    xsk::statistics(fd)
        .map(|s| s.rx_dropped + s.rx_ring_full + s.rx_fill_ring_empty_descs + s.rx_invalid_descs)
        .unwrap_or(0)
}

impl XdpRxQueue {
    /// The RX queue over `xsk`'s RX half, its fill ring filled. The control path then points the
    /// port's XSKMAP entry at the socket: only then does the program send frames here.
    pub(crate) fn new(xsk: Rc<Socket>, name: &str) -> Result<XdpRxQueue, Error> {
        let half = xsk
            .take_rx()
            .ok_or_else(|| Error::config(format!("{name}: the socket's RX half is already taken")))?;
        let pool = xsk.pool().clone();
        let fd = xsk.raw_fd();
        let size = half.size();
        let mut q = XdpRxQueue {
            mask: u64::from(pool.buf_size() - 1),
            refill_min: REFILL_BATCH.min(size / 4).max(1),
            scratch: vec![0; size as usize].into_boxed_slice(),
            stats: QueueStats::default(),
            drops_base: kernel_drops(fd),
            stats_countdown: STATS_EVERY_IDLE,
            steering: None,
            half: Some(half),
            fd,
            xsk,
        };
        q.refill(1);
        Ok(q)
    }

    /// The socket's descriptor (for its XSKMAP entry).
    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd
    }

    /// Keeps `guard` (whose drop stops the XDP program sending frames here) until the queue is
    /// dropped.
    pub(crate) fn steered_by(&mut self, guard: Box<dyn std::any::Any>) {
        self.steering = Some(guard);
    }

    /// Gives the kernel fresh buffers for every free fill slot once at least `min` are free.
    #[inline(always)]
    fn refill(&mut self, min: u32) {
        let Some(h) = self.half.as_mut() else { return };
        let want = h.unposted();
        if want < min {
            return;
        }
        let room = h.fill_room(want);
        let got = self.xsk.pool().alloc_bulk(&mut self.scratch[..room as usize]);
        if got < want as usize {
            self.stats.no_buffers += 1;
        }
        if got == 0 {
            return;
        }
        h.fill(&self.scratch[..got]);
    }

    fn refresh_drops(&mut self) {
        self.stats.drops = kernel_drops(self.fd).saturating_sub(self.drops_base);
    }
}

/// The queue's failure when a call into the socket says its device is gone or down.
#[cold]
fn check_alive(r: Result<(), i32>) -> Result<(), QueueError> {
    match r {
        Err(errno @ (libc::ENXIO | libc::ENETDOWN)) => Err(QueueError::DeviceGone { errno }),
        _ => Ok(()),
    }
}

impl RxQueue for XdpRxQueue {
    #[inline(never)]
    fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        same_pool(self.xsk.pool(), out)?;
        let Some(h) = self.half.as_mut() else { return Ok(0) };
        let spare = out.spare();
        let (at, n) = h.peek(spare.len().min(u32::MAX as usize) as u32);
        if n == 0 {
            let mut kicked = false;
            if h.needs_wakeup() {
                kicked = true;
                check_alive(xsk::kick_rx(self.fd))?;
            }
            self.refill(self.refill_min);
            self.stats_countdown = self.stats_countdown.min(STATS_EVERY_IDLE) - 1;
            if self.stats_countdown == 0 {
                self.stats_countdown = STATS_EVERY_IDLE;
                self.refresh_drops();
                // Nothing arriving may mean the interface is gone: a socket whose device was
                // deleted is unbound, and only a call into it says so (a copy-mode `recvfrom`
                // with nothing to wake is otherwise a few checks in the kernel).
                if !kicked {
                    check_alive(xsk::kick_rx(self.fd))?;
                }
            }
            return Ok(0);
        }
        let mask = self.mask;
        let mut bytes = 0u64;
        let mut k = 0usize;
        let mut bad = 0u64;
        for i in 0..n {
            // Not a buffer we gave the kernel: never hand it up.
            let Some((buf, d)) = h.take(at.wrapping_add(i)) else {
                bad += 1;
                continue;
            };
            spare[k] = Packet {
                buf,
                len: d.len as u16,
                off: (d.addr & mask) as u16,
                ..Packet::default()
            };
            bytes += u64::from(d.len);
            k += 1;
        }
        h.release(n);
        out.commit(k);
        self.stats.packets += k as u64;
        self.stats.bytes += bytes;
        self.stats.errors.bad_cqe += bad;
        self.stats.bursts += 1;
        self.refill(self.refill_min);
        self.stats_countdown -= 1;
        if self.stats_countdown == 0 {
            self.stats_countdown = STATS_EVERY_BUSY;
            self.refresh_drops();
        }
        Ok(k)
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// `poll(POLLIN)` on the socket: the kernel wakes us when the RX ring gets a descriptor.
    /// On a machine where the receiving NAPI thread shares the core with this loop (veth,
    /// copy mode), sleeping here instead of spinning gives that thread the CPU it needs to copy
    /// the frames in.
    fn wait(&mut self, timeout: std::time::Duration) -> bool {
        xsk::wait_readable(self.fd, timeout.as_millis().min(i32::MAX as u128) as i32);
        true
    }
}

impl Drop for XdpRxQueue {
    fn drop(&mut self) {
        // Stop the program sending frames to this socket; the buffers the kernel still holds
        // stay recorded in the half and return to the pool when the socket closes.
        drop(self.steering.take());
        if let Some(h) = self.half.take() {
            self.xsk.put_rx(h);
        }
    }
}
