//! CQE compression on receive CQs (reference §3.11-3.12): the model writes a step's receive
//! completions as compressed sessions (a title CQE and arrays of eight 8-byte mini-CQEs), the DV
//! receive queue expands them. Frames arrive byte-identical on both devices, sessions end at the
//! CQ's end and follow owner flips, error CQEs sit between sessions, and every buffer comes back.

mod common;

use common::{fill_frame, frame_len, rig_with, seq_of, Rig, Rng};
use mlx5_model::{Fault, ModelConfig};
use mlx5_prm::{cqe_flags, syndrome, Cqe64, MiniFormat, CQE_INVALIDATE};
use rawpkt::internals::NicQueues;
use rawpkt::{flags, Burst, QueueConfig, RxQueue, TxQueue};

const HASH: Option<MiniFormat> = Some(MiniFormat::Hash);

fn cfg(size: u32) -> QueueConfig {
    QueueConfig::default().size(size)
}

/// Checks received frames in `got` against the sequence from `*next`, byte for byte.
fn check(got: &Burst, next: &mut u64, lo: usize, hi: usize) {
    let mut expect = vec![0u8; 2048];
    for i in 0..got.len() {
        let data = got.data(i);
        assert_eq!(seq_of(data), *next, "frame out of order or lost");
        let len = frame_len(*next, lo, hi);
        assert_eq!(data.len(), len.max(60), "length of frame {next}");
        expect[..len.max(60)].fill(0);
        fill_frame(*next, &mut expect[..len]);
        assert!(data == &expect[..len.max(60)], "bytes of frame {next} differ");
        *next += 1;
    }
}

/// Sends `n` frames numbered from `*next_tx` (lengths `frame_len(seq, lo, hi)`) in TX bursts of
/// at most 64.
fn send(r: &mut Rig, next_tx: &mut u64, n: usize, lo: usize, hi: usize) {
    let mut left = n;
    while left > 0 {
        let k = left.min(64);
        let mut out = Burst::new(&r.pool, k);
        for i in 0..k {
            assert_eq!(out.alloc(1, frame_len(*next_tx + i as u64, lo, hi)), 1, "pool ran dry");
            fill_frame(*next_tx + i as u64, out.data_mut(i));
        }
        // A frame whose random EtherType is a tag takes a WQE of several WQEBBs on a device that
        // inlines headers: the ring may be full before the burst is; the device then runs.
        let mut taken = r.tx.tx_burst(&mut out).unwrap();
        while taken < k {
            r.nic.step();
            r.tx.reclaim().unwrap();
            taken += r.tx.tx_burst(&mut out).unwrap();
        }
        *next_tx += k as u64;
        left -= k;
    }
}

/// Steps the model until every sent frame's completion is back.
fn drain_tx(r: &mut Rig) {
    while r.tx.in_flight() > 0 {
        r.nic.step();
        r.tx.reclaim().unwrap();
    }
}

/// Frames of 60 bytes sent and received step by step, checked in order.
struct Steps {
    got: Burst,
    next_tx: u64,
    next_rx: u64,
}

impl Steps {
    fn new(r: &Rig) -> Steps {
        Steps {
            got: Burst::new(&r.pool, 64),
            next_tx: 0,
            next_rx: 0,
        }
    }

    /// Sends `n` frames, steps the model, and receives them in one burst.
    fn exact(&mut self, r: &mut Rig, n: usize) {
        send(r, &mut self.next_tx, n, 60, 60);
        r.nic.step();
        assert_eq!(r.rx.rx_burst(&mut self.got).unwrap(), n);
        self.take();
        let _ = r.tx.reclaim();
    }

    /// Sends `n` frames, steps the model, and receives until nothing is left.
    fn all(&mut self, r: &mut Rig, n: usize) {
        send(r, &mut self.next_tx, n, 60, 60);
        r.nic.step();
        while r.rx.rx_burst(&mut self.got).unwrap() > 0 {
            self.take();
        }
        let _ = r.tx.reclaim();
    }

    /// Checks and empties the burst.
    fn take(&mut self) {
        check(&self.got, &mut self.next_rx, 60, 60);
        self.got.clear();
    }

    /// Every frame sent arrived; the burst's buffers go back, the sends complete, and the rig
    /// is torn down (every buffer back in the pool).
    fn end(self, mut r: Rig) {
        assert_eq!(self.next_rx, self.next_tx);
        drop(self.got);
        drain_tx(&mut r);
        r.teardown();
    }
}

/// Random traffic: per step, 1..=`max_step` frames sent (several TX bursts, so a session can
/// reach the 64 of `cqe_comp_caps.max_num` and go on in the next), received with bursts of
/// random room (1..=256), so that sessions are split across bursts at every position.
fn random_traffic(r: &mut Rig, total: u64, lo: usize, hi: usize, max_step: usize, seed: u64) {
    let mut rng = Rng(seed);
    let rooms = [1usize, 3, 7, 8, 9, 32, 64, 256];
    let mut bursts: Vec<Burst> = rooms.iter().map(|&c| Burst::new(&r.pool, c)).collect();
    let (mut next_tx, mut next_rx) = (0u64, 0u64);
    let mut steps = 0u64;
    while next_rx < total {
        // Never more in flight than the RQ can hold: the device would drop the rest.
        let in_flight = (next_tx - next_rx) as usize;
        let room = (r.rx.posted() as usize).saturating_sub(in_flight);
        let n = rng.range(1, max_step).min((total - next_tx) as usize).min(room);
        if n > 0 {
            send(r, &mut next_tx, n, lo, hi);
        }
        r.nic.step();
        let _ = r.tx.reclaim();
        steps += 1;
        loop {
            let b = &mut bursts[rng.below(rooms.len() as u64) as usize];
            let got = r.rx.rx_burst(b).unwrap();
            check(b, &mut next_rx, lo, hi);
            b.clear();
            if got == 0 {
                break;
            }
        }
        assert!(steps < total * 4, "no progress");
    }
    drop(bursts);
    drain_tx(r);
    assert_eq!(r.rx.stats().packets, total);
    assert_eq!(r.rx.stats().errors.total(), 0);
    assert_eq!(r.rx.stats().drops, 0);
    assert_eq!(r.tx.stats().bytes, r.rx.stats().bytes);
    let c = r.nic.counters();
    assert_eq!(c.cq_overruns, 0);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 0);
}

fn through(dev: ModelConfig, seed: u64) {
    let mut r = rig_with(cfg(256), dev, 4096, HASH);
    let total = 200_000;
    random_traffic(&mut r, total, 60, 1514, 200, seed);
    let c = r.nic.counters();
    // Most completions went in sessions, of sizes from 2 to 64.
    assert!(c.cqe_sessions > 1000, "{c:?}");
    assert!(c.cqe_session_packets > total * 3 / 4, "{c:?}");
    // 512 CQ entries: the sessions crossed the ring end hundreds of times.
    assert_eq!(r.rx_cq.cqe_cnt(), 512);
    r.teardown();
}

#[test]
fn random_frames_arrive_identical_through_compressed_sessions_on_a_connectx5() {
    through(common::device(), 0x5eed);
}

#[test]
fn random_frames_arrive_identical_through_compressed_sessions_on_a_connectx4() {
    through(common::device_cx4(), 0xc4);
}

/// A small CQ (32 entries for a 16-WQE RQ): sessions meet the ring end and owner flips all
/// the time, and the slots of consumed sessions keep stale bytes from earlier passes (holes,
/// mini arrays whose last byte is data) that must never pass for new CQEs.
#[test]
fn sessions_wrap_a_small_cq_over_many_passes() {
    for dev in [common::device(), common::device_cx4()] {
        let mut r = rig_with(cfg(16), dev, 512, HASH);
        random_traffic(&mut r, 50_000, 60, 200, 16, 7);
        assert_eq!(r.rx_cq.cqe_cnt(), 32);
        assert!(r.nic.counters().cqe_sessions > 2000);
        r.teardown();
    }
}

/// More completions in one step than a session holds: sessions of 64 (the `max_num` the model
/// reports), then the rest.
#[test]
fn a_step_of_100_completions_makes_sessions_of_64_and_36() {
    // The layout of sessions as long as they can be (the profile's other knobs kept).
    let dev = common::with_knob(common::device(), "zip=regular");
    let mut r = rig_with(cfg(256), dev, 1024, HASH);
    let mut next_tx = 0;
    send(&mut r, &mut next_tx, 100, 60, 60);
    r.nic.step();
    let c = r.nic.counters();
    assert_eq!((c.cqe_sessions, c.cqe_session_packets), (2, 100));
    let title = Cqe64::from_bytes(&r.nic.cq_slot(r.rx_cq.cqn(), 0).unwrap());
    assert!(title.is_title());
    assert_eq!((title.mini_cqe_count(), title.wqe_counter.get()), (64, 0));
    let second = Cqe64::from_bytes(&r.nic.cq_slot(r.rx_cq.cqn(), 64).unwrap());
    assert!(second.is_title());
    assert_eq!((second.mini_cqe_count(), second.wqe_counter.get()), (36, 64));
    let mut got = Burst::new(&r.pool, 256);
    let mut next_rx = 0;
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 100);
    check(&got, &mut next_rx, 60, 60);
    drop(got);
    drain_tx(&mut r);
    r.teardown();
}

/// Eleven completions at once with the producer at slot 29 of a 32-entry CQ: a session never
/// crosses the end of the CQ buffer (DPDK's vectorized decompression reads a session's slots
/// unmasked, `model::exec` `flush_cq`), so the model writes a session of 3 at slots 29..31 (title
/// at 29, its array at 30) and one of 8 from slot 0 on the next pass (title at 0, array at 1).
/// It writes only the titles and the array entries; the driver hands up the 11 frames and stamps
/// the other slots of each session invalid, leaving the titles.
#[test]
fn a_session_ends_at_the_cq_end() {
    let mut r = rig_with(cfg(16), common::device(), 512, HASH);
    let cqn = r.rx_cq.cqn();
    let mut t = Steps::new(&r);
    for _ in 0..29 {
        t.exact(&mut r, 1);
    }
    assert_eq!(r.nic.counters().cqe_sessions, 0, "one completion per step: plain CQEs");
    let slot1_before = r.nic.cq_slot(cqn, 1).unwrap();
    send(&mut r, &mut t.next_tx, 11, 60, 60);
    r.nic.step();
    let c = r.nic.counters();
    assert_eq!((c.cqe_sessions, c.cqe_session_packets), (2, 11));
    let title = Cqe64::from_bytes(&r.nic.cq_slot(cqn, 29).unwrap());
    assert_eq!(title.op_own, 0x2c, "RESP_SEND, format 3, owner 0");
    assert_eq!((title.mini_cqe_count(), title.wqe_counter.get()), (3, 29));
    let a0 = mlx5_prm::mini_array_from(&r.nic.cq_slot(cqn, 30).unwrap());
    assert!(a0[..3].iter().all(|m| m.byte_cnt.get() == 60));
    let next = Cqe64::from_bytes(&r.nic.cq_slot(cqn, 0).unwrap());
    assert_eq!(next.op_own, 0x2d, "RESP_SEND, format 3, owner 1 (the next pass)");
    assert_eq!((next.mini_cqe_count(), next.wqe_counter.get()), (8, 32));
    let slot1 = r.nic.cq_slot(cqn, 1).unwrap();
    let a1 = mlx5_prm::mini_array_from(&slot1);
    assert!(a1.iter().all(|m| m.byte_cnt.get() == 60));
    assert_ne!(slot1, slot1_before);
    // Holes keep what they had: slot 31 its initial INVALID, slots 2..7 pass-0 plain CQEs
    // (owner 0), which pass 2 would take for new ones unless the driver stamps them.
    assert_eq!(r.nic.cq_slot(cqn, 31).unwrap()[63], mlx5_prm::CQE_INIT_OP_OWN);
    for hole in 2u32..8 {
        assert_eq!(r.nic.cq_slot(cqn, hole).unwrap()[63] & 0xfd, 0x20, "slot {hole}");
    }
    assert_eq!(r.rx.rx_burst(&mut t.got).unwrap(), 11);
    t.take();
    for s in [30u32, 31, 1, 2, 3, 4, 5, 6, 7] {
        assert_eq!(r.nic.cq_slot(cqn, s).unwrap()[63], CQE_INVALIDATE, "slot {s} stamped");
    }
    assert_eq!(r.nic.cq_slot(cqn, 29).unwrap()[63], 0x2c, "the title is left");
    assert_eq!(r.nic.cq_slot(cqn, 0).unwrap()[63], 0x2d, "the title is left");
    // Nothing more is there, and traffic goes on over the stamped slots.
    assert_eq!(r.rx.rx_burst(&mut t.got).unwrap(), 0);
    for _ in 0..40 {
        t.all(&mut r, 7);
    }
    t.end(r);
}

/// An error CQE between compressed sessions (never inside one): the frame it stands for is lost,
/// the sessions on both sides arrive whole.
#[test]
fn an_error_cqe_between_sessions_loses_one_frame() {
    for dev in [common::device(), common::device_cx4()] {
        let dev = common::with_knob(dev, "zip=regular");
        let mut r = rig_with(cfg(64), dev, 512, HASH);
        let mut next_tx = 0;
        send(&mut r, &mut next_tx, 10, 60, 60);
        r.nic.step();
        r.nic.inject(
            1,
            Fault::RxError {
                syndrome: syndrome::LOCAL_LENGTH,
            },
        );
        send(&mut r, &mut next_tx, 10, 60, 60);
        r.nic.step();
        // CQ: session of 10, the error CQE, session of 9.
        let c = r.nic.counters();
        assert_eq!((c.cqe_sessions, c.cqe_session_packets), (2, 19));
        let err = r.nic.cq_slot(r.rx_cq.cqn(), 10).unwrap();
        assert_eq!(err[63] >> 4, mlx5_prm::CQE_RESP_ERR);
        let mut got = Burst::new(&r.pool, 64);
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 19);
        let seqs: Vec<u64> = (0..got.len()).map(|i| seq_of(got.data(i))).collect();
        let want: Vec<u64> = (0..20).filter(|&s| s != 10).collect();
        assert_eq!(seqs, want);
        got.clear();
        let s = *r.rx.stats();
        assert_eq!((s.errors.local_length, s.errors.total(), s.recoveries), (1, 1, 0));
        // A critical error after a session: the session is handed up, then the WQ is reset.
        send(&mut r, &mut next_tx, 12, 60, 60);
        r.nic.step();
        r.nic.inject(
            1,
            Fault::RxError {
                syndrome: syndrome::LOCAL_PROT,
            },
        );
        send(&mut r, &mut next_tx, 5, 60, 60);
        r.nic.step();
        let mut total = 0;
        while let Ok(n) = r.rx.rx_burst(&mut got) {
            got.clear();
            total += n;
            if n == 0 {
                break;
            }
        }
        assert_eq!(total, 12);
        assert_eq!(r.rx.stats().recoveries, 1);
        assert_eq!(r.rx.posted(), 64, "every RQ slot posted again");
        // And traffic flows again, compressed.
        let before = r.nic.counters().cqe_sessions;
        let first = next_tx;
        send(&mut r, &mut next_tx, 30, 60, 60);
        r.nic.step();
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 30);
        let mut next_rx = first;
        check(&got, &mut next_rx, 60, 60);
        assert_eq!(r.nic.counters().cqe_sessions, before + 1);
        drop(got);
        drain_tx(&mut r);
        r.teardown();
    }
}

/// Out of buffers in the middle of traffic: the drop count of the first CQE after the drops is
/// not lost in a session.
#[test]
fn drops_reported_in_a_session_are_counted() {
    let mut r = rig_with(cfg(64), common::device(), 512, HASH);
    r.nic.inject(1, Fault::RxNoBuffer { frames: 5 });
    let mut next_tx = 0;
    send(&mut r, &mut next_tx, 20, 60, 60);
    r.nic.step();
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 15);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 5);
    assert_eq!(r.rx.stats().drops, 5);
    drop(got);
    drain_tx(&mut r);
    r.teardown();
}

/// Mini-CQEs carry no timestamp: a compressing CQ with timestamps asked for is refused with one
/// clear error, and a `model:` port does not ask for compression when timestamps are on.
#[test]
fn timestamps_and_compression_do_not_mix() {
    let q = cfg(64).rx_timestamps(true);
    let nic = mlx5_model::Nic::pair(common::device()).unwrap();
    let pool = rawpkt::Pool::new(rawpkt::PoolConfig::default().buffers(256)).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let cq = nic.create_cq_with(64, HASH).unwrap();
    let (rwq, wq) = nic.create_rq(1, 64, cq.cqn()).unwrap();
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    let e = unsafe { rawpkt::internals::DvRxQueue::new(&rwq, &cq, wq, lkey, &pool, &q, nic.control()) }
        .err()
        .expect("refused");
    assert!(e.to_string().contains("mini-CQEs carry no timestamp"), "{e}");
    assert_eq!(pool.free_count(), pool.capacity());
}

/// `model:` ports compress by default (`QueueConfig::rx_cqe_compression`), not with the option
/// off or timestamps on; the frames arrive either way.
#[test]
fn model_ports_follow_the_queue_option() {
    for (i, (comp, ts, want)) in [(true, false, true), (false, false, false), (true, true, false)]
        .into_iter()
        .enumerate()
    {
        let name = format!("cqe-comp-{}-{i}", std::process::id());
        let a = rawpkt::open(&format!("model:{name}/0")).unwrap();
        let b = rawpkt::open(&format!("model:{name}/1")).unwrap();
        let pool = rawpkt::Pool::new(rawpkt::PoolConfig::default()).unwrap();
        let q = QueueConfig::default()
            .size(256)
            .rx_cqe_compression(comp)
            .rx_timestamps(ts);
        let mut tx = a.tx_queue(0, &pool, &q).unwrap();
        let mut rx = b.rx_queue(0, &pool, &q).unwrap();
        let mut out = Burst::new(&pool, 64);
        for k in 0..64 {
            assert_eq!(out.alloc(1, 60), 1);
            fill_frame(k, out.data_mut(k as usize));
        }
        assert_eq!(tx.tx_burst(&mut out).unwrap(), 64);
        let (nic, _) = rawpkt::model::nic_of(&a).expect("a model port");
        let mut got = Burst::new(&pool, 64);
        let mut next = 0;
        for _ in 0..1000 {
            if next == 64 {
                break;
            }
            nic.step();
            rx.rx_burst(&mut got).unwrap();
            check(&got, &mut next, 60, 60);
            got.clear();
        }
        assert_eq!(next, 64);
        assert_eq!(
            nic.counters().cqe_sessions > 0,
            want,
            "compression {comp}, timestamps {ts}"
        );
    }
}

/// A session whose mini-CQE claims more bytes than the posted buffer holds (a broken device, as
/// `Nic::inject_cqe` plays one): that packet is dropped as a bad CQE and its buffer freed, the
/// rest of the session is handed up, and no buffer is lost.
#[test]
fn a_mini_cqe_longer_than_its_buffer_is_dropped() {
    let mut r = rig_with(cfg(64), common::device(), 512, HASH);
    let cqn = r.rx_cq.cqn();
    let mut title = Cqe64::resp_send(0, 0, 0, 0, 0, 0);
    title.make_title(3);
    let minis = [
        mlx5_prm::MiniCqe::hash(1, 60),
        mlx5_prm::MiniCqe::hash(2, 100_000),
        mlx5_prm::MiniCqe::hash(3, 61),
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
    ];
    // The device writes the title at 0 and the array at 1; slot 2 is the session's third.
    assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
    assert!(r.nic.inject_cqe(cqn, &mlx5_prm::mini_array_bytes(&minis)));
    let mut got = Burst::new(&r.pool, 64);
    // The session is not complete in the ring until its third slot's index is reached; its
    // packets are all described by the title and the array, so the driver hands them up now.
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 2);
    assert_eq!((got.data(0).len(), got.data(1).len()), (60, 61));
    assert_eq!((got.packet(0).rss_hash(), got.packet(1).rss_hash()), (1, 3));
    assert_eq!(r.rx.stats().errors.bad_cqe, 1);
    drop(got);
    r.teardown();
}

/// Long mini-CQEs inside full arrays of eight (a session of 19: two full arrays and three more),
/// where the driver expands each array as one straight-line body: the long packets (first of
/// the session, one in the middle of the second array, one in the last partial array) are
/// dropped as bad CQEs, the others go up in order with their lengths, hashes and bytes counted,
/// every slot but the title's is stamped invalid, and no buffer is lost.
#[test]
fn long_mini_cqes_inside_full_arrays_are_dropped() {
    // A burst of 64 (the session expanded in the general loop) and one of 19, which the
    // session fills (expanded before it); the builds for the CPU's MOVBE and AVX2 (full arrays
    // four mini-CQEs a step) and the portable one.
    for cpu_vector in [true, false] {
        for cap in [64, 19] {
            long_minis_in_a_burst_of(cap, cpu_vector);
        }
    }
}

fn long_minis_in_a_burst_of(cap: usize, cpu_vector: bool) {
    let q = cfg(64).cpu_vector(cpu_vector);
    let mut r = rig_with(q, common::device(), 512, HASH);
    let cqn = r.rx_cq.cqn();
    let n = 19u32;
    let len = |k: u32| match k {
        0 => 70_000,
        11 => 100_000,
        17 => 2_049_000,
        // Even: `inject_cqe` sets the owner bit of each slot's last byte, which in an array
        // slot is the low byte of its last mini-CQE's byte count.
        _ => 60 + 2 * k,
    };
    let udp4 = cqe_flags::L4_OK
        | cqe_flags::L3_OK
        | cqe_flags::L4_UDP << cqe_flags::L4_TYPE_SHIFT
        | cqe_flags::L3_IPV4 << cqe_flags::L3_TYPE_SHIFT;
    let mut title = Cqe64::resp_send(0, 0, 0, udp4, 0, 0);
    title.make_title(n);
    assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
    // Slot s of the session holds array s / 8 where s is 1, 8 or 16; the others are holes.
    for s in 1..n {
        let bytes = if s == 1 || s % 8 == 0 {
            let j = s / 8;
            let minis: [mlx5_prm::MiniCqe; 8] =
                std::array::from_fn(|i| mlx5_prm::MiniCqe::hash(1000 + j * 8 + i as u32, len(j * 8 + i as u32)));
            mlx5_prm::mini_array_bytes(&minis)
        } else {
            [0u8; 64]
        };
        assert!(r.nic.inject_cqe(cqn, &bytes));
    }
    let mut got = Burst::new(&r.pool, cap);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 16);
    let good: Vec<u32> = (0..n).filter(|&k| len(k) <= 2048).collect();
    let udp4_flags = flags::RSS_HASH | flags::IPV4 | flags::L3_CSUM_OK | flags::UDP | flags::L4_CSUM_OK;
    for (i, &k) in good.iter().enumerate() {
        let p = got.packet(i);
        assert_eq!(
            (got.data(i).len(), p.rss_hash(), p.flags()),
            (len(k) as usize, 1000 + k, udp4_flags),
            "packet {k} (cpu_vector {cpu_vector})"
        );
    }
    let stats = r.rx.stats();
    assert_eq!(stats.errors.bad_cqe, 3);
    assert_eq!(
        (stats.packets, stats.bytes),
        (16, good.iter().map(|&k| u64::from(len(k))).sum())
    );
    for s in 1..n {
        assert_eq!(r.nic.cq_slot(cqn, s).unwrap()[63], CQE_INVALIDATE, "slot {s} stamped");
    }
    assert_eq!(r.nic.cq_slot(cqn, 0).unwrap()[63] & 0xfc, 0x2c, "the title is left");
    drop(got);
    r.teardown();
}

/// A plain CQE on a compressing CQ whose length is past its buffer: dropped as a bad CQE (its
/// buffer freed), not handed up and not looped on.
#[test]
fn a_plain_cqe_longer_than_its_buffer_is_dropped_on_a_compressing_cq() {
    let mut r = rig_with(cfg(64), common::device(), 512, HASH);
    let cqe = Cqe64::resp_send(0, 100_000, 0, 0, 0, 0);
    assert!(r.nic.inject_cqe(r.rx_cq.cqn(), cqe.as_bytes()));
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 0);
    assert_eq!(r.rx.stats().errors.bad_cqe, 1);
    drop(got);
    r.teardown();
}

/// A session in the ring behind a critical error CQE (a device that wrote on after the error;
/// the model's own WQ stops at one): the WQ reset drops the session as its title's packet count
/// says, stamps the slots it spans invalid, and the traffic after the reset arrives whole over
/// them, the device's producer index and the driver's consumer index still in step.
#[test]
fn a_wq_reset_drops_a_whole_session_behind_the_error() {
    for dev in [common::device(), common::device_cx4()] {
        let mut r = rig_with(cfg(16), dev, 512, HASH);
        let cqn = r.rx_cq.cqn();
        let mut t = Steps::new(&r);
        // Slots 0..2: a session of 3, received.
        t.exact(&mut r, 3);
        // Slot 3: a critical error; slots 4..8: a session of 5 (title, one array, three holes
        // with whatever the device leaves there).
        let err = mlx5_prm::ErrCqe::resp_err(syndrome::LOCAL_PROT, 3, 0);
        assert!(r.nic.inject_cqe(cqn, err.as_bytes()));
        let mut title = Cqe64::resp_send(4, 0, 0, 0, 0, 0);
        title.make_title(5);
        assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
        let minis = [mlx5_prm::MiniCqe::hash(9, 60); 8];
        assert!(r.nic.inject_cqe(cqn, &mlx5_prm::mini_array_bytes(&minis)));
        for _ in 0..3 {
            assert!(r.nic.inject_cqe(cqn, Cqe64::resp_send(0, 60, 0, 0, 0, 0).as_bytes()));
        }
        let drops = r.rx.stats().drops;
        assert_eq!(r.rx.rx_burst(&mut t.got).unwrap(), 0);
        let s = *r.rx.stats();
        assert_eq!((s.errors.local_prot, s.recoveries), (1, 1));
        assert_eq!(s.drops - drops, 5, "the session's 5 packets dropped as stale");
        for slot in 5..=8 {
            assert_eq!(
                r.nic.cq_slot(cqn, slot).unwrap()[63],
                CQE_INVALIDATE,
                "slot {slot} stamped"
            );
        }
        assert_eq!(r.rx.posted(), 16, "every RQ slot posted again");
        // Traffic after the reset: sessions and plain CQEs from slot 9 on, over several passes
        // of the 32-entry CQ; the frames the reset lost were never sent, so the sequence goes on.
        for k in 0..60 {
            t.all(&mut r, 1 + k % 9);
        }
        assert_eq!(r.rx.stats().recoveries, 1);
        t.end(r);
    }
}

/// A plain CQE in the last slot of a compressing CQ, then a session from slot 0 on the next
/// pass (owner bit flipped), pass after pass: the driver takes the plain CQE by its owner bit,
/// wraps, and opens the session there.
#[test]
fn a_plain_cqe_at_the_cq_end_then_a_session_across_the_wrap() {
    for dev in [common::device(), common::device_cx4()] {
        // The layout of sessions as long as they can be (the profile's other knobs kept).
        let dev = common::with_knob(dev, "zip=regular");
        let mut r = rig_with(cfg(16), dev, 512, HASH);
        let cqn = r.rx_cq.cqn();
        let mut t = Steps::new(&r);
        // Each round takes two passes of the 32-entry CQ: the plain CQE ends an even one.
        for round in 0u8..6 {
            let pass = 2 * round;
            // 28 slots in sessions of 7, then single completions at 28..31.
            for _ in 0..4 {
                t.exact(&mut r, 7);
            }
            for _ in 0..4 {
                t.exact(&mut r, 1);
            }
            let last = Cqe64::from_bytes(&r.nic.cq_slot(cqn, 31).unwrap());
            assert!(!last.is_title(), "pass {pass}: slot 31 holds a plain CQE");
            assert_eq!(last.op_own & 1, pass & 1, "pass {pass}: its owner bit");
            // The next session starts at slot 0 of the next pass.
            t.exact(&mut r, 5);
            let title = Cqe64::from_bytes(&r.nic.cq_slot(cqn, 0).unwrap());
            assert!(title.is_title() && title.mini_cqe_count() == 5, "pass {pass}");
            assert_eq!(title.op_own & 1, (pass + 1) & 1, "pass {pass}: the title's owner bit");
            // To the end of the odd pass: 27 more slots.
            for n in [7, 7, 7, 6] {
                t.exact(&mut r, n);
            }
        }
        assert_eq!(r.nic.counters().cqe_sessions, 6 * 9);
        t.end(r);
    }
}

/// A session of one packet (a title whose count is 1, its array at the next slot), as a device
/// might write it: handed up like any other, on both the burst it fills and a larger one.
#[test]
fn a_session_of_one_packet_is_handed_up() {
    for room in [1usize, 64] {
        let mut r = rig_with(cfg(64), common::device(), 512, HASH);
        let cqn = r.rx_cq.cqn();
        let mut title = Cqe64::resp_send(0, 0, 0, 0, 0, 0);
        title.make_title(1);
        let mut minis = [mlx5_prm::MiniCqe::default(); 8];
        minis[0] = mlx5_prm::MiniCqe::hash(7, 60);
        assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
        assert!(r.nic.inject_cqe(cqn, &mlx5_prm::mini_array_bytes(&minis)));
        let mut got = Burst::new(&r.pool, room);
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 1, "room {room}");
        assert_eq!((got.data(0).len(), got.packet(0).rss_hash()), (60, 7));
        drop(got);
        r.teardown();
    }
}
