//! The ibverbs receive path: one SGE per receive WR over the pool's MR, refilled in chains of at
//! least `min(64, ring / 4)` through `ibv_post_wq_recv`, completions taken with `ibv_poll_cq`
//! in bursts. Modelled on VPP `rdma/input.c` (`rdma_device_input_refill` with
//! `ibv_post_wq_recv`, `ibv_poll_cq` for `byte_len`) and on the DV path's counters.
//!
//! A receive WQ completes in posting order, so the buffers sit in a ring in that order; the
//! WR, SGE and WC arrays are allocated once and the hot path allocates nothing.

use std::rc::Rc;
use std::sync::Arc;

use rdma_abi::*;

use super::REFILL_BATCH;
use crate::dv::prm::syndrome;
use crate::dv::ring::KeepAlive;
use crate::mem::pool::{flags, Burst, Packet, Pool};
use crate::sys::rdma::{Cq, Mr, Wq};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, RxQueue};

/// Asks the port whether its device reported a fatal error and stopped.
pub(crate) type DeviceFatal = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The mlx5 syndrome an ibverbs completion status stands for (rdma-core
/// providers/mlx5/cq.c `mlx5_handle_error_cqe` maps them one to one), for `Failure::from_mlx5`.
pub(crate) fn wc_syndrome(status: ibv_wc_status) -> u8 {
    match status {
        IBV_WC_LOC_LEN_ERR => syndrome::LOCAL_LENGTH,
        IBV_WC_LOC_QP_OP_ERR => syndrome::LOCAL_QP_OP,
        IBV_WC_LOC_PROT_ERR => syndrome::LOCAL_PROT,
        IBV_WC_WR_FLUSH_ERR => syndrome::WR_FLUSH,
        _ => crate::failure::NO_SYNDROME,
    }
}

/// Completions polled per `ibv_poll_cq` call at most.
const WC_BATCH: usize = 256;

pub(crate) struct VerbsRxQueue {
    wq: Arc<Wq>,
    cq: Arc<Cq>,
    _mr: Arc<Mr>,
    pool: Rc<Pool>,
    /// Buffer posted in each slot, between `ci` and `pi` (free-running).
    bufs: Box<[u32]>,
    pi: u32,
    ci: u32,
    wrs: Box<[ibv_recv_wr]>,
    sges: Box<[ibv_sge]>,
    wcs: Box<[ibv_wc]>,
    data_off: u16,
    data_room: u32,
    recover: bool,
    /// Why the queue stopped for good, returned by every later call.
    failed: Option<QueueError>,
    /// Whether the device reported a fatal error; read on the idle path only.
    device_fatal: DeviceFatal,
    stats: QueueStats,
    scratch: Box<[u32]>,
    _keep: KeepAlive,
}

impl VerbsRxQueue {
    pub(crate) fn new(
        wq: Arc<Wq>,
        cq: Arc<Cq>,
        mr: Arc<Mr>,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        keep: KeepAlive,
        device_fatal: DeviceFatal,
    ) -> Result<VerbsRxQueue, Error> {
        let size = cfg.size as usize;
        let lkey = mr.lkey();
        let mut q = VerbsRxQueue {
            wq,
            cq,
            _mr: mr,
            pool: pool.clone(),
            bufs: vec![u32::MAX; size].into_boxed_slice(),
            pi: 0,
            ci: 0,
            wrs: vec![ibv_recv_wr::default(); size].into_boxed_slice(),
            sges: vec![
                ibv_sge {
                    addr: 0,
                    length: pool.data_room(),
                    lkey,
                };
                size
            ]
            .into_boxed_slice(),
            wcs: vec![ibv_wc::default(); WC_BATCH.min(size)].into_boxed_slice(),
            data_off: pool.headroom(),
            data_room: pool.data_room(),
            recover: cfg.recover,
            failed: None,
            device_fatal,
            stats: QueueStats::default(),
            scratch: vec![0; size].into_boxed_slice(),
            _keep: keep,
        };
        // Fixed chain: WR i uses SGE i and is followed by WR i + 1 (boxed slices do not move).
        let sge0 = q.sges.as_mut_ptr();
        let wr0 = q.wrs.as_mut_ptr();
        for (i, wr) in q.wrs.iter_mut().enumerate() {
            wr.sg_list = sge0.wrapping_add(i);
            wr.num_sge = 1;
            wr.next = if i + 1 < size {
                wr0.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
        q.refill(0);
        if q.pi == 0 {
            return Err(Error::device("the pool has no buffers for the receive queue"));
        }
        Ok(q)
    }

    /// Posts buffers into every free slot once at least `min` are free, as one chain.
    fn refill(&mut self, min: u32) {
        let size = self.bufs.len() as u32;
        let free = size - self.pi.wrapping_sub(self.ci);
        if free < min.max(1) {
            return;
        }
        let got = self.pool.alloc_bulk(&mut self.scratch[..free as usize]);
        if got < free as usize {
            self.stats.no_buffers += 1;
        }
        if got == 0 {
            return;
        }
        let geo = self.pool.geometry();
        let off = u32::from(self.data_off);
        let mask = size - 1;
        for k in 0..got {
            let b = self.scratch[k];
            self.sges[k].addr = geo.buf_addr(b, off);
            self.wrs[k].wr_id = u64::from(b);
            self.bufs[(self.pi.wrapping_add(k as u32) & mask) as usize] = b;
        }
        let saved = self.wrs[got - 1].next;
        self.wrs[got - 1].next = std::ptr::null_mut();
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        #[allow(unsafe_code)]
        // SAFETY: this queue is the WQ's only poster; the chain is wrs[0..got], each SGE a whole
        // buffer of the pool's registered region that stays in `bufs` until its completion.
        let ret = unsafe { self.wq.post_recv(self.wrs.as_mut_ptr(), &mut bad) };
        self.wrs[got - 1].next = saved;
        let posted = if ret == 0 {
            got
        } else {
            let k = (bad as usize).wrapping_sub(self.wrs.as_ptr() as usize) / std::mem::size_of::<ibv_recv_wr>();
            let k = if bad.is_null() || k > got { 0 } else { k };
            self.pool.free_bulk(&self.scratch[k..got]);
            self.stats.errors.other += 1;
            k
        };
        self.pi = self.pi.wrapping_add(posted as u32);
    }

    /// Returns every posted buffer to the pool (the WQ was reset or is going away).
    fn release_posted(&mut self) {
        let mask = self.bufs.len() as u32 - 1;
        let mut n = 0;
        while self.ci != self.pi {
            self.scratch[n] = self.bufs[(self.ci & mask) as usize];
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        self.pool.free_bulk(&self.scratch[..n]);
    }

    /// The device stopped on a fatal error and writes nothing any more: the posted buffers go
    /// back to the pool and the queue fails.
    #[cold]
    fn stop_on_fatal(&mut self) -> QueueError {
        self.release_posted();
        self.failed = Some(QueueError::DeviceFatal);
        self.stats.device_fatal = 1;
        QueueError::DeviceFatal
    }

    /// DPDK `mlx5_rx_err_handle` for critical errors: WQ to RESET (the device stops writing),
    /// drop the completions before it, return the buffers, RDY again and refill.
    #[cold]
    fn recover_or_fail(&mut self, synd: u8) -> Result<(), QueueError> {
        if self.wq.set_state(IBV_WQS_RESET).is_err() {
            // The device may still write the posted buffers: they stay lost, never reused.
            self.ci = self.pi;
            self.failed = Some(QueueError::Failed(crate::Failure::from_mlx5(synd)));
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        while self.cq.poll(&mut self.wcs) > 0 {}
        self.release_posted();
        self.ci = 0;
        self.pi = 0;
        if !self.recover || self.wq.set_state(IBV_WQS_RDY).is_err() {
            self.failed = Some(QueueError::Failed(crate::Failure::from_mlx5(synd)));
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        self.stats.recoveries += 1;
        self.refill(0);
        Ok(())
    }
}

impl RxQueue for VerbsRxQueue {
    #[inline(never)]
    fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        same_pool(&self.pool, out)?;
        let posted = self.pi.wrapping_sub(self.ci) as usize;
        let spare = out.spare();
        let want = spare.len().min(posted).min(self.wcs.len());
        let mut n = 0;
        let mut bytes = 0u64;
        let mut error = None;
        if want > 0 {
            let got = self.cq.poll(&mut self.wcs[..want]);
            if got < 0 {
                error = Some(syndrome::LOCAL_QP_OP);
            }
            let mask = self.bufs.len() as u32 - 1;
            for wc in &self.wcs[..got.max(0) as usize] {
                let buf = self.bufs[(self.ci & mask) as usize];
                self.ci = self.ci.wrapping_add(1);
                if wc.wr_id != u64::from(buf) {
                    // Completions out of posting order: the WQ cannot be trusted any more.
                    self.stats.errors.bad_cqe += 1;
                    self.pool.free_one(buf);
                    error.get_or_insert(syndrome::LOCAL_QP_OP);
                    continue;
                }
                if wc.status != IBV_WC_SUCCESS {
                    let synd = wc_syndrome(wc.status);
                    self.stats.errors.count(crate::Failure::from_mlx5(synd).kind);
                    self.pool.free_one(buf);
                    if matches!(synd, syndrome::LOCAL_QP_OP | syndrome::LOCAL_PROT | syndrome::WR_FLUSH) {
                        error.get_or_insert(synd);
                    }
                    continue;
                }
                if wc.byte_len > self.data_room {
                    self.stats.errors.bad_cqe += 1;
                    self.pool.free_one(buf);
                    continue;
                }
                // rdma-core sets IBV_WC_IP_CSUM_OK when the L3 and L4 checksums both verified
                // (providers/mlx5/cq.c `get_csum_ok`).
                let csum = if wc.wc_flags & IBV_WC_IP_CSUM_OK != 0 {
                    flags::L3_CSUM_OK | flags::L4_CSUM_OK
                } else {
                    0
                };
                spare[n] = Packet {
                    buf,
                    len: wc.byte_len as u16,
                    off: self.data_off,
                    rss_hash: 0,
                    flags: csum,
                    ..Packet::default()
                };
                bytes += u64::from(wc.byte_len);
                n += 1;
            }
        }
        out.commit(n);
        self.stats.packets += n as u64;
        self.stats.bytes += bytes;
        if n > 0 {
            self.stats.bursts += 1;
        } else if (self.device_fatal)() {
            return Err(self.stop_on_fatal());
        }
        if let Some(synd) = error {
            self.recover_or_fail(synd)?;
        }
        self.refill(REFILL_BATCH.min(self.bufs.len() as u32 / 4));
        Ok(n)
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

impl Drop for VerbsRxQueue {
    fn drop(&mut self) {
        // Stop the device writing into our buffers before they go back to the pool.
        if self.failed.is_none() && self.wq.set_state(IBV_WQS_RESET).is_ok() {
            self.release_posted();
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;
    use crate::{Failure, FailureKind};

    #[test]
    fn every_ibverbs_status_and_syndrome_has_its_kind() {
        let cases = [
            (IBV_WC_LOC_LEN_ERR, FailureKind::LocalLength),
            (IBV_WC_LOC_QP_OP_ERR, FailureKind::LocalOperation),
            (IBV_WC_LOC_PROT_ERR, FailureKind::Protection),
            (IBV_WC_WR_FLUSH_ERR, FailureKind::Flushed),
            (IBV_WC_REM_ACCESS_ERR, FailureKind::Other),
        ];
        for (status, kind) in cases {
            let f = Failure::from_mlx5(wc_syndrome(status));
            assert_eq!(f.kind, kind, "{status}");
            assert_eq!(f.syndrome.is_some(), kind != FailureKind::Other, "{status}");
        }
        let f = Failure::from_mlx5(syndrome::REMOTE_ACCESS);
        assert_eq!((f.kind, f.syndrome), (FailureKind::Other, Some(0x13)));
        assert_eq!(f.to_string(), "completion error (completion syndrome 0x13)");
    }
}
