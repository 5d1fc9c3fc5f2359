//! verbs.h's header-only functions, re-implemented over the provider's op tables exactly as the
//! `static inline`s of rdma-core 44 (`libibverbs/verbs.h`) do: none of them is exported by
//! libibverbs.so.1, so a dlopen'ed binding has to dispatch by hand (rust-ibverbs'
//! ibverbs-sys/src/lib.rs and rdma-sys' src/verbs.rs do the same).
//!
//! Where verbs.h would call a NULL op and crash, these return the errno rdma-core's checked
//! paths use (EOPNOTSUPP/ENOSYS) instead.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;

use rdma_abi::*;

use super::load::Ibverbs;

/// `__VERBS_ABI_IS_EXTENDED` (verbs.h): `((void *)UINTPTR_MAX)` in `ibv_context.abi_compat`
/// marks a context embedded in a `struct verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// Sets errno, as the inline verbs do before returning NULL.
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// verbs.h `verbs_get_ctx`: the `struct verbs_context` a context is the last field of, or NULL
/// for a legacy (non-extended) provider.
///
/// # Safety
/// `ctx` must be a live context from `ibv_open_device`.
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: ctx is live (caller); reading abi_compat is always allowed.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return null_mut();
    }
    // container_of: the provider allocated a verbs_context and handed out &vctx->context.
    ctx.cast::<u8>().wrapping_sub(offset_of!(verbs_context, context)).cast()
}

/// verbs.h `verbs_get_ctx_op(ctx, op)`: the op when the provider's `verbs_context` is large
/// enough to hold it (`sz` counts back from the end of the struct, so older, shorter contexts
/// lack the newer ops at its start) and it is set; `None` otherwise.
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let vctx = verbs_get_ctx($ctx);
        if vctx.is_null()
            || (*vctx).sz < ::std::mem::size_of::<verbs_context>() - ::std::mem::offset_of!(verbs_context, $op)
        {
            None
        } else {
            (*vctx).$op
        }
    }};
}

/// verbs.h `ibv_post_send`: `qp->context->ops.post_send`.
///
/// # Safety
/// `qp` live; `wr` a valid chain whose SGEs point into registered memory.
#[inline(always)]
pub unsafe fn ibv_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: qp and its context are live (caller).
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's op, called with the arguments verbs.h passes.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_post_recv`: `qp->context->ops.post_recv`. Unused: raw-packet receive goes
/// through WQs (`ibv_post_wq_recv`); kept for a QP with its own receive queue.
///
/// # Safety
/// `qp` live; `wr` a valid chain whose SGEs point into registered memory.
#[allow(dead_code)]
#[inline(always)]
pub unsafe fn ibv_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: qp and its context are live (caller).
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's op, called with the arguments verbs.h passes.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_post_wq_recv`: the WQ's own `post_recv` pointer.
///
/// # Safety
/// `wq` live; `wr` a valid chain whose SGEs point into registered memory.
#[inline(always)]
pub unsafe fn ibv_post_wq_recv(wq: *mut ibv_wq, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: wq is live (caller).
    match unsafe { (*wq).post_recv } {
        // SAFETY: the provider's op, called with the arguments verbs.h passes.
        Some(f) => unsafe { f(wq, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_poll_cq`: `cq->context->ops.poll_cq`. Returns completions written, or < 0.
///
/// # Safety
/// `cq` live; `wc` holds at least `n` entries.
#[inline(always)]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: cq and its context are live (caller).
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's op, called with the arguments verbs.h passes.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -libc::ENOSYS,
    }
}

/// verbs.h `ibv_create_flow` (errno EOPNOTSUPP when the provider has no flow steering).
///
/// # Safety
/// `qp` live; `attr` points at an `ibv_flow_attr` followed by its specs.
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: qp and its context are live (caller).
    let op = unsafe { verbs_get_ctx_op!((*qp).context, ibv_create_flow) };
    match op {
        // SAFETY: the provider's op, called with the arguments verbs.h passes.
        Some(f) => unsafe { f(qp, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_destroy_flow`.
///
/// # Safety
/// `flow` live and not used afterwards.
pub unsafe fn ibv_destroy_flow(flow: *mut ibv_flow) -> c_int {
    // SAFETY: flow and its context are live (caller).
    let op = unsafe { verbs_get_ctx_op!((*flow).context, ibv_destroy_flow) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(flow) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_wq`, including what the inline does after the provider returns: set
/// `wq_context`, zero `events_completed`, initialise `mutex` and `cond` (ibv_destroy_wq may wait
/// on them; VPP's device.c does the same by hand after mlx5dv_create_wq).
///
/// # Safety
/// `ctx` live; `attr` valid.
pub unsafe fn ibv_create_wq(ctx: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq {
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, create_wq) };
    let Some(f) = op else {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    };
    // SAFETY: the provider's op; on success the WQ is ours to initialise as verbs.h does.
    unsafe {
        let wq = f(ctx, attr);
        if !wq.is_null() {
            init_wq(wq, attr);
        }
        wq
    }
}

/// What the inline `ibv_create_wq` does to a WQ the provider made, and `mlx5dv_create_wq` does
/// not (VPP's device.c does it by hand after `mlx5dv_create_wq`).
///
/// # Safety
/// `wq` a WQ just created from `attr`, not yet shared.
pub unsafe fn init_wq(wq: *mut ibv_wq, attr: *const ibv_wq_init_attr) {
    // SAFETY: per the contract.
    unsafe {
        (*wq).wq_context = (*attr).wq_context;
        (*wq).events_completed = 0;
        libc::pthread_mutex_init(std::ptr::addr_of_mut!((*wq).mutex).cast(), std::ptr::null());
        libc::pthread_cond_init(std::ptr::addr_of_mut!((*wq).cond).cast(), std::ptr::null());
    }
}

/// verbs.h `ibv_modify_wq`. Returns 0 or an errno.
///
/// # Safety
/// `wq` live; `attr` valid.
pub unsafe fn ibv_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    // SAFETY: wq and its context are live (caller).
    let op = unsafe { verbs_get_ctx_op!((*wq).context, modify_wq) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(wq, attr) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_destroy_wq`. Returns 0 or an errno.
///
/// # Safety
/// `wq` live and not used afterwards.
pub unsafe fn ibv_destroy_wq(wq: *mut ibv_wq) -> c_int {
    // SAFETY: wq and its context are live (caller).
    let op = unsafe { verbs_get_ctx_op!((*wq).context, destroy_wq) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(wq) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_rwq_ind_table`.
///
/// # Safety
/// `ctx` live; `attr` valid, its table holding `1 << log_ind_tbl_size` live WQs.
pub unsafe fn ibv_create_rwq_ind_table(
    ctx: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, create_rwq_ind_table) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_destroy_rwq_ind_table`.
///
/// # Safety
/// `t` live and not used afterwards.
pub unsafe fn ibv_destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    // SAFETY: t and its context are live (caller).
    let op = unsafe { verbs_get_ctx_op!((*t).context, destroy_rwq_ind_table) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(t) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_qp_ex`: a plain `ibv_create_qp` when only the PD is given, the context op
/// otherwise.
///
/// # Safety
/// `ctx` live; `attr` valid.
pub unsafe fn ibv_create_qp_ex(ibv: &Ibverbs, ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    // SAFETY: attr is valid (caller).
    if unsafe { (*attr).comp_mask } == IBV_QP_INIT_ATTR_PD {
        // SAFETY: ibv_qp_init_attr is the prefix of ibv_qp_init_attr_ex, as verbs.h's cast assumes.
        return unsafe { (ibv.create_qp)((*attr).pd, attr.cast()) };
    }
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, create_qp_ex) };
    match op {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_query_device_ex`: the context op, or the legacy `ibv_query_device` into
/// `orig_attr` (rest zeroed) when the provider lacks it. Returns 0 or an errno.
///
/// # Safety
/// `ctx` live.
pub unsafe fn ibv_query_device_ex(ibv: &Ibverbs, ctx: *mut ibv_context, attr: &mut ibv_device_attr_ex) -> c_int {
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, query_device_ex) };
    if let Some(f) = op {
        // SAFETY: the provider's op; attr is a whole ibv_device_attr_ex of the size we pass.
        let ret = unsafe { f(ctx, std::ptr::null(), attr, size_of::<ibv_device_attr_ex>()) };
        if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
            return ret;
        }
    }
    *attr = ibv_device_attr_ex::default();
    // SAFETY: exported function, valid arguments.
    unsafe { (ibv.query_device)(ctx, &mut attr.orig_attr) }
}

/// verbs.h `ibv_query_rt_values_ex`: the context op, ENOSYS without it (rdma-core's
/// `IBV_VALUES_MASK_RAW_CLOCK` leaves the device clock's raw ticks in `raw_clock`; mlx5 puts
/// them all in `tv_nsec`, providers/mlx5/verbs.c `mlx5_query_rt_values`). Returns 0 or an errno.
///
/// # Safety
/// `ctx` live.
pub unsafe fn ibv_query_rt_values_ex(ctx: *mut ibv_context, values: &mut ibv_values_ex) -> c_int {
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, query_rt_values) };
    match op {
        // SAFETY: the provider's op on a whole ibv_values_ex.
        Some(f) => unsafe { f(ctx, values) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `___ibv_query_port` (what the `ibv_query_port` macro expands to): the context's
/// `query_port` op with the full struct size, else the compat export on a zeroed struct.
///
/// # Safety
/// `ctx` live.
pub unsafe fn ibv_query_port(ibv: &Ibverbs, ctx: *mut ibv_context, port: u8, attr: &mut ibv_port_attr) -> c_int {
    // SAFETY: ctx is live (caller).
    let op = unsafe { verbs_get_ctx_op!(ctx, query_port) };
    match op {
        // SAFETY: the provider's op with the struct size it expects.
        Some(f) => unsafe { f(ctx, port, attr, size_of::<ibv_port_attr>()) },
        None => {
            *attr = ibv_port_attr::default();
            // SAFETY: the compat entry fills a prefix of ibv_port_attr.
            unsafe { (ibv.query_port_compat)(ctx, port, attr) }
        }
    }
}
