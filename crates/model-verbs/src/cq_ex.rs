//! The extended CQ: `ibv_create_cq_ex` and the polling ops that verbs.h's inline
//! `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call through the
//! `ibv_cq_ex` op table, as rdma-core's mlx5 provider fills it (providers/mlx5/cq.c
//! `mlx5_cq_fill_pfns`: the readers of what `wc_flags` asked for); and `ibv_query_rt_values_ex`
//! (providers/mlx5/verbs.c `mlx5_query_rt_values`: the HCA's free-running clock in
//! `raw_clock.tv_nsec`). Completion timestamps and the raw clock are one clock, the model
//! device's, in ticks of `hca_core_clock` kHz ([`mlx5_model::HCA_CORE_CLOCK_KHZ`]).

use std::ffi::c_int;

use rdma_abi::*;

use crate::datapath::{poll_one, Polled};
use crate::global::{global, Kind};
use crate::objects::{lock, Cq, CqPoll};
use crate::{guard, ptr_or_errno};

const EINVAL: i32 = libc::EINVAL;

/// `wc_flags` the model's CQs read back: the standard ones, the completion timestamp, the
/// stripped VLAN and the flow tag. Tag matching and the wall-clock timestamp, which rdma-core's
/// mlx5 also takes, are not modelled.
const MODELLED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS as u64
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64
    | IBV_WC_EX_WITH_CVLAN as u64
    | IBV_WC_EX_WITH_FLOW_TAG as u64;

/// The checks of rdma-core's mlx5 `create_cq` (providers/mlx5/verbs.c) on the attributes of
/// `ibv_create_cq_ex` and `mlx5dv_create_cq`, in its order: no CQE is EINVAL; a `comp_mask` bit
/// beyond FLAGS and PD is EINVAL, as is a flag beyond SINGLE_THREADED and IGNORE_OVERRUN; a
/// `wc_flags` bit beyond `CREATE_CQ_SUPPORTED_WC_FLAGS` is ENOTSUP (EOPNOTSUPP on Linux), as
/// are those the model does not model; a PD must be a parent domain, of which the model has
/// none: EINVAL.
pub(crate) fn check_attr(a: &ibv_cq_init_attr_ex) -> Result<(), i32> {
    if a.cqe == 0 {
        return Err(EINVAL);
    }
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return Err(EINVAL);
    }
    let flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !flags != 0 {
        return Err(EINVAL);
    }
    if a.wc_flags & !MODELLED_WC_FLAGS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        return Err(EINVAL);
    }
    Ok(())
}

/// `vctx->create_cq_ex`, which the inline `ibv_create_cq_ex` calls.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            if attr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the caller's attribute struct (non-NULL).
            let a = unsafe { &*attr };
            check_attr(a)?;
            // ib_uverbs create_cq: a vector beyond the device's completion EQs is EINVAL.
            if a.comp_vector >= crate::verbs::num_comp_vectors() as u32 {
                return Err(EINVAL);
            }
            let cqe = i32::try_from(a.cqe).map_err(|_| EINVAL)?;
            crate::verbs::create_cq(context, cqe, a.cq_context, a.channel.cast(), a.wc_flags)
                .map(|c| c.cast::<ibv_cq_ex>())
        })())
    })
}

/// Fills a new CQ's op table as `mlx5_cq_fill_pfns` does: the polling ops and the readers of
/// opcode, vendor error and wc flags always, the others when `wc_flags` asks for them (a reader
/// not asked for stays NULL, and calling it is the caller's bug, as with rdma-core).
pub(crate) fn fill_pfns(cq: &mut ibv_cq_ex, wc_flags: u64) {
    cq.start_poll = Some(start_poll);
    cq.next_poll = Some(next_poll);
    cq.end_poll = Some(end_poll);
    cq.read_opcode = Some(read_opcode);
    cq.read_vendor_err = Some(read_vendor_err);
    cq.read_wc_flags = Some(read_wc_flags);
    let has = |f: u32| wc_flags & u64::from(f) != 0;
    if has(IBV_WC_EX_WITH_BYTE_LEN) {
        cq.read_byte_len = Some(read_byte_len);
    }
    if has(IBV_WC_EX_WITH_IMM) {
        cq.read_imm_data = Some(read_imm_data);
    }
    if has(IBV_WC_EX_WITH_QP_NUM) {
        cq.read_qp_num = Some(read_qp_num);
    }
    if has(IBV_WC_EX_WITH_SRC_QP) {
        cq.read_src_qp = Some(read_src_qp);
    }
    if has(IBV_WC_EX_WITH_SLID) {
        cq.read_slid = Some(read_slid);
    }
    if has(IBV_WC_EX_WITH_SL) {
        cq.read_sl = Some(read_sl);
    }
    if has(IBV_WC_EX_WITH_DLID_PATH_BITS) {
        cq.read_dlid_path_bits = Some(read_dlid_path_bits);
    }
    if has(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) {
        cq.read_completion_ts = Some(read_completion_ts);
    }
    if has(IBV_WC_EX_WITH_CVLAN) {
        cq.read_cvlan = Some(read_cvlan);
    }
    if has(IBV_WC_EX_WITH_FLOW_TAG) {
        cq.read_flow_tag = Some(read_flow_tag);
    }
}

/// The consumer side of `cq`, without a reference to the `ibv_cq_ex` that starts the `Cq`
/// (whose `status` and `wr_id` the polling ops write through `cq`).
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe fn poll_of<'a>(cq: *mut ibv_cq_ex) -> &'a std::sync::Mutex<CqPoll> {
    // SAFETY: per the contract; `poll` is a field of the Cq that `cq` starts.
    unsafe { &*std::ptr::addr_of!((*cq.cast::<Cq>()).poll) }
}

/// Takes the next completion into the CQ's current one (`mlx5_parse_lazy_cqe`), or ENOENT.
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: per the contract.
    let mut p = lock(unsafe { poll_of(cq) });
    match poll_one(&mut p) {
        None => {
            p.cur = None;
            libc::ENOENT
        }
        Some(one) => {
            // SAFETY: the caller's live CQ; `status` and `wr_id` are what the inline readers
            // of verbs.h read, written as rdma-core's mlx5 writes them.
            unsafe {
                (*cq).status = one.wc.status;
                (*cq).wr_id = one.wc.wr_id;
            }
            p.cur = Some(one);
            0
        }
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = global() else { return EINVAL };
        if cq.is_null() || !g.reg().check(cq as usize, Kind::Cq) {
            return EINVAL;
        }
        // mlx5_start_poll: `if (unlikely(attr->comp_mask)) return EINVAL;`
        // SAFETY: the caller's attribute struct, when given.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return EINVAL;
        }
        // SAFETY: a live CQ (checked).
        unsafe { advance(cq) }
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the verbs contract: a CQ between a successful ibv_start_poll and ibv_end_poll.
    guard(EINVAL, || unsafe { advance(cq) })
}

/// `mlx5_end_poll`: the consumer index goes to the device (`update_cons_index`).
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard((), || {
        // SAFETY: as for next_poll.
        let mut p = lock(unsafe { poll_of(cq) });
        p.cur = None;
        let ci = p.ci;
        p.ring.publish_ci(ci);
    })
}

/// Reads a field of the current completion (0 when there is none: a caller's bug).
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Polled) -> T) -> T {
    // SAFETY: per the contract.
    guard(T::default(), || {
        lock(unsafe { poll_of(cq) }).cur.as_ref().map_or_else(T::default, f)
    })
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: the verbs contract: a CQ with a current completion.
    unsafe { read(cq, |p| p.wc.opcode) }
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.vendor_err) }
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.byte_len) }
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: as above. RAW_PACKET completions carry no immediate.
    unsafe { read(cq, |_| 0) }
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.qp_num) }
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.src_qp) }
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> std::ffi::c_uint {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.wc_flags) }
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| u32::from(p.wc.slid)) }
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.sl) }
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.wc.dlid_path_bits) }
}
/// `mlx5_cq_read_wc_completion_ts`: the CQE's timestamp as the device wrote it, in ticks.
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.ts) }
}
unsafe extern "C" fn read_cvlan(cq: *mut ibv_cq_ex) -> u16 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.cvlan) }
}
unsafe extern "C" fn read_flow_tag(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { read(cq, |p| p.flow_tag) }
}

/// `vctx->query_rt_values` (`mlx5_query_rt_values`): a `comp_mask` bit beyond RAW_CLOCK is
/// EINVAL; RAW_CLOCK reads the device clock into `raw_clock.tv_nsec` (`tv_sec` 0), in ticks of
/// `hca_core_clock` kHz, the clock of the CQE timestamps.
pub(crate) unsafe extern "C" fn query_rt_values(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = global() else { return EINVAL };
        if context.is_null() || !g.reg().check(context as usize, Kind::Context) || values.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's struct (non-NULL).
        let v = unsafe { &mut *values };
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return EINVAL;
        }
        let mut done = 0;
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            v.raw_clock.tv_sec = 0;
            v.raw_clock.tv_nsec = g.nic.clock_ticks() as _;
            done |= IBV_VALUES_MASK_RAW_CLOCK;
        }
        v.comp_mask = done;
        0
    })
}
