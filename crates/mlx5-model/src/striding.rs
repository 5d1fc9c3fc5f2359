//! The striding (multi-packet) receive queue, as the device fills it. A WQE is a 16-byte next
//! segment and data segments whose concatenation is cut into `2^log_num_strides` strides of
//! `2^log_stride_bytes` (rdma-core `mlx5dv.h` `mlx5_mprq_wqe`; DPDK `mlx5_wqe_mprq`). Each frame
//! takes ceil(len / stride) strides from the first free one of the current WQE; its CQE names the
//! WQE in `wqe_id` and the first stride in `wqe_counter`, and its byte count carries the strides
//! (DPDK `mlx5_prm.h` `MLX5_MPRQ_*`; `mlx5_rx.c` `mlx5_rx_burst_mprq` reads them so). A frame that
//! does not fit in the strides left releases them with a filler CQE (byte count bit 31, the
//! strides left, no frame: DPDK skips `MLX5_MPRQ_FILLER_MASK` completions, VPP `input.c` frees
//! their strides) and goes to the next WQE. A WQE whose strides are used up is done; the driver's
//! doorbell record counts WQEs, not strides.
//!
//! What the model chose where no source says what the hardware does (`docs/mlx5-notes.md`):
//! a frame longer than a whole WQE, and an injected receive error, complete with a RESP_ERR that
//! names the WQE in `wqe_counter` and releases the rest of it, as a filler would.

use super::exec::{data_seg, hdr_type_etc, Frame};
use super::profile::{ErrCounter, WqeId};
use super::ring as dma;
use super::{Device, Fault, StridingState, MAX_RQ_SGE, WQN_BASE};
use mlx5_prm::{mprq, syndrome, Be16, Be32, Cqe64, INVALID_LKEY};
use rawpkt_wire::wire as pkt;

impl Device {
    /// Places `frame` in striding WQ `wq` (see the module comment). `pre` is the frame's parse
    /// and RSS hash when the caller needed them to pick `wq`.
    pub(super) fn rx_striding(
        &mut self,
        port: usize,
        wq: u32,
        frame: &Frame<'_>,
        pre: Option<(&pkt::Parsed, u32)>,
        no_buffer: bool,
    ) {
        let ri = wq.wrapping_sub(WQN_BASE) as usize;
        let rq = self.rqs[ri].as_mut().expect("live");
        if rq.error || rq.state != super::RqState::Ready {
            self.ports[port].counters.rx_wq_error += 1;
            return;
        }
        let StridingState { params, next_stride } = rq.striding.expect("a striding RQ");
        let mut buf = std::mem::take(&mut self.delivered);
        let bytes = frame.wire(&mut buf);
        let len = bytes.len() as u32;
        let need = params.strides_for(len);
        if no_buffer || !self.striding_wqe_posted(ri) {
            self.striding_no_wqe(port, ri);
            self.delivered = buf;
            return;
        }
        let (cqn, wqe) = {
            let rq = self.rqs[ri].as_ref().expect("live");
            (rq.cqn, rq.hw_ci)
        };
        let injected = self.take_fault(port, |f| matches!(f, Fault::RxError { .. }));
        if let Some(Fault::RxError { syndrome }) = injected {
            self.striding_failed(port, wq, ri, syndrome);
            self.delivered = buf;
            return;
        }
        if need > params.num_strides() {
            self.striding_failed(port, wq, ri, syndrome::LOCAL_LENGTH);
            self.delivered = buf;
            return;
        }
        let mut first = next_stride;
        if first + need > params.num_strides() {
            // The strides left are released with a filler, and the frame goes to the next WQE.
            let left = params.num_strides() - first;
            self.striding_cqe(cqn, wq, wqe, first, mprq::byte_cnt(0, left, true), 0, 0);
            self.striding_advance(ri, left);
            if !self.striding_wqe_posted(ri) {
                self.striding_no_wqe(port, ri);
                self.delivered = buf;
                return;
            }
            first = 0;
        }
        let wqe = self.rqs[ri].as_ref().expect("live").hw_ci;
        let shift = if params.two_byte_shift { mprq::TWO_BYTE_SHIFT } else { 0 };
        let at = u64::from(first * params.stride_bytes() + shift);
        match self.striding_place(ri, wqe, at, bytes) {
            Ok(()) if self.trace.is_some() => self.trace_striding(ri, wqe, first, at, bytes.len()),
            Ok(()) => {}
            Err(synd) => {
                self.striding_failed(port, wq, ri, synd);
                self.delivered = buf;
                return;
            }
        }
        let parsed_here;
        let (parsed, hash) = match pre {
            Some(p) => p,
            None => {
                parsed_here = pkt::parse(bytes);
                (&parsed_here, self.rss_hash(bytes, &parsed_here))
            }
        };
        let flags = hdr_type_etc(bytes, parsed);
        self.delivered = buf;
        let c = &mut self.ports[port].counters;
        c.rx_frames += 1;
        c.rx_bytes += u64::from(len);
        self.striding_cqe(cqn, wq, wqe, first, mprq::byte_cnt(len, need, false), hash, flags);
        self.striding_advance(ri, need);
    }

    /// Whether WQE `hw_ci` of striding RQ `ri` is posted, reading the doorbell record again only
    /// when the cached count says no (as `rx_into` does).
    fn striding_wqe_posted(&mut self, ri: usize) -> bool {
        let rq = self.rqs[ri].as_mut().expect("live");
        if rq.hw_ci & 0xffff == rq.posted {
            // SAFETY: the record word belongs to this live RQ.
            let record = unsafe { dma::load_dbrec(rq.mem.dbrec()) } & 0xffff;
            if record != rq.posted {
                if let Some(t) = self.trace.as_mut() {
                    t.rdb(rq.wq_num, record);
                }
            }
            rq.posted = record;
        }
        rq.hw_ci & 0xffff != rq.posted
    }

    /// A frame dropped for want of a posted WQE: counted in `out_of_buffer` and reported in the
    /// next CQE's drop count, as on a cyclic RQ.
    fn striding_no_wqe(&mut self, port: usize, ri: usize) {
        let rq = self.rqs[ri].as_mut().expect("live");
        rq.pending_drops = rq.pending_drops.saturating_add(1);
        self.ports[port].counters.rx_out_of_buffer += 1;
    }

    /// `used` strides of the current WQE are taken; a WQE whose strides are all taken is done.
    fn striding_advance(&mut self, ri: usize, used: u32) {
        let rq = self.rqs[ri].as_mut().expect("live");
        let s = rq.striding.as_mut().expect("a striding RQ");
        s.next_stride += used;
        if s.next_stride >= s.params.num_strides() {
            s.next_stride = 0;
            rq.hw_ci = rq.hw_ci.wrapping_add(1);
        }
    }

    /// An error completion for the current WQE, which it releases whole (see the module comment);
    /// the syndromes fatal to the queue put it in the error state (`rx_failed`).
    ///
    /// What the error CQE's `wqe_counter` holds is the `err_counter` knob's (no source says:
    /// DPDK's `mlx5_rx_err_handle` and the kernel read it only to dump the CQE); its byte count
    /// carries the strides released, in the MPRQ encoding a plain CQE uses (`mprq::byte_cnt`),
    /// which DPDK's `mlx5_rx_poll_len` reads to skip them (the model's choice of value).
    fn striding_failed(&mut self, port: usize, wq: u32, ri: usize, synd: u8) {
        let (cqn, wqe, next, left) = {
            let rq = self.rqs[ri].as_ref().expect("live");
            let s = rq.striding.as_ref().expect("a striding RQ");
            (rq.cqn, rq.hw_ci, s.next_stride, s.params.num_strides() - s.next_stride)
        };
        let counter = match self.cfg.knobs.err_counter {
            ErrCounter::Wqe => wqe as u16,
            ErrCounter::Stride => next as u16,
            ErrCounter::Zero => 0,
        };
        self.rx_failed_with(port, wq, cqn, counter, synd, mprq::byte_cnt(0, left, false).get());
        self.striding_advance(ri, left);
    }

    /// A striding RESP_SEND: WQE `wqe`, first stride `stride`, `byte_cnt` as
    /// [`mprq::byte_cnt`] encodes it.
    #[allow(clippy::too_many_arguments)]
    fn striding_cqe(&mut self, cqn: u32, wq: u32, wqe: u32, stride: u32, byte_cnt: Be32, hash: u32, flags: u16) {
        let rq = self.rqs[wq.wrapping_sub(WQN_BASE) as usize].as_mut().expect("live");
        let drops = std::mem::take(&mut rq.pending_drops);
        let wqe_cnt = rq.wqe_cnt;
        let now = self.now_stamp();
        let mut cqe = Cqe64::resp_send(stride as u16, 0, hash, flags, now, drops);
        cqe.byte_cnt = byte_cnt;
        // `wqe_id`: the WQE counter, or its index in the ring (the `wqe_id` knob: what the
        // kernel's mlx5e takes it for, `en_rx.c` `mlx5e_handle_rx_cqe_mpwrq` indexing
        // `rq->mpwqe.info[wqe_id]`).
        let id = match self.cfg.knobs.wqe_id {
            WqeId::Counter => wqe,
            WqeId::Ring => wqe & (wqe_cnt - 1),
        };
        cqe.wqe_id = Be16::new(id as u16);
        // CQE v1 names the receiving queue by its user index (see `rx_done`).
        cqe.srqn_uidx = Be32::new(wq & 0x00ff_ffff);
        self.write_cqe(cqn, cqe.as_bytes());
    }

    /// The trace's records of a frame placed at offset `at` of WQE `wqe` (`RWQE` when it is the
    /// WQE's first frame, `RXD` for each data segment it lands in).
    #[cold]
    fn trace_striding(&mut self, ri: usize, wqe: u32, first: u32, at: u64, len: usize) {
        let rq = self.rqs[ri].as_ref().expect("live");
        let (stride, wq) = (rq.stride as usize, rq.wq_num);
        let mut raw = [0u8; 16 * MAX_RQ_SGE as usize];
        let slot = (wqe & (rq.wqe_cnt - 1)) as usize;
        // SAFETY: the WQE lies inside the RQ ring (stride bytes per WQE) and is posted.
        unsafe { dma::read(rq.mem.ring().wrapping_add(slot * stride), &mut raw[..stride]) };
        let Some(t) = self.trace.as_mut() else { return };
        if first == 0 {
            t.rwqe(wq, wqe, &raw[..stride]);
        }
        let (mut skip, mut rest) = (at, len as u64);
        for seg in raw[16..stride].chunks_exact(16) {
            let (seg_len, lkey, addr) = data_seg(seg.try_into().expect("16 bytes"));
            if rest == 0 || lkey == INVALID_LKEY {
                break;
            }
            let seg_len = u64::from(seg_len);
            if skip >= seg_len {
                skip -= seg_len;
                continue;
            }
            let n = rest.min(seg_len - skip);
            t.rxd(wq, addr + skip, n as usize);
            rest -= n;
            skip = 0;
        }
    }

    /// Writes `bytes` at offset `at` of WQE `wqe`'s strided buffer: the concatenation of its
    /// data segments after the next segment, up to the first with the invalid lkey. A segment
    /// outside every MR is a protection error, a buffer too short a length error.
    fn striding_place(&self, ri: usize, wqe: u32, at: u64, bytes: &[u8]) -> Result<(), u8> {
        let rq = self.rqs[ri].as_ref().expect("live");
        let stride = rq.stride as usize;
        let mut raw = [0u8; 16 * MAX_RQ_SGE as usize];
        let slot = (wqe & (rq.wqe_cnt - 1)) as usize;
        // SAFETY: the WQE lies inside the RQ ring (stride bytes per WQE) and is posted.
        unsafe { dma::read(rq.mem.ring().wrapping_add(slot * stride), &mut raw[..stride]) };
        let segs = raw[16..stride]
            .chunks_exact(16)
            .map(|s| data_seg(s.try_into().expect("16 bytes")))
            .take_while(|&(_, lkey, _)| lkey != INVALID_LKEY);
        let mut room = 0u64;
        for (len, lkey, addr) in segs.clone() {
            // A segment of 0 bytes holds nothing and is not checked: VPP pads its striding WQEs
            // with such "null" segments (`device.c`, byte count 0, address 0).
            if len != 0 && self.mr_range(lkey, addr, u64::from(len)).is_none() {
                return Err(syndrome::LOCAL_PROT);
            }
            room += u64::from(len);
        }
        if at + bytes.len() as u64 > room {
            return Err(syndrome::LOCAL_LENGTH);
        }
        let (mut skip, mut rest) = (at, bytes);
        for (len, _, addr) in segs {
            if rest.is_empty() {
                break;
            }
            let len = u64::from(len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = rest.len().min((len - skip) as usize);
            // `[addr, addr + len)` lies in a live MR (checked above) and belongs to the device
            // from the doorbell that posted the WQE to the CQE that completes its last stride;
            // `rest` is the frame's bytes, which lie in send buffers or the model's own memory,
            // never in posted receive memory.
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), (addr + skip) as *mut u8, n) };
            rest = &rest[n..];
            skip = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Link, ModelConfig, Nic, QueueMem, RqOptions};
    use mlx5_prm::{mprq, syndrome, Cqe64, DataSeg, ErrCqe, CQE_RESP_ERR, CQE_RESP_SEND};

    /// 8 strides of 256 bytes per WQE.
    const PARAMS: mprq::Params = mprq::Params {
        log_stride_bytes: 8,
        log_num_strides: 3,
        two_byte_shift: false,
    };
    const WQE_BYTES: usize = 256 * 8;

    struct Rig {
        nic: std::sync::Arc<Nic>,
        cq: QueueMem,
        rq: QueueMem,
        buf: Vec<u8>,
        lkey: u32,
    }

    impl Rig {
        fn new(cfg: ModelConfig, params: mprq::Params, wqes: u32) -> Result<Rig, String> {
            let nic = Nic::new(vec![Link::capture()], cfg).unwrap();
            let cq = nic.alloc_cq(64)?;
            let opts = RqOptions {
                max_sge: 1,
                striding: Some(params),
                ..RqOptions::default()
            };
            let rq = nic.alloc_rq_with(0, wqes, cq.raw.num, opts)?;
            let mut buf = vec![0u8; WQE_BYTES * wqes as usize];
            // SAFETY: `buf` lives in the rig, and the rig deregisters before it drops (Drop).
            let lkey = unsafe { nic.register_mr_raw(buf.as_mut_ptr() as u64, buf.len() as u64) };
            Ok(Rig { nic, cq, rq, buf, lkey })
        }

        /// Writes WQEs `from..to` (one data segment over the WQE's part of `buf`) and posts them.
        fn post(&mut self, from: u32, to: u32) {
            for i in from..to {
                let slot = (i & (self.rq.raw.cnt - 1)) as usize;
                let wqe = mprq::Wqe {
                    dseg: DataSeg::new(
                        WQE_BYTES as u32,
                        self.lkey,
                        self.buf.as_ptr() as u64 + (slot * WQE_BYTES) as u64,
                    ),
                    ..mprq::Wqe::default()
                };
                let b = wqe.to_bytes();
                // SAFETY: slot < cnt, and the ring holds `stride` (32) bytes per WQE; the device
                // reads only posted WQEs, and this one is posted below.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        b.as_ptr(),
                        self.rq.raw.buf.add(slot * self.rq.raw.stride as usize),
                        32,
                    )
                };
            }
            // SAFETY: the WQ's doorbell record, a BE32 WQE counter.
            unsafe { std::ptr::write_volatile(self.rq.raw.dbrec, (to & 0xffff).to_be()) };
        }

        fn cqe(&self, i: u32) -> Cqe64 {
            Cqe64::from_bytes(&self.nic.cq_slot(self.cq.raw.num, i).unwrap())
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            self.nic.deregister_mr(self.lkey);
        }
    }

    fn frame(len: usize, tag: u8) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect();
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f
    }

    /// Frames take ceil(len / stride) strides one after another; one that does not fit ends
    /// the WQE with a filler and starts the next; CQEs name WQE and first stride.
    #[test]
    fn frames_fill_strides_and_a_frame_that_does_not_fit_leaves_a_filler() {
        let mut r = Rig::new(ModelConfig::default(), PARAMS, 4).unwrap();
        assert_eq!(r.rq.raw.stride, 32, "next segment + one data segment");
        r.post(0, 4);
        let frames = [
            frame(100, 1),
            frame(300, 2),
            frame(600, 3),
            frame(700, 4),
            frame(256, 5),
        ];
        for f in &frames {
            r.nic.inject_frame(0, f);
        }
        // (wqe, first stride, strides, len or filler)
        let want = [
            (0, 0, 1, Some(100)),
            (0, 1, 2, Some(300)),
            (0, 3, 3, Some(600)),
            (0, 6, 2, None),
            (1, 0, 3, Some(700)),
            (1, 3, 1, Some(256)),
        ];
        for (i, &(wqe, stride, strides, len)) in want.iter().enumerate() {
            let c = r.cqe(i as u32);
            assert_eq!(c.opcode(), CQE_RESP_SEND, "CQE {i}");
            let b = c.byte_cnt.get();
            assert_eq!(
                (c.wqe_id.get(), c.wqe_counter.get(), mprq::strides(b)),
                (wqe, stride, strides),
                "CQE {i}"
            );
            assert_eq!(mprq::is_filler(b), len.is_none(), "CQE {i}");
            assert_eq!(mprq::len(b), len.unwrap_or(0), "CQE {i}");
        }
        // Each frame lies where its CQE says.
        let mut k = 0;
        for (wqe, stride, _, len) in want {
            let Some(len) = len else { continue };
            let at = wqe as usize * WQE_BYTES + stride as usize * 256;
            assert_eq!(&r.buf[at..at + len as usize], &frames[k][..], "frame {k}");
            k += 1;
        }
        assert_eq!(r.nic.port_counters(0).rx_frames, 5);
    }

    /// With every posted WQE full the frame is dropped and counted, and the next CQE reports it.
    #[test]
    fn exhausted_strides_drop_frames_into_out_of_buffer() {
        let mut r = Rig::new(ModelConfig::default(), PARAMS, 4).unwrap();
        r.post(0, 1);
        for _ in 0..8 {
            r.nic.inject_frame(0, &frame(200, 0));
        }
        r.nic.inject_frame(0, &frame(60, 0));
        r.nic.inject_frame(0, &frame(60, 0));
        assert_eq!(r.nic.port_counters(0).rx_out_of_buffer, 2);
        r.post(1, 2);
        r.nic.inject_frame(0, &frame(60, 9));
        let c = r.cqe(8);
        assert_eq!((c.wqe_id.get(), c.wqe_counter.get(), c.rx_drops()), (1, 0, 2));
        assert_eq!(r.cqe(7).rx_drops(), 0);
    }

    /// An injected error and a frame longer than a WQE complete with RESP_ERR naming the WQE,
    /// which they release; the next frame starts the next WQE.
    #[test]
    fn errors_release_the_wqe() {
        let mut r = Rig::new(ModelConfig::default(), PARAMS, 4).unwrap();
        r.post(0, 4);
        r.nic.inject_frame(0, &frame(60, 0));
        r.nic.inject(0, super::Fault::RxError { syndrome: 0x55 });
        r.nic.inject_frame(0, &frame(60, 0));
        r.nic.inject_frame(0, &frame(WQE_BYTES + 1, 0));
        r.nic.inject_frame(0, &frame(60, 0));
        let e = ErrCqe::from_bytes(r.cqe(1).as_bytes());
        assert_eq!(
            (e.op_own >> 4, e.syndrome, e.wqe_counter.get()),
            (CQE_RESP_ERR, 0x55, 0)
        );
        let e = ErrCqe::from_bytes(r.cqe(2).as_bytes());
        assert_eq!((e.syndrome, e.wqe_counter.get()), (syndrome::LOCAL_LENGTH, 1));
        let c = r.cqe(3);
        assert_eq!((c.opcode(), c.wqe_id.get(), c.wqe_counter.get()), (CQE_RESP_SEND, 2, 0));
        assert_eq!(r.nic.port_counters(0).rx_error_cqes, 2);
    }

    /// The two-byte shift starts each frame 2 bytes into its stride, and counts them.
    #[test]
    fn the_two_byte_shift_moves_frames_and_counts_in_strides() {
        let p = mprq::Params {
            two_byte_shift: true,
            ..PARAMS
        };
        let mut r = Rig::new(ModelConfig::default(), p, 2).unwrap();
        r.post(0, 2);
        let f = frame(255, 3);
        r.nic.inject_frame(0, &f);
        r.nic.inject_frame(0, &f);
        assert_eq!(&r.buf[2..257], &f[..]);
        let c = r.cqe(1);
        assert_eq!((c.wqe_counter.get(), mprq::strides(c.byte_cnt.get())), (2, 2));
        assert_eq!(&r.buf[512 + 2..512 + 257], &f[..]);
    }

    /// A ConnectX-4 has no striding RQ, and a ConnectX-5 refuses strides outside its caps.
    #[test]
    fn devices_refuse_striding_rqs_outside_their_caps() {
        let e = Rig::new(ModelConfig::connectx4(), PARAMS, 4).err().unwrap();
        assert!(e.contains("no striding RQ"), "{e}");
        let small = mprq::Params {
            log_stride_bytes: 5,
            ..PARAMS
        };
        let e = Rig::new(ModelConfig::default(), small, 4).err().unwrap();
        assert!(e.contains("2^6 to 2^13"), "{e}");
    }
}
