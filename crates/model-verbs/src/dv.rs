//! The libmlx5 entry points: `mlx5dv_is_supported`, `mlx5dv_query_device`, `mlx5dv_init_obj`
//! and `mlx5dv_create_cq` (providers/mlx5/mlx5.c and verbs.c in rdma-core).

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use rdma_abi::*;

use crate::global::{global, Kind};
use crate::objects::*;
use crate::{guard, ptr_or_errno};

const EINVAL: i32 = libc::EINVAL;

/// Formats of compressed CQEs the device takes (a ConnectX-5: hash and checksum mini-CQEs, and
/// checksum with stride index for striding RQs, as DPDK and VPP ask for there).
const COMP_FORMATS: u32 = MLX5DV_CQE_RES_FORMAT_HASH | MLX5DV_CQE_RES_FORMAT_CSUM | MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX;

#[no_mangle]
pub unsafe extern "C" fn mlx5dv_is_supported(device: *mut ibv_device) -> bool {
    guard(false, || match global() {
        Ok(g) => g.port_of(device).is_some() && g.dv_enabled(),
        Err(_) => false,
    })
}

/// rdma-core `_mlx5dv_query_device` for a ConnectX-5: CQE version 1, MPW allowed, enhanced MPW;
/// the capability structs the caller asks for by `comp_mask`. With the `dv` knob off the device
/// reports none of it, so a DV datapath refuses it (VPP needs CQE_V1).
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_query_device(ctx_in: *mut ibv_context, attrs_out: *mut mlx5dv_context) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = global() else { return EINVAL };
        if ctx_in.is_null() || attrs_out.is_null() || !g.reg().check(ctx_in as usize, Kind::Context) {
            return EINVAL;
        }
        // SAFETY: the caller's struct, valid for reading its comp_mask and writing.
        let a = unsafe { &mut *attrs_out };
        let asked = a.comp_mask;
        a.version = 0;
        a.flags = 0;
        let mut out = 0u64;
        if g.dv_enabled() {
            a.flags = u64::from(
                MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED | MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW,
            );
            // `MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS` (rdma-core `mlx5.c`, from the kernel's
            // `MLX5_IB_QUERY_DEV_RESP_FLAGS_REAL_TIME_TS`): the device can write real-time
            // timestamps, and the kernel then sets each WQ's timestamp format itself (`qp.c`
            // `get_rq_ts_format`: free-running where `rq_ts_format` allows it).
            if g.cfg.knobs.rq_ts_cap != mlx5_model::profile::TsCap::Fr {
                a.flags |= u64::from(MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS);
            }
            if asked & u64::from(MLX5DV_CONTEXT_MASK_CQE_COMPRESION) != 0 {
                a.cqe_comp_caps = mlx5dv_cqe_comp_caps {
                    max_num: mlx5_model::CQE_COMP_MAX_NUM,
                    supported_format: COMP_FORMATS,
                };
                out |= u64::from(MLX5DV_CONTEXT_MASK_CQE_COMPRESION);
            }
            if asked & u64::from(MLX5DV_CONTEXT_MASK_STRIDING_RQ) != 0 {
                a.striding_rq_caps = crate::dv_wq::striding_caps(g);
                out |= u64::from(MLX5DV_CONTEXT_MASK_STRIDING_RQ);
            }
            if asked & u64::from(MLX5DV_CONTEXT_MASK_SWP) != 0 {
                // SAFETY: C data, all-zero valid.
                a.sw_parsing_caps = unsafe { std::mem::zeroed() };
                out |= u64::from(MLX5DV_CONTEXT_MASK_SWP);
            }
            if asked & u64::from(MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS) != 0 {
                a.tunnel_offloads_caps = 0;
                out |= u64::from(MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS);
            }
        }
        a.comp_mask = out;
        0
    })
}

/// rdma-core `_mlx5dv_init_obj`: each requested object in turn (QP, CQ, SRQ, RWQ, ...), stopping
/// at the first failure. The addresses are the model's rings, so a DV datapath that writes
/// WQEs and polls CQEs there drives the model directly.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = global() else { return EINVAL };
        if obj.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's struct; only the members named by obj_type are read.
        let o = unsafe { &mut *obj };
        let known = u64::from(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_RWQ | MLX5DV_OBJ_PD);
        if obj_type & !known != 0 {
            // SRQs, DMs, AHs: the model hands none of them out.
            return EINVAL;
        }
        if obj_type & u64::from(MLX5DV_OBJ_QP) != 0 {
            let (qp, out) = (o.qp.in_, o.qp.out);
            if out.is_null() || !g.reg().check(qp as usize, Kind::Qp) {
                return EINVAL;
            }
            // SAFETY: a live QP and the caller's out struct.
            let (q, out) = unsafe { (&*qp.cast::<Qp>(), &mut *out) };
            // mlx5dv_get_qp: comp_mask is in/out, the optional parts asked for and answered.
            // The model answers the UAR's mmap offset of a QP with a send queue (below); not the
            // TIR/TIS handles or ICM addresses.
            let asked = out.comp_mask;
            out.comp_mask = 0;
            // SAFETY: C data, all-zero valid.
            out.rq = unsafe { std::mem::zeroed() };
            match &q.kind {
                QpKind::Raw { sq, tx, .. } if lock(tx).max_post == 0 => {
                    // A receive-only QP: no send queue to hand over.
                    let _ = sq;
                    out.dbrec = std::ptr::null_mut();
                    // SAFETY: C data, all-zero valid.
                    out.sq = unsafe { std::mem::zeroed() };
                    // SAFETY: as above.
                    out.bf = unsafe { std::mem::zeroed() };
                }
                QpKind::Raw { sq, .. } => {
                    let r = sq.raw;
                    out.dbrec = r.dbrec;
                    out.sq.buf = r.buf.cast();
                    out.sq.wqe_cnt = r.cnt;
                    out.sq.stride = r.stride;
                    out.bf.reg = r.bf_reg.cast();
                    // The size a ConnectX-5 reports (libmlx5's BlueFlame half-register); the
                    // model takes doorbells and BlueFlame copies at either half.
                    out.bf.size = r.bf_size;
                    if asked & u64::from(MLX5DV_QP_MASK_UAR_MMAP_OFFSET) != 0 {
                        // Where `mmap(context->cmd_fd, page, offset)` maps the page `bf.reg`
                        // lies in (`mlx5dv_get_qp`: `mqp->bf->uar_mmap_offset`, which
                        // `get_uar_mmap_offset` makes the page's index times the page size).
                        // DPDK's mlx5 PMD refuses a TX queue without it ("Failed to retrieve
                        // UAR info", drivers/net/mlx5/linux/mlx5_verbs.c
                        // `mlx5_txq_ibv_obj_new`) and maps it in secondary processes
                        // (`mlx5_tx_uar_init_secondary`).
                        out.uar_mmap_offset = (u64::from(r.uar_page) * mlx5_model::UAR_PAGE as u64) as libc::off_t;
                        out.comp_mask |= u64::from(MLX5DV_QP_MASK_UAR_MMAP_OFFSET);
                    }
                    if asked & u64::from(MLX5DV_QP_MASK_RAW_QP_HANDLES) != 0 {
                        // `mlx5dv_get_qp`: the raw QP's TIS, SQ, RQ and TIR numbers (DPDK's PMD
                        // asks for the TIS on a DevX context, then its transport domain with
                        // `mlx5dv_devx_qp_query`). The model's SQ is numbered as the QP.
                        out.tisn = crate::devx_objs::tisn_of(q);
                        out.sqn = q.qp.qp_num;
                        (out.rqn, out.tirn) = match &q.kind {
                            QpKind::Raw { rq: Some(rq), .. } => (rq.wq.wq.wq_num, rq.tir as u32),
                            _ => (0, 0),
                        };
                        out.comp_mask |= u64::from(MLX5DV_QP_MASK_RAW_QP_HANDLES);
                    }
                }
                QpKind::Rss { .. } => {
                    // An RSS QP has no queues of its own.
                    out.dbrec = std::ptr::null_mut();
                    // SAFETY: C data, all-zero valid.
                    out.sq = unsafe { std::mem::zeroed() };
                    // SAFETY: as above.
                    out.bf = unsafe { std::mem::zeroed() };
                }
            }
        }
        if obj_type & u64::from(MLX5DV_OBJ_CQ) != 0 {
            let (cq, out) = (o.cq.in_, o.cq.out);
            if out.is_null() || !g.reg().check(cq as usize, Kind::Cq) {
                return EINVAL;
            }
            // SAFETY: a live CQ and the caller's out struct.
            let (c, out) = unsafe { (&*cq.cast::<Cq>(), &mut *out) };
            let r = c.info.raw;
            out.comp_mask = 0;
            out.buf = r.buf.cast();
            out.dbrec = r.dbrec;
            out.cqe_cnt = r.cnt;
            out.cqe_size = r.stride;
            out.cqn = r.num;
            // SAFETY: a live CQ's context is live (the CQ holds it).
            out.cq_uar = unsafe { (*Context::from_ctx(c.cq.context)).cq_uar.base().cast() };
        }
        if obj_type & u64::from(MLX5DV_OBJ_PD) != 0 {
            // rdma-core `mlx5dv_get_pd`: the PD's number, no optional parts. DPDK's mlx5 PMD
            // asks for it on every DevX context (drivers/common/mlx5/linux/mlx5_common_os.c
            // `mlx5_os_pd_prepare`) and names the PD by it in DevX commands.
            let (pd, out) = (o.pd.in_, o.pd.out);
            if out.is_null() || !g.reg().check(pd as usize, Kind::Pd) {
                return EINVAL;
            }
            // SAFETY: a live PD and the caller's out struct.
            let (p, out) = unsafe { (&*pd.cast::<Pd>(), &mut *out) };
            out.comp_mask = 0;
            out.pdn = p.pdn;
        }
        if obj_type & u64::from(MLX5DV_OBJ_RWQ) != 0 {
            let (wq, out) = (o.rwq.in_, o.rwq.out);
            if out.is_null() || !g.reg().check(wq as usize, Kind::Wq) {
                return EINVAL;
            }
            // SAFETY: a live WQ and the caller's out struct.
            let (w, out) = unsafe { (&*wq.cast::<Wq>(), &mut *out) };
            let r = w.info.raw;
            out.comp_mask = 0;
            out.buf = r.buf.cast();
            out.dbrec = r.dbrec;
            out.wqe_cnt = r.cnt;
            out.stride = r.stride;
        }
        0
    })
}

/// rdma-core `mlx5dv_create_cq` -> `create_cq` (providers/mlx5/verbs.c) with the checks that
/// apply here: unknown mask bits are EINVAL, a CQE size other than 64/128 is EINVAL, a
/// compression format the device lacks is EINVAL (rdma-core: "CQE Compression is not
/// supported"; one format flag at a time, as the kernel's `mini_cqe_res_format_to_hw` takes).
/// The model writes 64-byte CQEs only (128 is EOPNOTSUPP). A compressing CQ gets the device's
/// compressed sessions whenever several receive completions are ready at once; the library's
/// own polling (`ibv_poll_cq`, `ibv_next_poll`) expands them (`CompRing::poll`).
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_create_cq(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
    mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = global()?;
            if cq_attr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the caller's attribute structs (the dv one optional).
            let a = unsafe { &*cq_attr };
            crate::cq_ex::check_attr(a)?;
            let mut comp = None;
            if !mlx5_cq_attr.is_null() {
                // SAFETY: as above.
                let d = unsafe { &*mlx5_cq_attr };
                let known = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE
                    | MLX5DV_CQ_INIT_ATTR_MASK_FLAGS
                    | MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
                if d.comp_mask & !u64::from(known) != 0 {
                    return Err(EINVAL);
                }
                if d.comp_mask & u64::from(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE) != 0 {
                    match d.cqe_size {
                        64 => {}
                        128 => return Err(libc::EOPNOTSUPP),
                        _ => return Err(EINVAL),
                    }
                }
                if d.comp_mask & u64::from(MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE) != 0 {
                    let fmt = u32::from(d.cqe_comp_res_format);
                    if !g.dv.load(Ordering::Relaxed) || fmt == 0 || fmt & !COMP_FORMATS != 0 || fmt.count_ones() != 1 {
                        return Err(EINVAL);
                    }
                    comp = mlx5_prm::MiniFormat::from_dv_flag(d.cqe_comp_res_format);
                }
            }
            let cqe = i32::try_from(a.cqe).map_err(|_| EINVAL)?;
            crate::verbs::create_cq_comp(context, cqe, a.cq_context, a.channel.cast(), a.wc_flags, comp)
                .map(|c| c.cast::<ibv_cq_ex>())
        })())
    })
}

/// `mlx5dv_init_obj@MLX5_1.0` (rdma-core `COMPAT_SYMVER_FUNC(mlx5dv_init_obj, 1_0, ...)` in
/// providers/mlx5/mlx5.c): the current one, except that this ABI's `mlx5dv_cq.cq_uar` held the
/// address of a variable holding the UAR's address.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn __mlx5dv_init_obj_MLX5_1_0(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int {
    // SAFETY: the caller's struct, as for mlx5dv_init_obj.
    let ret = unsafe { mlx5dv_init_obj(obj, obj_type) };
    if ret == 0 && obj_type & u64::from(MLX5DV_OBJ_CQ) != 0 {
        guard((), || {
            // SAFETY: mlx5dv_init_obj checked the CQ is live and the out struct non-NULL; a live
            // CQ's context is live.
            unsafe {
                let o = &mut *obj;
                let ctx = Context::from_ctx((*o.cq.in_).context);
                (*o.cq.out).cq_uar = std::ptr::addr_of_mut!((*ctx).cq_uar_reg).cast();
            }
        });
    }
    ret
}
