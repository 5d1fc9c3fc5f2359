//! DevX objects a driver makes beside verbs-made queues: transport domains and TISes
//! (`mlx5dv_devx_obj_create` with ALLOC_TRANSPORT_DOMAIN, CREATE_TIS), UAR pages
//! (`mlx5dv_devx_alloc_uar`), and the one query on a verbs QP that DPDK's mlx5 PMD asks with
//! DevX (`mlx5dv_devx_qp_query` with QUERY_TIS, for the TIS's transport domain:
//! drivers/common/mlx5/mlx5_devx_cmds.c `mlx5_devx_cmd_qp_query_tis_td`).
//!
//! Mailboxes as mlx5_prm.h lays them out (`alloc_transport_domain_out.transport_domain` and
//! `create_tis_out.tisn` at bit 0x48, 24 bits; `query_tis_in.tisn` at bit 0x48;
//! `query_tis_out.tis_context` at bit 0x80, whose `transport_domain` is at its bit 0x128). A
//! command the model does not have fails with the PRM's bad-opcode status (0x2) in the answer and
//! EIO; a command for another object than the one named, bad parameter (0x3). The objects are
//! the device's bookkeeping only: the model's queues are made through verbs, and a DevX TIS or
//! transport domain changes nothing they do.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use rdma_abi::*;

use crate::devx_caps::set;
use crate::global::{global, Kind};
use crate::objects::{Context, Qp, QpKind};
use crate::{guard, set_errno};

const ALLOC_TRANSPORT_DOMAIN: u16 = 0x816;
const CREATE_TIS: u16 = 0x912;
const QUERY_TIS: u16 = 0x915;
const STATUS_BAD_OP: u8 = 0x2;
const STATUS_BAD_PARAM: u8 = 0x3;

/// A DevX object (`struct mlx5dv_devx_obj` is opaque to callers).
struct Obj {
    #[allow(dead_code)] // which command made it, for a reader of the bookkeeping
    opcode: u16,
    #[allow(dead_code)]
    id: u32,
}

/// A UAR page handed out: the public struct first (callers read its fields).
#[repr(C)]
struct Uar {
    uar: mlx5dv_devx_uar,
    _page: mlx5_model::UarHandle,
}

/// Transport domains made through DevX, numbered apart from the contexts' own (1, 2, ...).
static NEXT_TD: AtomicU32 = AtomicU32::new(0x8000);
static NEXT_TIS: AtomicU32 = AtomicU32::new(0x10_0000);

fn opcode(inp: &[u8]) -> u16 {
    u16::from_be_bytes([inp[0], inp[1]])
}

fn field24(b: &[u8], byte: usize) -> u32 {
    u32::from_be_bytes([0, b[byte], b[byte + 1], b[byte + 2]])
}

/// The caller's mailboxes, checked; None (errno set) when they cannot hold a command and its
/// answer header.
///
/// # Safety
/// `inp`/`out` are the caller's buffers of `inlen`/`outlen` bytes when non-NULL.
unsafe fn mailboxes<'a>(
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> Option<(&'a [u8], &'a mut [u8])> {
    if inp.is_null() || out.is_null() || inlen < 16 || outlen < 16 {
        set_errno(libc::EINVAL);
        return None;
    }
    // SAFETY: the caller's buffers of those lengths (checked non-NULL).
    Some(unsafe {
        (
            std::slice::from_raw_parts(inp.cast::<u8>(), inlen),
            std::slice::from_raw_parts_mut(out.cast::<u8>(), outlen),
        )
    })
}

/// rdma-core `mlx5dv_devx_obj_create` on a DevX context: ALLOC_TRANSPORT_DOMAIN and
/// CREATE_TIS.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_obj_create(
    ctx: *mut ibv_context,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let Ok(g) = global() else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        if ctx.is_null() || !g.reg().check(ctx as usize, Kind::Context) {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        if !crate::devx::is_devx(ctx) {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's mailboxes.
        let Some((inp, out)) = (unsafe { mailboxes(inp, inlen, out, outlen) }) else {
            return std::ptr::null_mut();
        };
        out[..16].fill(0);
        let op = opcode(inp);
        let id = match op {
            ALLOC_TRANSPORT_DOMAIN => NEXT_TD.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff,
            CREATE_TIS => NEXT_TIS.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff,
            _ => {
                out[0] = STATUS_BAD_OP;
                set_errno(libc::EIO);
                return std::ptr::null_mut();
            }
        };
        // transport_domain / tisn: bit 0x48, 24 bits, of the answer.
        set(out, 0x48, 24, id);
        let o = Box::into_raw(Box::new(Obj { opcode: op, id })).cast::<c_void>();
        g.reg().add(o as usize, Kind::DevxObj, vec![ctx as usize]);
        o
    })
}

/// rdma-core `mlx5dv_devx_obj_destroy`: 0, or EINVAL for what is not a live DevX object.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_obj_destroy(obj: *mut c_void) -> c_int {
    guard(libc::EINVAL, || {
        let Ok(g) = global() else { return libc::EINVAL };
        if obj.is_null() || g.reg().remove(obj as usize, Kind::DevxObj).is_err() {
            return libc::EINVAL;
        }
        // SAFETY: made by mlx5dv_devx_obj_create, now out of the registry.
        drop(unsafe { Box::from_raw(obj.cast::<Obj>()) });
        0
    })
}

/// rdma-core `mlx5dv_devx_alloc_uar`: a UAR page of the device (BlueFlame or non-cached alike:
/// the model's pages take either), its register at `MLX5_BF_OFFSET`, its mmap offset in the
/// context's `cmd_fd`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_alloc_uar(ctx: *mut ibv_context, flags: u32) -> *mut mlx5dv_devx_uar {
    guard(std::ptr::null_mut(), || {
        let Ok(g) = global() else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        if ctx.is_null() || !g.reg().check(ctx as usize, Kind::Context) {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        if !crate::devx::is_devx(ctx) {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        // `MLX5DV_UAR_ALLOC_TYPE_BF` (0) or `_NC` (1); any other bit is EOPNOTSUPP, as
        // `_mlx5dv_devx_alloc_uar`'s `check_comp_mask` answers.
        if flags & !1 != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let page = match g.nic.alloc_uar() {
            Ok(p) => p,
            Err(_) => {
                set_errno(libc::ENOMEM);
                return std::ptr::null_mut();
            }
        };
        let uar = mlx5dv_devx_uar {
            reg_addr: page.base().wrapping_add(mlx5_prm::BF_OFFSET).cast(),
            base_addr: page.base().cast(),
            page_id: page.index(),
            mmap_off: (page.index() as usize * mlx5_model::UAR_PAGE) as libc::off_t,
            comp_mask: 0,
        };
        let u = Box::into_raw(Box::new(Uar { uar, _page: page }));
        g.reg().add(u as usize, Kind::DevxObj, vec![ctx as usize]);
        u.cast::<mlx5dv_devx_uar>()
    })
}

/// rdma-core `mlx5dv_devx_free_uar`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_free_uar(uar: *mut mlx5dv_devx_uar) {
    guard((), || {
        let Ok(g) = global() else { return };
        if uar.is_null() || g.reg().remove(uar as usize, Kind::DevxObj).is_err() {
            return;
        }
        // SAFETY: made by mlx5dv_devx_alloc_uar, now out of the registry.
        drop(unsafe { Box::from_raw(uar.cast::<Uar>()) });
    })
}

/// The TIS number of a raw QP's send queue, as `mlx5dv_init_obj` reports it with
/// `MLX5DV_QP_MASK_RAW_QP_HANDLES`: the model numbers it as the QP (mlx5_ib makes one TIS per
/// raw QP, `create_raw_packet_qp_tis`, in the context's transport domain).
pub(crate) fn tisn_of(q: &Qp) -> u32 {
    q.qp.qp_num
}

/// rdma-core `mlx5dv_devx_qp_query`: QUERY_TIS for the QP's own TIS, whose context names the
/// transport domain of the QP's context.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_qp_query(
    qp: *mut ibv_qp,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    guard(libc::EINVAL, || {
        let Ok(g) = global() else { return libc::ENODEV };
        if qp.is_null() || !g.reg().check(qp as usize, Kind::Qp) {
            return libc::EINVAL;
        }
        // SAFETY: a live QP of this library.
        let q = unsafe { &*qp.cast::<Qp>() };
        if !crate::devx::is_devx(q.qp.context) {
            return libc::EOPNOTSUPP;
        }
        // SAFETY: the caller's mailboxes.
        let Some((inp, out)) = (unsafe { mailboxes(inp, inlen, out, outlen) }) else {
            return libc::EINVAL;
        };
        out.fill(0);
        if opcode(inp) != QUERY_TIS {
            out[0] = STATUS_BAD_OP;
            return libc::EIO;
        }
        let has_sq = matches!(q.kind, QpKind::Raw { .. });
        if !has_sq || inlen < 12 || field24(inp, 9) != tisn_of(q) || outlen < (0x80 + 0x128 + 24) / 8 {
            out[0] = STATUS_BAD_PARAM;
            return libc::EIO;
        }
        // SAFETY: a live QP's context is live.
        let td = unsafe { (*Context::from_ctx(q.qp.context)).td };
        set(out, 0x80 + 0x128, 24, td & 0x00ff_ffff);
        0
    })
}
