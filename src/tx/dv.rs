//! The mlx5 Direct Verbs send path: WQEs written straight into the SQ ring, one doorbell per
//! burst, one requested completion per burst (or every `tx_completion_every` WQEs), and buffers
//! recycled in bulk from completions. Modelled on VPP `rdma/output.c` (the 18-byte inline header)
//! and DPDK `mlx5_tx.h` (a packet-indexed buffer ring, completion moderation, completions matched
//! to requests by order, error recovery by queue reset).

use std::rc::Rc;
use std::sync::Arc;

use crate::dv::prm::{
    encode_send, encode_send_sg, packed, syndrome, wqebbs, Be32, CtrlSeg, DataSeg, EthSeg, InlineMode, CQE_REQ,
    CQE_REQ_ERR, DS_BYTES, EMPW_MAX_PACKETS, EMPW_TITLE_DS, ESEG_INLINE_OFFSET, ETH_L2_INLINE_HEADER_SIZE, ETH_P_8021Q,
    ETH_WQE_L3_CSUM, ETH_WQE_L4_CSUM, MAX_WQE_DS, SEND_WQE_BB, WQE_CTRL_CQ_UPDATE,
};
use crate::dv::ring::{CqInfo, CqRing, MaskedRing, SqInfo, SqRing, SqWriter};
use crate::dv::{attention, failed_error, AttentionWord, DvCaps, DvControl, FAILED_CQ_ERROR, FAILED_DEVICE_FATAL};
use crate::flow::wire::ETH_MIN_FRAME;
use crate::mem::pool::{flags, BufGeometry, Burst, Packet, Pool};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, TxQueue};

/// Watchdog: how long completions may stop, with WQEs outstanding, before the doorbell is rung
/// again, at least (ns; longer where a full ring takes longer to drain on the link, and twice as
/// long after each re-ring that changed nothing, up to [`RERING_MAX`]). Every doorbell is
/// flushed out of the write-combining buffer when it is written (`mmio_flush_writes`,
/// `dv::ring`), so a lost doorbell is rare; a paused or slow link is the common cause, and it
/// is counted as what it is: a stall (`QueueStats::tx_stalls`), with the re-rings it took
/// (`doorbell_rerings`). Neither DPDK nor VPP has a TX watchdog; the kernel's mlx5e checks for
/// a missed interrupt before it resets anything (`en/reporter_tx.c`, timeout recovery), and
/// this one only re-rings, which a device that already ran the WQEs takes as a no-op. A down
/// link (the attention word's `LINK_DOWN`) suspends it.
const RERING_AFTER: u64 = 10_000_000;
/// The longest wait between two re-rings of one stall (ns).
const RERING_MAX: u64 = 1_000_000_000;
/// Frames up to this length (runts, below the Ethernet minimum) take the slow path, which pads
/// them with zeros to 60 bytes and inlines them whole, as a MAC pads a short frame: the same
/// bytes on the wire on every device, and the 18 inline bytes a ConnectX-4 needs even for a
/// frame of 14 to 17. The fast paths' length tests already had a lower bound (the inline header),
/// so raising it costs nothing per packet.
const RUNT_MAX: usize = ETH_MIN_FRAME - 1;
const _: () = assert!(RUNT_MAX >= ETH_L2_INLINE_HEADER_SIZE);
/// Largest frame copied whole into a WQE: 60 DS minus control = 59 DS of Ethernet segment.
pub const MAX_TX_INLINE: usize = (MAX_WQE_DS as usize - 1) * DS_BYTES - ESEG_INLINE_OFFSET;
const _: () =
    assert!(flags::TX_L3_CSUM >> 10 == ETH_WQE_L3_CSUM as u32 && flags::TX_L4_CSUM >> 10 == ETH_WQE_L4_CSUM as u32);

/// A send queue on an mlx5 SQ: WQEs written in place, one doorbell per burst.
pub struct DvTxQueue {
    sq: SqRing,
    cq: CqRing,
    pool: Rc<Pool>,
    ctl: Arc<dyn DvControl>,
    /// `qpn_ds` for a ds-4 SEND and the lkey, both as big-endian bits.
    qpn_ds4_be: u32,
    lkey_be: u32,
    /// WQEBB counter of the next WQE (free-running; the device sees it mod 2^16) and of the
    /// oldest one not yet known complete.
    pi: u32,
    head: u32,
    cq_ci: u32,
    /// Buffers in flight in the order they were posted (DPDK's `elts`), between `elts_tail` and
    /// `elts_head`: a completed range is freed with one or two bulk copies.
    elts: Box<[u32]>,
    elts_head: u32,
    elts_tail: u32,
    /// One record per requested completion, in request order (DPDK's `fcqs`). Completions
    /// arrive in the order they were requested, so CQE number `cq_ci` answers record `cq_ci`,
    /// and the SQ ring is not read back.
    comps: MaskedRing<CompRecord>,
    comp_pi: u32,
    since_signal: u32,
    signal_every: u32,
    inline_max: usize,
    /// Headers every WQE carries inline: up to L2, the canonical SEND's 18 bytes (more for a
    /// frame with stacked tags); beyond, each frame's own headers ([`DvTxQueue::post_slow`]).
    inline_mode: InlineMode,
    /// Frames this long or shorter are not sent by the canonical SEND or eMPW paths (inlined
    /// whole, or, past L2 mode, every frame: see `inline_mode`).
    threshold: usize,
    /// Send bursts as enhanced multi-packet WQEs (16 bytes of descriptor per packet) rather than
    /// one 64-byte SEND per packet: only where the device needs no minimum inline (DPDK does the
    /// same; eMPW cannot carry an inline header per packet).
    empw: bool,
    /// Largest burst the one-pass eMPW path takes ([`DvTxQueue::post_empw_whole`]); 0 where it
    /// does not apply (SEND queues, whole-frame inlining).
    fast_max: usize,
    /// `max_frame - RUNT_MAX`: the one-pass path's length test is `len - 60 < fast_span`.
    fast_span: usize,
    /// The largest power of two not above `fast_span` (0 if it is 0): where the OR of a burst's
    /// `len - 60` is below it, every frame passes that test.
    fast_lens_below: u32,
    /// The device inserts VLAN tags ([`DvCaps::vlan_insert`]); otherwise [`DvTxQueue::post_sg`]
    /// writes the tag into the inlined header.
    vlan_insert: bool,
    /// The CPU has MOVBE: eMPW data segments are written by the build for it ([`FillFn`]).
    #[cfg_attr(not(all(test, feature = "model")), allow(dead_code))]
    movbe: bool,
    /// [`fill_empw_movbe`] where the CPU has MOVBE, else [`fill_empw_plain`].
    fill: FillFn,
    max_frame: usize,
    recover: bool,
    /// The device could not be stopped: the in-flight buffers must never go back to the pool.
    device_holds_buffers: bool,
    failed: Option<u8>,
    /// Late flush CQEs the queue may still take without calling them an error: as many as the
    /// WQEBBs the last reset dropped could have (set by `recover_or_fail`).
    late_budget: u32,
    /// The WQEBBs (mod 2^16, `[from, to)`) the last reset dropped: what a late flush CQE names.
    late_wqes: (u16, u16),
    /// Since when completions have not moved while WQEs are outstanding (`DvControl::now_ns`).
    stalled_since: Option<u64>,
    /// How long the watchdog waits before its next re-ring in this stall (ns), and whether this
    /// stall was counted yet.
    stall_wait: u64,
    stall_counted: bool,
    /// The queue's attention word ([`crate::dv::attention`]), read once per burst.
    attn: AttentionWord,
    last_wqe: u32,
    stats: QueueStats,
    /// [`TxQueue::inject_fault`]'s fault, while the attention word's `INJECT` is set.
    fault: Fault,
}

/// An injected fault's progress: armed by `inject_fault`, applied at the next burst, undone at
/// the one after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Armed(crate::TxFault),
    /// Applied: what to put back.
    Applied {
        lkey_be: u32,
        max_frame: usize,
    },
}

/// What a requested completion will settle ([`DvTxQueue::comps`]): three words rather than one
/// packed, so that neither side shifts or masks (16 bytes, one shift to index).
#[derive(Clone, Copy, Default)]
struct CompRecord {
    /// The WQE's first WQEBB mod 2^16, as the CQE's `wqe_counter` names it.
    wqe: u32,
    /// The SQ tail (free-running `pi`) after the WQE: the new `head`.
    tail: u32,
    /// `elts_head` after the WQE: the buffers up to it go back to the pool.
    elts: u32,
    _pad: u32,
}

impl DvTxQueue {
    /// A send queue over the SQ and CQ that `sq` and `cq` describe, posting buffers of `pool`
    /// (registered with the device as `lkey`).
    ///
    /// # Safety
    /// The queue writes WQEs into the SQ ring, rings its doorbell and consumes the CQ through raw
    /// pointers, as their only owner. So: `sq` and `cq` must describe live queue memory of one
    /// device (hardware, or the model) that stays valid for the queue's whole life (their `keep`
    /// holds it for the infos this crate builds), and for that life no one else may use that
    /// memory: no second queue over the same SQ or CQ, no other writer of the SQ, its doorbell
    /// record or UAR register, no other reader of the CQ.
    ///
    /// Safe code cannot build a queue, nor a second one over a ring it has, because this is
    /// `unsafe` and the infos cannot be cloned:
    /// ```compile_fail,E0133
    /// # use rawpkt::{dv::ring::{CqInfo, SqInfo}, mem::pool::Pool, tx::dv::DvTxQueue, QueueConfig};
    /// # use std::{rc::Rc, sync::Arc};
    /// fn two_queues(sq: &SqInfo, cq: &CqInfo, pool: &Rc<Pool>, ctl: Arc<dyn rawpkt::dv::DvControl>,
    ///               caps: rawpkt::dv::DvCaps) {
    ///     let cfg = QueueConfig::default();
    ///     let _a = DvTxQueue::new(sq, cq, 0, pool, &cfg, caps, ctl.clone());
    ///     let _b = DvTxQueue::new(sq, cq, 0, pool, &cfg, caps, ctl);
    /// }
    /// ```
    /// ```compile_fail,E0277
    /// # use rawpkt::dv::ring::SqInfo;
    /// fn second_owner(sq: &SqInfo) -> SqInfo {
    ///     Clone::clone(sq)
    /// }
    /// ```
    #[allow(unsafe_code)]
    pub unsafe fn new(
        sq: &SqInfo,
        cq: &CqInfo,
        lkey: u32,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        caps: DvCaps,
        ctl: Arc<dyn DvControl>,
    ) -> Result<DvTxQueue, Error> {
        // The queue posts only buffers of its own pool that it holds in `elts` until their
        // completion, and publishes a consumer index only past CQEs it has read.
        // SAFETY: the rings are live and this queue's alone (the caller's contract).
        let (sq_ring, cq_ring) = unsafe { (SqRing::new(sq), CqRing::new(cq)) };
        let (sq_ring, cq_ring) = (sq_ring.map_err(Error::device)?, cq_ring.map_err(Error::device)?);
        // Worst case one CQE per WQEBB: the CQ must never overrun.
        if cq_ring.size() < sq_ring.size() {
            return Err(Error::device("TX CQ smaller than its send queue"));
        }
        if usize::from(cfg.tx_inline) > MAX_TX_INLINE {
            return Err(Error::config(format!(
                "tx_inline {} exceeds {MAX_TX_INLINE}",
                cfg.tx_inline
            )));
        }
        let size = sq_ring.size();
        let attn = ctl.attention();
        let empw = caps.enhanced_mpw && caps.inline_mode == InlineMode::None;
        let elts = tx_buffers(size, &caps);
        Ok(DvTxQueue {
            qpn_ds4_be: CtrlSeg::qpn_ds(sq.qpn, 4).get().to_be(),
            lkey_be: lkey.to_be(),
            sq: sq_ring,
            cq: cq_ring,
            pool: pool.clone(),
            ctl,
            pi: 0,
            head: 0,
            cq_ci: 0,
            elts: vec![0; elts as usize].into_boxed_slice(),
            elts_head: 0,
            elts_tail: 0,
            // At most one requested completion per WQE in flight, and room to move them one slot
            // up per late flush CQE (`skip_late_flush`).
            comps: MaskedRing::new(2 * size as usize, CompRecord::default()),
            comp_pi: 0,
            since_signal: 0,
            signal_every: cfg.tx_completion_every.clamp(1, size),
            inline_max: cfg.tx_inline as usize,
            inline_mode: caps.inline_mode,
            threshold: if caps.inline_mode > InlineMode::L2 {
                caps.max_frame as usize
            } else {
                // Runts (up to 59 bytes) take the slow path, which pads them to 60.
                usize::from(cfg.tx_inline).max(RUNT_MAX)
            },
            empw,
            fast_max: if empw && usize::from(cfg.tx_inline) <= RUNT_MAX {
                EMPW_MAX_PACKETS
            } else {
                0
            },
            fast_span: (caps.max_frame as usize).saturating_sub(RUNT_MAX),
            fast_lens_below: pow2_floor((caps.max_frame as usize).saturating_sub(RUNT_MAX)),
            vlan_insert: caps.vlan_insert && caps.inline_mode == InlineMode::None,
            movbe: cfg.cpu_vector && crate::dv::cpu_has_movbe(),
            fill: fill_fn(cfg.cpu_vector && crate::dv::cpu_has_movbe()),
            max_frame: caps.max_frame as usize,
            device_holds_buffers: false,
            recover: cfg.recover,
            failed: None,
            late_budget: 0,
            late_wqes: (0, 0),
            stalled_since: None,
            stall_wait: RERING_AFTER,
            stall_counted: false,
            attn,
            last_wqe: 0,
            stats: QueueStats::default(),
            fault: Fault::None,
        })
    }

    /// Chooses the MOVBE build or the portable one (tests run both on a MOVBE machine).
    #[cfg(all(test, feature = "model"))] // the tests that run queues over the model
    pub(crate) fn set_movbe(&mut self, on: bool) {
        self.movbe = on && self.movbe;
        self.fill = fill_fn(self.movbe);
    }

    fn free_wqebbs(&self) -> u32 {
        self.sq.size() - self.pi.wrapping_sub(self.head)
    }

    /// Returns the buffers of `elts[elts_tail..upto)` to the pool.
    #[inline(always)]
    fn free_elts_until(&mut self, upto: u32) -> usize {
        let n = upto.wrapping_sub(self.elts_tail) as usize;
        let mask = self.elts.len() - 1;
        let from = self.elts_tail as usize & mask;
        self.elts_tail = upto;
        if from + n <= self.elts.len() {
            // The usual case: one piece, one copy.
            self.pool.free_bulk(&self.elts[from..from + n]);
        } else {
            let first = self.elts.len() - from;
            self.pool.free_bulk2(&self.elts[from..], &self.elts[..n - first]);
        }
        n
    }

    /// Polls send completions (DPDK `mlx5_tx_handle_completion`): every CQE answers the oldest
    /// outstanding request and covers all WQEs before it, so only the newest one found is
    /// looked at, and its record frees everything up to it at once.
    #[inline(always)]
    fn poll_completions(&mut self) -> Result<usize, QueueError> {
        match self.reap() {
            Ok(freed) => Ok(freed),
            Err((ci, freed)) => self.completion_error(ci, freed),
        }
    }

    /// [`DvTxQueue::poll_completions`] up to the point where something is wrong: then it returns
    /// what [`DvTxQueue::completion_error`] needs, so that callers branch to the cold path
    /// directly rather than through a merged `Result`.
    #[inline(always)]
    fn reap(&mut self) -> Result<usize, (u32, Option<usize>)> {
        let ci0 = self.cq_ci;
        let run = self.cq.reader().poll_req_run(ci0);
        let ci = ci0.wrapping_add(run.n);
        let mut freed = 0;
        if run.n != 0 {
            let last = ci.wrapping_sub(1);
            let rec = self.comps.get(last);
            let new_head = rec.tail;
            // A CQE that names another WQE than the request it answers, or one never requested,
            // means the device and the queue disagree: nothing it says can be trusted. (Past these
            // two tests the record is one this queue wrote for a WQE still outstanding, so its
            // tail lies between `head` and `pi`.)
            if run.counter != rec.wqe || last.wrapping_sub(ci0) >= self.comp_pi.wrapping_sub(ci0) {
                return Err((ci0, None));
            }
            debug_assert!(new_head.wrapping_sub(self.head) <= self.pi.wrapping_sub(self.head));
            self.head = new_head;
            freed = self.free_elts_until(rec.elts);
            self.cq_ci = ci;
            self.cq.publish_ci(ci);
            self.stalled_since = None;
        }
        if run.other() {
            return Err((ci, Some(freed)));
        }
        Ok(freed)
    }

    /// CQEs from `ci` on include an error (or a CQE the queue cannot account for: `freed` is
    /// None): counts them, then recovers the queue or fails it.
    ///
    /// Flush CQEs (WR_FLUSH_ERR) at the head are not a new error: they are the device's answers
    /// for WQEs that a recovery already dropped, which silicon may write after the reset (they
    /// were in flight), and one for every such WQE whose CE asked for every error. DPDK consumes
    /// them and does nothing else (`mlx5_tx.c` `mlx5_tx_error_cqe_handle` acts only on other
    /// syndromes; `mlx5_tx_handle_completion` goes on past them), and so does this queue
    /// ([`DvTxQueue::skip_late_flush`]): counted in `errors.late_flush`, no second reset, and the
    /// frames posted since the reset go out. A QP the firmware moved to the error state without a
    /// failing WQE also answers with flushes only; that comes as a QP_FATAL event (the queue's
    /// attention word), not through here; and more flushes than the reset could have left
    /// ([`DvTxQueue::late_budget`]) are taken as that error.
    #[cold]
    #[inline(never)]
    fn completion_error(&mut self, ci: u32, freed: Option<usize>) -> Result<usize, QueueError> {
        let Some(mut total) = freed else {
            return self.completion_failed(ci, None);
        };
        let mut ci = ci;
        loop {
            let head = ci;
            while let Some(cqe) = self.cq.poll(ci) {
                if cqe.opcode() != CQE_REQ_ERR
                    || cqe.as_err().syndrome != syndrome::WR_FLUSH
                    || !self.is_late(cqe.as_err().wqe_counter.get(), ci)
                {
                    break;
                }
                self.skip_late_flush(ci);
                ci = ci.wrapping_add(1);
            }
            if ci == head {
                return self.completion_failed(ci, Some(total));
            }
            self.cq_ci = ci;
            self.cq.publish_ci(ci);
            // What follows is polled as any completion: answers to the requests made since the
            // reset, or another error.
            match self.reap() {
                Ok(freed) => return Ok(total + freed),
                Err((at, None)) => return self.completion_failed(at, None),
                Err((at, Some(freed))) => {
                    total += freed;
                    ci = at;
                }
            }
        }
    }

    /// Whether a flush CQE at CQ index `ci` naming WQE `counter` can be a late answer for a WQE
    /// the last reset dropped: the budget is not spent, `counter` lies among the WQEBBs that
    /// were in flight then, and it is not the WQE whose answer is due at `ci` (a flush of that
    /// one is a new error of the SQ, which needs a reset of its own: a WQE posted since the
    /// reset that is never answered would hold its frames forever).
    fn is_late(&self, counter: u16, ci: u32) -> bool {
        let (from, to) = self.late_wqes;
        let dropped = u32::from(counter.wrapping_sub(from)) < u32::from(to.wrapping_sub(from));
        let due = ci != self.comp_pi && self.comps.get(ci).wqe as u16 == counter;
        self.late_budget > 0 && dropped && !due
    }

    /// Consumes the late flush CQE at CQ index `ci` (= `cq_ci`, the slot the next request's
    /// answer was expected in): the records of the requests still outstanding move one slot up,
    /// so that CQE number `k` answers record `k` again (the ring has room: twice the SQ's size).
    #[cold]
    fn skip_late_flush(&mut self, ci: u32) {
        let mut i = self.comp_pi;
        while i != ci {
            let rec = self.comps.get(i.wrapping_sub(1));
            self.comps.set(i, rec);
            i = i.wrapping_sub(1);
        }
        self.comp_pi = self.comp_pi.wrapping_add(1);
        self.late_budget -= 1;
        self.stats.errors.late_flush += 1;
    }

    /// The error path proper: counts what is in the CQ from `ci` on, then recovers the queue or
    /// fails it (`freed` as [`DvTxQueue::completion_error`] takes it).
    #[cold]
    #[inline(never)]
    fn completion_failed(&mut self, ci: u32, freed: Option<usize>) -> Result<usize, QueueError> {
        let mut error = None;
        if freed.is_none() {
            self.stats.errors.bad_cqe += 1;
            error = Some(syndrome::LOCAL_QP_OP);
        }
        let mut ci = ci;
        while let Some(cqe) = self.cq.poll(ci) {
            ci = ci.wrapping_add(1);
            match cqe.opcode() {
                CQE_REQ => {}
                CQE_REQ_ERR => {
                    // Any error CQE means the SQ is in the error state; report the first real
                    // syndrome rather than the flushes that follow it.
                    let synd = cqe.as_err().syndrome;
                    self.stats.errors.count(crate::Failure::from_mlx5(synd).kind);
                    if matches!(error, None | Some(syndrome::WR_FLUSH)) {
                        error = Some(synd);
                    }
                }
                _ => {
                    self.stats.errors.bad_cqe += 1;
                    error.get_or_insert(syndrome::LOCAL_QP_OP);
                }
            }
        }
        self.cq_ci = ci;
        self.cq.publish_ci(ci);
        self.recover_or_fail(error.unwrap_or(syndrome::LOCAL_QP_OP))?;
        Ok(freed.unwrap_or(0))
    }

    /// DPDK `mlx5_tx_error_cqe_handle`: reset the SQ (RESET → INIT → RTR → RTS on hardware),
    /// drop what was in flight, and start again at WQEBB 0. Without recovery the queue fails,
    /// and its buffers still go back to the pool.
    #[cold]
    fn recover_or_fail(&mut self, synd: u8) -> Result<(), QueueError> {
        // Stop the device first: until the SQ is reset it may still read the posted buffers.
        if self.ctl.reset_sq(self.sq.qpn()).is_err() {
            // It cannot be stopped: the buffers stay with it (lost to the pool) rather than be
            // handed out while the device may read them.
            self.failed = Some(synd);
            self.device_holds_buffers = true;
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        let head = self.elts_head;
        self.stats.drops += self.free_elts_until(head) as u64;
        // The WQEBBs dropped here, as CQEs name them: a late flush CQE can answer only these.
        let dropped = self.pi.wrapping_sub(self.head).min(self.sq.size());
        self.late_wqes = (self.head as u16, self.pi as u16);
        self.head = self.pi;
        // Completions written before the reset belong to WQEs that no longer exist.
        while self.cq.ready(self.cq_ci) {
            self.cq_ci = self.cq_ci.wrapping_add(1);
        }
        self.cq.publish_ci(self.cq_ci);
        self.sq.reset_dbrec();
        self.pi = 0;
        self.head = 0;
        // Requests made before the reset will never be answered; the next CQE answers the next
        // request, unless a flush CQE of the WQEs dropped here comes first (`completion_error`):
        // at most one per WQEBB that was in flight.
        self.comp_pi = self.cq_ci;
        self.late_budget = dropped;
        self.since_signal = 0;
        self.stalled_since = None;
        if !self.recover {
            self.failed = Some(synd);
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        self.stats.recoveries += 1;
        Ok(())
    }

    /// Posts packets from the front of `pkts` that each take one canonical 64-byte SEND (VPP
    /// `rdma_mlx5_wqe_init`: control, 18 inline header bytes, one gather entry), stopping at the
    /// first packet not longer than `threshold` (it needs the slow path). The caller checked
    /// that the ring has a WQEBB for each. Returns (packets posted, bytes).
    /// With `SPECIAL` (a burst with VLAN requests: [`Burst::has_special`]) it also stops
    /// before a packet that asks for a tag; without, it has no per-packet test for them.
    #[inline(always)]
    fn post_run<const SPECIAL: bool>(&mut self, pkts: &[Packet], threshold: usize) -> (usize, u64) {
        // Everything the loop needs lives in registers: stores into the ring may alias any
        // memory as far as the compiler knows, so fields of `self` would be reloaded per packet.
        let geo = self.pool.geometry();
        let span = self.max_frame.saturating_sub(threshold);
        let (qpn_ds, lkey) = (Be32::from_bits(self.qpn_ds4_be), Be32::from_bits(self.lkey_be));
        let (sq_size, size) = (self.sq.size() as usize, self.elts.len());
        let mut sq = self.sq.writer();
        let (pi0, e0) = (self.pi, self.elts_head);
        let mut posted = 0;
        let mut bytes = 0u64;
        // Bytes 10..18 of every frame ORed: bit 23 is the top bit of EtherType's first byte,
        // set for every tag (0x8100, 0x88a8, 0x9100, MPLS 0x8847/8) and for IPv6; where it is
        // set, the run is checked exactly afterwards (one OR per packet instead of a test).
        let mut tags = 0u64;
        // With SPECIAL, every packet's flags ORed: a VLAN insertion request is found after the
        // run (one OR per packet instead of a test), and the run cut before it.
        let mut flags_or = 0u32;
        'segments: while posted < pkts.len() {
            // A segment crosses neither the SQ's nor the buffer ring's end, so the loop below
            // runs on plain slices with no wrap and no bounds checks.
            let pi = pi0.wrapping_add(posted as u32);
            let e = (e0.wrapping_add(posted as u32) as usize) & (size - 1);
            let seg = (pkts.len() - posted)
                .min(sq_size - (pi as usize & (sq_size - 1)))
                .min(size - e);
            let wqes = sq.segment(pi, seg);
            let elts = &mut self.elts[e..e + seg];
            let mut index = packed::send_index(pi);
            for ((w, slot), p) in wqes.iter_mut().zip(elts.iter_mut()).zip(&pkts[posted..posted + seg]) {
                // One compare for both bounds: above the slow-path threshold, not above max_frame.
                if usize::from(p.len).wrapping_sub(threshold + 1) >= span {
                    break 'segments;
                }
                // The buffer index first: stored before the multiply that consumes it, it is not
                // loaded again.
                *slot = p.buf;
                let (addr, h0, h1, h2) = geo.l2_header(p);
                tags |= h2;
                if SPECIAL {
                    flags_or |= p.flags;
                }
                // No completion request (`signal` patches it in), and `imm` 0 (rdma-core and DPDK:
                // the kernel gives the word a meaning on Ethernet SENDs, kTLS's per-WQE TIS).
                *w = packed::send_l2_inline(
                    index,
                    qpn_ds,
                    false,
                    0,
                    cs_flags(p.flags),
                    (h0, h1, h2),
                    u32::from(p.len),
                    lkey,
                    addr,
                );
                bytes += u64::from(p.len);
                index = index.wrapping_add(packed::WQE_INDEX_STEP);
                posted += 1;
            }
        }
        if tags & 1 << 23 != 0 {
            (posted, bytes) = self.cut_at_stacked_tags(pi0, &pkts[..posted], bytes);
        }
        if SPECIAL && flags_or & flags::TX_VLAN != 0 {
            (posted, bytes) = cut_at(&pkts[..posted], |p| p.flags & flags::TX_VLAN != 0);
        }
        let n = posted as u32;
        // Completion moderation: ask for a CQE on every `signal_every`-th WQE of the run.
        let mut k = self.signal_every - 1 - self.since_signal.min(self.signal_every - 1);
        while k < n {
            self.signal(pi0.wrapping_add(k), pi0.wrapping_add(k + 1), e0.wrapping_add(k + 1));
            k += self.signal_every;
        }
        self.since_signal = (self.since_signal + n) % self.signal_every;
        if n > 0 {
            self.last_wqe = pi0.wrapping_add(n - 1);
        }
        self.pi = pi0.wrapping_add(n);
        self.elts_head = e0.wrapping_add(n);
        (posted, bytes)
    }

    /// In L2 inline mode, the run written at WQEBB `pi0` ends before the first frame whose L2
    /// header is longer than the 18 bytes its SEND inlines (QinQ, stacked VLAN or MPLS tags:
    /// Linux mlx5e inlines through the last one): that frame goes to [`DvTxQueue::post_slow`].
    /// Its 18 bytes are read back from the WQE just written; nothing is doorbelled yet.
    #[cold]
    #[inline(never)]
    fn cut_at_stacked_tags(&mut self, pi0: u32, run: &[Packet], bytes: u64) -> (usize, u64) {
        if self.inline_mode != InlineMode::L2 {
            return (run.len(), bytes);
        }
        for (k, p) in run.iter().enumerate() {
            let eth = self.sq.wqe(pi0.wrapping_add(k as u32)).eth;
            let head = eth.to_bytes();
            let head = &head[ESEG_INLINE_OFFSET..ESEG_INLINE_OFFSET + ETH_L2_INLINE_HEADER_SIZE];
            if InlineMode::L2.header_bytes(head, usize::from(p.len)) > ETH_L2_INLINE_HEADER_SIZE {
                return (k, run[..k].iter().map(|p| u64::from(p.len)).sum());
            }
        }
        (run.len(), bytes)
    }

    /// Posts packets from the front of `pkts` as one enhanced multi-packet WQE (DPDK
    /// `mlx5_tx_burst_empw_simple`): a title WQEBB (control, opcode 0x29, and an Ethernet
    /// segment without inline data carrying the checksum flags all its packets share), then one
    /// 16-byte pointer data segment per packet, four per WQEBB, wrapping the ring end. Stops at
    /// `EMPW_MAX_PACKETS`, at the ring's free WQEBBs, at a packet not longer than `threshold`, or
    /// at one with other checksum flags. Returns (packets posted, bytes, WQEBBs used).
    #[inline(always)]
    fn post_empw(&mut self, pkts: &[Packet], threshold: usize, free: u32) -> (usize, u64, u32) {
        const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;
        let elts_free = self.elts.len() - self.elts_head.wrapping_sub(self.elts_tail) as usize;
        let max = pkts
            .len()
            .min(EMPW_MAX_PACKETS)
            .min(elts_free)
            .min((free as usize * 4).saturating_sub(EMPW_TITLE_DS as usize));
        let Some(first) = pkts.first() else { return (0, 0, 0) };
        let cs = first.flags & CSUM;
        let geo = self.pool.geometry();
        let span = self.max_frame.saturating_sub(threshold);
        let lkey = Be32::from_bits(self.lkey_be);
        let size = self.elts.len();
        let (pi, e0) = (self.pi, self.elts_head);
        let mut sq = self.sq.writer();
        let units = sq.ds_units() as usize;
        let ds0 = pi.wrapping_mul(4).wrapping_add(EMPW_TITLE_DS);
        let mut posted = 0;
        let mut bytes = 0u64;
        // Checksum flags are gathered rather than compared per packet; a burst that mixes them is
        // cut afterwards (the data segments written past the cut are never doorbelled).
        let (mut flags_or, mut flags_and) = (0u32, u32::MAX);
        'segments: while posted < max {
            // Neither the data segments nor the buffer ring wrap inside a segment.
            let d = ds0.wrapping_add(posted as u32);
            let e = (e0.wrapping_add(posted as u32) as usize) & (size - 1);
            let seg = (max - posted).min(units - (d as usize & (units - 1))).min(size - e);
            let dsegs = &mut sq.data_segs(d, seg)[..seg];
            let elts = &mut self.elts[e..e + seg];
            let run = &pkts[posted..posted + seg];
            for k in 0..seg {
                let p = &run[k];
                if usize::from(p.len).wrapping_sub(threshold + 1) >= span {
                    posted += k;
                    break 'segments;
                }
                flags_or |= p.flags;
                flags_and &= p.flags;
                dsegs[k].set(u32::from(p.len), lkey, geo.addr(p));
                elts[k] = p.buf;
                bytes += u64::from(p.len);
            }
            posted += seg;
        }
        if (flags_or ^ flags_and) & CSUM != 0 {
            (posted, bytes) = cut_at_csum_change(&pkts[..posted], cs);
        }
        if flags_or & flags::TX_VLAN != 0 {
            // eMPW cannot insert a tag per packet (DPDK `mlx5_tx_match_empw`): the session ends
            // before the first packet that asks for one.
            (posted, bytes) = cut_at(&pkts[..posted], |p| p.flags & flags::TX_VLAN != 0);
        }
        if posted == 0 {
            return (0, 0, 0);
        }
        let ds = EMPW_TITLE_DS + posted as u32;
        let bbs = wqebbs(ds);
        write_empw_title(&mut sq, pi, self.qpn_ds4_be, ds, cs_flags(cs), false);
        self.pi = pi.wrapping_add(bbs);
        self.elts_head = e0.wrapping_add(posted as u32);
        self.last_wqe = pi;
        self.since_signal += posted as u32;
        if self.since_signal >= self.signal_every {
            self.since_signal = 0;
            let (tail, elts) = (self.pi, self.elts_head);
            self.signal(pi, tail, elts);
        }
        (posted, bytes, bbs)
    }

    /// The common ConnectX-5 burst in one pass: every packet a plain gather with the same
    /// checksum flags, all of them in one eMPW WQE (DPDK `mlx5_tx_burst_empw_simple`). Posts the
    /// WQE, asks for its completion and rings the doorbell; returns the bytes sent. Returns None,
    /// having published nothing, for any other burst: the general path then takes it from the
    /// start.
    #[inline(always)]
    fn post_empw_whole(&mut self, pkts: &[Packet]) -> Option<u64> {
        const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;
        let n = pkts.len();
        // One compare for "not empty, at most one WQE's worth, and this queue takes the one-pass
        // path at all" (`fast_max` is 0 for SEND queues and whole-frame inlining).
        if n.wrapping_sub(1) >= self.fast_max {
            return None;
        }
        if wqebbs(EMPW_TITLE_DS + n as u32) > self.free_wqebbs() {
            return None;
        }
        // No test of the buffer ring's room: an eMPW WQE of k packets takes at least (k + 2) / 4
        // WQEBBs, so where the SQ has room for this WQE the buffer ring (4 slots per WQEBB) has
        // room for its packets.
        debug_assert!(n <= self.elts.len() - self.elts_head.wrapping_sub(self.elts_tail) as usize);
        let fill_fn = self.fill;
        #[allow(unsafe_code)]
        // SAFETY: `fill` is `fill_empw_movbe` only where the CPU reports MOVBE (`DvTxQueue::new`,
        // `set_movbe`), the one feature it is compiled for; `fill_empw_plain` asks nothing.
        let mut fill = unsafe { fill_fn(self, pkts) };
        if fill.differ() & CSUM != 0 {
            if fill.checks != EmpwFill::WRAPS.checks {
                return None;
            }
            // The data segments or the buffer-ring slots wrap the ring end (about one burst in
            // a hundred): written in pieces, into the same WQE.
            fill = self.fill_wrapping(pkts);
            if fill.differ() & CSUM != 0 {
                return None;
            }
        }
        if fill.lens() >= self.fast_lens_below && !lengths_fit(pkts, self.fast_span) {
            return None;
        }
        let cs = pkts[0].flags;
        let (pi, e0) = (self.pi, self.elts_head);
        let ds = EMPW_TITLE_DS + n as u32;
        let (tail, elts_head) = (pi.wrapping_add(wqebbs(ds)), e0.wrapping_add(n as u32));
        // The title asks for the WQE's completion itself (what `signal` would patch in); its first
        // word is also the doorbell's.
        let word0 = write_empw_title(&mut self.sq.writer(), pi, self.qpn_ds4_be, ds, cs_flags(cs), true);
        self.record_signal(pi, tail, elts_head);
        self.pi = tail;
        self.elts_head = elts_head;
        self.last_wqe = pi;
        self.since_signal = 0;
        self.sq.ring_doorbell_word(tail, word0);
        Some(fill.bytes)
    }

    /// The queue's [`FillFn`] for a burst whose data segments or buffer-ring slots wrap the ring
    /// end: in up to three pieces, none of which wraps either ring (DPDK
    /// `mlx5_tx_burst_empw_simple` wraps its data segments the same way, by DS), by the portable
    /// build (it is the path of about one burst in a hundred). The pieces' sums are merged; a
    /// piece whose first packet has other checksum flags than the burst's first makes the whole
    /// burst differ, as one pass would.
    #[cold]
    #[inline(never)]
    fn fill_wrapping(&mut self, pkts: &[Packet]) -> EmpwFill {
        const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;
        let (d, e) = (self.pi.wrapping_mul(4).wrapping_add(EMPW_TITLE_DS), self.elts_head);
        // In eMPW mode the buffer ring has exactly one slot per DS of the SQ.
        let units = self.elts.len();
        debug_assert_eq!(units, self.sq.writer().ds_units() as usize);
        let mut acc = EmpwFill { bytes: 0, checks: 0 };
        let mut done = 0;
        while done < pkts.len() {
            let (d, e) = (d.wrapping_add(done as u32), e.wrapping_add(done as u32));
            let k = (pkts.len() - done)
                .min(units - (d as usize & (units - 1)))
                .min(units - (e as usize & (units - 1)));
            let f = fill_empw_at(self, &pkts[done..done + k], d, e);
            if (pkts[done].flags ^ pkts[0].flags) & CSUM != 0 {
                return EmpwFill {
                    bytes: 0,
                    checks: u64::from(CSUM),
                };
            }
            acc.bytes += f.bytes;
            acc.checks |= f.checks;
            done += k;
        }
        acc
    }

    /// Asks for a completion of the WQE at WQEBB `at`, recording the SQ tail and buffer-ring
    /// head after it (in `comps`, not in the WQE's `imm` as VPP does: that word stays 0).
    #[inline(always)]
    fn signal(&mut self, at: u32, tail: u32, elts_after: u32) {
        self.sq.wqe(at).ctrl.fm_ce_se = WQE_CTRL_CQ_UPDATE;
        self.record_signal(at, tail, elts_after);
    }

    /// The bookkeeping half of [`DvTxQueue::signal`], for a WQE written with its request already.
    #[inline(always)]
    fn record_signal(&mut self, at: u32, tail: u32, elts_after: u32) {
        let rec = CompRecord {
            wqe: at & 0xffff,
            tail,
            elts: elts_after,
            _pad: 0,
        };
        self.comps.set(self.comp_pi, rec);
        self.comp_pi = self.comp_pi.wrapping_add(1);
    }

    /// Posts one packet that does not fit the canonical SEND: copied whole into the WQE (up to
    /// `tx_inline` bytes, possibly several WQEBBs wrapping the ring end), or its headers inline
    /// as far as the device's inline mode asks and the rest gathered; a runt is padded to 60
    /// bytes first; dropped if shorter than an Ethernet header or longer than the port sends.
    /// Returns the bytes posted (0 for a dropped packet), or `Err(())` when the ring has no room
    /// for it.
    #[cold]
    fn post_slow(&mut self, pkts: &mut Burst, i: usize, free: &mut u32) -> Result<u64, ()> {
        let p = pkts.packets()[i];
        if p.flags & flags::CHAINED != 0 {
            return self.post_sg(pkts, i, free);
        }
        // A runt goes out padded with zeros to 60 bytes in its buffer, as a MAC pads it; then it
        // is posted as any other frame of the slow path.
        if !(ETH_MIN_FRAME..=self.max_frame).contains(&usize::from(p.len)) && !crate::tx::pad_runt(pkts, i) {
            // Shorter than an Ethernet header, or longer than the port sends: the device would
            // fail the WQE (and with it the queue), so the packet is dropped and counted.
            self.stats.drops += 1;
            self.pool.free_one(p.buf);
            return Ok(0);
        }
        let p = pkts.packets()[i];
        if p.flags & flags::TX_VLAN != 0 {
            return self.post_sg(pkts, i, free);
        }
        let frame = pkts.data(i);
        let len = frame.len();
        let hdr = if len <= self.inline_max.max(ETH_L2_INLINE_HEADER_SIZE) {
            len
        } else {
            self.inline_mode.header_bytes(frame, len).max(ETH_L2_INLINE_HEADER_SIZE)
        };
        let gather = (hdr < len).then(|| {
            DataSeg::new(
                (len - hdr) as u32,
                u32::from_be(self.lkey_be),
                self.pool.geometry().addr(&p) + hdr as u64,
            )
        });
        let ds = 1 + EthSeg::ds_for_inline(hdr) + u32::from(gather.is_some());
        let bbs = wqebbs(ds);
        // A free WQEBB need not mean a free slot in the buffer ring (chains hold more buffers
        // than WQEBBs).
        let elts_full = self.elts_head.wrapping_sub(self.elts_tail) as usize == self.elts.len();
        if bbs > *free || (gather.is_some() && elts_full) {
            return Err(());
        }
        let mut wqe = [0u8; MAX_WQE_DS as usize * DS_BYTES];
        let cs = ((p.flags >> 10) & 0xc0) as u8;
        let qpn = u32::from_be(self.qpn_ds4_be) >> 8;
        encode_send(self.pi as u16, qpn, &frame[..hdr], gather, cs, false, 0, &mut wqe);
        if gather.is_some() {
            // The device reads the rest from the buffer: it stays in flight until the completion.
            let mask = self.elts.len() - 1;
            self.elts[self.elts_head as usize & mask] = p.buf;
            self.elts_head = self.elts_head.wrapping_add(1);
        } else {
            // The frame now lives in the WQE: its buffer can go back at once.
            self.pool.free_one(p.buf);
        }
        self.emit_wqe(&wqe, bbs, free);
        Ok(len as u64)
    }

    /// Posts packet `i` as one SEND with a data segment per buffer of it (PRM send WQE with
    /// several data segments; VPP `rdma/output.c` multi-segment path; rdma-core
    /// `_mlx5_post_send` with several SGEs): a chained packet ([`flags::CHAINED`]), and any
    /// packet that asks for a VLAN tag ([`flags::TX_VLAN`]). The headers the device's inline
    /// mode asks for (at least the canonical 18 bytes where it asks for any) are copied into the
    /// WQE from the front of the frame, across segments if need be; the rest of every segment
    /// is gathered in place. The tag is inserted by the NIC where nothing must be inlined and the
    /// device has the cap ([`DvCaps::vlan_insert`]; [`encode_send_sg`]'s VLAN insertion, DPDK
    /// `mlx5_tx_eseg_none`), and written into the
    /// inlined header otherwise, as DPDK does when it inlines (`mlx5_tx_eseg_data`). Dropped
    /// and counted when the frame is longer than the port sends or needs more data segments
    /// than a WQE holds; `Err(())` when the ring (or its buffer ring) has no room now.
    #[cold]
    #[inline(never)]
    fn post_sg(&mut self, pkts: &mut Burst, i: usize, free: &mut u32) -> Result<u64, ()> {
        const MAX_SEGS: usize = MAX_WQE_DS as usize;
        let p = pkts.packets()[i];
        let vlan = (p.flags & flags::TX_VLAN != 0).then_some(p.vlan_tci);
        let tag = if vlan.is_some() { 4 } else { 0 };
        let len = p.len();
        let mut segs = [(0u32, 0u16, 0u16); MAX_SEGS];
        let mut n = 0;
        for s in self.pool.segments_of(&p) {
            if n == MAX_SEGS {
                n += 1;
                break;
            }
            segs[n] = s;
            n += 1;
        }
        if n > MAX_SEGS || n > self.elts.len() || len + tag > self.max_frame {
            self.stats.drops += 1;
            self.pool.free_packet(&p);
            return Ok(0);
        }
        // The frame's first bytes, with the tag in place when the driver inserts it.
        let mut head = [0u8; 256 + 4];
        let mut got = 0;
        for s in pkts.segments(i) {
            let k = s.len().min(256 - got);
            head[got..got + k].copy_from_slice(&s[..k]);
            got += k;
            if got == 256 {
                break;
            }
        }
        // The device inserts the tag only where it says it can (`wqe_vlan_insert`, DPDK
        // `mlx5_set_min_inline`); else it goes into the inlined header, as DPDK's `vlan_inline`.
        let hw_insert = vlan.is_some() && self.vlan_insert;
        let (inline, skip) = if hw_insert {
            (0, 0)
        } else {
            if let Some(tci) = vlan {
                head.copy_within(12..got, 16);
                head[12..14].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
                head[14..16].copy_from_slice(&tci.to_be_bytes());
                got += 4;
            }
            let hdr = self
                .inline_mode
                .header_bytes(&head[..got], len + tag)
                .max(ETH_L2_INLINE_HEADER_SIZE)
                .min(got);
            (hdr, hdr - tag)
        };
        let geo = self.pool.geometry();
        let lkey = u32::from_be(self.lkey_be);
        let mut gathers = [DataSeg::default(); MAX_SEGS];
        let (mut ng, mut skip) = (0, skip);
        for &(buf, off, seg_len) in &segs[..n] {
            let k = skip.min(usize::from(seg_len));
            skip -= k;
            if k < usize::from(seg_len) {
                gathers[ng] = DataSeg::new(
                    u32::from(seg_len) - k as u32,
                    lkey,
                    geo.buf_addr(buf, u32::from(off)) + k as u64,
                );
                ng += 1;
            }
        }
        let ds = 1 + EthSeg::ds_for_inline(inline) + ng as u32;
        // Too many segments for one WQE, or a WQE longer than the whole ring: it could never go.
        if ds > MAX_WQE_DS || wqebbs(ds) > self.sq.size() {
            self.stats.drops += 1;
            self.pool.free_packet(&p);
            return Ok(0);
        }
        let bbs = wqebbs(ds);
        let elts_free = self.elts.len() - self.elts_head.wrapping_sub(self.elts_tail) as usize;
        if bbs > *free || n > elts_free {
            return Err(());
        }
        let mut wqe = [0u8; MAX_WQE_DS as usize * DS_BYTES];
        let qpn = u32::from_be(self.qpn_ds4_be) >> 8;
        let cs = cs_flags(p.flags);
        let vlan_insert = if hw_insert { vlan } else { None };
        encode_send_sg(
            self.pi as u16,
            qpn,
            &head[..inline],
            vlan_insert,
            &gathers[..ng],
            cs,
            false,
            0,
            &mut wqe,
        );
        // Every buffer stays in flight until the completion (even one whose bytes were all
        // inlined: a chain is freed whole).
        let mask = self.elts.len() - 1;
        for &(buf, _, _) in &segs[..n] {
            self.elts[self.elts_head as usize & mask] = buf;
            self.elts_head = self.elts_head.wrapping_add(1);
        }
        self.emit_wqe(&wqe, bbs, free);
        Ok((len + tag) as u64)
    }

    /// Copies a WQE built in `wqe` (`bbs` WQEBBs, wrapping the ring end) to the ring at `pi`,
    /// advances `pi`, and asks for its completion when moderation says so or the ring is
    /// nearly full.
    #[cold]
    fn emit_wqe(&mut self, wqe: &[u8], bbs: u32, free: &mut u32) {
        for k in 0..bbs {
            let off = k as usize * SEND_WQE_BB;
            self.sq
                .wqebb_bytes(self.pi.wrapping_add(k))
                .copy_from_slice(&wqe[off..off + SEND_WQE_BB]);
        }
        let at = self.pi;
        self.pi = self.pi.wrapping_add(bbs);
        self.last_wqe = at;
        *free -= bbs;
        self.since_signal += 1;
        if self.since_signal >= self.signal_every || bbs > *free {
            self.since_signal = 0;
            self.signal(at, self.pi, self.elts_head);
        }
    }

    /// The watchdog ([`RERING_AFTER`]): when completions stop while WQEs are outstanding, ring
    /// again with the same last WQE (a device that already ran them takes it as a no-op), after
    /// the wait, then after twice as long each time; a stall is counted once, a re-ring each
    /// time. Nothing while the link is down: no completion is owed then.
    fn kick_if_stalled(&mut self) -> Result<(), QueueError> {
        // An injected fault waits for the burst that carries frames (`burst`).
        let a = self.attn.load(std::sync::atomic::Ordering::Acquire) & !attention::INJECT;
        if a & attention::ACT != 0 {
            self.attend(a)?;
        }
        if self.pi == self.head || a & attention::LINK_DOWN != 0 {
            self.stalled_since = None;
            return Ok(());
        }
        let now = self.ctl.now_ns();
        let Some(since) = self.stalled_since else {
            self.stalled_since = Some(now);
            self.stall_wait = self.drain_time().max(RERING_AFTER);
            self.stall_counted = false;
            return Ok(());
        };
        if now.saturating_sub(since) >= self.stall_wait {
            if !self.stall_counted {
                self.stall_counted = true;
                self.stats.tx_stalls += 1;
            }
            self.stalled_since = Some(now);
            self.stall_wait = (self.stall_wait * 2).min(RERING_MAX);
            self.sq.ring_doorbell(self.pi, self.last_wqe);
            self.stats.doorbell_rerings += 1;
        }
        Ok(())
    }

    /// How long the frames in flight take to leave on the link, twice over (ns): a full ring of
    /// jumbo frames on a 1 Gb/s link is more than the watchdog's 10 ms. 0 where the link's
    /// speed is unknown.
    fn drain_time(&self) -> u64 {
        let Some(bps) = self.ctl.link_bps().filter(|&b| b > 0) else {
            return 0;
        };
        let frames = u64::from(self.pi.wrapping_sub(self.head)).max(self.in_flight() as u64);
        let bits = frames * self.max_frame as u64 * 8;
        (bits.saturating_mul(2_000_000_000) / bps).min(RERING_MAX)
    }

    /// What the attention word `a` says ([`crate::dv::attention`]), acted on: the device
    /// stopped (the queue fails), the CQ is in error (the queue fails; kernel `cq.c`
    /// `mlx5_ib_cq_event`, `ibv_poll_cq(3)`: a CQ in error is unusable), the QP was killed (reset
    /// as after a completion error: kernel `qp.c` `mlx5_ib_qp_event`, and VPP's
    /// `rdma_async_event_read_ready` treats such events as errors; DPDK's interrupt handler reads
    /// only device and port events and relies on error CQEs, which a killed QP does not write),
    /// or the MTU changed (the largest frame is the port's new one).
    #[cold]
    #[inline(never)]
    fn attend(&mut self, a: u32) -> Result<(), QueueError> {
        if a & attention::DEVICE_FATAL != 0 {
            return Err(self.stop_on_fatal());
        }
        if a & attention::CQ_ERROR != 0 {
            log::warn!(
                "TX queue on QP {:#x}: its CQ went into error (overrun); the queue fails",
                self.sq.qpn()
            );
            self.stats.errors.cq_error += 1;
            return Err(self.fail_on(FAILED_CQ_ERROR));
        }
        if a & attention::MTU_CHANGED != 0 {
            self.attn
                .fetch_and(!attention::MTU_CHANGED, std::sync::atomic::Ordering::AcqRel);
            if let Some(m) = self.ctl.max_frame() {
                self.set_max_frame(m as usize);
            }
        }
        if a & attention::QUEUE_FATAL != 0 {
            self.attn
                .fetch_and(!attention::QUEUE_FATAL, std::sync::atomic::Ordering::AcqRel);
            self.stats.errors.queue_fatal += 1;
            self.recover_or_fail(syndrome::LOCAL_QP_OP)?;
        }
        if a & attention::INJECT != 0 {
            self.step_fault();
        }
        Ok(())
    }

    /// [`TxQueue::inject_fault`] at a burst: an armed fault is applied to this burst (a memory
    /// key the device never gave out, or no length check of the queue's own); an applied one is
    /// undone.
    #[cold]
    fn step_fault(&mut self) {
        match self.fault {
            Fault::Armed(f) => {
                self.fault = Fault::Applied {
                    lkey_be: self.lkey_be,
                    max_frame: self.max_frame,
                };
                match f {
                    crate::TxFault::BadLkey => self.lkey_be = !self.lkey_be,
                    crate::TxFault::Oversize => self.set_max_frame(usize::from(u16::MAX)),
                }
            }
            Fault::Applied { lkey_be, max_frame } => {
                self.lkey_be = lkey_be;
                self.set_max_frame(max_frame);
                self.fault = Fault::None;
                self.attn
                    .fetch_and(!attention::INJECT, std::sync::atomic::Ordering::AcqRel);
            }
            Fault::None => {
                self.attn
                    .fetch_and(!attention::INJECT, std::sync::atomic::Ordering::AcqRel);
            }
        }
    }

    /// The port sends frames of up to `max` bytes from now on: the slow path's bound, and the
    /// fast paths' length tests.
    fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max;
        if self.inline_mode > InlineMode::L2 {
            self.threshold = max;
        }
        self.fast_span = max.saturating_sub(RUNT_MAX);
        self.fast_lens_below = pow2_floor(max.saturating_sub(RUNT_MAX));
    }

    /// Stops the queue for good with `failed`: the device is stopped first (SQ reset) so that it
    /// reads no buffer any more, then every buffer in flight goes back to the pool; if it cannot
    /// be stopped the buffers stay with it.
    #[cold]
    fn fail_on(&mut self, failed: u8) -> QueueError {
        if self.ctl.reset_sq(self.sq.qpn()).is_ok() {
            let head = self.elts_head;
            self.stats.drops += self.free_elts_until(head) as u64;
            self.head = self.pi;
        } else {
            self.device_holds_buffers = true;
        }
        self.failed = Some(failed);
        failed_error(failed)
    }
}

impl DvTxQueue {
    /// The device stopped on a fatal error: it reads nothing any more, so every buffer in
    /// flight goes back to the pool (counted as dropped) and the queue fails.
    #[cold]
    fn stop_on_fatal(&mut self) -> QueueError {
        let head = self.elts_head;
        self.stats.drops += self.free_elts_until(head) as u64;
        self.head = self.pi;
        self.failed = Some(FAILED_DEVICE_FATAL);
        self.stats.device_fatal = 1;
        QueueError::DeviceFatal
    }
}

/// Packets a TX queue over a send queue of `wqebbs` WQEBBs holds until their completions, the
/// buffers it pins: a SEND takes a WQEBB per packet; an eMPW WQE packs four data segments per
/// WQEBB (DPDK `mlx5_tx_burst_empw_simple`), so with eMPW up to four packets per WQEBB.
pub(crate) fn tx_buffers(wqebbs: u32, caps: &DvCaps) -> u32 {
    if caps.enhanced_mpw && caps.inline_mode == InlineMode::None {
        wqebbs * 4
    } else {
        wqebbs
    }
}

/// What [`fill_empw_dsegs`] gathers over a burst, tested once after the loop rather than per packet.
#[derive(Clone, Copy)]
struct EmpwAcc {
    bytes: u64,
    /// The OR of every packet's flags XOR `cs` (with `PLAIN`, `cs` has no checksum bits and the
    /// flags are ORed as they are).
    differ: u32,
    /// The OR of every packet's `len - 60` (wrapping): below a power of two not above the
    /// fast span, every frame is one the one-pass path takes (a runt wraps to a huge value).
    lens: u32,
}

/// What a [`FillFn`] returns: [`EmpwAcc`] in two words, so that it comes back in two registers.
#[derive(Clone, Copy)]
struct EmpwFill {
    bytes: u64,
    /// `differ | lens << 32`.
    checks: u64,
}

impl EmpwFill {
    /// Nothing written: the burst's data segments or buffer-ring slots would wrap. Every flag
    /// differs, so the caller's test of the checksum flags turns it away.
    const WRAPS: EmpwFill = EmpwFill {
        bytes: 0,
        checks: u64::MAX,
    };

    fn differ(self) -> u32 {
        self.checks as u32
    }

    fn lens(self) -> u32 {
        (self.checks >> 32) as u32
    }
}

/// Writes one eMPW data segment per packet (byte count, lkey, address) and its buffer into the
/// buffer ring, for [`DvTxQueue::post_empw_whole`]. Nothing is tested per packet: the lengths
/// and flags are ORed together and the caller tests them once, and a burst that fails leaves
/// what was written here unpublished (as DPDK `mlx5_tx_burst_empw_simple` checks a session's
/// packets before it closes the WQE). With no branch in it, the loop runs four packets a pass.
#[inline(always)]
fn fill_empw_dsegs<const PLAIN: bool>(
    dsegs: &mut [DataSeg],
    elts: &mut [u32],
    pkts: &[Packet],
    geo: BufGeometry<'_>,
    lkey: Be32,
    cs: u32,
) -> EmpwFill {
    const LO: u32 = RUNT_MAX as u32 + 1;
    let mut acc = EmpwAcc {
        bytes: 0,
        differ: 0,
        lens: 0,
    };
    #[inline(always)]
    fn one<const PLAIN: bool>(
        acc: &mut EmpwAcc,
        d: &mut DataSeg,
        slot: &mut u32,
        p: &Packet,
        geo: BufGeometry<'_>,
        lkey: Be32,
        cs: u32,
    ) {
        // The buffer index first: stored before the multiply that consumes it, it needs no copy.
        *slot = p.buf;
        let len = u32::from(p.len);
        acc.lens |= len.wrapping_sub(LO);
        acc.differ |= if PLAIN { p.flags } else { p.flags ^ cs };
        d.set(len, lkey, geo.addr(p));
        acc.bytes += u64::from(len);
    }
    // One length for the three slices, so that the compiler splits them alike; the packets
    // past a multiple of four first, so that nothing about them is kept across the main loop.
    let n = pkts.len();
    let r = n % 4;
    let (d1, d4) = dsegs[..n].split_at_mut(r);
    let (e1, e4) = elts[..n].split_at_mut(r);
    let (p1, p4) = pkts.split_at(r);
    for ((d, e), p) in d1.iter_mut().zip(e1.iter_mut()).zip(p1) {
        one::<PLAIN>(&mut acc, d, e, p, geo, lkey, cs);
    }
    for ((d, e), p) in d4
        .chunks_exact_mut(4)
        .zip(e4.chunks_exact_mut(4))
        .zip(p4.chunks_exact(4))
    {
        for k in 0..4 {
            one::<PLAIN>(&mut acc, &mut d[k], &mut e[k], &p[k], geo, lkey, cs);
        }
    }
    EmpwFill {
        bytes: acc.bytes,
        checks: u64::from(acc.differ) | u64::from(acc.lens) << 32,
    }
}

/// The largest power of two not above `x` (0 for 0), at most 2^31.
fn pow2_floor(x: usize) -> u32 {
    match x {
        0 => 0,
        _ => 1 << (usize::BITS - 1 - x.leading_zeros()).min(31),
    }
}

/// The out-of-line builds of [`fill_empw_any`], chosen once per queue: called through a pointer,
/// the loop has every register to itself (inlined into the burst it spilled registers inside the
/// loop and around it; `scripts/callgrind.sh`), and no compiler can inline it back
/// (`#[inline(never)]` does not hold for a `#[target_feature]` function reached through code
/// without the feature). Everything it needs it reads from the queue, so that the call costs no
/// arguments on the stack.
type FillFn = unsafe fn(&mut DvTxQueue, &[Packet]) -> EmpwFill;

/// The data segments of an eMPW WQE at the queue's `pi` for the packets of `pkts` (not empty),
/// and their buffers in the buffer ring at `elts_head` ([`fill_empw_at`]).
#[inline(always)]
fn fill_empw_any(q: &mut DvTxQueue, pkts: &[Packet]) -> EmpwFill {
    let (d, e) = (q.pi.wrapping_mul(4).wrapping_add(EMPW_TITLE_DS), q.elts_head);
    fill_empw_at(q, pkts, d, e)
}

/// The data segments of the packets of `pkts` (not empty) from DS `d` of the SQ ring on, and their
/// buffers in the buffer ring from slot `e` on ([`fill_empw_dsegs`]; both counters free-running),
/// or [`EmpwFill::WRAPS`] having written nothing where either range would wrap (the caller then
/// fills the burst piece by piece, [`DvTxQueue::fill_wrapping`]). Bursts without checksum
/// requests (the usual case) test each packet's flags with one OR.
#[inline(always)]
fn fill_empw_at(q: &mut DvTxQueue, pkts: &[Packet], d: u32, e: u32) -> EmpwFill {
    const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;
    let n = pkts.len();
    let geo = q.pool.geometry();
    let lkey = Be32::from_bits(q.lkey_be);
    let mut sq = q.sq.writer();
    let Some(dsegs) = sq.try_data_segs(d, n) else {
        return EmpwFill::WRAPS;
    };
    let e = e as usize & (q.elts.len() - 1);
    let Some(elts) = q.elts.get_mut(e..e + n) else {
        return EmpwFill::WRAPS;
    };
    let cs = pkts[0].flags;
    if cs & CSUM == 0 {
        fill_empw_dsegs::<true>(dsegs, elts, pkts, geo, lkey, cs)
    } else {
        fill_empw_dsegs::<false>(dsegs, elts, pkts, geo, lkey, cs)
    }
}

/// The [`FillFn`] for a CPU with MOVBE or without.
fn fill_fn(movbe: bool) -> FillFn {
    #[cfg(target_arch = "x86_64")]
    if movbe {
        return fill_empw_movbe;
    }
    let _ = movbe;
    fill_empw_plain
}

/// See [`FillFn`].
#[inline(never)]
fn fill_empw_plain(q: &mut DvTxQueue, pkts: &[Packet]) -> EmpwFill {
    fill_empw_any(q, pkts)
}

/// See [`FillFn`]: compiled for CPUs with MOVBE (an x86-64-v3 feature: Intel since Haswell, AMD
/// since Jaguar and Zen; any host of a ConnectX-5), the big-endian byte count and address of each
/// data segment go out with one `movbe` store each instead of a byte swap, a copy and a store.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "movbe")]
#[inline(never)]
fn fill_empw_movbe(q: &mut DvTxQueue, pkts: &[Packet]) -> EmpwFill {
    fill_empw_any(q, pkts)
}

/// Whether every frame of `pkts` is one the one-pass eMPW path takes (60 bytes up to the port's
/// maximum): the exact test, for a burst whose ORed lengths [`fill_empw_dsegs`] could not clear.
#[cold]
#[inline(never)]
fn lengths_fit(pkts: &[Packet], span: usize) -> bool {
    pkts.iter()
        .all(|p| usize::from(p.len).wrapping_sub(RUNT_MAX + 1) < span)
}

/// Writes the title WQEBB of an eMPW WQE of `ds` DS at WQEBB `pi` ([`packed::empw_title`]; with
/// `signal` a completion request, as [`DvTxQueue::signal`] writes it). Returns the control
/// segment's first 8 bytes as the doorbell carries them.
#[inline(always)]
fn write_empw_title(sq: &mut SqWriter<'_>, pi: u32, qpn_ds4_be: u32, ds: u32, cs_flags: u8, signal: bool) -> u64 {
    let words = packed::empw_title(pi, Be32::from_bits(qpn_ds4_be), ds, cs_flags, signal);
    // The title is the first half of WQEBB `pi`: taken as a WQEBB, its range needs no test.
    let bb = &mut sq.segment(pi, 1)[0];
    for (k, w) in words.as_flattened().iter().enumerate() {
        bb[k] = *w;
    }
    words[0][0]
}

/// The Ethernet segment's `cs_flags` for a packet's flags: TX_L3_CSUM/TX_L4_CSUM (bits 16, 17)
/// are cs_flags L3/L4 (0x40, 0x80), asserted at the top of this file.
#[inline(always)]
fn cs_flags(flags: u32) -> u8 {
    ((flags >> 10) & 0xc0) as u8
}

/// The packets of `pkts` before the first for which `stop` holds, and their bytes.
#[cold]
fn cut_at(pkts: &[Packet], stop: impl Fn(&Packet) -> bool) -> (usize, u64) {
    let n = pkts.iter().position(stop).unwrap_or(pkts.len());
    (n, pkts[..n].iter().map(|p| u64::from(p.len)).sum())
}

/// The packets of `pkts` up to the first whose checksum flags differ from `cs`, and their bytes.
#[cold]
fn cut_at_csum_change(pkts: &[Packet], cs: u32) -> (usize, u64) {
    const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;
    let n = pkts.iter().position(|p| p.flags & CSUM != cs).unwrap_or(pkts.len());
    (n, pkts[..n].iter().map(|p| u64::from(p.len)).sum())
}

impl TxQueue for DvTxQueue {
    #[inline(never)]
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        // No build of the whole burst per CPU: only the data-segment loop gains from MOVBE
        // ([`FillFn`]), and a dispatch here would cost instructions on every burst.
        self.burst(pkts)
    }

    fn reclaim(&mut self) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        let freed = self.poll_completions()?;
        self.kick_if_stalled()?;
        Ok(freed)
    }

    /// Buffers the device still holds; at least 1 while any WQE (an inlined one included) is not
    /// known complete.
    fn in_flight(&self) -> usize {
        (self.elts_head.wrapping_sub(self.elts_tail) as usize).max(usize::from(self.pi != self.head))
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }

    fn inject_fault(&mut self, fault: crate::TxFault) -> bool {
        if self.failed.is_some() || self.fault != Fault::None {
            return false;
        }
        self.fault = Fault::Armed(fault);
        self.attn
            .fetch_or(attention::INJECT, std::sync::atomic::Ordering::AcqRel);
        true
    }
}

impl DvTxQueue {
    /// [`TxQueue::tx_burst`]: reclaim what completed, then post the burst in one pass if it can
    /// be, else by the general path.
    #[inline(always)]
    fn burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        // The device's events for this queue (an MTU change, a killed QP, ...): one load and a
        // branch per burst.
        let a = self.attn.load(std::sync::atomic::Ordering::Relaxed);
        if a & attention::ACT != 0 {
            self.attend(a)?;
        }
        same_pool(&self.pool, pkts)?;
        if let Err((ci, freed)) = self.reap() {
            self.completion_error(ci, freed)?;
        }
        // eMPW has no per-packet tag (DPDK `mlx5_tx_match_empw`): a burst with VLAN requests (or
        // chains, which the length test would refuse anyway) takes the general path, which cuts
        // its sessions there; one test a burst.
        if pkts.has_special() {
            return self.post_general(pkts);
        }
        if let Some(bytes) = self.post_empw_whole(pkts.packets()) {
            let n = pkts.len();
            self.stalled_since = None;
            self.stats.bursts += 1;
            self.stats.packets += n as u64;
            self.stats.bytes += bytes;
            pkts.forget_all();
            return Ok(n);
        }
        self.post_general(pkts)
    }

    /// Every burst the one-pass path does not take: SEND WQEs (ConnectX-4), eMPW WQEs that wrap
    /// or are cut (mixed checksum flags, more than one WQE's worth, frames for the slow path),
    /// whole-frame inlining, a ring short of room. Out of line, so that the common path keeps
    /// its registers.
    #[inline(never)]
    fn post_general(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        let n_req = pkts.len();
        if n_req == 0 {
            self.kick_if_stalled()?;
            return Ok(0);
        }
        let mut free = self.free_wqebbs();
        let threshold = self.threshold;
        let mut sent = 0;
        let mut bytes = 0;
        let mut dropped = self.stats.drops;
        let pi_before = self.pi;
        while sent < n_req && free > 0 {
            let (run, b, used) = if self.empw {
                self.post_empw(&pkts.packets()[sent..], threshold, free)
            } else {
                // One buffer per SEND, but chains (`post_sg`) hold more buffers in flight than
                // WQEBBs: the buffer ring may be fuller than the send ring.
                let elts_free = self.elts.len() - self.elts_head.wrapping_sub(self.elts_tail) as usize;
                let room = (n_req - sent).min(free as usize).min(elts_free);
                let run = &pkts.packets()[sent..sent + room];
                let (run, b) = if pkts.has_special() {
                    self.post_run::<true>(run, threshold)
                } else {
                    self.post_run::<false>(run, threshold)
                };
                (run, b, run as u32)
            };
            sent += run;
            free -= used;
            bytes += b;
            if sent == n_req || free == 0 {
                break;
            }
            if run > 0 && self.empw {
                // A full eMPW WQE: start another one for the rest.
                continue;
            }
            // The next packet needs the slow path (whole-frame inline, a runt, or too long).
            match self.post_slow(pkts, sent, &mut free) {
                Ok(b) => bytes += b,
                Err(()) => break,
            }
            sent += 1;
        }
        if self.pi != pi_before {
            // The burst's last WQE (written by this call, not yet doorbelled) always asks for a
            // completion, so its buffers never wait for the next burst.
            let last = self.last_wqe;
            if self.sq.ctrl(last).fm_ce_se & WQE_CTRL_CQ_UPDATE == 0 {
                let (tail, elts) = (self.pi, self.elts_head);
                self.signal(last, tail, elts);
                self.since_signal = 0;
            }
            self.sq.ring_doorbell(self.pi, last);
            self.stalled_since = None;
            self.stats.bursts += 1;
        } else {
            // Nothing posted (a full ring, say): if completions have stopped too, the last
            // doorbell may have been lost, or the device has died.
            self.kick_if_stalled()?;
        }
        dropped = self.stats.drops - dropped;
        self.stats.packets += sent as u64 - dropped;
        self.stats.bytes += bytes;
        pkts.forget_front(sent);
        Ok(sent)
    }
}

impl Drop for DvTxQueue {
    fn drop(&mut self) {
        // Stop the device reading our buffers before they go back to the pool; if it will not
        // stop, the buffers are lost to the pool rather than reused under it.
        if !self.device_holds_buffers && self.ctl.reset_sq(self.sq.qpn()).is_ok() {
            let head = self.elts_head;
            self.free_elts_until(head);
        }
    }
}

#[cfg(test)]
#[cfg(feature = "model")] // queues over the model's rings
#[allow(unsafe_code)] // building queues over the model's rings
mod tests {
    use std::rc::Rc;

    use crate::dv::ring::{CqInfo, RwqInfo, SqInfo};
    use crate::mem::pool::{Burst, Pool, PoolConfig};
    use crate::model::device::{Link, ModelConfig, Nic};
    use crate::model::NicQueues;
    use crate::rx::dv::DvRxQueue;
    use crate::tx::dv::DvTxQueue;
    use crate::{QueueConfig, RxQueue, TxQueue};

    fn frame(seq: u64, len: usize, out: &mut [u8]) {
        for (i, b) in out[..len].iter_mut().enumerate() {
            *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
        }
        out[0] &= 0xfe;
        if len >= 22 {
            out[14..22].copy_from_slice(&seq.to_be_bytes());
        }
    }

    /// A TX queue on port 0 and an RX queue on port 1 of a model NIC pair, over one pool.
    struct Rig {
        tx: DvTxQueue,
        rx: DvRxQueue,
        pool: Rc<Pool>,
        nic: std::sync::Arc<Nic>,
        lkey: u32,
        rings: (SqInfo, CqInfo, CqInfo, RwqInfo),
    }

    impl Rig {
        fn new(dev: ModelConfig, tx_size: u32, rx_size: u32, buffers: u32) -> Rig {
            let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], dev).unwrap();
            let pool: Rc<Pool> = Pool::new(PoolConfig {
                buffers,
                ..PoolConfig::default()
            })
            .unwrap();
            let lkey = nic.register_mr(pool.region());
            let config = |size| QueueConfig {
                size,
                ..QueueConfig::default()
            };
            let tx_cq = nic.create_cq(tx_size).unwrap();
            let sq = nic.create_sq(0, tx_size, tx_cq.cqn()).unwrap();
            let (caps, ctl) = (nic.caps(), nic.control());
            // SAFETY: the model made these rings for these queues alone; the infos keep them alive.
            let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &config(tx_size), caps, ctl) }.unwrap();
            let rx_cq = nic.create_cq(rx_size).unwrap();
            let (rwq, wq) = nic.create_rq(1, rx_size, rx_cq.cqn()).unwrap();
            let ctl = nic.control();
            // SAFETY: as above.
            let rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, &config(rx_size), ctl) }.unwrap();
            Rig {
                tx,
                rx,
                pool,
                nic,
                lkey,
                rings: (sq, tx_cq, rx_cq, rwq),
            }
        }

        /// Lets the device finish, checks that the send queue saw no error and holds nothing,
        /// drops the queues (the caller its bursts first) and checks that every buffer is back in
        /// the pool.
        fn teardown(mut self) {
            self.nic.step();
            self.tx.reclaim().unwrap();
            assert_eq!(self.tx.in_flight(), 0);
            assert_eq!(self.tx.stats().errors.total(), 0);
            let Rig {
                tx,
                rx,
                pool,
                nic,
                lkey,
                rings,
            } = self;
            drop((tx, rx, rings));
            assert_eq!(pool.free_count(), pool.capacity());
            nic.deregister_mr(lkey);
        }
    }

    /// The MOVBE builds and the portable ones move the same frames: every combination of TX and
    /// RX build, on both devices, through ring wraps, with frames for the slow paths mixed in.
    #[test]
    fn movbe_and_portable_builds_move_the_same_frames() {
        for dev in [ModelConfig::default(), ModelConfig::connectx4()] {
            for (tx_fast, rx_fast) in [(true, true), (false, false), (true, false), (false, true)] {
                let mut r = Rig::new(dev.clone(), 64, 64, 1024);
                let Rig { tx, rx, pool, nic, .. } = &mut r;
                tx.set_movbe(tx_fast);
                rx.set_movbe(rx_fast);
                let (mut out, mut got) = (Burst::new(pool, 32), Burst::new(pool, 32));
                let mut expect = [0u8; 2048];
                let (mut sent, mut seen) = (0u64, 0u64);
                for round in 0..400u64 {
                    let n = 1 + (round * 7 % 32) as usize;
                    for _ in 0..n {
                        // Mostly gathers; every 13th frame 20 bytes (inlined whole on a cx4 and
                        // by the general path on a cx5).
                        let len = if sent % 13 == 5 {
                            20
                        } else {
                            60 + (sent * 37 % 1400) as usize
                        };
                        assert_eq!(out.alloc(1, len), 1);
                        let i = out.len() - 1;
                        frame(sent, len, out.data_mut(i));
                        sent += 1;
                    }
                    while !out.is_empty() {
                        tx.tx_burst(&mut out).unwrap();
                        nic.step();
                        rx.rx_burst(&mut got).unwrap();
                        for i in 0..got.len() {
                            let len = if seen % 13 == 5 {
                                20
                            } else {
                                60 + (seen * 37 % 1400) as usize
                            };
                            // Runts arrive padded with zeros to 60 bytes.
                            expect.fill(0);
                            frame(seen, len, &mut expect);
                            let len = len.max(60);
                            assert!(got.data(i) == &expect[..len], "frame {seen} ({tx_fast}, {rx_fast})");
                            seen += 1;
                        }
                        got.clear();
                    }
                }
                for _ in 0..8 {
                    nic.step();
                    tx.reclaim().unwrap();
                    rx.rx_burst(&mut got).unwrap();
                    seen += got.len() as u64;
                    got.clear();
                }
                assert_eq!(seen, sent);
                assert_eq!(tx.stats().bytes, rx.stats().bytes);
                drop((out, got));
                r.teardown();
            }
        }
    }

    /// The one-pass eMPW path tests a burst's lengths once, by ORing `len - 60` over it, and
    /// looks at each frame only when that OR reaches the power of two below the port's span:
    /// frames at both ends of the range still go out whole, and one frame past either end
    /// still goes to the slow path (padded, or dropped alone), in both builds.
    #[test]
    fn the_one_pass_length_test_keeps_the_exact_bounds() {
        // 1000-byte frames at most: span 941, so the OR test clears `len - 60` below 512.
        let dev = ModelConfig {
            max_frame: 1000,
            ..ModelConfig::default()
        };
        for movbe in [true, false] {
            let mut r = Rig::new(dev.clone(), 64, 64, 512);
            let Rig { tx, rx, pool, nic, .. } = &mut r;
            tx.set_movbe(movbe);
            let mut got = Burst::new(pool, 64);
            let mut seq = 0u64;
            // (the length of frame k of a burst, frames expected on the wire, drops expected)
            type Case = (fn(usize) -> usize, usize, u64);
            let cases: [Case; 5] = [
                (|_| 60, 32, 0),
                (|k| if k % 2 == 0 { 1000 } else { 572 }, 32, 0),
                (|k| 572 + k * 13, 32, 0),
                (|k| if k == 9 { 1001 } else { 60 }, 31, 1),
                (|k| if k == 30 { 59 } else { 1000 - k }, 32, 0),
            ];
            for (lens, arrive, drops) in cases {
                let drops_before = tx.stats().drops;
                let mut out = Burst::new(pool, 32);
                let mut want = Vec::new();
                for k in 0..32 {
                    let len = lens(k);
                    assert_eq!(out.alloc(1, len), 1);
                    frame(seq, len, out.data_mut(k));
                    if len <= 1000 {
                        // A runt arrives padded with zeros to 60 bytes.
                        let mut f = vec![0u8; len.max(60)];
                        frame(seq, len, &mut f);
                        want.push(f);
                    }
                    seq += 1;
                }
                assert_eq!(tx.tx_burst(&mut out).unwrap(), 32);
                nic.step();
                assert_eq!(rx.rx_burst(&mut got).unwrap(), arrive, "movbe {movbe}");
                for (i, f) in want.iter().enumerate() {
                    assert!(got.data(i) == &f[..], "frame {i} (movbe {movbe})");
                }
                got.clear();
                assert_eq!(tx.stats().drops - drops_before, drops);
            }
            drop(got);
            r.teardown();
        }
    }

    /// Bursts whose eMPW data segments or buffer-ring slots wrap the ring end are written in
    /// pieces into one WQE ([`DvTxQueue::fill_wrapping`]); where the checksum flags change
    /// exactly at a piece boundary, the burst still goes out as two WQEs, each asking the device
    /// for its own packets' checksums (one pass per piece would not see the change). Every frame
    /// arrives in order with correct checksums, in both builds, at every ring position.
    #[test]
    fn bursts_that_wrap_the_ring_keep_their_checksum_requests() {
        use crate::mem::pool::flags::{TX_L3_CSUM, TX_L4_CSUM};
        for movbe in [true, false] {
            let mut r = Rig::new(ModelConfig::default(), 64, 256, 1024);
            let Rig { tx, rx, pool, nic, .. } = &mut r;
            tx.set_movbe(movbe);
            let units = tx.elts.len();
            let (mut sent, mut seen, mut wrapped) = (0u32, 0u32, 0);
            let mut got = Burst::new(pool, 64);
            for round in 0..200u32 {
                let n = 32 - (round % 7) as usize;
                // Where this burst's data segments or buffer-ring slots would reach the ring end.
                let d = (tx.pi * 4 + 2) as usize & (units - 1);
                let e = tx.elts_head as usize & (units - 1);
                let cut = (units - d).min(units - e);
                // Every other wrapping burst switches to checksum requests at the cut.
                let switch = cut < n && round % 2 == 0;
                wrapped += usize::from(cut < n);
                let mut out = Burst::new(pool, 32);
                for k in 0..n {
                    let mut frame = Vec::new();
                    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                        .udp(1234, 5678)
                        .write(&mut frame, &(sent + k as u32).to_be_bytes())
                        .unwrap();
                    frame.resize(60, 0);
                    let offload = switch && k >= cut;
                    if offload {
                        frame[24..26].copy_from_slice(&[0, 0]);
                        frame[40..42].copy_from_slice(&[0, 0]);
                    }
                    assert!(out.push_copy(&frame));
                    if offload {
                        out.set_flags(k, TX_L3_CSUM | TX_L4_CSUM);
                    }
                }
                assert_eq!(tx.tx_burst(&mut out).unwrap(), n);
                sent += n as u32;
                nic.step();
                rx.rx_burst(&mut got).unwrap();
                for i in 0..got.len() {
                    let parsed = etherparse::SlicedPacket::from_ethernet(got.data(i)).unwrap();
                    let Some(etherparse::NetSlice::Ipv4(ip)) = parsed.net else {
                        panic!("not IPv4")
                    };
                    let hdr = ip.header().to_header();
                    assert_eq!(hdr.header_checksum, hdr.calc_header_checksum(), "frame {seen}");
                    let Some(etherparse::TransportSlice::Udp(udp)) = parsed.transport else {
                        panic!("not UDP")
                    };
                    assert_eq!(udp.payload()[..4], seen.to_be_bytes(), "frame {seen} out of order");
                    let want = udp.to_header().calc_checksum_ipv4(&hdr, udp.payload()).unwrap();
                    assert_eq!(udp.checksum(), want, "frame {seen}: UDP checksum (movbe {movbe})");
                    seen += 1;
                }
                got.clear();
                tx.reclaim().unwrap();
            }
            assert!(wrapped >= 10, "only {wrapped} bursts wrapped a ring");
            assert_eq!(seen, sent);
            drop(got);
            r.teardown();
        }
    }

    /// Each frame's WQE inlines exactly what the device's inline mode asks of it (the bytes
    /// `prm::inline_test_frames` counts by hand), the rest gathered, and the model, which
    /// enforces the same mode, sends every frame unchanged.
    #[test]
    fn wqes_inline_exactly_the_headers_each_mode_asks_for() {
        use crate::dv::golden::inline_test_frames;
        use crate::dv::prm::InlineMode;
        let modes = [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp];
        for (col, mode) in modes.into_iter().enumerate() {
            // SEND WQEs in every mode (no eMPW), so that each frame has its own Ethernet segment.
            let dev = ModelConfig {
                inline_mode: mode,
                enhanced_mpw: false,
                ..ModelConfig::default()
            };
            let mut r = Rig::new(dev, 64, 64, 256);
            let Rig { tx, rx, pool, nic, .. } = &mut r;
            let mut got = Burst::new(pool, 8);
            for (what, f, want) in inline_test_frames() {
                let mut out = Burst::new(pool, 1);
                assert!(out.push_copy(&f));
                assert_eq!(tx.tx_burst(&mut out).unwrap(), 1);
                let inlined = tx.sq.wqe(tx.last_wqe).eth.inline_hdr_sz.get();
                // Below the mode's minimum the canonical SEND's 18 bytes (VPP's layout).
                assert_eq!(usize::from(inlined), want[col].max(18), "{what}, mode {}", mode.name());
                nic.step();
                assert_eq!(rx.rx_burst(&mut got).unwrap(), 1, "{what}, mode {}", mode.name());
                assert_eq!(got.data(0), &f[..], "{what}, mode {}", mode.name());
                got.clear();
            }
            drop(got);
            r.teardown();
        }
    }

    /// Chained packets (jumbo frames over several buffers) and VLAN insertion requests, mixed
    /// with plain frames, leave on the wire as they should on both devices: chains whole, tags
    /// after the MAC addresses (inserted by the device on a ConnectX-5, in the inline header on
    /// a ConnectX-4); nothing is lost and the pool is full after teardown.
    #[test]
    fn chained_and_tagged_frames_leave_whole() {
        for dev in [ModelConfig::default(), ModelConfig::connectx4()] {
            let q = QueueConfig {
                size: 64,
                ..QueueConfig::default()
            };
            let nic = Nic::new(vec![Link::capture(), Link::Null], dev.clone()).unwrap();
            let pool: Rc<Pool> = Pool::new(PoolConfig {
                buffers: 2048,
                ..PoolConfig::default()
            })
            .unwrap();
            let lkey = nic.register_mr(pool.region());
            let tx_cq = nic.create_cq(q.size).unwrap();
            let sq = nic.create_sq(0, q.size, tx_cq.cqn()).unwrap();
            // SAFETY: the model made these rings for this queue alone; the infos keep them alive.
            let mut tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &q, nic.caps(), nic.control()) }.unwrap();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut out = Burst::new(&pool, 32);
            let mut want = Vec::new();
            let mut seen = 0usize;
            for round in 0..150 {
                for _ in 0..1 + next() % 12 {
                    let len = if next() % 3 == 0 {
                        60 + next() as usize % 1400
                    } else {
                        60 + next() as usize % 8941
                    };
                    let mut f: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                    assert!(out.push_frame(&f), "round {round}");
                    if next() % 4 == 0 {
                        let tci = next() as u16;
                        out.set_vlan(out.len() - 1, Some(tci));
                        f.splice(12..12, [0x81, 0x00, (tci >> 8) as u8, tci as u8]);
                    }
                    want.push(f);
                }
                while !out.is_empty() {
                    tx.tx_burst(&mut out).unwrap();
                    nic.step();
                    tx.reclaim().unwrap();
                }
                for f in nic.take_captured(0) {
                    assert!(
                        f == want[seen],
                        "frame {seen} on {:?}: {} bytes, want {}",
                        dev.inline_mode,
                        f.len(),
                        want[seen].len()
                    );
                    seen += 1;
                }
            }
            for _ in 0..4 {
                nic.step();
                tx.reclaim().unwrap();
            }
            seen += nic.take_captured(0).len();
            assert_eq!(seen, want.len());
            assert_eq!(tx.stats().drops, 0);
            assert_eq!(tx.stats().errors.total(), 0);
            assert_eq!(tx.in_flight(), 0);
            drop((out, tx, sq, tx_cq));
            assert_eq!(pool.free_count(), pool.capacity());
            nic.deregister_mr(lkey);
        }
    }
}
