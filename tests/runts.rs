//! Runts on the DV send paths, through the model device: frames of 14 to 59 bytes arrive padded
//! with zeros to 60 bytes on a ConnectX-5 (eMPW) and a ConnectX-4 (SEND, 18 inline bytes
//! required), and frames shorter than an Ethernet header cost only themselves, counted as drops.
//! The same frames go through `model:` ports opened by spec (the threaded model), and, in
//! `mlx5_model.rs` and `xdp.rs`, through the ibverbs, mlx5 and AF_XDP backends.

mod common;
#[path = "common/runts.rs"]
mod runts;

use mlx5_model::ModelConfig;
use rawpkt::internals::NicQueues;
use rawpkt::{open, Pool, PoolConfig, QueueConfig, RxQueue};

const DST: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn through_the_model(dev: ModelConfig) {
    for size in [64, 1024] {
        let q = QueueConfig::default().size(size);
        let mut r = common::rig(q, dev.clone(), 4096);
        let nic = r.nic.clone();
        runts::send_runts(&mut r.tx, &mut r.rx, &r.pool, DST, 20_000, || {
            nic.step();
        });
        let wire = r.nic.port_counters(0);
        assert_eq!(wire.tx_error_cqes, 0);
        assert_eq!(wire.tx_bytes, r.rx.stats().bytes, "the wire carries runts padded");
        r.teardown();
    }
}

#[test]
fn runts_are_padded_and_tiny_frames_dropped_alone_on_a_connectx5() {
    through_the_model(ModelConfig::default());
}

#[test]
fn runts_are_padded_and_tiny_frames_dropped_alone_on_a_connectx4() {
    through_the_model(ModelConfig::connectx4());
}

#[test]
fn runts_on_model_ports_opened_by_spec() {
    let a = open("model:runts/0").unwrap();
    let b = open("model:runts/1").unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    let q = QueueConfig::default();
    let mut tx = a.tx_queue(0, &pool, &q).unwrap();
    let mut rx = b.rx_queue(0, &pool, &q).unwrap();
    runts::send_runts(tx.as_mut(), rx.as_mut(), &pool, DST, 20_000, || {});
    let (nic, port) = rawpkt::model::nic_of(&a).unwrap();
    assert_eq!(nic.port_counters(port).tx_bytes, rx.stats().bytes);
    drop((tx, rx));
    assert_eq!(pool.free_count(), pool.capacity());
}

/// What the model's wire does with a runt a driver hands it (a SEND WQE written by hand: 18
/// inline bytes and a gather entry, 30 bytes in all): it leaves the port padded with zeros to 60
/// bytes, as a MAC pads it, and the port counts 60 bytes.
#[test]
fn the_model_wire_pads_a_runt_to_60_bytes() {
    use mlx5_model::{Link, Nic};
    use mlx5_prm::{Be32, CtrlSeg, SendWqe};
    use rawpkt::internals::ring::SqRing;
    use rawpkt::Burst;
    let nic = Nic::new(vec![Link::capture()], ModelConfig::default()).unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let cq = nic.create_cq(64).unwrap();
    let info = nic.create_sq(0, 64, cq.cqn()).unwrap();
    // SAFETY: the test posts one WQE over a buffer of its own pool, held in `b` until the model
    // has executed it (`step`), and reads no CQE.
    let mut sq = unsafe { SqRing::new(&info) }.unwrap();
    let frame = runts::frame(3, DST);
    assert_eq!(frame.len(), 35);
    let mut b = Burst::new(&pool, 1);
    assert!(b.push_copy(&frame));
    let data = b.data(0);
    let hdr = data[..18].try_into().unwrap();
    let qpn_ds = CtrlSeg::qpn_ds(info.qpn(), 4);
    *sq.wqe(0) = SendWqe::l2_inline(0, qpn_ds, true, 0, 0, hdr, 35, Be32::new(lkey), data.as_ptr() as u64);
    sq.ring_doorbell(1, 0);
    nic.step();
    assert_eq!(nic.take_captured(0), vec![runts::arrived(3, DST)]);
    assert_eq!(nic.port_counters(0).tx_bytes, 60);
    drop((b, sq, info, cq));
    nic.deregister_mr(lkey);
}
