//! The libibverbs entry points (exported symbols) and the op-table functions the header-only
//! verbs of verbs.h call (`verbs_get_ctx_op`). Signatures and errno conventions are rdma-core
//! 44's: pointer-returning verbs return NULL with errno set; destroy/modify/query verbs return
//! the errno value.

use std::ffi::{c_char, c_int, c_void};
use std::mem::size_of;
use std::sync::Mutex;

use mlx5_model::RqState;
use mlx5_model::SpecialFlow;
use mlx5_model::{TIR_SELF_LB_MC, TIR_SELF_LB_UC};

use crate::ring::{CompRing, RecvRing, SendRing};
use rawpkt_sys::region::Region;
use rdma_abi::*;

use crate::global::{global, Global, Kind, DEVS};
use crate::objects::*;
use crate::{guard, int_errno, ptr_or_errno, set_errno};

const EINVAL: i32 = libc::EINVAL;

/// Device limits (a ConnectX-5 as `ibv_devinfo -v` shows one, within what the model holds).
pub(crate) const MAX_QP_WR: u32 = 32768;
pub(crate) const MAX_SGE: u32 = 30;
pub(crate) const MAX_CQE: u32 = (1 << 22) - 1;
pub(crate) const LOG_MAX_RQT: u32 = 11;
/// `sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_eth_seg)`: rdma-core
/// `sq_overhead` for IBV_QPT_RAW_PACKET (providers/mlx5/verbs.c).
const RAW_SQ_OVERHEAD: u32 = 16 + 32;
/// `sizeof(struct mlx5_wqe_inl_data_seg)`.
const INL_SEG: u32 = 4;

fn g() -> Result<&'static Global, i32> {
    global()
}

/// Checks that `p` is a live object of `kind` handed out by this library.
fn live(g: &Global, p: *const c_void, kind: Kind) -> Result<(), i32> {
    if p.is_null() || !g.reg().check(p as usize, kind) {
        return Err(EINVAL);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Devices

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        let g = match g() {
            Ok(g) => g,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        // SAFETY: calloc of n+1 pointers; the array is NULL-terminated like rdma-core's and
        // freed by ibv_free_device_list with free().
        let list = unsafe { libc::calloc(DEVS.len() + 1, size_of::<*mut ibv_device>()) }.cast::<*mut ibv_device>();
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return list;
        }
        for i in 0..DEVS.len() {
            // SAFETY: i < DEVS.len() + 1 entries allocated above.
            unsafe { *list.add(i) = g.device(i) };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a valid int or NULL (checked).
            unsafe { *num_devices = DEVS.len() as c_int };
        }
        list
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL, which free takes).
        unsafe { libc::free(list.cast()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || match g() {
        Ok(g) if g.port_of(device).is_some() => {
            // SAFETY: a device this library leaked; `name` is NUL-terminated.
            unsafe { (*device).name.as_ptr() }
        }
        _ => {
            set_errno(EINVAL);
            std::ptr::null()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || ptr_or_errno(open_device(device)))
}

fn open_device(device: *mut ibv_device) -> Result<*mut ibv_context, i32> {
    let g = g()?;
    let port = g.port_of(device).ok_or(EINVAL)?;
    let cq_uar = Region::small_pages(4096).map_err(|_| libc::ENOMEM)?;
    // SAFETY: verbs_context is C data whose all-zero value is valid (NULL pointers and
    // function pointers, zero integers; a zeroed pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER).
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    // libibverbs `verbs_init_context`: the extended ABI marker and the struct's size, which
    // `verbs_get_ctx_op` compares against each op's offset.
    vctx.sz = size_of::<verbs_context>();
    vctx.context.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED, (void *)-1
    vctx.context.device = device;
    vctx.context.num_comp_vectors = num_comp_vectors();
    // SAFETY: plain fd-creating syscalls; the fds belong to the context and are closed with it.
    unsafe {
        // The uverbs fd: mmap on it at a QP's `uar_mmap_offset` maps that QP's doorbell page
        // (mlx5_ib `mlx5_ib_mmap`), so it is the model's UAR file (`Nic::uar_fd`).
        vctx.context.cmd_fd = libc::fcntl(g.nic.uar_fd(), libc::F_DUPFD_CLOEXEC, 0);
        // The async event fd: never readable, as a healthy device raises no events.
        vctx.context.async_fd = libc::eventfd(0, libc::EFD_CLOEXEC);
    }
    let ops = &mut vctx.context.ops;
    ops.post_send = Some(crate::datapath::post_send);
    ops.post_recv = Some(crate::datapath::post_recv);
    ops.poll_cq = Some(crate::datapath::poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    vctx.query_port = Some(query_port_ex);
    vctx.query_device_ex = Some(query_device_ex);
    vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
    vctx.query_rt_values = Some(crate::cq_ex::query_rt_values);
    vctx.create_qp_ex = Some(create_qp_ex);
    vctx.create_wq = Some(create_wq);
    vctx.modify_wq = Some(modify_wq);
    vctx.destroy_wq = Some(destroy_wq);
    vctx.create_rwq_ind_table = Some(create_rwq_ind_table);
    vctx.destroy_rwq_ind_table = Some(destroy_rwq_ind_table);
    vctx.ibv_create_flow = Some(create_flow);
    vctx.ibv_destroy_flow = Some(destroy_flow);
    let cq_uar_reg = cq_uar.base().cast();
    static NEXT_TD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let td = NEXT_TD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let c = Box::into_raw(Box::new(Context {
        vctx,
        port,
        cq_uar,
        cq_uar_reg,
        td,
    }));
    // mlx5_ib_alloc_ucontext -> mlx5_ib_alloc_transport_domain: one more user domain.
    crate::loopback::enable(g, port, true, false);
    // SAFETY: just allocated; the context is the last field of the verbs_context at its start.
    let ctx = unsafe { std::ptr::addr_of_mut!((*c).vctx.context) };
    g.reg().add(ctx as usize, Kind::Context, Vec::new());
    Ok(ctx)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = g() else { return EINVAL };
        if live(g, context.cast(), Kind::Context).is_err() {
            return EINVAL;
        }
        let mut reg = g.reg();
        let orphans = reg.users(context as usize) > 0;
        reg.force_remove(context as usize);
        drop(reg);
        crate::devx::forget(context as usize);
        let c = Context::from_ctx(context);
        // SAFETY: a live context (checked above).
        crate::loopback::disable(g, unsafe { (*c).port }, true, false);
        // SAFETY: a live context from open_device; its fds are its own.
        unsafe {
            libc::close((*c).vctx.context.cmd_fd);
            libc::close((*c).vctx.context.async_fd);
        }
        if !orphans {
            // SAFETY: allocated by open_device with Box::into_raw; no object refers to it any
            // more (its user count is 0) and it left the registry above.
            drop(unsafe { Box::from_raw(c) });
        }
        // With objects still open (a leak the live count shows) rdma-core frees the context
        // anyway; the model keeps the memory so those objects' `context` stays valid.
        0
    })
}

// ---------------------------------------------------------------------------------------------
// Queries

fn device_attr(port: usize) -> ibv_device_attr {
    use crate::device::*;
    // SAFETY: C data, all-zero valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    let id = global().map_or(mlx5_model::profile::Identity::CONNECTX5, |g| g.cfg.identity);
    crate::global::fill(&mut a.fw_ver, id.fw_ver);
    a.node_guid = node_guid(port).to_be();
    a.sys_image_guid = sys_image_guid(port).to_be();
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_ffff_ffff_f000;
    a.vendor_id = 0x02c9;
    a.vendor_part_id = id.vendor_part_id;
    a.hw_ver = 0;
    a.max_qp = 1 << 18;
    a.max_qp_wr = MAX_QP_WR as c_int;
    a.device_cap_flags = IBV_DEVICE_RAW_MULTI
        | IBV_DEVICE_RAW_IP_CSUM
        | IBV_DEVICE_MANAGED_FLOW_STEERING
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = 1 << 24;
    a.max_cqe = MAX_CQE as c_int;
    a.max_mr = 1 << 24;
    a.max_pd = 1 << 24;
    a.atomic_cap = IBV_ATOMIC_NONE;
    a.max_pkeys = 128;
    a.phys_port_cnt = 1;
    a
}

/// `ibv_context.num_comp_vectors`: mlx5_core creates one completion EQ per online CPU (capped
/// by the device's MSI-X vectors, 63 on the hosts of openucx/ucx#10430), and mlx5_ib reports
/// their number.
pub(crate) fn num_comp_vectors() -> c_int {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.clamp(1, 63) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(context: *mut ibv_context, device_attr_out: *mut ibv_device_attr) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = g() else { return EINVAL };
        if live(g, context.cast(), Kind::Context).is_err() || device_attr_out.is_null() {
            return EINVAL;
        }
        // SAFETY: a live context; the caller's attr struct is valid for writing (non-NULL).
        unsafe { *device_attr_out = device_attr((*Context::from_ctx(context)).port) };
        0
    })
}

unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = g() else { return EINVAL };
        if live(g, context.cast(), Kind::Context).is_err() || attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's input, when given, is a valid struct (verbs.h checks comp_mask
        // itself before calling; so do we, as the kernel would).
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return EINVAL;
        }
        // rdma-core `ibv_cmd_query_device_any`: at least the legacy struct must fit.
        if attr_size < size_of::<ibv_device_attr>() {
            return EINVAL;
        }
        // SAFETY: a live context.
        let port = unsafe { (*Context::from_ctx(context)).port };
        // SAFETY: C data, all-zero valid.
        let mut a: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        a.orig_attr = device_attr(port);
        a.rss_caps.supported_qpts = 1 << IBV_QPT_RAW_PACKET;
        a.rss_caps.max_rwq_indirection_tables = 1 << 16;
        a.rss_caps.max_rwq_indirection_table_size = 1 << LOG_MAX_RQT;
        a.rss_caps.rx_hash_fields_mask = 0xff;
        a.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ as u8;
        a.max_wq_type_rq = 1 << 24;
        // What mlx5_ib_query_device reports with `eth_net_offloads`: checksums, `vlan_cap`,
        // `scatter_fcs` (no delay drop: the model does not delay drops); `end_pad` as a
        // device capability.
        a.raw_packet_caps =
            IBV_RAW_PACKET_CAP_IP_CSUM | IBV_RAW_PACKET_CAP_CVLAN_STRIPPING | IBV_RAW_PACKET_CAP_SCATTER_FCS;
        a.device_cap_flags_ex =
            u64::from(a.orig_attr.device_cap_flags) | IBV_DEVICE_RAW_SCATTER_FCS | IBV_DEVICE_PCI_WRITE_END_PADDING;
        a.phys_port_cnt_ex = 1;
        a.completion_timestamp_mask = crate::device::TIMESTAMP_MASK;
        a.hca_core_clock = g.cfg.knobs.clock_khz();
        a.packet_pacing_caps.qp_rate_limit_min = crate::device::RATE_LIMIT_MIN_KBPS;
        a.packet_pacing_caps.qp_rate_limit_max = crate::device::RATE_LIMIT_MAX_KBPS;
        a.packet_pacing_caps.supported_qpts = 1 << IBV_QPT_RAW_PACKET;
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct holds attr_size bytes; we write at most that many, from
        // our own fully initialised copy (an older caller gets the prefix it knows).
        unsafe { std::ptr::copy_nonoverlapping((&a as *const ibv_device_attr_ex).cast::<u8>(), attr.cast::<u8>(), n) };
        0
    })
}

fn port_attr() -> ibv_port_attr {
    // SAFETY: C data, all-zero valid.
    let mut p: ibv_port_attr = unsafe { std::mem::zeroed() };
    p.state = IBV_PORT_ACTIVE;
    p.max_mtu = IBV_MTU_4096;
    // mlx5_ib `mlx5_query_port_roce`: active_mtu = min(max_mtu, iboe_get_mtu(netdev mtu)), and
    // a 1500-byte netdev gives IB_MTU_1024 (the contract's "active_mtu 4096" is not what the
    // kernel reports for MTU 1500).
    p.active_mtu = IBV_MTU_1024;
    p.gid_tbl_len = crate::device::GID_TABLE_LEN as c_int;
    p.port_cap_flags = 0x0401_0000; // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS
    p.max_msg_sz = 1 << 30;
    p.pkey_tbl_len = 1;
    p.active_width = 2; // IBV_WIDTH_4X
    p.active_speed = 32; // IBV_SPEED_EDR: 4X EDR = 100 Gb/s
    p.phys_state = 5; // LinkUp
    p.link_layer = IBV_LINK_LAYER_ETHERNET as u8;
    p
}

unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = g() else { return EINVAL };
        if live(g, context.cast(), Kind::Context).is_err() || port_attr_out.is_null() || port_num != 1 {
            return EINVAL;
        }
        let a = port_attr();
        let n = port_attr_len.min(size_of::<ibv_port_attr>());
        // SAFETY: the caller's struct holds port_attr_len bytes; at most n are written.
        unsafe {
            std::ptr::copy_nonoverlapping((&a as *const ibv_port_attr).cast::<u8>(), port_attr_out.cast::<u8>(), n)
        };
        0
    })
}

/// The compat entry point (`ibv_query_port@@IBVERBS_1.1`): the legacy `struct
/// _compat_ibv_port_attr` ends before `port_cap_flags2` (libibverbs/verbs.c).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut c_void) -> c_int {
    // SAFETY: forwarded with the legacy size, which the caller's struct holds.
    unsafe {
        query_port_ex(
            context,
            port_num,
            port_attr.cast(),
            std::mem::offset_of!(ibv_port_attr, port_cap_flags2),
        )
    }
}

/// `ibv_query_gid`: the GID at `index` (zeros for an empty entry, as sysfs reads them), or -1.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        let Ok(g) = g() else { return -1 };
        let table = 0..crate::device::GID_TABLE_LEN as c_int;
        if live(g, context.cast(), Kind::Context).is_err() || gid.is_null() || port_num != 1 || !table.contains(&index)
        {
            return -1;
        }
        // SAFETY: a live context.
        let port = unsafe { (*Context::from_ctx(context)).port };
        let raw = crate::device::gid(port, index as u32).map_or([0; 16], |(raw, _)| raw);
        // SAFETY: union ibv_gid is 16 bytes; the caller's is valid for writing.
        unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), gid.cast::<u8>(), 16) };
        0
    })
}

// ---------------------------------------------------------------------------------------------
// PD and MR

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = g()?;
            live(g, context.cast(), Kind::Context)?;
            // SAFETY: a live context.
            let port = unsafe { (*Context::from_ctx(context)).port };
            // PD numbers are the device's 24-bit object numbers (mlx5_ifc.h `pd[0x18]`),
            // never 0 here, as the kernel's own PD takes the first one.
            static NEXT_PDN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
            let pdn = NEXT_PDN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 0x00ff_ffff + 1;
            let pd = Box::into_raw(Box::new(Pd {
                pd: ibv_pd { context, handle: 0 },
                port,
                pdn,
            }));
            g.reg().add(pd as usize, Kind::Pd, vec![context as usize]);
            Ok(pd.cast::<ibv_pd>())
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            // The kernel refuses a PD with MRs or queues on it: EBUSY.
            g.reg().remove(pd as usize, Kind::Pd)?;
            // SAFETY: allocated by ibv_alloc_pd, now out of the registry with no users.
            drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
            Ok(())
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
    // SAFETY: forwarded; iova = addr as for a plain ibv_reg_mr.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as u32) }
}

/// Exported because verbs.h's `ibv_reg_mr` macro references it whenever the access flags are not
/// a compile-time constant, so C programs need it to link.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = g()?;
            live(g, pd.cast(), Kind::Pd)?;
            // ib_check_mr_access (include/rdma/ib_verbs.h): remote write/atomic need local write.
            const LOCAL_WRITE: u32 = 1;
            const REMOTE_WRITE: u32 = 2;
            const REMOTE_ATOMIC: u32 = 8;
            if access & (REMOTE_WRITE | REMOTE_ATOMIC) != 0 && access & LOCAL_WRITE == 0 {
                return Err(EINVAL);
            }
            if addr.is_null() || length == 0 || iova != addr as u64 {
                // Zero-based or offset iovas would need address translation the model has not.
                return Err(EINVAL);
            }
            // What the kernel pins: an end past the address space is EINVAL, a page no
            // readable mapping (writable, for a writable access) covers EFAULT.
            const MW_BIND: u32 = 16;
            let writable = access & (LOCAL_WRITE | REMOTE_WRITE | REMOTE_ATOMIC | MW_BIND) != 0;
            crate::pin::check(addr as u64, length as u64, writable)?;
            // SAFETY: the range is mapped now (checked above), and the registrant keeps it
            // mapped until ibv_dereg_mr, which is ibv_reg_mr's contract (real HCAs pin the pages).
            let lkey = unsafe { g.nic.register_mr_raw(addr as u64, length as u64) };
            // SAFETY: a live PD.
            let context = unsafe { (*pd).context };
            let mr = Box::into_raw(Box::new(Mr {
                mr: ibv_mr {
                    context,
                    pd,
                    addr,
                    length,
                    handle: lkey,
                    lkey,
                    rkey: lkey,
                },
            }));
            g.reg().add(mr as usize, Kind::Mr, vec![pd as usize]);
            Ok(mr.cast::<ibv_mr>())
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            g.reg().remove(mr as usize, Kind::Mr)?;
            // SAFETY: allocated by ibv_reg_mr, out of the registry now.
            let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
            g.nic.deregister_mr(m.mr.lkey);
            Ok(())
        })())
    })
}

// ---------------------------------------------------------------------------------------------
// CQ

/// Creates a CQ of at least `cqe` entries (rdma-core `mlx5_create_cq`: 0 or more than the
/// device's max_cqe is EINVAL; the ring has `roundup_pow2(cqe + 1)` entries and `ibv_cq.cqe`
/// reports one less), whose `ibv_cq_ex` ops read what `wc_flags` asks for.
pub(crate) fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    wc_flags: u64,
) -> Result<*mut Cq, i32> {
    create_cq_comp(context, cqe, cq_context, channel, wc_flags, None)
}

/// [`create_cq`] for a CQ whose receive completions the device compresses into mini-CQEs of
/// format `comp` (`mlx5dv_create_cq` with `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`).
pub(crate) fn create_cq_comp(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    wc_flags: u64,
    comp: Option<mlx5_prm::MiniFormat>,
) -> Result<*mut Cq, i32> {
    let g = g()?;
    live(g, context.cast(), Kind::Context)?;
    let channel = crate::events::channel_for(context, channel)?;
    if cqe <= 0 || cqe as u32 > MAX_CQE {
        return Err(EINVAL);
    }
    // libmlx5's ring: roundup_pow2(cqe + 1) entries of 64 bytes (`create_cq`, `align_queue_size`).
    crate::alloc::cq_buffer((cqe as usize + 1).next_power_of_two() * 64)?;
    let info = g.nic.alloc_cq_with(cqe as u32, comp).map_err(|_| libc::ENOMEM)?;
    // SAFETY: the model's CQ, which we own the consumer side of until the CQ is destroyed.
    let ring = unsafe { CompRing::new(info.raw) }
        .map_err(|_| libc::ENOMEM)?
        .with_compression(comp);
    // SAFETY: a live context.
    let port = unsafe { (*Context::from_ctx(context)).port };
    // SAFETY: C data, all-zero valid (zeroed mutex/cond are the static initialisers in glibc).
    let mut cq: ibv_cq_ex = unsafe { std::mem::zeroed() };
    cq.context = context;
    cq.channel = channel.cast();
    cq.cq_context = cq_context;
    cq.cqe = info.raw.cnt as c_int - 1;
    cq.handle = info.raw.num;
    crate::cq_ex::fill_pfns(&mut cq, wc_flags);
    let c = Box::into_raw(Box::new(Cq {
        cq,
        port,
        info,
        poll: Mutex::new(CqPoll {
            ring,
            ci: 0,
            sqs: Default::default(),
            wqs: Default::default(),
            cur: None,
        }),
    }));
    let mut holds = vec![context as usize];
    if !channel.is_null() {
        holds.push(channel as usize);
        // SAFETY: a live channel (checked by channel_for); libibverbs counts its CQs here.
        unsafe { (*channel).ch.refcnt += 1 };
    }
    g.reg().add(c as usize, Kind::Cq, holds);
    Ok(c)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        // ib_uverbs create_cq: a vector beyond the device's completion EQs is EINVAL.
        if !(0..num_comp_vectors()).contains(&comp_vector) {
            set_errno(EINVAL);
            return std::ptr::null_mut();
        }
        // mlx5_create_cq: the standard wc_flags.
        let standard = u64::from(IBV_WC_STANDARD_FLAGS);
        ptr_or_errno(create_cq(context, cqe, cq_context, channel, standard).map(|c| c.cast::<ibv_cq>()))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            // A CQ with QPs or WQs completing to it: EBUSY (the kernel's usecnt).
            g.reg().remove(cq as usize, Kind::Cq)?;
            crate::events::disarm(cq.cast::<Cq>());
            // SAFETY: allocated by create_cq, out of the registry; dropping its QueueMem and
            // ring destroys the model's CQ.
            let c = unsafe { Box::from_raw(cq.cast::<Cq>()) };
            if !c.cq.channel.is_null() {
                // SAFETY: the channel outlived the CQ (it was held until the removal above).
                unsafe { (*c.cq.channel).refcnt -= 1 };
            }
            drop(c);
            Ok(())
        })())
    })
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    guard(EINVAL, || {
        let Ok(g) = g() else { return EINVAL };
        if live(g, cq.cast(), Kind::Cq).is_err() {
            return EINVAL;
        }
        // SAFETY: a live CQ.
        crate::events::arm(unsafe { &*cq.cast::<Cq>() });
        0
    })
}

// ---------------------------------------------------------------------------------------------
// QP

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        if pd.is_null() || attr.is_null() {
            set_errno(EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: ibv_qp_init_attr is the prefix of ibv_qp_init_attr_ex; we copy it into a
        // zeroed _ex and write the updated caps back.
        unsafe {
            let mut ex: ibv_qp_init_attr_ex = std::mem::zeroed();
            std::ptr::copy_nonoverlapping(
                attr.cast::<u8>(),
                (&mut ex as *mut ibv_qp_init_attr_ex).cast::<u8>(),
                size_of::<ibv_qp_init_attr>(),
            );
            ex.comp_mask = IBV_QP_INIT_ATTR_PD;
            ex.pd = pd;
            let qp = ptr_or_errno(create_qp((*pd).context, &mut ex));
            (*attr).cap = ex.cap;
            qp
        }
    })
}

unsafe extern "C" fn create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attr struct, valid for reading and writing (caps are returned).
        ptr_or_errno(create_qp(context, unsafe { &mut *attr }))
    })
}

/// `mlx5dv_create_qp` (providers/mlx5/verbs.c `create_qp` with vendor attributes) for what the
/// model has: RAW_PACKET QPs, with `MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC`/`_MC`, which
/// libmlx5 passes on as `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC`/`_MC` (EOPNOTSUPP on another QP
/// type) and mlx5_ib turns into the QP's TIR's `self_lb_block` bits, counting the QP for the
/// port's local loopback (`create_raw_packet_qp_tir`, `create_rss_raw_qp_tir`: a QP without a
/// TIR, send-only, counts for nothing). Other vendor attributes (DC, send ops, streams) and
/// flags (tunnel offloads, scatter to CQE, ...) are not modelled: EOPNOTSUPP, as libmlx5
/// answers what it does not know.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_create_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    mlx5_attr: *mut rdma_abi::mlx5dv_qp_init_attr,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            if attr.is_null() {
                return Err(EINVAL);
            }
            let mut flags = 0;
            if !mlx5_attr.is_null() {
                // SAFETY: the caller's vendor attributes (non-NULL).
                let m = unsafe { &*mlx5_attr };
                if m.comp_mask & !u64::from(rdma_abi::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) != 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                if m.comp_mask != 0 {
                    flags = m.create_flags;
                }
            }
            let uc = rdma_abi::MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC;
            let mc = rdma_abi::MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC;
            if flags & !(uc | mc) != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: the caller's attr struct, valid for reading and writing (caps come back).
            let a = unsafe { &mut *attr };
            if flags != 0 && a.qp_type != IBV_QPT_RAW_PACKET {
                return Err(libc::EOPNOTSUPP);
            }
            let qp = create_qp(context, a)?;
            let self_lb =
                if flags & uc != 0 { TIR_SELF_LB_UC } else { 0 } | if flags & mc != 0 { TIR_SELF_LB_MC } else { 0 };
            // SAFETY: just created, not yet seen by the caller.
            let q = unsafe { &mut *qp.cast::<Qp>() };
            let tir = match &q.kind {
                QpKind::Rss { tir } => Some(*tir),
                QpKind::Raw { rq, .. } => rq.as_ref().map(|r| r.tir),
            };
            if let (Some(tir), true) = (tir, self_lb != 0) {
                // SAFETY: the QP's live context.
                let td = unsafe { (*Context::from_ctx(context)).td };
                let g = g()?;
                g.nic.set_tir_domain(tir, td, self_lb);
                q.self_lb = self_lb;
                crate::loopback::enable(g, q.port, false, true);
            }
            Ok(qp)
        })())
    })
}

fn create_qp(context: *mut ibv_context, a: &mut ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, i32> {
    let g = g()?;
    live(g, context.cast(), Kind::Context)?;
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if a.comp_mask & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS == 0 {
        // Without the mask bit the field is not read (ibv_create_qp passes no flags).
        a.create_flags = 0;
    }
    qp_create_flags(a)?;
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || live(g, a.pd.cast(), Kind::Pd).is_err() {
        return Err(EINVAL);
    }
    if a.qp_type != IBV_QPT_RAW_PACKET {
        // The model is an Ethernet raw-packet device only.
        return Err(libc::EOPNOTSUPP);
    }
    // The kernel's create_qp: RAW_PACKET QPs need CAP_NET_RAW (EPERM).
    if !g.may_use_raw() {
        return Err(libc::EPERM);
    }
    // SAFETY: a live context.
    let port = unsafe { (*Context::from_ctx(context)).port };
    let rss = a.comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH);
    let (kind, holds) = if rss != 0 {
        create_rss(g, a, rss)?
    } else {
        create_raw(g, context, a, port)?
    };
    // SAFETY: C data, all-zero valid.
    let mut q: ibv_qp = unsafe { std::mem::zeroed() };
    q.context = context;
    q.qp_context = a.qp_context;
    q.pd = a.pd;
    q.send_cq = a.send_cq;
    q.recv_cq = a.recv_cq;
    q.state = IBV_QPS_RESET;
    q.qp_type = IBV_QPT_RAW_PACKET;
    q.qp_num = match &kind {
        QpKind::Raw { sq, .. } => sq.raw.num,
        // RSS QPs have no queue of their own: number them after the TIR.
        QpKind::Rss { tir, .. } => 0x80_0000 | *tir as u32,
    };
    q.handle = q.qp_num;
    // SAFETY: a live context.
    let td = unsafe { (*Context::from_ctx(context)).td };
    match &kind {
        QpKind::Raw { sq, rq, .. } => {
            g.nic.set_sq_domain(sq.raw.num, td);
            if let Some(r) = rq {
                g.nic.set_tir_domain(r.tir, td, 0);
            }
        }
        QpKind::Rss { tir } => g.nic.set_tir_domain(*tir, td, 0),
    }
    let qp = Box::into_raw(Box::new(Qp {
        qp: q,
        port,
        kind,
        cap: a.cap,
        sq_sig_all: a.sq_sig_all,
        self_lb: 0,
    }));
    let mut holds = holds;
    holds.extend([context as usize, a.pd as usize]);
    // SAFETY: just allocated.
    if let QpKind::Raw { send_cq, sq, rq, .. } = unsafe { &(*qp).kind } {
        // SAFETY: send_cq is live (checked in create_raw) and outlives the QP (it holds it).
        lock(unsafe { &(**send_cq).poll }).sqs.insert(sq.raw.num, qp);
        if let Some(r) = rq {
            // SAFETY: the recv CQ is live and held by the QP; the RQ's box lives in the QP
            // until destroy_qp takes it out of this map.
            lock(unsafe { &(*r.wq.cq).poll })
                .wqs
                .insert(r.wq.wq.wq_num, (&*r.wq as *const Wq).cast_mut());
        }
    }
    g.reg().add(qp as usize, Kind::Qp, holds);
    Ok(qp.cast::<ibv_qp>())
}

/// `ibv_create_qp_ex`'s `create_flags`, checked as the three layers check them on a ConnectX-5:
/// - libibverbs `ibv_icmd_create_qp` (libibverbs/cmd_qp.c): a flag outside
///   `CREATE_QP_EX_SUP_CREATE_FLAGS` (BLOCK_SELF_MCAST_LB, SCATTER_FCS, CVLAN_STRIPPING,
///   SOURCE_QPN, PCI_WRITE_END_PADDING) is EINVAL;
/// - libmlx5 `create_qp` (providers/mlx5/verbs.c): SOURCE_QPN on anything but UD is EINVAL;
/// - mlx5_ib `process_create_flags` (drivers/infiniband/hw/mlx5/qp.c): an RSS QP takes no flag
///   (EINVAL); a RAW_PACKET QP takes BLOCK_MULTICAST_LOOPBACK (`block_lb_mc`), SCATTER_FCS
///   (`eth_net_offloads && scatter_fcs`), CVLAN_STRIPPING (`eth_net_offloads && vlan_cap`) and
///   PCI_WRITE_END_PADDING (`end_pad`), all of which a ConnectX-5 has (DPDK's mlx5 guide lists
///   it for Rx packet padding, `rxq_pkt_pad_en`); what is left is EOPNOTSUPP.
///
/// FCS scatter and CVLAN stripping act on the QP's own RQ ([`mlx5_model::RqOptions`]);
/// end padding changes nothing a program may read; multicast loopback blocking lands in a QP
/// context field (`block_lb_mc`) that a RAW_PACKET QP's SQ, RQ and TIR do not take, so it
/// changes nothing either.
fn qp_create_flags(a: &ibv_qp_init_attr_ex) -> Result<(), i32> {
    let f = a.create_flags;
    let userspace = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
        | IBV_QP_CREATE_SCATTER_FCS
        | IBV_QP_CREATE_CVLAN_STRIPPING
        | IBV_QP_CREATE_SOURCE_QPN
        | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
    if f & !userspace != 0 {
        return Err(EINVAL);
    }
    if f & IBV_QP_CREATE_SOURCE_QPN != 0 && a.qp_type != IBV_QPT_UD {
        return Err(EINVAL);
    }
    if f != 0 && a.comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH) != 0 {
        return Err(EINVAL);
    }
    Ok(())
}

/// A RAW_PACKET QP with a send queue, sized as rdma-core's `mlx5_calc_send_wqe` /
/// `mlx5_calc_sq_size` size it.
fn create_raw(
    g: &Global,
    context: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
    port: usize,
) -> Result<(QpKind, Vec<usize>), i32> {
    let cap = &mut a.cap;
    if !a.srq.is_null() {
        // SRQs are not modelled (ibv_create_srq is EOPNOTSUPP), so no live one can be named.
        return Err(EINVAL);
    }
    // A receive queue of its own when max_recv_wr asks for one; with max_recv_wr 0 the QP has
    // none whatever max_recv_sge says (libmlx5 `mlx5_calc_rq_size` returns 0 first).
    let want_rq = cap.max_recv_wr > 0;
    if want_rq && (cap.max_recv_wr > MAX_QP_WR || cap.max_recv_sge > MAX_SGE) {
        return Err(EINVAL);
    }
    if a.send_cq.is_null() || live(g, a.send_cq.cast(), Kind::Cq).is_err() {
        return Err(EINVAL);
    }
    if !a.recv_cq.is_null() && live(g, a.recv_cq.cast(), Kind::Cq).is_err() {
        return Err(EINVAL);
    }
    if want_rq && a.recv_cq.is_null() {
        return Err(EINVAL);
    }
    // A receive-only QP (max_send_wr 0, with an RQ) has no send queue: the model still gives
    // it one WQEBB, which numbers the QP, and nothing can be posted to it (max_post 0: every
    // ibv_post_send is ENOMEM, as libmlx5's `mlx5_wq_overflow` answers an SQ of no WQEs).
    let recv_only = cap.max_send_wr == 0 && want_rq;
    if (cap.max_send_wr == 0 && !want_rq) || cap.max_send_wr > MAX_QP_WR || cap.max_send_sge > MAX_SGE {
        return Err(EINVAL);
    }
    let gather = cap.max_send_sge.max(1) * 16;
    let inl = if cap.max_inline_data > 0 {
        RAW_SQ_OVERHEAD + (INL_SEG + cap.max_inline_data).div_ceil(16) * 16
    } else {
        0
    };
    let wqe_size = (RAW_SQ_OVERHEAD + gather).max(inl).div_ceil(64) * 64;
    if wqe_size > 60 * 16 {
        return Err(EINVAL);
    }
    let wq_size = (cap.max_send_wr.max(1) * wqe_size).next_power_of_two();
    let wqebbs = wq_size / 64;
    let send_cq = a.send_cq.cast::<Cq>();
    // SAFETY: a live CQ (checked above).
    let cqn = unsafe { (*send_cq).info.raw.num };
    let sq = g.nic.alloc_sq(port, wqebbs, cqn).map_err(|_| libc::ENOMEM)?;
    // The SQ ignores doorbells until the QP reaches RTS.
    g.nic.set_sq_state(sq.raw.num, false, false).map_err(|_| libc::ENOMEM)?;
    // SAFETY: the model's SQ, which this QP alone posts to.
    let ring = unsafe { SendRing::new(sq.raw) }.map_err(|_| libc::ENOMEM)?;
    let max_post = if recv_only { 0 } else { wq_size / wqe_size };
    cap.max_send_wr = max_post;
    cap.max_inline_data = if recv_only {
        0
    } else {
        wqe_size - RAW_SQ_OVERHEAD - INL_SEG
    };
    let n = sq.raw.cnt as usize;
    let tx = SqTx {
        ring,
        pi: 0,
        head: 0,
        tail: 0,
        wrid: vec![0; n],
        wqe_head: vec![0; n],
        max_post,
        max_gs: cap.max_send_sge,
        max_inline: cap.max_inline_data,
        sig_all: a.sq_sig_all != 0,
        operational: false,
    };
    let mut holds = vec![send_cq as usize];
    if !a.recv_cq.is_null() {
        holds.push(a.recv_cq as usize);
    }
    let rq = if want_rq {
        // mlx5_ib `create_raw_packet_qp`: an RQ, and a TIR over it alone for the QP's flows.
        let opts = mlx5_model::RqOptions {
            max_sge: a.cap.max_recv_sge,
            scatter_fcs: a.create_flags & IBV_QP_CREATE_SCATTER_FCS != 0,
            strip_cvlan: a.create_flags & IBV_QP_CREATE_CVLAN_STRIPPING != 0,
            ..Default::default()
        };
        let wq = new_wq(
            g,
            context,
            a.pd,
            a.recv_cq,
            port,
            a.cap.max_recv_wr,
            Some(sq.raw.num),
            opts,
        )?;
        let tir = g
            .nic
            .create_tir(vec![wq.wq.wq_num], &[0; 40], 0)
            .map_err(|_| libc::ENOMEM)?;
        // libmlx5 `mlx5_calc_rq_size`: max_gs, the segments the power-of-two WQE holds.
        a.cap.max_recv_wr = wq.info.raw.cnt;
        a.cap.max_recv_sge = wq.info.raw.stride / 16;
        Some(OwnRq { wq, tir })
    } else {
        a.cap.max_recv_wr = 0;
        a.cap.max_recv_sge = 0;
        None
    };
    Ok((
        QpKind::Raw {
            sq,
            send_cq,
            tx: Mutex::new(tx),
            rq,
        },
        holds,
    ))
}

/// An RSS QP: mlx5_ib `create_rss_raw_qp_tir` (drivers/infiniband/hw/mlx5/qp.c) checks.
fn create_rss(g: &Global, a: &mut ibv_qp_init_attr_ex, rss: u32) -> Result<(QpKind, Vec<usize>), i32> {
    if rss != IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH {
        return Err(EINVAL);
    }
    // No send queue and no receive queue of its own; no send CQ (`init_attr->send_cq` is
    // EINVAL there).
    let cap = &a.cap;
    if !a.send_cq.is_null() || cap.max_send_wr != 0 || cap.max_recv_wr != 0 || cap.max_recv_sge != 0 || !a.srq.is_null()
    {
        return Err(EINVAL);
    }
    live(g, a.rwq_ind_tbl.cast(), Kind::IndTable)?;
    let h = &a.rx_hash_conf;
    if u32::from(h.rx_hash_function) != IBV_RX_HASH_FUNC_TOEPLITZ {
        return Err(libc::EOPNOTSUPP);
    }
    if h.rx_hash_key_len != 40 || h.rx_hash_key.is_null() {
        return Err(EINVAL);
    }
    let fields = h.rx_hash_fields_mask;
    if fields & !0xff != 0 {
        // IPSEC_SPI and INNER exist but the model does not hash them.
        return Err(libc::EOPNOTSUPP);
    }
    let any = |a: ibv_rx_hash_fields, b: ibv_rx_hash_fields| fields & u64::from(a | b) != 0;
    if any(IBV_RX_HASH_SRC_IPV4, IBV_RX_HASH_DST_IPV4) && any(IBV_RX_HASH_SRC_IPV6, IBV_RX_HASH_DST_IPV6) {
        return Err(EINVAL); // "only one l3 protocol"
    }
    if any(IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_DST_PORT_TCP)
        && any(IBV_RX_HASH_SRC_PORT_UDP, IBV_RX_HASH_DST_PORT_UDP)
    {
        return Err(EINVAL); // "only one l4 protocol"
    }
    let mut key = [0u8; 40];
    // SAFETY: rx_hash_key points at rx_hash_key_len (40, checked) bytes.
    unsafe { std::ptr::copy_nonoverlapping(h.rx_hash_key, key.as_mut_ptr(), 40) };
    let ind = a.rwq_ind_tbl.cast::<IndTable>();
    // SAFETY: a live indirection table.
    let table: Vec<u32> = unsafe { (*ind).wqs.iter().map(|&w| (*w).wq.wq_num).collect() };
    if fields == 0 && table.len() > 1 {
        return Err(EINVAL); // no hashing needs a one-entry table
    }
    let tir = g.nic.create_tir(table, &key, fields).map_err(|_| libc::ENOMEM)?;
    Ok((QpKind::Rss { tir }, vec![ind as usize]))
}

/// The RAW_PACKET rows of the kernel's `qp_state_table` (drivers/infiniband/core/verbs.c,
/// `ib_modify_qp_is_ok`): the attribute masks each transition requires and allows. CUR_STATE
/// is in no RAW_PACKET `opt_param`, so it is never accepted; RTS->SQD passes the core table but
/// mlx5's `modify_raw_packet_qp` knows no such operation (EINVAL).
fn qp_transition(cur: u32, next: u32, mask: u32) -> bool {
    if mask & IBV_QP_STATE == 0 || mask & IBV_QP_CUR_STATE != 0 {
        return false;
    }
    let (req, opt) = match (cur, next) {
        // The RESET row has only RESET and INIT: RESET->ERR is not a transition.
        (IBV_QPS_RESET, IBV_QPS_ERR) => return false,
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PORT, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) | (IBV_QPS_INIT, IBV_QPS_RTR) => (0, 0),
        (IBV_QPS_RTR, IBV_QPS_RTS) | (IBV_QPS_RTS, IBV_QPS_RTS) => (0, IBV_QP_RATE_LIMIT),
        // SQD/SQE: mlx5 raw-packet QPs move their SQ/RQ between RST, RDY and ERR only.
        _ => return false,
    };
    mask & req == req && mask & !(req | opt | IBV_QP_STATE) == 0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            live(g, qp.cast(), Kind::Qp)?;
            if attr.is_null() {
                return Err(EINVAL);
            }
            let q = qp.cast::<Qp>();
            // SAFETY: a live QP and the caller's attr struct.
            let (a, q) = unsafe { (&*attr, &mut *q) };
            let QpKind::Raw { sq, tx, rq, .. } = &q.kind else {
                // mlx5_ib_modify_qp: `if (ibqp->rwq_ind_tbl) return -ENOSYS;`
                return Err(libc::ENOSYS);
            };
            let mask = attr_mask as u32;
            let (cur, next) = (q.qp.state, a.qp_state);
            if next > IBV_QPS_ERR || !qp_transition(cur, next, mask) {
                return Err(EINVAL);
            }
            if mask & IBV_QP_PORT != 0 && a.port_num != 1 {
                return Err(EINVAL);
            }
            // mlx5_core `mlx5_rl_add_rate`: a rate outside the packet pacing caps is EINVAL
            // (0 is unlimited). The model records no rate: its wire is not shaped.
            let pacing = crate::device::RATE_LIMIT_MIN_KBPS..=crate::device::RATE_LIMIT_MAX_KBPS;
            if mask & IBV_QP_RATE_LIMIT != 0 && a.rate_limit != 0 && !pacing.contains(&a.rate_limit) {
                return Err(EINVAL);
            }
            let qpn = sq.raw.num;
            let mut t = lock(tx);
            match next {
                IBV_QPS_RESET => {
                    // mlx5_modify_qp on RESET: indices to 0 and the doorbell record cleared.
                    g.nic.set_sq_state(qpn, false, false).map_err(|_| EINVAL)?;
                    t.pi = 0;
                    t.head = 0;
                    t.tail = 0;
                    t.operational = false;
                    t.ring.reset_record();
                }
                IBV_QPS_RTS => {
                    g.nic.set_sq_state(qpn, true, false).map_err(|_| EINVAL)?;
                    t.operational = true;
                }
                IBV_QPS_ERR => g.nic.set_sq_state(qpn, true, true).map_err(|_| EINVAL)?,
                _ => {}
            }
            // The QP's own RQ (mlx5_ib `modify_raw_packet_qp`): ready from RESET->INIT on
            // (RST2INIT moves the RQ to RDY, the SQ waits for RTS), reset and error with the QP.
            if let Some(r) = rq {
                let state = match (cur, next) {
                    (IBV_QPS_RESET, IBV_QPS_INIT) => Some(RqState::Ready),
                    (_, IBV_QPS_RESET) => Some(RqState::Reset),
                    (_, IBV_QPS_ERR) => Some(RqState::Error),
                    _ => None,
                };
                if let Some(state) = state {
                    if state == RqState::Reset {
                        // mlx5_modify_qp on RESET: the RQ's indices and record restart too.
                        let mut rx = lock(&r.wq.rx);
                        rx.head = 0;
                        rx.tail = 0;
                        rx.ring.doorbell(0);
                    }
                    g.nic.set_rq_state(r.wq.wq.wq_num, state).map_err(|_| EINVAL)?;
                }
            }
            // libibverbs ibv_modify_qp: the new state is recorded in qp->state on success.
            q.qp.state = next;
            Ok(())
        })())
    })
}

/// `ibv_query_qp_data_in_order`: 0, "not guaranteed", what libmlx5 answers without the
/// `qp_data_in_order` capability (an EOPNOTSUPP stub would read as a flag set).
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: ibv_wr_opcode, _flags: u32) -> c_int {
    0
}

/// `ibv_query_qp` (libmlx5 `mlx5_query_qp` over the kernel's query): the QP's state, port and
/// capabilities as create returned them, and its creation attributes; EOPNOTSUPP for an RSS QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            live(g, qp.cast(), Kind::Qp)?;
            if attr.is_null() || init_attr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: a live QP; the caller's structs, valid for writing (checked non-NULL).
            let (q, attr, init) = unsafe { (&*qp.cast::<Qp>(), &mut *attr, &mut *init_attr) };
            if matches!(q.kind, QpKind::Rss { .. }) {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: C data, all-zero valid.
            *attr = unsafe { std::mem::zeroed() };
            attr.qp_state = q.qp.state;
            attr.cur_qp_state = q.qp.state;
            attr.port_num = 1;
            attr.cap = q.cap;
            // SAFETY: as above.
            *init = unsafe { std::mem::zeroed() };
            init.qp_context = q.qp.qp_context;
            init.send_cq = q.qp.send_cq;
            init.recv_cq = q.qp.recv_cq;
            init.cap = q.cap;
            init.qp_type = q.qp.qp_type;
            init.sq_sig_all = q.sq_sig_all;
            Ok(())
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            // A QP with flows attached: EBUSY (ib_destroy_qp checks usecnt).
            g.reg().remove(qp as usize, Kind::Qp)?;
            // SAFETY: allocated by create_qp, out of the registry now.
            let q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
            if q.self_lb != 0 {
                // mlx5_ib `destroy_raw_packet_qp_tir` / `destroy_rss_raw_qp_tir`.
                crate::loopback::disable(g, q.port, false, true);
            }
            match &q.kind {
                QpKind::Raw { sq, send_cq, rq, .. } => {
                    // SAFETY: the send CQ outlives its QPs (it was held until the removal above).
                    lock(unsafe { &(**send_cq).poll }).sqs.remove(&sq.raw.num);
                    if let Some(r) = rq {
                        // SAFETY: likewise the recv CQ.
                        lock(unsafe { &(*r.wq.cq).poll }).wqs.remove(&r.wq.wq.wq_num);
                        g.nic.destroy_tir(r.tir);
                    }
                }
                QpKind::Rss { tir, .. } => g.nic.destroy_tir(*tir),
            }
            Ok(())
        })())
    })
}

// ---------------------------------------------------------------------------------------------
// WQ and indirection table

unsafe extern "C" fn create_wq(context: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq {
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attr struct, read only.
        ptr_or_errno(create_wq_inner(context, unsafe { &*attr }, None))
    })
}

/// `ibv_create_wq`, and `mlx5dv_create_wq` with `striding` (`dv_wq.rs`, which checked it).
///
/// The caller's attributes come back as they were: libmlx5 sizes the ring in its own `rwq`
/// (`mlx5_calc_rwq_size`, providers/mlx5/verbs.c, rounds `max_wr` and the WQE size up to
/// powers of two there) and writes nothing into the attr; libibverbs copies the kernel's
/// `max_wr`/`max_sge` back (`ibv_cmd_create_wq`, libibverbs/cmd_wq.c), and the kernel answers
/// with what the caller asked (`ib_uverbs_ex_create_wq` echoes `wq_init_attr`, which
/// mlx5_ib's `create_wq` leaves alone). So an attr used twice makes two equal WQs; the sizes
/// the device took are `mlx5dv_init_obj`'s (`mlx5dv_rwq.wqe_cnt`, `stride`).
pub(crate) fn create_wq_inner(
    context: *mut ibv_context,
    a: &ibv_wq_init_attr,
    striding: Option<mlx5_prm::mprq::Params>,
) -> Result<*mut ibv_wq, i32> {
    let g = g()?;
    live(g, context.cast(), Kind::Context)?;
    if a.wq_type != IBV_WQT_RQ || a.comp_mask & !IBV_WQ_INIT_ATTR_FLAGS != 0 {
        return Err(EINVAL);
    }
    let flags = if a.comp_mask & IBV_WQ_INIT_ATTR_FLAGS != 0 {
        a.create_flags
    } else {
        0
    };
    live(g, a.pd.cast(), Kind::Pd)?;
    live(g, a.cq.cast(), Kind::Cq)?;
    if a.max_wr == 0 || a.max_wr > MAX_QP_WR || a.max_sge > MAX_SGE {
        return Err(EINVAL);
    }
    let mut opts = wq_flags(flags, a.max_sge)?;
    opts.striding = striding;
    // SAFETY: a live context.
    let port = unsafe { (*Context::from_ctx(context)).port };
    let mut w = new_wq(g, context, a.pd, a.cq, port, a.max_wr, None, opts)?;
    w.wq.wq_context = a.wq_context;
    let cq = w.cq;
    let wq_num = w.wq.wq_num;
    let wq = Box::into_raw(w);
    // SAFETY: a live CQ; the WQ holds it until destroyed.
    lock(unsafe { &(*cq).poll }).wqs.insert(wq_num, wq);
    g.reg().add(
        wq as usize,
        Kind::Wq,
        vec![context as usize, a.pd as usize, a.cq as usize],
    );
    Ok(wq.cast::<ibv_wq>())
}

/// `ibv_create_wq`'s `create_flags` as mlx5_ib's `create_rq` (drivers/infiniband/hw/mlx5/qp.c)
/// takes them on a ConnectX-5, and `max_sge` data segments per WQE: CVLAN stripping and FCS
/// scatter are modelled (`vlan_cap`, `scatter_fcs`); end padding is accepted and changes
/// nothing a program may read (the device may write up to the cache line's end past a frame;
/// the model writes nothing there); delay drop needs `IBV_RAW_PACKET_CAP_DELAY_DROP`, which
/// the model does not report: EOPNOTSUPP, as for any unknown flag.
fn wq_flags(flags: u32, max_sge: u32) -> Result<mlx5_model::RqOptions, i32> {
    let known = IBV_WQ_FLAGS_CVLAN_STRIPPING | IBV_WQ_FLAGS_SCATTER_FCS | IBV_WQ_FLAGS_PCI_WRITE_END_PADDING;
    if flags & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(mlx5_model::RqOptions {
        max_sge,
        scatter_fcs: flags & IBV_WQ_FLAGS_SCATTER_FCS != 0,
        strip_cvlan: flags & IBV_WQ_FLAGS_CVLAN_STRIPPING != 0,
        ..Default::default()
    })
}

/// A model RQ of at least `max_wr` WQEs (of `opts.max_sge` data segments) completing to `cq`,
/// as an `ibv_wq` in RESET (the caller registers it, or keeps it as a QP's own RQ, numbered
/// `owner_qpn` in its completions).
#[allow(clippy::too_many_arguments)]
fn new_wq(
    g: &Global,
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    port: usize,
    max_wr: u32,
    owner_qpn: Option<u32>,
    opts: mlx5_model::RqOptions,
) -> Result<Box<Wq>, i32> {
    let cq = cq.cast::<Cq>();
    // SAFETY: a live CQ (the callers check).
    let cqn = unsafe { (*cq).info.raw.num };
    let striding = opts.striding.is_some();
    let info = g.nic.alloc_wq_with(port, max_wr, cqn, opts).map_err(|_| libc::ENOMEM)?;
    let wq_num = info.raw.num;
    // SAFETY: the model's WQ, which only this object posts to.
    let ring = unsafe { RecvRing::new(info.raw) }.map_err(|_| libc::ENOMEM)?;
    // SAFETY: C data, all-zero valid (the static inline ibv_create_wq initialises the mutex,
    // cond and events_completed itself).
    let mut w: ibv_wq = unsafe { std::mem::zeroed() };
    w.context = context;
    w.pd = pd;
    w.cq = cq.cast();
    w.wq_num = wq_num;
    w.handle = wq_num;
    w.state = IBV_WQS_RESET;
    w.wq_type = IBV_WQT_RQ;
    w.post_recv = Some(crate::datapath::wq_post_recv);
    let n = info.raw.cnt as usize;
    Ok(Box::new(Wq {
        wq: w,
        port,
        info,
        cq,
        rx: Mutex::new(RqRx {
            ring,
            head: 0,
            tail: 0,
            wrid: vec![0; n],
        }),
        wc_qp_num: owner_qpn.unwrap_or(wq_num),
        striding,
    }))
}

unsafe extern "C" fn modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            live(g, wq.cast(), Kind::Wq)?;
            if attr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: a live WQ and the caller's attr.
            let (a, w) = unsafe { (&*attr, &mut *wq.cast::<Wq>()) };
            // ib_uverbs_ex_modify_wq: an empty mask or unknown bits are EINVAL.
            let mask = a.attr_mask;
            if mask == 0 || mask >= IBV_WQ_ATTR_RESERVED {
                return Err(EINVAL);
            }
            if mask & IBV_WQ_ATTR_FLAGS != 0 && a.flags_mask != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            // mlx5_ib_modify_wq: the current state is the one given, or the WQ's; the modify_rq
            // command fails (EINVAL) when it is not the RQ's real state.
            let cur = if mask & IBV_WQ_ATTR_CURR_STATE != 0 {
                a.curr_wq_state
            } else {
                w.wq.state
            };
            if cur != w.wq.state {
                return Err(EINVAL);
            }
            let next = if mask & IBV_WQ_ATTR_STATE != 0 { a.wq_state } else { cur };
            let state = match (cur, next) {
                (IBV_WQS_RESET, IBV_WQS_RDY) | (IBV_WQS_RDY, IBV_WQS_RDY) => RqState::Ready,
                (IBV_WQS_RDY, IBV_WQS_RESET) | (IBV_WQS_ERR, IBV_WQS_RESET) => RqState::Reset,
                (IBV_WQS_RDY, IBV_WQS_ERR) => RqState::Error,
                _ => return Err(EINVAL),
            };
            if state == RqState::Reset {
                // rdma-core mlx5_modify_wq: on RESET the indices restart and the record is 0.
                let mut rx = lock(&w.rx);
                rx.head = 0;
                rx.tail = 0;
                rx.ring.doorbell(0);
            }
            g.nic.set_rq_state(w.wq.wq_num, state).map_err(|_| EINVAL)?;
            w.wq.state = next;
            Ok(())
        })())
    })
}

unsafe extern "C" fn destroy_wq(wq: *mut ibv_wq) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            // A WQ in an indirection table: EBUSY.
            g.reg().remove(wq as usize, Kind::Wq)?;
            // SAFETY: allocated by create_wq, out of the registry now.
            let w = unsafe { Box::from_raw(wq.cast::<Wq>()) };
            // SAFETY: the CQ outlives its WQs (held until the removal above).
            lock(unsafe { &(*w.cq).poll }).wqs.remove(&w.wq.wq_num);
            Ok(())
        })())
    })
}

unsafe extern "C" fn create_rwq_ind_table(
    context: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = g()?;
            live(g, context.cast(), Kind::Context)?;
            if attr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the caller's attr struct.
            let a = unsafe { &*attr };
            if a.comp_mask != 0 || a.log_ind_tbl_size > LOG_MAX_RQT || a.ind_tbl.is_null() {
                return Err(EINVAL);
            }
            let n = 1usize << a.log_ind_tbl_size;
            let mut wqs = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: ind_tbl holds 1 << log_ind_tbl_size entries (verbs.h contract).
                let w = unsafe { *a.ind_tbl.add(i) };
                live(g, w.cast(), Kind::Wq)?;
                // SAFETY: a live WQ.
                if unsafe { (*w).context } != context {
                    return Err(EINVAL);
                }
                wqs.push(w.cast::<Wq>());
            }
            let mut holds: Vec<usize> = wqs.iter().map(|&w| w as usize).collect();
            holds.push(context as usize);
            let t = Box::into_raw(Box::new(IndTable {
                t: ibv_rwq_ind_table {
                    context,
                    ind_tbl_handle: 0,
                    ind_tbl_num: 0,
                    comp_mask: 0,
                },
                wqs,
            }));
            // SAFETY: just allocated; its number is its address's low bits, unique while alive.
            unsafe {
                (*t).t.ind_tbl_num = (t as usize >> 4) as c_int & 0x00ff_ffff;
                (*t).t.ind_tbl_handle = (*t).t.ind_tbl_num;
            }
            g.reg().add(t as usize, Kind::IndTable, holds);
            Ok(t.cast::<ibv_rwq_ind_table>())
        })())
    })
}

unsafe extern "C" fn destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            // A table under an RSS QP: EBUSY.
            g.reg().remove(t as usize, Kind::IndTable)?;
            // SAFETY: allocated by create_rwq_ind_table, out of the registry now.
            drop(unsafe { Box::from_raw(t.cast::<IndTable>()) });
            Ok(())
        })())
    })
}

// ---------------------------------------------------------------------------------------------
// Flows

/// The blob at `attr`: the attribute and `num_of_specs` specs, each as long as its own `size`
/// field says (libibverbs `ibv_cmd_create_flow` walks them the same way; `attr->size` is not
/// used). Bounded so that a garbage count cannot walk far.
///
/// # Safety
/// `attr` must point at a `struct ibv_flow_attr` followed by its specs.
unsafe fn flow_bytes(attr: *const ibv_flow_attr) -> Result<Vec<u8>, i32> {
    const LIMIT: usize = 4096;
    let head = size_of::<ibv_flow_attr>();
    // SAFETY: per the contract the attribute is readable.
    let num = unsafe { (*attr).num_of_specs };
    let mut len = head;
    for _ in 0..num {
        // SAFETY: each spec starts with `{ u32 type; u16 size; }` inside the caller's blob.
        let size = unsafe { std::ptr::read_unaligned(attr.cast::<u8>().add(len + 4).cast::<u16>()) };
        if size < 8 || len + usize::from(size) > LIMIT {
            return Err(EINVAL);
        }
        len += usize::from(size);
    }
    let mut v = vec![0u8; len];
    // SAFETY: the walk above stayed inside the specs the caller declared.
    unsafe { std::ptr::copy_nonoverlapping(attr.cast::<u8>(), v.as_mut_ptr(), len) };
    Ok(v)
}

unsafe extern "C" fn create_flow(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = g()?;
            live(g, qp.cast(), Kind::Qp)?;
            if attr.is_null() {
                return Err(EINVAL);
            }
            // ib_uverbs_ex_create_flow: CAP_NET_RAW or EPERM.
            if !g.may_use_raw() {
                return Err(libc::EPERM);
            }
            // SAFETY: the caller's attribute blob (non-NULL).
            let bytes = unsafe { flow_bytes(attr) }?;
            // SAFETY: as above.
            let special = match unsafe { (*attr).type_ } {
                IBV_FLOW_ATTR_SNIFFER => Some(SpecialFlow::Sniffer),
                IBV_FLOW_ATTR_ALL_DEFAULT => Some(SpecialFlow::AllDefault),
                IBV_FLOW_ATTR_MC_DEFAULT => Some(SpecialFlow::McDefault),
                _ => None,
            };
            if let Some(kind) = special {
                return create_special_flow(g, qp, bytes, kind);
            }
            let parsed = rawpkt_wire::ibv_spec::parse(&bytes).map_err(|e| e.errno)?;
            let refused = crate::objects::lock(&g.refuse_flow).clone();
            if !refused.is_empty()
                && parsed
                    .spec_types
                    .iter()
                    .any(|&t| rawpkt_wire::ibv_spec::spec_type_name(t) == refused)
            {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: a live QP.
            let q = unsafe { &*qp.cast::<Qp>() };
            let tir = flow_tir(q)?;
            let id = g.nic.add_flow(q.port, parsed.rule, tir).map_err(|_| libc::ENOMEM)?;
            Ok(new_flow(g, qp, id))
        })())
    })
}

/// The flow object for model flow `id` on `qp`, registered as holding the QP.
fn new_flow(g: &Global, qp: *mut ibv_qp, id: u64) -> *mut ibv_flow {
    // SAFETY: a live QP (checked by the caller).
    let context = unsafe { (*qp).context };
    let f = Box::into_raw(Box::new(Flow {
        f: ibv_flow {
            comp_mask: 0,
            context,
            handle: id as u32,
        },
        id,
    }));
    g.reg().add(f as usize, Kind::Flow, vec![qp as usize]);
    f.cast::<ibv_flow>()
}

/// The destination of a flow on `q`: an RSS QP's TIR, or a raw QP's own RQ's. A send-only raw
/// QP has none (mlx5_ib creates no TIR without an RQ): EINVAL.
fn flow_tir(q: &Qp) -> Result<usize, i32> {
    match &q.kind {
        QpKind::Rss { tir } => Ok(*tir),
        QpKind::Raw { rq: Some(r), .. } => Ok(r.tir),
        QpKind::Raw { rq: None, .. } => Err(EINVAL),
    }
}

/// `IBV_FLOW_ATTR_SNIFFER`, `_ALL_DEFAULT` and `_MC_DEFAULT` on a raw or RSS QP, with the
/// kernel's checks on the way. The caller checked CAP_NET_RAW, the only privilege today's
/// `ib_uverbs_ex_create_flow` (drivers/infiniband/core/uverbs_cmd.c) asks for any flow type
/// (4.x kernels also wanted CAP_NET_ADMIN for a sniffer). Then:
/// - uverbs: DONT_TRAP on ALL_DEFAULT/MC_DEFAULT is EINVAL; the specs are converted as for
///   any flow (unknown types, bad sizes: EINVAL);
/// - mlx5_ib `mlx5_ib_create_flow` (drivers/infiniband/hw/mlx5/fs.c): a priority above 15 is
///   ENOMEM, flags beyond DONT_TRAP|EGRESS and EGRESS on the default types EINVAL; the specs
///   are then ignored: `create_sniffer_rule` and `create_leftovers_rule` build their own
///   match. A sniffer needs the `allow_sniffer_and_nic_rx_shared_tir` cap (`get_flow_table`),
///   which a ConnectX-5 has.
///
/// An EGRESS sniffer is not modelled: EOPNOTSUPP.
fn create_special_flow(
    g: &Global,
    qp: *mut ibv_qp,
    mut bytes: Vec<u8>,
    kind: SpecialFlow,
) -> Result<*mut ibv_flow, i32> {
    let flags_at = std::mem::offset_of!(ibv_flow_attr, flags);
    let type_at = std::mem::offset_of!(ibv_flow_attr, type_);
    let flags = u32::from_ne_bytes(bytes[flags_at..flags_at + 4].try_into().expect("4 bytes"));
    let egress = flags & IBV_FLOW_ATTR_FLAGS_EGRESS != 0;
    if kind != SpecialFlow::Sniffer && (flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP != 0 || egress) {
        return Err(EINVAL);
    }
    // The rest of the attribute and the specs get the checks of a NORMAL flow; what only the
    // model could not express of a spec does not matter, since the specs are not used.
    bytes[type_at..type_at + 4].copy_from_slice(&IBV_FLOW_ATTR_NORMAL.to_ne_bytes());
    let kept = flags & !(IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS);
    bytes[flags_at..flags_at + 4].copy_from_slice(&kept.to_ne_bytes());
    match rawpkt_wire::ibv_spec::parse(&bytes) {
        Ok(_) => {}
        Err(e) if e.errno == libc::EOPNOTSUPP => {}
        Err(e) => return Err(e.errno),
    }
    if egress {
        return Err(libc::EOPNOTSUPP);
    }
    // SAFETY: a live QP (checked by the caller).
    let q = unsafe { &*qp.cast::<Qp>() };
    let tir = flow_tir(q)?;
    let id = g.nic.add_special_flow(q.port, kind, tir).map_err(|_| libc::ENOMEM)?;
    Ok(new_flow(g, qp, id))
}

unsafe extern "C" fn destroy_flow(flow: *mut ibv_flow) -> c_int {
    guard(EINVAL, || {
        int_errno((|| {
            let g = g()?;
            g.reg().remove(flow as usize, Kind::Flow)?;
            // SAFETY: allocated by create_flow, out of the registry now.
            let f = unsafe { Box::from_raw(flow.cast::<Flow>()) };
            g.nic.remove_flow(f.id);
            Ok(())
        })())
    })
}
