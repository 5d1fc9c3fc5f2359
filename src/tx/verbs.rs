//! The ibverbs send path, for devices or setups without Direct Verbs: one chain of send WRs per
//! burst through `ibv_post_send`, one SGE per packet over the pool's MR, a completion asked for
//! every `tx_completion_every` WRs and on the burst's last one, completions collected with
//! `ibv_poll_cq` in bursts. Modelled on VPP `rdma/output.c` (`rdma_device_output_tx_ibverb`:
//! chained WRs, the last one signalled with the ring tail as `wr_id`) and rdma-pktgen's tx.c.
//!
//! Every WR carries as `wr_id` the buffer-ring position after it, so a completion frees
//! everything up to there in one bulk copy. The WR, SGE and WC arrays are allocated once; the
//! hot path allocates nothing, takes no lock and formats nothing.

use std::rc::Rc;
use std::sync::Arc;

use rdma_abi::*;

use crate::dv::prm::syndrome;
use crate::dv::ring::KeepAlive;
use crate::mem::pool::{flags, Burst, Pool};
use crate::rx::verbs::{wc_syndrome, DeviceFatal};
use crate::sys::rdma::{Cq, Mr, Qp};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, TxQueue};

/// Completions polled per `ibv_poll_cq` call (VPP polls 256 at a time; one per signalled burst
/// is the usual case, so a small array is enough).
const WC_BATCH: usize = 64;
use crate::flow::wire::ETH_MIN_FRAME;

pub(crate) struct VerbsTxQueue {
    qp: Arc<Qp>,
    cq: Arc<Cq>,
    _mr: Arc<Mr>,
    pool: Rc<Pool>,
    port: u8,
    lkey: u32,
    /// Buffers in flight in posting order, between `tail` and `head` (free-running).
    elts: Box<[u32]>,
    head: u32,
    tail: u32,
    wrs: Box<[ibv_send_wr]>,
    sges: Box<[ibv_sge]>,
    wcs: Box<[ibv_wc]>,
    signal_every: u32,
    since_signal: u32,
    max_frame: usize,
    recover: bool,
    /// Why the queue stopped for good, returned by every later call.
    failed: Option<QueueError>,
    /// Whether the device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`); read on the idle
    /// path only, as the DV queues read theirs.
    device_fatal: DeviceFatal,
    stats: QueueStats,
    /// Whatever the port needs kept while the queue lives (its hold on the queue id).
    _keep: KeepAlive,
}

impl VerbsTxQueue {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        qp: Arc<Qp>,
        cq: Arc<Cq>,
        mr: Arc<Mr>,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        max_frame: u32,
        port: u8,
        device_fatal: DeviceFatal,
        keep: KeepAlive,
    ) -> Result<VerbsTxQueue, Error> {
        let size = cfg.size as usize;
        let mut q = VerbsTxQueue {
            lkey: mr.lkey(),
            qp,
            cq,
            _mr: mr,
            pool: pool.clone(),
            port,
            elts: vec![0; size].into_boxed_slice(),
            head: 0,
            tail: 0,
            wrs: vec![ibv_send_wr::default(); size].into_boxed_slice(),
            sges: vec![ibv_sge::default(); size].into_boxed_slice(),
            wcs: vec![ibv_wc::default(); WC_BATCH].into_boxed_slice(),
            signal_every: cfg.tx_completion_every.clamp(1, cfg.size),
            since_signal: 0,
            max_frame: max_frame as usize,
            recover: cfg.recover,
            failed: None,
            device_fatal,
            stats: QueueStats::default(),
            _keep: keep,
        };
        // The chain never changes shape: WR i uses SGE i and is followed by WR i + 1. Boxed
        // slices do not move, so the pointers stay valid for the queue's life.
        let sge0 = q.sges.as_mut_ptr();
        let wr0 = q.wrs.as_mut_ptr();
        for (i, wr) in q.wrs.iter_mut().enumerate() {
            wr.sg_list = sge0.wrapping_add(i);
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.next = if i + 1 < size {
                wr0.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
        for s in q.sges.iter_mut() {
            s.lkey = q.lkey;
        }
        Ok(q)
    }

    fn in_flight_elts(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    fn free_until(&mut self, upto: u32) -> usize {
        let n = upto.wrapping_sub(self.tail) as usize;
        if n == 0 || n > self.in_flight_elts() as usize {
            return 0;
        }
        let size = self.elts.len();
        let from = self.tail as usize & (size - 1);
        let first = n.min(size - from);
        self.pool
            .free_bulk2(&self.elts[from..from + first], &self.elts[..n - first]);
        self.tail = upto;
        n
    }

    /// Collects completions; on an error completion recovers the QP or fails the queue.
    fn poll(&mut self) -> Result<usize, QueueError> {
        let mut freed = 0;
        let mut error: Option<u8> = None;
        loop {
            let n = self.poll_cq();
            if n <= 0 {
                if n < 0 {
                    error.get_or_insert(syndrome::LOCAL_QP_OP);
                }
                break;
            }
            for i in 0..n as usize {
                let wc = self.wcs[i];
                if wc.status == IBV_WC_SUCCESS {
                    freed += self.free_until(wc.wr_id as u32);
                } else {
                    let synd = wc_syndrome(wc.status);
                    self.stats.errors.count(crate::Failure::from_mlx5(synd).kind);
                    // Report the first real error, not the flushes that follow it.
                    match error {
                        None | Some(syndrome::WR_FLUSH) => error = Some(synd),
                        Some(_) => {}
                    }
                }
            }
            if (n as usize) < self.wcs.len() {
                break;
            }
        }
        if let Some(synd) = error {
            self.recover_or_fail(synd)?;
        }
        if freed == 0 && (self.device_fatal)() {
            return Err(self.stop_on_fatal());
        }
        Ok(freed)
    }

    /// The device stopped on a fatal error and reads nothing any more: every buffer in flight
    /// goes back to the pool (counted as dropped) and the queue fails.
    #[cold]
    fn stop_on_fatal(&mut self) -> QueueError {
        let head = self.head;
        self.stats.drops += self.free_until(head) as u64;
        self.failed = Some(QueueError::DeviceFatal);
        self.stats.device_fatal = 1;
        QueueError::DeviceFatal
    }

    #[inline(always)]
    fn poll_cq(&mut self) -> i32 {
        self.cq.poll(&mut self.wcs)
    }

    /// After an error completion the QP is in the error state: RESET → INIT → RTR → RTS (DPDK
    /// `mlx5_tx_error_cqe_handle` through `mlx5_queue_state_modify`), what was in flight is
    /// dropped and counted.
    #[cold]
    fn recover_or_fail(&mut self, synd: u8) -> Result<(), QueueError> {
        let reset = self.qp.reset();
        // Completions left over from before the reset belong to WRs that no longer exist.
        while self.poll_cq() > 0 {}
        if reset.is_err() {
            // The device may still read the buffers: they stay lost rather than reused.
            self.tail = self.head;
            self.failed = Some(QueueError::Failed(crate::Failure::from_mlx5(synd)));
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        let head = self.head;
        self.stats.drops += self.free_until(head) as u64;
        self.since_signal = 0;
        if !self.recover || self.qp.to_rts(self.port).is_err() {
            self.failed = Some(QueueError::Failed(crate::Failure::from_mlx5(synd)));
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        self.stats.recoveries += 1;
        Ok(())
    }
}

impl TxQueue for VerbsTxQueue {
    #[inline(never)]
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        same_pool(&self.pool, pkts)?;
        if self.in_flight_elts() > 0 {
            self.poll()?;
        }
        let size = self.elts.len();
        let room = size - self.in_flight_elts() as usize;
        let n_req = pkts.len().min(room);
        if n_req == 0 {
            return Ok(0);
        }
        let geo = self.pool.geometry();
        let mask = size - 1;
        let mut n = 0usize; // WRs built
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        let mut last_signalled = usize::MAX;
        for i in 0..n_req {
            let mut p = pkts.packets()[i];
            if !(ETH_MIN_FRAME..=self.max_frame).contains(&usize::from(p.len)) {
                // A runt goes out padded. Anything else the NIC would fail, and with it the WR
                // chain after it: dropped and counted instead.
                if !super::pad_runt(pkts, i) {
                    // (A chained packet too, `len` 0 here: this path posts one SGE per frame;
                    // every buffer of it goes back.)
                    self.pool.free_packet(&p);
                    dropped += 1;
                    continue;
                }
                p = pkts.packets()[i];
            }
            if p.flags & flags::TX_VLAN != 0 {
                // Verbs has no VLAN insertion on a raw-packet SEND: dropped and counted rather
                // than sent untagged (the Direct Verbs datapath inserts tags).
                self.pool.free_packet(&p);
                dropped += 1;
                continue;
            }
            let sge = &mut self.sges[n];
            sge.addr = geo.addr(&p);
            sge.length = u32::from(p.len);
            self.elts[self.head.wrapping_add(n as u32) as usize & mask] = p.buf;
            let wr = &mut self.wrs[n];
            wr.wr_id = u64::from(self.head.wrapping_add(n as u32 + 1));
            // rdma-core maps IBV_SEND_IP_CSUM to both L3 and L4 checksum offload (qp.c).
            let csum = if p.flags & (flags::TX_L3_CSUM | flags::TX_L4_CSUM) != 0 {
                IBV_SEND_IP_CSUM
            } else {
                0
            };
            self.since_signal += 1;
            wr.send_flags = if self.since_signal >= self.signal_every {
                self.since_signal = 0;
                last_signalled = n;
                IBV_SEND_SIGNALED | csum
            } else {
                csum
            };
            bytes += u64::from(p.len);
            n += 1;
        }
        if n > 0 {
            // The burst's last WR always asks for a completion, so its buffers come back
            // without waiting for the next burst.
            if last_signalled != n - 1 {
                self.wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
                self.since_signal = 0;
            }
            let saved = self.wrs[n - 1].next;
            self.wrs[n - 1].next = std::ptr::null_mut();
            let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
            #[allow(unsafe_code)]
            // This queue is the QP's only poster; the chain is wrs[0..n], each with one SGE.
            // SAFETY: every SGE lies in the pool's registered region, and those buffers stay in
            // `elts` until a completion covers them.
            let ret = unsafe { self.qp.post_send(self.wrs.as_mut_ptr(), &mut bad) };
            self.wrs[n - 1].next = saved;
            let posted = if ret == 0 {
                n
            } else {
                // `bad` is the first WR not posted; the rest of the chain was. The buffers of the
                // unposted WRs go back to the pool as drops.
                let k = (bad as usize).wrapping_sub(self.wrs.as_ptr() as usize) / std::mem::size_of::<ibv_send_wr>();
                let k = if bad.is_null() || k > n { 0 } else { k };
                for j in k..n {
                    let b = self.elts[self.head.wrapping_add(j as u32) as usize & mask];
                    self.pool.free_one(b);
                    bytes -= u64::from(self.sges[j].length);
                }
                dropped += (n - k) as u64;
                self.stats.errors.other += 1;
                k
            };
            self.head = self.head.wrapping_add(posted as u32);
            self.stats.bursts += 1;
        }
        self.stats.packets += n_req as u64 - dropped;
        self.stats.bytes += bytes;
        self.stats.drops += dropped;
        pkts.forget_front(n_req);
        Ok(n_req)
    }

    fn reclaim(&mut self) -> Result<usize, QueueError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.in_flight_elts() == 0 && (self.device_fatal)() {
            return Err(self.stop_on_fatal());
        }
        self.poll()
    }

    fn in_flight(&self) -> usize {
        self.in_flight_elts() as usize
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

impl Drop for VerbsTxQueue {
    fn drop(&mut self) {
        // Stop the device reading our buffers before they go back to the pool (a device that
        // died stopped by itself, and the queue gave them back then).
        if self.in_flight_elts() > 0 && self.qp.reset().is_ok() {
            let head = self.head;
            self.free_until(head);
        }
    }
}
