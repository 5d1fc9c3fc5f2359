//! What the model does each step: doorbells → send WQEs → frames on the wire → receive WQEs →
//! CQEs. Behaviour follows `../shared/reference/mlx5-dv.md` §10; each check names its trap (§9).
#![allow(unsafe_code)]

use super::{Device, Fault, Wire, CQN_BASE, WQN_BASE};
use crate::dv::prm::{
    cqe_flags, syndrome, wqebbs, Be32, Cqe64, CtrlSeg, ErrCqe, EthSeg, DS_BYTES, EMPW_TITLE_DS, ESEG_INLINE_OFFSET,
    ETH_L2_MIN_HEADER_SIZE, ETH_WQE_L3_CSUM, ETH_WQE_L4_CSUM, INLINE_SEG, INVALID_LKEY, MAX_WQE_DS,
    OPCODE_ENHANCED_MPSW, OPCODE_SEND, SEND_WQE_BB, SND_DBR,
};
use crate::dv::ring::device;
use crate::flow::wire as pkt;
use crate::sys::afpacket::Received;

/// Why a send WQE failed, as the syndrome of the REQ_ERR CQE the hardware writes.
struct WqeError {
    synd: u8,
    bbs: u32,
}

impl Device {
    pub(super) fn step(&mut self) -> usize {
        self.now = self.clock.elapsed().as_nanos() as u64;
        let mut work = 0;
        for i in 0..self.sqs.len() {
            if self.sqs[i].is_some() {
                work += self.process_sq(i);
            }
        }
        for p in 0..self.ports.len() {
            work += self.poll_wire(p);
        }
        work
    }

    /// Doorbell handling (trap 17): the UAR carries the first 8 bytes of the *last* WQE, the
    /// record the PI after it. Runs WQEs up to the end of the WQE the UAR names.
    fn process_sq(&mut self, i: usize) -> usize {
        let (mem, hw_ci, port, wqe_cnt, error, ready) = {
            let sq = self.sqs[i].as_ref().expect("caller checked");
            (sq.mem.clone(), sq.hw_ci, sq.port, sq.wqe_cnt, sq.error, sq.ready)
        };
        if !ready {
            // A QP outside RTS/ERR ignores its doorbells (the SQ is in RST in the PRM's terms):
            // drop any UAR write so it is not acted on after the QP reaches RTS.
            // SAFETY: the UAR register belongs to this live SQ's memory.
            unsafe { device::take_uar(mem.bf_reg()) };
            return 0;
        }
        // SAFETY: the UAR register and record belong to this live SQ's memory.
        let uar = unsafe { device::take_uar(mem.bf_reg()) };
        // SAFETY: as above.
        let record = unsafe { device::load_dbrec(mem.dbrec().wrapping_add(SND_DBR)) } & 0xffff;
        let pending = record.wrapping_sub(hw_ci) & 0xffff;
        let qpn = self.sqs[i].as_ref().map_or(0, |s| s.qpn);
        if uar == 0 {
            let sq = self.sqs[i].as_mut().expect("caller checked");
            if pending != 0 && !error {
                sq.unrung_polls += 1;
                if sq.unrung_polls == self.cfg.missing_doorbell_polls {
                    self.counters.doorbell_missing += 1;
                    self.trace_event(format_args!(
                        "DOORBELL-MISSING qpn={qpn:#x} record={record} hw_ci={hw_ci}"
                    ));
                }
            }
            return 0;
        }
        self.sqs[i].as_mut().expect("caller checked").unrung_polls = 0;
        self.counters.doorbells += 1;
        if self.take_fault(port, |f| matches!(f, Fault::LostDoorbell)).is_some() {
            self.counters.doorbells_lost += 1;
            self.trace_event(format_args!(
                "DOORBELL-LOST qpn={qpn:#x} uar={:016x}",
                u64::from_be_bytes(uar.to_ne_bytes())
            ));
            return 0;
        }
        let bytes = uar.to_ne_bytes();
        let idx = u32::from(u16::from_be_bytes([bytes[1], bytes[2]]));
        let ds = u32::from(bytes[7] & 0x3f);
        let end = idx.wrapping_add(wqebbs(ds).max(1)) & 0xffff;
        let ahead = end.wrapping_sub(hw_ci) & 0xffff;
        // The slot the UAR names is read only if the record says it is published (or already
        // run, for a repeated doorbell): a slot beyond may be half-written by the driver.
        let published = ahead == 0 || (ahead <= pending && ahead <= wqe_cnt);
        let mut in_memory = [0u8; 8];
        if published {
            // SAFETY: slot idx & (wqe_cnt - 1) is inside the SQ ring, and published (above).
            unsafe {
                device::read(
                    mem.ring().wrapping_add(((idx & (wqe_cnt - 1)) as usize) * SEND_WQE_BB),
                    &mut in_memory,
                )
            };
        }
        if ahead == 0 && in_memory == bytes {
            return 0; // a repeated doorbell for WQEs already run
        }
        let strict_mismatch = self.cfg.strict_doorbell && ahead != pending;
        if ahead == 0 || !published || in_memory != bytes || strict_mismatch {
            self.counters.doorbell_mismatch += 1;
            self.trace_event(format_args!(
                "DOORBELL-MISMATCH qpn={qpn:#x} uar={:016x} record={record} hw_ci={hw_ci}",
                u64::from_be_bytes(bytes)
            ));
            return 0;
        }
        self.trace_event(format_args!(
            "DOORBELL qpn={qpn:#x} uar={:016x} record={record}",
            u64::from_be_bytes(bytes)
        ));
        let mut done = 0;
        let mut left = ahead;
        while left > 0 {
            let bbs = self.exec_wqe(i, left);
            left -= bbs.min(left);
            done += 1;
        }
        done
    }

    /// Executes the WQE at the SQ's consumer index; returns the WQEBBs it took.
    fn exec_wqe(&mut self, i: usize, left: u32) -> u32 {
        let sq = self.sqs[i].as_ref().expect("caller checked");
        let (mem, pi, mask, qpn, cqn, port, in_error) = (
            sq.mem.clone(),
            sq.hw_ci,
            sq.wqe_cnt - 1,
            sq.qpn,
            sq.cqn,
            sq.port,
            sq.error,
        );
        let read_bb = |wqe: &mut [u8], k: u32| {
            let off = ((pi.wrapping_add(k) & mask) as usize) * SEND_WQE_BB;
            // SAFETY: the slot is inside the ring and below the doorbelled PI.
            unsafe {
                device::read(
                    mem.ring().wrapping_add(off),
                    &mut wqe[k as usize * SEND_WQE_BB..][..SEND_WQE_BB],
                )
            };
        };
        let mut wqe = std::mem::take(&mut self.wqe);
        read_bb(&mut wqe, 0);
        let ctrl = ctrl_of(&wqe);
        let ds = ctrl.ds();
        let bbs = wqebbs(ds).clamp(1, left);
        for k in 1..bbs {
            read_bb(&mut wqe, k);
        }
        if (pi & mask) + bbs > mask + 1 {
            self.counters.wrapped_wqes += 1;
        }
        self.counters.wqes += 1;
        if let Some(t) = self.trace.as_mut() {
            t.wqe(qpn, pi, &wqe[..bbs as usize * SEND_WQE_BB]);
        }
        let signalled = ctrl.completion_mode() >= 2;
        let result = if in_error {
            // After an error every later WQE is flushed (trap: flush granularity unknown; we
            // complete signalled ones with WR_FLUSH_ERR, as rdma-core's users expect).
            Err(WqeError {
                synd: syndrome::WR_FLUSH,
                bbs,
            })
        } else if let Some(Fault::TxError { syndrome }) = self.take_fault(port, |f| matches!(f, Fault::TxError { .. }))
        {
            Err(WqeError { synd: syndrome, bbs })
        } else {
            self.build_frames(&wqe, &ctrl, pi, qpn, left)
        };
        self.wqe = wqe;
        let sq = self.sqs[i].as_mut().expect("caller checked");
        match result {
            Ok(bbs) => {
                sq.hw_ci = pi.wrapping_add(bbs);
                self.transmit(port);
                if signalled {
                    let cqe = Cqe64::req(pi as u16, qpn, self.now_ns());
                    self.write_cqe(cqn, cqe.as_bytes());
                }
                bbs
            }
            Err(WqeError { synd, bbs }) => {
                let first_error = !sq.error;
                sq.error = true;
                sq.hw_ci = pi.wrapping_add(bbs);
                // The failing WQE gets an error CQE even when unsignalled (§7); flushed ones only
                // when signalled.
                if first_error || signalled {
                    self.ports[port].counters.tx_error_cqes += 1;
                    let err = ErrCqe::req_err(synd, pi as u16, ctrl.opcode(), qpn);
                    self.write_cqe(cqn, err.as_bytes());
                }
                bbs
            }
        }
    }

    /// Validates a send WQE and assembles its frames into `self.frame`, ending each at an offset
    /// pushed to `self.frame_ends` (trap 3: inline data starts at eseg byte 14; trap 4: ds counts
    /// the ctrl segment; trap 25: minimum inline). A WQE runs whole or fails whole.
    fn build_frames(&mut self, wqe: &[u8], ctrl: &CtrlSeg, pi: u32, qpn: u32, left: u32) -> Result<u32, WqeError> {
        let ds = ctrl.ds();
        let bbs = wqebbs(ds).clamp(1, left);
        let qp_op = Err(WqeError {
            synd: syndrome::LOCAL_QP_OP,
            bbs,
        });
        if ctrl.opmod() != 0 || u32::from(ctrl.wqe_index()) != pi & 0xffff || ctrl.qpn() != qpn {
            return qp_op;
        }
        if !(2..=MAX_WQE_DS).contains(&ds) || wqebbs(ds) > left {
            return qp_op;
        }
        let wqe = &wqe[..ds as usize * DS_BYTES];
        let eseg = &wqe[16..];
        let inline = usize::from(u16::from_be_bytes([eseg[12], eseg[13]]));
        let cs_flags = eseg[4];
        self.frame.clear();
        self.frame_ends.clear();
        match ctrl.opcode() {
            OPCODE_SEND => {
                let eseg_ds = EthSeg::ds_for_inline(inline);
                if 1 + eseg_ds > ds {
                    return qp_op;
                }
                self.frame
                    .extend_from_slice(&eseg[ESEG_INLINE_OFFSET..ESEG_INLINE_OFFSET + inline]);
                let mut off = (1 + eseg_ds as usize) * DS_BYTES;
                while off < wqe.len() {
                    off = self.gather(wqe, off).map_err(|synd| WqeError { synd, bbs })?;
                }
                let total = self.frame.len();
                if inline < usize::from(self.cfg.min_inline).min(total) {
                    return qp_op;
                }
                self.frame_ends.push(total);
            }
            OPCODE_ENHANCED_MPSW => {
                // DPDK `mlx5_tx_burst_empw_*`: title = control + a 16-byte Ethernet segment with no
                // inline header; every data segment after it is one packet. Devices that need a
                // minimum inline cannot do it (§3.7).
                if !self.cfg.enhanced_mpw || self.cfg.min_inline > 0 || ds <= EMPW_TITLE_DS || inline != 0 {
                    return qp_op;
                }
                let mut off = EMPW_TITLE_DS as usize * DS_BYTES;
                while off < wqe.len() {
                    off = self.gather(wqe, off).map_err(|synd| WqeError { synd, bbs })?;
                    self.frame_ends.push(self.frame.len());
                }
            }
            _ => return qp_op,
        }
        let mut start = 0;
        for &end in &self.frame_ends {
            let len = end - start;
            if !(ETH_L2_MIN_HEADER_SIZE..=self.cfg.max_frame).contains(&len) {
                return Err(WqeError {
                    synd: syndrome::LOCAL_LENGTH,
                    bbs,
                });
            }
            if cs_flags & (ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM) != 0 {
                let (l3, l4) = (cs_flags & ETH_WQE_L3_CSUM != 0, cs_flags & ETH_WQE_L4_CSUM != 0);
                pkt::fill_checksums(&mut self.frame[start..end], l3, l4);
            }
            start = end;
        }
        Ok(bbs)
    }

    /// Appends the bytes of the data segment at `off` of `wqe` (inline, or gathered from a
    /// registered MR) to `self.frame`; returns the offset of the next segment or the syndrome.
    fn gather(&mut self, wqe: &[u8], off: usize) -> Result<usize, u8> {
        let byte_count = u32::from_be_bytes(wqe[off..off + 4].try_into().expect("4 bytes"));
        if byte_count & INLINE_SEG != 0 {
            let len = (byte_count & !INLINE_SEG) as usize;
            if off + 4 + len > wqe.len() {
                return Err(syndrome::LOCAL_QP_OP);
            }
            self.frame.extend_from_slice(&wqe[off + 4..off + 4 + len]);
            return Ok(off + (4 + len).div_ceil(DS_BYTES) * DS_BYTES);
        }
        let lkey = u32::from_be_bytes(wqe[off + 4..off + 8].try_into().expect("4 bytes"));
        let addr = u64::from_be_bytes(wqe[off + 8..off + 16].try_into().expect("8 bytes"));
        if byte_count == 0 {
            // A zero-length gather has no documented meaning (§3.4): flag it.
            return Err(syndrome::LOCAL_QP_OP);
        }
        // The frame being built starts after the last one this WQE finished (eMPW).
        let frame_start = self.frame_ends.last().copied().unwrap_or(0);
        if self.frame.len() - frame_start + byte_count as usize > self.cfg.max_frame {
            return Err(syndrome::LOCAL_LENGTH);
        }
        let src = self
            .mr_range(lkey, addr, u64::from(byte_count))
            .ok_or(syndrome::LOCAL_PROT)?;
        // SAFETY: mr_range checked that the range lies in a registered, live region, and the
        // driver handed this buffer to the device with the doorbell.
        unsafe { device::append(src, byte_count as usize, &mut self.frame) };
        Ok(off + DS_BYTES)
    }

    /// The address of `[addr, addr + len)` if it lies inside the MR named by `lkey`.
    fn mr_range(&self, lkey: u32, addr: u64, len: u64) -> Option<*mut u8> {
        let mr = self.mrs.get(lkey.wrapping_sub(super::LKEY_BASE) as usize)?.as_ref()?;
        mr.mem.contains(addr, len).then_some(addr as *mut u8)
    }

    /// Puts the frames in `self.frame` (ending at `self.frame_ends`) on the port's wire.
    fn transmit(&mut self, port: usize) {
        let frame = std::mem::take(&mut self.frame);
        let ends = std::mem::take(&mut self.frame_ends);
        let mut start = 0;
        for &end in &ends {
            self.transmit_one(port, &frame[start..end]);
            start = end;
        }
        self.frame = frame;
        self.frame_ends = ends;
    }

    fn transmit_one(&mut self, port: usize, frame: &[u8]) {
        let c = &mut self.ports[port].counters;
        c.tx_frames += 1;
        c.tx_bytes += frame.len() as u64;
        match &mut self.ports[port].wire {
            Wire::Peer(peer) => {
                let peer = *peer;
                self.deliver(peer, frame);
            }
            Wire::Loopback => self.deliver(port, frame),
            Wire::Capture(q) => q.push_back(frame.to_vec()),
            Wire::AfPacket(sock) => {
                if !sock.send(frame) {
                    self.ports[port].counters.tx_wire_errors += 1;
                }
            }
            Wire::Null => {}
        }
    }

    fn poll_wire(&mut self, port: usize) -> usize {
        if !matches!(self.ports[port].wire, Wire::AfPacket(_)) {
            return 0;
        }
        let mut buf = std::mem::take(&mut self.frame);
        buf.resize(self.cfg.max_frame, 0);
        let mut n = 0;
        while n < 64 {
            let got = match &mut self.ports[port].wire {
                Wire::AfPacket(sock) => sock.recv(&mut buf),
                _ => None,
            };
            match got {
                Some(Received::Frame(len)) => self.deliver(port, &buf[..len]),
                Some(Received::Truncated(_)) => self.ports[port].counters.rx_wire_drops += 1,
                None => break,
            }
            n += 1;
        }
        self.frame = buf;
        n
    }

    /// A frame arrives on `port`: RSS picks an RQ, the frame is scattered into its next WQE.
    pub(super) fn deliver(&mut self, port: usize, frame: &[u8]) {
        let no_buffer = self.take_fault(port, |f| matches!(f, Fault::RxNoBuffer { .. }));
        if let Some(Fault::RxNoBuffer { frames }) = no_buffer {
            if frames > 1 {
                self.ports[port]
                    .faults
                    .push_front(Fault::RxNoBuffer { frames: frames - 1 });
            }
        }
        if self.ports[port].steering.is_some() {
            self.steer(port, frame, no_buffer.is_some());
            return;
        }
        let rqs = &self.ports[port].rqs;
        if rqs.is_empty() {
            self.ports[port].counters.rx_unclaimed += 1;
            return;
        }
        let parsed = pkt::parse(frame);
        let mut input = [0u8; 36];
        let n = pkt::rss_input(frame, &parsed, &mut input);
        let hash = self.rss.hash(&input[..n]);
        // Indirection table of a power-of-two size filled round robin (VPP), indexed by the
        // low bits of the hash (§10: an assumption about the TIR).
        let table = rqs.len().next_power_of_two();
        let wq = rqs[(hash as usize & (table - 1)) % rqs.len()];
        self.rx_into(port, wq, frame, &parsed, hash, no_buffer.is_some());
    }

    /// A frame arrives on a port behind flow steering (mlx5_ib `fs.c`: the bypass namespace's
    /// tables in front of the netdev): every copy (DONT_TRAP) match and the stealing match, if
    /// any, deliver to their TIR; a frame nothing steals also goes to Linux.
    fn steer(&mut self, port: usize, frame: &[u8], no_buffer: bool) {
        let Some(st) = self.ports[port].steering.as_ref() else {
            return;
        };
        let verdict = st.set.classify(frame);
        let mut tirs = [0usize; 8];
        let mut n = 0;
        for i in verdict.copy_rules().chain(verdict.stolen_by) {
            if n < tirs.len() {
                tirs[n] = st.flows[i].2;
                n += 1;
            }
        }
        if verdict.to_linux() {
            self.ports[port].counters.rx_unclaimed += 1;
        }
        if n == 0 {
            return;
        }
        let parsed = pkt::parse(frame);
        for &tir in &tirs[..n] {
            let Some(t) = self.tirs.get(tir).and_then(Option::as_ref) else {
                continue;
            };
            let mut input = [0u8; 36];
            let len = rss_input_fields(frame, &parsed, t.fields, &mut input);
            let hash = if len == 0 { 0 } else { t.rss.hash(&input[..len]) };
            let wq = t.table[hash as usize & (t.table.len() - 1)];
            self.rx_into(port, wq, frame, &parsed, hash, no_buffer);
        }
    }

    fn rx_into(&mut self, port: usize, wq: u32, frame: &[u8], parsed: &pkt::Parsed, hash: u32, no_buffer: bool) {
        let ri = wq.wrapping_sub(WQN_BASE) as usize;
        let Some(rq) = self.rqs.get_mut(ri).and_then(Option::as_mut) else {
            return;
        };
        if rq.error || rq.state != super::RqState::Ready {
            self.ports[port].counters.rx_wq_error += 1;
            return;
        }
        // SAFETY: the record word belongs to this live RQ.
        let posted = unsafe { device::load_dbrec(rq.mem.dbrec()) } & 0xffff;
        if no_buffer || rq.hw_ci & 0xffff == posted {
            rq.pending_drops = rq.pending_drops.saturating_add(1);
            self.ports[port].counters.rx_out_of_buffer += 1;
            return;
        }
        let slot = (rq.hw_ci & (rq.wqe_cnt - 1)) as usize;
        let mut seg = [0u8; 16];
        // SAFETY: slot is inside the RQ ring and below the posted counter.
        unsafe { device::read(rq.mem.ring().wrapping_add(slot * 16), &mut seg) };
        let byte_count = u32::from_be_bytes(seg[0..4].try_into().expect("4"));
        let lkey = u32::from_be_bytes(seg[4..8].try_into().expect("4"));
        let addr = u64::from_be_bytes(seg[8..16].try_into().expect("8"));
        let (cqn, counter) = (rq.cqn, rq.hw_ci as u16);
        rq.hw_ci = rq.hw_ci.wrapping_add(1);
        let injected = self.take_fault(port, |f| matches!(f, Fault::RxError { .. }));
        let failure = if let Some(Fault::RxError { syndrome }) = injected {
            Some(syndrome)
        } else if lkey == INVALID_LKEY {
            Some(syndrome::LOCAL_QP_OP)
        } else if self.mr_range(lkey, addr, u64::from(byte_count)).is_none() {
            Some(syndrome::LOCAL_PROT)
        } else if frame.len() > byte_count as usize {
            Some(syndrome::LOCAL_LENGTH)
        } else {
            None
        };
        if let Some(synd) = failure {
            if matches!(synd, syndrome::LOCAL_QP_OP | syndrome::LOCAL_PROT | syndrome::WR_FLUSH) {
                self.rqs[ri].as_mut().expect("live").error = true;
            }
            self.ports[port].counters.rx_error_cqes += 1;
            let err = ErrCqe::resp_err(synd, counter, wq);
            self.write_cqe(cqn, err.as_bytes());
            return;
        }
        // SAFETY: the range was checked against a live MR above, and the buffer was posted to
        // the device by the RQ doorbell.
        unsafe { device::write(addr as *mut u8, frame) };
        let drops = std::mem::take(&mut self.rqs[ri].as_mut().expect("live").pending_drops);
        let c = &mut self.ports[port].counters;
        c.rx_frames += 1;
        c.rx_bytes += frame.len() as u64;
        let flags = hdr_type_etc(frame, parsed);
        let mut cqe = Cqe64::resp_send(counter, frame.len() as u32, hash, flags, self.now_ns(), drops);
        // CQE v1 names the receiving queue by its user index in `srqn_uidx[23:0]` (rdma-core
        // `cq.c` looks the WQ up by it); the model's user index is the WQ number.
        cqe.srqn_uidx = Be32::new(wq & 0x00ff_ffff);
        self.write_cqe(cqn, cqe.as_bytes());
    }

    /// Writes a CQE at the CQ's producer index with that pass's owner bit, `op_own` last
    /// (trap 11), after an optional overrun check against the published consumer index.
    pub(super) fn write_cqe(&mut self, cqn: u32, cqe: &[u8; 64]) -> bool {
        let Some(cq) = self
            .cqs
            .get_mut(cqn.wrapping_sub(CQN_BASE) as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if self.cfg.strict_cq {
            // SAFETY: the record word belongs to this live CQ.
            let ci = unsafe { device::load_dbrec(cq.mem.dbrec()) } & 0x00ff_ffff;
            if (cq.pi.wrapping_sub(ci) & 0x00ff_ffff) >= cq.cqe_cnt {
                let pi = cq.pi;
                self.counters.cq_overruns += 1;
                self.trace_event(format_args!("CQ-OVERRUN cqn={cqn:#x} pi={pi} ci={ci}"));
                return false;
            }
        }
        let mut bytes = *cqe;
        bytes[63] = (bytes[63] & !1) | crate::dv::prm::cqe_owner_for(cq.pi, cq.log2);
        let slot = cq.mem.ring().wrapping_add(((cq.pi & (cq.cqe_cnt - 1)) as usize) * 64);
        // SAFETY: the slot is inside the CQ ring; the overrun check (or the driver's sizing)
        // guarantees the driver has consumed it.
        unsafe { device::write_cqe(slot, &bytes) };
        let pi = cq.pi;
        cq.pi = cq.pi.wrapping_add(1);
        self.counters.cqes += 1;
        if let Some(t) = self.trace.as_mut() {
            t.cqe(cqn, pi, &bytes);
        }
        true
    }

    /// Removes and returns the first pending fault of `port` that `pick` accepts.
    fn take_fault(&mut self, port: usize, pick: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let faults = &mut self.ports.get_mut(port)?.faults;
        let at = faults.iter().position(pick)?;
        faults.remove(at)
    }

    fn trace_event(&mut self, args: std::fmt::Arguments<'_>) {
        if let Some(t) = self.trace.as_mut() {
            t.event(args);
        }
    }
}

/// The RSS input of a TIR hashing the `IBV_RX_HASH_*` fields in `fields` (verbs.h
/// `enum ibv_rx_hash_fields`): the selected addresses of the frame's IP version, then the
/// selected ports of its L4 protocol, in that order (the Toeplitz input order of `rss_input`).
/// A frame without the selected fields hashes to 0 (the first entry of the table).
pub fn rss_input_fields(frame: &[u8], p: &pkt::Parsed, fields: u64, out: &mut [u8; 36]) -> usize {
    const SRC_IPV4: u64 = 1 << 0;
    const DST_IPV4: u64 = 1 << 1;
    const SRC_IPV6: u64 = 1 << 2;
    const DST_IPV6: u64 = 1 << 3;
    const SRC_PORT_TCP: u64 = 1 << 4;
    const DST_PORT_TCP: u64 = 1 << 5;
    const SRC_PORT_UDP: u64 = 1 << 6;
    const DST_PORT_UDP: u64 = 1 << 7;
    let mut n = 0;
    let mut put = |b: &[u8], n: &mut usize| {
        out[*n..*n + b.len()].copy_from_slice(b);
        *n += b.len();
    };
    match p.l3 {
        pkt::L3::Ipv4 { off, .. } => {
            if fields & SRC_IPV4 != 0 {
                put(&frame[off + 12..off + 16], &mut n);
            }
            if fields & DST_IPV4 != 0 {
                put(&frame[off + 16..off + 20], &mut n);
            }
        }
        pkt::L3::Ipv6 { off, .. } => {
            if fields & SRC_IPV6 != 0 {
                put(&frame[off + 8..off + 24], &mut n);
            }
            if fields & DST_IPV6 != 0 {
                put(&frame[off + 24..off + 40], &mut n);
            }
        }
        pkt::L3::None => return 0,
    }
    let (l4, src, dst) = match p.l4 {
        pkt::L4::Tcp { off, .. } => (Some(off), SRC_PORT_TCP, DST_PORT_TCP),
        pkt::L4::Udp { off } => (Some(off), SRC_PORT_UDP, DST_PORT_UDP),
        pkt::L4::None => (None, 0, 0),
    };
    if let Some(off) = l4 {
        if fields & src != 0 {
            put(&frame[off..off + 2], &mut n);
        }
        if fields & dst != 0 {
            put(&frame[off + 2..off + 4], &mut n);
        }
    }
    n
}

fn ctrl_of(wqe: &[u8]) -> CtrlSeg {
    let w = |o: usize| u32::from_be_bytes(wqe[o..o + 4].try_into().expect("4 bytes"));
    CtrlSeg {
        opmod_idx_opcode: Be32::new(w(0)),
        qpn_ds: Be32::new(w(4)),
        signature: wqe[8],
        dci_stream_channel_id: [wqe[9], wqe[10]],
        fm_ce_se: wqe[11],
        imm: u32::from_ne_bytes(wqe[12..16].try_into().expect("4 bytes")),
    }
}

/// The CQE flags word the NIC's parser reports (§3.9; l4 types from Linux `device.h`).
/// L2_OK stays clear: no source read says when the hardware sets it, rdma-core's own reference
/// CQE (vector g1) leaves it 0, and no driver we follow reads it.
pub fn hdr_type_etc(frame: &[u8], p: &pkt::Parsed) -> u16 {
    let mut f = 0;
    match p.l3 {
        pkt::L3::Ipv4 { frag, options, .. } => {
            f |= cqe_flags::L3_IPV4 << cqe_flags::L3_TYPE_SHIFT;
            if pkt::ipv4_header_ok(frame, p) {
                f |= cqe_flags::L3_OK;
            }
            if frag {
                f |= cqe_flags::IP_FRAG;
            }
            if options {
                f |= cqe_flags::IP_EXT_OPTS;
            }
        }
        pkt::L3::Ipv6 { ext, .. } => {
            f |= cqe_flags::L3_IPV6 << cqe_flags::L3_TYPE_SHIFT | cqe_flags::L3_OK;
            if ext {
                f |= cqe_flags::IP_EXT_OPTS;
            }
        }
        pkt::L3::None => {}
    }
    let l4 = match p.l4 {
        pkt::L4::Udp { .. } => cqe_flags::L4_UDP,
        pkt::L4::Tcp {
            flags, payload_empty, ..
        } => {
            if flags & 0x10 == 0 {
                cqe_flags::L4_TCP
            } else if payload_empty {
                cqe_flags::L4_TCP_EMPTY_ACK
            } else {
                cqe_flags::L4_TCP_ACK
            }
        }
        pkt::L4::None => cqe_flags::L4_NONE,
    };
    f |= l4 << cqe_flags::L4_TYPE_SHIFT;
    if l4 != cqe_flags::L4_NONE && pkt::l4_checksum_ok(frame, p) {
        f |= cqe_flags::L4_OK;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dv::golden;

    #[test]
    fn parser_flags_for_the_reference_frame_are_those_of_g1() {
        let frame = golden::bytes("frame_ipv4_udp_60");
        let g1 = Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap());
        assert_eq!(hdr_type_etc(&frame, &pkt::parse(&frame)), g1.hdr_type_etc.get());
    }
}
