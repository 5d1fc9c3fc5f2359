//! `mlx5dv_create_wq` (rdma-core providers/mlx5/verbs.c `mlx5dv_create_wq` -> `create_wq`): a
//! receive WQ, striding when `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ` asks for it, and the striding
//! caps `mlx5dv_query_device` reports (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`).

use mlx5_prm::mprq;
use rdma_abi::*;

use crate::global::Global;
use crate::{guard, ptr_or_errno};

/// The device's `mlx5dv_striding_rq_caps`: a ConnectX-5's, or all zero on a device without
/// striding RQs (mlx5_ib `mlx5_ib_query_device` fills them only under `striding_rq`).
pub(crate) fn striding_caps(g: &Global) -> mlx5dv_striding_rq_caps {
    let c = g.nic.config().striding_rq;
    mlx5dv_striding_rq_caps {
        min_single_stride_log_num_of_bytes: c.min_log_stride_bytes,
        max_single_stride_log_num_of_bytes: c.max_log_stride_bytes,
        min_single_wqe_log_num_of_strides: c.min_log_num_strides,
        max_single_wqe_log_num_of_strides: c.max_log_num_strides,
        supported_qpts: c.supported_qpts,
    }
}

/// The largest receive WQE (`max_rq_desc_sz`, a ConnectX-5's 512 bytes): a striding WQE of
/// more data segments is EINVAL (rdma-core `mlx5_calc_rwq_size`).
const MAX_RQ_DESC_SZ: u32 = 512;

/// rdma-core `mlx5dv_create_wq`: `ibv_create_wq` with the mlx5 attributes. Unknown `comp_mask`
/// bits are EINVAL (`check_comp_mask` against `DV_CREATE_WQ_SUPPORTED_COMP_MASK`); striding
/// parameters outside the device's caps are EINVAL, as `mlx5_create_wq` checks them against
/// `striding_rq_caps` (all zero, so always, where the device has none); a striding WQE is a next
/// segment and `max_sge` data segments, rounded up to a power of two. Like the real one, it does
/// not initialise the WQ's mutex and condition variable (the static inline `ibv_create_wq`
/// does): VPP sets them by hand.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_create_wq(
    context: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
    mlx5_wq_attr: *mut mlx5dv_wq_init_attr,
) -> *mut ibv_wq {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = crate::global::global()?;
            if attr.is_null() {
                return Err(libc::EINVAL);
            }
            let mut striding = None;
            if !mlx5_wq_attr.is_null() {
                // SAFETY: the caller's struct, read only.
                let d = unsafe { &*mlx5_wq_attr };
                if d.comp_mask & !u64::from(MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ) != 0 {
                    return Err(libc::EINVAL);
                }
                if d.comp_mask & u64::from(MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ) != 0 {
                    let s = &d.striding_rq_attrs;
                    let p = mprq::Params {
                        log_stride_bytes: u8::try_from(s.single_stride_log_num_of_bytes).map_err(|_| libc::EINVAL)?,
                        log_num_strides: u8::try_from(s.single_wqe_log_num_of_strides).map_err(|_| libc::EINVAL)?,
                        two_byte_shift: s.two_byte_shift_en != 0,
                    };
                    g.nic.config().striding_rq.check(&p).map_err(|_| libc::EINVAL)?;
                    // SAFETY: the caller's attr struct, read only.
                    let max_sge = unsafe { (*attr).max_sge };
                    if mprq::wqe_size(max_sge) > MAX_RQ_DESC_SZ {
                        return Err(libc::EINVAL);
                    }
                    striding = Some(p);
                }
            }
            // SAFETY: as above.
            crate::verbs::create_wq_inner(context, unsafe { &*attr }, striding)
        })())
    })
}
