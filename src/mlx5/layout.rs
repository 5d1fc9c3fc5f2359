//! `mlx5dv_init_obj` output turned into the DV datapath's ring descriptions
//! (`dv::ring::{SqInfo, CqInfo, RwqInfo}`), with the checks VPP's `rdma_txq_init` /
//! `rdma_rxq_init` make before trusting the layout. Here rather than in `sys::rdma`, which hands
//! out the raw `mlx5dv_*` structs and knows nothing of the datapath's rings.
#![allow(unsafe_code)]

use std::sync::Arc;

use crate::dv::ring::{CqInfo, KeepAlive, RwqInfo, SqInfo};
use crate::sys::rdma::{CallError, Cq, Qp, Wq};

/// Why a queue's layout cannot be used: `mlx5dv_init_obj` failed (its errno kept), or it
/// described a layout the datapath does not drive.
#[derive(Debug)]
pub(crate) enum LayoutError {
    Call(CallError),
    Unexpected(String),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::Call(e) => e.fmt(f),
            LayoutError::Unexpected(m) => f.write_str(m),
        }
    }
}

/// The send queue of a RAW_PACKET QP. `keep` must hold the QP (and whatever else the queue
/// needs alive, such as the MR).
pub(super) fn sq_info(qp: &Arc<Qp>, keep: KeepAlive) -> Result<SqInfo, LayoutError> {
    let q = qp.dv_info().map_err(LayoutError::Call)?;
    // rdma-core: the SQ stride is always one 64-byte WQEBB and wqe_cnt a power of two
    // (providers/mlx5/verbs.c `mlx5_calc_sq_size`); VPP refuses the queue otherwise.
    if q.sq.stride != 64
        || !q.sq.wqe_cnt.is_power_of_two()
        || q.sq.buf.is_null()
        || !(q.sq.buf as usize).is_multiple_of(64)
    {
        return Err(LayoutError::Unexpected(format!(
            "unexpected send queue layout from mlx5dv_init_obj (stride {}, {} WQEBBs)",
            q.sq.stride, q.sq.wqe_cnt
        )));
    }
    // The pointers are the live QP's SQ buffer, doorbell record and UAR register as
    // mlx5dv_init_obj reported them.
    // SAFETY: `keep` holds the QP, so they stay valid while the SqInfo (and any ring on it) lives.
    Ok(unsafe {
        SqInfo::from_raw(
            q.sq.buf.cast(),
            q.sq.wqe_cnt,
            q.sq.stride,
            q.dbrec.cast(),
            q.bf.reg.cast(),
            q.bf.size,
            qp.qp_num(),
            keep,
        )
    })
}

/// A CQ created with 64-byte CQEs. From here on the datapath owns its consumer index.
pub(super) fn cq_info(cq: &Arc<Cq>, keep: KeepAlive) -> Result<CqInfo, LayoutError> {
    let c = cq.dv_info().map_err(LayoutError::Call)?;
    if c.cqe_size != 64 || !c.cqe_cnt.is_power_of_two() || c.buf.is_null() || c.dbrec.is_null() {
        return Err(LayoutError::Unexpected(format!(
            "unexpected CQ layout from mlx5dv_init_obj ({} CQEs of {} bytes)",
            c.cqe_cnt, c.cqe_size
        )));
    }
    // SAFETY: the live CQ's buffer of cqe_cnt 64-byte CQEs and its doorbell record; `keep`
    // holds the CQ.
    Ok(unsafe { CqInfo::from_raw(c.buf.cast(), c.dbrec.cast(), c.cqe_cnt, c.cqe_size, c.cqn, keep) })
}

/// A receive WQ: WQEs of data segments (`stride` None), or a striding WQ's of exactly
/// `mprq::wqe_size` bytes.
pub(super) fn rwq_info(wq: &Arc<Wq>, keep: KeepAlive, stride: Option<u32>) -> Result<RwqInfo, LayoutError> {
    let r = wq.dv_info().map_err(LayoutError::Call)?;
    // Data segments of 16 bytes, rounded up to a power of two (rdma-core `mlx5_calc_rwq_size`): one
    // segment, or several for frames longer than a buffer (the queue checks it has enough); a
    // striding WQ's size is exact.
    let stride_ok = match stride {
        Some(s) => r.stride == s,
        None => r.stride.is_power_of_two() && (16..=4096).contains(&r.stride),
    };
    if !stride_ok || !r.wqe_cnt.is_power_of_two() || r.buf.is_null() || r.dbrec.is_null() {
        return Err(LayoutError::Unexpected(format!(
            "unexpected receive WQ layout from mlx5dv_init_obj (stride {}, {} WQEs)",
            r.stride, r.wqe_cnt
        )));
    }
    // SAFETY: the live WQ's buffer of wqe_cnt WQEs of `stride` bytes and its doorbell record; `keep`
    // holds the WQ.
    Ok(unsafe { RwqInfo::from_raw(r.buf.cast(), r.dbrec.cast(), r.wqe_cnt, r.stride, keep) })
}
