//! Object lifecycle, errno rules, the kernel's checks and the DV datapath over
//! `mlx5dv_init_obj`, calling the library's functions through the rlib (same code as the
//! `.so`). The model is process-wide, so the tests take turns.
#![allow(clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::{null, null_mut};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use rawpkt::internals::ring::{CqInfo, RwqInfo, SqInfo};
use rawpkt::internals::{DvCaps, DvControl, DvRxQueue, DvTxQueue};
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};
use rawpkt_model_verbs::*;
use rawpkt_wire::rule::FlowRule;
use rdma_abi::*;

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

const MAC1: [u8; 6] = [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01];

/// The verbs_context behind a context pointer, as verbs.h's `verbs_get_ctx` finds it.
unsafe fn vctx(ctx: *mut ibv_context) -> *mut verbs_context {
    ctx.cast::<u8>()
        .sub(std::mem::offset_of!(verbs_context, context))
        .cast()
}

struct Dev {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
}

unsafe fn open(i: usize) -> Dev {
    let mut n = 0;
    let list = ibv_get_device_list(&mut n);
    assert_eq!(n, 4);
    let ctx = ibv_open_device(*list.add(i));
    ibv_free_device_list(list);
    assert!(!ctx.is_null());
    let pd = ibv_alloc_pd(ctx);
    assert!(!pd.is_null());
    Dev { ctx, pd }
}

unsafe fn close(d: Dev) {
    assert_eq!(ibv_dealloc_pd(d.pd), 0);
    assert_eq!(ibv_close_device(d.ctx), 0);
}

unsafe fn raw_qp(d: &Dev, cq: *mut ibv_cq) -> *mut ibv_qp {
    let mut a: ibv_qp_init_attr = std::mem::zeroed();
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap.max_send_wr = 256;
    a.cap.max_send_sge = 1;
    a.qp_type = IBV_QPT_RAW_PACKET;
    ibv_create_qp(d.pd, &mut a)
}

unsafe fn modify(qp: *mut ibv_qp, state: u32, mask: u32) -> i32 {
    let mut a: ibv_qp_attr = std::mem::zeroed();
    a.qp_state = state;
    a.port_num = 1;
    ibv_modify_qp(qp, &mut a, mask as i32)
}

unsafe fn to_rts(qp: *mut ibv_qp) {
    assert_eq!(modify(qp, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT), 0);
    assert_eq!(modify(qp, IBV_QPS_RTR, IBV_QP_STATE), 0);
    assert_eq!(modify(qp, IBV_QPS_RTS, IBV_QP_STATE), 0);
}

unsafe fn wq_state(wq: *mut ibv_wq, state: u32) -> i32 {
    let mut a: ibv_wq_attr = std::mem::zeroed();
    a.attr_mask = IBV_WQ_ATTR_STATE;
    a.wq_state = state;
    (*vctx((*wq).context)).modify_wq.unwrap()(wq, &mut a)
}

/// WQ + one-entry table + RSS QP (IPv4/UDP hash) on `d`.
struct Rx {
    cq: *mut ibv_cq,
    wq: *mut ibv_wq,
    ind: *mut ibv_rwq_ind_table,
    qp: *mut ibv_qp,
}

unsafe fn rx(d: &Dev, size: u32) -> Rx {
    let v = vctx(d.ctx);
    let cq = ibv_create_cq(d.ctx, size as i32, null_mut(), null_mut(), 0);
    assert!(!cq.is_null());
    let mut wa: ibv_wq_init_attr = std::mem::zeroed();
    wa.wq_type = IBV_WQT_RQ;
    wa.max_wr = size;
    wa.max_sge = 1;
    wa.pd = d.pd;
    wa.cq = cq;
    let wq = (*v).create_wq.unwrap()(d.ctx, &mut wa);
    assert!(!wq.is_null());
    assert_eq!(wq_state(wq, IBV_WQS_RDY), 0);
    let mut tbl = [wq];
    let mut ia: ibv_rwq_ind_table_init_attr = std::mem::zeroed();
    ia.ind_tbl = tbl.as_mut_ptr();
    let ind = (*v).create_rwq_ind_table.unwrap()(d.ctx, &mut ia);
    assert!(!ind.is_null());
    let qp = rss_qp(d, ind, 40, 0xc3, 1);
    assert!(!qp.is_null(), "errno {}", errno());
    Rx { cq, wq, ind, qp }
}

unsafe fn rss_qp(d: &Dev, ind: *mut ibv_rwq_ind_table, key_len: u8, fields: u64, func: u8) -> *mut ibv_qp {
    let mut key = rawpkt_wire::rss::DEFAULT_KEY;
    let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    a.pd = d.pd;
    a.rwq_ind_tbl = ind;
    a.rx_hash_conf.rx_hash_function = func;
    a.rx_hash_conf.rx_hash_key_len = key_len;
    a.rx_hash_conf.rx_hash_key = key.as_mut_ptr();
    a.rx_hash_conf.rx_hash_fields_mask = fields;
    (*vctx(d.ctx)).create_qp_ex.unwrap()(d.ctx, &mut a)
}

unsafe fn flow(qp: *mut ibv_qp, rule: &FlowRule) -> *mut ibv_flow {
    let mut blob = rawpkt_wire::ibv_spec::compile(rule).unwrap();
    (*vctx((*qp).context)).ibv_create_flow.unwrap()(qp, blob.as_mut_ptr().cast())
}

unsafe fn destroy_flow(f: *mut ibv_flow) -> i32 {
    (*vctx((*f).context)).ibv_destroy_flow.unwrap()(f)
}

unsafe fn drop_rx(d: &Dev, r: Rx) {
    let v = vctx(d.ctx);
    assert_eq!(ibv_destroy_qp(r.qp), 0);
    assert_eq!((*v).destroy_rwq_ind_table.unwrap()(r.ind), 0);
    assert_eq!((*v).destroy_wq.unwrap()(r.wq), 0);
    assert_eq!(ibv_destroy_cq(r.cq), 0);
}

#[test]
fn context_is_an_extended_verbs_context() {
    let _t = turn();
    // SAFETY: the library's own objects throughout.
    unsafe {
        let d = open(0);
        let v = vctx(d.ctx);
        assert_eq!((*d.ctx).abi_compat as usize, usize::MAX, "__VERBS_ABI_IS_EXTENDED");
        assert_eq!((*v).sz, std::mem::size_of::<verbs_context>());
        assert!((*v).query_port.is_some() && (*v).ibv_create_flow.is_some() && (*v).create_wq.is_some());
        assert!((*d.ctx).ops.post_send.is_some() && (*d.ctx).ops.poll_cq.is_some());
        let name = std::ffi::CStr::from_ptr(ibv_get_device_name((*d.ctx).device));
        assert_eq!(name.to_str().unwrap(), "mlx5_0");
        // sysfs: <ibdev_path>/device resolves to the PCI function, which holds net/mdl0.
        let ibdev = std::ffi::CStr::from_ptr((*(*d.ctx).device).ibdev_path.as_ptr());
        let dev = std::path::Path::new(ibdev.to_str().unwrap()).join("device");
        let pci = std::fs::read_link(&dev).unwrap();
        assert_eq!(pci.file_name().unwrap(), "0000:3b:00.0");
        let mtu = std::fs::read_to_string(dev.join("net/mdl0/mtu")).unwrap();
        assert_eq!(mtu.trim(), "1500");
        let mut pa: ibv_port_attr = std::mem::zeroed();
        assert_eq!(
            (*v).query_port.unwrap()(d.ctx, 1, &mut pa, std::mem::size_of::<ibv_port_attr>()),
            0
        );
        assert_eq!((pa.state, pa.active_width, pa.active_speed), (IBV_PORT_ACTIVE, 2, 32));
        let mut dv: mlx5dv_context = std::mem::zeroed();
        assert_eq!(mlx5dv_query_device(d.ctx, &mut dv), 0);
        assert_ne!(dv.flags & u64::from(MLX5DV_CONTEXT_FLAGS_CQE_V1), 0);
        assert_eq!(rawpkt_model_set(c"dv".as_ptr(), c"0".as_ptr()), 0);
        assert_eq!(mlx5dv_query_device(d.ctx, &mut dv), 0);
        assert_eq!(dv.flags, 0);
        assert!(!mlx5dv_is_supported((*d.ctx).device));
        assert_eq!(rawpkt_model_set(c"dv".as_ptr(), c"1".as_ptr()), 0);
        assert!(mlx5dv_is_supported((*d.ctx).device));
        assert_eq!(rawpkt_model_set(c"dv".as_ptr(), c"2".as_ptr()), -1);
        assert_eq!(rawpkt_model_set(c"nope".as_ptr(), c"1".as_ptr()), -1);
        // mlx5dv_init_obj@MLX5_1.0: cq_uar is the address of a variable holding the UAR's.
        let cq = ibv_create_cq(d.ctx, 8, null_mut(), null_mut(), 0);
        let (mut now, mut old): (mlx5dv_cq, mlx5dv_cq) = (std::mem::zeroed(), std::mem::zeroed());
        let mut o: mlx5dv_obj = std::mem::zeroed();
        o.cq.in_ = cq;
        o.cq.out = &mut now;
        assert_eq!(mlx5dv_init_obj(&mut o, u64::from(MLX5DV_OBJ_CQ)), 0);
        o.cq.out = &mut old;
        assert_eq!(__mlx5dv_init_obj_MLX5_1_0(&mut o, u64::from(MLX5DV_OBJ_CQ)), 0);
        assert!(!now.cq_uar.is_null());
        assert_eq!(*old.cq_uar.cast::<*mut c_void>(), now.cq_uar);
        assert_eq!((old.cqn, old.cqe_cnt), (now.cqn, now.cqe_cnt));
        assert_eq!(ibv_destroy_cq(cq), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn errnos_and_use_counts() {
    let _t = turn();
    // SAFETY: the library's own objects, and pointers it must refuse without dereferencing.
    unsafe {
        let d = open(0);
        let bogus = 0x1000 as *mut c_void;
        assert_eq!(ibv_dealloc_pd(bogus.cast()), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(null_mut()), libc::EINVAL);
        assert!(ibv_alloc_pd(bogus.cast()).is_null() && errno() == libc::EINVAL);
        assert!(ibv_create_cq(d.ctx, 0, null_mut(), null_mut(), 0).is_null() && errno() == libc::EINVAL);
        assert!(ibv_create_cq(d.ctx, 1 << 22, null_mut(), null_mut(), 0).is_null() && errno() == libc::EINVAL);
        assert!(ibv_reg_mr(d.pd, null_mut(), 64, 1).is_null() && errno() == libc::EINVAL);
        let mut buf = vec![0u8; 4096];
        // Remote write without local write: EINVAL (ib_check_mr_access).
        assert!(ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), 4096, 2).is_null() && errno() == libc::EINVAL);
        let mr = ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), 4096, 1);
        assert!(!mr.is_null() && (*mr).lkey == (*mr).rkey && (*mr).length == 4096);
        assert_eq!(ibv_dealloc_pd(d.pd), libc::EBUSY);

        let cq = ibv_create_cq(d.ctx, 100, null_mut(), null_mut(), 0);
        assert_eq!((*cq).cqe, 127, "roundup_pow2(100 + 1) - 1");
        let qp = raw_qp(&d, cq);
        assert!(!qp.is_null());
        assert_eq!(ibv_destroy_cq(cq), libc::EBUSY);
        // The RAW_PACKET state machine.
        assert_eq!(modify(qp, IBV_QPS_RTS, IBV_QP_STATE), libc::EINVAL);
        assert_eq!(modify(qp, IBV_QPS_ERR, IBV_QP_STATE), libc::EINVAL, "RESET->ERR");
        assert_eq!(modify(qp, IBV_QPS_RESET, IBV_QP_STATE), 0, "RESET->RESET");
        assert_eq!(
            modify(qp, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_CUR_STATE),
            libc::EINVAL
        );
        let mut a: ibv_qp_attr = std::mem::zeroed();
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 2;
        assert_eq!(
            ibv_modify_qp(qp, &mut a, (IBV_QP_STATE | IBV_QP_PORT) as i32),
            libc::EINVAL
        );
        assert_eq!(modify(qp, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT), 0);
        assert_eq!(modify(qp, IBV_QPS_INIT, IBV_QP_STATE), 0, "INIT->INIT");
        assert_eq!(modify(qp, IBV_QPS_RTS, IBV_QP_STATE), libc::EINVAL, "INIT->RTS");
        assert_eq!(
            modify(qp, IBV_QPS_RTR, IBV_QP_STATE | IBV_QP_PORT),
            libc::EINVAL,
            "extra mask bit"
        );
        assert_eq!(modify(qp, IBV_QPS_RTR, IBV_QP_STATE), 0);
        assert_eq!(modify(qp, IBV_QPS_RTS, IBV_QP_STATE), 0);
        assert_eq!(modify(qp, IBV_QPS_SQD, IBV_QP_STATE), libc::EINVAL);
        assert_eq!(modify(qp, IBV_QPS_ERR, IBV_QP_STATE), 0);
        assert_eq!(modify(qp, IBV_QPS_ERR, IBV_QP_STATE), 0, "ERR->ERR");
        assert_eq!(modify(qp, IBV_QPS_RTS, IBV_QP_STATE), libc::EINVAL, "ERR->RTS");
        assert_eq!(modify(qp, IBV_QPS_RESET, IBV_QP_STATE), 0);
        assert_eq!((*qp).state, IBV_QPS_RESET);

        // WQ state machine.
        let v = vctx(d.ctx);
        let mut wa: ibv_wq_init_attr = std::mem::zeroed();
        wa.wq_type = IBV_WQT_RQ;
        wa.max_wr = 100;
        wa.max_sge = 1;
        wa.pd = d.pd;
        wa.cq = cq;
        let wq = (*v).create_wq.unwrap()(d.ctx, &mut wa);
        // The attr comes back as it went in (libmlx5 sizes the ring in its own rwq).
        assert_eq!(((*wq).state, wa.max_wr, wa.max_sge), (IBV_WQS_RESET, 100, 1));
        assert_eq!(wq_state(wq, IBV_WQS_ERR), libc::EINVAL);
        let mut wm: ibv_wq_attr = std::mem::zeroed();
        assert_eq!((*v).modify_wq.unwrap()(wq, &mut wm), libc::EINVAL, "empty mask");
        wm.attr_mask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE;
        wm.curr_wq_state = IBV_WQS_RDY;
        wm.wq_state = IBV_WQS_RDY;
        assert_eq!(
            (*v).modify_wq.unwrap()(wq, &mut wm),
            libc::EINVAL,
            "wrong current state"
        );
        assert_eq!(wq_state(wq, IBV_WQS_RDY), 0);
        assert_eq!(wq_state(wq, IBV_WQS_ERR), 0);
        assert_eq!(wq_state(wq, IBV_WQS_RESET), 0);
        assert_eq!(wq_state(wq, IBV_WQS_RDY), 0);

        // RSS QP checks (mlx5_ib create_rss_raw_qp_tir).
        let mut tbl = [wq, wq];
        let mut ia: ibv_rwq_ind_table_init_attr = std::mem::zeroed();
        ia.log_ind_tbl_size = 1;
        ia.ind_tbl = tbl.as_mut_ptr();
        let ind = (*v).create_rwq_ind_table.unwrap()(d.ctx, &mut ia);
        assert!(!ind.is_null());
        assert!(rss_qp(&d, ind, 39, 0x03, 1).is_null() && errno() == libc::EINVAL);
        assert!(
            rss_qp(&d, ind, 40, 0x05, 1).is_null() && errno() == libc::EINVAL,
            "IPv4 and IPv6"
        );
        assert!(
            rss_qp(&d, ind, 40, 0x50, 1).is_null() && errno() == libc::EINVAL,
            "TCP and UDP"
        );
        assert!(rss_qp(&d, ind, 40, 0x03, 2).is_null() && errno() == libc::EOPNOTSUPP);
        assert!(
            rss_qp(&d, ind, 40, 0, 1).is_null() && errno() == libc::EINVAL,
            "no hash, 2 entries"
        );
        let rss = rss_qp(&d, ind, 40, 0x03, 1);
        assert!(!rss.is_null());
        assert_eq!(modify(rss, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT), libc::ENOSYS);
        assert_eq!((*v).destroy_wq.unwrap()(wq), libc::EBUSY);
        assert_eq!((*v).destroy_rwq_ind_table.unwrap()(ind), libc::EBUSY);

        // Flows: the kernel's checks, and flows only on a QP with a receive side.
        assert!(flow(qp, &FlowRule::own_mac(MAC1)).is_null() && errno() == libc::EINVAL);
        let prio16 = FlowRule {
            priority: 15,
            ..FlowRule::own_mac(MAC1)
        };
        let mut blob = rawpkt_wire::ibv_spec::compile(&prio16).unwrap();
        *blob.as_mut_ptr().add(10) = 16;
        assert!((*v).ibv_create_flow.unwrap()(rss, blob.as_mut_ptr().cast()).is_null() && errno() == libc::ENOMEM);
        assert_eq!(rawpkt_model_set(c"refuse_flow".as_ptr(), c"udp".as_ptr()), 0);
        assert!(flow(rss, &"udp dst-port 53".parse().unwrap()).is_null() && errno() == libc::EOPNOTSUPP);
        let f = flow(rss, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null(), "only udp is refused");
        assert_eq!(rawpkt_model_set(c"refuse_flow".as_ptr(), c"".as_ptr()), 0);
        assert_eq!(ibv_destroy_qp(rss), libc::EBUSY);
        let destroy = (*v).ibv_destroy_flow.unwrap();
        assert_eq!(destroy(f), 0);
        assert_eq!(destroy(f), libc::EINVAL, "twice: refused, not dereferenced");

        assert_eq!(ibv_destroy_qp(rss), 0);
        assert_eq!((*v).destroy_rwq_ind_table.unwrap()(ind), 0);
        assert_eq!((*v).destroy_wq.unwrap()(wq), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn cap_net_raw_is_checked_on_the_calling_thread() {
    let _t = turn();
    // SAFETY: the library's own objects; the pointers cross threads as plain addresses.
    unsafe {
        let d = open(1);
        let r = rx(&d, 64);
        let cq = ibv_create_cq(d.ctx, 64, null_mut(), null_mut(), 0);
        let (pd, ctx, rss) = (d.pd as usize, d.ctx as usize, r.qp as usize);
        let cqa = cq as usize;
        std::thread::spawn(move || {
            rawpkt_model_verbs::drop_cap_net_raw_on_this_thread();
            let d = Dev {
                ctx: ctx as *mut _,
                pd: pd as *mut _,
            };
            assert!(raw_qp(&d, cqa as *mut _).is_null());
            assert_eq!(errno(), libc::EPERM);
            assert!(flow(rss as *mut _, &FlowRule::own_mac(MAC1)).is_null());
            assert_eq!(errno(), libc::EPERM);
            // Objects that need no capability still work.
            let c = ibv_create_cq(d.ctx, 8, null_mut(), null_mut(), 0);
            assert!(!c.is_null());
            assert_eq!(ibv_destroy_cq(c), 0);
        })
        .join()
        .unwrap();
        // This thread still has it.
        let qp = raw_qp(&d, cq);
        assert!(!qp.is_null(), "the test needs CAP_NET_RAW (run as root)");
        let f = flow(r.qp, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null());
        assert_eq!(destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        drop_rx(&d, r);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// Queue resets through verbs, as a binding does after a completion error.
struct Verbs {
    qp: usize,
    wq: usize,
}

// SAFETY: the addresses are the library's objects, used only through its thread-safe verbs.
unsafe impl Send for Verbs {}
// SAFETY: as above.
unsafe impl Sync for Verbs {}

impl DvControl for Verbs {
    fn reset_sq(&self, _qpn: u32) -> Result<(), String> {
        // SAFETY: a live QP of the library.
        unsafe {
            let qp = self.qp as *mut ibv_qp;
            if modify(qp, IBV_QPS_RESET, IBV_QP_STATE) != 0 {
                return Err("reset".into());
            }
            to_rts(qp);
        }
        Ok(())
    }
    fn reset_rq(&self, _wq: u32) -> Result<(), String> {
        // SAFETY: a live WQ of the library.
        unsafe {
            let wq = self.wq as *mut ibv_wq;
            if wq_state(wq, IBV_WQS_RESET) != 0 || wq_state(wq, IBV_WQS_RDY) != 0 {
                return Err("reset".into());
            }
        }
        Ok(())
    }
}

fn udp_frame(dst: [u8; 6], seq: u16) -> Vec<u8> {
    let mut f = vec![0u8; 128];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[2, 0x4d, 0x4c, 0x35, 0, 0]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&[0x45, 0, 0, 114]);
    f[22] = 64;
    f[23] = 17;
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f[34..36].copy_from_slice(&seq.to_be_bytes());
    f[36..38].copy_from_slice(&4789u16.to_be_bytes());
    f[38..40].copy_from_slice(&94u16.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = (seq as usize * 7 + i) as u8;
    }
    f
}

/// rawpkt's own DV datapath (DvTxQueue/DvRxQueue) on the rings `mlx5dv_init_obj` hands over:
/// the objects are made with verbs, the WQEs and CQEs go straight through ring memory.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn dv_datapath_over_init_obj() {
    let _t = turn();
    let size = 256u32;
    // SAFETY: the library's objects; the ring views are built from what mlx5dv_init_obj
    // returned and live while `keep` (the Arc holding the objects' owner) does.
    unsafe {
        let d0 = open(0);
        let d1 = open(1);
        let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
        let region = rawpkt::internals::pool_region(&pool);
        let mr0 = ibv_reg_mr(d0.pd, region.base().cast(), region.len(), 1);
        let mr1 = ibv_reg_mr(d1.pd, region.base().cast(), region.len(), 1);
        assert!(!mr0.is_null() && !mr1.is_null());

        // TX on mlx5_0: DV CQ of 64-byte CQEs, RAW_PACKET QP.
        let mut ca: ibv_cq_init_attr_ex = std::mem::zeroed();
        ca.cqe = size;
        let mut dva: mlx5dv_cq_init_attr = std::mem::zeroed();
        dva.comp_mask = u64::from(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE);
        dva.cqe_size = 128;
        assert!(mlx5dv_create_cq(d0.ctx, &mut ca, &mut dva).is_null());
        dva.cqe_size = 64;
        let tx_cq = mlx5dv_create_cq(d0.ctx, &mut ca, &mut dva).cast::<ibv_cq>();
        assert!(!tx_cq.is_null());
        let qp = raw_qp(&d0, tx_cq);
        to_rts(qp);
        let r = rx(&d1, size);
        let f = flow(r.qp, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null());

        let mut dqp: mlx5dv_qp = std::mem::zeroed();
        let mut dcq: mlx5dv_cq = std::mem::zeroed();
        let mut rcq: mlx5dv_cq = std::mem::zeroed();
        let mut drwq: mlx5dv_rwq = std::mem::zeroed();
        let mut o: mlx5dv_obj = std::mem::zeroed();
        o.qp.in_ = qp;
        o.qp.out = &mut dqp;
        o.cq.in_ = tx_cq;
        o.cq.out = &mut dcq;
        assert_eq!(mlx5dv_init_obj(&mut o, u64::from(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ)), 0);
        let mut o: mlx5dv_obj = std::mem::zeroed();
        o.rwq.in_ = r.wq;
        o.rwq.out = &mut drwq;
        o.cq.in_ = r.cq;
        o.cq.out = &mut rcq;
        assert_eq!(mlx5dv_init_obj(&mut o, u64::from(MLX5DV_OBJ_RWQ | MLX5DV_OBJ_CQ)), 0);
        assert_eq!((dqp.sq.stride, dcq.cqe_size, drwq.stride), (64, 64, 16));

        let keep: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
        let sq = SqInfo::from_raw(
            dqp.sq.buf.cast(),
            dqp.sq.wqe_cnt,
            dqp.sq.stride,
            dqp.dbrec,
            dqp.bf.reg.cast(),
            dqp.bf.size,
            (*qp).qp_num,
            keep.clone(),
        );
        let tcq = CqInfo::from_raw(
            dcq.buf.cast(),
            dcq.dbrec,
            dcq.cqe_cnt,
            dcq.cqe_size,
            dcq.cqn,
            keep.clone(),
        );
        let rwq = RwqInfo::from_raw(drwq.buf.cast(), drwq.dbrec, drwq.wqe_cnt, drwq.stride, keep.clone());
        let xcq = CqInfo::from_raw(
            rcq.buf.cast(),
            rcq.dbrec,
            rcq.cqe_cnt,
            rcq.cqe_size,
            rcq.cqn,
            keep.clone(),
        );
        let ctl: Arc<dyn DvControl> = Arc::new(Verbs {
            qp: qp as usize,
            wq: r.wq as usize,
        });
        let cfg = QueueConfig::default().size(size);
        let caps = DvCaps::CONNECTX5;
        // SAFETY: (inside this test's unsafe block) the QP, WQ and CQs were created above for these
        // two queues alone and outlive them.
        let mut tx = DvTxQueue::new(&sq, &tcq, (*mr0).lkey, &pool, &cfg, caps, ctl.clone()).unwrap();
        let mut rxq = DvRxQueue::new(&rwq, &xcq, (*r.wq).wq_num, (*mr1).lkey, &pool, &cfg, ctl).unwrap();

        let linux = rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1);
        let total = 1000u16;
        let (mut sent, mut got) = (0u16, 0u16);
        let mut out = Burst::new(&pool, 64);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while got < total {
            assert!(std::time::Instant::now() < deadline, "sent {sent}, received {got}");
            // Keep what is on its way below the RQ's size: like hardware, the model drops frames
            // that find no posted buffer.
            if sent < total && u32::from(sent - got) + 32 <= size / 2 {
                let mut b = Burst::new(&pool, 32);
                while sent < total && b.len() < 32 && b.push_copy(&udp_frame(MAC1, sent)) {
                    sent += 1;
                }
                let want = b.len();
                let n = tx.tx_burst(&mut b).unwrap();
                sent -= (want - n) as u16;
            }
            tx.reclaim().unwrap();
            rxq.rx_burst(&mut out).unwrap();
            for i in 0..out.len() {
                assert_eq!(out.data(i), &udp_frame(MAC1, got)[..], "frame {got}");
                got += 1;
            }
            out = Burst::new(&pool, 64);
        }
        assert_eq!(rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1), linux);
        // Another MAC: not stolen, Linux's.
        assert_eq!(
            rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, udp_frame([2, 0, 0, 0, 0, 9], 0).as_ptr(), 128),
            0
        );
        assert_eq!(rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1), linux + 1);
        assert_eq!(rawpkt_model_inject(c"mlx5_7".as_ptr(), 1, null(), 0), -1);
        while tx.in_flight() > 0 {
            tx.reclaim().unwrap();
        }
        drop(tx);
        drop(rxq);

        assert_eq!(destroy_flow(f), 0);
        drop_rx(&d1, r);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(tx_cq), 0);
        assert_eq!(ibv_dereg_mr(mr0), 0);
        assert_eq!(ibv_dereg_mr(mr1), 0);
        close(d0);
        close(d1);
        assert_eq!(rawpkt_model_live_objects(), 0);
        let _ = Rc::strong_count(&pool);
    }
}

/// RAW_PACKET QPs as the hardware has them: `max_recv_wr = 0` with any `max_recv_sge` is a
/// send-only QP (receives are ENOMEM, flows EINVAL), `max_send_wr = 0` a receive-only one
/// (sends ENOMEM); with `max_recv_wr > 0` the QP has its own RQ, ready from INIT, fed by `ibv_post_recv` on the QP and completing on its recv CQ with the
/// QP's number, and flows attached to the QP deliver to it.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn a_raw_qp_with_its_own_rq_receives_what_its_flows_steer() {
    let _t = turn();
    // SAFETY: the library's own objects, and a buffer that outlives its MR.
    unsafe {
        let d = open(1);
        let post_recv = (*d.ctx).ops.post_recv.unwrap();
        let poll = (*d.ctx).ops.poll_cq.unwrap();
        let scq = ibv_create_cq(d.ctx, 64, null_mut(), null_mut(), 0);
        let rcq = ibv_create_cq(d.ctx, 64, null_mut(), null_mut(), 0);
        assert!(!scq.is_null() && !rcq.is_null());
        let mut a: ibv_qp_init_attr = std::mem::zeroed();
        a.send_cq = scq;
        a.recv_cq = rcq;
        a.cap.max_send_wr = 16;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 4;
        a.qp_type = IBV_QPT_RAW_PACKET;
        let send_only = ibv_create_qp(d.pd, &mut a);
        assert!(!send_only.is_null(), "max_recv_wr 0, max_recv_sge 4: errno {}", errno());
        assert_eq!((a.cap.max_recv_wr, a.cap.max_recv_sge), (0, 0));
        let mut wr: ibv_recv_wr = std::mem::zeroed();
        let mut bad = null_mut();
        assert_eq!(post_recv(send_only, &mut wr, &mut bad), libc::ENOMEM);
        assert!(flow(send_only, &FlowRule::own_mac(MAC1)).is_null() && errno() == libc::EINVAL);
        a.cap.max_recv_sge = 31;
        a.cap.max_recv_wr = 32;
        assert!(
            ibv_create_qp(d.pd, &mut a).is_null() && errno() == libc::EINVAL,
            "more SGEs than max_sge"
        );

        a.cap.max_recv_sge = 1;
        // Receive-only: no send WRs (nothing can be posted to send).
        a.cap.max_send_wr = 0;
        let qp = ibv_create_qp(d.pd, &mut a);
        assert!(!qp.is_null(), "errno {}", errno());
        assert!(a.cap.max_recv_wr >= 32 && a.cap.max_recv_sge == 1);
        assert_eq!((a.cap.max_send_wr, a.cap.max_inline_data), (0, 0));
        let (mut qa, mut qi): (ibv_qp_attr, ibv_qp_init_attr) = (std::mem::zeroed(), std::mem::zeroed());
        assert_eq!(ibv_query_qp(qp, &mut qa, IBV_QP_STATE as i32, &mut qi), 0);
        assert_eq!(
            (qa.qp_state, qa.port_num, qi.qp_type),
            (IBV_QPS_RESET, 1, IBV_QPT_RAW_PACKET)
        );
        assert_eq!(
            (qi.cap.max_recv_wr, qi.cap.max_send_wr, qi.recv_cq),
            (a.cap.max_recv_wr, 0, rcq)
        );
        let mut swr: ibv_send_wr = std::mem::zeroed();
        let mut sbad = null_mut();
        assert_eq!((*d.ctx).ops.post_send.unwrap()(qp, &mut swr, &mut sbad), libc::ENOMEM);
        a.cap.max_recv_wr = 0;
        assert!(
            ibv_create_qp(d.pd, &mut a).is_null() && errno() == libc::EINVAL,
            "no queue at all"
        );
        let mut buf = vec![0u8; 32 * 2048];
        let mr = ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        assert!(!mr.is_null());
        let mut sges: Vec<ibv_sge> = (0..32)
            .map(|i| ibv_sge {
                addr: buf.as_ptr() as u64 + i * 2048,
                length: 2048,
                lkey: (*mr).lkey,
            })
            .collect();
        let mut wrs: Vec<ibv_recv_wr> = (0..32).map(|_| std::mem::zeroed()).collect();
        for i in 0..32 {
            wrs[i].wr_id = 100 + i as u64;
            wrs[i].sg_list = &mut sges[i];
            wrs[i].num_sge = 1;
            let next = if i < 31 {
                &mut wrs[i + 1] as *mut ibv_recv_wr
            } else {
                null_mut()
            };
            wrs[i].next = next;
        }
        assert_eq!(post_recv(qp, wrs.as_mut_ptr(), &mut bad), 0);
        assert_eq!(modify(qp, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT), 0);
        let f = flow(qp, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null(), "errno {}", errno());
        assert_eq!(ibv_destroy_qp(qp), libc::EBUSY, "a QP with a flow");

        let linux = rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1);
        let mine = udp_frame(MAC1, 7);
        assert_eq!(rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, mine.as_ptr(), mine.len()), 0);
        let other = udp_frame([2, 0, 0, 0, 0, 9], 8);
        assert_eq!(
            rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, other.as_ptr(), other.len()),
            0
        );
        let mut wc: ibv_wc = std::mem::zeroed();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while poll(rcq, 1, &mut wc) == 0 {
            assert!(std::time::Instant::now() < deadline, "no receive completion");
        }
        assert_eq!(wc.status, IBV_WC_SUCCESS);
        assert_eq!(wc.opcode, IBV_WC_RECV);
        assert_eq!(
            (wc.qp_num, wc.wr_id, wc.byte_len as usize),
            ((*qp).qp_num, 100, mine.len())
        );
        assert_eq!(&buf[..mine.len()], &mine[..]);
        assert_eq!(poll(rcq, 1, &mut wc), 0, "the other MAC's frame is Linux's");
        assert_eq!(rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1), linux + 1);

        assert_eq!(destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_qp(send_only), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(scq), 0);
        assert_eq!(ibv_destroy_cq(rcq), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// Completion channels: a CQ on a channel raises one event per arming once a CQE is there,
/// `ibv_get_cq_event` names it (with its context), a non-blocking channel with nothing queued is
/// EAGAIN, and the channel is EBUSY to destroy while a CQ uses it.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs, as on a real NIC)"]
fn completion_channels_raise_one_event_per_arming() {
    let _t = turn();
    // SAFETY: the library's own objects, and a buffer that outlives its MR.
    unsafe {
        let d = open(0);
        let ch = ibv_create_comp_channel(d.ctx);
        assert!(!ch.is_null());
        let tag = 0x5eed_usize as *mut c_void;
        let cq = ibv_create_cq(d.ctx, 16, tag, ch.cast(), 0);
        assert!(!cq.is_null(), "errno {}", errno());
        assert_eq!((*cq).channel, ch);
        assert!(ibv_create_cq(d.ctx, 16, null_mut(), null_mut(), 4096).is_null() && errno() == libc::EINVAL);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY);
        let qp = raw_qp(&d, cq);
        to_rts(qp);
        let frame = udp_frame(MAC1, 1);
        let mr = ibv_reg_mr(d.pd, frame.as_ptr() as *mut c_void, frame.len(), 0);
        let mut sge = ibv_sge {
            addr: frame.as_ptr() as u64,
            length: frame.len() as u32,
            lkey: (*mr).lkey,
        };
        let send = |id: u64, sge: &mut ibv_sge| {
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.wr_id = id;
            wr.sg_list = sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            let mut bad = null_mut();
            assert_eq!((*d.ctx).ops.post_send.unwrap()(qp, &mut wr, &mut bad), 0);
        };
        // Not armed: a completion raises nothing (the fd stays unreadable).
        let fl = libc::fcntl((*ch).fd, libc::F_GETFL);
        assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        send(1, &mut sge);
        let poll = (*d.ctx).ops.poll_cq.unwrap();
        let mut wc: ibv_wc = std::mem::zeroed();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while poll(cq, 1, &mut wc) == 0 {
            assert!(std::time::Instant::now() < deadline, "no completion");
        }
        let (mut ev_cq, mut ev_ctx) = (null_mut(), null_mut());
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), -1);
        assert_eq!(errno(), libc::EAGAIN);
        // Armed, then a completion: one event, naming the CQ and its context.
        assert_eq!((*d.ctx).ops.req_notify_cq.unwrap()(cq, 0), 0);
        send(2, &mut sge);
        assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl), 0);
        assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), 0);
        assert_eq!((ev_cq, ev_ctx), (cq, tag));
        ibv_ack_cq_events(cq, 1);
        assert_eq!((*cq).comp_events_completed, 1);
        while poll(cq, 1, &mut wc) == 0 {}
        assert_eq!(wc.wr_id, 2);
        // One event per arming: nothing more without re-arming.
        assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        send(3, &mut sge);
        while poll(cq, 1, &mut wc) == 0 {}
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), -1);

        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// `ibv_post_send` as libmlx5 rings it: each doorbell at the other half of the BlueFlame
/// register (`bf->offset ^= bf->buf_size`), a single inline WQE as a BlueFlame copy, others
/// as an 8-byte write. Posted one at a time, each waiting for its completion, every WQE runs
/// (a device that read one half only would never run the second); then bursts of one-WR
/// posts, whose doorbells land on both halves between two looks of the device, all run too.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs, as on a real NIC)"]
fn doorbells_at_either_blueflame_half_run_every_wqe() {
    let _t = turn();
    // SAFETY: the library's own objects, and a frame that outlives its MR.
    unsafe {
        let d = open(0);
        let cq = ibv_create_cq(d.ctx, 1024, null_mut(), null_mut(), 0);
        assert!(!cq.is_null());
        let mut a: ibv_qp_init_attr = std::mem::zeroed();
        a.send_cq = cq;
        a.recv_cq = cq;
        a.cap.max_send_wr = 512;
        a.cap.max_send_sge = 1;
        a.cap.max_inline_data = 128;
        a.qp_type = IBV_QPT_RAW_PACKET;
        let qp = ibv_create_qp(d.pd, &mut a);
        assert!(!qp.is_null(), "errno {}", errno());
        to_rts(qp);
        let mut dqp: mlx5dv_qp = std::mem::zeroed();
        let mut o: mlx5dv_obj = std::mem::zeroed();
        o.qp.in_ = qp;
        o.qp.out = &mut dqp;
        assert_eq!(mlx5dv_init_obj(&mut o, u64::from(MLX5DV_OBJ_QP)), 0);
        assert_eq!(dqp.bf.size, 256);
        let frame = udp_frame(MAC1, 3);
        let mr = ibv_reg_mr(d.pd, frame.as_ptr() as *mut c_void, frame.len(), 0);
        assert!(!mr.is_null());
        let post_send = (*d.ctx).ops.post_send.unwrap();
        let poll = (*d.ctx).ops.poll_cq.unwrap();
        let send = |id: u64| {
            let mut sge = ibv_sge {
                addr: frame.as_ptr() as u64,
                length: frame.len() as u32,
                lkey: (*mr).lkey,
            };
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.wr_id = id;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            // Odd ids inline (a BlueFlame copy of the WQE), even ones gathered (8 bytes).
            wr.send_flags = IBV_SEND_SIGNALED | if id % 2 == 1 { IBV_SEND_INLINE } else { 0 };
            let mut bad = null_mut();
            assert_eq!(post_send(qp, &mut wr, &mut bad), 0, "WR {id}");
        };
        let wire = rawpkt_model_wire_frames(c"mlx5_0".as_ptr(), 1);
        let mut wc: ibv_wc = std::mem::zeroed();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        for id in 0..64u64 {
            send(id);
            while poll(cq, 1, &mut wc) == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "WR {id} (register half {}) never ran",
                    id % 2
                );
            }
            assert_eq!((wc.status, wc.wr_id), (IBV_WC_SUCCESS, id));
        }
        let (mut next, mut done) = (64u64, 64u64);
        while done < 4096 {
            assert!(std::time::Instant::now() < deadline, "{done} of 4096 WRs completed");
            while next < 4096 && next - done < 256 {
                send(next);
                next += 1;
            }
            while poll(cq, 1, &mut wc) == 1 {
                assert_eq!((wc.status, wc.wr_id), (IBV_WC_SUCCESS, done));
                done += 1;
            }
        }
        assert_eq!(rawpkt_model_wire_frames(c"mlx5_0".as_ptr(), 1), wire + 4096);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// A receive-only raw QP of `max_recv_sge` SGEs per WR on `d`, with a flow for MAC1, in INIT
/// (its RQ ready), created with `create_flags` through `ibv_create_qp_ex`.
unsafe fn scatter_qp(d: &Dev, rcq: *mut ibv_cq, scq: *mut ibv_cq, max_recv_sge: u32, create_flags: u32) -> *mut ibv_qp {
    let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    if create_flags != 0 {
        a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
        a.create_flags = create_flags;
    }
    a.pd = d.pd;
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.cap.max_recv_wr = 16;
    a.cap.max_recv_sge = max_recv_sge;
    let qp = (*vctx(d.ctx)).create_qp_ex.unwrap()(d.ctx, &mut a);
    assert!(!qp.is_null(), "errno {}", errno());
    assert_eq!(a.cap.max_recv_sge, max_recv_sge.next_power_of_two(), "rq.max_gs");
    assert_eq!(modify(qp, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT), 0);
    qp
}

/// Posts one receive WR of the given (offset, length) pieces of `buf`.
unsafe fn post_pieces(qp: *mut ibv_qp, id: u64, buf: &[u8], lkey: u32, pieces: &[(usize, u32)]) -> i32 {
    let mut sges: Vec<ibv_sge> = pieces
        .iter()
        .map(|&(off, length)| ibv_sge {
            addr: buf.as_ptr() as u64 + off as u64,
            length,
            lkey,
        })
        .collect();
    let mut wr: ibv_recv_wr = std::mem::zeroed();
    wr.wr_id = id;
    wr.sg_list = sges.as_mut_ptr();
    wr.num_sge = sges.len() as i32;
    let mut bad = null_mut();
    (*(*qp).context).ops.post_recv.unwrap()(qp, &mut wr, &mut bad)
}

unsafe fn wait_wc(cq: *mut ibv_cq) -> ibv_wc {
    let poll = (*(*cq).context).ops.poll_cq.unwrap();
    let mut wc: ibv_wc = std::mem::zeroed();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while poll(cq, 1, &mut wc) == 0 {
        assert!(std::time::Instant::now() < deadline, "no completion");
    }
    wc
}

/// A UDP frame to MAC1 of exactly `len` bytes (at least 42), its payload numbered by `seq`.
fn frame_of(len: usize, seq: u8) -> Vec<u8> {
    let mut f = udp_frame(MAC1, u16::from(seq));
    f.resize(len.max(42), 0);
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = seq.wrapping_mul(31).wrapping_add(i as u8);
    }
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

/// Scatter, as an ibv program sees it: a raw QP's RQ of 3 SGEs per WR (the WQE holds 4) takes
/// a frame that fits the first SGE, one that spans two, one that spans all three; a frame
/// longer than the SGEs' sum completes with a local length error; more SGEs than the WQE
/// holds is EINVAL. A WQ of 2 SGEs scatters the same way.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn receive_wqes_scatter_a_frame_across_their_sges_in_order() {
    let _t = turn();
    // SAFETY: the library's own objects, and a buffer that outlives its MR.
    unsafe {
        let d = open(1);
        let scq = ibv_create_cq(d.ctx, 16, null_mut(), null_mut(), 0);
        let rcq = ibv_create_cq(d.ctx, 64, null_mut(), null_mut(), 0);
        assert!(!scq.is_null() && !rcq.is_null());
        let qp = scatter_qp(&d, rcq, scq, 3, 0);
        let f = flow(qp, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null(), "errno {}", errno());
        let mut buf = vec![0u8; 8 * 1024];
        let mr = ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        assert!(!mr.is_null());
        let lkey = (*mr).lkey;
        // Five SGEs where the WQE holds four: EINVAL, nothing posted.
        let five = [(0, 64), (64, 64), (128, 64), (192, 64), (256, 64)];
        assert_eq!(post_pieces(qp, 9, &buf, lkey, &five), libc::EINVAL);
        // Each WR: 64 bytes at k*1024, then 64 at k*1024 + 512, then 100 at k*1024 + 700, so
        // a frame's bytes land in three separate places.
        let pieces = |k: usize| [(k * 1024, 64u32), (k * 1024 + 512, 64), (k * 1024 + 700, 100)];
        for k in 0..4 {
            assert_eq!(post_pieces(qp, 100 + k as u64, &buf, lkey, &pieces(k)), 0);
        }
        for (k, len) in [60usize, 100, 228, 229].into_iter().enumerate() {
            let frame = frame_of(len, k as u8);
            assert_eq!(
                rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, frame.as_ptr(), frame.len()),
                0
            );
            let wc = wait_wc(rcq);
            assert_eq!(wc.wr_id, 100 + k as u64);
            if len > 228 {
                assert_eq!(wc.status, IBV_WC_LOC_LEN_ERR, "{len} bytes into 228");
                continue;
            }
            assert_eq!((wc.status, wc.byte_len as usize), (IBV_WC_SUCCESS, len), "frame {k}");
            let mut got = Vec::new();
            let mut left = len;
            for (off, n) in pieces(k) {
                let n = left.min(n as usize);
                got.extend_from_slice(&buf[off..off + n]);
                left -= n;
            }
            assert_eq!(got, frame, "frame {k} scattered in order");
            if len <= 64 {
                assert_eq!(buf[k * 1024 + 512], 0, "second SGE untouched by frame {k}");
            }
        }
        assert_eq!(destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);

        // A WQ of 2 SGEs per WR, behind a one-entry RSS QP.
        let v = vctx(d.ctx);
        let mut wa: ibv_wq_init_attr = std::mem::zeroed();
        wa.wq_type = IBV_WQT_RQ;
        wa.max_wr = 8;
        wa.max_sge = 31;
        wa.pd = d.pd;
        wa.cq = rcq;
        assert!((*v).create_wq.unwrap()(d.ctx, &mut wa).is_null() && errno() == libc::EINVAL);
        wa.max_sge = 2;
        let wq = (*v).create_wq.unwrap()(d.ctx, &mut wa);
        assert!(!wq.is_null(), "errno {}", errno());
        assert_eq!(wa.max_sge, 2);
        assert_eq!(wq_state(wq, IBV_WQS_RDY), 0);
        let mut tbl = [wq];
        let mut ia: ibv_rwq_ind_table_init_attr = std::mem::zeroed();
        ia.ind_tbl = tbl.as_mut_ptr();
        let ind = (*v).create_rwq_ind_table.unwrap()(d.ctx, &mut ia);
        let rss = rss_qp(&d, ind, 40, 0xc3, 1);
        assert!(!rss.is_null());
        let f = flow(rss, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null());
        buf.fill(0);
        let mut sges = [
            ibv_sge {
                addr: buf.as_ptr() as u64,
                length: 80,
                lkey,
            },
            ibv_sge {
                addr: buf.as_ptr() as u64 + 4096,
                length: 2048,
                lkey,
            },
        ];
        let mut wr: ibv_recv_wr = std::mem::zeroed();
        wr.wr_id = 7;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = 2;
        let mut bad = null_mut();
        assert_eq!((*wq).post_recv.unwrap()(wq, &mut wr, &mut bad), 0);
        let frame = frame_of(300, 9);
        assert_eq!(
            rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, frame.as_ptr(), frame.len()),
            0
        );
        let wc = wait_wc(rcq);
        assert_eq!((wc.status, wc.wr_id, wc.byte_len), (IBV_WC_SUCCESS, 7, 300));
        assert_eq!(&buf[..80], &frame[..80]);
        assert_eq!(&buf[4096..4096 + 220], &frame[80..]);
        assert_eq!(destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(rss), 0);
        assert_eq!((*v).destroy_rwq_ind_table.unwrap()(ind), 0);
        assert_eq!((*v).destroy_wq.unwrap()(wq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(scq), 0);
        assert_eq!(ibv_destroy_cq(rcq), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// The Ethernet FCS, bit by bit (IEEE 802.3 CRC-32, reflected), independently of the model's.
fn fcs(frame: &[u8]) -> [u8; 4] {
    let mut c = !0u32;
    for &b in frame {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
        }
    }
    (!c).to_le_bytes()
}

/// `ibv_create_qp_ex` create flags as libibverbs, libmlx5 and mlx5_ib take them for a
/// RAW_PACKET QP on a ConnectX-5: unknown bits and SOURCE_QPN EINVAL, any flag on an RSS QP
/// EINVAL; SCATTER_FCS, CVLAN_STRIPPING, PCI_WRITE_END_PADDING and BLOCK_SELF_MCAST_LB
/// accepted, and the first two do what they say: the frame arrives untagged with its FCS
/// (computed on the tagged frame, as it was on the wire) after it, counted in byte_len. A WQ
/// takes the same offloads, and DELAY_DROP (not reported in raw_packet_caps) is EOPNOTSUPP.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn qp_create_flags_as_mlx5_ib_takes_them() {
    let _t = turn();
    // SAFETY: the library's own objects, and a buffer that outlives its MR.
    unsafe {
        let d = open(1);
        let v = vctx(d.ctx);
        let mut da: ibv_device_attr_ex = std::mem::zeroed();
        assert_eq!(
            (*v).query_device_ex.unwrap()(d.ctx, null(), &mut da, size_of::<ibv_device_attr_ex>()),
            0
        );
        let caps = IBV_RAW_PACKET_CAP_SCATTER_FCS | IBV_RAW_PACKET_CAP_CVLAN_STRIPPING;
        assert_eq!(da.raw_packet_caps & caps, caps);
        assert_eq!(da.raw_packet_caps & IBV_RAW_PACKET_CAP_DELAY_DROP, 0);
        let scq = ibv_create_cq(d.ctx, 16, null_mut(), null_mut(), 0);
        let rcq = ibv_create_cq(d.ctx, 16, null_mut(), null_mut(), 0);
        let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
        a.qp_type = IBV_QPT_RAW_PACKET;
        a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        a.pd = d.pd;
        a.send_cq = scq;
        a.recv_cq = rcq;
        a.cap.max_send_wr = 4;
        a.cap.max_send_sge = 1;
        let create = (*v).create_qp_ex.unwrap();
        for (flags, want) in [
            (1u32 << 3, libc::EINVAL),
            (1 << 12, libc::EINVAL),
            (IBV_QP_CREATE_SOURCE_QPN, libc::EINVAL),
        ] {
            a.create_flags = flags;
            assert!(create(d.ctx, &mut a).is_null() && errno() == want, "flags {flags:#x}");
        }
        a.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
        let send_only = create(d.ctx, &mut a);
        assert!(!send_only.is_null(), "errno {}", errno());
        // An RSS QP takes no create flag.
        let r = rx(&d, 16);
        let mut key = rawpkt_wire::rss::DEFAULT_KEY;
        let mut ra: ibv_qp_init_attr_ex = std::mem::zeroed();
        ra.qp_type = IBV_QPT_RAW_PACKET;
        ra.comp_mask =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        ra.create_flags = IBV_QP_CREATE_SCATTER_FCS;
        ra.pd = d.pd;
        ra.rwq_ind_tbl = r.ind;
        ra.rx_hash_conf.rx_hash_function = 1;
        ra.rx_hash_conf.rx_hash_key_len = 40;
        ra.rx_hash_conf.rx_hash_key = key.as_mut_ptr();
        assert!(
            create(d.ctx, &mut ra).is_null() && errno() == libc::EINVAL,
            "RSS QP with a flag"
        );

        // FCS scatter and CVLAN stripping on the QP's own RQ.
        let all = IBV_QP_CREATE_SCATTER_FCS
            | IBV_QP_CREATE_CVLAN_STRIPPING
            | IBV_QP_CREATE_PCI_WRITE_END_PADDING
            | IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
        let qp = scatter_qp(&d, rcq, scq, 1, all);
        let f = flow(qp, &FlowRule::own_mac(MAC1));
        assert!(!f.is_null(), "errno {}", errno());
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let lkey = (*mr).lkey;
        for k in 0..2 {
            assert_eq!(post_pieces(qp, k, &buf, lkey, &[(k as usize * 2048, 2048)]), 0);
        }
        // Tagged: VLAN 5, priority 3.
        let plain = frame_of(100, 1);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x60, 0x05]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(
            rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, tagged.as_ptr(), tagged.len()),
            0
        );
        let wc = wait_wc(rcq);
        assert_eq!((wc.status, wc.byte_len), (IBV_WC_SUCCESS, 104), "untagged 100 + FCS 4");
        assert_eq!(&buf[..100], &plain[..], "the tag is stripped");
        assert_eq!(
            buf[100..104],
            fcs(&tagged),
            "the FCS of the frame as it was on the wire"
        );
        assert_eq!(
            rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, plain.as_ptr(), plain.len()),
            0
        );
        let wc = wait_wc(rcq);
        assert_eq!((wc.status, wc.byte_len), (IBV_WC_SUCCESS, 104));
        assert_eq!(&buf[2048..2148], &plain[..]);
        assert_eq!(buf[2148..2152], fcs(&plain));
        assert_eq!(destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_qp(send_only), 0);
        drop_rx(&d, r);

        // A WQ: the same offloads; delay drop is not reported, so not taken.
        let mut wa: ibv_wq_init_attr = std::mem::zeroed();
        wa.wq_type = IBV_WQT_RQ;
        wa.max_wr = 8;
        wa.max_sge = 1;
        wa.pd = d.pd;
        wa.cq = rcq;
        wa.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
        wa.create_flags = IBV_WQ_FLAGS_DELAY_DROP;
        assert!((*v).create_wq.unwrap()(d.ctx, &mut wa).is_null() && errno() == libc::EOPNOTSUPP);
        wa.create_flags = IBV_WQ_FLAGS_SCATTER_FCS | IBV_WQ_FLAGS_CVLAN_STRIPPING | IBV_WQ_FLAGS_PCI_WRITE_END_PADDING;
        let wq = (*v).create_wq.unwrap()(d.ctx, &mut wa);
        assert!(!wq.is_null(), "errno {}", errno());
        assert_eq!((*v).destroy_wq.unwrap()(wq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(scq), 0);
        assert_eq!(ibv_destroy_cq(rcq), 0);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}
