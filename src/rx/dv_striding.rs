//! The mlx5 Direct Verbs receive path on a striding (multi-packet) RQ: each WQE holds 8 or 16
//! strides ([`params_for`]), and the device places one frame after another in them, so that it
//! fetches one receive descriptor per 8 or 16 frames instead of one per frame (DPDK `mlx5_rx.c`
//! `mlx5_rx_burst_mprq`; VPP `rdma/input.c`, striding mode).
//!
//! How a stride maps onto the pool: every stride is one pool buffer. The WQE is a next segment
//! and one data segment per stride, each `stride` bytes at a buffer's headroom, as VPP lays its
//! striding WQEs out ("the trick": 8 data segments of one vlib buffer each, `device.c`). A frame
//! in one stride is handed up as that buffer, without a copy, and every buffer index stays in
//! exactly one place (the ring, a `Burst` or the pool) as the pool's invariant wants; a WQE is
//! posted again, with fresh buffers, once all its strides are consumed. The alternative of one
//! large buffer per WQE (DPDK's) needs either a copy of each frame into a pool buffer
//! (`mprq_max_memcpy_len`: an allocation and a `memcpy` per packet, which an experimental build
//! measured as far more instructions per packet than this path; `docs/benchmarks.md`) or
//! reference counts on the large buffer, which rawpkt's `Pool` does not have.
//!
//! A frame over several strides (longer than a stride) lies in consecutive buffers of its WQE, one
//! stride each: it is handed up as a chained packet over them ([`flags::CHAINED`], a `SegLink` per
//! buffer, as the cyclic queue's multi-buffer WQEs in its `burst_offload`), without a copy,
//! so any frame up to a WQE's bytes (16 strides of 1 KiB: 16 KiB, a 9000-byte jumbo frame) arrives
//! whole. DPDK instead copies such a frame out of its one large stride buffer, or attaches the
//! stride to an external-buffer mbuf (`mlx5_rx.c` `mprq_buf_to_pkt`); VPP links the vlib buffers
//! of a frame's strides into a chain (`rdma/input.c`, striding mode), as this queue does. A filler
//! CQE gives the strides it names back to the pool.
//!
//! Compressed completions (striding + compressed): where the CQ was created with the
//! checksum/stride-index mini-CQE format (`MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`;
//! `QueueConfig::rx_cqe_compression`, not with timestamps), a session's mini-CQEs each carry the
//! stride index and MPRQ byte count of one frame, and the title the rest (DPDK
//! `mlx5_rxtx_vec_sse.h` `rxq_cq_decompress_v`; VPP `rdma/input.c` on striding RQs). Sessions are
//! expanded as the cyclic queue's (`rx::dv_core::Zip`), each frame taking its strides as above.
//!
//! The queue is the receive core (`rx::dv_core`) on a striding RQ ([`Striding`]): the core's
//! fast path takes one-stride frames (a stride is a buffer, and the RQ consumer index counts
//! strides); this file holds what only a striding RQ does: its WQEs and refill, and what its
//! CQEs and mini-CQEs mean past one-stride frames (fillers, frames over several strides, the
//! checks that a completion is where the queue is).

use std::rc::Rc;
use std::sync::Arc;

use super::dv_core::{Progress, RqKind, RxCore, Zip, FLAGS_LUT, MINI};
use crate::dv::prm::{mprq, syndrome, Be16, Be64, Cqe64, DataSeg, MiniCqe, MiniFormat, CQE_RESP_ERR, CQE_RESP_SEND};
use crate::dv::ring::{CqInfo, CqRing, RwqInfo, RxPoll, Session, StridingRqRing};
use crate::dv::{failed_error, DvControl};
use crate::mem::pool::{flags, BufGeometry, Burst, Packet, Pool};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats, RxQueue};

/// Strides per WQE, log2, at least: 8, the fewest a ConnectX-5 takes
/// (`MLX5_EXT_MIN_SINGLE_WQE_LOG_NUM_STRIDES`) and VPP's choice; more where the strides are small
/// ([`params_for`]). One data segment each: a WQE of 8 is a next segment and 8 data segments, 256
/// bytes (`mprq::wqe_size`), of 16 512 bytes.
pub const STRIDES_LOG: u8 = 3;

/// The smallest striding WQE, log2 bytes, DPDK assumes a device takes when it cannot ask
/// (`MLX5_MPRQ_LOG_MIN_STRIDE_WQE_SIZE`, 16 KiB; with DevX it reads `log_min_stride_wqe_sz`
/// from the HCA caps, which `mlx5dv_query_device` does not report).
const LOG_MIN_WQE_BYTES: u32 = 14;

/// The receive options a striding queue cannot honour, refused in one line: its RQ takes no VLAN
/// stripping (the model, like `mlx5_ib`'s striding `create_rq`, leaves `vsd` set). Frames longer
/// than a buffer arrive chained; `rx_max_frame` beyond a WQE's bytes is refused by
/// [`DvStridingRxQueue::new`], which knows the WQE.
pub(crate) fn refuse_other_options(cfg: &crate::QueueConfig, _pool: &Pool) -> Result<(), Error> {
    if cfg.rx_vlan_strip {
        return Err(Error::config(
            "rx_striding takes no rx_vlan_strip: ask for one or the other",
        ));
    }
    Ok(())
}

/// The striding parameters for receive buffers of `pool` on a device of `caps`: strides of the
/// largest power of two that fits a buffer's data room, within the device's stride sizes, and
/// [`STRIDES_LOG`] of them, or more where the device's fewest or a WQE of at least 16 KiB
/// (`LOG_MIN_WQE_BYTES`) needs more. One line saying why when none fits.
pub fn params_for(pool: &Pool, caps: &mprq::Caps) -> Result<mprq::Params, Error> {
    let no = |why: String| Error::config(format!("rx_striding: {why}"));
    if !caps.supported() {
        return Err(no(
            "the device has no striding receive queue (ConnectX-5 and later have one; \
                       mlx5dv_query_device reports no striding RQ caps); open the queue without \
                       rx_striding"
                .into(),
        ));
    }
    let room = pool.data_room();
    let log_stride_bytes = (31 - room.leading_zeros()).min(caps.max_log_stride_bytes);
    let log_num_strides = u32::from(STRIDES_LOG)
        .max(caps.min_log_num_strides)
        .max(LOG_MIN_WQE_BYTES.saturating_sub(log_stride_bytes));
    if log_num_strides > caps.max_log_num_strides || (1u32 << log_num_strides) > MAX_STRIDES {
        return Err(no(format!(
            "strides of 2^{log_stride_bytes} bytes (a buffer's data room is {room}) need 2^{log_num_strides} \
             per WQE (the device's fewest is 2^{}, and a WQE takes at least 2^{LOG_MIN_WQE_BYTES} bytes); \
             this driver posts one buffer per stride, at most {MAX_STRIDES} per WQE: use larger buffers",
            caps.min_log_num_strides
        )));
    }
    let p = mprq::Params {
        log_stride_bytes: log_stride_bytes as u8,
        log_num_strides: log_num_strides as u8,
        two_byte_shift: false,
    };
    caps.check(&p)
        .map_err(|e| no(format!("a buffer's data room of {room} bytes: {e}")))?;
    Ok(p)
}

/// The most strides a WQE of one data segment per stride can have: a WQE is at most 512 bytes
/// (a ConnectX-5's `max_wqe_sz_rq`), 16 of them the next segment.
const MAX_STRIDES: u32 = 16;

/// Whether a device of `caps` takes striding WQEs of as few strides as this queue posts (one
/// buffer per stride, at most [`MAX_STRIDES`]): not firmware without `ext_stride_num_range`,
/// whose fewest is 2^9 (kernel `main.c` `mlx5_ib_query_device`).
pub(crate) fn takes_per_stride_wqes(caps: &mprq::Caps) -> bool {
    caps.min_log_num_strides <= MAX_STRIDES.trailing_zeros()
}

/// The queue an `rx_striding` queue becomes on a device with striding RQs that
/// [`takes_per_stride_wqes`] says no to: a cyclic one, taking the frames the striding queue
/// would have (up to `max_frame`, chained over buffers, as far as a WQE's data segments reach).
/// DPDK falls back to a regular RQ when its MPRQ cannot be enabled (`mlx5_rxq.c`
/// `mlx5_mprq_prepare`); its own MPRQ, one data segment over a buffer of all the strides with
/// small frames copied out (`mprq_max_memcpy_len`), is a layout this per-stride queue is not.
/// Said once on stderr (log) per process.
pub(crate) fn fallback_config(cfg: &crate::QueueConfig, pool: &Pool, max_frame: u32) -> crate::QueueConfig {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        log::warn!(
            "rx_striding: the device takes striding WQEs of 2^9 strides and up (firmware without \
             ext_stride_num_range), more than this driver's one buffer per stride; the queue is a \
             cyclic one (DPDK falls back to a regular RQ the same way)"
        )
    });
    let reach = pool.data_room() * crate::dv::prm::MAX_RQ_SCATTER;
    cfg.clone()
        .rx_striding(false)
        .rx_max_frame(cfg.rx_max_frame.max(max_frame.min(reach)))
}

/// A receive queue on a striding (multi-packet) RQ: one WQE per 8 or 16 frames, one pool buffer
/// per stride.
pub struct DvStridingRxQueue {
    core: RxCore<Striding>,
}

/// A striding RQ: its ring and its WQEs' strides. The core's `bufs` holds the buffer of every
/// stride, indexed by the free-running stride counter (the RQ consumer index): WQE `w` holds
/// strides `w << log_n ..`, and WQE `rq_ci >> log_n` is the one the device fills; the core's
/// `room` is a stride's bytes.
pub(crate) struct Striding {
    ring: StridingRqRing,
    /// Strides per WQE, log2.
    log_n: u32,
    /// The bits of a CQE's `wqe_id` that name a WQE of the ring (its size - 1).
    wqe_id_mask: u16,
    /// Sessions the AVX2 path took (tests check that it ran).
    #[cfg(test)]
    vector_sessions: u64,
    /// Raw `wqe_id`s of WQEs at ring and 16-bit wraps ([`RxQueue::wqe_id_samples`]), up to
    /// [`ID_SAMPLES`], taken where `poll_other` (cold) reads a WQE's first CQE.
    id_log: Vec<crate::WqeIdSample>,
}

/// The most `wqe_id` samples a striding queue keeps.
const ID_SAMPLES: usize = 64;

/// Whether WQE `sw` (free-running) of a ring of `ring` WQEs is one [`RxQueue::wqe_id_samples`]
/// records: the first two, the last and first of each of the first four ring passes, and the
/// two either side of each 16-bit wrap of the counter.
fn id_sample_wanted(sw: u32, ring: u32) -> bool {
    let ring_edge = sw < 4 * ring && (sw.is_multiple_of(ring) || sw % ring == ring - 1);
    let wrap16 = sw >= 0xfffe && matches!(sw & 0xffff, 0xfffe | 0xffff | 0 | 1);
    sw < 2 || ring_edge || wrap16
}

/// The striding RQ in the receive core: the consumer index counts strides, one buffer each.
impl RqKind for Striding {
    const LEN_BIAS: u32 = 1 << mprq::STRIDE_NUM_SHIFT;

    #[inline(always)]
    fn log_units(&self) -> u32 {
        self.log_n
    }
    fn wqes(&self) -> u32 {
        self.ring.size()
    }
    fn bufs_per_wqe(&self) -> u32 {
        1 << self.log_n
    }
    #[inline(always)]
    fn ring_doorbell(&self, pi: u32) {
        self.ring.ring_doorbell(pi);
    }
    #[inline(always)]
    fn refill(q: &mut RxCore<Self>, min: u32) {
        q.refill(min);
    }
    fn release_posted(q: &mut RxCore<Self>) {
        q.release_bufs();
    }
    #[inline(always)]
    fn general(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError> {
        q.burst_general(out, 0, q.cq_ci, 0, 0)
    }
    #[inline(always)]
    fn burst_zip<const V: usize>(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError> {
        q.burst_zip::<V>(out)
    }
    /// Sessions of a whole WQE of 16 or 8 strides.
    fn vector_width(&self) -> usize {
        match self.log_n {
            4 => 16,
            3 => 8,
            _ => 0,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Hands up the `out.len()` frames of compressed session `sess` (stride-index mini-CQEs, title's
/// hash and flags `hf`) at strides `pos ..`, whose buffers are `bufs`, when each is a one-stride
/// frame at the stride it names ([`at_strides`]): their bytes, the session's slots invalidated;
/// else None, nothing invalidated. Whole arrays in straight-line code, a session's last,
/// partial one in a loop.
#[inline(always)]
fn take_session(
    sess: Session<'_>,
    out: &mut [Packet],
    bufs: &[u32],
    pos: u32,
    stride: u32,
    len_off: u32,
    hf: u64,
) -> Option<u32> {
    let cnt = out.len();
    let (full, rest) = (cnt / MINI as usize, cnt % MINI as usize);
    let mut run = 0u32;
    for j in 0..full {
        let at = j * MINI as usize;
        let o: &mut [Packet; MINI as usize] = (&mut out[at..at + MINI as usize]).try_into().expect("8");
        let b: &[u32; MINI as usize] = bufs[at..at + MINI as usize].try_into().expect("8");
        let m = sess.array(j as u32);
        if !at_strides(m, pos + at as u32) {
            return None;
        }
        run = run.wrapping_add(one_stride_frames(o, m, b, stride, len_off, hf)?);
    }
    if rest != 0 {
        let at = full * MINI as usize;
        let m = &sess.array(full as u32)[..rest];
        if !at_strides(m, pos + at as u32) {
            return None;
        }
        run = run.wrapping_add(one_stride_frames(&mut out[at..], m, &bufs[at..], stride, len_off, hf)?);
    }
    sess.invalidate();
    Some(run)
}

/// Whether the stride indices of `minis` (checksum/stride-index format) are `at, at + 1, ...`,
/// each tested with no branch: the expected index's bytes XORed with the mini-CQE's, ORed over
/// the array, and one test at the end (`at` + the count is at most a WQE's 16 strides, so each
/// index is one byte). On whole 8-byte mini-CQEs, so that the compiler may test several at once.
#[inline(always)]
fn at_strides(minis: &[MiniCqe], at: u32) -> bool {
    let mut acc = 0u64;
    for (k, m) in minis.iter().enumerate() {
        // The mini-CQE's 8 bytes as they lie, byte i at bits 8i (one load on a little-endian
        // host): the stride index (big-endian) is bytes 2 and 3.
        let [a, b, c, d] = m.w0.get().to_be_bytes();
        let [e, f, g, h] = m.byte_cnt.get().to_be_bytes();
        let bytes = u64::from_le_bytes([a, b, c, d, e, f, g, h]);
        acc |= bytes ^ u64::from(at + k as u32) << 24;
    }
    acc & 0xffff_0000 == 0
}

/// Hands up the frames of `minis` (a compressed session's, in the checksum/stride-index format)
/// in `out` with the buffers `bufs`, when each is a one-stride frame (the MPRQ byte count `1 << 16
/// | len`, no filler, `len` within the stride: one subtract and one compare, as
/// the core's `RxCore::poll_segment`); their bytes, or None at the first that is not.
#[inline(always)]
fn one_stride_frames(
    out: &mut [Packet],
    minis: &[MiniCqe],
    bufs: &[u32],
    stride: u32,
    len_off: u32,
    hf: u64,
) -> Option<u32> {
    let mut run = 0u32;
    for ((slot, m), &buf) in out.iter_mut().zip(minis).zip(bufs) {
        let len = m.byte_cnt.get().wrapping_sub(1 << mprq::STRIDE_NUM_SHIFT);
        if len > stride {
            return None;
        }
        slot.buf = buf;
        slot.set_len_off(len | len_off);
        slot.set_hash_flags(hf);
        run = run.wrapping_add(len);
    }
    Some(run)
}

/// Writes the addresses of the buffers `bufs` (at offset `off`) into the data segments `segs` of
/// a striding WQE, when they are `N` (any number for 0); whether it did.
#[inline(always)]
fn fill_wqe<const N: usize>(segs: &mut [DataSeg], bufs: &[u32], geo: BufGeometry<'_>, off: u32) -> bool {
    fn fill(segs: &mut [DataSeg], bufs: &[u32], geo: BufGeometry<'_>, off: u32) {
        for (seg, &idx) in segs.iter_mut().zip(bufs) {
            seg.addr = Be64::new(geo.buf_addr(idx, off));
        }
    }
    if N == 0 {
        fill(segs, bufs, geo, off);
        return true;
    }
    match (<&mut [DataSeg; N]>::try_from(segs), <&[u32; N]>::try_from(bufs)) {
        (Ok(s), Ok(b)) => {
            fill(s, b, geo, off);
            true
        }
        _ => false,
    }
}

/// What the slow path found at a consumer index.
enum Other {
    Empty,
    /// A plain one-stride frame after all: the fast path takes it.
    Ready,
    /// The CQE consumed these strides and hands up this many packets (0 or 1), `chains` of them
    /// chained.
    Done {
        strides: u32,
        packets: usize,
        chains: usize,
    },
    /// The title of a compressed session.
    Title(Cqe64),
    /// An error that needs a queue reset.
    Fatal(u8),
}

impl DvStridingRxQueue {
    /// A receive queue over the striding WQ `rwq` (made with `params`, WQEs of one data segment
    /// per stride) and CQ `cq`, filled with buffers of `pool` (registered as `lkey`).
    ///
    /// # Safety
    /// As [`DvRxQueue::new`](crate::rx::dv::DvRxQueue::new).
    #[allow(unsafe_code, clippy::too_many_arguments)]
    pub unsafe fn new(
        rwq: &RwqInfo,
        cq: &CqInfo,
        params: mprq::Params,
        wq_num: u32,
        lkey: u32,
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        ctl: Arc<dyn DvControl>,
    ) -> Result<DvStridingRxQueue, Error> {
        let n = params.num_strides();
        if n > MAX_STRIDES || params.stride_bytes() > pool.data_room() || params.two_byte_shift {
            return Err(Error::config(format!(
                "striding RQ of {n} strides of {} bytes: this queue takes at most {MAX_STRIDES} \
                 strides of at most a buffer's data room ({} bytes), without the two-byte shift",
                params.stride_bytes(),
                pool.data_room()
            )));
        }
        // The queue posts only buffers of its own pool that it holds in its ring, and publishes
        // a consumer index only past CQEs it has finished reading.
        // SAFETY: the rings are live and this queue's alone (the caller's contract).
        let (rq, cq) = unsafe { (StridingRqRing::new(rwq, n), CqRing::new(cq)) };
        let (rq, cq) = (rq.map_err(Error::device)?, cq.map_err(Error::device)?);
        let wqe_bytes = n * params.stride_bytes();
        if cfg.rx_max_frame > wqe_bytes {
            return Err(Error::config(format!(
                "rx_max_frame {} is longer than a striding WQE ({n} strides of {} bytes): use \
                 larger buffers or open the queue without rx_striding",
                cfg.rx_max_frame,
                params.stride_bytes()
            )));
        }
        let size = rq.size();
        // Every stride may complete on its own, and every WQE may end with a filler.
        if cq.size() < size * n + size {
            return Err(Error::device("RX CQ smaller than its striding receive queue"));
        }
        let kind = Striding {
            ring: rq,
            log_n: u32::from(params.log_num_strides),
            wqe_id_mask: (size - 1) as u16,
            #[cfg(test)]
            vector_sessions: 0,
            id_log: Vec::with_capacity(ID_SAMPLES),
        };
        let room = (params.stride_bytes(), MiniFormat::CsumStridx);
        let mut q = RxCore::new(kind, cq, room, pool, cfg, ctl, wq_num)?;
        // The next segments and the data segments' byte counts and lkeys never change; a refill
        // rewrites only addresses. VPP links the next segments although a cyclic striding RQ
        // ignores them.
        let seg = DataSeg::new(params.stride_bytes(), lkey, 0);
        for w in 0..size {
            q.rq.ring.next_seg(w).next_wqe_index = Be16::new(((w + 1) % size) as u16);
            q.rq.ring.segs(w).fill(seg);
            q.rq.ring.terminate(w);
        }
        q.refill(0);
        Ok(DvStridingRxQueue { core: q })
    }

    /// Runs the portable builds where `movbe` is false, and no AVX2 where `avx2` is false (tests
    /// compare them with the MOVBE and AVX2 ones on one CPU).
    #[cfg(all(test, feature = "model"))] // the tests that run queues over the model
    pub(crate) fn set_cpu_features(&mut self, movbe: bool, avx2: bool) {
        self.core.set_cpu_features(movbe, avx2);
    }

    /// Strides the queue holds posted (for tests: all of them once refilled).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn posted(&self) -> u32 {
        self.core.posted()
    }
}

impl RxQueue for DvStridingRxQueue {
    #[inline(never)]
    fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        self.core.rx_burst(out)
    }

    fn stats(&self) -> &QueueStats {
        &self.core.stats
    }

    fn wqe_id_samples(&self) -> Vec<crate::WqeIdSample> {
        self.core.rq.id_log.clone()
    }
}

/// The striding RQ's own paths: refill, the CQEs and mini-CQEs the core's fast path does not
/// take.
impl RxCore<Striding> {
    /// Posts WQEs with fresh buffers in every free WQE once at least `min` are free. Only whole
    /// WQEs are posted: what the pool gives beyond goes back.
    #[inline(always)]
    fn refill(&mut self, min: u32) {
        let size = self.rq.ring.size();
        let free = (self.rq_ci >> self.rq.log_n)
            .wrapping_add(size)
            .wrapping_sub(self.rq_pi);
        if free < min.max(1) {
            return;
        }
        let total = self.bufs.len();
        let smask = total - 1;
        let from = (self.rq_pi << self.rq.log_n) as usize & smask;
        let want = (free << self.rq.log_n) as usize;
        let first = want.min(total - from);
        let (low, high) = self.bufs.split_at_mut(from);
        let got = if first == want {
            self.pool.alloc_bulk(&mut high[..first])
        } else {
            self.pool.alloc_bulk2(&mut high[..first], &mut low[..want - first])
        };
        if got < want {
            self.stats.no_buffers += 1;
        }
        let wqes = (got >> self.rq.log_n) as u32;
        let whole = (wqes << self.rq.log_n) as usize;
        if whole < got {
            // Not a whole WQE's worth: back to the pool.
            for (k, s) in self.scratch[..got - whole].iter_mut().enumerate() {
                *s = self.bufs[(from + whole + k) & smask];
            }
            self.pool.free_bulk(&self.scratch[..got - whole]);
        }
        if wqes == 0 {
            return;
        }
        let geo = self.pool.geometry();
        let off = u32::from(self.data_off);
        let n = 1usize << self.rq.log_n;
        #[cfg(target_arch = "x86_64")]
        if self.avx2 && n.is_multiple_of(4) {
            if let Some(wide) = avx2::Wide::new(geo, off, self.rq.ring.segs(self.rq_pi)[0]) {
                #[allow(unsafe_code)]
                // SAFETY: `avx2` is set only where the CPU reports AVX2 (`RxCore::new`), the feature
                // the function is compiled for.
                unsafe {
                    avx2::fill_wqes_avx2(&mut self.rq.ring, &self.bufs, self.rq_pi, wqes, self.rq.log_n, wide)
                };
                self.rq_pi = self.rq_pi.wrapping_add(wqes);
                self.rq.ring.ring_doorbell(self.rq_pi);
                return;
            }
        }
        for w in 0..wqes {
            let pi = self.rq_pi.wrapping_add(w);
            let at = (pi << self.rq.log_n) as usize & smask;
            let (segs, bufs) = (self.rq.ring.segs(pi), &self.bufs[at..at + n]);
            // The stride counts of `params_for` in straight-line code (one load, multiply, add
            // and store per buffer), anything else in a loop.
            if !fill_wqe::<16>(segs, bufs, geo, off) && !fill_wqe::<8>(segs, bufs, geo, off) {
                fill_wqe::<0>(segs, bufs, geo, off);
            }
        }
        self.rq_pi = self.rq_pi.wrapping_add(wqes);
        self.rq.ring.ring_doorbell(self.rq_pi);
    }

    /// The CQE at `ci` when the fast path did not take it: nothing yet, a filler, a frame over
    /// several strides (handed up in `slot`), an error, or something broken.
    #[cold]
    #[inline(never)]
    fn poll_other(&mut self, ci: u32, slot: &mut Packet) -> Other {
        let cqe = match self.cq.reader().poll_rx(ci) {
            RxPoll::Empty => return Other::Empty,
            RxPoll::Packet(cqe) | RxPoll::Other(cqe) => *cqe,
        };
        let n = 1u32 << self.rq.log_n;
        let pos = self.rq_ci & (n - 1);
        let wqe = (self.rq_ci >> self.rq.log_n) as u16;
        if self.posted() == 0 {
            // A completion for a WQE that was never posted.
            self.stats.errors.bad_cqe += 1;
            return Other::Fatal(syndrome::LOCAL_QP_OP);
        }
        if self.zip_on && cqe.is_title() {
            return Other::Title(cqe);
        }
        if cqe.opcode() == CQE_RESP_ERR {
            let synd = cqe.as_err().syndrome;
            // Critical syndromes reset the WQ (DPDK `mlx5_rx_err_handle`). The error CQE's
            // `wqe_counter` is not trusted: DPDK reads it only to dump the CQE, and what a device
            // puts there on a striding RQ is in no source.
            if self.error_cqe(&cqe).is_err() {
                return Other::Fatal(synd);
            }
            // A non-critical error releases strides: as many as its byte count says in the MPRQ
            // encoding (DPDK `mlx5_rx_poll_len` adds them to `skip_cnt`), or, where it says
            // none that fit, the rest of the WQE.
            let said = mprq::strides(cqe.byte_cnt.get());
            let strides = if (1..=n - pos).contains(&said) { said } else { n - pos };
            self.free_bufs(self.rq_ci, strides);
            return Other::Done {
                strides,
                packets: 0,
                chains: 0,
            };
        }
        let bc = cqe.byte_cnt.get();
        let (strides, len) = (mprq::strides(bc), mprq::len(bc));
        if pos == 0 && self.rq.id_log.len() < ID_SAMPLES {
            let sw = self.rq_ci >> self.rq.log_n;
            if id_sample_wanted(sw, self.rq.ring.size()) {
                self.rq.id_log.push(crate::WqeIdSample {
                    sw_wqe: sw,
                    wqe_id: cqe.wqe_id.get(),
                    wqe_counter: cqe.wqe_counter.get(),
                });
            }
        }
        if cqe.opcode() != CQE_RESP_SEND
            || cqe.format() != 0
            || strides == 0
            || pos + strides > n
            || u32::from(cqe.wqe_counter.get()) != pos
            // Only the bits inside the ring: a device may report the WQE's ring index rather
            // than its counter (DPDK `mlx5_rx_burst_mprq`: `!((wqe_id ^ rq_ci) & wq_mask)`;
            // the kernel's mlx5e indexes its WQE array with `wqe_id`).
            || (cqe.wqe_id.get() ^ wqe) & self.rq.wqe_id_mask != 0
        {
            // Compressed or scattered CQEs were never asked for; a striding CQE that is not
            // where the queue is cannot be trusted.
            self.stats.errors.bad_cqe += 1;
            return Other::Fatal(syndrome::LOCAL_QP_OP);
        }
        if mprq::is_filler(bc) {
            // A filler carries the drop count like any completion (the model writes the frames
            // it dropped into the next CQE, whatever it is).
            self.stats.drops += u64::from(cqe.rx_drops());
            self.free_bufs(self.rq_ci, strides);
            return Other::Done {
                strides,
                packets: 0,
                chains: 0,
            };
        }
        if bc.wrapping_sub(1 << mprq::STRIDE_NUM_SHIFT) <= self.room {
            // What the fast path takes (it stopped before, or the device wrote it since).
            return Other::Ready;
        }
        self.stats.drops += u64::from(cqe.rx_drops());
        let flags = FLAGS_LUT[(cqe.hdr_type_vlan() >> 16) as usize & 0x7ff];
        let (packets, chains) = self.take_frame(slot, len, strides, cqe.rx_hash_res.get(), flags);
        if packets == 1 && self.timestamps {
            slot.flags |= flags::TIMESTAMP;
            slot.timestamp = self.clock.ns(cqe.timestamp.get());
        }
        Other::Done {
            strides,
            packets,
            chains,
        }
    }

    /// Hands up in `slot` the `len`-byte frame of the `strides` strides from `rq_ci` on: one
    /// buffer, or a chain over the buffers of the strides it fills ([`RxCore::frame`]); strides
    /// the device took beyond the frame go back to the pool. A length the strides cannot hold
    /// drops them all as a length error. Returns (packets, chains), each 0 or 1; counts the
    /// bytes. The strides lie in one WQE (the callers checked), so their buffers do not wrap.
    fn take_frame(&mut self, slot: &mut Packet, len: u32, strides: u32, hash: u32, flags: u32) -> (usize, usize) {
        let used = len.div_ceil(self.room).max(1);
        if used > strides {
            self.stats.errors.local_length += 1;
            self.free_bufs(self.rq_ci, strides);
            return (0, 0);
        }
        let at = self.rq_ci as usize & (self.bufs.len() - 1);
        *slot = self.frame(&self.bufs[at..at + used as usize], len, hash, flags);
        if used < strides {
            self.free_bufs(self.rq_ci.wrapping_add(used), strides - used);
        }
        self.stats.bytes += u64::from(len);
        (1, usize::from(used > 1))
    }

    /// Hands up the current session's next packets into `slots`, one mini-CQE each (stride
    /// index and MPRQ byte count; flags, hash and drop count are the title's, as DPDK
    /// `rxq_cq_decompress_v` fills them), and invalidates the slots it consumed (all but the
    /// title, as the cyclic queue's `expand`). Runs of one-stride frames at the next strides are
    /// zipped with their buffers as the uncompressed fast path does; anything else goes one
    /// mini-CQE at a time through [`Self::expand_one`]. Returns (packets, chains) handed up,
    /// and the syndrome to reset the queue with where a mini-CQE is broken (the packets before
    /// it are handed up all the same).
    #[inline(always)]
    fn expand(&mut self, slots: &mut [Packet], bytes: &mut u64, drops: &mut u64) -> (usize, usize, Option<u8>) {
        let n = 1u32 << self.rq.log_n;
        let (total, stride) = (self.bufs.len(), self.room);
        let len_off = Packet::len_off(0, self.data_off);
        let (hash, flags) = (self.zip.hash, self.zip.flags);
        let (mut handed, mut chains) = (0, 0);
        let mut byte_sum = 0u32;
        while handed < slots.len() && self.zip.done != self.zip.n {
            let k = self.zip.done;
            self.zip.next_array(k, &self.cq);
            let pos = (k % MINI) as usize;
            let s = self.rq_ci as usize & (total - 1);
            let cnt = (MINI as usize - pos)
                .min((self.zip.n - k) as usize)
                .min(slots.len() - handed)
                .min(total - s)
                .min(self.posted() as usize);
            let minis = &self.zip.minis[pos..pos + cnt];
            let bufs = &self.bufs[s..s + cnt];
            let mut j = 0u32;
            let mut run_bytes = 0u32;
            // Each frame's stride index against the stride it must be at, ORed without a branch.
            let (mut at, mut wrong) = (self.rq_ci & (n - 1), 0u32);
            for ((slot, m), &buf) in slots[handed..handed + cnt].iter_mut().zip(minis).zip(bufs) {
                // One stride, no filler: as in `poll_segment`, one subtract and one compare.
                let len = m.byte_cnt.get().wrapping_sub(1 << mprq::STRIDE_NUM_SHIFT);
                if len > stride {
                    break;
                }
                slot.buf = buf;
                slot.set_len_off(len | len_off);
                slot.rss_hash = hash;
                slot.flags = flags;
                run_bytes += len;
                wrong |= u32::from(m.stride_idx()) ^ at;
                at += 1;
                j += 1;
            }
            // A run not at the strides it must take (a broken CQ) is not taken: `expand_one`
            // finds its first wrong mini-CQE.
            if wrong != 0 {
                j = 0;
                run_bytes = 0;
            }
            byte_sum += run_bytes;
            let from = k.max(1);
            self.cq
                .reader()
                .invalidate_run(self.zip.head.wrapping_add(from), (k + j).saturating_sub(from));
            self.zip.done = k + j;
            self.rq_ci = self.rq_ci.wrapping_add(j);
            *drops += u64::from(self.zip.drops) * u64::from(j);
            handed += j as usize;
            if (j as usize) < cnt {
                match self.expand_one(&mut slots[handed]) {
                    Ok((p, c)) => {
                        *drops += u64::from(self.zip.drops);
                        handed += p;
                        chains += c;
                    }
                    Err(synd) => {
                        *bytes += u64::from(byte_sum);
                        return (handed, chains, Some(synd));
                    }
                }
            }
        }
        *bytes += u64::from(byte_sum);
        (handed, chains, None)
    }

    /// The session's next mini-CQE when it is not a one-stride frame at the next stride: a
    /// frame over several strides (chained by [`Self::take_frame`]), a mini-CQE whose byte count
    /// has the filler bit (its strides released, as a filler CQE: DPDK `mlx5_rx_burst_mprq`
    /// tests `MLX5_MPRQ_FILLER_MASK` on the byte count whether it came from a CQE or a mini-CQE),
    /// one whose byte count carries no stride count (ceil(len / stride) strides, as DPDK
    /// `mlx5_rx_burst_mprq` recomputes `strd_cnt` from the length for its flow-tag/stride-index
    /// mini-CQE format, whose byte count field is shared), or one naming a stride other than the
    /// next: a broken CQ.
    #[cold]
    #[inline(never)]
    fn expand_one(&mut self, slot: &mut Packet) -> Result<(usize, usize), u8> {
        let n = 1u32 << self.rq.log_n;
        let k = self.zip.done;
        let m = self.zip.minis[(k % MINI) as usize];
        let bc = m.byte_cnt.get();
        let pos = self.rq_ci & (n - 1);
        let len = mprq::len(bc);
        let strides = match mprq::strides(bc) {
            0 if !mprq::is_filler(bc) => len.div_ceil(self.room).max(1),
            s => s,
        };
        if self.rq_ci == self.rq_pi << self.rq.log_n
            || u32::from(m.stride_idx()) != pos
            || strides == 0
            || pos + strides > n
        {
            self.stats.errors.bad_cqe += 1;
            return Err(syndrome::LOCAL_QP_OP);
        }
        let got = if mprq::is_filler(bc) {
            self.free_bufs(self.rq_ci, strides);
            (0, 0)
        } else {
            self.take_frame(slot, len, strides, self.zip.hash, self.zip.flags)
        };
        if k != 0 {
            self.cq.reader().invalidate(self.zip.head.wrapping_add(k));
        }
        self.zip.done = k + 1;
        self.rq_ci = self.rq_ci.wrapping_add(strides);
        Ok(got)
    }

    /// A burst on a compressing CQ: whole sessions in place ([`Self::sessions`]), then, unless
    /// that ended at an empty slot or a full burst, [`Self::burst_general`] from where it
    /// stopped (a session left open by the last burst, a plain or error CQE, a session of
    /// several-stride frames or fillers). In the AVX2 build (`V` not 0) the whole-WQE sessions
    /// of `V` strides go first, four mini-CQEs a step ([`Self::wqe_sessions`]).
    #[inline(always)]
    fn burst_zip<const V: usize>(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        same_pool(&self.pool, out)?;
        if self.zip.done != self.zip.n {
            return self.burst_general(out, 0, self.cq_ci, 0, 0);
        }
        let spare = out.spare();
        let room = spare.len();
        let from = Progress::at(self.cq_ci, self.rq_ci);
        #[cfg(target_arch = "x86_64")]
        let from = if V != 0 {
            #[allow(unsafe_code)]
            // SAFETY: `V` is not 0 only inside the core's `zip_avx2`, compiled for AVX2 and
            // MOVBE and called only where the CPU reports them.
            unsafe {
                self.wqe_sessions::<V>(spare)
            }
        } else {
            from
        };
        let p = if from.n == room || from.empty {
            from
        } else {
            self.sessions(spare, from)
        };
        if p.n == room || p.empty {
            return self.end_burst(out, p);
        }
        self.rq_ci = p.rq_ci;
        self.burst_general(out, p.n, p.ci, p.bytes, p.drops)
    }

    /// Hands up every whole compressed session from the consumer index on that fits in `slots`
    /// and lies in the strides left in its WQE (with stride-index mini-CQEs a session never
    /// spans WQEs, `model::exec` `session_member`), each a straight loop over its mini-CQE
    /// arrays with no per-session state: one-stride frames at the next strides, as
    /// [`Self::poll_segment`] takes plain CQEs. VPP's `rdma_device_poll_cq_mlx5dv`
    /// (`rdma/input.c`) likewise takes a session whole when it fits the frame, then resets the
    /// owner byte of its slots but the title (`compressed_cqe_reset_owner`), and keeps state
    /// (`n_mini_cqes_left`) only for one that does not fit, as [`Self::burst_general`] does
    /// here with [`Zip`]; DPDK keeps every session's state across bursts (`struct rxq_zip`,
    /// `mlx5_rx.c` `mlx5_rx_poll_len`). VPP trusts the stride counts; this path also checks
    /// each mini-CQE's stride index ([`at_strides`]). Stops before anything else: the CQE at
    /// the returned index is untouched and [`Self::burst_general`] takes it (a frame over
    /// several strides, a filler, a broken stride index is found there again). Goes on from
    /// `from`: its `n` packets are in `slots` already, not committed, and neither `cq_ci` nor
    /// `rq_ci` has moved past them (its `ci` is `cq_ci + n`, its `rq_ci` `rq_ci + n`). The
    /// caller moves both.
    #[inline(always)]
    fn sessions(&mut self, slots: &mut [Packet], from: Progress) -> Progress {
        let cq = self.cq.reader();
        let (nmask, stride) = ((1u32 << self.rq.log_n) - 1, self.room);
        let len_off = Packet::len_off(0, self.data_off);
        let smask = self.bufs.len() - 1;
        // Every frame taken here has one CQ slot and one stride: both indices are the burst's
        // first plus the frames taken so far (`from`'s too).
        let (ci0, st0) = (self.cq_ci, self.rq_ci);
        let room = slots.len().min(self.posted() as usize) as u32;
        debug_assert_eq!(from.ci, ci0.wrapping_add(from.n as u32));
        let (mut n, mut byte_sum, mut drops) = (from.n as u32, 0u32, from.drops);
        let empty = loop {
            let ci = ci0.wrapping_add(n);
            let t = match cq.poll_title(ci) {
                Ok(t) => t,
                Err(empty) => break empty,
            };
            let cnt = t.mini_cqe_count();
            let st = st0.wrapping_add(n);
            let pos = st & nmask;
            // 1 ..= the room left (posted strides too) and the strides left in the WQE, and not
            // over the CQ's end.
            let Some(sess) = cq.session(ci, cnt) else { break false };
            if cnt.wrapping_sub(1) >= (room - n).min(nmask + 1 - pos) {
                break false;
            }
            let hf = Packet::hash_flags(
                t.rx_hash_res.get(),
                FLAGS_LUT[(t.hdr_type_vlan() >> 16) as usize & 0x7ff],
            );
            let title_drops = t.rx_drops();
            // WQEs start at multiples of the stride count in `bufs` and the session stays in
            // one: no wrap.
            let s = st as usize & smask;
            let out = &mut slots[n as usize..(n + cnt) as usize];
            let bufs = &self.bufs[s..s + cnt as usize];
            // A session of a whole 16-stride WQE (the default pool's, and the most common) in
            // straight-line code.
            let run = match (<&mut [Packet; 16]>::try_from(&mut *out), <&[u32; 16]>::try_from(bufs)) {
                (Ok(o), Ok(b)) => take_session(sess, o, b, pos, stride, len_off, hf),
                _ => take_session(sess, out, bufs, pos, stride, len_off, hf),
            };
            let Some(run) = run else { break false };
            byte_sum = byte_sum.wrapping_add(run);
            drops += u64::from(title_drops) * u64::from(cnt);
            n += cnt;
        };
        Progress {
            n: n as usize,
            chains: 0,
            ci: ci0.wrapping_add(n),
            rq_ci: from.rq_ci.wrapping_add(n - from.n as u32),
            bytes: from.bytes + u64::from(byte_sum),
            drops,
            error: None,
            empty,
        }
    }

    /// Every burst the one-segment path does not take: ring wraps, fillers, frames over several
    /// strides, errors, compressed sessions.
    /// It goes on from what the burst took before: `n` packets in `out`'s spare slots, not
    /// committed, with their `bytes` and `drops`; the consumer index `ci` they reached, not
    /// published; `rq_ci` already moved past them. (Scalars, which stay in registers, rather
    /// than a [`Progress`] the caller would build in memory.)
    #[inline(never)]
    fn burst_general(
        &mut self,
        out: &mut Burst,
        n: usize,
        ci: u32,
        bytes: u64,
        drops: u64,
    ) -> Result<usize, QueueError> {
        let (mut n, mut chains, mut ci) = (n, 0, ci);
        let (mut bytes, mut drops) = (bytes, drops);
        let mut error = None;
        let spare = out.spare();
        let cap = spare.len();
        loop {
            if self.zip.done != self.zip.n {
                let (h, c, e) = self.expand(&mut spare[n..cap], &mut bytes, &mut drops);
                (n, chains, error) = (n + h, chains + c, e);
                ci = self.zip.head.wrapping_add(self.zip.done);
                if error.is_some() || self.zip.done != self.zip.n {
                    break; // a broken session, or the burst is full
                }
            }
            if self.zip_on && n < cap {
                // On a compressing CQ the next CQE is most often a title: open its session here
                // rather than through the plain run and the slow path.
                if let RxPoll::Other(t) = self.cq.reader().poll_rx(ci) {
                    if t.is_title() && t.mini_cqe_count() != 0 && t.mini_cqe_count() <= self.posted() {
                        let t = *t;
                        self.zip = Zip::open(&t, ci, &self.cq);
                        continue;
                    }
                }
            }
            let room = (cap - n).min(self.posted() as usize);
            let got = if self.timestamps {
                self.poll_packets::<true>(&mut spare[n..n + room], ci, self.rq_ci, &mut bytes, &mut drops)
            } else {
                self.poll_packets::<false>(&mut spare[n..n + room], ci, self.rq_ci, &mut bytes, &mut drops)
            };
            n += got;
            ci = ci.wrapping_add(got as u32);
            self.rq_ci = self.rq_ci.wrapping_add(got as u32);
            if n == cap || self.posted() == 0 || matches!(self.cq.reader().poll_rx(ci), RxPoll::Empty) {
                break;
            }
            match self.poll_other(ci, &mut spare[n]) {
                Other::Empty => break,
                Other::Ready => {}
                Other::Done {
                    strides,
                    packets,
                    chains: c,
                } => {
                    ci = ci.wrapping_add(1);
                    self.rq_ci = self.rq_ci.wrapping_add(strides);
                    n += packets;
                    chains += c;
                }
                Other::Title(t) => {
                    let posted = self.posted();
                    if t.mini_cqe_count() == 0 || t.mini_cqe_count() > posted {
                        // More packets than strides posted: a broken CQ.
                        self.stats.errors.bad_cqe += 1;
                        ci = ci.wrapping_add(1);
                        error = Some(syndrome::LOCAL_QP_OP);
                        break;
                    }
                    self.zip = Zip::open(&t, ci, &self.cq);
                }
                Other::Fatal(synd) => {
                    ci = ci.wrapping_add(1);
                    error = Some(synd);
                    break;
                }
            }
        }
        // Packets of the slow path counted their bytes and drops there.
        let p = Progress {
            n,
            chains,
            ci,
            rq_ci: self.rq_ci,
            bytes,
            drops,
            error,
            empty: false,
        };
        self.end_burst(out, p)
    }
}

/// Whether a striding queue's receive CQ should compress: asked for
/// (`QueueConfig::rx_cqe_compression`, on by default) and no timestamps (mini-CQEs carry none:
/// DPDK `mlx5_devx.c`). The format is the checksum/stride-index one
/// (`MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`): a striding RQ needs each packet's stride index.
pub(crate) fn wants_compression(cfg: &QueueConfig) -> bool {
    cfg.rx_cqe_compression && !cfg.rx_timestamps
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolConfig;

    fn pool(buf_size: u32) -> Rc<Pool> {
        Pool::new(PoolConfig {
            buffers: 64,
            buf_size,
            headroom: 128,
        })
        .unwrap()
    }

    /// The AVX2 refill writes the very segments the scalar one does (byte count and lkey kept,
    /// each address `base + idx * size` big-endian), four at a time, and leaves a rest past a
    /// multiple of four alone; indices up to the top of the u32 range.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_refill_writes_what_the_scalar_one_does() {
        if !crate::dv::cpu_has_avx2() {
            eprintln!("no AVX2 on this CPU: the scalar refill alone runs");
            return;
        }
        let p = pool(2048);
        let geo = p.geometry();
        let (off, head) = (128, DataSeg::new(1024, 0x1234_5678, 0));
        let wide = super::avx2::Wide::new(geo, off, head).expect("a 2 KiB buffer fits the multiply");
        let bufs: Vec<u32> = (0..18u32)
            .map(|k| k.wrapping_mul(0x9e37_79b9) | u32::from(k == 5) << 31)
            .collect();
        let mut want = vec![head; 18];
        assert!(fill_wqe::<0>(&mut want, &bufs, geo, off));
        let stale = DataSeg::new(7, 7, 7);
        let mut got = vec![stale; 18];
        #[allow(unsafe_code)]
        // SAFETY: the CPU has AVX2 (tested above).
        unsafe {
            super::avx2::segs_avx2(&mut got, &bufs, wide)
        };
        assert_eq!(&got[..16], &want[..16]);
        assert_eq!(&got[16..], &[stale, stale], "the rest is the caller's");
    }

    /// Strides as large as a buffer's data room allows, enough of them for a 16 KiB WQE; one
    /// line where the buffers or the device do not allow a WQE this driver can post.
    #[test]
    fn params_follow_the_pool_and_the_caps() {
        let cx5 = mprq::Caps::CONNECTX5;
        let p = params_for(&pool(2048), &cx5).unwrap();
        assert_eq!((p.stride_bytes(), p.num_strides()), (1024, 16));
        let p = params_for(&pool(4096), &cx5).unwrap();
        assert_eq!((p.stride_bytes(), p.num_strides()), (2048, 8));
        let p = params_for(&pool(65536), &cx5).unwrap();
        assert_eq!(
            (p.stride_bytes(), p.num_strides()),
            (8192, 8),
            "the device's largest stride"
        );
        let e = params_for(&pool(1024), &cx5).unwrap_err().to_string();
        assert!(
            e.contains("use larger buffers") && !e.contains('\n') && !e.contains("  "),
            "{e}"
        );
        let no_ext = mprq::Caps {
            min_log_num_strides: 9,
            ..cx5
        };
        assert!(params_for(&pool(4096), &no_ext).is_err());
        let e = params_for(&pool(2048), &mprq::Caps::NONE).unwrap_err().to_string();
        assert!(e.contains("no striding receive queue") && !e.contains("  "), "{e}");
    }
}

#[cfg(test)]
#[cfg(feature = "model")] // queues over the model's rings
#[allow(unsafe_code)] // building queues over the model's rings
mod builds {
    use std::rc::Rc;

    use super::{params_for, DvStridingRxQueue};
    use crate::dv::prm::MiniFormat;
    use crate::mem::pool::{Burst, Pool, PoolConfig};
    use crate::model::device::{Link, ModelConfig, Nic, RqOptions};
    use crate::model::NicQueues;
    use crate::tx::dv::DvTxQueue;
    use crate::{QueueConfig, RxQueue, TxQueue};

    /// The AVX2 build (whole-WQE sessions four mini-CQEs a step), the MOVBE one and the portable
    /// one hand up the same frames from a compressing striding queue, on WQEs of 16 strides
    /// (2 KiB buffers) and of 8 (4 KiB): one-stride frames mostly, whole-WQE sessions with them,
    /// and now and then a frame over several strides, which makes sessions of other shapes
    /// and fillers; bursts of the step, of 64 and of 16. Frames arrive byte-identical and in
    /// order with the same hashes and flags in every build, both ends count the same bytes,
    /// nothing is an error, every buffer comes back, and the AVX2 build took whole-WQE
    /// sessions (where the CPU has it) while the others took none.
    #[test]
    fn vector_and_scalar_builds_expand_the_same_sessions() {
        let mut digests = std::collections::HashMap::new();
        for buf_size in [2048u32, 4096] {
            for (movbe, avx2) in [(true, true), (true, false), (false, false)] {
                let case = format!("{buf_size}-byte buffers, movbe {movbe}, avx2 {avx2}");
                let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], ModelConfig::default()).unwrap();
                let pool: Rc<Pool> = Pool::new(PoolConfig {
                    buffers: 2048,
                    buf_size,
                    headroom: 128,
                })
                .unwrap();
                let params = params_for(&pool, &nic.config().striding_rq).unwrap();
                let (n, stride) = (params.num_strides(), params.stride_bytes() as usize);
                let lkey = nic.register_mr(pool.region());
                let cfg = QueueConfig {
                    size: 256,
                    ..QueueConfig::default()
                };
                let tx_cq = nic.create_cq(256).unwrap();
                let sq = nic.create_sq(0, 256, tx_cq.cqn()).unwrap();
                let mut tx =
                    // SAFETY: the model made these rings for this queue; the infos keep them alive.
                    unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &cfg, nic.caps(), nic.control()) }.unwrap();
                let wqes = cfg.size / n;
                let rx_cq = nic
                    .create_cq_with(wqes * (n + 1), Some(MiniFormat::CsumStridx))
                    .unwrap();
                let opts = RqOptions {
                    max_sge: n,
                    striding: Some(params),
                    ..RqOptions::default()
                };
                let (rwq, wq) = nic.create_rq_with(1, wqes, rx_cq.cqn(), opts).unwrap();
                // SAFETY: as above.
                let mut rx =
                    unsafe { DvStridingRxQueue::new(&rwq, &rx_cq, params, wq, lkey, &pool, &cfg, nic.control()) }
                        .unwrap();
                assert!(rx.core.zip_on);
                rx.set_cpu_features(movbe, avx2);
                let len_of = |seq: u64| {
                    if seq % 97 == 13 {
                        stride + 1 + (seq as usize * 131) % (2 * stride)
                    } else {
                        60 + (seq as usize * 37) % (stride - 60)
                    }
                };
                let (mut sent, mut seen, mut digest) = (0u64, 0u64, 0u64);
                let mut expect = vec![0u8; 4 * stride];
                let mut data = vec![0u8; 4 * stride];
                for round in 0..600u64 {
                    // Every other step fills the WQE in use, then whole WQEs, so that whole-WQE
                    // sessions are common.
                    let to_wqe_end = ((n - rx.core.rq_ci % n) % n) as usize;
                    let step = match round % 2 {
                        0 => to_wqe_end + n as usize * (1 + (round as usize / 2) % 3),
                        _ => 1 + (round * 7 % 48) as usize,
                    };
                    let cap = match round % 3 {
                        0 => step,
                        1 => 64,
                        _ => 16,
                    };
                    let mut out = Burst::new(&pool, step);
                    for i in 0..step {
                        let seq = sent + i as u64;
                        let len = len_of(seq);
                        if len <= stride {
                            assert_eq!(out.alloc(1, len), 1);
                            let d = out.data_mut(i);
                            d.fill(seq as u8);
                            d[..8].copy_from_slice(&seq.to_be_bytes());
                        } else {
                            expect[..len].fill(seq as u8);
                            expect[..8].copy_from_slice(&seq.to_be_bytes());
                            assert!(out.push_frame(&expect[..len]), "{case}");
                        }
                    }
                    sent += step as u64;
                    while !out.is_empty() {
                        tx.tx_burst(&mut out).unwrap();
                    }
                    nic.step();
                    let mut got = Burst::new(&pool, cap);
                    while seen < sent {
                        assert!(rx.rx_burst(&mut got).unwrap() > 0, "frame {seen} missing ({case})");
                        for i in 0..got.len() {
                            let len = len_of(seen);
                            expect[..len].fill(seen as u8);
                            expect[..8].copy_from_slice(&seen.to_be_bytes());
                            let k = got.copy_frame(i, &mut data).unwrap();
                            assert!(data[..k] == expect[..len], "frame {seen} ({case})");
                            let p = got.packet(i);
                            digest = digest.rotate_left(5) ^ u64::from(p.rss_hash()) << 32 ^ u64::from(p.flags());
                            seen += 1;
                        }
                        got.clear();
                    }
                    tx.reclaim().unwrap();
                }
                assert_eq!(tx.stats().bytes, rx.stats().bytes, "{case}");
                assert_eq!(
                    *digests.entry(buf_size).or_insert(digest),
                    digest,
                    "hashes and flags ({case})"
                );
                let vector = movbe && avx2 && crate::dv::cpu_has_movbe() && crate::dv::cpu_has_avx2();
                if !crate::dv::cpu_has_avx2() {
                    eprintln!("no AVX2 on this CPU: the scalar builds alone run ({case})");
                }
                assert_eq!(
                    rx.core.rq.vector_sessions > 100,
                    vector,
                    "{} vector sessions ({case})",
                    rx.core.rq.vector_sessions
                );
                assert_eq!(rx.stats().errors.total(), 0, "{case}");
                assert!(nic.counters().cqe_sessions > 1000, "{case}");
                nic.step();
                tx.reclaim().unwrap();
                drop((tx, rx, sq, tx_cq, rx_cq, rwq));
                assert_eq!(
                    pool.free_count(),
                    pool.capacity(),
                    "pool not full after teardown ({case})"
                );
                nic.deregister_mr(lkey);
            }
        }
    }
}
