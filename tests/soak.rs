//! Soak: packets through a cross-connect between two model NICs, both directions, with faults
//! injected all along — error CQEs of every syndrome on both the forwarder's RX and TX, lost
//! doorbells, RX buffer exhaustion — ending with every pool full, every model object gone and
//! every counter balanced (each frame generated is received, or counted where it was lost).
//!
//! The forwarding loop is l2-xconnect's zero-copy one (`Direction::poll`: `rx_burst`, then
//! `tx_burst` of the same burst, what the TX ring refuses dropped and counted), written here over
//! the library's queues because the example has no way to inject faults. The model is stepped
//! on this thread, so a run is deterministic: the same seed gives the same faults at the same
//! packets.
//!
//! CI runs 2·10^6 packets; `scripts/soak.sh` runs 10^9 (`RAWPKT_SOAK_PACKETS`), docs/soak.md has
//! the measured result.
//!
//! ```text
//!   gen ─▶ A0 ══ A1 ─▶ fwd ─▶ B0 ══ B1 ─▶ sink        (and the same from B1 back to A0)
//! ```

mod common;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use common::Rng;
use mlx5_model::{Fault, Link, ModelConfig, Nic};
use mlx5_prm::syndrome;
use rawpkt::internals::ring::{CqInfo, SqInfo};
use rawpkt::internals::DvRxQueue;
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

const BURST: usize = 32;
const FRAME: usize = 60;

/// Every syndrome the PRM names for a completion error.
const SYNDROMES: [u8; 13] = [
    syndrome::LOCAL_LENGTH,
    syndrome::LOCAL_QP_OP,
    syndrome::LOCAL_PROT,
    syndrome::WR_FLUSH,
    syndrome::MW_BIND,
    syndrome::BAD_RESP,
    syndrome::LOCAL_ACCESS,
    syndrome::REMOTE_INVAL_REQ,
    syndrome::REMOTE_ACCESS,
    syndrome::REMOTE_OP,
    syndrome::TRANSPORT_RETRY_EXC,
    syndrome::RNR_RETRY_EXC,
    syndrome::REMOTE_ABORTED,
];

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => {
            let v = v.trim();
            let n = match v.split_once(['e', 'E']) {
                Some((m, e)) => m
                    .parse::<u64>()
                    .ok()
                    .zip(e.parse::<u32>().ok())
                    .map(|(m, e)| m * 10u64.pow(e)),
                None => v.parse().ok(),
            };
            n.unwrap_or_else(|| panic!("{name}={v:?}: expected a number such as 1e9"))
        }
    }
}

struct Tx {
    q: DvTxQueue,
    _sq: SqInfo,
    _cq: CqInfo,
}

struct Rx {
    q: DvRxQueue,
    _cq: CqInfo,
}

fn tx(nic: &Arc<Nic>, port: usize, lkey: u32, pool: &Rc<Pool>, cfg: &QueueConfig) -> Tx {
    let cq = nic.create_cq(cfg.size).unwrap();
    let sq = nic.create_sq(port, cfg.size, cq.cqn()).unwrap();
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let q = unsafe { DvTxQueue::new(&sq, &cq, lkey, pool, cfg, nic.caps(), nic.control()) }.unwrap();
    Tx { q, _sq: sq, _cq: cq }
}

fn rx(nic: &Arc<Nic>, port: usize, lkey: u32, pool: &Rc<Pool>, cfg: &QueueConfig) -> Rx {
    let cq = nic.create_cq(cfg.size).unwrap();
    let (rwq, wq) = nic.create_rq(port, cfg.size, cq.cqn()).unwrap();
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    let q = unsafe { DvRxQueue::new(&rwq, &cq, wq, lkey, pool, cfg, nic.control()) }.unwrap();
    Rx { q, _cq: cq }
}

/// Faults injected, by kind (syndromes by index in `SYNDROMES`).
#[derive(Default, Debug)]
struct Injected {
    tx_error: [u64; 13],
    rx_error: [u64; 13],
    rx_no_buffer: u64,
    rx_no_buffer_frames: u64,
    lost_doorbell: u64,
}

/// One direction: a generator on `nics[g].port gp`, the forwarder between the two NICs, a sink.
struct Path {
    gen: Tx,
    fwd_rx: Rx,
    fwd_tx: Tx,
    sink: Rx,
    /// (NIC, port) of: generator TX, forwarder RX, forwarder TX, sink RX.
    at: [(usize, usize); 4],
    out: Burst,
    got: Burst,
    seq: u64,
    generated: u64,
    fwd_rx_packets: u64,
    fwd_dropped: u64,
    received: u64,
    last_seq: Option<u64>,
}

impl Path {
    fn generate(&mut self) {
        let n = self.out.alloc(BURST - self.out.len(), FRAME);
        let start = self.out.len() - n;
        for i in start..self.out.len() {
            let d = self.out.data_mut(i);
            d[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
            d[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            d[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            d[14..22].copy_from_slice(&self.seq.to_be_bytes());
            self.seq += 1;
        }
        // What the ring does not take stays in `out` for the next call; the frames keep their
        // sequence numbers, so the sink still sees them in order.
        self.generated += self.gen.q.tx_burst(&mut self.out).unwrap() as u64;
    }

    fn forward(&mut self) {
        let n = self.fwd_rx.q.rx_burst(&mut self.got).unwrap();
        if n > 0 {
            self.fwd_rx_packets += n as u64;
            self.fwd_tx.q.tx_burst(&mut self.got).unwrap();
            self.fwd_dropped += self.got.len() as u64;
            self.got.clear();
        }
    }

    fn drain(&mut self) {
        loop {
            let n = self.sink.q.rx_burst(&mut self.got).unwrap();
            if n == 0 {
                return;
            }
            for i in 0..n {
                let d = self.got.data(i);
                assert_eq!(d.len(), FRAME);
                let seq = u64::from_be_bytes(d[14..22].try_into().unwrap());
                // Frames may be lost, never duplicated, reordered or changed.
                assert!(
                    self.last_seq.is_none_or(|l| seq > l),
                    "frame {seq} after {:?}",
                    self.last_seq
                );
                assert_eq!(&d[..6], &[2, 0, 0, 0, 0, 2]);
                self.last_seq = Some(seq);
            }
            self.received += n as u64;
            self.got.clear();
        }
    }
}

#[test]
fn soak_xconnect_with_faults() {
    let packets = env_u64("RAWPKT_SOAK_PACKETS", 2_000_000);
    // One fault every this many loop turns (each moves up to 2 bursts of 32), on average.
    let every = env_u64("RAWPKT_SOAK_FAULT_EVERY", 64);
    let mut rng = Rng(env_u64("RAWPKT_SOAK_SEED", 0x50a4) | 1);
    let start = Instant::now();

    let nics = [
        Nic::new(vec![Link::Peer(1), Link::Peer(0)], ModelConfig::default()).unwrap(),
        Nic::new(vec![Link::Peer(1), Link::Peer(0)], ModelConfig::default()).unwrap(),
    ];
    // One pool, as one l2-xconnect core has: buffers go from RX to TX without a copy.
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    let lkeys: Vec<u32> = nics
        .iter()
        .map(|n| n.register_mr(rawpkt::internals::pool_region(&pool)))
        .collect();
    let cfg = QueueConfig::default().size(256).recover(true);
    let path = |g: (usize, usize), f: (usize, usize), t: (usize, usize), s: (usize, usize)| Path {
        gen: tx(&nics[g.0], g.1, lkeys[g.0], &pool, &cfg),
        fwd_rx: rx(&nics[f.0], f.1, lkeys[f.0], &pool, &cfg),
        fwd_tx: tx(&nics[t.0], t.1, lkeys[t.0], &pool, &cfg),
        sink: rx(&nics[s.0], s.1, lkeys[s.0], &pool, &cfg),
        at: [g, f, t, s],
        out: Burst::new(&pool, BURST),
        got: Burst::new(&pool, 256),
        seq: 0,
        generated: 0,
        fwd_rx_packets: 0,
        fwd_dropped: 0,
        received: 0,
        last_seq: None,
    };
    let mut paths = [
        path((0, 0), (0, 1), (1, 0), (1, 1)),
        path((1, 1), (1, 0), (0, 1), (0, 0)),
    ];

    let mut inj = Injected::default();
    let mut turns = 0u64;
    while paths.iter().map(|p| p.generated).sum::<u64>() < packets {
        for p in &mut paths {
            p.generate();
        }
        for n in &nics {
            n.step();
        }
        for p in &mut paths {
            p.forward();
        }
        for n in &nics {
            n.step();
        }
        for p in &mut paths {
            p.drain();
        }
        turns += 1;
        if rng.below(every) == 0 {
            let p = &paths[rng.below(2) as usize];
            let ((fn_, fp), (tn, tp)) = (p.at[1], p.at[2]);
            match rng.below(4) {
                0 => {
                    let k = rng.below(13) as usize;
                    nics[tn].inject(tp, Fault::TxError { syndrome: SYNDROMES[k] });
                    inj.tx_error[k] += 1;
                }
                1 => {
                    let k = rng.below(13) as usize;
                    nics[fn_].inject(fp, Fault::RxError { syndrome: SYNDROMES[k] });
                    inj.rx_error[k] += 1;
                }
                2 => {
                    let frames = 1 + rng.below(600) as u32;
                    nics[fn_].inject(fp, Fault::RxNoBuffer { frames });
                    inj.rx_no_buffer += 1;
                    inj.rx_no_buffer_frames += u64::from(frames);
                }
                _ => {
                    // Either the generator's or the forwarder's doorbell.
                    let (n, port) = if rng.below(2) == 0 { p.at[0] } else { p.at[2] };
                    nics[n].inject(port, Fault::LostDoorbell);
                    inj.lost_doorbell += 1;
                }
            }
        }
    }
    // Drain: what is in flight arrives or is counted lost; a lost last doorbell is rung again.
    for _ in 0..64 {
        for n in &nics {
            n.step();
        }
        for p in &mut paths {
            p.forward();
            let _ = p.gen.q.reclaim().unwrap();
            let _ = p.fwd_tx.q.reclaim().unwrap();
            p.drain();
        }
    }
    let secs = start.elapsed().as_secs_f64();

    let mut generated = 0;
    let mut received = 0;
    for p in &mut paths {
        p.out.clear();
        let port = |(n, port): (usize, usize)| nics[n].port_counters(port);
        let (g, f, t, s) = (port(p.at[0]), port(p.at[1]), port(p.at[2]), port(p.at[3]));
        let (gs, frs, fts, ss) = (
            p.gen.q.stats(),
            p.fwd_rx.q.stats(),
            p.fwd_tx.q.stats(),
            p.sink.q.stats(),
        );
        let report = format!(
            "path {:?}: generated {} fwd rx {} fwd dropped {} received {}\n  gen {gs:?}\n  fwd rx {frs:?}\n  fwd tx {fts:?}\n  \
             sink {ss:?}\n  ports {g:?}\n  {f:?}\n  {t:?}\n  {s:?}",
            p.at, p.generated, p.fwd_rx_packets, p.fwd_dropped, p.received
        );
        eprintln!("{report}");
        // Every frame the generator's queue took went on the wire or was counted dropped by it.
        assert_eq!(p.generated, g.tx_frames + gs.drops, "{report}");
        // Every frame on the first wire reached the forwarder or is counted lost at its port.
        assert_eq!(
            g.tx_frames,
            p.fwd_rx_packets + f.rx_out_of_buffer + f.rx_wq_error + f.rx_error_cqes,
            "{report}"
        );
        assert_eq!(f.rx_unclaimed, 0, "{report}");
        // The forwarder sent, dropped at a full ring, or its queue dropped every frame it took.
        assert_eq!(p.fwd_rx_packets, t.tx_frames + fts.drops + p.fwd_dropped, "{report}");
        // No fault on the last wire: every frame on it was received, unchanged and in order.
        assert_eq!(t.tx_frames, p.received, "{report}");
        assert_eq!(
            (s.rx_out_of_buffer, s.rx_wq_error, s.rx_error_cqes),
            (0, 0, 0),
            "{report}"
        );
        generated += p.generated;
        received += p.received;
    }
    let dv: Vec<_> = nics.iter().map(|n| n.counters()).collect();
    eprintln!(
        "soak: {generated} packets generated, {received} received, {:.1} % lost to faults, in {secs:.1} s \
         ({:.2} Mpps generated), {turns} turns\n  faults injected: {inj:?}\n  devices: {dv:?}",
        100.0 * (generated - received) as f64 / generated as f64,
        generated as f64 / secs / 1e6
    );
    // Faults of every kind were injected and took effect.
    if packets >= 1_000_000 {
        assert!(inj.tx_error.iter().chain(&inj.rx_error).all(|&k| k > 0), "{inj:?}");
        assert!(inj.rx_no_buffer > 0 && inj.lost_doorbell > 0, "{inj:?}");
        assert!(dv.iter().map(|d| d.doorbells_lost).sum::<u64>() > 0);
        assert!(
            received * 2 > generated,
            "most frames must get through: {received} of {generated}"
        );
    }
    drop(paths);
    assert_eq!(pool.free_count(), pool.capacity(), "buffers lost: the pool is not full");
    for (n, lkey) in nics.iter().zip(lkeys) {
        n.deregister_mr(lkey);
        assert_eq!(n.live_objects(), 0, "model objects left");
    }
    eprintln!(
        "soak: buffers lost: 0 (pool {} of {} free)",
        pool.free_count(),
        pool.capacity()
    );
}
