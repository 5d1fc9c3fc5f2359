//! Random frames of 60 to 9000 bytes through TX -> model -> RX on multi-buffer receive WQEs
//! (`QueueConfig::rx_max_frame` 9000: five 1920-byte buffers per WQE) in each cyclic receive
//! mode: plain CQEs, compressed sessions (a mini-CQE's byte count says how many of its WQE's
//! buffers hold the frame), and compressed sessions with VLAN stripping (the device compresses
//! only completions whose tag equals the title's). Both devices, byte-identical frames handed up
//! as chains, sessions across the CQ end, error CQEs inside the traffic, and every buffer back
//! in the pool after teardown.

mod common;

use common::{fill_frame, frame_len, seq_of, Rig, Rng};
use mlx5_model::{Fault, Link, ModelConfig, Nic, RqOptions};
use mlx5_prm::{syndrome, MiniFormat};
use rawpkt::internals::DvRxQueue;
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::{flags, Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

const MAX: usize = 9000;

/// The receive modes of a cyclic queue with multi-buffer WQEs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Cyclic,
    Compressed,
    CompressedStrip,
}

impl Mode {
    fn comp(self) -> Option<MiniFormat> {
        (self != Mode::Cyclic).then_some(MiniFormat::Hash)
    }
    fn strip(self) -> bool {
        self == Mode::CompressedStrip
    }
}

/// A TX queue on port 0 and an RX queue on port 1 of `dev`, `size` WQEs each, the RX WQEs with
/// as many buffers as a 9000-byte frame fills, the RX CQ compressing as `mode` says.
fn rig(size: u32, dev: ModelConfig, mode: Mode) -> Rig {
    let q = QueueConfig::default()
        .size(size)
        .rx_max_frame(MAX as u32)
        .rx_vlan_strip(mode.strip());
    let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], dev).unwrap();
    let pool = Pool::new(PoolConfig::default()).unwrap();
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let tx_cq = nic.create_cq(size).unwrap();
    let sq = nic.create_sq(0, size, tx_cq.cqn()).unwrap();
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &q, nic.caps(), nic.control()) }.unwrap();
    let rx_cq = nic.create_cq_with(size, mode.comp()).unwrap();
    let opts = RqOptions {
        max_sge: (MAX as u32).div_ceil(pool.data_room()),
        strip_cvlan: mode.strip(),
        ..RqOptions::default()
    };
    let (rwq, wq) = nic.create_rq_with(1, size, rx_cq.cqn(), opts).unwrap();
    // SAFETY: as above.
    let rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, &q, nic.control()) }.unwrap();
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

/// The tag frame `seq` is sent with when tags are on: a third of the frames, in runs, so that
/// sessions of one tag, of none and mixed steps all occur.
fn tag_of(seq: u64) -> Option<u16> {
    let r = Rng((seq / 5 * 0x9e37_79b9) | 1).next();
    r.is_multiple_of(3).then_some((r >> 8) as u16 & 0xefff)
}

/// Frame `seq` (`common::fill_frame`) with an experimental EtherType (0x88b5), so that no random
/// frame starts with a tag the device would strip.
fn fill(seq: u64, out: &mut [u8]) {
    fill_frame(seq, out);
    out[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
}

/// What arrived and how.
#[derive(Default, Debug)]
struct Seen {
    /// The next sequence number expected.
    next: u64,
    /// Frames skipped (lost to an injected error CQE).
    lost: u64,
    chained: u64,
    tagged: u64,
}

/// Checks every frame of `got` (in order, gaps counted as lost) byte for byte, and its tag.
fn check(got: &Burst, seen: &mut Seen, tags: bool, expect: &mut [u8], copy: &mut [u8]) {
    for i in 0..got.len() {
        let p = *got.packet(i);
        let n = got.copy_frame(i, copy).expect("a frame of at most 9000 bytes");
        let seq = seq_of(&copy[..n]);
        assert!(seq >= seen.next, "frame {seq} out of order (expected {})", seen.next);
        seen.lost += seq - seen.next;
        let len = frame_len(seq, 60, MAX);
        assert_eq!(n, len, "length of frame {seq}");
        fill(seq, &mut expect[..len]);
        assert!(copy[..len] == expect[..len], "bytes of frame {seq} differ");
        assert_eq!(p.is_chained(), len > 1920, "frame {seq}");
        match tag_of(seq).filter(|_| tags) {
            Some(t) => {
                assert_ne!(p.flags() & flags::VLAN_STRIPPED, 0, "frame {seq}");
                assert_eq!(p.vlan_tci(), t, "tag of frame {seq}");
                seen.tagged += 1;
            }
            None => assert_eq!(p.flags() & flags::VLAN_STRIPPED, 0, "frame {seq}"),
        }
        seen.chained += u64::from(p.is_chained());
        seen.next = seq + 1;
    }
}

/// Sends `n` frames from `*next_tx` in TX bursts of at most 32.
fn send(r: &mut Rig, next_tx: &mut u64, n: usize, tags: bool, buf: &mut [u8]) {
    let mut out = Burst::new(&r.pool, 32);
    let mut left = n;
    while left > 0 {
        let k = left.min(32);
        for _ in 0..k {
            let len = frame_len(*next_tx, 60, MAX);
            fill(*next_tx, &mut buf[..len]);
            assert!(out.push_frame(&buf[..len]), "pool ran dry");
            if tags {
                out.set_vlan(out.len() - 1, tag_of(*next_tx));
            }
            *next_tx += 1;
        }
        // Chains of five buffers fill the SQ fast: what it cannot take goes in the next call,
        // once the model has sent some.
        let mut tries = 0;
        while !out.is_empty() {
            if r.tx.tx_burst(&mut out).unwrap() == 0 {
                r.nic.step();
                let _ = r.tx.reclaim();
                tries += 1;
                assert!(tries < 100, "the send queue does not drain");
            }
        }
        left -= k;
    }
}

/// `total` random frames through `r` in `mode`: per step 1..=`max_step` sent, received with
/// bursts of random room (so sessions split across bursts at every position); every
/// `error_every` steps (0: never) an error CQE (LOCAL_LENGTH: the WQE consumed, its frame lost)
/// takes the next frame's place. Returns what arrived.
fn traffic(r: &mut Rig, mode: Mode, total: u64, max_step: usize, error_every: u64, seed: u64) -> Seen {
    let mut rng = Rng(seed);
    let rooms = [1usize, 3, 8, 9, 32, 64];
    let mut bursts: Vec<Burst> = rooms.iter().map(|&c| Burst::new(&r.pool, c)).collect();
    let (mut expect, mut copy, mut buf) = (vec![0u8; MAX], vec![0u8; MAX], vec![0u8; MAX]);
    let mut seen = Seen::default();
    let (mut next_tx, mut steps, mut injected) = (0u64, 0u64, 0u64);
    while seen.next < total {
        // Never more in flight than the RQ holds: the device would drop the rest.
        let in_flight = (next_tx - seen.next) as usize;
        let room = (r.rx.posted() as usize).saturating_sub(in_flight);
        let n = rng.range(1, max_step).min((total - next_tx) as usize).min(room);
        if n > 0 {
            send(r, &mut next_tx, n, mode.strip(), &mut buf);
            if error_every != 0 && steps % error_every == 0 && n > 2 {
                r.nic.inject(
                    1,
                    Fault::RxError {
                        syndrome: syndrome::LOCAL_LENGTH,
                    },
                );
                injected += 1;
            }
        }
        r.nic.step();
        let _ = r.tx.reclaim();
        steps += 1;
        loop {
            let b = &mut bursts[rng.below(rooms.len() as u64) as usize];
            let got = r.rx.rx_burst(b).unwrap();
            check(b, &mut seen, mode.strip(), &mut expect, &mut copy);
            b.clear();
            if got == 0 {
                break;
            }
        }
        assert!(steps < total * 4, "no progress");
    }
    drop(bursts);
    while r.tx.in_flight() > 0 {
        r.nic.step();
        r.tx.reclaim().unwrap();
    }
    let s = *r.rx.stats();
    assert_eq!(seen.lost, injected, "one frame lost per error CQE");
    assert_eq!((s.errors.local_length, s.errors.total()), (injected, injected));
    assert_eq!(s.packets, total - injected);
    assert_eq!(s.drops + r.tx.stats().drops, 0);
    assert_eq!(r.nic.counters().cq_overruns, 0);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 0);
    // Most frames span buffers (a frame up to 1920 bytes fits one).
    assert!(seen.chained > (total - injected) * 3 / 4, "{seen:?}");
    assert!(!mode.strip() || seen.tagged > total / 5, "{seen:?}");
    let c = r.nic.counters();
    if mode.comp().is_some() {
        assert!(c.cqe_sessions > total / 100, "{c:?}");
        assert!(c.cqe_session_packets > total / 2, "{c:?}");
    } else {
        assert_eq!(c.cqe_sessions, 0);
    }
    seen
}

/// One device in one mode: `total` frames on a 256-WQE queue (512 CQ entries, so sessions cross
/// the CQ end hundreds of times), error CQEs every 97 steps.
fn through(dev: ModelConfig, mode: Mode, total: u64, seed: u64) {
    let mut r = rig(256, dev, mode);
    traffic(&mut r, mode, total, 96, 97, seed);
    assert_eq!(r.rx_cq.cqe_cnt(), 512);
    r.teardown();
}

/// Frames through each mode on each device: 10^6 random frames of 60-9000 bytes in every
/// receive mode, on both devices.
const FRAMES: u64 = 1_000_000;

#[test]
fn random_jumbo_frames_cyclic_connectx5() {
    through(common::device(), Mode::Cyclic, FRAMES, 0x15_0001);
}

#[test]
fn random_jumbo_frames_cyclic_connectx4() {
    through(common::device_cx4(), Mode::Cyclic, FRAMES, 0x15_0002);
}

#[test]
fn random_jumbo_frames_compressed_connectx5() {
    through(common::device(), Mode::Compressed, FRAMES, 0x15_0003);
}

#[test]
fn random_jumbo_frames_compressed_connectx4() {
    through(common::device_cx4(), Mode::Compressed, FRAMES, 0x15_0004);
}

#[test]
fn random_jumbo_frames_compressed_with_vlan_stripping_connectx5() {
    through(common::device(), Mode::CompressedStrip, FRAMES, 0x15_0005);
}

#[test]
fn random_jumbo_frames_compressed_with_vlan_stripping_connectx4() {
    through(common::device_cx4(), Mode::CompressedStrip, FRAMES, 0x15_0006);
}

/// A 16-WQE queue (32 CQ entries): compressed sessions of multi-buffer frames wrap the ring end
/// and cross owner flips all the time, over stale slots of earlier passes.
#[test]
fn compressed_jumbo_sessions_wrap_a_small_cq() {
    for dev in [common::device(), common::device_cx4()] {
        for mode in [Mode::Compressed, Mode::CompressedStrip] {
            let mut r = rig(16, dev.clone(), mode);
            traffic(&mut r, mode, 20_000, 16, 31, 0x15_0007);
            assert_eq!(r.rx_cq.cqe_cnt(), 32);
            r.teardown();
        }
    }
}

/// An error CQE between two sessions of jumbo frames loses its one frame (its WQE's buffers
/// stay posted); a critical one resets the queue with no buffer lost, and compressed jumbo
/// traffic flows again.
#[test]
fn error_cqes_amid_compressed_jumbo_sessions() {
    for dev in [common::device(), common::device_cx4()] {
        // The layout of sessions as long as they can be (the profile's other knobs kept).
        let dev = common::with_knob(dev, "zip=regular");
        let mut r = rig(64, dev, Mode::Compressed);
        let (mut expect, mut copy, mut buf) = (vec![0u8; MAX], vec![0u8; MAX], vec![0u8; MAX]);
        let mut next_tx = 0;
        send(&mut r, &mut next_tx, 10, false, &mut buf);
        r.nic.step();
        r.nic.inject(
            1,
            Fault::RxError {
                syndrome: syndrome::LOCAL_LENGTH,
            },
        );
        send(&mut r, &mut next_tx, 10, false, &mut buf);
        r.nic.step();
        let c = r.nic.counters();
        assert_eq!(
            (c.cqe_sessions, c.cqe_session_packets),
            (2, 19),
            "session, error, session"
        );
        let mut got = Burst::new(&r.pool, 64);
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 19);
        let mut seen = Seen::default();
        check(&got, &mut seen, false, &mut expect, &mut copy);
        assert_eq!((seen.next, seen.lost), (20, 1));
        got.clear();
        assert_eq!(r.rx.stats().errors.local_length, 1);
        // A critical error after a session: the session is handed up, then the WQ is reset.
        send(&mut r, &mut next_tx, 12, false, &mut buf);
        r.nic.step();
        r.nic.inject(
            1,
            Fault::RxError {
                syndrome: syndrome::LOCAL_PROT,
            },
        );
        send(&mut r, &mut next_tx, 5, false, &mut buf);
        r.nic.step();
        let mut handed = 0;
        loop {
            let n = r.rx.rx_burst(&mut got).unwrap();
            check(&got, &mut seen, false, &mut expect, &mut copy);
            got.clear();
            handed += n;
            if n == 0 {
                break;
            }
        }
        assert_eq!(handed, 12);
        assert_eq!(r.rx.stats().recoveries, 1);
        assert_eq!(r.rx.posted(), 64, "every WQE posted again");
        // Compressed jumbo traffic flows again.
        let before = r.nic.counters().cqe_sessions;
        seen.next = next_tx;
        send(&mut r, &mut next_tx, 30, false, &mut buf);
        r.nic.step();
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 30);
        check(&got, &mut seen, false, &mut expect, &mut copy);
        assert_eq!((seen.next, seen.lost), (next_tx, 1));
        assert!(r.nic.counters().cqe_sessions > before);
        drop(got);
        while r.tx.in_flight() > 0 {
            r.nic.step();
            r.tx.reclaim().unwrap();
        }
        r.teardown();
    }
}

/// `model:` ports compress multi-buffer and stripping queues too (`rx::dv::wants_compression`),
/// and jumbo frames arrive whole.
#[test]
fn model_ports_compress_jumbo_and_stripping_queues() {
    for strip in [false, true] {
        let name = format!("rx-modes-{}-{strip}", std::process::id());
        let a = rawpkt::open(&format!("model:{name}/0")).unwrap();
        let b = rawpkt::open(&format!("model:{name}/1")).unwrap();
        let pool = Pool::new(PoolConfig::default()).unwrap();
        let q = QueueConfig::default()
            .size(256)
            .rx_max_frame(MAX as u32)
            .rx_vlan_strip(strip);
        let mut tx = a.tx_queue(0, &pool, &q).unwrap();
        let mut rx = b.rx_queue(0, &pool, &q).unwrap();
        let mut out = Burst::new(&pool, 64);
        let mut buf = vec![0u8; MAX];
        for k in 0..64u64 {
            let len = frame_len(k, 60, MAX);
            fill(k, &mut buf[..len]);
            assert!(out.push_frame(&buf[..len]));
            if strip {
                out.set_vlan(k as usize, tag_of(k));
            }
        }
        assert_eq!(tx.tx_burst(&mut out).unwrap(), 64);
        let (nic, _) = rawpkt::model::nic_of(&a).expect("a model port");
        let mut got = Burst::new(&pool, 64);
        let (mut expect, mut copy) = (vec![0u8; MAX], vec![0u8; MAX]);
        let mut seen = Seen::default();
        for _ in 0..1000 {
            if seen.next == 64 {
                break;
            }
            nic.step();
            rx.rx_burst(&mut got).unwrap();
            check(&got, &mut seen, strip, &mut expect, &mut copy);
            got.clear();
        }
        assert_eq!((seen.next, seen.lost), (64, 0));
        assert!(nic.counters().cqe_sessions > 0, "strip {strip}");
    }
}
