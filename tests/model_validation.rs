//! The model as a NIC that a buggy driver meets: WQEs written by hand (not by our datapath), each
//! violation answered with the error CQE the hardware writes, doorbell mistakes detected.

mod common;

use std::rc::Rc;
use std::sync::Arc;

use mlx5_model::{Link, ModelConfig, Nic};
use mlx5_prm::{
    syndrome, Be32, CtrlSeg, DataSeg, ErrCqe, InlineMode, SendWqe, CQE_REQ, CQE_REQ_ERR, OPCODE_ENHANCED_MPSW,
    OPCODE_SEND, OPCODE_SEND_IMM, SEND_WQE_BB, WQE_CTRL_CQ_UPDATE,
};
use rawpkt::internals::ring::{CqInfo, CqRing, SqInfo, SqRing};
use rawpkt::internals::NicQueues;
use rawpkt::{Burst, Pool, PoolConfig};

struct Sq {
    nic: Arc<Nic>,
    pool: Rc<Pool>,
    lkey: u32,
    info: SqInfo,
    sq: SqRing,
    cq: CqRing,
    _cq_info: CqInfo,
    ci: u32,
    frame: Burst,
}

fn sq(model: ModelConfig) -> Sq {
    sq_on(vec![Link::capture()], model)
}

/// As `sq`, on port 0 of a NIC with these wires.
fn sq_on(wires: Vec<Link>, model: ModelConfig) -> Sq {
    let nic = Nic::new(wires, model).unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let cq_info = nic.create_cq(64).unwrap();
    let info = nic.create_sq(0, 64, cq_info.cqn()).unwrap();
    // SAFETY: these tests play a (deliberately buggy) driver against the model: they post only
    // the pool's buffers held by `frame`, and consume CQEs before publishing past them.
    let (sq, cq) = unsafe { (SqRing::new(&info).unwrap(), CqRing::new(&cq_info).unwrap()) };
    let mut frame = Burst::new(&pool, 8);
    assert!(frame.push_copy(&common::golden("frame_ipv4_udp_60")));
    Sq {
        nic,
        pool,
        lkey,
        info,
        sq,
        cq,
        _cq_info: cq_info,
        ci: 0,
        frame,
    }
}

impl Drop for Sq {
    fn drop(&mut self) {
        // Every test ends with its buffers back: the device holds none of them any more.
        self.frame.clear();
        if !std::thread::panicking() {
            assert_eq!(
                self.pool.free_count(),
                self.pool.capacity(),
                "pool not full after the test"
            );
        }
    }
}

impl Sq {
    /// A correct signalled one-WQEBB SEND of the reference frame at WQEBB `pi`.
    fn good(&self, pi: u32) -> SendWqe {
        let data = self.frame.data(0);
        let addr = data.as_ptr() as u64;
        let hdr = data[..18].try_into().unwrap();
        SendWqe::l2_inline(
            pi as u16,
            CtrlSeg::qpn_ds(self.info.qpn(), 4),
            true,
            0,
            0,
            hdr,
            60,
            Be32::new(self.lkey),
            addr,
        )
    }

    fn post(&mut self, pi: u32, wqe: SendWqe) {
        *self.sq.wqe(pi) = wqe;
        self.sq.ring_doorbell(pi + 1, pi);
        self.nic.step();
    }

    /// The next CQE, as (opcode, syndrome, wqe_counter).
    fn next_cqe(&mut self) -> Option<(u8, u8, u16)> {
        let cqe = self.cq.poll(self.ci)?;
        let err: ErrCqe = cqe.as_err();
        // Byte 0x37 is the syndrome only in an error CQE; elsewhere it is timestamp.
        let synd = if cqe.opcode() == CQE_REQ_ERR { err.syndrome } else { 0 };
        let r = (cqe.opcode(), synd, cqe.wqe_counter.get());
        self.ci += 1;
        self.cq.publish_ci(self.ci);
        Some(r)
    }

    fn sent(&self) -> Vec<Vec<u8>> {
        self.nic.take_captured(0)
    }
}

#[test]
fn a_correct_wqe_sends_the_frame_and_completes() {
    let mut s = sq(ModelConfig::default());
    let w = s.good(0);
    s.post(0, w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ, 0, 0)));
    assert_eq!(s.sent(), vec![common::golden("frame_ipv4_udp_60")]);
}

#[test]
fn each_malformed_wqe_gets_the_error_cqe_and_later_wqes_are_flushed() {
    type Mutate = fn(&mut SendWqe, &Sq);
    let cases: [(&str, Mutate, u8); 9] = [
        (
            "opcode SEND_IMM",
            |w, _| w.ctrl.opmod_idx_opcode = CtrlSeg::opmod_idx_opcode(0, 0, OPCODE_SEND_IMM),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "opc_mod 1",
            |w, _| w.ctrl.opmod_idx_opcode = CtrlSeg::opmod_idx_opcode(1, 0, OPCODE_SEND),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "wqe_index 7 at PI 0",
            |w, _| w.ctrl.opmod_idx_opcode = CtrlSeg::opmod_idx_opcode(0, 7, OPCODE_SEND),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "another QP's number",
            |w, s| w.ctrl.qpn_ds = CtrlSeg::qpn_ds(s.info.qpn() + 1, 4),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "ds 1: no Ethernet segment",
            |w, s| w.ctrl.qpn_ds = CtrlSeg::qpn_ds(s.info.qpn(), 1),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "unknown lkey",
            |w, _| w.data.lkey = Be32::new(0x4242),
            syndrome::LOCAL_PROT,
        ),
        (
            "address outside the MR",
            |w, _| w.data.addr = mlx5_prm::Be64::new(0x1000),
            syndrome::LOCAL_PROT,
        ),
        (
            "zero-length gather",
            |w, _| w.data.byte_count = Be32::new(0),
            syndrome::LOCAL_QP_OP,
        ),
        (
            "gather past the MR end",
            |w, s| {
                let end = rawpkt::internals::pool_region(&s.pool).base() as u64
                    + rawpkt::internals::pool_region(&s.pool).len() as u64;
                w.data.addr = mlx5_prm::Be64::new(end - 10);
            },
            syndrome::LOCAL_PROT,
        ),
    ];
    for (what, mutate, synd) in cases {
        // The bad WQE (unsignalled) is followed by a good signalled one that carries the
        // doorbell, so the doorbell itself is right and only the WQE check can catch it.
        let mut s = sq(ModelConfig::default());
        let mut bad = s.good(0);
        bad.ctrl.fm_ce_se = 0;
        mutate(&mut bad, &s);
        *s.sq.wqe(0) = bad;
        *s.sq.wqe(1) = s.good(1);
        s.sq.ring_doorbell(2, 1);
        s.nic.step();
        assert_eq!(s.nic.counters().doorbell_mismatch, 0, "{what}");
        // The failing WQE gets its error CQE although unsignalled; the SQ is then in error and
        // the signalled WQE after it is flushed. Nothing goes out.
        assert_eq!(s.next_cqe(), Some((CQE_REQ_ERR, synd, 0)), "{what}");
        assert_eq!(
            s.next_cqe(),
            Some((CQE_REQ_ERR, syndrome::WR_FLUSH, 1)),
            "{what}: flush"
        );
        assert!(s.sent().is_empty(), "{what}: nothing may reach the wire");
    }
}

#[test]
fn minimum_inline_is_enforced_as_configured() {
    // 14 inline bytes: fine on a ConnectX-5 (none), a LOCAL_QP_OP on a ConnectX-4 (L2: 18).
    for (inline_mode, expect) in [
        (InlineMode::L2, Some((CQE_REQ_ERR, syndrome::LOCAL_QP_OP, 0))),
        (InlineMode::None, Some((CQE_REQ, 0, 0))),
    ] {
        let mut s = sq(ModelConfig {
            inline_mode,
            ..ModelConfig::default()
        });
        let mut w = s.good(0);
        w.eth.inline_hdr_sz = mlx5_prm::Be16::new(14);
        w.data.byte_count = Be32::new(46);
        w.data.addr = mlx5_prm::Be64::new(w.data.addr.get() - 4);
        s.post(0, w);
        assert_eq!(s.next_cqe(), expect, "inline mode {inline_mode:?}");
        let sent = s.sent();
        if expect.unwrap().0 == CQE_REQ {
            assert_eq!(sent, vec![common::golden("frame_ipv4_udp_60")]);
        }
    }
}

#[test]
fn oversized_frames_fail_with_local_length() {
    let mut s = sq(ModelConfig {
        max_frame: 50,
        ..ModelConfig::default()
    });
    let w = s.good(0);
    s.post(0, w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ_ERR, syndrome::LOCAL_LENGTH, 0)));
}

#[test]
fn rdma_core_inline_data_segments_are_understood() {
    // Vector e2 is how rdma-core's ibv_post_send(IBV_SEND_INLINE) lays a frame out: 18 bytes in
    // the Ethernet segment and an inline data segment with the other 42. Our datapath never
    // writes it; the model must still send exactly the frame.
    let mut s = sq(ModelConfig::default());
    let mut e2 = common::golden("e2_wqe_send_inline18_plus_inlseg42");
    e2[1..3].copy_from_slice(&0u16.to_be_bytes());
    e2[4..8].copy_from_slice(&(s.info.qpn() << 8 | 6).to_be_bytes());
    for k in 0..2 {
        s.sq.wqebb_bytes(k)
            .copy_from_slice(&e2[k as usize * SEND_WQE_BB..][..SEND_WQE_BB]);
    }
    s.sq.ring_doorbell(2, 0);
    s.nic.step();
    assert_eq!(s.next_cqe(), Some((CQE_REQ, 0, 0)));
    assert_eq!(s.sent(), vec![common::golden("frame_ipv4_udp_60")]);
}

#[test]
fn doorbell_mistakes_are_detected_and_nothing_runs() {
    // A record that advanced with no UAR write.
    let mut s = sq(ModelConfig::default());
    *s.sq.wqe(0) = s.good(0);
    s.sq.write_record_only(1);
    s.nic.step();
    assert_eq!(s.nic.counters().doorbell_missing, 1);
    assert!(s.next_cqe().is_none() && s.sent().is_empty());

    // A UAR write naming a WQE that is not the last one behind the record (VPP's bug before
    // 3ef653aa886: ringing with the first WQE of the burst).
    let mut s = sq(ModelConfig::default());
    for pi in 0..3 {
        *s.sq.wqe(pi) = s.good(pi);
    }
    s.sq.ring_doorbell(3, 0);
    s.nic.step();
    assert_eq!(s.nic.counters().doorbell_mismatch, 1);
    assert!(s.next_cqe().is_none() && s.sent().is_empty());
    // Ringing correctly afterwards runs all three.
    s.sq.ring_doorbell(3, 2);
    s.nic.step();
    assert_eq!(s.sent().len(), 3);

    // A UAR write whose bytes differ from the WQE in memory (the WQE was changed after the
    // doorbell, or the doorbell was built from something else).
    let mut s = sq(ModelConfig::default());
    *s.sq.wqe(0) = s.good(0);
    s.sq.ring_doorbell(1, 0);
    s.sq.wqe(0).ctrl.fm_ce_se = 0;
    s.sq.wqe(0).ctrl.qpn_ds = CtrlSeg::qpn_ds(s.info.qpn(), 5);
    s.nic.step();
    assert_eq!(s.nic.counters().doorbell_mismatch, 1);
    assert!(s.sent().is_empty());
}

#[test]
fn strict_cq_detects_overrun() {
    let mut s = sq(ModelConfig::default());
    // 64 asked → 128 CQEs; never consuming them, the 129th completion overruns.
    for pi in 0..130 {
        let w = s.good(pi);
        *s.sq.wqe(pi) = w;
        s.sq.ring_doorbell(pi + 1, pi);
        s.nic.step();
    }
    // Completions 129 and 130 find the CQ full: not written, counted.
    assert_eq!(s.nic.counters().cq_overruns, 2);
}

#[test]
fn the_trace_records_every_wqe_and_cqe_in_the_documented_format() {
    let path = std::env::temp_dir().join(format!("rawpkt-trace-{}.txt", std::process::id()));
    {
        let mut s = sq(ModelConfig {
            trace: Some(path.clone()),
            ..ModelConfig::default()
        });
        for pi in 0..5 {
            let w = s.good(pi);
            s.post(pi, w);
            s.next_cqe().unwrap();
        }
        s.nic.flush_trace();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(text.starts_with("# rawpkt mlx5 model trace v2\n"));
    let wqes: Vec<&str> = text.lines().filter(|l| l.starts_with("WQE ")).collect();
    let cqes: Vec<&str> = text.lines().filter(|l| l.starts_with("CQE ")).collect();
    assert_eq!((wqes.len(), cqes.len()), (5, 5));
    // WQE <seq> qpn=<hex> pi=<n> bbs=<n> <hex>: the bytes are the WQE as written.
    let f: Vec<&str> = wqes[2].split(' ').collect();
    assert_eq!((f[3], f[4], f[5].len()), ("pi=2", "bbs=1", 128));
    assert!(f[5].starts_with("0000020a"), "wqe_index 2, opcode SEND: {}", f[5]);
    let c: Vec<&str> = cqes[0].split(' ').collect();
    assert_eq!(c[3], "pi=0");
    assert_eq!(&c[4][120..128], "00000000", "wqe_counter 0, op_own REQ owner 0");
    assert!(text.lines().any(|l| l.starts_with("EV ") && l.contains("DOORBELL ")));
}

/// An eMPW WQE at WQEBB 0 by hand: title (control + empty Ethernet segment) and one data
/// segment per packet, as DPDK's `mlx5_tx_burst_empw_simple` lays it out.
fn empw_wqe(qpn: u32, segs: &[DataSeg], inline_hdr_sz: u16) -> Vec<u8> {
    let ds = 2 + segs.len() as u8;
    let mut w = vec![0u8; (usize::from(ds) * 16).div_ceil(64) * 64];
    w[0..4].copy_from_slice(
        &CtrlSeg::opmod_idx_opcode(0, 0, OPCODE_ENHANCED_MPSW)
            .get()
            .to_be_bytes(),
    );
    w[4..8].copy_from_slice(&CtrlSeg::qpn_ds(qpn, ds).get().to_be_bytes());
    w[11] = WQE_CTRL_CQ_UPDATE;
    w[28..30].copy_from_slice(&inline_hdr_sz.to_be_bytes());
    for (k, seg) in segs.iter().enumerate() {
        w[32 + 16 * k..48 + 16 * k].copy_from_slice(&seg.to_bytes());
    }
    w
}

impl Sq {
    fn post_bytes(&mut self, wqe: &[u8]) {
        for (k, bb) in wqe.chunks(SEND_WQE_BB).enumerate() {
            self.sq.wqebb_bytes(k as u32).copy_from_slice(bb);
        }
        self.sq.ring_doorbell(wqe.len() as u32 / 64, 0);
        self.nic.step();
    }

    /// Three packets of the pool: the reference frame with its last byte 0, 1 and 2.
    fn three_packets(&mut self) -> (Vec<DataSeg>, Vec<Vec<u8>>) {
        let mut frames = Vec::new();
        let mut segs = Vec::new();
        for k in 0..3u8 {
            let mut f = common::golden("frame_ipv4_udp_60");
            f[59] = k;
            assert!(self.frame.push_copy(&f));
            let addr = self.frame.data(self.frame.len() - 1).as_ptr() as u64;
            segs.push(DataSeg::new(60, self.lkey, addr));
            frames.push(f);
        }
        (segs, frames)
    }
}

#[test]
fn an_empw_wqe_sends_one_frame_per_data_segment() {
    let mut s = sq(ModelConfig::default());
    let (segs, frames) = s.three_packets();
    let w = empw_wqe(s.info.qpn(), &segs, 0);
    s.post_bytes(&w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ, 0, 0)), "one completion for the whole WQE");
    assert_eq!(s.sent(), frames);
}

#[test]
fn empw_is_refused_where_the_device_cannot_do_it_or_the_wqe_is_wrong() {
    // A ConnectX-4 has no eMPW; a title with inline bytes, or a bad lkey in any packet, fails the
    // whole WQE, and nothing of it reaches the wire.
    type MutateSegs = Option<fn(&mut Vec<DataSeg>)>;
    let bad_lkey: fn(&mut Vec<DataSeg>) = |segs| segs[2].lkey = Be32::new(0x4242);
    let cases: [(&str, ModelConfig, u16, MutateSegs, u8); 3] = [
        (
            "on a ConnectX-4",
            ModelConfig::connectx4(),
            0,
            None,
            syndrome::LOCAL_QP_OP,
        ),
        (
            "with inline_hdr_sz 18",
            ModelConfig::default(),
            18,
            None,
            syndrome::LOCAL_QP_OP,
        ),
        (
            "with a bad lkey in the third packet",
            ModelConfig::default(),
            0,
            Some(bad_lkey),
            syndrome::LOCAL_PROT,
        ),
    ];
    for (what, dev, inline, mutate, synd) in cases {
        let mut s = sq(dev);
        let (mut segs, _) = s.three_packets();
        if let Some(m) = mutate {
            m(&mut segs);
        }
        let w = empw_wqe(s.info.qpn(), &segs, inline);
        s.post_bytes(&w);
        assert_eq!(s.next_cqe(), Some((CQE_REQ_ERR, synd, 0)), "eMPW {what}");
        assert!(s.sent().is_empty(), "eMPW {what}: nothing may reach the wire");
    }
}

/// Frames that nothing on the far side reads (the peer port has no receive queue) are counted
/// without their bytes being copied, but only after every check a WQE gets: a bad gather entry
/// still fails the whole WQE, and then nothing is counted as sent.
#[test]
fn frames_no_one_receives_are_checked_then_counted() {
    let pair = || vec![Link::Peer(1), Link::Peer(0)];
    let mut s = sq_on(pair(), ModelConfig::default());
    let (segs, _) = s.three_packets();
    let w = empw_wqe(s.info.qpn(), &segs, 0);
    s.post_bytes(&w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ, 0, 0)));
    let (tx, rx) = (s.nic.port_counters(0), s.nic.port_counters(1));
    assert_eq!((tx.tx_frames, tx.tx_bytes, rx.rx_unclaimed), (3, 180, 3));

    let mut s = sq_on(pair(), ModelConfig::default());
    let (mut segs, _) = s.three_packets();
    // The last packet's range runs one byte past the end of the pool's MR.
    let end =
        rawpkt::internals::pool_region(&s.pool).base() as u64 + rawpkt::internals::pool_region(&s.pool).len() as u64;
    segs[2] = DataSeg::new(60, s.lkey, end - 59);
    let w = empw_wqe(s.info.qpn(), &segs, 0);
    s.post_bytes(&w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ_ERR, syndrome::LOCAL_PROT, 0)));
    let (tx, rx) = (s.nic.port_counters(0), s.nic.port_counters(1));
    assert_eq!((tx.tx_frames, tx.tx_error_cqes, rx.rx_unclaimed), (0, 1, 0));
}

/// An eMPW WQE whose packets name two MRs, one of them inline: not the one-pass case (one MR,
/// pointer entries only), so the general loop checks and sends it, every frame in order.
#[test]
fn an_empw_wqe_mixing_mrs_and_an_inline_packet_sends_every_frame() {
    let mut s = sq(ModelConfig::default());
    let (segs, frames) = s.three_packets();
    let other = Pool::new(PoolConfig::default().buffers(8)).unwrap();
    let lkey2 = s.nic.register_mr(rawpkt::internals::pool_region(&other));
    let mut b = Burst::new(&other, 1);
    let mut f3 = common::golden("frame_ipv4_udp_60");
    f3[59] = 9;
    assert!(b.push_copy(&f3));
    let seg2 = DataSeg::new(60, lkey2, b.data(0).as_ptr() as u64);
    let mut body = Vec::new();
    body.extend_from_slice(&segs[0].to_bytes());
    body.extend_from_slice(&seg2.to_bytes());
    body.extend_from_slice(&(0x8000_0000u32 | 60).to_be_bytes());
    body.extend_from_slice(&frames[1]);
    body.resize(body.len().div_ceil(16) * 16, 0);
    body.extend_from_slice(&segs[2].to_bytes());
    let mut w = empw_wqe(s.info.qpn(), &[], 0);
    w.truncate(32);
    w.extend_from_slice(&body);
    let ds = (w.len() / 16) as u8;
    w[4..8].copy_from_slice(&CtrlSeg::qpn_ds(s.info.qpn(), ds).get().to_be_bytes());
    w.resize(w.len().div_ceil(64) * 64, 0);
    s.post_bytes(&w);
    assert_eq!(s.next_cqe(), Some((CQE_REQ, 0, 0)));
    assert_eq!(
        s.sent(),
        vec![frames[0].clone(), f3, frames[1].clone(), frames[2].clone()]
    );
}

/// A send CQE names the opcode of the WQE it completes in `sop_drop_qpn[31:24]`, as rdma-core's
/// `handle_good_req` (providers/mlx5/cq.c) reads it: SEND 0x0a, enhanced MPW 0x29.
#[test]
fn a_send_cqe_carries_the_opcode_of_the_wqe_it_completes() {
    for (empw, want) in [(false, OPCODE_SEND), (true, OPCODE_ENHANCED_MPSW)] {
        let mut s = sq(ModelConfig::default());
        if empw {
            let (segs, _) = s.three_packets();
            let w = empw_wqe(s.info.qpn(), &segs, 0);
            s.post_bytes(&w);
        } else {
            let w = s.good(0);
            s.post(0, w);
        }
        let cqe = s.cq.poll(0).expect("a CQE");
        assert_eq!(cqe.opcode(), CQE_REQ);
        assert_eq!(cqe.sop_drop_qpn.get() >> 24, u32::from(want), "empw {empw}");
        assert_eq!(cqe.sop_drop_qpn.get() & 0xff_ffff, s.info.qpn());
    }
}
