//! The mlx5 Direct Verbs receive path on a cyclic RQ: one WQE per frame, CQEs polled by owner
//! bit, buffers handed up in the CQE's order and replaced in bursts. Modelled on VPP
//! `rdma/input.c` (buffers taken from the ring in order, refill in bulk, CQ doorbell only after
//! progress) and DPDK `mlx5_rx.c` (`mlx5_rx_err_handle`: which syndromes reset the queue).
//!
//! The queue is the receive core (`rx::dv_core`) on a cyclic RQ ([`Cyclic`]): this file holds
//! what only a cyclic RQ does: its refill, what its CQEs mean past the core's fast path (the
//! general path), its compressed sessions (hash mini-CQEs, each a frame in one WQE), and WQEs of
//! several buffers and VLAN stripping (`burst_offload`).

use std::rc::Rc;
use std::sync::Arc;

use super::dv_core::{Progress, RqKind, RxCore, Zip, FLAGS_LUT, MINI};
use crate::dv::prm::{
    cqe_flags, mini_array_slot, syndrome, Be64, Cqe64, DataSeg, MiniCqe, MiniFormat, CQE_RESP_ERR, CQE_RESP_SEND,
};
use crate::dv::ring::{CqInfo, CqRing, RqRing, RwqInfo, RxPoll};
use crate::dv::{failed_error, DvControl};
use crate::mem::pool::{flags, Burst, Packet, Pool};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, RxQueue};

/// A receive queue on a cyclic RQ: one WQE per frame, one buffer per data segment.
pub struct DvRxQueue {
    core: RxCore<Cyclic>,
}

/// A cyclic RQ: its ring, and how its WQEs hold frames.
pub(crate) struct Cyclic {
    ring: RqRing,
    /// Data segments (buffers) per receive WQE that hold a frame: 1 unless
    /// `QueueConfig::rx_max_frame` asks for frames longer than one buffer.
    sg: u32,
    /// RQ entries (16-byte segments) per WQE: `sg` rounded up to the WQ's stride.
    seg_stride: u32,
    /// The device strips 802.1Q tags (`QueueConfig::rx_vlan_strip`): each packet's is handed up.
    vlan_strip: bool,
    /// `sg > 1 || vlan_strip`: bursts go through [`RxCore::burst_offload`], which also expands
    /// compressed sessions on such a queue.
    offload: bool,
    /// The session title's `hdr_type_etc`/`vlan_info` word ([`Cqe64::hdr_type_vlan`]), for
    /// [`RxCore::burst_offload`]: a stripped tag is the title's for every packet of the
    /// session (set there only, so the one-buffer expansion does not pay for it).
    zip_hv: u32,
    /// Mini-CQE arrays the AVX2 path expanded (tests check that it ran).
    #[cfg(test)]
    vector_arrays: u64,
}

/// The cyclic RQ in the receive core: the consumer index counts WQEs, one buffer each on the
/// core's fast path and in compressed sessions.
impl RqKind for Cyclic {
    const LEN_BIAS: u32 = 0;

    #[inline(always)]
    fn log_units(&self) -> u32 {
        0
    }
    fn wqes(&self) -> u32 {
        self.ring.size() / self.seg_stride
    }
    fn bufs_per_wqe(&self) -> u32 {
        self.sg
    }
    #[inline(always)]
    fn ring_doorbell(&self, pi: u32) {
        self.ring.ring_doorbell(pi);
    }
    #[inline(always)]
    fn refill(q: &mut RxCore<Self>, min: u32) {
        if q.rq.sg > 1 {
            q.refill_sg(min);
        } else {
            q.refill(min);
        }
    }
    fn release_posted(q: &mut RxCore<Self>) {
        if q.rq.sg > 1 {
            q.release_sg();
        } else {
            q.release_bufs();
        }
    }
    #[inline(always)]
    fn general(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError> {
        q.burst_general(out)
    }
    #[inline(always)]
    fn burst_zip<const V: usize>(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError> {
        q.burst_zip::<V>(out)
    }
    /// Full mini-CQE arrays, eight packets.
    fn vector_width(&self) -> usize {
        MINI as usize
    }
}

/// No buffer in a slot of a scattering queue's ring (it went up with a packet).
const NO_BUF: u32 = u32::MAX;

impl DvRxQueue {
    /// A receive queue over the WQ and CQ that `rwq` and `cq` describe (WQ number `wq_num`),
    /// filled with buffers of `pool` (registered with the device as `lkey`).
    ///
    /// # Safety
    /// As [`DvTxQueue::new`](crate::tx::dv::DvTxQueue::new): `rwq` and `cq` must describe live
    /// queue memory of one device that stays valid for the queue's whole life, and no one else
    /// may post to the WQ, write its doorbell record or read the CQ while the queue lives (no
    /// second queue over the same rings).
    /// ```compile_fail,E0133
    /// # use rawpkt::{dv::ring::{CqInfo, RwqInfo}, mem::pool::Pool, rx::dv::DvRxQueue, QueueConfig};
    /// # use std::{rc::Rc, sync::Arc};
    /// fn safe(rwq: &RwqInfo, cq: &CqInfo, pool: &Rc<Pool>, ctl: Arc<dyn rawpkt::dv::DvControl>) {
    ///     let _q = DvRxQueue::new(rwq, cq, 1, 0, pool, &QueueConfig::default(), ctl);
    /// }
    /// ```
    #[allow(unsafe_code)]
    pub unsafe fn new(
        rwq: &RwqInfo,
        cq: &CqInfo,
        wq_num: u32,
        lkey: u32,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        ctl: Arc<dyn DvControl>,
    ) -> Result<DvRxQueue, Error> {
        // SAFETY: the rings are live and this queue's alone (the caller's contract); it posts
        // only buffers of its own pool that it holds in its ring, and publishes a consumer index
        // only past CQEs it has finished reading.
        let sg = rx_segments(cfg, pool)?;
        let (rq, seg_stride, cq) = if sg == 1 {
            // SAFETY: as above.
            let (rq, cq) = unsafe { (RqRing::new(rwq), CqRing::new(cq)) };
            (rq.map_err(Error::device)?, 1, cq.map_err(Error::device)?)
        } else {
            // SAFETY: as above.
            let (rq, cq) = unsafe { (RqRing::new_scatter(rwq), CqRing::new(cq)) };
            let (rq, per_wqe) = rq.map_err(Error::device)?;
            if per_wqe < sg {
                return Err(Error::device(format!(
                    "the receive WQ holds {per_wqe} data segments per WQE; rx_max_frame {} needs {sg}",
                    cfg.rx_max_frame
                )));
            }
            (rq, per_wqe, cq.map_err(Error::device)?)
        };
        if cq.size() < rq.size() / seg_stride {
            return Err(Error::device("RX CQ smaller than its receive queue"));
        }
        let size = rq.size() / seg_stride;
        let kind = Cyclic {
            ring: rq,
            sg,
            seg_stride,
            vlan_strip: cfg.rx_vlan_strip,
            offload: sg > 1 || cfg.rx_vlan_strip,
            zip_hv: 0,
            #[cfg(test)]
            vector_arrays: 0,
        };
        // Scatter and stripping queues expand sessions in `burst_offload`.
        let room = (pool.data_room(), MiniFormat::Hash);
        let mut q = RxCore::new(kind, cq, room, pool, cfg, ctl, wq_num)?;
        // Byte count and lkey never change; a refill rewrites only the address (VPP). Segments
        // past `sg` end the scatter list (rdma-core `mlx5_post_wq_recv`'s terminator).
        let seg = DataSeg::new(pool.data_room(), lkey, 0);
        for i in 0..size * seg_stride {
            *q.rq.ring.wqe(i) = if i % seg_stride < sg { seg } else { DataSeg::TERMINATOR };
        }
        Cyclic::refill(&mut q, 0);
        Ok(DvRxQueue { core: q })
    }

    /// Receive WQEs posted and not yet completed. The DV tests read it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn posted(&self) -> u32 {
        self.core.posted()
    }

    /// Chooses the builds for the CPU's MOVBE and AVX2 (the AVX2 refill and session expansion
    /// where it has it) or the portable one (tests run both on a MOVBE machine).
    #[cfg(all(test, feature = "model"))] // the tests that run queues over the model
    pub(crate) fn set_movbe(&mut self, on: bool) {
        self.core.set_cpu_features(on, on);
    }

    /// Runs the portable build where `movbe` is false, and no AVX2 where `avx2` is false.
    #[cfg(all(test, feature = "model"))] // the tests that run queues over the model
    pub(crate) fn set_cpu_features(&mut self, movbe: bool, avx2: bool) {
        self.core.set_cpu_features(movbe, avx2);
    }
}

impl RxQueue for DvRxQueue {
    #[inline(never)]
    fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if self.core.rq.offload {
            return self.core.burst_offload(out);
        }
        self.core.rx_burst(out)
    }

    fn stats(&self) -> &QueueStats {
        &self.core.stats
    }
}

/// The one-buffer cyclic queue's own paths: refill, the CQEs the core's fast path does not
/// take, compressed sessions.
impl RxCore<Cyclic> {
    /// Posts fresh buffers into every free RQ slot once at least `min` are free. Indices go
    /// straight from the pool into the ring's buffer slots; only the WQE address is rewritten.
    #[inline(always)]
    fn refill(&mut self, min: u32) {
        let size = self.rq.ring.size();
        let free = self.rq_ci.wrapping_add(size).wrapping_sub(self.rq_pi);
        if free < min.max(1) {
            return;
        }
        let mask = size - 1;
        let from = (self.rq_pi & mask) as usize;
        let first = (free as usize).min(size as usize - from);
        let (low, high) = self.bufs.split_at_mut(from);
        let got = if first == free as usize {
            // The usual case: the free slots do not wrap, one copy fills them.
            self.pool.alloc_bulk(&mut high[..first])
        } else {
            self.pool
                .alloc_bulk2(&mut high[..first], &mut low[..free as usize - first])
        };
        if got < free as usize {
            self.stats.no_buffers += 1;
        }
        if got == 0 {
            return;
        }
        let pi0 = self.rq_pi;
        // At most two wrap-free pieces, matching how the pool filled the buffer slots.
        let n1 = got.min(first);
        self.post(pi0, from, n1);
        if got > n1 {
            self.post_wrapped(pi0.wrapping_add(n1 as u32), got - n1);
        }
        self.rq_pi = pi0.wrapping_add(got as u32);
        self.rq.ring.ring_doorbell(self.rq_pi);
    }

    /// Writes the addresses of the buffers in slots `at .. at + n` of the ring (which must not
    /// wrap) into their WQEs, from RQ index `pi` on.
    #[inline(always)]
    fn post(&mut self, pi: u32, at: usize, n: usize) {
        let geo = self.pool.geometry();
        let off = u32::from(self.data_off);
        let mut rq = self.rq.ring.writer();
        let (segs, bufs) = (rq.segment(pi, n), &self.bufs[at..at + n]);
        #[cfg(target_arch = "x86_64")]
        let (segs, bufs) = if self.avx2 {
            let (base, bsize) = geo.base_and_size(off);
            let bsize = u32::try_from(bsize).expect("a pool's buffer size is a u32");
            // SAFETY: `avx2` is set only where the CPU reports AVX2 (`RxCore::new`).
            #[allow(unsafe_code)]
            let k = unsafe { avx2::post_addrs_avx2(segs, bufs, base, bsize) };
            (&mut segs[k..], &bufs[k..])
        } else {
            (segs, bufs)
        };
        // Eight WQEs per iteration: the loop's own count and pointer steps per WQE fall from
        // about two instructions to a quarter.
        let mut s8 = segs.chunks_exact_mut(8);
        let mut b8 = bufs.chunks_exact(8);
        for (s, b) in (&mut s8).zip(&mut b8) {
            for i in 0..8 {
                s[i].addr = Be64::new(geo.buf_addr(b[i], off));
            }
        }
        for (wqe, &idx) in s8.into_remainder().iter_mut().zip(b8.remainder()) {
            wqe.addr = Be64::new(geo.buf_addr(idx, off));
        }
    }

    /// [`RxCore::post`] for the piece of a refill after the ring's end (slots from 0), out
    /// of line: most refills do not wrap.
    #[inline(never)]
    fn post_wrapped(&mut self, pi: u32, n: usize) {
        self.post(pi, 0, n);
    }

    /// The CQE at `ci` when it is not a good packet: nothing yet, a completion error, a length
    /// the posted buffer cannot hold, or something never asked for.
    #[cold]
    #[inline(never)]
    fn poll_other(&mut self, ci: u32, rq_ci: u32) -> Other {
        let cqe = match self.cq.reader().poll_rx(ci) {
            RxPoll::Empty => return Other::Empty,
            RxPoll::Packet(cqe) | RxPoll::Other(cqe) => *cqe,
        };
        if rq_ci == self.rq_pi {
            // A completion for a WQE that was never posted.
            self.stats.errors.bad_cqe += 1;
            return Other::Fatal(syndrome::LOCAL_QP_OP);
        }
        let buf = self.bufs[rq_ci as usize & (self.bufs.len() - 1)];
        if cqe.opcode() == CQE_RESP_SEND && cqe.format() == 0 {
            if cqe.byte_cnt.get() <= self.room {
                // The device wrote it after the fast path looked: take it there.
                return Other::Ready;
            }
            // More than the posted buffer holds: the CQE cannot be trusted, and the packet must
            // not be handed up with a length past its buffer.
            self.stats.errors.bad_cqe += 1;
            self.pool.free_one(buf);
            return Other::Skipped;
        }
        if cqe.opcode() != CQE_RESP_ERR {
            // Compressed or scattered CQEs were never asked for; anything else is not a receive
            // completion (VPP flags the device in error).
            self.stats.errors.bad_cqe += 1;
            return Other::Fatal(syndrome::LOCAL_QP_OP);
        }
        if let Err(synd) = self.error_cqe(&cqe) {
            return Other::Fatal(synd);
        }
        // The WQE was consumed without a packet; its buffer goes back to the pool and the slot
        // is refilled.
        self.pool.free_one(buf);
        Other::Skipped
    }

    /// Every burst the one-segment path does not take: ring wraps, error and unexpected CQEs.
    /// Out of line, so that the common path keeps its registers.
    #[inline(never)]
    fn burst_general(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        let mut p = Progress::at(self.cq_ci, self.rq_ci);
        let posted = self.posted() as usize;
        let spare = out.spare();
        let room = spare.len().min(posted);
        let spare = &mut spare[..room];
        loop {
            let (n, ci, rq_ci) = (p.n, p.ci, p.rq_ci);
            let got = if self.timestamps {
                self.poll_packets::<true>(&mut spare[n..], ci, rq_ci, &mut p.bytes, &mut p.drops)
            } else {
                self.poll_packets::<false>(&mut spare[n..], ci, rq_ci, &mut p.bytes, &mut p.drops)
            };
            p.advance(got, got as u32);
            if p.n == spare.len() || matches!(self.cq.reader().poll_rx(p.ci), RxPoll::Empty) {
                break;
            }
            // Something other than a good packet (or nothing): the slow path decides.
            if !self.take_other(&mut p) {
                break;
            }
        }
        self.end_burst(out, p)
    }

    /// The slow path's verdict on the CQE at `p.ci` ([`RxCore::poll_other`]), applied to the
    /// burst: whether it goes on.
    fn take_other(&mut self, p: &mut Progress) -> bool {
        match self.poll_other(p.ci, p.rq_ci) {
            Other::Empty => false,
            Other::Ready => true,
            Other::Skipped => {
                p.advance(0, 1);
                true
            }
            Other::Fatal(synd) => {
                p.ci = p.ci.wrapping_add(1);
                p.error = Some(synd);
                false
            }
        }
    }

    /// [`RxCore::burst_general`] for a compressing CQ: plain CQEs as there, and compressed
    /// sessions expanded ([`RxCore::open_session`], [`RxCore::expand`]). `V`: 0, or 8 in the
    /// AVX2 build (the core's `zip_avx2`, the one caller with it), whose whole sessions' full
    /// arrays [`avx2::zip_chunk`] expands.
    #[inline(always)]
    fn burst_zip<const V: usize>(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        debug_assert!(
            V == 0 || (self.movbe && self.avx2),
            "the AVX2 build on a CPU without it"
        );
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        same_pool(&self.pool, out)?;
        let mut p = Progress::at(self.cq_ci, self.rq_ci);
        let posted = self.posted() as usize;
        let spare = out.spare();
        let room = spare.len().min(posted);
        let spare = &mut spare[..room];
        // The usual burst: no session open, and the CQE at the consumer index titles one that
        // fills the burst: expanded and done, without the general loop's bookkeeping.
        if self.zip.done == self.zip.n {
            if let Some((n, flags, drops)) = self.whole_session(p.ci, p.rq_ci, room) {
                if n as usize == room {
                    p.n = self.expand_whole::<V>(spare, p.ci, p.rq_ci, flags, &mut p.bytes);
                    p.drops = drops;
                    p.ci = p.ci.wrapping_add(n);
                    p.rq_ci = p.rq_ci.wrapping_add(n);
                    return self.end_burst(out, p);
                }
            } else if let Some((title, take)) = self.session_prefix(p.ci, p.rq_ci, room) {
                // A session longer than the burst: its first whole groups of eight here, the
                // rest (from a group's start) in the next bursts, one array at a time.
                let mut zip = Zip::open(&title, p.ci, &self.cq);
                let slots = &mut spare[..take as usize];
                p.n = self.expand_whole::<V>(slots, p.ci, p.rq_ci, zip.flags, &mut p.bytes);
                p.drops = u64::from(zip.drops) * u64::from(take);
                zip.done = take;
                self.zip = zip;
                p.ci = p.ci.wrapping_add(take);
                p.rq_ci = p.rq_ci.wrapping_add(take);
                return self.end_burst(out, p);
            }
        }
        loop {
            if self.zip.done != self.zip.n {
                let (handed, used) = self.expand(&mut spare[p.n..], p.rq_ci, &mut p.bytes, &mut p.drops);
                p.advance(handed, used);
                if self.zip.done != self.zip.n {
                    break; // the burst is full
                }
            }
            if p.n == spare.len() {
                break;
            }
            // One look at the next CQE decides: a session (the usual case on a compressing CQ), a
            // run of plain CQEs, nothing, or the slow path.
            match self.cq.reader().poll_rx(p.ci) {
                RxPoll::Empty => break,
                RxPoll::Packet(_) => {
                    let (n, ci, rq_ci) = (p.n, p.ci, p.rq_ci);
                    let got = self.poll_packets::<false>(&mut spare[n..], ci, rq_ci, &mut p.bytes, &mut p.drops);
                    p.advance(got, got as u32);
                    // None taken: a length past the buffer (or a CQE never posted for), which
                    // the slow path decides on.
                    if got == 0 && !self.take_other(&mut p) {
                        break;
                    }
                }
                RxPoll::Other(c) if c.is_title() => {
                    if let Some((n, flags, drops)) = self.whole_session(p.ci, p.rq_ci, spare.len() - p.n) {
                        p.drops += drops;
                        let slots = &mut spare[p.n..p.n + n as usize];
                        let handed = self.expand_whole::<V>(slots, p.ci, p.rq_ci, flags, &mut p.bytes);
                        p.advance(handed, n);
                        continue;
                    }
                    let title = *c;
                    if let Err(synd) = self.open_session(&title, p.ci, p.rq_ci) {
                        p.ci = p.ci.wrapping_add(1);
                        p.error = Some(synd);
                        break;
                    }
                }
                RxPoll::Other(_) => {
                    if !self.take_other(&mut p) {
                        break;
                    }
                }
            }
        }
        self.end_burst(out, p)
    }

    /// The session titled at CQ index `ci` (buffers from RQ index `rq_ci` on) if there is one
    /// that [`RxCore::expand_whole`] takes: at least two packets, all of it fits `left` slots
    /// of the burst and the posted WQEs, and neither ring wraps inside it. Its packet count, the title's flags (every
    /// packet's) and the device drops it reports (the title's count, per packet).
    #[inline(always)]
    fn whole_session(&self, ci: u32, rq_ci: u32, left: usize) -> Option<(u32, u32, u64)> {
        let RxPoll::Other(c) = self.cq.reader().poll_rx(ci) else {
            return None;
        };
        let n = c.mini_cqe_count();
        let (cq_size, rq_size) = (self.cq.size(), self.bufs.len() as u32);
        // A session of one packet has its array past its one slot (at the title + 1): the
        // general path takes it (`open_session`), reading the array wherever the ring puts it.
        (c.is_title()
            && (2..=left as u32).contains(&n)
            && n <= self.rq_pi.wrapping_sub(rq_ci)
            && (ci & (cq_size - 1)) + n <= cq_size
            && (rq_ci & (rq_size - 1)) + n <= rq_size)
            .then(|| {
                let flags = FLAGS_LUT[(c.hdr_type_vlan() >> 16) as usize & 0x7ff];
                (n, flags, u64::from(c.rx_drops()) * u64::from(n))
            })
    }

    /// The session titled at CQ index `ci` (buffers from RQ index `rq_ci` on) when it is longer
    /// than the `room` of the burst: its title and how many of its packets, the whole groups of
    /// eight that fit (at least one), [`RxCore::expand_whole`] takes now, as neither ring
    /// wraps inside them and it claims no more packets than there are posted WQEs.
    #[inline(never)]
    fn session_prefix(&self, ci: u32, rq_ci: u32, room: usize) -> Option<(Cqe64, u32)> {
        let RxPoll::Other(c) = self.cq.reader().poll_rx(ci) else {
            return None;
        };
        let (n, take) = (c.mini_cqe_count(), room as u32 / MINI * MINI);
        let (cq_size, rq_size) = (self.cq.size(), self.bufs.len() as u32);
        (c.is_title()
            && n > room as u32
            && take > 0
            && n <= self.rq_pi.wrapping_sub(rq_ci)
            && (ci & (cq_size - 1)) + take <= cq_size
            && (rq_ci & (rq_size - 1)) + take <= rq_size)
            .then_some((*c, take))
    }

    /// Starts the session whose title is at `ci`: its packet count, flags and drop count, and its
    /// first mini-CQE array (at `ci + 1`). A title that claims more packets than there are posted
    /// WQEs (or fewer than one) is a broken CQ.
    #[inline(always)]
    fn open_session(&mut self, title: &Cqe64, ci: u32, rq_ci: u32) -> Result<(), u8> {
        let n = title.mini_cqe_count();
        if n == 0 || n > self.rq_pi.wrapping_sub(rq_ci) {
            self.stats.errors.bad_cqe += 1;
            return Err(syndrome::LOCAL_QP_OP);
        }
        self.zip = Zip::open(title, ci, &self.cq);
        Ok(())
    }

    /// Hands up the current session's next packets into `slots` (buffers from RQ index `rq_ci`
    /// on), one mini-CQE array at a time, and invalidates the slots it consumed (all but the
    /// title, which the device's next write of that slot replaces; DPDK stamps the same ones).
    /// Returns the packets handed up and the CQ/RQ slots consumed (more when a mini-CQE's length
    /// does not fit its buffer: that packet is dropped as a bad CQE, its buffer freed).
    #[inline(always)]
    fn expand(&mut self, slots: &mut [Packet], rq_ci: u32, bytes: &mut u64, drops: &mut u64) -> (usize, u32) {
        let cq = self.cq.reader();
        let (len_off, room) = (Packet::len_off(0, self.data_off), self.room);
        let rq_size = self.bufs.len();
        let take = (slots.len() as u32).min(self.zip.n - self.zip.done);
        let (mut used, mut handed) = (0u32, 0usize);
        let mut byte_sum = 0u32;
        while used < take {
            let k = self.zip.done;
            let pos = k % MINI;
            self.zip.next_array(k, &self.cq);
            // A run within one array that crosses neither the RQ's end: plain slices, zipped.
            let r = rq_ci.wrapping_add(used) as usize & (rq_size - 1);
            let cnt = (MINI - pos).min(take - used).min((rq_size - r) as u32) as usize;
            let minis = &self.zip.minis[pos as usize..pos as usize + cnt];
            let bufs = &self.bufs[r..r + cnt];
            let out = &mut slots[handed..handed + cnt];
            let mut longest = 0u32;
            let flags = self.zip.flags;
            for ((slot, m), &buf) in out.iter_mut().zip(minis).zip(bufs) {
                let len = m.byte_cnt.get();
                longest = longest.max(len);
                slot.buf = buf;
                slot.set_len_off(len | len_off);
                slot.rss_hash = m.rx_hash();
                slot.flags = flags;
                byte_sum = byte_sum.wrapping_add(len);
            }
            let good = if longest > room {
                drop_long(
                    &self.pool,
                    &mut self.stats.errors.bad_cqe,
                    room,
                    out,
                    minis,
                    bufs,
                    &mut byte_sum,
                )
            } else {
                cnt
            };
            cq.invalidate_run(self.zip.head.wrapping_add(k.max(1)), k + cnt as u32 - k.max(1));
            self.zip.done += cnt as u32;
            used += cnt as u32;
            handed += good;
        }
        *bytes += u64::from(byte_sum);
        *drops += u64::from(self.zip.drops) * u64::from(used);
        (handed, used)
    }

    /// [`RxCore::expand`] for a whole session of `slots.len()` packets titled at CQ index
    /// `ci` (with buffers from RQ index `rq_ci` on, `flags` every packet's), which crosses
    /// neither ring's end: each full array of eight is one straight-line body ([`zip_chunk`],
    /// or four mini-CQEs a step with AVX2, [`avx2::zip_chunk`], where `V` is not 0: only in the
    /// AVX2 build), its mini-CQEs read in place and its slots invalidated right after.
    /// Returns the packets handed up (fewer when a mini-CQE's length does not fit its buffer, as
    /// in `expand`).
    #[inline(always)]
    fn expand_whole<const V: usize>(
        &mut self,
        slots: &mut [Packet],
        ci: u32,
        rq_ci: u32,
        flags: u32,
        bytes: &mut u64,
    ) -> usize {
        const M: usize = MINI as usize;
        let n = slots.len();
        let run = (self.cq.reader().session(ci, n as u32))
            .expect("`whole_session` and `session_prefix` checked the CQ's end");
        let r = rq_ci as usize & (self.bufs.len() - 1);
        let bufs = &self.bufs[r..r + n];
        let z = ZipChunk {
            lo: Packet::len_off(0, self.data_off),
            room: self.room,
            flags,
        };
        // Bytes: the low half of the sum of the mini-CQE words is the sum of their byte counts
        // (mod 2^32, as `expand` keeps it), one add per packet.
        let mut sum = 0u64;
        let full = n / M * M;
        let (s_full, s_rest) = slots.split_at_mut(full);
        let (b_full, b_rest) = bufs.split_at(full);
        let (pool, stats) = (&*self.pool, &mut self.stats);
        let bad = stats.errors.bad_cqe;
        let mut chunks = s_full.chunks_exact_mut(M).zip(b_full.chunks_exact(M));
        let (first, rest) = run.full_arrays();
        if let (Some(a), Some((o, b))) = (first, chunks.next()) {
            chunk::<V, 1>(&z, a, o, b, &mut sum, pool, stats);
        }
        for (a, (o, b)) in rest.zip(chunks) {
            chunk::<V, 0>(&z, a, o, b, &mut sum, pool, stats);
        }
        #[cfg(test)]
        if V != 0 {
            self.rq.vector_arrays += (full / M) as u64;
        }
        if !s_rest.is_empty() {
            // The last array, partly used.
            let minis = run.array((full / M) as u32);
            let mut longest = 0u32;
            for ((slot, m), &buf) in s_rest.iter_mut().zip(minis).zip(b_rest) {
                let w = m.hash_len();
                longest = longest.max(w as u32);
                sum = sum.wrapping_add(w);
                z.put(slot, w, buf);
            }
            if longest > z.room {
                mark_long(&z, s_rest, minis, &mut sum, pool, stats);
            }
            run.invalidate_range(full.max(1), n);
        }
        *bytes += u64::from(sum as u32);
        // Packets were marked (and counted as bad CQEs): move the others up.
        if stats.errors.bad_cqe != bad {
            compact(slots)
        } else {
            n
        }
    }
}

/// Receive WQEs of several buffers (frames longer than one buffer, `QueueConfig::rx_max_frame`)
/// and VLAN stripping: a path of their own, so that the one-buffer path is unchanged. As VPP's
/// legacy multi-segment RX (`rdma/input.c`, 02fd4f965cd): each WQE keeps `sg` buffers posted;
/// a frame fills them in order (the device scatters: PRM receive WQE, data segments), so the
/// CQE's byte count says how many hold data; those go up as one chained packet and only they
/// are replaced, the rest stay posted in their WQE.
impl RxCore<Cyclic> {
    /// Posts every free WQE once at least `min` are free, each with all `sg` buffers (a WQE
    /// short of one is not posted: a frame might need it); buffers that stayed in a WQE are
    /// posted again as they are. Cold and out of line: the one-buffer queue's bursts, which
    /// share the core's end with this one's, neither carry it nor weigh their own refill
    /// against it.
    #[cold]
    #[inline(never)]
    fn refill_sg(&mut self, min: u32) {
        let (size, sg) = (self.bufs.len() as u32 / self.rq.sg, self.rq.sg as usize);
        let free = self.rq_ci.wrapping_add(size).wrapping_sub(self.rq_pi);
        if free < min.max(1) {
            return;
        }
        let geo = self.pool.geometry();
        let off = u32::from(self.data_off);
        let mut posted = 0;
        'wqes: while posted < free {
            let w = self.rq_pi.wrapping_add(posted) & (size - 1);
            let slots = &mut self.bufs[w as usize * sg..(w as usize + 1) * sg];
            for b in slots.iter_mut().filter(|b| **b == NO_BUF) {
                let mut one = [0u32];
                if self.pool.alloc_bulk(&mut one) == 0 {
                    self.stats.no_buffers += 1;
                    break 'wqes;
                }
                *b = one[0];
            }
            let mut rq = self.rq.ring.writer();
            let segs = rq.segment(w * self.rq.seg_stride, sg);
            for (d, &b) in segs.iter_mut().zip(slots.iter()) {
                d.addr = crate::dv::prm::Be64::new(geo.buf_addr(b, off));
            }
            posted += 1;
        }
        if posted > 0 {
            self.rq_pi = self.rq_pi.wrapping_add(posted);
            self.rq.ring.ring_doorbell(self.rq_pi);
        }
    }

    /// Returns every buffer the ring holds to the pool, posted or not.
    fn release_sg(&mut self) {
        for b in self.bufs.iter_mut().filter(|b| **b != NO_BUF) {
            self.pool.free_one(*b);
            *b = NO_BUF;
        }
        self.rq_ci = self.rq_pi;
    }

    /// [`RxQueue::rx_burst`] for a queue with scatter or VLAN stripping: one CQE at a time, and
    /// on a compressing CQ one mini-CQE at a time. A mini-CQE's byte count says how many of its
    /// WQE's buffers hold the frame exactly as a plain CQE's does; its flags and VLAN tag are
    /// the title's (DPDK `mlx5_rx.c`: `mlx5_rx_burst` polls compressed sessions on scattered
    /// queues through `mlx5_rx_poll_len`, and `rxq_cq_to_mbuf` takes `vlan_info` and the
    /// VLAN-stripped flag from the title CQE for every mini-CQE of the hash format; Linux
    /// `mlx5e_decompress_cqe` copies the title into each packet's CQE but for byte count and
    /// hash), which is why the device compresses only completions equal in those fields.
    #[inline(never)]
    fn burst_offload(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        same_pool(&self.pool, out)?;
        let size = self.bufs.len() / self.rq.sg as usize;
        let (mut n, mut chains, mut bytes, mut drops) = (0, 0, 0u64, 0u64);
        let mut error = None;
        let (mut ci, mut rq_ci) = (self.cq_ci, self.rq_ci);
        let spare_len = out.spare().len();
        while n < spare_len {
            if self.zip.done != self.zip.n {
                // The next packet of a session (one CQ slot and one WQE each, as plain CQEs).
                let m = self.next_mini();
                let w = rq_ci as usize & (size - 1);
                ci = ci.wrapping_add(1);
                rq_ci = rq_ci.wrapping_add(1);
                drops += u64::from(self.zip.drops);
                let len = m.byte_cnt.get();
                if let Some((p, chained)) = self.take_frame(w, len, m.rx_hash(), self.rq.zip_hv) {
                    out.spare()[n] = p;
                    n += 1;
                    chains += usize::from(chained);
                    bytes += u64::from(len);
                }
                continue;
            }
            let Some(cqe) = self.cq.poll(ci) else { break };
            if rq_ci == self.rq_pi {
                // A completion for a WQE that was never posted.
                self.stats.errors.bad_cqe += 1;
                error = Some(syndrome::LOCAL_QP_OP);
                ci = ci.wrapping_add(1);
                break;
            }
            if self.zip_on && cqe.is_title() {
                if let Err(synd) = self.open_session(&cqe, ci, rq_ci) {
                    ci = ci.wrapping_add(1);
                    error = Some(synd);
                    break;
                }
                self.rq.zip_hv = cqe.hdr_type_vlan();
                continue;
            }
            ci = ci.wrapping_add(1);
            let w = rq_ci as usize & (size - 1);
            rq_ci = rq_ci.wrapping_add(1);
            if cqe.opcode() == CQE_RESP_ERR {
                // The WQE was consumed without a packet; its buffers stay in its slot and are
                // posted again by the refill.
                if let Err(synd) = self.error_cqe(&cqe) {
                    error = Some(synd);
                    break;
                }
                continue;
            }
            if cqe.opcode() != CQE_RESP_SEND || cqe.format() != 0 {
                self.stats.errors.bad_cqe += 1;
                error = Some(syndrome::LOCAL_QP_OP);
                break;
            }
            let len = cqe.byte_cnt.get();
            drops += u64::from(cqe.rx_drops());
            let Some((mut p, chained)) = self.take_frame(w, len, cqe.rx_hash_res.get(), cqe.hdr_type_vlan()) else {
                continue;
            };
            if self.timestamps {
                p.flags |= flags::TIMESTAMP;
                p.timestamp = self.clock.ns(cqe.timestamp.get());
            }
            out.spare()[n] = p;
            n += 1;
            chains += usize::from(chained);
            bytes += u64::from(len);
        }
        let p = Progress {
            n,
            chains,
            ci,
            rq_ci,
            bytes,
            drops,
            error,
            empty: false,
        };
        self.end_burst(out, p)
    }

    /// The frame of `len` bytes in WQE `w` (RSS hash `hash`, CQE flags and VLAN word `hv`) as a
    /// packet, chained when it fills several buffers (whether it is the second value); those
    /// buffers leave the ring, the rest of the WQE's stay posted. None when `len` is more than
    /// the WQE's buffers hold: the completion cannot be trusted, counted as a bad CQE, and the
    /// buffers stay posted.
    #[inline(always)]
    fn take_frame(&mut self, w: usize, len: u32, hash: u32, hv: u32) -> Option<(Packet, bool)> {
        let sg = self.rq.sg as usize;
        let used = len.max(1).div_ceil(self.room) as usize;
        if used > sg {
            self.stats.errors.bad_cqe += 1;
            return None;
        }
        let slots = w * sg..w * sg + used;
        let mut p = self.frame(
            &self.bufs[slots.clone()],
            len,
            hash,
            FLAGS_LUT[(hv >> 16) as usize & 0x7ff],
        );
        self.bufs[slots].fill(NO_BUF);
        if self.rq.vlan_strip && (hv >> 16) as u16 & cqe_flags::VLAN_STRIPPED != 0 {
            p.flags |= flags::VLAN_STRIPPED;
            p.vlan_tci = hv as u16;
        }
        Some((p, used > 1))
    }

    /// The current session's next mini-CQE, its slot invalidated (all but the title's, as
    /// [`RxCore::expand`] does), loading the session's next array when the last is used up.
    #[inline(always)]
    fn next_mini(&mut self) -> MiniCqe {
        let cq = self.cq.reader();
        let k = self.zip.done;
        if k.is_multiple_of(MINI) && k != 0 {
            self.zip.minis = cq.mini_array(self.zip.head.wrapping_add(mini_array_slot(k / MINI)));
        }
        let m = self.zip.minis[(k % MINI) as usize];
        if k != 0 {
            cq.invalidate(self.zip.head.wrapping_add(k));
        }
        self.zip.done = k + 1;
        m
    }
}

/// Whether a receive CQ of a cyclic queue should compress: asked for
/// (`QueueConfig::rx_cqe_compression`) and no timestamps (mini-CQEs carry none: DPDK
/// `mlx5_devx.c`). Any number of buffers per WQE (`_sg`): a mini-CQE's byte count says how many
/// a frame fills, as a plain CQE's does; and with VLAN stripping, as the device compresses only
/// completions whose tag and flags equal the title's, the title's tag is every packet's
/// ([`RxCore::burst_offload`]).
pub(crate) fn wants_compression(cfg: &QueueConfig, _sg: u32) -> bool {
    cfg.rx_cqe_compression && !cfg.rx_timestamps
}

/// Buffers per receive WQE for `cfg` over `pool`: 1, or as many as an `rx_max_frame` frame
/// fills (each buffer's data room after the headroom).
pub(crate) fn rx_segments(cfg: &QueueConfig, pool: &Pool) -> Result<u32, Error> {
    let room = pool.data_room();
    let sg = cfg.rx_max_frame.div_ceil(room).max(1);
    if sg > crate::dv::prm::MAX_RQ_SCATTER {
        return Err(Error::config(format!(
            "rx_max_frame {} needs {sg} buffers of {room} bytes per frame (at most {})",
            cfg.rx_max_frame,
            crate::dv::prm::MAX_RQ_SCATTER
        )));
    }
    Ok(sg)
}

/// Some packets of a run of [`RxCore::expand`] are longer than their buffers (`room`): those
/// are dropped (their buffers back to `pool`, counted in `bad`, their bytes taken back) and the
/// rest moved up. Returns how many remain.
#[cold]
#[inline(never)]
fn drop_long(
    pool: &Pool,
    bad: &mut u64,
    room: u32,
    out: &mut [Packet],
    minis: &[MiniCqe],
    bufs: &[u32],
    byte_sum: &mut u32,
) -> usize {
    let mut good = 0;
    for (i, (m, &buf)) in minis.iter().zip(bufs).enumerate() {
        if m.byte_cnt.get() > room {
            *byte_sum = byte_sum.wrapping_sub(m.byte_cnt.get());
            *bad += 1;
            pool.free_one(buf);
        } else {
            out[good] = out[i];
            good += 1;
        }
    }
    good
}

/// What every packet of a session expanded by [`RxCore::expand_whole`] shares: `off` as
/// [`Packet::len_off`] bits, the buffers' data room and the title's flags.
struct ZipChunk {
    lo: u32,
    room: u32,
    flags: u32,
}

impl ZipChunk {
    /// One packet from its mini-CQE word `w` (`hash << 32 | byte_cnt`) and buffer.
    #[inline(always)]
    fn put(&self, slot: &mut Packet, w: u64, buf: u32) {
        slot.buf = buf;
        slot.set_len_off_hash(w, self.lo);
        slot.flags = self.flags;
    }
}

/// [`zip_chunk`], or [`avx2::zip_chunk`] in the AVX2 build (`V` not 0: only under the core's
/// `zip_avx2`, which `RxCore::rx_burst` calls only where the CPU has AVX2 and MOVBE).
#[inline(always)]
fn chunk<const V: usize, const FIRST: usize>(
    z: &ZipChunk,
    a: crate::dv::ring::ZipArray<'_, FIRST>,
    out: &mut [Packet],
    bufs: &[u32],
    sum: &mut u64,
    pool: &Pool,
    stats: &mut QueueStats,
) {
    #[cfg(target_arch = "x86_64")]
    if V != 0 {
        #[allow(unsafe_code)]
        // SAFETY: `V` is not 0 only inside the core's `zip_avx2`, compiled for AVX2 and called
        // only where the CPU reports it.
        unsafe {
            avx2::zip_chunk(z, a, out, bufs, sum, pool, stats)
        };
        return;
    }
    zip_chunk(z, a, out, bufs, sum, pool, stats)
}

/// The eight packets of mini-CQE array `a` into `out` (buffers `bufs`), their bytes added to
/// `sum`; then the array's slots are invalidated. A length that does not fit its buffer is
/// marked by [`mark_long`] (and counted in `stats` as a bad CQE). Straight-line: the compiler
/// unrolls the eight.
#[inline(always)]
fn zip_chunk<const FIRST: usize>(
    z: &ZipChunk,
    a: crate::dv::ring::ZipArray<'_, FIRST>,
    out: &mut [Packet],
    bufs: &[u32],
    sum: &mut u64,
    pool: &Pool,
    stats: &mut QueueStats,
) {
    const M: usize = MINI as usize;
    let minis = a.minis();
    let (out, bufs): (&mut [Packet; M], &[u32; M]) = (out.try_into().unwrap(), bufs.try_into().unwrap());
    let mut longest = 0u32;
    let mut acc = *sum;
    for i in 0..M {
        let w = minis[i].hash_len();
        longest = longest.max(w as u32);
        acc = opaque(acc.wrapping_add(w));
        z.put(&mut out[i], w, bufs[i]);
    }
    *sum = acc;
    if longest > z.room {
        mark_long(z, out, minis, sum, pool, stats);
    }
    a.invalidate();
}

/// `v`, through an empty asm statement the compiler cannot see into: a running sum passed through
/// it stays a chain of adds. Without it the compiler re-associates a straight-line body's eight
/// adds into a tree, which keeps all eight values live and spills the body's pointers (fewer
/// instructions per packet with it, measured with `scripts/callgrind.sh`). No instruction is
/// emitted.
#[inline(always)]
fn opaque(v: u64) -> u64 {
    let mut v = v;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[allow(unsafe_code)]
    // SAFETY: the template is a comment: no instruction runs, no memory, stack or flag is
    // touched (as the options say), and the register comes back with the value it went in with.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) v, options(pure, nomem, nostack, preserves_flags))
    };
    v
}

/// Some packets `out` (from `minis`) of [`RxCore::expand_whole`] are longer than their
/// buffers: each such buffer goes back to the pool, the packet is counted as a bad CQE, its
/// bytes are taken back from `sum` and its slot marked (`buf` [`NO_BUF`]) for [`compact`].
#[cold]
#[inline(never)]
fn mark_long(z: &ZipChunk, out: &mut [Packet], minis: &[MiniCqe], sum: &mut u64, pool: &Pool, stats: &mut QueueStats) {
    for (slot, m) in out.iter_mut().zip(minis) {
        let len = m.byte_cnt.get();
        if len > z.room {
            *sum = sum.wrapping_sub(u64::from(len));
            stats.errors.bad_cqe += 1;
            pool.free_one(slot.buf);
            slot.buf = NO_BUF;
        }
    }
}

/// Moves the packets not marked by [`mark_long`] up; returns how many there are.
#[cold]
#[inline(never)]
fn compact(slots: &mut [Packet]) -> usize {
    let mut good = 0;
    for i in 0..slots.len() {
        if slots[i].buf != NO_BUF {
            slots[good] = slots[i];
            good += 1;
        }
    }
    good
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;

/// What the slow path found at a consumer index.
enum Other {
    Empty,
    /// A good packet after all (it arrived between two looks).
    Ready,
    /// A CQE that consumed its WQE without a packet: skip both.
    Skipped,
    /// An error that needs a queue reset.
    Fatal(u8),
}

#[cfg(test)]
#[cfg(feature = "model")] // queues over the model's rings
#[allow(unsafe_code)] // building queues over the model's rings
mod tests {
    use std::rc::Rc;

    use crate::dv::prm::MiniFormat;
    use crate::mem::pool::{Burst, Pool, PoolConfig};
    use crate::model::device::{Link, ModelConfig, Nic};
    use crate::model::NicQueues;
    use crate::rx::dv::DvRxQueue;
    use crate::tx::dv::DvTxQueue;
    use crate::{QueueConfig, RxQueue, TxQueue};

    /// Frame `seq`: an IPv4/UDP header whose addresses and ports follow `seq` (so that the
    /// device's RSS hash and flags differ from frame to frame), the rest `seq`'s low byte.
    fn udp4_frame(seq: u64, d: &mut [u8]) {
        let len = d.len() as u16;
        d.fill(seq as u8);
        d[..8].copy_from_slice(&seq.to_be_bytes());
        d[12..16].copy_from_slice(&[0x08, 0x00, 0x45, 0]);
        d[16..18].copy_from_slice(&(len - 14).to_be_bytes());
        d[22..26].copy_from_slice(&[64, 17, 0, 0]);
        d[26..30].copy_from_slice(&(seq as u32).to_be_bytes());
        d[30..34].copy_from_slice(&[10, 0, 0, 1]);
        d[34..38].copy_from_slice(&(seq as u32 ^ 0x5a5a_1234).to_be_bytes());
        d[38..40].copy_from_slice(&(len - 34).to_be_bytes());
    }

    /// Compressed sessions through the AVX2 build (full mini-CQE arrays four a step, where the
    /// CPU has AVX2), the MOVBE one and the portable one: frames of many lengths arrive byte-identical and in order, with
    /// bursts that one session fills exactly (`expand_whole` before the general loop), bursts
    /// that hold a session with room to spare, and sessions larger than the burst (their first
    /// whole groups of eight in place, the rest by `expand` across bursts), through ring wraps;
    /// the byte counts of both ends agree, every build hands up the same hashes and flags, and
    /// every buffer comes back; the AVX2 build expanded arrays, the others none.
    #[test]
    fn movbe_and_portable_builds_expand_the_same_sessions() {
        let mut digests = Vec::new();
        for (movbe, avx2) in [(true, true), (true, false), (false, false)] {
            let fast = format!("movbe {movbe}, avx2 {avx2}");
            let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], ModelConfig::default()).unwrap();
            let pool: Rc<Pool> = Pool::new(PoolConfig {
                buffers: 1024,
                ..PoolConfig::default()
            })
            .unwrap();
            let lkey = nic.register_mr(pool.region());
            let cfg = QueueConfig {
                size: 128,
                ..QueueConfig::default()
            };
            let tx_cq = nic.create_cq(128).unwrap();
            let sq = nic.create_sq(0, 128, tx_cq.cqn()).unwrap();
            // SAFETY: the model made these rings for these queues alone; the infos keep them alive.
            let mut tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &cfg, nic.caps(), nic.control()) }.unwrap();
            let rx_cq = nic.create_cq_with(128, Some(MiniFormat::Hash)).unwrap();
            let (rwq, wq) = nic.create_rq(1, 128, rx_cq.cqn()).unwrap();
            // SAFETY: as above.
            let mut rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, &cfg, nic.control()) }.unwrap();
            assert!(rx.core.zip_on);
            rx.set_cpu_features(movbe, avx2);
            let (mut digest, mut hashes) = (0u64, 0u64);
            let len_of = |seq: u64| 60 + (seq * 37 % 1400) as usize;
            let (mut sent, mut seen) = (0u64, 0u64);
            let mut expect = [0u8; 2048];
            for round in 0..300u64 {
                // Steps of 1 to 40 frames; receive bursts of exactly the step, of 64, or of 16.
                let n = 1 + (round * 7 % 40) as usize;
                let cap = match round % 3 {
                    0 => n,
                    1 => 64,
                    _ => 16,
                };
                let mut out = Burst::new(&pool, n);
                assert_eq!(out.alloc(n, 60), n);
                for i in 0..n {
                    let len = len_of(sent + i as u64);
                    out.set_len(i, len).unwrap();
                    udp4_frame(sent + i as u64, out.data_mut(i));
                }
                sent += n as u64;
                while !out.is_empty() {
                    tx.tx_burst(&mut out).unwrap();
                }
                nic.step();
                let mut got = Burst::new(&pool, cap);
                while seen < sent {
                    assert!(rx.rx_burst(&mut got).unwrap() > 0, "frame {seen} missing ({fast})");
                    for i in 0..got.len() {
                        let len = len_of(seen);
                        udp4_frame(seen, &mut expect[..len]);
                        assert!(got.data(i) == &expect[..len], "frame {seen} ({fast})");
                        let p = got.packet(i);
                        digest = digest.rotate_left(5) ^ u64::from(p.rss_hash()) << 32 ^ u64::from(p.flags());
                        hashes += u64::from(p.rss_hash() != 0);
                        seen += 1;
                    }
                    got.clear();
                }
                tx.reclaim().unwrap();
            }
            assert_eq!(tx.stats().bytes, rx.stats().bytes);
            assert_eq!(rx.stats().errors.bad_cqe, 0);
            assert!(hashes > 1000, "{hashes} frames with an RSS hash ({fast})");
            digests.push(digest);
            assert!(digests.iter().all(|&d| d == digest), "hashes and flags ({fast})");
            let vector = movbe && avx2 && crate::dv::cpu_has_movbe() && crate::dv::cpu_has_avx2();
            if !crate::dv::cpu_has_avx2() {
                eprintln!("no AVX2 on this CPU: the scalar builds alone run ({fast})");
            }
            assert_eq!(
                rx.core.rq.vector_arrays > 100,
                vector,
                "{} vector arrays ({fast})",
                rx.core.rq.vector_arrays
            );
            nic.step();
            tx.reclaim().unwrap();
            drop((tx, rx, sq, tx_cq, rx_cq, rwq));
            assert_eq!(pool.free_count(), pool.capacity(), "pool not full after teardown");
            nic.deregister_mr(lkey);
        }
    }
}
