//! The library's half of the rings, as libmlx5 drives them, written from rdma-core's provider
//! (providers/mlx5/qp.c `_mlx5_post_send` / `post_send_db`, `mlx5_post_wq_recv`; cq.c
//! `get_sw_cqe`, `update_cons_index`) and the layouts of mlx5dv.h, not from rawpkt's driver
//! rings (`src/dv/ring.rs`): the ibverbs datapath then checks the model against rdma-core's
//! rules rather than the driver against itself. The formats of the entries (WQE segments, CQE
//! fields) are the shared `mlx5_prm` definitions, checked against rdma-core's own byte
//! vectors.
//!
//! The addresses are what `mlx5dv_init_obj` hands over ([`RawQueue`]); the object owning the
//! queue (its `mlx5_model::QueueMem`) keeps them mapped for as long as the ring lives.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use mlx5_model::RawQueue;
use mlx5_prm as prm;
use mlx5_prm::MiniFormat;

/// `MLX5_RCV_DBR`, `MLX5_SND_DBR`: the receive and send counters of a QP's doorbell record;
/// `MLX5_CQ_SET_CI`: the consumer index of a CQ's (mlx5dv.h).
const RCV_DBR: usize = 0;
const SND_DBR: usize = 1;
const CQ_SET_CI: usize = 0;
/// `MLX5_SEND_WQE_BB`, one `mlx5_wqe_data_seg` of a receive WQE, a 64-byte CQE.
const WQEBB: usize = 64;
const RECV_SEG: usize = 16;
const CQE: usize = 64;
/// `MLX5_CQE_INVALID`, `MLX5_CQE_OWNER_MASK`.
const CQE_INVALID: u8 = 0xf;
const CQE_OWNER_MASK: u8 = 1;

fn check(q: &RawQueue, stride: usize) -> Result<(), String> {
    if q.buf.is_null() || q.dbrec.is_null() || !q.dbrec.is_aligned() {
        return Err("queue without a buffer or doorbell record".into());
    }
    if !q.cnt.is_power_of_two() || q.stride as usize != stride {
        return Err(format!("queue of {} entries of {} bytes", q.cnt, q.stride));
    }
    Ok(())
}

/// Store `v` (big-endian in memory) to a doorbell record word, after everything written before.
///
/// # Safety
/// `word` is a live, aligned doorbell record word.
unsafe fn record(word: *mut u32, v: u32) {
    // SAFETY: per the contract; the device reads it concurrently, hence the atomic.
    unsafe { (*word.cast::<AtomicU32>()).store(v.to_be(), Ordering::Release) };
}

/// A send queue: WQEBBs, the send counter of the doorbell record, the BlueFlame register.
pub(crate) struct SendRing {
    q: RawQueue,
    /// Which half of the BlueFlame register the next doorbell goes to (`bf->offset`: 0 or
    /// `bf->buf_size`).
    bf_offset: usize,
}

// SAFETY: the ring is plain addresses into memory the owning object keeps mapped; every access
// is made under the owner's lock.
unsafe impl Send for SendRing {}

impl SendRing {
    /// # Safety
    /// `q` describes a live SQ that only this ring posts to, mapped while the ring lives, with
    /// a BlueFlame register of two halves of `q.bf_size` bytes at `q.bf_reg`.
    pub unsafe fn new(q: RawQueue) -> Result<SendRing, String> {
        check(&q, WQEBB)?;
        if q.bf_reg.is_null() || !(q.bf_reg as usize).is_multiple_of(8) || !q.bf_size.is_multiple_of(64) {
            return Err("SQ without a doorbell register".into());
        }
        Ok(SendRing { q, bf_offset: 0 })
    }

    /// WQEBBs in the ring.
    pub fn size(&self) -> u32 {
        self.q.cnt
    }

    /// Writes up to 64 bytes into WQEBB `idx` (free-running): plain stores, as libmlx5 builds
    /// WQEs in place; the doorbell orders them.
    pub fn write_wqebb(&mut self, idx: u32, bytes: &[u8]) {
        let n = bytes.len().min(WQEBB);
        let at = (idx & (self.q.cnt - 1)) as usize * WQEBB;
        // SAFETY: the slot lies inside the live ring of cnt WQEBBs; n <= 64.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.q.buf.add(at), n) };
    }

    /// `post_send_db`: the WQEs, then the send counter (`udma_to_device_barrier`, then
    /// `qp->db[MLX5_SND_DBR] = htobe32(cur_post & 0xffff)`), then (`mmio_wc_start`) the
    /// register half at `bf->offset`: a BlueFlame copy of the last WQE (at WQEBB `last`,
    /// `ds` 16-byte units) when it is the only one posted, was built inline and fits the half
    /// (`nreq == 1 && inl && size > 1 && size <= bf->buf_size / 16`: `mlx5_bf_copy`, 64-byte
    /// blocks), else its first 8 bytes as they lie in memory (`mmio_write64_be(bf->reg +
    /// bf->offset, *(__be64 *)ctrl)`); then `mmio_flush_writes` and `bf->offset ^=
    /// bf->buf_size`.
    pub fn doorbell(&mut self, pi: u32, last: u32, ds: u32, bf_copy: bool) {
        // SAFETY: the send word of this SQ's live record.
        unsafe { record(self.q.dbrec.add(SND_DBR), pi & 0xffff) };
        fence(Ordering::SeqCst);
        let at = (last & (self.q.cnt - 1)) as usize * WQEBB;
        let half = self.q.bf_reg.wrapping_add(self.bf_offset);
        let copy = bf_copy && ds > 1 && ds <= self.q.bf_size / 16;
        // A copy is whole 64-byte blocks of the WQE; a WQE that wraps is copied from the ring's
        // start on (`mlx5_bf_copy` does the same with `qp->sq.qend`).
        let words = if copy { (ds as usize * 16).div_ceil(64) * 8 } else { 1 };
        for w in (0..words).rev() {
            let from = (at + w * 8) % (self.q.cnt as usize * WQEBB);
            // SAFETY: `from` lies in the live ring; the register half is the SQ's live,
            // 8-byte-aligned BlueFlame half of bf_size bytes (words * 8 <= bf_size, checked
            // above), whose words the device takes atomically. The first word, the doorbell,
            // goes last, so the device never takes a half-copied WQE's doorbell.
            unsafe {
                let v = std::ptr::read_unaligned(self.q.buf.add(from).cast::<u64>());
                (*half.add(w * 8).cast::<AtomicU64>()).store(v, Ordering::Release);
            }
        }
        fence(Ordering::SeqCst);
        self.bf_offset ^= self.q.bf_size as usize;
    }

    /// `mlx5_modify_qp` to RESET: the send counter back to 0.
    pub fn reset_record(&mut self) {
        // SAFETY: the send word of this SQ's live record.
        unsafe { record(self.q.dbrec.add(SND_DBR), 0) };
    }
}

/// A receive queue of WQEs of `stride / 16` data segments and the receive counter of its
/// doorbell record.
pub(crate) struct RecvRing {
    q: RawQueue,
}

// SAFETY: as for SendRing.
unsafe impl Send for RecvRing {}

impl RecvRing {
    /// # Safety
    /// `q` describes a live RQ that only this ring posts to, mapped while the ring lives.
    pub unsafe fn new(q: RawQueue) -> Result<RecvRing, String> {
        if !q.stride.is_power_of_two() || q.stride < RECV_SEG as u32 {
            return Err(format!("receive WQEs of {} bytes", q.stride));
        }
        check(&q, q.stride as usize)?;
        Ok(RecvRing { q })
    }

    pub fn size(&self) -> u32 {
        self.q.cnt
    }

    /// Data segments a WQE holds (`rq.max_gs`).
    pub fn max_gs(&self) -> u32 {
        self.q.stride / RECV_SEG as u32
    }

    /// Writes WQE `idx` (free-running): `segs` as its data segments, then, when they do not
    /// fill it, a terminator (`mlx5_post_wq_recv`: `if (j < max_gs)` the next segment gets
    /// `MLX5_INVALID_LKEY`). The caller passes at most `max_gs` segments.
    pub fn write_wqe(&mut self, idx: u32, segs: &[[u8; 16]], terminator: &[u8; 16]) {
        let stride = self.q.stride as usize;
        let at = (idx & (self.q.cnt - 1)) as usize * stride;
        let max = stride / RECV_SEG;
        for (k, seg) in segs
            .iter()
            .take(max)
            .chain((segs.len() < max).then_some(terminator))
            .enumerate()
        {
            // SAFETY: segment k < max of the slot lies inside the live ring.
            unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), self.q.buf.add(at + k * RECV_SEG), RECV_SEG) };
        }
    }

    /// `udma_to_device_barrier(); *recv_db = htobe32(head & 0xffff)`.
    pub fn doorbell(&mut self, head: u32) {
        // SAFETY: the receive word of this RQ's live record.
        unsafe { record(self.q.dbrec.add(RCV_DBR), head & 0xffff) };
    }
}

/// A CQ of 64-byte CQEs and the consumer index of its doorbell record.
pub(crate) struct CompRing {
    q: RawQueue,
    /// The CQ compresses (created with `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`): the mini-CQE
    /// format its sessions carry.
    comp: Option<MiniFormat>,
    /// The compressed session being read, if any.
    zip: Option<Session>,
}

/// A compressed session (basic layout: reference §3.11): the title at consumer index `head`,
/// `n` packets; the mini-CQE array `arr` (of the packets `8 * arr ..`) copied, since its slot is
/// stamped once read.
struct Session {
    head: u32,
    n: u32,
    title: [u8; CQE],
    arr: u32,
    minis: [u8; CQE],
}

// SAFETY: as for SendRing.
unsafe impl Send for CompRing {}

impl CompRing {
    /// # Safety
    /// `q` describes a live CQ whose consumer only this ring is, mapped while the ring lives.
    pub unsafe fn new(q: RawQueue) -> Result<CompRing, String> {
        check(&q, CQE)?;
        Ok(CompRing {
            q,
            comp: None,
            zip: None,
        })
    }

    /// The same ring over a CQ created with compression in format `comp`.
    pub fn with_compression(mut self, comp: Option<MiniFormat>) -> CompRing {
        self.comp = comp;
        self
    }

    /// `get_sw_cqe(cq, ci)`: the CQE at consumer index `ci` if software owns it — its opcode
    /// is not INVALID and its owner bit equals `!!(ci & cqe_cnt)`, the parity of the pass —
    /// read after `udma_from_device_barrier` (an acquire load of `op_own`).
    ///
    /// On a compressing CQ, a session reads as one plain CQE per packet, as the kernel's
    /// `mlx5e_decompress_cqes_start` / `mlx5e_decompress_cqe` expand it (rdma-core's own
    /// `mlx5_get_next_cqe` does not: its CQs compress only for DV programs, which read the
    /// sessions themselves): packet `k` is the title with the byte count (and hash or checksum)
    /// of mini-CQE `k`, WQE counter title + `k` (or the mini's stride index), format 0, and the
    /// owner bit of its own slot. Each slot of the session after the title is stamped
    /// `MLX5_CQE_INVALIDATE` as its packet is read (DPDK `mlx5_rx_poll_len`), so that its stale
    /// bytes never pass for a CQE of a later pass. Polling one index again gives the same CQE.
    pub fn poll(&mut self, ci: u32) -> Option<[u8; 64]> {
        if let Some(z) = &self.zip {
            if ci.wrapping_sub(z.head) < z.n {
                return Some(self.expand(ci));
            }
            self.zip = None;
        }
        let bytes = self.poll_slot(ci)?;
        match self.comp {
            Some(_) if bytes[CQE - 1] & 0xfc == prm::CQE_TITLE_OP_FMT => {
                let n = prm::Cqe64::from_bytes(&bytes).mini_cqe_count();
                if n == 0 || n > self.q.cnt {
                    // Not a session a device could write: handed over as it is (an unexpected
                    // opcode/format to the caller).
                    return Some(bytes);
                }
                self.zip = Some(Session {
                    head: ci,
                    n,
                    title: bytes,
                    arr: 0,
                    minis: self.slot(ci.wrapping_add(prm::mini_array_slot(0))),
                });
                Some(self.expand(ci))
            }
            _ => Some(bytes),
        }
    }

    /// Packet `ci` of the current session (see [`CompRing::poll`]).
    fn expand(&mut self, ci: u32) -> [u8; 64] {
        let fmt = self.comp.expect("sessions only on compressing CQs");
        let (cnt, pass) = (self.q.cnt, u8::from(ci & self.q.cnt != 0));
        let z = self.zip.as_mut().expect("a session");
        let k = ci.wrapping_sub(z.head);
        let arr = k / prm::MINI_CQES_PER_SLOT;
        if arr != z.arr {
            let at = (z.head.wrapping_add(prm::mini_array_slot(arr)) & (cnt - 1)) as usize * CQE;
            // SAFETY: an array slot of the session, inside the live ring; the device wrote it
            // before the title's op_own, which `poll_slot` read with acquire.
            unsafe { std::ptr::copy_nonoverlapping(self.q.buf.add(at), z.minis.as_mut_ptr(), CQE) };
            z.arr = arr;
        }
        let m = prm::mini_array_from(&z.minis)[(k % prm::MINI_CQES_PER_SLOT) as usize];
        let mut c = prm::Cqe64::from_bytes(&z.title);
        c.byte_cnt = m.byte_cnt;
        match fmt {
            MiniFormat::Hash => {
                c.rx_hash_res = m.w0;
                c.wqe_counter = prm::Be16::new(c.wqe_counter.get().wrapping_add(k as u16));
            }
            MiniFormat::Csum => {
                c.csum = prm::Be16::new(m.checksum());
                c.wqe_counter = prm::Be16::new(c.wqe_counter.get().wrapping_add(k as u16));
            }
            MiniFormat::CsumStridx => {
                c.csum = prm::Be16::new(m.checksum());
                c.wqe_counter = prm::Be16::new(m.stride_idx());
            }
        }
        c.op_own = (prm::CQE_RESP_SEND << 4) | pass;
        if k != 0 {
            let at = (ci & (cnt - 1)) as usize * CQE;
            // SAFETY: the slot's op_own, inside the live ring, consumed now.
            unsafe { (*self.q.buf.add(at + CQE - 1).cast::<AtomicU8>()).store(prm::CQE_INVALIDATE, Ordering::Relaxed) };
        }
        *c.as_bytes()
    }

    /// The 64 bytes of the slot of index `ci`, unchecked.
    fn slot(&self, ci: u32) -> [u8; 64] {
        let at = (ci & (self.q.cnt - 1)) as usize * CQE;
        let mut out = [0u8; 64];
        // SAFETY: the slot lies inside the live ring.
        unsafe { std::ptr::copy_nonoverlapping(self.q.buf.add(at), out.as_mut_ptr(), CQE) };
        out
    }

    /// `get_sw_cqe` on one slot (see [`CompRing::poll`]).
    fn poll_slot(&self, ci: u32) -> Option<[u8; 64]> {
        let at = (ci & (self.q.cnt - 1)) as usize * CQE;
        // SAFETY: the slot lies inside the live ring; op_own is its last byte, which the device
        // writes last.
        let op_own = unsafe { (*self.q.buf.add(at + CQE - 1).cast::<AtomicU8>()).load(Ordering::Acquire) };
        let pass = u8::from(ci & self.q.cnt != 0);
        if op_own >> 4 == CQE_INVALID || op_own & CQE_OWNER_MASK != pass {
            return None;
        }
        let mut out = [0u8; 64];
        // SAFETY: the whole slot, owned by software now (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.q.buf.add(at), out.as_mut_ptr(), CQE) };
        Some(out)
    }

    /// `update_cons_index`: `dbrec[MLX5_CQ_SET_CI] = htobe32(cons_index & 0xffffff)`, after the
    /// CQEs were read.
    pub fn publish_ci(&mut self, ci: u32) {
        // SAFETY: the consumer word of this CQ's live record.
        unsafe { record(self.q.dbrec.add(CQ_SET_CI), ci & 0x00ff_ffff) };
    }
}
