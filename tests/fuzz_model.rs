//! Fuzz target: the device model's execution of arbitrary send WQEs, doorbells and receive WQEs
//! (`rawpkt::model`), against the rules `docs/mlx5-notes.md` documents (Send WQEs, Doorbells,
//! Completions), read here from the bytes by a separate implementation.
//!
//! One case is a fresh model NIC (a ConnectX-5, or a ConnectX-4 with 18 bytes of minimum inline
//! and no eMPW; a random largest frame) with two registered memory regions, one region that is
//! not registered and one stale lkey:
//! - 1–6 send WQEs, each a SEND or eMPW built from the PRM layout (inline headers, pointer and
//!   inline data segments into every kind of memory, lengths at the edges, checksum flags,
//!   signalled or not) or another opcode, a sixth of them then mutated byte-wise, each rung with
//!   a doorbell that is right, or first missing its UAR write, wrong in its UAR bytes, or lost;
//! - then 0–8 receive WQEs posted (good buffers, the end-of-list lkey, unregistered or stale
//!   memory, short buffers) and 1–10 frames arriving.
//!
//! Invariants: each WQE either sends exactly the frames the rules give (bytes gathered from the
//! named memory, checksums filled where asked) with a CQE exactly when signalled, or sends
//! nothing and gets the error CQE of the right syndrome (even unsignalled), after which every
//! WQE is flushed (a WR_FLUSH CQE when signalled); a doorbell mistake runs nothing and is
//! counted once; each frame lands whole in the next receive buffer with its CQE, or gets the
//! right error CQE (the queue in error after LOCAL_QP_OP / LOCAL_PROT), or is counted dropped;
//! the model writes no byte outside the receive buffers it completed (the unregistered region
//! and the rest of both MRs are compared byte for byte); every port and device counter equals
//! the reference's count; no panic; every model object is gone at the end.

use rawpkt_test_support::fuzz;

use std::sync::Arc;

use mlx5_model::{Fault, Link, ModelConfig, Nic};
use mlx5_prm::{
    syndrome, DataSeg, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND, INVALID_LKEY, OPCODE_ENHANCED_MPSW,
    OPCODE_SEND,
};
use rawpkt::internals::ring::{CqRing, RqRing, SqRing};
use rawpkt::internals::NicQueues;
use rawpkt_sys::region::Region;

const REGION: usize = 16384;
const SQ_BBS: u32 = 64;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// The test's own copy of the memory the model may read and write: index 0 and 1 registered,
/// 2 not.
struct Mem {
    regions: [Arc<Region>; 3],
}

impl Mem {
    /// A copy of region `i`.
    fn read(&self, i: usize) -> Vec<u8> {
        let r = &self.regions[i];
        // SAFETY: the region maps `len` bytes for its lifetime; the model writes it only inside
        // `Nic::step`/`inject_frame` on this thread, never while this slice is alive.
        unsafe { std::slice::from_raw_parts(r.base(), r.len()) }.to_vec()
    }

    /// Fills region `i` with a pattern that differs at every 64-byte line.
    fn fill(&self, i: usize, pattern: &[u8; 64]) {
        let r = &self.regions[i];
        // SAFETY: as in `read`; no other reference to the region's bytes exists meanwhile.
        let b = unsafe { std::slice::from_raw_parts_mut(r.base(), r.len()) };
        for (k, x) in b.iter_mut().enumerate() {
            *x = pattern[k % 64] ^ (k >> 6) as u8;
        }
    }

    fn snapshot(&self) -> [Vec<u8>; 3] {
        std::array::from_fn(|i| self.read(i))
    }
}

/// What the reference knows of the memory: lkey → (region, base address).
struct Mrs {
    keys: Vec<(u32, usize, u64)>,
    stale: u32,
}

impl Mrs {
    /// The region and offset of `[addr, addr + len)` if it lies inside the MR `lkey` names.
    fn range(&self, lkey: u32, addr: u64, len: u64) -> Option<(usize, usize)> {
        let &(_, region, base) = self.keys.iter().find(|k| k.0 == lkey)?;
        let off = addr.checked_sub(base)?;
        (off.checked_add(len)? <= REGION as u64).then_some((region, off as usize))
    }
}

/// A data segment: a pointer into some memory, or inline bytes (padded to 16).
/// `clean`: a valid pointer of 14 to 1400 bytes into a registered region.
fn data_seg(rng: &mut fuzz::Rng, mem: &Mem, mrs: &Mrs, inline_ok: bool, clean: bool) -> Vec<u8> {
    let len = match if clean { 7 } else { rng.below(8) } {
        0 => rng.edgy(80) as u32,
        1 => rng.edgy(10_000) as u32,
        _ => 14 + rng.below(if clean { 1386 } else { 1500 }) as u32,
    };
    if inline_ok && !clean && rng.one_in(4) {
        let n = rng.below(100);
        let mut s = (0x8000_0000u32 | n as u32).to_be_bytes().to_vec();
        s.extend(rng.bytes(n));
        s.resize(s.len().div_ceil(16) * 16, 0);
        return s;
    }
    let base = |i: usize| mem.regions[i].base() as u64;
    // Somewhere a `len`-byte range fits in region `i` (when it can).
    let inside = |rng: &mut fuzz::Rng, i: usize| base(i) + rng.below(REGION.saturating_sub(len as usize).max(1)) as u64;
    let (lkey, addr) = match if clean { rng.below(12) } else { rng.below(16) } {
        0..=9 => (mrs.keys[0].0, inside(rng, 0)),
        10 | 11 => (mrs.keys[1].0, inside(rng, 1)),
        12 => (mrs.keys[0].0, inside(rng, 2)), // unregistered memory
        13 => (mrs.stale, base(2)),
        14 => {
            let any = rng.u32();
            (*rng.pick(&[INVALID_LKEY, any, mrs.keys[1].0]), base(0))
        }
        // Across the end of the MR, or starting before it.
        _ => (
            mrs.keys[0].0,
            if rng.one_in(2) {
                base(0) + REGION as u64 - rng.below(64) as u64 - u64::from(len.min(64))
            } else {
                base(0) - 1 - rng.below(64) as u64
            },
        ),
    };
    DataSeg::new(len, lkey, addr).to_bytes().to_vec()
}

/// A send WQE at `pi`: clean (what a correct driver writes for this device: every check passes
/// unless the largest frame is small) or not (any of the above, then maybe mutated).
fn send_wqe(rng: &mut fuzz::Rng, pi: u32, qpn: u32, mem: &Mem, mrs: &Mrs, m: &Model) -> Vec<u8> {
    let clean = rng.below(5) < 3;
    let opcode = match rng.below(10) {
        0..=4 => OPCODE_SEND,
        5..=8 if !clean || m.empw => OPCODE_ENHANCED_MPSW,
        5..=8 => OPCODE_SEND,
        _ if clean => OPCODE_SEND,
        _ => rng.byte(),
    };
    let mut w = vec![0u8; 16];
    w[0..4].copy_from_slice(&((pi & 0xffff) << 8 | u32::from(opcode)).to_be_bytes());
    w[11] = if rng.one_in(4) { 0 } else { 0x08 };
    // Ethernet segment: cs_flags at 4, inline_hdr_sz at 12, inline bytes from 14.
    let mut eseg = vec![0u8; 14];
    eseg[4] = *rng.pick(&[0, 0, 0x40, 0x80, 0xc0]);
    let inline = if clean {
        if opcode == OPCODE_SEND && (m.l2_inline || rng.one_in(2)) {
            18
        } else {
            0
        }
    } else if opcode == OPCODE_ENHANCED_MPSW {
        if rng.one_in(8) {
            18
        } else {
            0
        }
    } else {
        {
            let any = rng.below(200);
            *rng.pick(&[0, 18, 18, 14, 17, 60, any])
        }
    };
    eseg[12..14].copy_from_slice(&(inline as u16).to_be_bytes());
    if inline == 0 && opcode == OPCODE_SEND && rng.one_in(6) {
        // A VLAN insertion: the dword at 12 is `0x8000_0000 | tci`.
        eseg.resize(16, 0);
        eseg[12..14].copy_from_slice(&0x8000u16.to_be_bytes());
        eseg[14..16].copy_from_slice(&(rng.below(0x10000) as u16).to_be_bytes());
    }
    eseg.extend(rng.bytes(inline));
    eseg.resize(eseg.len().div_ceil(16) * 16, 0);
    w.extend(eseg);
    let segs = match (opcode == OPCODE_ENHANCED_MPSW, clean) {
        (true, _) => 1 + rng.below(12),
        (false, true) => 1 + rng.below(2),
        (false, false) => rng.below(4),
    };
    for _ in 0..segs {
        let inline_ok = opcode == OPCODE_ENHANCED_MPSW || rng.one_in(2);
        w.extend(data_seg(rng, mem, mrs, inline_ok, clean));
    }
    let ds = (w.len() / 16).min(63) as u32;
    w[4..8].copy_from_slice(&(qpn << 8 | ds).to_be_bytes());
    if !clean && rng.one_in(3) {
        rng.mutate(&mut w);
    }
    w
}

struct Model {
    /// The port's inline mode is L2 (a ConnectX-4): a SEND carries the frame's L2 header inline,
    /// through its last VLAN tag or MPLS label, and never less than 18 bytes.
    l2_inline: bool,
    empw: bool,
    max_frame: usize,
    /// Whether frames shorter than 60 bytes leave the port zero-padded to 60, as a MAC pads
    /// them (see `runts_are_padded`).
    pad: bool,
}

impl Model {
    /// Inline bytes a SEND of `frame` must carry: in L2 mode the Ethernet header, every 802.1Q /
    /// 802.1ad / 0x9100 tag and every MPLS label up to the bottom of the stack (Linux
    /// `mlx5e_calc_min_inline` takes the network offset), at least 18 bytes, at most the frame.
    fn inline_needed(&self, frame: &[u8]) -> usize {
        if !self.l2_inline {
            return 0;
        }
        let be16 = |at: usize| frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let mut end = 14;
        let mut ethertype = be16(12);
        while let Some(0x8100 | 0x88a8 | 0x9100) = ethertype {
            end += 4;
            ethertype = be16(end - 2);
        }
        if let Some(0x8847 | 0x8848) = ethertype {
            loop {
                end += 4;
                // Bottom of stack: bit 0 of a label's third byte.
                if frame.get(end - 2).is_none_or(|b| b & 1 == 1) {
                    break;
                }
            }
        }
        end.max(18).min(frame.len())
    }
}

/// The documented execution of the WQE `w` (as many bytes as its WQEBBs hold) at `pi`: its
/// frames, or the syndrome.
fn execute(w: &[u8], pi: u32, qpn: u32, m: &Model, mrs: &Mrs, mem: &[Vec<u8>; 3]) -> Result<Vec<Vec<u8>>, u8> {
    let qp_op = Err(syndrome::LOCAL_QP_OP);
    let ds = usize::from(w[7] & 0x3f);
    if w[0] != 0 || u32::from(be16(&w[1..])) != pi & 0xffff || be32(&w[4..]) >> 8 != qpn {
        return qp_op;
    }
    if !(2..=60).contains(&ds) {
        return qp_op;
    }
    let wqe = &w[..ds * 16];
    // A VLAN insertion (DPDK `MLX5_ETH_WQE_VLAN_INSERT | tci` in the dword at 12, nothing
    // inlined): the device puts the 802.1Q tag after the MAC addresses.
    let vlan = (be32(&wqe[16 + 12..]) & 0xffff_0000 == 0x8000_0000).then(|| be16(&wqe[16 + 14..]));
    let inline = if vlan.is_some() {
        0
    } else {
        usize::from(be16(&wqe[16 + 12..]))
    };
    // One data segment at `off` added to `frame`; the offset of the next one.
    let seg = |off: usize, frame: &mut Vec<u8>| -> Result<usize, u8> {
        let bc = be32(&wqe[off..]);
        if bc & 0x8000_0000 != 0 {
            let len = (bc & 0x7fff_ffff) as usize;
            if off + 4 + len > wqe.len() {
                return Err(syndrome::LOCAL_QP_OP);
            }
            frame.extend_from_slice(&wqe[off + 4..off + 4 + len]);
            return Ok(off + (4 + len).div_ceil(16) * 16);
        }
        if bc == 0 {
            return Err(syndrome::LOCAL_QP_OP);
        }
        if frame.len() + bc as usize > m.max_frame {
            return Err(syndrome::LOCAL_LENGTH);
        }
        let (region, at) = mrs
            .range(be32(&wqe[off + 4..]), be64(&wqe[off + 8..]), u64::from(bc))
            .ok_or(syndrome::LOCAL_PROT)?;
        frame.extend_from_slice(&mem[region][at..at + bc as usize]);
        Ok(off + 16)
    };
    let mut frames = Vec::new();
    match w[3] {
        OPCODE_SEND => {
            let eseg_units = (14 + inline).div_ceil(16).max(1);
            if 1 + eseg_units > ds {
                return qp_op;
            }
            let mut frame = wqe[30..30 + inline].to_vec();
            let mut off = (1 + eseg_units) * 16;
            while off < wqe.len() {
                off = seg(off, &mut frame)?;
            }
            if let Some(tci) = vlan {
                if frame.len() < 12 {
                    return Err(syndrome::LOCAL_LENGTH);
                }
                let [hi, lo] = tci.to_be_bytes();
                frame.splice(12..12, [0x81, 0x00, hi, lo]);
            }
            if inline < m.inline_needed(&frame) {
                return qp_op;
            }
            frames.push(frame);
        }
        OPCODE_ENHANCED_MPSW => {
            if !m.empw || m.l2_inline || ds <= 2 || inline != 0 || vlan.is_some() {
                return qp_op;
            }
            let mut off = 32;
            while off < wqe.len() {
                let mut frame = Vec::new();
                off = seg(off, &mut frame)?;
                frames.push(frame);
            }
        }
        _ => return qp_op,
    }
    if frames.iter().any(|f| f.len() < 14 || f.len() > m.max_frame) {
        return Err(syndrome::LOCAL_LENGTH);
    }
    let cs = wqe[16 + 4];
    if cs & 0xc0 != 0 {
        for f in &mut frames {
            rawpkt_wire::wire::fill_checksums(f, cs & 0x40 != 0, cs & 0x80 != 0);
        }
    }
    Ok(frames)
}

#[derive(Default)]
struct Tally {
    wqes: u64,
    sent: u64,
    errors: u64,
    received: u64,
}

fn case(rng: &mut fuzz::Rng, mem: &Mem, t: &mut Tally, pad: bool) {
    let cx4 = rng.one_in(4);
    let mut cfg = if cx4 {
        ModelConfig::connectx4()
    } else {
        ModelConfig::default()
    };
    let small = 60 + rng.below(200);
    cfg.max_frame = *rng.pick(&[1514, 1514, 9216, 9216, 9216, small]);
    let m = Model {
        l2_inline: cfg.inline_mode == mlx5_prm::InlineMode::L2,
        empw: cfg.enhanced_mpw,
        max_frame: cfg.max_frame,
        pad,
    };
    let nic = Nic::new(vec![Link::capture(), Link::capture()], cfg).unwrap();
    for i in 0..3 {
        mem.fill(i, &rng.bytes(64).try_into().unwrap());
    }
    let lkeys = [nic.register_mr(&mem.regions[0]), nic.register_mr(&mem.regions[1])];
    let stale = nic.register_mr(&mem.regions[2]);
    nic.deregister_mr(stale);
    let mrs = Mrs {
        keys: vec![
            (lkeys[0], 0, mem.regions[0].base() as u64),
            (lkeys[1], 1, mem.regions[1].base() as u64),
        ],
        stale,
    };

    let tx_cq_info = nic.create_cq(64).unwrap();
    let sq_info = nic.create_sq(0, SQ_BBS, tx_cq_info.cqn()).unwrap();
    let qpn = sq_info.qpn();
    // SAFETY: the rings are the model's own objects, alive while their infos are; the test plays
    // the driver and reads CQEs only through `poll`.
    let (mut sq, tx_cq) = unsafe { (SqRing::new(&sq_info).unwrap(), CqRing::new(&tx_cq_info).unwrap()) };

    // ---- send side ----
    let mut pi = 0u32;
    let mut ci = 0u32;
    let mut in_error = false;
    let (mut sent_frames, mut sent_bytes, mut err_cqes) = (0u64, 0u64, 0u64);
    let (mut missing, mut mismatch, mut lost) = (0u64, 0u64, 0u64);
    for _ in 0..1 + rng.below(5) {
        // One doorbell for a batch of one or two WQEs; it carries the last one's first 8 bytes,
        // so that one keeps its wqe_index (else the doorbell names another WQE: a mismatch);
        // the one before it may have any bytes.
        let mut batch = Vec::new();
        let size = if rng.one_in(4) { 2 } else { 1 };
        for k in 0..size {
            let mut w = send_wqe(rng, pi, qpn, mem, &mrs, &m);
            // The WQEBBs its control segment claims (a mutated WQE may be shorter than 8 bytes).
            let bbs = (u32::from(w.get(7).copied().unwrap_or(0)) & 0x3f).div_ceil(4).max(1);
            w.resize(bbs as usize * 64, 0);
            if k == size - 1 {
                w[1..3].copy_from_slice(&(pi as u16).to_be_bytes());
                // The model takes a UAR word of all ones for no write at all (its register's
                // idle value, `UAR_IDLE`: a WQE no driver writes), so such a WQE cannot be
                // rung: keep it out.
                if w[..8] == [0xff; 8] {
                    w[3] = 0x0b;
                }
            }
            for j in 0..bbs {
                sq.wqebb_bytes(pi + j).copy_from_slice(&w[j as usize * 64..][..64]);
            }
            batch.push((pi, w));
            pi += bbs;
        }
        let last_pi = batch.last().unwrap().0;
        let next = pi;
        let before = nic.counters();
        let nothing_ran = |what: &str| {
            let c = nic.counters();
            assert_eq!(c.wqes, before.wqes, "{what}: a WQE ran");
            assert!(tx_cq.poll(ci).is_none(), "{what}: a CQE was written");
            assert!(nic.take_captured(0).is_empty(), "{what}: a frame went out");
        };
        let mode = rng.below(8);
        match mode {
            0 => {
                sq.write_record_only(next);
                nic.step();
                nothing_ran("a record with no UAR write");
                // Documented as counted; the model counts it only for a queue not in error,
                // where the WQEs would otherwise run.
                missing += u64::from(!in_error);
            }
            1 => {
                let right = &batch.last().unwrap().1[..8];
                let mut word = right.to_vec();
                word[3 + rng.below(5)] ^= 1 << rng.below(8);
                if word == [0xff; 8] {
                    // An all-ones word is no write to the model (see above). The right word had
                    // one bit clear, so two other flips give a word that is neither idle nor
                    // right.
                    word = right.to_vec();
                    word[4] ^= 0x80;
                    word[5] ^= 0x80;
                }
                assert!(word != right && word != [0xff; 8]);
                sq.ring_doorbell_word(next, u64::from_ne_bytes(word.try_into().unwrap()));
                nic.step();
                nothing_ran("a UAR write with other bytes than the WQE's");
                mismatch += 1;
            }
            2 => {
                nic.inject(0, Fault::LostDoorbell);
                sq.ring_doorbell(next, last_pi);
                nic.step();
                nothing_ran("a lost doorbell");
                lost += 1;
            }
            _ => {}
        }
        sq.ring_doorbell(next, last_pi);
        let snap = mem.snapshot();
        nic.step();
        assert_eq!(mem.snapshot(), snap, "sending changed memory");
        let after = nic.counters();
        assert_eq!(
            after.wqes,
            before.wqes + batch.len() as u64,
            "every WQE of the batch must run (doorbell mode {mode}, {after:?})"
        );
        // Every CQE written: (opcode, syndrome, wqe_counter, opcode and QPN of an error CQE).
        let mut cqes = Vec::new();
        while let Some(c) = tx_cq.poll(ci) {
            let e = c.as_err();
            cqes.push(match c.opcode() {
                CQE_REQ_ERR => (CQE_REQ_ERR, e.syndrome, c.wqe_counter.get(), e.s_wqe_opcode_qpn.get()),
                op => (op, 0, c.wqe_counter.get(), 0),
            });
            ci += 1;
            tx_cq.publish_ci(ci);
        }
        let (mut want_cqes, mut want_out) = (Vec::new(), Vec::new());
        let mut seen = Vec::new();
        for (wpi, written) in &batch {
            let (wpi, written) = (*wpi, written.as_slice());
            t.wqes += 1;
            let signalled = (written[11] >> 2) & 3 >= 2;
            let result = if in_error {
                Err(syndrome::WR_FLUSH)
            } else {
                execute(written, wpi, qpn, &m, &mrs, &snap)
            };
            let hex: String = written.iter().map(|b| format!("{b:02x}")).collect();
            seen.push(format!(
                "WQE at {wpi}: reference {:?}: {hex}",
                result.as_ref().map(Vec::len)
            ));
            match result {
                Ok(frames) => {
                    if signalled {
                        want_cqes.push((CQE_REQ, 0, wpi as u16, 0));
                    }
                    sent_frames += frames.len() as u64;
                    t.sent += frames.len() as u64;
                    for mut f in frames {
                        if m.pad && f.len() < 60 {
                            f.resize(60, 0);
                        }
                        sent_bytes += f.len() as u64;
                        want_out.push(f);
                    }
                }
                Err(synd) => {
                    // The failing WQE gets its error CQE even unsignalled; flushed ones only
                    // when signalled.
                    if !in_error || signalled {
                        want_cqes.push((CQE_REQ_ERR, synd, wpi as u16, u32::from(written[3]) << 24 | qpn));
                        err_cqes += 1;
                    }
                    in_error = true;
                    t.errors += 1;
                }
            }
        }
        let ctx = format!(
            "(cx4 {cx4}, largest frame {}, doorbell mode {mode})\n{}",
            m.max_frame,
            seen.join("\n")
        );
        assert_eq!(cqes, want_cqes, "completions {ctx}");
        let out = nic.take_captured(0);
        assert_eq!(out.len(), want_out.len(), "frames sent {ctx}");
        for (k, (o, w)) in out.iter().zip(&want_out).enumerate() {
            assert_eq!(o, w, "frame {k} of the batch {ctx}");
        }
    }

    // ---- receive side ----
    let rx_cq_info = nic.create_cq(64).unwrap();
    let (rwq, wq) = nic.create_rq(1, 8, rx_cq_info.cqn()).unwrap();
    // SAFETY: as above; the posted buffers are the test's regions, which nothing else uses.
    let (mut rq, rx_cq) = unsafe { (RqRing::new(&rwq).unwrap(), CqRing::new(&rx_cq_info).unwrap()) };
    let posted = rng.below(9);
    let mut segs = Vec::new();
    for i in 0..posted {
        let len = match rng.below(4) {
            0 => rng.edgy(2000) as u32,
            _ => 1518 + rng.below(3) as u32,
        };
        let (lkey, addr) = match rng.below(10) {
            0..=5 => {
                let r = rng.below(2);
                (lkeys[r], mem.regions[r].base() as u64 + rng.below(REGION - 1600) as u64)
            }
            6 => (INVALID_LKEY, mem.regions[0].base() as u64),
            7 => (lkeys[0], mem.regions[2].base() as u64 + 64),
            8 => (stale, mem.regions[2].base() as u64),
            _ => (
                lkeys[1],
                mem.regions[1].base() as u64 + REGION as u64 - u64::from(len) + 1,
            ),
        };
        *rq.wqe(i as u32) = DataSeg::new(len, lkey, addr);
        segs.push((len, lkey, addr));
    }
    rq.ring_doorbell(posted as u32);
    let mut want_mem = mem.snapshot();
    let (mut next, mut rq_error) = (0usize, false);
    let (mut rx_frames, mut rx_err, mut oob, mut wq_err) = (0u64, 0u64, 0u64, 0u64);
    let mut rx_ci = 0u32;
    for _ in 0..1 + rng.below(10) {
        let n = 14 + rng.below(1505);
        let frame = rng.bytes(n);
        nic.inject_frame(1, &frame);
        let want: Option<(u8, u8)> = if rq_error {
            wq_err += 1;
            None
        } else if next == posted {
            oob += 1;
            None
        } else {
            let (len, lkey, addr) = segs[next];
            let r = if lkey == INVALID_LKEY {
                rq_error = true;
                Some((CQE_RESP_ERR, syndrome::LOCAL_QP_OP))
            } else if let Some((region, at)) = mrs.range(lkey, addr, u64::from(len)) {
                if n > len as usize {
                    Some((CQE_RESP_ERR, syndrome::LOCAL_LENGTH))
                } else {
                    want_mem[region][at..at + n].copy_from_slice(&frame);
                    Some((CQE_RESP_SEND, 0))
                }
            } else {
                rq_error = true;
                Some((CQE_RESP_ERR, syndrome::LOCAL_PROT))
            };
            next += 1;
            r
        };
        let got = rx_cq.poll(rx_ci).map(|c| {
            assert_eq!(usize::from(c.wqe_counter.get()), next - 1, "RX CQE's wqe_counter");
            match c.opcode() {
                CQE_RESP_SEND => {
                    assert_eq!(c.byte_cnt.get() as usize, n, "RX CQE's byte count");
                    (CQE_RESP_SEND, 0)
                }
                op => (op, c.as_err().syndrome),
            }
        });
        assert_eq!(
            got,
            want,
            "frame of {n} bytes into RQ WQE {:?}",
            segs.get(next.saturating_sub(1))
        );
        match got {
            Some((CQE_RESP_SEND, _)) => {
                rx_frames += 1;
                t.received += 1;
            }
            Some(_) => rx_err += 1,
            None => {}
        }
        if got.is_some() {
            rx_ci += 1;
            rx_cq.publish_ci(rx_ci);
        }
    }
    let now = mem.snapshot();
    for (i, name) in ["MR 0", "MR 1", "unregistered memory"].iter().enumerate() {
        if now[i] != want_mem[i] {
            let at = (0..REGION).find(|&k| now[i][k] != want_mem[i][k]).unwrap();
            panic!("the model wrote {name} at offset {at} outside every completed receive");
        }
    }

    // ---- counters ----
    let (p0, p1, d) = (nic.port_counters(0), nic.port_counters(1), nic.counters());
    assert_eq!(
        (p0.tx_frames, p0.tx_bytes, p0.tx_error_cqes),
        (sent_frames, sent_bytes, err_cqes),
        "{p0:?}"
    );
    assert_eq!(
        (p1.rx_frames, p1.rx_error_cqes, p1.rx_out_of_buffer, p1.rx_wq_error),
        (rx_frames, rx_err, oob, wq_err),
        "{p1:?}"
    );
    assert_eq!(
        (d.doorbell_missing, d.doorbell_mismatch, d.doorbells_lost, d.cq_overruns),
        (missing, mismatch, lost, 0),
        "{d:?}"
    );
    drop((sq, tx_cq, rq, rx_cq, sq_info, tx_cq_info, rwq, rx_cq_info));
    let _ = wq;
    for k in lkeys {
        nic.deregister_mr(k);
    }
    assert_eq!(nic.live_objects(), 0, "model objects left");
}

/// Whether the model pads a 20-byte frame to 60 on the wire (the bytes then zeros), or sends it
/// as it is; anything else fails.
fn runts_are_padded(mem: &Mem) -> bool {
    let nic = Nic::new(vec![Link::capture()], ModelConfig::default()).unwrap();
    mem.fill(0, &[0x5a; 64]);
    let lkey = nic.register_mr(&mem.regions[0]);
    let cq = nic.create_cq(4).unwrap();
    let sq_info = nic.create_sq(0, 4, cq.cqn()).unwrap();
    // SAFETY: as in `case`.
    let mut sq = unsafe { SqRing::new(&sq_info).unwrap() };
    let w = sq.wqebb_bytes(0);
    w.fill(0);
    w[3] = OPCODE_SEND;
    w[4..8].copy_from_slice(&(sq_info.qpn() << 8 | 3).to_be_bytes());
    w[32..48].copy_from_slice(&DataSeg::new(20, lkey, mem.regions[0].base() as u64).to_bytes());
    sq.ring_doorbell(1, 0);
    nic.step();
    let out = nic.take_captured(0);
    let frame = [0x5a; 20];
    let padded: Vec<u8> = frame.iter().copied().chain([0; 40]).collect();
    assert!(
        out == [frame.to_vec()] || out == [padded.clone()],
        "a 20-byte SEND went out as {out:02x?}"
    );
    drop((sq, sq_info, cq));
    nic.deregister_mr(lkey);
    out == [padded]
}

#[test]
fn fuzz_model() {
    let mem = Mem {
        regions: std::array::from_fn(|_| Arc::new(Region::small_pages(REGION).unwrap())),
    };
    assert!(mem.regions.iter().all(|r| r.len() == REGION));
    let pad = runts_are_padded(&mem);
    eprintln!(
        "fuzz_model: frames under 60 bytes are {}",
        if pad { "padded to 60" } else { "sent as they are" }
    );
    let mut t = Tally::default();
    // 3·10^4 cases: about 1.1·10^5 send WQEs, and 1.6·10^5 frames arriving at receive WQEs.
    let n = fuzz::run("fuzz_model", 30_000, |rng, _| case(rng, &mem, &mut t, pad));
    eprintln!(
        "fuzz_model: {n} cases, {} WQEs ({} failed or flushed), {} frames sent, {} received",
        t.wqes, t.errors, t.sent, t.received
    );
    assert!(n < 1000 || (t.sent * 2 > t.wqes && t.errors * 5 > t.wqes && t.received * 5 > n));
}
