//! The receive core both Direct Verbs receive queues are built on: a cyclic RQ (`rx::dv`, one
//! WQE per frame) and a striding one (`rx::dv_striding`, one stride per frame) differ in their
//! ring and in what a CQE means past the common case; everything else is here, once.
//!
//! [`RxCore`] is the queue: its state (the CQ ring and consumer index, the RQ's producer and
//! consumer indices, the buffer of every ring position, the pool, counters, the device's
//! clock, control handle and failure, the CPU's builds, the compressed session in progress) and
//! the paths that do not depend on the kind of RQ, written once:
//! - the fast path ([`RxCore::burst`]): a run of plain CQEs, one frame per CQE and per buffer,
//!   the buffers in ring order, so that the CQ consumer index and the buffer index move
//!   together;
//! - the end of every burst ([`RxCore::end_burst`]): commit, consumer index, counters, a fatal
//!   device, recovery from an error CQE (DPDK `mlx5_rx_err_handle`), refill;
//! - the CPU dispatch ([`RxCore::rx_burst`]): each burst compiled for MOVBE, AVX2 or neither.
//!
//! The kind ([`RqKind`], the field `rq`) adds its ring and what only it keeps, its refill, and
//! its general and compressed bursts. VPP's `rdma/input.c` is built the same way: one receive
//! queue structure and one input function, the striding RQ a few branches of it.

use std::rc::Rc;
use std::sync::Arc;

use crate::dv::prm::{cqe_flags, mini_array_slot, Cqe64, MiniArray, MiniFormat};
use crate::dv::ring::{CqRing, CqSegment, RxPoll};
use crate::dv::{failed_error, DvControl, TickClock, FAILED_DEVICE_FATAL};
use crate::mem::pool::{flags, Burst, Packet, Pool, SegLink};
use crate::{same_pool, Error, QueueConfig, QueueError, QueueStats};

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;

/// A kind of receive queue: its RQ ring and what only it keeps (the field `rq` of [`RxCore`]),
/// and the paths that read its completions where the shared fast path stops. What the core
/// asks of the ring alone is a method; the paths are functions of the whole queue `q`, as they
/// use the ring and the core's fields at once.
pub(super) trait RqKind: Sized {
    /// What a plain CQE's byte count holds besides the length of a frame in one buffer: 0 on a
    /// cyclic RQ; on a striding one the count of one stride (`1 << mprq::STRIDE_NUM_SHIFT`,
    /// filler bit clear), so that one subtract and one compare take the length and turn away
    /// every other CQE.
    const LEN_BIAS: u32;
    /// log2 of the steps of the RQ consumer index per WQE: 0 on a cyclic RQ, which counts WQEs;
    /// a striding one counts strides.
    fn log_units(&self) -> u32;
    /// WQEs the ring holds.
    fn wqes(&self) -> u32;
    /// Buffers a WQE holds: its data segments on a cyclic RQ, its strides on a striding one.
    fn bufs_per_wqe(&self) -> u32;
    /// Tells the device the RQ holds WQEs up to `pi` (free-running).
    fn ring_doorbell(&self, pi: u32);
    /// Posts buffers into every free WQE once at least `min` are free.
    fn refill(q: &mut RxCore<Self>, min: u32);
    /// Returns every posted buffer to the pool (the WQ was reset or is going away).
    fn release_posted(q: &mut RxCore<Self>);
    /// Every burst the fast path does not take (ring wraps, anything but a frame in one
    /// buffer), from the queue's own indices.
    fn general(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError>;
    /// A burst on a compressing CQ. `V`: 0 in the scalar builds, else the AVX2 build for
    /// sessions of `V` mini-CQEs ([`RqKind::vector_width`]).
    fn burst_zip<const V: usize>(q: &mut RxCore<Self>, out: &mut Burst) -> Result<usize, QueueError>;
    /// The `V` of the kind's AVX2 build of compressed bursts, 8 or 16; 0 when it has none.
    fn vector_width(&self) -> usize;
}

/// A Direct Verbs receive queue of kind `K`: the state every kind has, and `rq`, the kind's.
pub(crate) struct RxCore<K: RqKind> {
    /// The RQ ring and what only this kind keeps.
    pub(super) rq: K,
    pub(super) cq: CqRing,
    /// CQEs consumed (free-running); the device sees it once a burst publishes it.
    pub(super) cq_ci: u32,
    /// WQEs posted (free-running).
    pub(super) rq_pi: u32,
    /// The RQ consumed (free-running), in [`RqKind::log_units`] steps: WQEs on a cyclic RQ,
    /// strides on a striding one. With one buffer a step, it indexes the next frame's buffer.
    pub(super) rq_ci: u32,
    /// The buffer posted at every ring position (a power of two of them), indexed by the
    /// free-running RQ consumer index (as `sg` a WQE on a cyclic RQ that scatters).
    pub(super) bufs: Box<[u32]>,
    /// Room for a burst of buffer indices going back to the pool.
    pub(super) scratch: Box<[u32]>,
    pub(super) pool: Rc<Pool>,
    pub(super) data_off: u16,
    /// The longest frame one buffer takes: the pool's data room on a cyclic RQ, a stride on a
    /// striding one.
    pub(super) room: u32,
    /// Free WQEs that make a refill worth its fixed cost.
    pub(super) refill_min: u32,
    /// Receive timestamps are asked for.
    pub(super) timestamps: bool,
    /// What the CQEs' timestamps count, to hand them up in ns (read only when `timestamps`).
    pub(super) clock: TickClock,
    /// Timestamps asked for and in real-time format: converted after each burst
    /// ([`rx_real_time`]).
    pub(super) real_time: bool,
    /// The CPU has MOVBE: bursts run in the build for it (each big-endian CQE field loaded,
    /// and each refilled WQE address stored, with one instruction).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) movbe: bool,
    /// The CPU has AVX2 (and `QueueConfig::cpu_vector` allows it): the refill writes WQE
    /// addresses four at a time, and with `movbe` compressed sessions are expanded four
    /// mini-CQEs a step (`vector`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) avx2: bool,
    /// The CQ compresses receive completions, in the format the kind reads.
    pub(super) zip_on: bool,
    /// The AVX2 build of compressed bursts that [`RxCore::rx_burst`] runs, in sessions of this
    /// many mini-CQEs ([`RqKind::vector_width`]): not 0 only where the CQ compresses, the
    /// kind has such a build, and `movbe` and `avx2` are set.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) vector: usize,
    /// The compressed session being handed up, which may span bursts.
    pub(super) zip: Zip,
    pub(super) ctl: Arc<dyn DvControl>,
    /// The queue's attention word (`dv::attention`), read on an empty burst.
    pub(super) attn: crate::dv::AttentionWord,
    pub(super) wq_num: u32,
    /// Reset the WQ and go on after an error CQE that stops it (`QueueConfig::recover`).
    pub(super) recover: bool,
    pub(super) failed: Option<u8>,
    /// The device could not be stopped: the posted buffers must never go back to the pool.
    pub(super) device_holds_buffers: bool,
    pub(super) stats: QueueStats,
}

impl<K: RqKind> RxCore<K> {
    /// A queue over the rings `rq` and `cq` (WQ number `wq_num`), its buffers of `pool` taking
    /// frames of up to `room` bytes each, reading compressed completions of the mini-CQE format
    /// `mini` (a CQ of another format is refused, and a compressing CQ when `cfg` asks for
    /// timestamps: mini-CQEs carry none, DPDK `mlx5_devx.c`). Nothing posted yet.
    pub(super) fn new(
        rq: K,
        cq: CqRing,
        (room, mini): (u32, MiniFormat),
        pool: &Rc<Pool>,
        cfg: &QueueConfig,
        ctl: Arc<dyn DvControl>,
        wq_num: u32,
    ) -> Result<RxCore<K>, Error> {
        let clock = match ctl.clock() {
            Some(c) => c,
            None if cfg.rx_timestamps => {
                return Err(Error::config(
                    "receive timestamps: the device reports no clock frequency (hca_core_clock), \
                     so its completions' timestamps cannot be read as nanoseconds",
                ))
            }
            None => TickClock::NANOSECONDS,
        };
        let zip_on = match cq.compression() {
            None => false,
            Some(f) if f == mini && !cfg.rx_timestamps => true,
            Some(f) if f == mini => {
                return Err(Error::config(
                    "receive timestamps: the CQ compresses completions, and mini-CQEs carry no timestamp",
                ))
            }
            Some(f) => {
                return Err(Error::config(format!(
                    "a {} receive queue reads {} mini-CQEs, not the {f:?} format its CQ was created with",
                    if mini == MiniFormat::Hash { "cyclic" } else { "striding" },
                    if mini == MiniFormat::Hash {
                        "hash"
                    } else {
                        "checksum/stride-index"
                    },
                )))
            }
        };
        let (wqes, log) = (rq.wqes(), rq.log_units());
        let buffers = (wqes * rq.bufs_per_wqe()) as usize;
        let movbe = cfg.cpu_vector && crate::dv::cpu_has_movbe();
        let avx2 = cfg.cpu_vector && crate::dv::cpu_has_avx2();
        Ok(RxCore {
            cq,
            cq_ci: 0,
            rq_pi: 0,
            rq_ci: 0,
            bufs: vec![u32::MAX; buffers].into_boxed_slice(),
            scratch: vec![0; buffers].into_boxed_slice(),
            pool: pool.clone(),
            data_off: pool.headroom(),
            room,
            refill_min: (super::REFILL_BATCH >> log).min(wqes / 4).max(1),
            timestamps: cfg.rx_timestamps,
            real_time: cfg.rx_timestamps && clock.is_real_time(),
            clock,
            movbe,
            avx2,
            zip_on,
            vector: if zip_on && movbe && avx2 { rq.vector_width() } else { 0 },
            zip: Zip::default(),
            attn: ctl.attention(),
            ctl,
            wq_num,
            recover: cfg.recover,
            failed: None,
            device_holds_buffers: false,
            stats: QueueStats::default(),
            rq,
        })
    }

    /// RQ consumer index steps posted and not yet consumed: WQEs on a cyclic RQ, strides on a
    /// striding one (all of them once refilled).
    #[inline(always)]
    pub(super) fn posted(&self) -> u32 {
        (self.rq_pi << self.rq.log_units()).wrapping_sub(self.rq_ci)
    }

    /// `RxQueue::rx_burst`: on a queue whose CQE timestamps are real time, [`rx_real_time`];
    /// else [`RxCore::dispatch`].
    #[inline(always)]
    pub(super) fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if self.real_time {
            return rx_real_time(self, out);
        }
        self.dispatch(out)
    }

    /// The burst's build for the queue's CQ and the CPU, each out of line (a function with
    /// target features of its own must be), so that this is a dispatch and a tail call.
    #[inline(always)]
    fn dispatch(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if self.zip_on {
            // `vector` is not 0 only where the CPU reports AVX2 and MOVBE (`RxCore::new`;
            // `set_cpu_features` can only clear it).
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            match self.vector {
                // SAFETY: the CPU has the features the function is compiled for (above).
                16 => return unsafe { zip_avx2::<K, 16>(self, out) },
                // SAFETY: as for 16.
                8 => return unsafe { zip_avx2::<K, 8>(self, out) },
                _ => {}
            }
            #[cfg(target_arch = "x86_64")]
            if self.movbe {
                #[allow(unsafe_code)]
                // SAFETY: `movbe` is set only where the CPU reports MOVBE (`RxCore::new`), the
                // one feature the function is compiled for.
                return unsafe { movbe::<K, true>(self, out) };
            }
            return plain::<K, true>(self, out);
        }
        #[cfg(target_arch = "x86_64")]
        if self.movbe {
            #[allow(unsafe_code)]
            // SAFETY: as above.
            return unsafe { movbe::<K, false>(self, out) };
        }
        plain::<K, false>(self, out)
    }

    /// The burst a build runs: on a compressing CQ the kind's ([`RqKind::burst_zip`]), else
    /// [`RxCore::burst`].
    #[inline(always)]
    fn build<const ZIP: bool>(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if ZIP {
            K::burst_zip::<0>(self, out)
        } else {
            self.burst(out)
        }
    }

    /// The common burst in one segment (neither ring wraps within the room, and the CQEs run to
    /// its end or to one the device has not written yet), else the kind's general path, which
    /// starts again from the queue's indices: nothing is published before that.
    #[inline(always)]
    pub(super) fn burst(&mut self, out: &mut Burst) -> Result<usize, QueueError> {
        if let Some(s) = self.failed {
            return Err(failed_error(s));
        }
        same_pool(&self.pool, out)?;
        let (ci, bi) = (self.cq_ci, self.rq_ci);
        // A device cannot complete more buffers than were posted: a CQ that says otherwise is
        // broken, and the slots past the posted ones hold no buffer of ours.
        let spare = out.spare();
        let room = spare.len().min(self.posted() as usize);
        let (cq_size, nbufs) = (self.cq.size(), self.bufs.len());
        let (cq_at, b_at) = (ci & (cq_size - 1), bi as usize & (nbufs - 1));
        if cq_at as usize + room <= cq_size as usize && b_at + room <= nbufs {
            let (mut bytes, mut drops) = (0u64, 0u64);
            let seg = self.cq.reader().segment(ci, room);
            let (slots, bufs) = (&mut spare[..room], &self.bufs[b_at..b_at + room]);
            let n = if self.timestamps {
                self.poll_segment::<true>(slots, bufs, seg, &mut bytes, &mut drops)
            } else {
                self.poll_segment::<false>(slots, bufs, seg, &mut bytes, &mut drops)
            };
            if n == room || matches!(self.cq.reader().poll_rx(ci.wrapping_add(n as u32)), RxPoll::Empty) {
                let mut p = Progress::at(ci, bi);
                p.take(n, bytes, drops);
                return self.end_burst(out, p);
            }
        }
        K::general(self, out)
    }

    /// The fast path over one wrap-free segment: consecutive plain RESP_SEND CQEs of frames in
    /// one buffer each, which are then exactly the next buffers in order (anything else stops
    /// it). `slots`, `bufs` (those buffers) and `seg` have one length; only locals live in the
    /// loop. Adds the frames' bytes and the drops the CQEs report; returns how many it handed
    /// up.
    #[inline(always)]
    pub(super) fn poll_segment<const TIMESTAMPS: bool>(
        &self,
        slots: &mut [Packet],
        bufs: &[u32],
        seg: CqSegment<'_>,
        bytes: &mut u64,
        drops: &mut u64,
    ) -> usize {
        let (len_off, room) = (Packet::len_off(0, self.data_off), self.room);
        // Bytes, in 32 bits: a call's worth (at most a ring of 64 KiB frames) fits without
        // widening per packet.
        let mut byte_sum = 0u32;
        // The frames the device dropped before each CQE for want of a posted WQE: per CQE only an
        // OR, summed afterwards if any is not 0.
        let mut drop_any = 0u8;
        let mut k = 0;
        for (slot, &buf) in slots.iter_mut().zip(bufs) {
            let Some(cqe) = seg.packet(k) else { break };
            // A wrapped subtract leaves a huge length: one compare turns away what is not a
            // frame in one buffer, and a length past it.
            let len = cqe.byte_cnt.get().wrapping_sub(K::LEN_BIAS);
            if len > room {
                break;
            }
            // Field by field: without timestamps the slot's old timestamp stays, and is
            // meaningless because `flags::TIMESTAMP` is clear.
            // `len` < 2^16: it is at most `room`, a pool's data room.
            slot.set_len_off(len | len_off);
            slot.rss_hash = cqe.rx_hash_res.get();
            slot.flags =
                FLAGS_LUT[(cqe.hdr_type_vlan() >> 16) as usize & 0x7ff] | if TIMESTAMPS { flags::TIMESTAMP } else { 0 };
            // After the others: next to `len`/`off` in an 8-byte aligned `Packet`, the compiler
            // would merge the two stores into one 64-bit store that takes two more instructions
            // to assemble.
            slot.buf = buf;
            if TIMESTAMPS {
                // Device ticks to ns on the one time base of the device (`TickClock`).
                slot.timestamp = self.clock.ns(cqe.timestamp.get());
            }
            byte_sum += len;
            drop_any |= cqe.rx_drops();
            k += 1;
        }
        if drop_any != 0 {
            // The device ran out of posted WQEs at some point: count what it dropped (a second
            // look at CQEs already taken, which are not handed back yet).
            *drops += (0..k)
                .filter_map(|j| seg.packet(j))
                .map(|c| u64::from(c.rx_drops()))
                .sum::<u64>();
        }
        *bytes += u64::from(byte_sum);
        k
    }

    /// [`RxCore::poll_segment`] from consumer index `ci` and buffer index `bi` on, over ring
    /// wraps, into `out`.
    #[inline(always)]
    pub(super) fn poll_packets<const TIMESTAMPS: bool>(
        &self,
        out: &mut [Packet],
        ci: u32,
        bi: u32,
        bytes: &mut u64,
        drops: &mut u64,
    ) -> usize {
        let cq = self.cq.reader();
        let (cq_size, nbufs) = (self.cq.size() as usize, self.bufs.len());
        let mut n = 0;
        while n < out.len() {
            let c = ci.wrapping_add(n as u32);
            let b = bi.wrapping_add(n as u32) as usize & (nbufs - 1);
            let seg_len = (out.len() - n)
                .min(cq_size - (c as usize & (cq_size - 1)))
                .min(nbufs - b);
            let k = self.poll_segment::<TIMESTAMPS>(
                &mut out[n..n + seg_len],
                &self.bufs[b..b + seg_len],
                cq.segment(c, seg_len),
                bytes,
                drops,
            );
            n += k;
            if k < seg_len {
                break;
            }
        }
        n
    }

    /// The end of every burst, from what it took (`p`: its packets written to `out`'s spare
    /// slots, the indices it reached): commits the packets, moves and publishes the consumer
    /// index, counts, stops on a fatal device error when nothing came, recovers after an error
    /// CQE that stops the WQ, refills. Inline, so that the refill runs in the burst's build
    /// (the MOVBE one stores each WQE address with one `movbe`).
    #[inline(always)]
    pub(super) fn end_burst(&mut self, out: &mut Burst, p: Progress) -> Result<usize, QueueError> {
        let n = p.n;
        out.commit_chained(n, p.chains);
        if p.ci != self.cq_ci {
            self.cq_ci = p.ci;
            self.rq_ci = p.rq_ci;
            self.cq.publish_ci(p.ci);
        }
        self.stats.packets += n as u64;
        self.stats.bytes += p.bytes;
        self.stats.drops += p.drops;
        if n > 0 {
            self.stats.bursts += 1;
        } else if self.attn.load(std::sync::atomic::Ordering::Relaxed) & crate::dv::attention::ACT != 0 {
            return self.attend_empty(p.error);
        }
        if let Some(synd) = p.error {
            self.recover_or_fail(synd)?;
        }
        K::refill(self, self.refill_min);
        Ok(n)
    }

    /// The end of a burst that took nothing while the attention word asks for action: acts on
    /// the word, then as [`RxCore::end_burst`] (recovery, refill). Its own path to the end, out
    /// of line: merged into the bursts' common end, the word's test cost the striding queue's
    /// loop 3 instructions a packet (`scripts/callgrind.sh`).
    #[cold]
    #[inline(never)]
    fn attend_empty(&mut self, error: Option<u8>) -> Result<usize, QueueError> {
        self.attend(self.attn.load(std::sync::atomic::Ordering::Relaxed))?;
        if let Some(synd) = error {
            self.recover_or_fail(synd)?;
        }
        K::refill(self, self.refill_min);
        Ok(0)
    }

    /// What the attention word `a` says (`dv::attention`), acted on: the device stopped (the
    /// queue fails), the CQ is in error (the queue fails: kernel `cq.c` `mlx5_ib_cq_event`,
    /// `ibv_poll_cq(3)`: a CQ in error is unusable, and it writes nothing more, so without this
    /// the queue would return 0 forever), the WQ was killed (reset as after a critical error
    /// CQE, DPDK `mlx5_rx_err_handle`; VPP's `rdma_async_event_read_ready` treats such events
    /// as errors). An MTU change needs nothing of a receive queue.
    #[cold]
    #[inline(never)]
    fn attend(&mut self, a: u32) -> Result<(), QueueError> {
        use crate::dv::attention as at;
        use std::sync::atomic::Ordering::AcqRel;
        if a & at::DEVICE_FATAL != 0 {
            return Err(self.stop_on_fatal());
        }
        if a & at::CQ_ERROR != 0 {
            log::warn!(
                "RX queue on WQ {:#x}: its CQ went into error (overrun); the queue fails",
                self.wq_num
            );
            self.stats.errors.cq_error += 1;
            // Stop the device writing into posted buffers before they go back.
            if self.ctl.reset_rq(self.wq_num).is_ok() {
                K::release_posted(self);
            } else {
                self.device_holds_buffers = true;
            }
            self.failed = Some(crate::dv::FAILED_CQ_ERROR);
            return Err(failed_error(crate::dv::FAILED_CQ_ERROR));
        }
        self.attn.fetch_and(!(at::QUEUE_FATAL | at::MTU_CHANGED), AcqRel);
        if a & at::QUEUE_FATAL != 0 {
            self.stats.errors.queue_fatal += 1;
            self.recover_or_fail(crate::dv::prm::syndrome::LOCAL_QP_OP)?;
        }
        Ok(())
    }

    /// The device stopped on a fatal error: it writes nothing any more, so every posted buffer
    /// goes back to the pool and the queue fails.
    #[cold]
    fn stop_on_fatal(&mut self) -> QueueError {
        K::release_posted(self);
        self.failed = Some(FAILED_DEVICE_FATAL);
        self.stats.device_fatal = 1;
        QueueError::DeviceFatal
    }

    /// DPDK `mlx5_rx_err_handle` for critical syndromes: reset the WQ, drop completions that
    /// precede the reset, zero the RQ doorbell record, return the buffers the WQ held to the pool
    /// and post fresh ones from WQE 0. No buffer is lost.
    #[cold]
    fn recover_or_fail(&mut self, synd: u8) -> Result<(), QueueError> {
        // Stop the device first: until the WQ is reset it may still write into posted buffers.
        if self.ctl.reset_rq(self.wq_num).is_err() {
            // It cannot be stopped: its buffers stay with it (lost to the pool) rather than be
            // handed out while the device may write them.
            self.failed = Some(synd);
            self.device_holds_buffers = true;
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        let (ci, dropped) = self.zip.drain(&self.cq, self.cq_ci, self.zip_on);
        self.cq_ci = ci;
        self.stats.drops += dropped;
        self.cq.publish_ci(self.cq_ci);
        // Whatever was posted goes back to the pool; the refill below posts fresh buffers from
        // WQE 0.
        K::release_posted(self);
        self.rq_ci = 0;
        self.rq_pi = 0;
        self.rq.ring_doorbell(0);
        if !self.recover {
            self.failed = Some(synd);
            return Err(QueueError::Failed(crate::Failure::from_mlx5(synd)));
        }
        self.stats.recoveries += 1;
        K::refill(self, 0);
        Ok(())
    }

    /// Returns the buffers of ring positions `from .. from + n` (free-running) to the pool.
    pub(super) fn free_bufs(&mut self, from: u32, n: u32) {
        let mask = self.bufs.len() - 1;
        for k in 0..n as usize {
            self.scratch[k] = self.bufs[(from as usize + k) & mask];
        }
        self.pool.free_bulk(&self.scratch[..n as usize]);
    }

    /// Returns every posted buffer to the pool, where each RQ consumer index step is one
    /// buffer (a cyclic RQ's WQE of one data segment, a stride).
    pub(super) fn release_bufs(&mut self) {
        self.free_bufs(self.rq_ci, self.posted());
        self.rq_ci = self.rq_pi << self.rq.log_units();
    }

    /// Counts the error CQE `cqe` by its syndrome; the syndrome when it stops the WQ, which
    /// then needs a reset (DPDK `mlx5_rx_err_handle`: local QP operation, protection and flush
    /// errors). Any other consumed its WQE (or, on a striding RQ, the rest of it) without a
    /// packet.
    #[inline(always)]
    pub(super) fn error_cqe(&mut self, cqe: &Cqe64) -> Result<(), u8> {
        use crate::dv::prm::syndrome;
        let synd = cqe.as_err().syndrome;
        self.stats.errors.count(crate::Failure::from_mlx5(synd).kind);
        if matches!(synd, syndrome::LOCAL_QP_OP | syndrome::LOCAL_PROT | syndrome::WR_FLUSH) {
            return Err(synd);
        }
        Ok(())
    }

    /// The packet of a `len`-byte frame (RSS hash `hash`, packet flags `flags`) in the buffers
    /// `bufs`, `room` bytes each and filled in order (the device scatters a frame over a
    /// cyclic WQE's data segments, or a striding WQE's strides, that way): one buffer, or a
    /// chain over as many as it fills, each full but the last and naming the next. `bufs`
    /// holds exactly those.
    pub(super) fn frame(&self, bufs: &[u32], len: u32, hash: u32, flags: u32) -> Packet {
        let mut p = Packet {
            buf: bufs[0],
            off: self.data_off,
            rss_hash: hash,
            flags,
            ..Packet::default()
        };
        if let [_] = bufs {
            p.set_len_off(len | Packet::len_off(0, self.data_off));
            return p;
        }
        for (j, &buf) in bufs.iter().enumerate() {
            let next = bufs.get(j + 1).copied().unwrap_or(SegLink::END);
            let seg_len = (len - j as u32 * self.room).min(self.room);
            self.pool.set_link(
                buf,
                SegLink {
                    next,
                    len: seg_len as u16,
                    off: self.data_off,
                },
            );
        }
        p.flags |= flags::CHAINED;
        p.chain_len = len;
        p
    }

    /// Chooses the builds for the CPU's MOVBE and AVX2 or the portable ones (tests compare them
    /// on one CPU): runs the portable build where `movbe` is false, and no AVX2 where `avx2`
    /// is false.
    #[cfg(all(test, feature = "model"))] // the tests that run queues over the model
    pub(super) fn set_cpu_features(&mut self, movbe: bool, avx2: bool) {
        self.movbe = movbe && self.movbe;
        self.avx2 = avx2 && self.avx2;
        if !(self.movbe && self.avx2) {
            self.vector = 0;
        }
    }
}

impl<K: RqKind> Drop for RxCore<K> {
    fn drop(&mut self) {
        // Stop the device writing into our buffers before they go back to the pool; if it will
        // not stop, the buffers are lost to the pool rather than reused under it.
        if !self.device_holds_buffers && self.ctl.reset_rq(self.wq_num).is_ok() {
            K::release_posted(self);
        }
    }
}

/// [`RxCore::rx_burst`] for CPUs without MOVBE, out of line as the others are.
#[inline(never)]
fn plain<K: RqKind, const ZIP: bool>(q: &mut RxCore<K>, out: &mut Burst) -> Result<usize, QueueError> {
    q.build::<ZIP>(out)
}

/// [`RxCore::rx_burst`] compiled for CPUs with MOVBE (an x86-64-v3 feature: Intel since Haswell,
/// AMD since Jaguar and Zen; any host of a ConnectX NIC): each big-endian CQE field is loaded,
/// and each refilled WQE address stored, with one `movbe` instead of a move and a byte swap.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "movbe")]
fn movbe<K: RqKind, const ZIP: bool>(q: &mut RxCore<K>, out: &mut Burst) -> Result<usize, QueueError> {
    q.build::<ZIP>(out)
}

/// The MOVBE build of a compressed burst with its sessions expanded with AVX2 as well, in
/// sessions of `V` mini-CQEs ([`RqKind::burst_zip`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,movbe")]
fn zip_avx2<K: RqKind, const V: usize>(q: &mut RxCore<K>, out: &mut Burst) -> Result<usize, QueueError> {
    K::burst_zip::<V>(q, out)
}

/// Where a burst stands: packets written to the burst's spare slots (`chains` of them
/// chained), the CQ and RQ consumer indices it reached, bytes and device drops counted, the
/// error that ends it.
pub(super) struct Progress {
    pub(super) n: usize,
    pub(super) chains: usize,
    pub(super) ci: u32,
    pub(super) rq_ci: u32,
    pub(super) bytes: u64,
    pub(super) drops: u64,
    pub(super) error: Option<u8>,
    /// It stopped at a slot the device has not written.
    pub(super) empty: bool,
}

impl Progress {
    /// Nothing taken yet, at consumer indices `ci` (CQ) and `rq_ci` (RQ).
    #[inline(always)]
    pub(super) fn at(ci: u32, rq_ci: u32) -> Progress {
        Progress {
            n: 0,
            chains: 0,
            ci,
            rq_ci,
            bytes: 0,
            drops: 0,
            error: None,
            empty: false,
        }
    }

    /// `n` frames taken from one CQE and one RQ step each, with their `bytes` and `drops`.
    #[inline(always)]
    pub(super) fn take(&mut self, n: usize, bytes: u64, drops: u64) {
        self.advance(n, n as u32);
        self.bytes += bytes;
        self.drops += drops;
    }

    /// `handed` packets handed up, `used` CQ slots and RQ steps consumed.
    #[inline(always)]
    pub(super) fn advance(&mut self, handed: usize, used: u32) {
        self.n += handed;
        self.ci = self.ci.wrapping_add(used);
        self.rq_ci = self.rq_ci.wrapping_add(used);
    }
}

/// A compressed session (reference §3.11): title at CQ index `head`, `n` packets of which `done`
/// are handed up. Flags and drop count come from the title, common to every packet (Linux
/// `mlx5e_decompress_cqe`, DPDK `rxq_cq_decompress_v`); per packet, a mini-CQE gives the byte
/// count and RSS hash (hash format) or stride index (the striding queue's format, whose
/// packets all take the title's `hash`). The array being read is copied, as VPP keeps
/// `n_mini_cqes_left` and its state across polls: its slot may be rewritten once the consumer
/// index is published past it.
#[derive(Default)]
pub(crate) struct Zip {
    pub(crate) head: u32,
    pub(crate) n: u32,
    pub(crate) done: u32,
    pub(crate) flags: u32,
    pub(crate) drops: u8,
    pub(crate) hash: u32,
    pub(crate) minis: MiniArray,
}

impl Zip {
    /// The session titled by `title` at CQ index `ci`, its first mini-CQE array read (at `ci + 1`).
    #[inline(always)]
    pub(crate) fn open(title: &Cqe64, ci: u32, cq: &CqRing) -> Zip {
        Zip {
            head: ci,
            n: title.mini_cqe_count(),
            done: 0,
            flags: FLAGS_LUT[(title.hdr_type_vlan() >> 16) as usize & 0x7ff],
            drops: title.rx_drops(),
            hash: title.rx_hash_res.get(),
            minis: cq.reader().mini_array(ci.wrapping_add(mini_array_slot(0))),
        }
    }

    /// Drops every completion `cq` holds from consumer index `ci` on (a WQ reset made them stale):
    /// the rest of this session, then each CQE, a session (on a compressing CQ, `zip_on`) as
    /// many as its packets, their slots invalidated. Returns the new consumer index and the
    /// packets dropped; the session is closed.
    pub(crate) fn drain(&mut self, cq: &CqRing, ci: u32, zip_on: bool) -> (u32, u64) {
        let r = cq.reader();
        let left = self.n - self.done;
        for k in self.done.max(1)..self.n {
            r.invalidate(self.head.wrapping_add(k));
        }
        let mut ci = ci.wrapping_add(left);
        let mut dropped = u64::from(left);
        *self = Zip::default();
        while cq.ready(ci) {
            let n = match cq.poll(ci) {
                Some(c) if zip_on && c.is_title() => c.mini_cqe_count().clamp(1, cq.size()),
                _ => 1,
            };
            for k in 1..n {
                r.invalidate(ci.wrapping_add(k));
            }
            ci = ci.wrapping_add(n);
            dropped += u64::from(n);
        }
        (ci, dropped)
    }

    /// The mini-CQE array holding packet `k` of the session, read when `k` starts one (the first
    /// was read by [`Zip::open`]).
    #[inline(always)]
    pub(crate) fn next_array(&mut self, k: u32, cq: &CqRing) {
        if k.is_multiple_of(MINI) && k != 0 {
            self.minis = cq
                .reader()
                .mini_array(self.head.wrapping_add(mini_array_slot(k / MINI)));
        }
    }
}

/// Mini-CQEs per array slot.
pub(crate) const MINI: u32 = crate::dv::prm::MINI_CQES_PER_SLOT;

/// Packet flags for every value of the low 11 bits of the CQE flags word `hdr_type_etc` (the
/// BE16 at 0x1c: rdma-core's `mlx5_cqe64.hds_ip_ext` is its high byte, with L2/L3/L4 ok in bits
/// 8..=10, and `l4_hdr_type_etc` its low byte: IP fragment bit 7, L4 type 6:4, L3 type 3:2, IP
/// options bit 1, VLAN stripped bit 0), computed once at compile time so the receive loop pays
/// one load instead of a dozen tests. IPv4 checksum-ok needs an IPv4 L3 type (rdma-core
/// `get_csum_ok`); L4 ok needs a TCP/UDP type.
/// Indexed by `hdr_type_etc & 0x7ff`. Bit 0 is not a packet property, so every entry ignores it
/// (`i & 0x7fe` below) rather than the loop shifting it out: one instruction less per packet.
pub(super) static FLAGS_LUT: [u32; 2048] = {
    let mut t = [0u32; 2048];
    let mut i = 0;
    while i < 2048 {
        t[i] = packet_flags(i as u16 & 0x7fe);
        i += 1;
    }
    t
};

const fn packet_flags(f: u16) -> u32 {
    let l3 = (f & cqe_flags::L3_TYPE_MASK) >> cqe_flags::L3_TYPE_SHIFT;
    let l4 = (f & cqe_flags::L4_TYPE_MASK) >> cqe_flags::L4_TYPE_SHIFT;
    let mut out = flags::RSS_HASH;
    if l3 == cqe_flags::L3_IPV4 {
        out |= flags::IPV4;
        if f & cqe_flags::L3_OK != 0 {
            out |= flags::L3_CSUM_OK;
        }
    } else if l3 == cqe_flags::L3_IPV6 {
        out |= flags::IPV6;
    }
    if l4 == cqe_flags::L4_UDP {
        out |= flags::UDP;
    } else if l4 != cqe_flags::L4_NONE {
        out |= flags::TCP;
    }
    if l4 != cqe_flags::L4_NONE && f & cqe_flags::L4_OK != 0 {
        out |= flags::L4_CSUM_OK;
    }
    if f & cqe_flags::IP_FRAG != 0 {
        out |= flags::IP_FRAG;
    }
    if f & cqe_flags::IP_EXT_OPTS != 0 {
        out |= flags::IP_OPTIONS;
    }
    out
}

/// `RxQueue::rx_burst` of a queue whose CQE timestamps are real time: the bursts store them as
/// the CQEs have them (`TickClock::ns` is the identity then), and they are converted here, out
/// of the loops (`dv::convert_real_time`), so that the queues that hand up no real-time
/// timestamps pay nothing for the format.
#[cold]
#[inline(never)]
fn rx_real_time<K: RqKind>(q: &mut RxCore<K>, out: &mut Burst) -> Result<usize, QueueError> {
    let start = out.len();
    let r = q.dispatch(out);
    crate::dv::convert_real_time(out.packets_mut_from(start));
    r
}
