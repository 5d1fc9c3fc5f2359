//! The verbs datapath as libmlx5 implements it: `ibv_post_send` writes mlx5 send WQEs into the
//! model's SQ ring and rings its doorbell, `ibv_post_wq_recv` writes receive WQEs, and
//! `ibv_poll_cq` reads the CQEs the model wrote. So the ibverbs fallback runs on the same rings,
//! formats and device checks as the DV datapath.

use std::ffi::c_int;

use mlx5_prm as prm;
use mlx5_prm::{CtrlSeg, DataSeg, ErrCqe, ETH_L2_INLINE_HEADER_SIZE, ETH_WQE_L3_CSUM, ETH_WQE_L4_CSUM};
use rdma_abi::*;

use crate::global::{global, Kind};
use crate::guard;
use crate::objects::*;

const EINVAL: i32 = libc::EINVAL;
const ENOMEM: i32 = libc::ENOMEM;

/// One send WR as an mlx5 WQE (rdma-core `_mlx5_post_send`, providers/mlx5/qp.c, for
/// IBV_QPT_RAW_PACKET + IBV_WR_SEND): control segment; Ethernet segment with the first
/// `eth_min_inline_size` bytes of the frame inline (`copy_eth_inline_headers`; the model's
/// library uses 18, the L2 header, which every mlx5 takes; a ConnectX-5 kernel may report 0);
/// then the rest either inline (IBV_SEND_INLINE, `set_data_inl_seg`) or as one data segment per
/// non-empty SGE. Returns the WQE's bytes (a multiple of 16) or the errno.
fn build_wqe(wr: &ibv_send_wr, t: &SqTx, qpn: u32, pi: u32, out: &mut Vec<u8>) -> Result<(), i32> {
    if wr.opcode != IBV_WR_SEND {
        // RAW_PACKET QPs send (TSO aside); other opcodes are refused by the kernel-less
        // provider path with EINVAL.
        return Err(EINVAL);
    }
    let n = usize::try_from(wr.num_sge).map_err(|_| EINVAL)?;
    if !t.operational || n as u32 > t.max_gs {
        // `qp_state_max_gs` is -1 until the QP reaches RTS: ENOMEM.
        return Err(ENOMEM);
    }
    if n == 0 || wr.sg_list.is_null() {
        return Err(EINVAL); // "illegal num_sge: 0, minimum is 1"
    }
    // SAFETY: sg_list holds num_sge entries (verbs contract), checked non-NULL.
    let sges = unsafe { std::slice::from_raw_parts(wr.sg_list, n) };
    out.clear();
    out.resize(16 + 32, 0);
    // Control segment (mlx5dv.h `mlx5dv_set_ctrl_seg`): opmod|wqe_index|opcode, qpn|ds,
    // fm_ce_se at byte 11. ds is filled in at the end.
    out[0..4].copy_from_slice(
        &CtrlSeg::opmod_idx_opcode(0, pi as u16, prm::OPCODE_SEND)
            .get()
            .to_be_bytes(),
    );
    let mut fm_ce_se = 0;
    if wr.send_flags & IBV_SEND_SIGNALED != 0 || t.sig_all {
        fm_ce_se |= prm::WQE_CTRL_CQ_UPDATE;
    }
    if wr.send_flags & IBV_SEND_SOLICITED != 0 {
        fm_ce_se |= prm::WQE_CTRL_SOLICITED;
    }
    if wr.send_flags & IBV_SEND_FENCE != 0 {
        fm_ce_se |= prm::WQE_CTRL_FENCE;
    }
    out[11] = fm_ce_se;
    // Ethernet segment at 16: cs_flags at +4, inline_hdr_sz at +12, inline bytes from +14.
    if wr.send_flags & IBV_SEND_IP_CSUM != 0 {
        out[16 + 4] = ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM;
    }
    let hdr = ETH_L2_INLINE_HEADER_SIZE;
    out[16 + 12..16 + 14].copy_from_slice(&(hdr as u16).to_be_bytes());
    // Copy the header from the first SGEs (they may be shorter than the header).
    let (mut sge_i, mut sge_off, mut copied) = (0usize, 0usize, 0usize);
    while copied < hdr {
        let Some(s) = sges.get(sge_i) else {
            return Err(EINVAL); // "Ethernet headers < 16 bytes"
        };
        let take = (s.length as usize - sge_off).min(hdr - copied);
        // SAFETY: [addr, addr + length) is the caller's buffer (verbs contract); we read inside it.
        let src = unsafe { std::slice::from_raw_parts((s.addr as usize + sge_off) as *const u8, take) };
        out[16 + 14 + copied..16 + 14 + copied + take].copy_from_slice(src);
        copied += take;
        sge_off += take;
        if sge_off == s.length as usize {
            sge_i += 1;
            sge_off = 0;
        }
    }
    let rest = sges.iter().enumerate().skip(sge_i).map(|(i, s)| {
        let off = if i == sge_i { sge_off } else { 0 };
        (s.addr + off as u64, s.length - off as u32, s.lkey)
    });
    if wr.send_flags & IBV_SEND_INLINE != 0 {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut inl = 0usize;
        for (addr, len, _) in rest {
            // SAFETY: the caller's buffer, as above.
            let src = unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len as usize) };
            out.extend_from_slice(src);
            inl += len as usize;
        }
        if inl as u32 > t.max_inline {
            return Err(ENOMEM); // "inline layout failed"
        }
        out[at..at + 4].copy_from_slice(&(inl as u32 | prm::INLINE_SEG).to_be_bytes());
        out.resize(out.len().div_ceil(16) * 16, 0);
    } else {
        for (addr, len, lkey) in rest {
            if len == 0 {
                continue; // rdma-core skips empty SGEs
            }
            out.extend_from_slice(&DataSeg::new(len, lkey, addr).to_bytes());
        }
    }
    let ds = (out.len() / 16) as u32;
    if ds > prm::MAX_WQE_DS {
        return Err(EINVAL);
    }
    out[4..8].copy_from_slice(&CtrlSeg::qpn_ds(qpn, ds as u8).get().to_be_bytes());
    Ok(())
}

pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard(EINVAL, || {
        let set_bad = |w: *mut ibv_send_wr| {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out pointer.
                unsafe { *bad_wr = w };
            }
        };
        let Ok(g) = global() else { return EINVAL };
        if qp.is_null() || !g.reg().check(qp as usize, Kind::Qp) {
            set_bad(wr);
            return EINVAL;
        }
        // SAFETY: a live QP.
        let q = unsafe { &*qp.cast::<Qp>() };
        let QpKind::Raw { sq, tx, .. } = &q.kind else {
            set_bad(wr);
            return EINVAL;
        };
        let qpn = sq.raw.num;
        let mut t = lock(tx);
        let mask = t.ring.size() - 1;
        let mut wqe = Vec::with_capacity(256);
        // The last WQE: its first WQEBB, its ds and whether it was built inline.
        let (mut w, mut nreq, mut last) = (wr, 0u32, None);
        let mut err = 0;
        while !w.is_null() {
            // SAFETY: a WR of the caller's chain.
            let r = unsafe { &*w };
            // mlx5_wq_overflow: WRs in flight may not reach max_post.
            if t.head.wrapping_add(nreq).wrapping_sub(t.tail) >= t.max_post {
                err = ENOMEM;
                break;
            }
            if let Err(e) = build_wqe(r, &t, qpn, t.pi, &mut wqe) {
                err = e;
                break;
            }
            let bbs = wqe.len().div_ceil(64) as u32;
            let ds = (wqe.len() / 16) as u32;
            let start = t.pi;
            for (k, chunk) in wqe.chunks(64).enumerate() {
                t.ring.write_wqebb(start.wrapping_add(k as u32), chunk);
            }
            let slot = (start & mask) as usize;
            t.wrid[slot] = r.wr_id;
            t.wqe_head[slot] = t.head.wrapping_add(nreq);
            t.pi = start.wrapping_add(bbs);
            last = Some((start, ds, r.send_flags & IBV_SEND_INLINE != 0));
            nreq += 1;
            w = r.next;
        }
        if err != 0 {
            set_bad(w);
        }
        t.head = t.head.wrapping_add(nreq);
        if let Some((last, ds, inl)) = last {
            // Record, then the BlueFlame register (mlx5 `post_send_db`).
            let pi = t.pi;
            t.ring.doorbell(pi, last, ds, nreq == 1 && inl);
        }
        err
    })
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(EINVAL, || {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = wr };
        }
        let Ok(g) = global() else { return EINVAL };
        if qp.is_null() || !g.reg().check(qp as usize, Kind::Qp) {
            return EINVAL;
        }
        // SAFETY: a live QP.
        match unsafe { &(*qp.cast::<Qp>()).kind } {
            QpKind::Raw { rq: Some(r), .. } => {
                // SAFETY: the caller's chain and out pointer, passed on.
                unsafe { post_rq(&r.wq, wr, bad_wr) }
            }
            // No receive queue (rq.wqe_cnt 0): mlx5_post_recv's overflow check fails every WR
            // with ENOMEM.
            _ => ENOMEM,
        }
    })
}

pub(crate) unsafe extern "C" fn wq_post_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(EINVAL, || {
        let set_bad = |w: *mut ibv_recv_wr| {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out pointer.
                unsafe { *bad_wr = w };
            }
        };
        let Ok(g) = global() else { return EINVAL };
        if wq.is_null() || !g.reg().check(wq as usize, Kind::Wq) {
            set_bad(wr);
            return EINVAL;
        }
        // SAFETY: a live WQ; the caller's chain and out pointer, passed on.
        unsafe { post_rq(&*wq.cast::<Wq>(), wr, bad_wr) }
    })
}

/// Posts a chain of receive WRs to an RQ, a WQ's or a raw QP's own: rdma-core
/// `mlx5_post_wq_recv` / `mlx5_post_recv` (providers/mlx5/qp.c): more SGEs than the WQE holds
/// (`rq.max_gs`) is EINVAL; empty SGEs are skipped; a WQE with room left ends with a
/// terminator segment.
///
/// # Safety
/// `wr` is NULL or a valid chain of WRs; `bad_wr` is NULL or valid for writing.
unsafe fn post_rq(w: &Wq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    let set_bad = |w: *mut ibv_recv_wr| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = w };
        }
    };
    if w.striding {
        // The model library posts cyclic WQEs only; a striding WQ is for Direct Verbs, where the
        // program writes the next segment and the strides' data segments itself (as DPDK and
        // VPP do).
        set_bad(wr);
        return libc::EOPNOTSUPP;
    }
    let mut rx = lock(&w.rx);
    let (size, max_gs) = (rx.ring.size(), rx.ring.max_gs());
    let (mut cur, mut nreq, mut err) = (wr, 0u32, 0);
    let mut segs = [[0u8; 16]; mlx5_model::MAX_RQ_SGE as usize];
    while !cur.is_null() {
        // SAFETY: a WR of the caller's chain.
        let r = unsafe { &*cur };
        if rx.head.wrapping_add(nreq).wrapping_sub(rx.tail) >= size {
            err = ENOMEM;
            break;
        }
        if r.num_sge < 0 || r.num_sge as u32 > max_gs || (r.num_sge > 0 && r.sg_list.is_null()) {
            err = EINVAL;
            break;
        }
        let sges = if r.num_sge > 0 {
            // SAFETY: num_sge SGEs (verbs contract), checked non-NULL.
            unsafe { std::slice::from_raw_parts(r.sg_list, r.num_sge as usize) }
        } else {
            &[]
        };
        let mut j = 0;
        for s in sges.iter().filter(|s| s.length > 0) {
            segs[j] = DataSeg::new(s.length, s.lkey, s.addr).to_bytes();
            j += 1;
        }
        let idx = rx.head.wrapping_add(nreq);
        rx.ring.write_wqe(idx, &segs[..j], &DataSeg::TERMINATOR.to_bytes());
        let slot = (idx & (size - 1)) as usize;
        rx.wrid[slot] = r.wr_id;
        nreq += 1;
        cur = r.next;
    }
    if err != 0 {
        set_bad(cur);
    }
    if nreq > 0 {
        rx.head = rx.head.wrapping_add(nreq);
        let head = rx.head;
        rx.ring.doorbell(head);
    }
    err
}

/// `mlx5_handle_error_cqe` (providers/mlx5/cq.c): syndrome -> `ibv_wc_status`.
fn wc_status(synd: u8) -> ibv_wc_status {
    use prm::syndrome as s;
    match synd {
        s::LOCAL_LENGTH => IBV_WC_LOC_LEN_ERR,
        s::LOCAL_QP_OP => IBV_WC_LOC_QP_OP_ERR,
        s::LOCAL_PROT => IBV_WC_LOC_PROT_ERR,
        s::WR_FLUSH => IBV_WC_WR_FLUSH_ERR,
        s::MW_BIND => IBV_WC_MW_BIND_ERR,
        s::BAD_RESP => IBV_WC_BAD_RESP_ERR,
        s::LOCAL_ACCESS => IBV_WC_LOC_ACCESS_ERR,
        s::REMOTE_INVAL_REQ => IBV_WC_REM_INV_REQ_ERR,
        s::REMOTE_ACCESS => IBV_WC_REM_ACCESS_ERR,
        s::REMOTE_OP => IBV_WC_REM_OP_ERR,
        s::TRANSPORT_RETRY_EXC => IBV_WC_RETRY_EXC_ERR,
        s::RNR_RETRY_EXC => IBV_WC_RNR_RETRY_EXC_ERR,
        s::REMOTE_ABORTED => IBV_WC_REM_ABORT_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

/// One CQE as `ibv_poll_cq` reports it, with what only the extended CQ reads: the completion
/// timestamp (device clock ticks), the stripped VLAN and the flow tag.
pub(crate) struct Polled {
    pub wc: ibv_wc,
    pub ts: u64,
    pub cvlan: u16,
    pub flow_tag: u32,
}

/// Takes the next CQE the software owns at the CQ's consumer index, if any, and turns it into
/// a completion as rdma-core's `mlx5_poll_one` / `mlx5_parse_lazy_cqe` do for uncompressed
/// 64-byte CQEs: a send completion names its WQE by `wqe_counter` (the `wr_id` stored at that
/// slot, and every WR up to it leaves the queue), a receive completion its WQ by the CQE v1
/// user index. The consumer index is not published: the caller does, once per batch
/// (`update_cons_index`).
pub(crate) fn poll_one(p: &mut CqPoll) -> Option<Polled> {
    let bytes = p.ring.poll(p.ci)?;
    let cqe = prm::Cqe64::from_bytes(&bytes);
    p.ci = p.ci.wrapping_add(1);
    // SAFETY: C data, all-zero valid.
    let mut out: ibv_wc = unsafe { std::mem::zeroed() };
    let ctr = cqe.wqe_counter.get();
    match cqe.opcode() {
        prm::CQE_REQ | prm::CQE_REQ_ERR => {
            let (qpn, status, vendor) = if cqe.opcode() == prm::CQE_REQ {
                (cqe.sop_drop_qpn.get() & 0x00ff_ffff, IBV_WC_SUCCESS, 0)
            } else {
                let e = cqe.as_err();
                (
                    e.s_wqe_opcode_qpn.get() & 0x00ff_ffff,
                    wc_status(e.syndrome),
                    u32::from(e.vendor_err_synd),
                )
            };
            out.qp_num = qpn;
            out.status = status;
            out.vendor_err = vendor;
            out.opcode = IBV_WC_SEND;
            if let Some(&qp) = p.sqs.get(&qpn) {
                // SAFETY: QPs leave this map before they are freed (destroy_qp).
                if let QpKind::Raw { tx, .. } = unsafe { &(*qp).kind } {
                    let mut t = lock(tx);
                    let slot = (u32::from(ctr) & (t.ring.size() - 1)) as usize;
                    out.wr_id = t.wrid[slot];
                    t.tail = t.wqe_head[slot].wrapping_add(1);
                }
            }
        }
        prm::CQE_RESP_SEND | prm::CQE_RESP_ERR => {
            let wqn = if cqe.opcode() == prm::CQE_RESP_SEND {
                out.status = IBV_WC_SUCCESS;
                out.byte_len = cqe.byte_cnt.get();
                cqe.srqn_uidx.get() & 0x00ff_ffff
            } else {
                let e: ErrCqe = cqe.as_err();
                out.status = wc_status(e.syndrome);
                out.vendor_err = u32::from(e.vendor_err_synd);
                e.srqn.get() & 0x00ff_ffff
            };
            out.opcode = IBV_WC_RECV;
            out.qp_num = wqn;
            if let Some(&w) = p.wqs.get(&wqn) {
                // SAFETY: WQs leave this map before they are freed (destroy_wq, destroy_qp for
                // a QP's own RQ).
                out.qp_num = unsafe { (*w).wc_qp_num };
                // SAFETY: as above.
                let mut rx = lock(unsafe { &(*w).rx });
                let slot = (u32::from(ctr) & (rx.ring.size() - 1)) as usize;
                out.wr_id = rx.wrid[slot];
                rx.tail = rx.tail.wrapping_add(1);
            }
        }
        _ => {
            // Nothing the model writes (no compression, no scatter-to-CQE): report a general
            // error rather than guess.
            out.status = IBV_WC_GENERAL_ERR;
        }
    }
    let resp = cqe.opcode() == prm::CQE_RESP_SEND;
    Some(Polled {
        wc: out,
        ts: cqe.timestamp.get(),
        // mlx5 `mlx5_cq_read_wc_cvlan`, `mlx5_cq_read_flow_tag`.
        cvlan: if resp { cqe.vlan_info.get() } else { 0 },
        flow_tag: if resp { cqe.sop_drop_qpn.get() & 0x00ff_ffff } else { 0 },
    })
}

/// `ibv_poll_cq` as rdma-core's `mlx5_poll_cq` does it (see [`poll_one`]); the consumer index
/// is published once, after the batch. A `num_entries` of 0 or less polls nothing and answers
/// 0, as libmlx5's `for (npolled = 0; npolled < ne; ++npolled)` loop does (`poll_cq` in
/// providers/mlx5/cq.c).
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        let Ok(g) = global() else { return -1 };
        if cq.is_null() || !g.reg().check(cq as usize, Kind::Cq) {
            return -1;
        }
        if num_entries <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -1;
        }
        // SAFETY: a live CQ.
        let c = unsafe { &*cq.cast::<Cq>() };
        let mut p = lock(&c.poll);
        let mut n = 0usize;
        while n < num_entries as usize {
            let Some(one) = poll_one(&mut p) else { break };
            // SAFETY: wc holds num_entries entries and n < num_entries.
            unsafe { *wc.add(n) = one.wc };
            n += 1;
        }
        if n > 0 {
            let ci = p.ci;
            p.ring.publish_ci(ci);
        }
        n as c_int
    })
}
