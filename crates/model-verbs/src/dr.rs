//! libmlx5's software-steering actions that a driver makes without a steering domain
//! (providers/mlx5/dr_action.c): `mlx5dv_dr_action_create_dest_ibv_qp`,
//! `mlx5dv_dr_action_create_drop` and `mlx5dv_dr_action_destroy`.
//!
//! In rdma-core these only allocate the action (`dr_action_create_generic`: type, reference
//! count 1) and remember the QP; nothing reaches the device until a rule in a domain uses them.
//! DPDK's mlx5 PMD makes one for its drop queue and for every hash RX queue whatever its flow
//! engine (drivers/net/mlx5/linux/mlx5_verbs.c `mlx5_ibv_hrxq_new`,
//! `mlx5_ibv_drop_action_create`, through `mlx5_glue_dv_create_flow_action_dest_ibv_qp`), and
//! with `dv_flow_en=0` never puts them in a rule. Domains, tables, matchers and rules are not
//! modelled (their exports stay EOPNOTSUPP).

use std::ffi::{c_int, c_void};

use rdma_abi::*;

use crate::global::{global, Kind};
use crate::{guard, ptr_or_errno};

/// What an action does (rdma-core `enum dr_action_type`, the two the model makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Qp,
    Drop,
}

/// `struct mlx5dv_dr_action` is opaque to callers: the model's is its own.
struct Action {
    #[allow(dead_code)] // what a rule would act on, once rules are modelled
    ty: Type,
    #[allow(dead_code)]
    qp: *mut ibv_qp,
}

fn create(ty: Type, qp: *mut ibv_qp) -> *mut c_void {
    let Ok(g) = global() else {
        crate::set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    let a = Box::into_raw(Box::new(Action { ty, qp })).cast::<c_void>();
    // The action holds no reference on the QP (rdma-core takes none either: the caller destroys
    // the action first, as DPDK does).
    g.reg().add(a as usize, Kind::DrAction, Vec::new());
    a
}

/// rdma-core `mlx5dv_dr_action_create_dest_ibv_qp`: a RAW_PACKET QP (EINVAL for another type,
/// as rdma-core; and for a pointer that is not a live QP of this library).
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_dr_action_create_dest_ibv_qp(ibqp: *mut ibv_qp) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = global()?;
            if ibqp.is_null() || !g.reg().check(ibqp as usize, Kind::Qp) {
                return Err(libc::EINVAL);
            }
            // SAFETY: a live QP of this library.
            if unsafe { (*ibqp).qp_type } != IBV_QPT_RAW_PACKET {
                return Err(libc::EINVAL);
            }
            Ok(create(Type::Qp, ibqp))
        })())
    })
}

/// rdma-core `mlx5dv_dr_action_create_drop`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_dr_action_create_drop() -> *mut c_void {
    guard(std::ptr::null_mut(), || create(Type::Drop, std::ptr::null_mut()))
}

/// rdma-core `mlx5dv_dr_action_destroy`: 0, or EINVAL for a pointer that is not a live action
/// of this library (rdma-core's EBUSY for an action rules still use cannot arise: no rules).
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_dr_action_destroy(action: *mut c_void) -> c_int {
    guard(libc::EINVAL, || {
        let Ok(g) = global() else { return libc::EINVAL };
        if action.is_null() || g.reg().remove(action as usize, Kind::DrAction).is_err() {
            return libc::EINVAL;
        }
        // SAFETY: made by `create`, now out of the registry.
        drop(unsafe { Box::from_raw(action.cast::<Action>()) });
        0
    })
}
