//! The mlx5 Direct Verbs send path: WQEs written straight into the SQ ring, one doorbell per
//! burst, one requested completion per burst (or every `tx_completion_every` WQEs), and buffers
//! recycled from completions. Modelled on VPP `rdma/output.c` (template WQE, 18 inline bytes, the
//! SQ tail kept in the signalled WQE's `imm`) and DPDK `mlx5_tx.h` (completion moderation,
//! error recovery by queue reset).

use std::rc::Rc;
use std::sync::Arc;

use crate::dv::prm::{
    encode_inline_send, syndrome, wqebbs, Be32, CtrlSeg, EthSeg, SendWqe, CQE_REQ, CQE_REQ_ERR, DS_BYTES,
    ESEG_INLINE_OFFSET, ETH_L2_INLINE_HEADER_SIZE, ETH_L2_MIN_HEADER_SIZE, ETH_WQE_L3_CSUM, ETH_WQE_L4_CSUM,
    MAX_WQE_DS, SEND_WQE_BB, WQE_CTRL_CQ_UPDATE,
};
use crate::dv::ring::{CqInfo, CqRing, SqInfo, SqRing};
use crate::dv::DvControl;
use crate::mem::pool::{flags, Burst, Pool};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, TxQueue};

/// `imm` of unsignalled WQEs (VPP's sentinel): never a valid tail.
const NO_TAIL: u32 = u32::MAX;
/// Marks a WQEBB whose WQE holds no buffer (inlined frame, or a continuation WQEBB).
const NO_BUF: u32 = u32::MAX;
/// Empty reclaims with packets in flight before the doorbell is rung again.
const IDLE_POLLS_BEFORE_RERING: u32 = 4096;
/// Largest frame copied whole into a WQE: 60 DS minus control = 59 DS of Ethernet segment.
pub const MAX_TX_INLINE: usize = (MAX_WQE_DS as usize - 1) * DS_BYTES - ESEG_INLINE_OFFSET;

pub struct DvTxQueue {
    sq: SqRing,
    cq: CqRing,
    pool: Rc<Pool>,
    ctl: Arc<dyn DvControl>,
    lkey: Be32,
    qpn_ds_send: Be32,
    /// WQEBB counter of the next WQE (free-running; the device sees it mod 2^16).
    pi: u32,
    /// Oldest WQEBB not yet known complete.
    head: u32,
    cq_ci: u32,
    /// Buffer held by the WQE starting at each WQEBB.
    bufs: Box<[u32]>,
    since_signal: u32,
    signal_every: u32,
    inline_max: usize,
    recover: bool,
    failed: Option<u8>,
    idle_polls: u32,
    last_wqe: u32,
    stats: QueueStats,
    scratch: Box<[u32]>,
}

impl DvTxQueue {
    pub fn new(
        sq: &SqInfo,
        cq: &CqInfo,
        lkey: u32,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        ctl: Arc<dyn DvControl>,
    ) -> Result<DvTxQueue, Error> {
        let sq_ring = SqRing::new(sq).map_err(Error::Device)?;
        let cq_ring = CqRing::new(cq).map_err(Error::Device)?;
        if cq_ring.size() < sq_ring.size() / cfg.tx_completion_every.max(1) + 1 {
            return Err(Error::Device("TX CQ too small for its send queue".into()));
        }
        if usize::from(cfg.tx_inline) > MAX_TX_INLINE {
            return Err(Error::Config(format!(
                "tx_inline {} exceeds {MAX_TX_INLINE}",
                cfg.tx_inline
            )));
        }
        let size = sq_ring.size() as usize;
        Ok(DvTxQueue {
            qpn_ds_send: CtrlSeg::qpn_ds(sq.qpn, 4),
            sq: sq_ring,
            cq: cq_ring,
            pool: pool.clone(),
            ctl,
            lkey: Be32::new(lkey),
            pi: 0,
            head: 0,
            cq_ci: 0,
            bufs: vec![NO_BUF; size].into_boxed_slice(),
            since_signal: 0,
            signal_every: cfg.tx_completion_every.clamp(1, size as u32),
            inline_max: cfg.tx_inline as usize,
            recover: cfg.recover,
            failed: None,
            idle_polls: 0,
            last_wqe: 0,
            stats: QueueStats::default(),
            scratch: vec![0; size].into_boxed_slice(),
        })
    }

    fn free_wqebbs(&self) -> u32 {
        self.sq.size() - self.pi.wrapping_sub(self.head)
    }

    /// Frees the buffers of WQEs in `[head, upto)`.
    #[inline(always)]
    fn complete_until(&mut self, upto: u32) -> usize {
        let mask = self.sq.size() - 1;
        let mut n = 0;
        let mut i = self.head;
        while i != upto {
            let slot = (i & mask) as usize;
            let b = self.bufs[slot];
            if b != NO_BUF {
                self.scratch[n] = b;
                self.bufs[slot] = NO_BUF;
                n += 1;
            }
            i = i.wrapping_add(1);
        }
        self.pool.free_bulk(&self.scratch[..n]);
        self.head = upto;
        n
    }

    /// Polls send completions; on a completion error recovers the queue or fails it.
    fn poll_completions(&mut self) -> Result<usize, QueueError> {
        let mut freed = 0;
        let mut error = None;
        let ci0 = self.cq_ci;
        while let Some(cqe) = self.cq.poll(self.cq_ci) {
            let opcode = cqe.opcode();
            let counter = u32::from(cqe.wqe_counter.get());
            self.cq_ci = self.cq_ci.wrapping_add(1);
            if opcode == CQE_REQ {
                // The WQE the CQE names recorded the SQ tail after it in `imm`.
                let tail = self.sq.ctrl(counter).imm;
                let in_flight = self.pi.wrapping_sub(self.head);
                if tail == NO_TAIL || tail.wrapping_sub(self.head) > in_flight {
                    self.stats.errors.bad_cqe += 1;
                    error.get_or_insert(syndrome::LOCAL_QP_OP);
                    break;
                }
                freed += self.complete_until(tail);
            } else if opcode == CQE_REQ_ERR {
                // Any error CQE means the SQ is in the error state; report the first real
                // syndrome rather than the flushes that follow it.
                let synd = cqe.as_err().syndrome;
                self.stats.errors.count(synd);
                match error {
                    Some(syndrome::WR_FLUSH) | None => error = Some(synd),
                    Some(_) => {}
                }
            } else {
                self.stats.errors.bad_cqe += 1;
                error.get_or_insert(syndrome::LOCAL_QP_OP);
            }
        }
        if self.cq_ci != ci0 {
            self.cq.publish_ci(self.cq_ci);
            self.idle_polls = 0;
        }
        if let Some(synd) = error {
            self.recover_or_fail(synd)?;
        }
        Ok(freed)
    }

    /// DPDK `mlx5_tx_error_cqe_handle`: reset the SQ (RESET → INIT → RTR → RTS on hardware),
    /// drop what was in flight, and start again at WQEBB 0. Without recovery the queue fails,
    /// and its buffers still go back to the pool.
    #[cold]
    fn recover_or_fail(&mut self, synd: u8) -> Result<(), QueueError> {
        let lost = self.in_flight_packets();
        self.stats.drops += lost as u64;
        let pi = self.pi;
        self.complete_until(pi);
        if !self.recover {
            self.failed = Some(synd);
            return Err(QueueError::Failed { syndrome: synd });
        }
        if self.ctl.reset_sq(self.sq.qpn()).is_err() {
            self.failed = Some(synd);
            return Err(QueueError::Failed { syndrome: synd });
        }
        // Completions written before the reset belong to WQEs that no longer exist.
        while self.cq.poll(self.cq_ci).is_some() {
            self.cq_ci = self.cq_ci.wrapping_add(1);
        }
        self.cq.publish_ci(self.cq_ci);
        self.sq.reset_dbrec();
        self.pi = 0;
        self.head = 0;
        self.since_signal = 0;
        self.idle_polls = 0;
        self.stats.recoveries += 1;
        Ok(())
    }

    fn in_flight_packets(&self) -> usize {
        let mask = self.sq.size() - 1;
        (0..self.pi.wrapping_sub(self.head))
            .filter(|k| self.bufs[(self.head.wrapping_add(*k) & mask) as usize] != NO_BUF)
            .count()
    }

    /// A WQE that carries the whole frame in its Ethernet segment; may span several WQEBBs
    /// and wrap the ring end.
    #[cold]
    fn write_inline_wqe(&mut self, frame: &[u8], cs: u8, signal: bool) -> u32 {
        let mut wqe = [0u8; MAX_WQE_DS as usize * DS_BYTES];
        let qpn = self.qpn_ds_send.get() >> 8;
        let ds = 1 + EthSeg::ds_for_inline(frame.len());
        let imm = if signal {
            self.pi.wrapping_add(wqebbs(ds))
        } else {
            NO_TAIL
        };
        let bbs = encode_inline_send(self.pi as u16, qpn, frame, cs, signal, imm, &mut wqe);
        for k in 0..bbs {
            let off = k as usize * SEND_WQE_BB;
            self.sq
                .wqebb_bytes(self.pi.wrapping_add(k))
                .copy_from_slice(&wqe[off..off + SEND_WQE_BB]);
        }
        bbs
    }
}

#[inline(always)]
fn cs_flags_of(pkt_flags: u32) -> u8 {
    let mut cs = 0;
    if pkt_flags & flags::TX_L3_CSUM != 0 {
        cs |= ETH_WQE_L3_CSUM;
    }
    if pkt_flags & flags::TX_L4_CSUM != 0 {
        cs |= ETH_WQE_L4_CSUM;
    }
    cs
}

impl TxQueue for DvTxQueue {
    #[inline(never)]
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(QueueError::Failed { syndrome: s });
        }
        same_pool(&self.pool, pkts)?;
        self.poll_completions()?;
        let n_req = pkts.len();
        if n_req == 0 {
            self.kick_if_stalled();
            return Ok(0);
        }
        let mask = self.sq.size() - 1;
        let mut free = self.free_wqebbs();
        let mut sent = 0;
        let mut bytes = 0u64;
        let mut inlined = 0;
        let mut runts = 0;
        let headroom_addr = self.pool.addr(0, 0);
        let buf_size = u64::from(self.pool.buf_size());
        while sent < n_req && free > 0 {
            let p = pkts.packets()[sent];
            let len = p.len as usize;
            self.since_signal += 1;
            let signal = sent + 1 == n_req || self.since_signal >= self.signal_every;
            let cs = cs_flags_of(p.flags);
            if len > self.inline_max && len > ETH_L2_INLINE_HEADER_SIZE {
                // The canonical one-WQEBB SEND (VPP `rdma_mlx5_wqe_init`).
                let addr = headroom_addr + u64::from(p.buf) * buf_size + u64::from(p.off);
                let mut hdr = [0u8; ETH_L2_INLINE_HEADER_SIZE];
                hdr.copy_from_slice(&pkts.data(sent)[..ETH_L2_INLINE_HEADER_SIZE]);
                let pi = self.pi;
                let imm = if signal { pi.wrapping_add(1) } else { NO_TAIL };
                let wqe = SendWqe::l2_inline(
                    pi as u16,
                    self.qpn_ds_send,
                    signal,
                    imm,
                    cs,
                    hdr,
                    len as u32,
                    self.lkey,
                    addr,
                );
                *self.sq.wqe(pi) = wqe;
                self.bufs[(pi & mask) as usize] = p.buf;
                self.last_wqe = pi;
                self.pi = pi.wrapping_add(1);
                free -= 1;
            } else if len >= ETH_L2_MIN_HEADER_SIZE {
                let ds = 1 + EthSeg::ds_for_inline(len);
                let bbs = wqebbs(ds);
                if bbs > free {
                    self.since_signal -= 1;
                    break;
                }
                let mut frame = [0u8; MAX_TX_INLINE];
                frame[..len].copy_from_slice(pkts.data(sent));
                let signal = signal || bbs + 1 > free;
                let pi = self.pi;
                self.write_inline_wqe(&frame[..len], cs, signal);
                // The frame now lives in the WQE: its buffer can go back at once.
                self.scratch[inlined] = p.buf;
                inlined += 1;
                self.last_wqe = pi;
                self.pi = pi.wrapping_add(bbs);
                free -= bbs;
            } else {
                // A runt cannot be a valid Ethernet frame: drop it (the buffer is returned).
                self.since_signal -= 1;
                runts += 1;
                self.scratch[inlined] = p.buf;
                inlined += 1;
                sent += 1;
                continue;
            }
            if signal {
                self.since_signal = 0;
            }
            bytes += len as u64;
            sent += 1;
        }
        if inlined > 0 {
            self.pool.free_bulk(&self.scratch[..inlined]);
        }
        if self.pi != self.head && sent > 0 {
            // The last WQE written must ask for a completion, or its buffers would wait for the
            // next burst; a break on a full ring can leave it unsignalled.
            let last = self.sq.wqe(self.last_wqe);
            if last.ctrl.fm_ce_se & WQE_CTRL_CQ_UPDATE == 0 {
                last.ctrl.fm_ce_se = WQE_CTRL_CQ_UPDATE;
                last.ctrl.imm = self.pi;
                self.since_signal = 0;
            }
            self.sq.ring_doorbell(self.pi, self.last_wqe);
            self.stats.bursts += 1;
        }
        self.stats.packets += (sent - runts) as u64;
        self.stats.drops += runts as u64;
        self.stats.bytes += bytes;
        pkts.forget_front(sent);
        Ok(sent)
    }

    fn reclaim(&mut self) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(QueueError::Failed { syndrome: s });
        }
        let freed = self.poll_completions()?;
        self.kick_if_stalled();
        Ok(freed)
    }

    fn in_flight(&self) -> usize {
        self.in_flight_packets()
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

impl DvTxQueue {
    /// A doorbell can be lost (a WC buffer never flushed, a device that missed it): when
    /// completions stop while WQEs are outstanding, ring again with the same last WQE. The
    /// device treats a repeated doorbell as a no-op if it already executed those WQEs.
    fn kick_if_stalled(&mut self) {
        if self.pi == self.head {
            self.idle_polls = 0;
            return;
        }
        self.idle_polls += 1;
        if self.idle_polls >= IDLE_POLLS_BEFORE_RERING {
            self.idle_polls = 0;
            self.sq.ring_doorbell(self.pi, self.last_wqe);
            self.stats.doorbell_retries += 1;
        }
    }
}

impl Drop for DvTxQueue {
    fn drop(&mut self) {
        // Stop the device reading our buffers before they go back to the pool.
        let _ = self.ctl.reset_sq(self.sq.qpn());
        let pi = self.pi;
        self.complete_until(pi);
    }
}
