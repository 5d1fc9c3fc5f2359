//! Frames longer than one buffer (jumbo, up to 9000 bytes) and VLAN offloads through the DV
//! datapath and the model: chained packets out (multi-segment SENDs), multi-buffer receive WQEs
//! in, byte-identical frames, tags inserted on the wire and stripped on receive, faults that lose
//! no buffer.

mod common;

use std::rc::Rc;
use std::sync::Arc;

use mlx5_model::{Fault, Link, ModelConfig, Nic, RqOptions};
use rawpkt::internals::ring::{CqInfo, SqInfo};
use rawpkt::internals::DvRxQueue;
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::{flags, Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

struct Rig {
    nic: Arc<Nic>,
    pool: Rc<Pool>,
    tx: DvTxQueue,
    rx: DvRxQueue,
    lkey: u32,
    _keep: (SqInfo, CqInfo, CqInfo),
}

fn rig(q: &QueueConfig, dev: ModelConfig, pool: PoolConfig) -> Rig {
    let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], dev).unwrap();
    let pool = Pool::new(pool).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let tx_cq = nic.create_cq(q.size).unwrap();
    let sq = nic.create_sq(0, q.size, tx_cq.cqn()).unwrap();
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, q, nic.caps(), nic.control()) }.unwrap();
    let rx_cq = nic.create_cq(q.size).unwrap();
    let sge = q.rx_max_frame.div_ceil(pool.data_room()).max(1);
    let opts = RqOptions {
        max_sge: sge,
        strip_cvlan: q.rx_vlan_strip,
        ..RqOptions::default()
    };
    let (rwq, wq) = nic.create_rq_with(1, q.size, rx_cq.cqn(), opts).unwrap();
    // SAFETY: as above.
    let rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, q, nic.control()) }.unwrap();
    Rig {
        nic,
        pool,
        tx,
        rx,
        lkey,
        _keep: (sq, tx_cq, rx_cq),
    }
}

impl Rig {
    /// Drops the queues; every buffer must be back in the pool.
    fn teardown(self) {
        let Rig {
            nic,
            pool,
            tx,
            rx,
            lkey,
            _keep,
        } = self;
        drop((tx, rx, _keep));
        assert_eq!(pool.free_count(), pool.capacity(), "a buffer was lost");
        nic.deregister_mr(lkey);
    }
}

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Frame `seq` of `len` bytes: unicast, an experimental EtherType (0x88b5), the sequence number
/// after it, then bytes that depend on both.
fn frame(seq: u64, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (seq as u8).wrapping_mul(31).wrapping_add((i as u8) ^ (i >> 8) as u8))
        .collect();
    f[0] &= 0xfe;
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..22].copy_from_slice(&seq.to_be_bytes());
    f
}

fn jumbo_queue(rx_vlan_strip: bool) -> QueueConfig {
    QueueConfig::default()
        .size(256)
        .rx_max_frame(9000)
        .rx_vlan_strip(rx_vlan_strip)
}

/// Sends `total` frames of random lengths 60..=9000 (a third of them up to 1514), some with a
/// VLAN tag to insert when `tags`, and checks every received frame byte for byte, and its tag.
fn run(dev: ModelConfig, total: u64, tags: bool, seed: u64) {
    let q = jumbo_queue(tags);
    let mut r = rig(&q, dev, PoolConfig::default());
    let mut rng = seed;
    let mut out = Burst::new(&r.pool, 32);
    let mut got = Burst::new(&r.pool, 64);
    let mut sent = Vec::new();
    let (mut next_rx, mut chained, mut tagged) = (0u64, 0u64, 0u64);
    let mut copy = vec![0u8; 9000];
    let mut steps = 0u64;
    while next_rx < total {
        if out.is_empty() && (sent.len() as u64) < total {
            for _ in 0..1 + next(&mut rng) % 16 {
                if sent.len() as u64 == total {
                    break;
                }
                let len = if next(&mut rng).is_multiple_of(3) {
                    60 + next(&mut rng) as usize % 1455
                } else {
                    60 + next(&mut rng) as usize % 8941
                };
                assert!(out.push_frame(&frame(sent.len() as u64, len)), "pool ran dry");
                let tci = (tags && next(&mut rng).is_multiple_of(3)).then(|| next(&mut rng) as u16);
                if tci.is_some() {
                    out.set_vlan(out.len() - 1, tci);
                }
                sent.push((len, tci));
            }
        }
        r.tx.tx_burst(&mut out).unwrap();
        r.nic.step();
        steps += 1;
        r.rx.rx_burst(&mut got).unwrap();
        for i in 0..got.len() {
            let (len, tci) = sent[next_rx as usize];
            let p = *got.packet(i);
            assert_eq!(p.len(), len, "length of frame {next_rx}");
            assert_eq!(p.is_chained(), len > r.pool.data_room() as usize, "frame {next_rx}");
            assert_eq!(got.copy_frame(i, &mut copy), Some(len));
            assert!(
                copy[..len] == frame(next_rx, len)[..],
                "bytes of frame {next_rx} differ"
            );
            let seg_sum: usize = got.segments(i).map(<[u8]>::len).sum();
            assert_eq!(seg_sum, len);
            match tci {
                Some(t) => {
                    assert_ne!(p.flags() & flags::VLAN_STRIPPED, 0, "frame {next_rx}");
                    assert_eq!(p.vlan_tci(), t, "frame {next_rx}");
                    tagged += 1;
                }
                None => assert_eq!(p.flags() & flags::VLAN_STRIPPED, 0, "frame {next_rx}"),
            }
            chained += u64::from(p.is_chained());
            next_rx += 1;
        }
        got.clear();
        assert!(steps < total * 4, "no progress");
    }
    drop((out, got));
    while r.tx.in_flight() > 0 {
        r.nic.step();
        r.tx.reclaim().unwrap();
    }
    assert!(chained > total / 2, "chained frames: {chained} of {total}");
    assert!(!tags || tagged > total / 5, "tagged frames: {tagged} of {total}");
    assert_eq!(r.rx.stats().packets, total);
    assert_eq!(r.tx.stats().drops + r.rx.stats().drops, 0);
    assert_eq!(r.rx.stats().errors.total() + r.tx.stats().errors.total(), 0);
    let c = r.nic.counters();
    assert_eq!((c.doorbell_missing, c.doorbell_mismatch, c.cq_overruns), (0, 0, 0));
    r.teardown();
}

#[test]
fn jumbo_frames_cross_byte_identical_on_a_connectx5() {
    run(common::device(), 100_000, false, 0x5eed_0001);
}

#[test]
fn jumbo_frames_cross_byte_identical_on_a_connectx4() {
    run(common::device_cx4(), 100_000, false, 0x5eed_0002);
}

#[test]
fn tags_inserted_on_send_are_stripped_on_receive_with_their_tci() {
    run(common::device(), 5_000, true, 0x5eed_0003);
    run(common::device_cx4(), 5_000, true, 0x5eed_0004);
}

/// Without stripping, an inserted tag arrives in the frame, after the MAC addresses.
#[test]
fn an_inserted_tag_is_on_the_wire() {
    for dev in [common::device(), common::device_cx4()] {
        let mut r = rig(&jumbo_queue(false), dev, PoolConfig::default());
        let mut out = Burst::new(&r.pool, 4);
        let (short, long) = (frame(1, 60), frame(2, 5000));
        out.push_frame(&short);
        out.push_frame(&long);
        out.set_vlan(0, Some(0x6123));
        out.set_vlan(1, Some(0x0fff));
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 2);
        r.nic.step();
        let mut got = Burst::new(&r.pool, 4);
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 2);
        for (i, (f, tci)) in [(&short, 0x6123u16), (&long, 0x0fff)].into_iter().enumerate() {
            let mut want = f.clone();
            want.splice(12..12, [0x81, 0x00, (tci >> 8) as u8, tci as u8]);
            let mut copy = vec![0u8; 9100];
            let n = got.copy_frame(i, &mut copy).unwrap();
            assert!(copy[..n] == want[..], "frame {i}");
            assert_eq!(got.packet(i).flags() & flags::VLAN_STRIPPED, 0);
        }
        drop((out, got));
        r.nic.step();
        r.tx.reclaim().unwrap();
        r.teardown();
    }
}

/// Receive errors on multi-buffer WQEs (one that only consumes the WQE, and one that resets the
/// queue) lose no buffer, and frames after them arrive whole.
#[test]
fn receive_errors_on_scatter_wqes_lose_no_buffer() {
    for synd in [0x01u8 /* LOCAL_LENGTH */, 0x04 /* LOCAL_PROT: queue reset */] {
        let mut r = rig(&jumbo_queue(false), common::device(), PoolConfig::default());
        let mut out = Burst::new(&r.pool, 8);
        let mut got = Burst::new(&r.pool, 8);
        r.nic.inject(1, Fault::RxError { syndrome: synd });
        for k in 0..6 {
            assert!(out.push_frame(&frame(k, 7000)));
        }
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 6);
        r.nic.step();
        r.rx.rx_burst(&mut got).unwrap();
        assert_eq!(r.rx.stats().errors.total(), 1, "syndrome {synd:#x}");
        // The frame that met the error is gone; the rest arrive (a reset drops what completed
        // after the error).
        let first = got.packets().first().map(|p| p.len());
        assert!(got.len() <= 5 && first.is_none_or(|l| l == 7000));
        for i in 0..got.len() {
            let mut copy = vec![0u8; 7000];
            got.copy_frame(i, &mut copy).unwrap();
            assert_eq!(copy[12..14], [0x88, 0xb5]);
        }
        got.clear();
        // The queue still takes jumbo frames.
        for k in 0..4 {
            assert!(out.push_frame(&frame(100 + k, 9000)));
        }
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 4);
        r.nic.step();
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 4, "syndrome {synd:#x}");
        let mut copy = vec![0u8; 9000];
        for i in 0..4 {
            got.copy_frame(i, &mut copy).unwrap();
            assert!(copy == frame(100 + i as u64, 9000), "syndrome {synd:#x}");
        }
        drop((out, got));
        r.nic.step();
        r.tx.reclaim().unwrap();
        r.teardown();
    }
}

/// A burst of chains longer than the send queue holds goes out over several calls (nothing is
/// dropped, nothing lost), and a chain of more segments than a WQE can gather is dropped and
/// counted with all its buffers back in the pool.
#[test]
fn chains_that_do_not_fit_wait_or_are_dropped_whole() {
    for dev in [common::device(), common::device_cx4()] {
        let q = QueueConfig::default().size(8).rx_max_frame(9000);
        let mut r = rig(&q, dev.clone(), PoolConfig::default());
        let mut out = Burst::new(&r.pool, 16);
        let mut got = Burst::new(&r.pool, 16);
        for k in 0..12 {
            assert!(out.push_frame(&frame(k, 9000)));
        }
        let first = r.tx.tx_burst(&mut out).unwrap();
        assert!(first < 12, "an 8-WQEBB queue took {first} five-segment chains at once");
        let (mut sent, mut seen) = (first, 0);
        let mut copy = vec![0u8; 9000];
        for _ in 0..64 {
            r.nic.step();
            r.rx.rx_burst(&mut got).unwrap();
            for i in 0..got.len() {
                got.copy_frame(i, &mut copy).unwrap();
                assert!(copy == frame(seen, 9000));
                seen += 1;
            }
            got.clear();
            sent += r.tx.tx_burst(&mut out).unwrap();
        }
        assert_eq!((sent, seen), (12, 12));
        assert_eq!(r.tx.stats().drops, 0);
        drop((out, got));
        r.teardown();

        // 256-byte buffers with 128 of headroom: a 9000-byte frame is 71 segments, more than
        // a send WQE's 60 DS.
        let small = PoolConfig::default().buffers(1024).buf_size(256).headroom(128);
        let q = QueueConfig::default().size(64);
        let mut r = rig(&q, dev.clone(), small);
        let mut out = Burst::new(&r.pool, 4);
        assert!(out.push_frame(&frame(0, 9000)));
        assert!(out.push_frame(&frame(1, 1000)));
        assert_eq!(out.segment_count(0), 71);
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 2);
        assert_eq!(r.tx.stats().drops, 1);
        r.nic.step();
        r.tx.reclaim().unwrap();
        drop(out);
        r.teardown();

        // 40 segments: a WQE of 11 WQEBBs, longer than a send queue of 8 can ever hold.
        let q = QueueConfig::default().size(8);
        let mut r = rig(&q, dev, small);
        let mut out = Burst::new(&r.pool, 4);
        assert!(out.push_frame(&frame(0, 5000)));
        assert_eq!(out.segment_count(0), 40);
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 1, "dropped, not retried forever");
        assert_eq!(r.tx.stats().drops, 1);
        drop(out);
        r.teardown();
    }
}

/// Through `model:` ports opened by spec (the backend makes the receive WQ with the segments
/// `rx_max_frame` needs and CVLAN stripping): a jumbo frame with a tag to insert arrives whole,
/// its tag stripped and handed up.
#[test]
fn model_ports_take_rx_max_frame_and_rx_vlan_strip() {
    let a = rawpkt::open("model:sgspec/0").unwrap();
    let b = rawpkt::open("model:sgspec/1").unwrap();
    let pool = Pool::new(PoolConfig::default()).unwrap();
    let mut tx = a.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
    let mut rx = b.rx_queue(0, &pool, &jumbo_queue(true)).unwrap();
    let mut out = Burst::new(&pool, 4);
    let f = frame(7, 9000);
    assert!(out.push_frame(&f));
    out.set_vlan(0, Some(0x0123));
    while tx.tx_burst(&mut out).unwrap() == 0 {}
    let mut got = Burst::new(&pool, 4);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while got.is_empty() {
        rx.rx_burst(&mut got).unwrap();
        assert!(std::time::Instant::now() < deadline, "nothing arrived");
    }
    let mut copy = vec![0u8; 9000];
    assert_eq!(got.copy_frame(0, &mut copy), Some(9000));
    assert!(copy == f);
    let p = got.packet(0);
    assert_eq!(
        (p.flags() & flags::VLAN_STRIPPED, p.vlan_tci()),
        (flags::VLAN_STRIPPED, 0x0123)
    );
    assert!(p.is_chained());
    drop((out, got, rx));
    while tx.in_flight() > 0 {
        tx.reclaim().unwrap();
    }
    drop(tx);
    assert_eq!(pool.free_count(), pool.capacity());
}
