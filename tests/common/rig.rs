//! A DV queue pair against a stepped model NIC whose two ports are back to back.

use std::rc::Rc;
use std::sync::Arc;

use mlx5_model::{Link, ModelConfig, Nic};
use mlx5_prm::MiniFormat;
use rawpkt::internals::ring::{CqInfo, SqInfo};
use rawpkt::internals::DvRxQueue;
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::{Pool, PoolConfig, QueueConfig};

pub struct Rig {
    pub nic: Arc<Nic>,
    /// The RX queue's WQ number.
    pub wq: u32,
    pub pool: Rc<Pool>,
    pub tx: DvTxQueue,
    pub rx: DvRxQueue,
    pub lkey: u32,
    pub sq: SqInfo,
    pub tx_cq: CqInfo,
    pub rx_cq: CqInfo,
}

pub fn rig(q: QueueConfig, model: ModelConfig, buffers: u32) -> Rig {
    rig_with(q, model, buffers, None)
}

/// [`rig`] with an RX CQ that compresses completions into mini-CQEs of format `rx_comp`.
pub fn rig_with(q: QueueConfig, model: ModelConfig, buffers: u32, rx_comp: Option<MiniFormat>) -> Rig {
    let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], model).unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(buffers)).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let tx_cq = nic.create_cq(q.size).unwrap();
    let sq = nic.create_sq(0, q.size, tx_cq.cqn()).unwrap();
    // Each queue's control hears the device's events for its objects and port (`dv::attention`).
    let tx_ctl = nic.control_for(0, &[tx_cq.cqn(), sq.qpn()]);
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &q, nic.caps(), tx_ctl) }.unwrap();
    let rx_cq = nic.create_cq_with(q.size, rx_comp).unwrap();
    let (rwq, wq) = nic.create_rq(1, q.size, rx_cq.cqn()).unwrap();
    let rx_ctl = nic.control_for(1, &[rx_cq.cqn(), wq]);
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    let rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, &q, rx_ctl) }.unwrap();
    Rig {
        nic,
        wq,
        pool,
        tx,
        rx,
        lkey,
        sq,
        tx_cq,
        rx_cq,
    }
}

impl Rig {
    /// Drops the queues and checks that every buffer is back and every object is gone.
    pub fn teardown(self) {
        let Rig {
            nic,
            wq: _,
            pool,
            tx,
            rx,
            lkey,
            sq,
            tx_cq,
            rx_cq,
        } = self;
        drop((tx, rx, sq, tx_cq, rx_cq));
        assert_eq!(pool.free_count(), pool.capacity(), "pool not full after teardown");
        nic.deregister_mr(lkey);
        assert_eq!(nic.live_objects(), 0, "model objects left after teardown");
    }
}
