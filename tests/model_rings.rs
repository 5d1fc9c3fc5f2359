//! The model device driven through the driver's ring views: its steering (flows, TIRs, what is
//! left to Linux), its doorbells and its send queues' turns.

use mlx5_model::{Link, ModelConfig, Nic, RqState, SQ_TURN_BBS};
use mlx5_prm::{Cqe64, DataSeg, CQE_RESP_SEND};
use rawpkt::internals::ring::{CqRing, RqRing};
use rawpkt::internals::NicQueues;
use rawpkt_wire::rule::FlowRule;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn frame(dst: [u8; 6], sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&dst);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&[0x45, 0, 0, 50]);
    f[22] = 64;
    f[23] = 17;
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&[0, 53]);
    f[38..40].copy_from_slice(&[0, 30]);
    f
}

/// WQs made for verbs start in RESET outside the port's RSS set; flows steer to a TIR over
/// them; what nothing steals is Linux's; a RESP CQE names its WQ in `srqn_uidx`.
#[test]
fn flows_steer_to_tirs_and_the_rest_goes_to_linux() {
    let nic = Nic::pair(ModelConfig::default()).unwrap();
    nic.enable_steering(1);
    let mut buf = vec![0u8; 8 * 2048];
    // SAFETY: `buf` outlives the NIC's use of it: deregistered below, before it drops.
    let lkey = unsafe { nic.register_mr_raw(buf.as_mut_ptr() as u64, buf.len() as u64) };
    let cq = nic.create_cq(16).unwrap();
    let (rwq_a, wq_a) = nic.create_wq(1, 4, cq.cqn()).unwrap();
    let (rwq_b, wq_b) = nic.create_wq(1, 4, cq.cqn()).unwrap();
    // SAFETY: the model's own rings; this test is their only driver.
    let (ra, rb, cqr) = unsafe { (RqRing::new(&rwq_a), RqRing::new(&rwq_b), CqRing::new(&cq)) };
    let (mut ra, mut rb, cqr) = (ra.unwrap(), rb.unwrap(), cqr.unwrap());
    for (k, r) in [&mut ra, &mut rb].into_iter().enumerate() {
        for i in 0..4u32 {
            let at = buf.as_ptr() as u64 + (k as u64 * 4 + u64::from(i)) * 2048;
            *r.wqe(i) = DataSeg::new(2048, lkey, at);
        }
        r.ring_doorbell(4);
    }
    let tir = nic
        .create_tir(vec![wq_a, wq_b], &rawpkt_wire::rss::DEFAULT_KEY, 0xc3)
        .unwrap();
    nic.add_flow(1, FlowRule::own_mac(MAC), tir).unwrap();
    // WQs in RESET drop what reaches them.
    nic.inject_frame(1, &frame(MAC, 1));
    assert_eq!(nic.port_counters(1).rx_wq_error, 1);
    nic.set_rq_state(wq_a, RqState::Ready).unwrap();
    nic.set_rq_state(wq_b, RqState::Ready).unwrap();
    for sport in 0..6 {
        nic.inject_frame(1, &frame(MAC, sport));
    }
    nic.inject_frame(1, &frame([2, 0, 0, 0, 0, 9], 0));
    let c = nic.port_counters(1);
    assert_eq!((c.rx_frames, c.rx_unclaimed), (6, 1));
    let mut per_wq = [0; 2];
    for ci in 0..6 {
        let cqe: Cqe64 = cqr.poll(ci).unwrap();
        assert_eq!(cqe.opcode(), CQE_RESP_SEND);
        let wq = cqe.srqn_uidx.get() & 0xff_ffff;
        per_wq[usize::from(wq == wq_b)] += 1;
        assert!(wq == wq_a || wq == wq_b);
    }
    assert!(per_wq[0] > 0 && per_wq[1] > 0, "RSS spreads over both WQs: {per_wq:?}");
    // Without the flow everything is Linux's.
    nic.destroy_tir(tir);
    assert_eq!(nic.flows(1), 0);
    nic.inject_frame(1, &frame(MAC, 0));
    assert_eq!(nic.port_counters(1).rx_unclaimed, 2);
    nic.deregister_mr(lkey);
    drop((ra, rb, cqr, rwq_a, rwq_b, cq));
    assert_eq!(nic.live_objects(), 0);
}

/// A UAR write of 0 is a doorbell: a WQE whose first 8 bytes are 0 (NOP, index 0, QPN 0,
/// ds 0) is taken and fails with LOCAL_QP_OP (QPN and ds are wrong), as hardware takes
/// every write; it is not mistaken for "no doorbell" (counted in `doorbell_missing`).
#[test]
fn a_uar_write_of_zero_is_a_doorbell() {
    let nic = Nic::new(vec![Link::capture()], ModelConfig::default()).unwrap();
    let cq = nic.create_cq(8).unwrap();
    let sq = nic.create_sq(0, 8, cq.cqn()).unwrap();
    // SAFETY: the model's own rings; this test is their only driver.
    let (mut ring, cqr) = unsafe { (rawpkt::internals::ring::SqRing::new(&sq), CqRing::new(&cq)) };
    let (ring, cqr) = (ring.as_mut().unwrap(), cqr.unwrap());
    *ring.wqe(0) = mlx5_prm::SendWqe::default();
    ring.ring_doorbell(1, 0);
    nic.step();
    let c = nic.counters();
    assert_eq!((c.doorbells, c.doorbell_missing, c.wqes), (1, 0, 1));
    let cqe = mlx5_prm::ErrCqe::from_bytes(&nic.cq_slot(cq.cqn(), 0).unwrap());
    assert_eq!(cqe.op_own >> 4, mlx5_prm::CQE_REQ_ERR);
    assert_eq!(cqe.syndrome, mlx5_prm::syndrome::LOCAL_QP_OP);
    assert_eq!(nic.port_counters(0).tx_error_cqes, 1);
    drop(cqr);
}

/// A send queue outside RTS ignores its doorbells.
#[test]
fn an_sq_that_is_not_ready_ignores_doorbells() {
    let nic = Nic::new(vec![Link::capture()], ModelConfig::default()).unwrap();
    let cq = nic.create_cq(8).unwrap();
    let sq = nic.create_sq(0, 8, cq.cqn()).unwrap();
    nic.set_sq_state(sq.qpn(), false, false).unwrap();
    let mut buf = vec![0u8; 128];
    // SAFETY: `buf` outlives the NIC's use of it.
    let lkey = unsafe { nic.register_mr_raw(buf.as_mut_ptr() as u64, 128) };
    buf[..6].copy_from_slice(&MAC);
    // SAFETY: the model's own ring; this test is its only driver.
    let mut ring = unsafe { rawpkt::internals::ring::SqRing::new(&sq) }.unwrap();
    let hdr: [u8; 18] = buf[..18].try_into().unwrap();
    let qpn_ds = mlx5_prm::CtrlSeg::qpn_ds(sq.qpn(), 4);
    let wqe = mlx5_prm::SendWqe::l2_inline(
        0,
        qpn_ds,
        true,
        0,
        0,
        hdr,
        60,
        mlx5_prm::Be32::new(lkey),
        buf.as_ptr() as u64,
    );
    *ring.wqe(0) = wqe;
    ring.ring_doorbell(1, 0);
    nic.step();
    assert_eq!(nic.port_counters(0).tx_frames, 0);
    nic.set_sq_state(sq.qpn(), true, false).unwrap();
    *ring.wqe(0) = wqe;
    ring.ring_doorbell(1, 0);
    nic.step();
    assert_eq!(nic.take_captured(0), vec![buf[..60].to_vec()]);
    nic.deregister_mr(lkey);
}

/// Send queues take turns within a step: a frame doorbelled on a quiet queue leaves after
/// one turn of a busy queue (SQ_TURN_BBS WQEBBs), not after its whole backlog; the step
/// still runs every doorbelled WQE. Without the turns the quiet queue's frame would leave last.
#[test]
fn a_quiet_send_queue_waits_one_turn_of_a_busy_one() {
    let nic = Nic::new(vec![Link::capture()], ModelConfig::default()).unwrap();
    let cq = nic.create_cq(256).unwrap();
    let (busy, quiet) = (
        nic.create_sq(0, 128, cq.cqn()).unwrap(),
        nic.create_sq(0, 8, cq.cqn()).unwrap(),
    );
    let mut buf = vec![0u8; 128];
    // SAFETY: `buf` outlives the NIC's use of it.
    let lkey = unsafe { nic.register_mr_raw(buf.as_mut_ptr() as u64, 128) };
    let wqe = |qpn: u32, idx: u16, mark: u8| {
        let mut hdr = [0u8; 18];
        hdr[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        hdr[17] = mark;
        mlx5_prm::SendWqe::l2_inline(
            idx,
            mlx5_prm::CtrlSeg::qpn_ds(qpn, 4),
            false,
            0,
            0,
            hdr,
            60,
            mlx5_prm::Be32::new(lkey),
            buf.as_ptr() as u64,
        )
    };
    // SAFETY: the model's own rings; this test is their only driver.
    let (mut b, mut q) = unsafe {
        (
            rawpkt::internals::ring::SqRing::new(&busy),
            rawpkt::internals::ring::SqRing::new(&quiet),
        )
    };
    let (b, q) = (b.as_mut().unwrap(), q.as_mut().unwrap());
    let backlog = 3 * SQ_TURN_BBS;
    for k in 0..backlog {
        *b.wqe(k) = wqe(busy.qpn(), k as u16, 1);
    }
    b.ring_doorbell(backlog, backlog - 1);
    *q.wqe(0) = wqe(quiet.qpn(), 0, 2);
    q.ring_doorbell(1, 0);
    nic.step();
    let frames = nic.take_captured(0);
    assert_eq!(frames.len(), backlog as usize + 1, "every doorbelled WQE in one step");
    let at = frames.iter().position(|f| f[17] == 2).expect("the quiet queue's frame");
    assert_eq!(at, SQ_TURN_BBS as usize, "after one turn of the busy queue");
    assert_eq!(nic.counters().doorbells, 2, "a doorbell run in turns counts once");
    nic.deregister_mr(lkey);
}
