//! Flows beyond match-and-steer, on the library's devices: SNIFFER, ALL_DEFAULT and
//! MC_DEFAULT flows on raw QPs with their own RQ, what the Linux side keeps meanwhile, and the
//! kernel's checks on those flow types. Run as root (CAP_NET_RAW for raw QPs and flows).
#![allow(clippy::missing_safety_doc)]

use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
const OTHER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x09];
const BUF: usize = 2048;

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

/// A raw QP with its own RQ of 64 posted 2 KiB buffers (and a send queue when `send`), in RTS.
struct Qp {
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: Vec<u8>,
}

unsafe fn raw_qp(d: &Dev, send: bool) -> Qp {
    raw_qp_flags(d, send, None)
}

/// As [`raw_qp`]; with `dv_flags`, made by `mlx5dv_create_qp` with those create flags.
unsafe fn raw_qp_flags(d: &Dev, send: bool, dv_flags: Option<u32>) -> Qp {
    let cq = ibv_create_cq(d.ctx, 256, null_mut(), null_mut(), 0);
    assert!(!cq.is_null());
    let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = d.pd;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap.max_send_wr = if send { 64 } else { 0 };
    a.cap.max_send_sge = 1;
    a.cap.max_inline_data = if send { 128 } else { 0 };
    a.cap.max_recv_wr = 64;
    a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RAW_PACKET;
    let qp = match dv_flags {
        None => (*vctx(d.ctx)).create_qp_ex.unwrap()(d.ctx, &mut a),
        Some(f) => {
            let mut m: mlx5dv_qp_init_attr = std::mem::zeroed();
            m.comp_mask = u64::from(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
            m.create_flags = f;
            mlx5dv_create_qp(d.ctx, &mut a, &mut m)
        }
    };
    assert!(!qp.is_null(), "errno {}", errno());
    let mut buf = vec![0u8; 64 * BUF];
    let mr = ibv_reg_mr(d.pd, buf.as_mut_ptr().cast(), buf.len(), 1);
    assert!(!mr.is_null());
    let mut sges: Vec<ibv_sge> = (0..64)
        .map(|i| ibv_sge {
            addr: buf.as_ptr() as u64 + (i * BUF) as u64,
            length: BUF as u32,
            lkey: (*mr).lkey,
        })
        .collect();
    let mut wrs: Vec<ibv_recv_wr> = (0..64).map(|_| std::mem::zeroed()).collect();
    let base: *mut ibv_recv_wr = wrs.as_mut_ptr();
    for (i, wr) in wrs.iter_mut().enumerate() {
        wr.wr_id = i as u64;
        wr.sg_list = &mut sges[i];
        wr.num_sge = 1;
        wr.next = if i < 63 { base.add(i + 1) } else { null_mut() };
    }
    let mut bad = null_mut();
    assert_eq!((*d.ctx).ops.post_recv.unwrap()(qp, base, &mut bad), 0);
    for (state, mask) in [
        (IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PORT),
        (IBV_QPS_RTR, IBV_QP_STATE),
        (IBV_QPS_RTS, IBV_QP_STATE),
    ] {
        let mut qa: ibv_qp_attr = std::mem::zeroed();
        qa.qp_state = state;
        qa.port_num = 1;
        assert_eq!(ibv_modify_qp(qp, &mut qa, mask as i32), 0);
    }
    Qp { cq, qp, mr, buf }
}

unsafe fn drop_qp(q: Qp) {
    assert_eq!(ibv_destroy_qp(q.qp), 0);
    assert_eq!(ibv_dereg_mr(q.mr), 0);
    assert_eq!(ibv_destroy_cq(q.cq), 0);
    drop(q.buf);
}

/// Frames received on `q` so far (up to `want`, waiting at most 5 s for them), as bytes.
unsafe fn received(q: &Qp, want: usize) -> Vec<Vec<u8>> {
    let poll = (*(*q.qp).context).ops.poll_cq.unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < want && Instant::now() < deadline {
        let mut wc: ibv_wc = std::mem::zeroed();
        if poll(q.cq, 1, &mut wc) == 1 {
            assert_eq!(wc.status, IBV_WC_SUCCESS);
            if wc.opcode != IBV_WC_RECV {
                continue; // a send completion
            }
            let at = wc.wr_id as usize * BUF;
            out.push(q.buf[at..at + wc.byte_len as usize].to_vec());
        }
    }
    // Whatever else arrives shortly after is an unexpected extra.
    std::thread::sleep(Duration::from_millis(20));
    let mut wc: ibv_wc = std::mem::zeroed();
    while poll(q.cq, 1, &mut wc) == 1 {
        if wc.opcode == IBV_WC_RECV {
            let at = wc.wr_id as usize * BUF;
            out.push(q.buf[at..at + wc.byte_len as usize].to_vec());
        }
    }
    out
}

/// A flow of `type_` with no specs (what rdma-pktgen and perftest pass for a sniffer).
unsafe fn typed_flow(qp: *mut ibv_qp, type_: u32, flags: u32, priority: u16) -> *mut ibv_flow {
    let mut a: ibv_flow_attr = std::mem::zeroed();
    a.type_ = type_;
    a.size = std::mem::size_of::<ibv_flow_attr>() as u16;
    a.port = 1;
    a.flags = flags;
    a.priority = priority;
    (*vctx((*qp).context)).ibv_create_flow.unwrap()(qp, &mut a)
}

unsafe fn rule_flow(qp: *mut ibv_qp, rule: &FlowRule) -> *mut ibv_flow {
    let mut blob = rawpkt_wire::ibv_spec::compile(rule).unwrap();
    (*vctx((*qp).context)).ibv_create_flow.unwrap()(qp, blob.as_mut_ptr().cast())
}

unsafe fn destroy_flow(f: *mut ibv_flow) {
    assert_eq!((*vctx((*f).context)).ibv_destroy_flow.unwrap()(f), 0);
}

fn inject(frame: &[u8]) {
    // SAFETY: a NUL-terminated name and a live slice.
    assert_eq!(
        unsafe { rawpkt_model_inject(c"mlx5_1".as_ptr(), 1, frame.as_ptr(), frame.len()) },
        0
    );
}

fn linux() -> u64 {
    // SAFETY: a NUL-terminated name.
    unsafe { rawpkt_model_linux_frames(c"mlx5_1".as_ptr(), 1) }
}

fn knob(k: &std::ffi::CStr, v: &std::ffi::CStr) {
    // SAFETY: NUL-terminated strings.
    assert_eq!(unsafe { rawpkt_model_set(k.as_ptr(), v.as_ptr()) }, 0);
}

/// An ARP request (broadcast) or reply (to `dst`) from 10.0.0.9, 60 bytes.
fn arp(dst: [u8; 6], reply: bool) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&OTHER);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, if reply { 2 } else { 1 }]);
    f[22..28].copy_from_slice(&OTHER);
    f[28..32].copy_from_slice(&[10, 0, 0, 9]);
    f[38..42].copy_from_slice(&[10, 0, 0, 1]);
    f
}

fn udp(dst: [u8; 6], seq: u8) -> Vec<u8> {
    let mut f = vec![0u8; 80];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&OTHER);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&[0x45, 0, 0, 66]);
    f[22] = 64;
    f[23] = 17;
    f[26..34].copy_from_slice(&[10, 0, 0, 9, 10, 0, 0, 1]);
    f[34..38].copy_from_slice(&[0x13, 0x88, 0x12, 0xb5]);
    f[38..40].copy_from_slice(&46u16.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = seq.wrapping_add(i as u8);
    }
    f
}

/// A raw QP with its own RQ and a SNIFFER flow gets a copy of every frame the port receives
/// (stolen by another QP's flow, to another MAC, broadcast ARP, an ARP reply) and of every
/// frame it sends, while normal steering goes on: the stealing flow still gets its frame, and
/// the ARP frames (and the rest no flow steals) still reach the Linux side.
#[test]
#[ignore = "needs root"]
fn a_sniffer_sees_every_frame_of_the_port_and_linux_keeps_arp() {
    let _t = turn();
    // SAFETY: the library's own objects; buffers outlive their MRs.
    unsafe {
        let d = open(1);
        let udp_rule: FlowRule = "dst-mac 02:4d:4c:35:00:01 udp".parse().unwrap();
        let steal = raw_qp(&d, false);
        let f_steal = rule_flow(steal.qp, &udp_rule);
        assert!(!f_steal.is_null(), "errno {}", errno());
        let sniff = raw_qp(&d, true);
        let f_sniff = typed_flow(sniff.qp, IBV_FLOW_ATTR_SNIFFER, 0, 0);
        assert!(!f_sniff.is_null(), "errno {}", errno());
        assert_eq!(ibv_destroy_qp(sniff.qp), libc::EBUSY, "a QP with a sniffer flow");

        let linux0 = linux();
        let rx = [
            udp(MAC1, 1),
            udp(OTHER, 2),
            arp([0xff; 6], false),
            arp(MAC1, true),
            udp([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03], 3),
        ];
        for f in &rx {
            inject(f);
        }
        // What the port sends: a copy comes back to the sniffer too.
        let tx: Vec<Vec<u8>> = (10..13).map(|i| udp(OTHER, i)).collect();
        let post_send = (*d.ctx).ops.post_send.unwrap();
        for f in &tx {
            let mut sge = ibv_sge {
                addr: f.as_ptr() as u64,
                length: f.len() as u32,
                lkey: 0,
            };
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
            let mut bad = null_mut();
            assert_eq!(post_send(sniff.qp, &mut wr, &mut bad), 0);
        }
        let want: Vec<Vec<u8>> = rx.iter().chain(&tx).cloned().collect();
        assert_eq!(received(&sniff, want.len()), want, "the sniffer: every frame, in order");
        assert_eq!(received(&steal, 1), vec![rx[0].clone()], "steering goes on");
        assert_eq!(
            linux() - linux0,
            4,
            "Linux keeps everything no flow stole, ARP included"
        );

        // The kernel's checks: CAP_NET_RAW, DONT_TRAP/EGRESS on the default types, the
        // priority range, a send-only QP (no TIR).
        knob(c"cap_net_raw", c"0");
        assert!(typed_flow(steal.qp, IBV_FLOW_ATTR_SNIFFER, 0, 0).is_null() && errno() == libc::EPERM);
        knob(c"cap_net_raw", c"1");
        let dont_trap = IBV_FLOW_ATTR_FLAGS_DONT_TRAP;
        let egress = IBV_FLOW_ATTR_FLAGS_EGRESS;
        for (type_, flags, prio, err) in [
            (IBV_FLOW_ATTR_ALL_DEFAULT, dont_trap, 0, libc::EINVAL),
            (IBV_FLOW_ATTR_MC_DEFAULT, dont_trap, 0, libc::EINVAL),
            (IBV_FLOW_ATTR_MC_DEFAULT, egress, 0, libc::EINVAL),
            (IBV_FLOW_ATTR_SNIFFER, 0x80, 0, libc::EINVAL),
            (IBV_FLOW_ATTR_SNIFFER, 0, 16, libc::ENOMEM),
            (4, 0, 0, libc::EINVAL),
        ] {
            assert!(
                typed_flow(steal.qp, type_, flags, prio).is_null() && errno() == err,
                "type {type_} flags {flags:#x} priority {prio}: errno {}",
                errno()
            );
        }
        let cq = ibv_create_cq(d.ctx, 8, null_mut(), null_mut(), 0);
        let mut a: ibv_qp_init_attr = std::mem::zeroed();
        (a.send_cq, a.recv_cq, a.qp_type) = (cq, cq, IBV_QPT_RAW_PACKET);
        a.cap.max_send_wr = 8;
        a.cap.max_send_sge = 1;
        let send_only = ibv_create_qp(d.pd, &mut a);
        assert!(!send_only.is_null());
        assert!(typed_flow(send_only, IBV_FLOW_ATTR_SNIFFER, 0, 0).is_null() && errno() == libc::EINVAL);
        assert_eq!(ibv_destroy_qp(send_only), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);

        // Without the sniffer flow, the sniffer QP gets nothing.
        destroy_flow(f_sniff);
        inject(&udp(OTHER, 20));
        assert!(received(&sniff, 0).is_empty());
        destroy_flow(f_steal);
        drop_qp(sniff);
        drop_qp(steal);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// ALL_DEFAULT and MC_DEFAULT flows see what no flow stole and the netdev did not take: with
/// the netdev filtering (its MAC, broadcast, the groups Linux joins), a frame to another MAC
/// goes to ALL_DEFAULT, an unjoined multicast to both, and ARP stays Linux's.
#[test]
#[ignore = "needs root"]
fn leftovers_flows_get_what_neither_flows_nor_the_netdev_take() {
    let _t = turn();
    // SAFETY: as above.
    unsafe {
        let d = open(1);
        knob(c"netdev.mlx5_1", c"filter");
        let all = raw_qp(&d, false);
        let mc = raw_qp(&d, false);
        let f_all = typed_flow(all.qp, IBV_FLOW_ATTR_ALL_DEFAULT, 0, 0);
        let f_mc = typed_flow(mc.qp, IBV_FLOW_ATTR_MC_DEFAULT, 0, 0);
        assert!(!f_all.is_null() && !f_mc.is_null(), "errno {}", errno());
        let linux0 = linux();
        let other = udp(OTHER, 1);
        let group = udp([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03], 2);
        let joined = udp([0x33, 0x33, 0xff, 0x35, 0x00, 0x01], 3);
        for f in [&other, &arp([0xff; 6], false), &group, &arp(MAC1, true), &joined] {
            inject(f);
        }
        assert_eq!(received(&all, 2), vec![other.clone(), group.clone()]);
        assert_eq!(received(&mc, 1), vec![group.clone()]);
        assert_eq!(
            linux() - linux0,
            3,
            "ARP request and reply, and the solicited-node group"
        );

        // Promiscuous, the netdev takes everything and the leftovers see nothing.
        knob(c"netdev.mlx5_1", c"promisc");
        inject(&other);
        assert!(received(&all, 0).is_empty());
        assert_eq!(linux() - linux0, 4);
        destroy_flow(f_all);
        destroy_flow(f_mc);
        drop_qp(all);
        drop_qp(mc);
        close(d);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}

/// Sends `frame` on `q` (inline, signalled) and waits for its completion: by then the device
/// has put it on the wire, and looped it back if it does.
unsafe fn send(q: &Qp, frame: &[u8]) {
    let ctx = (*q.qp).context;
    let mut sge = ibv_sge {
        addr: frame.as_ptr() as u64,
        length: frame.len() as u32,
        lkey: 0,
    };
    let mut wr: ibv_send_wr = std::mem::zeroed();
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    let mut bad = null_mut();
    assert_eq!((*ctx).ops.post_send.unwrap()(q.qp, &mut wr, &mut bad), 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut wc: ibv_wc = std::mem::zeroed();
        if (*ctx).ops.poll_cq.unwrap()(q.cq, 1, &mut wc) == 1 && wc.opcode == IBV_WC_SEND {
            assert_eq!(wc.status, IBV_WC_SUCCESS);
            return;
        }
        assert!(Instant::now() < deadline, "no send completion");
    }
}

fn wire_frames() -> u64 {
    // SAFETY: a NUL-terminated name.
    unsafe { rawpkt_model_wire_frames(c"mlx5_1".as_ptr(), 1) }
}

/// Local loopback between QPs of one port, as mlx5_ib switches it: off with one context (one
/// user transport domain); on with a second context, and then a frame sent to the port's own
/// MAC or broadcast reaches a receiving QP of the other context, not one of the sender's own
/// context (self-loopback, same domain); off again when that context closes; on with a QP
/// whose TIR allows unicast self-loopback (`mlx5dv_create_qp`), which then gets its own
/// context's unicast frames but not its broadcast ones. A frame to another MAC never loops;
/// every frame also leaves on the wire.
#[test]
#[ignore = "needs root"]
fn local_loopback_follows_the_kernels_rules() {
    let _t = turn();
    // SAFETY: the library's own objects; buffers outlive their MRs.
    unsafe {
        let a = open(1);
        let any_udp: FlowRule = "udp".parse().unwrap();
        let rx = raw_qp(&a, false);
        let f_rx = rule_flow(rx.qp, &any_udp);
        assert!(!f_rx.is_null(), "errno {}", errno());
        let tx_a = raw_qp(&a, true);
        let wire0 = wire_frames();
        send(&tx_a, &udp(MAC1, 1));
        send(&tx_a, &udp([0xff; 6], 2));
        assert!(received(&rx, 0).is_empty(), "one context: no loopback");

        let b = open(1);
        let tx_b = raw_qp(&b, true);
        let (mine, other, bcast) = (udp(MAC1, 3), udp(OTHER, 4), udp([0xff; 6], 5));
        for f in [&mine, &other, &bcast] {
            send(&tx_b, f);
        }
        assert_eq!(received(&rx, 2), vec![mine, bcast], "another context's frames loop");
        send(&tx_a, &udp(MAC1, 6));
        assert!(
            received(&rx, 0).is_empty(),
            "the receiver's own context's frames do not"
        );
        drop_qp(tx_b);
        close(b);
        send(&tx_a, &udp(MAC1, 7));
        assert!(received(&rx, 0).is_empty(), "one context again: no loopback");

        let uc = MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC;
        let self_rx = raw_qp_flags(&a, false, Some(uc));
        // A copy (DONT_TRAP) rule, so that rx's stealing one still sees the frames too.
        let f_self = rule_flow(self_rx.qp, &"udp copy".parse().unwrap());
        assert!(!f_self.is_null(), "errno {}", errno());
        let (mine, bcast) = (udp(MAC1, 8), udp([0xff; 6], 9));
        send(&tx_a, &mine);
        send(&tx_a, &bcast);
        assert_eq!(
            received(&self_rx, 1),
            vec![mine],
            "unicast self-loopback allowed, multicast not"
        );
        assert!(received(&rx, 0).is_empty());
        assert_eq!(wire_frames() - wire0, 9, "every frame also left on the wire");
        // libmlx5 takes the flags only for raw packet QPs.
        let mut ea: ibv_qp_init_attr_ex = std::mem::zeroed();
        ea.comp_mask = IBV_QP_INIT_ATTR_PD;
        ea.pd = a.pd;
        ea.qp_type = IBV_QPT_UD;
        let mut m: mlx5dv_qp_init_attr = std::mem::zeroed();
        m.comp_mask = u64::from(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
        m.create_flags = uc;
        assert!(mlx5dv_create_qp(a.ctx, &mut ea, &mut m).is_null() && errno() == libc::EOPNOTSUPP);

        destroy_flow(f_self);
        drop_qp(self_rx);
        send(&tx_a, &udp(MAC1, 10));
        assert!(received(&rx, 0).is_empty(), "no self-loopback QP left: off");
        destroy_flow(f_rx);
        drop_qp(rx);
        drop_qp(tx_a);
        close(a);
        assert_eq!(rawpkt_model_live_objects(), 0);
    }
}
