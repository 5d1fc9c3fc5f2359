//! The model as a NIC that a buggy driver meets: WQEs written by hand (not by our datapath), each
//! violation answered with the error CQE the hardware writes, doorbell mistakes detected.

mod common;

use std::rc::Rc;
use std::sync::Arc;

use rawpkt::dv::model::{ModelConfig, Nic, Wire};
use rawpkt::dv::prm::{
    syndrome, Be32, CtrlSeg, ErrCqe, SendWqe, CQE_REQ, CQE_REQ_ERR, OPCODE_SEND, OPCODE_SEND_IMM, SEND_WQE_BB,
};
use rawpkt::dv::ring::{CqInfo, CqRing, SqInfo, SqRing};
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
    let nic = Nic::new(vec![Wire::capture()], model).unwrap();
    let pool = Pool::new(PoolConfig {
        buffers: 64,
        ..PoolConfig::default()
    })
    .unwrap();
    let lkey = nic.register_mr(pool.region());
    let cq_info = nic.create_cq(64).unwrap();
    let info = nic.create_sq(0, 64, cq_info.cqn).unwrap();
    let sq = SqRing::new(&info).unwrap();
    let cq = CqRing::new(&cq_info).unwrap();
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

impl Sq {
    /// A correct signalled one-WQEBB SEND of the reference frame at WQEBB `pi`.
    fn good(&self, pi: u32) -> SendWqe {
        let data = self.frame.data(0);
        let addr = data.as_ptr() as u64;
        let hdr = data[..18].try_into().unwrap();
        SendWqe::l2_inline(
            pi as u16,
            CtrlSeg::qpn_ds(self.info.qpn, 4),
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
    type Mutate = Option<fn(&mut Vec<rawpkt::dv::prm::DataSeg>)>;
    let cases: [(&str, ModelConfig, u16, Mutate, u8); 3] = [
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
        let w = empw_wqe(s.info.qpn, &segs, inline);
        s.post_bytes(&w);
        assert_eq!(s.next_cqe(), Some((CQE_REQ_ERR, synd, 0)), "eMPW {what}");
        assert!(s.sent().is_empty(), "eMPW {what}: nothing may reach the wire");
    }
}
