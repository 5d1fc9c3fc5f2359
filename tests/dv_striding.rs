//! TX → model → RX on a striding (multi-packet) RQ: frames of random sizes byte-identical, across
//! strides, fillers and WQE wraps; exhausted strides, error CQEs, and every buffer back at the end.

mod common;

use std::rc::Rc;
use std::sync::Arc;

use common::{fill_frame, frame_len, seq_of, Rng};
use mlx5_model::{Fault, Link, ModelConfig, Nic, RqOptions};
use mlx5_prm::{mprq, syndrome, MiniFormat};
use rawpkt::internals::ring::{CqInfo, SqInfo};
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::internals::{params_for, DvStridingRxQueue};
use rawpkt::{flags, Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

struct Rig {
    nic: Arc<Nic>,
    pool: Rc<Pool>,
    tx: DvTxQueue,
    rx: DvStridingRxQueue,
    lkey: u32,
    keep: (SqInfo, CqInfo, CqInfo),
    params: mprq::Params,
}

/// A send queue on port 0 and a striding receive queue of `q.size` strides on port 1; `params`
/// as the driver picks them for the pool when None.
fn rig(dev: ModelConfig, q: &QueueConfig, pool: PoolConfig, params: Option<mprq::Params>) -> Result<Rig, String> {
    rig_with(dev, q, pool, params, None)
}

/// [`rig`] with the receive CQ compressing in format `comp`.
fn rig_with(
    dev: ModelConfig,
    q: &QueueConfig,
    pool: PoolConfig,
    params: Option<mprq::Params>,
    comp: Option<MiniFormat>,
) -> Result<Rig, String> {
    let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], dev).unwrap();
    let pool = Pool::new(pool).unwrap();
    let params = match params {
        Some(p) => p,
        None => params_for(&pool, &nic.config().striding_rq).map_err(|e| e.to_string())?,
    };
    let lkey = nic.register_mr(rawpkt::internals::pool_region(&pool));
    let tx_cq = nic.create_cq(q.size).unwrap();
    let sq = nic.create_sq(0, q.size, tx_cq.cqn()).unwrap();
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, q, nic.caps(), nic.control()) }.unwrap();
    let n = params.num_strides();
    let wqes = q.size / n;
    let rx_cq = nic.create_cq_with(wqes * (n + 1), comp).unwrap();
    let opts = RqOptions {
        max_sge: n,
        striding: Some(params),
        ..RqOptions::default()
    };
    let made = nic.create_rq_with(1, wqes, rx_cq.cqn(), opts);
    let (rwq, wq) = match made {
        Ok(m) => m,
        Err(e) => {
            drop((tx, sq, tx_cq, rx_cq));
            nic.deregister_mr(lkey);
            return Err(e);
        }
    };
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    let rx = unsafe { DvStridingRxQueue::new(&rwq, &rx_cq, params, wq, lkey, &pool, q, nic.control()) }
        .map_err(|e| e.to_string())?;
    Ok(Rig {
        nic,
        pool,
        tx,
        rx,
        lkey,
        keep: (sq, tx_cq, rx_cq),
        params,
    })
}

impl Rig {
    /// Sends frames `from..to` (lengths `frame_len(seq, lo, hi)`), stepping the device after
    /// each burst.
    fn send(&mut self, from: u64, to: u64, lo: usize, hi: usize) {
        let mut out = Burst::new(&self.pool, 64);
        let mut next = from;
        while next < to || !out.is_empty() {
            while next < to && out.room() > 0 {
                let len = frame_len(next, lo, hi);
                if len <= self.pool.data_room() as usize {
                    assert_eq!(out.alloc(1, len), 1, "pool ran dry");
                    let i = out.len() - 1;
                    fill_frame(next, out.data_mut(i));
                } else {
                    // A jumbo frame goes out chained over several buffers.
                    let mut frame = vec![0u8; len];
                    fill_frame(next, &mut frame);
                    assert!(out.push_frame(&frame), "pool ran dry");
                }
                next += 1;
            }
            self.tx.tx_burst(&mut out).unwrap();
            self.nic.step();
        }
    }

    /// Drops the queues: every buffer back in the pool, every model object gone.
    fn teardown(self) {
        let Rig {
            nic,
            pool,
            mut tx,
            rx,
            lkey,
            keep,
            ..
        } = self;
        while tx.in_flight() > 0 {
            nic.step();
            tx.reclaim().unwrap();
        }
        drop((tx, rx, keep));
        assert_eq!(pool.free_count(), pool.capacity(), "pool not full after teardown");
        nic.deregister_mr(lkey);
        assert_eq!(nic.live_objects(), 0, "model objects left after teardown");
    }
}

/// Sends `total` frames of random sizes in `lo..=hi` in random bursts and checks each received
/// frame byte for byte, in order.
/// Returns how many of them arrived chained.
fn run(r: &mut Rig, total: u64, lo: usize, hi: usize, max_burst: usize, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut got = Burst::new(&r.pool, 64);
    let mut expect = vec![0u8; 16384];
    let mut data = vec![0u8; 16384];
    let (mut chained, mut bytes) = (0u64, 0u64);
    let (mut next_tx, mut next_rx) = (0u64, 0u64);
    let mut steps = 0u64;
    while next_rx < total {
        if next_tx < total {
            let n = (rng.range(1, max_burst) as u64).min(total - next_tx);
            r.send(next_tx, next_tx + n, lo, hi);
            next_tx += n;
        } else {
            r.nic.step();
        }
        steps += 1;
        r.rx.rx_burst(&mut got).unwrap();
        for i in 0..got.len() {
            let len = frame_len(next_rx, lo, hi);
            let n = got.copy_frame(i, &mut data).expect("a frame of at most 16 KiB");
            assert_eq!(seq_of(&data[..n]), next_rx, "frame out of order or lost");
            assert_eq!(n, len, "length of frame {next_rx}");
            // A frame over several strides arrives as one buffer per stride, chained.
            let strides = len.div_ceil(r.params.stride_bytes() as usize);
            assert_eq!(got.segment_count(i), strides, "segments of frame {next_rx}");
            chained += u64::from(strides > 1);
            bytes += len as u64;
            fill_frame(next_rx, &mut expect[..len]);
            assert!(data[..n] == expect[..len], "bytes of frame {next_rx} differ");
            next_rx += 1;
        }
        got.clear();
        assert!(steps < total * 4, "no progress");
    }
    assert_eq!((r.rx.stats().packets, r.rx.stats().bytes), (total, bytes));
    assert_eq!(r.rx.stats().errors.total(), 0);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 0);
    let c = r.nic.counters();
    assert_eq!((c.doorbell_missing, c.doorbell_mismatch, c.cq_overruns), (0, 0, 0));
    chained
}

/// The profile's device ([`common::device`]) where it takes this driver's striding WQEs (one
/// buffer per stride, 8 or 16 strides); else the test has nothing to test there and is skipped,
/// said with `PROFILE-SKIP` (firmware without `ext_stride_num_range`: the ports open a cyclic
/// queue instead, `tests/profiles.rs`).
fn striding_device() -> Option<ModelConfig> {
    let d = common::device();
    common::requires(
        d.striding_rq.min_log_num_strides <= 4,
        "the device takes no striding WQE of fewer than 2^9 strides (ext_strides=off)",
    )
    .then_some(d)
}

/// [`striding_device`], or the test returns.
macro_rules! sdev {
    () => {
        match striding_device() {
            Some(d) => d,
            None => return,
        }
    };
}

fn big_pool() -> PoolConfig {
    PoolConfig::default().buffers(4096).buf_size(16384).headroom(128)
}

/// 16 strides of 1 KiB (what the driver picks for a default pool): frames of up to 9000 bytes
/// cross up to 9 strides and leave fillers.
const KIB_STRIDES: mprq::Params = mprq::Params {
    log_stride_bytes: 10,
    log_num_strides: 4,
    two_byte_shift: false,
};

/// Random frames from 60 to 9000 bytes (jumbo, up to 9 strides) arrive identical: frames of one
/// stride as one buffer, longer ones chained over their strides' buffers, fillers skipped.
#[test]
fn random_jumbo_frames_arrive_identical() {
    let q = QueueConfig::default().size(512);
    let mut r = rig(sdev!(), &q, big_pool(), Some(KIB_STRIDES)).unwrap();
    // At most 16 frames a burst: 16 WQEs of the 32 even if each took a whole one.
    let chained = run(&mut r, 50_000, 60, 9000, 16, 0x5eed);
    assert!(chained > 40_000, "{chained} frames chained");
    assert_eq!(r.rx.stats().no_buffers, 0);
    r.teardown();
}

/// The same on the strides the driver picks for a default pool (16 of 1 KiB in buffers of a
/// 1920-byte data room), a million of them (10^6 random frames of 60-9000 bytes, as `rx_modes`
/// sends in every receive mode): a 9000-byte frame, longer than any buffer, arrives whole over 9
/// of them, sent chained too.
#[test]
fn jumbo_frames_longer_than_a_buffer_arrive_chained() {
    let q = QueueConfig::default().size(512);
    let pool = PoolConfig::default().buffers(8192);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    assert_eq!((r.params.stride_bytes(), r.params.num_strides()), (1024, 16));
    let chained = run(&mut r, 1_000_000, 60, 9000, 16, 0x9000);
    assert!(chained > 850_000, "{chained} frames chained");
    assert_eq!(r.rx.stats().errors.total(), 0);
    r.teardown();
}

/// A million random Ethernet frames on the strides the driver picks for a default pool (1 KiB in a
/// 1920-byte data room, 16 of them for a WQE of 16 KiB): many frames take two strides, and WQEs
/// end in fillers.
#[test]
fn a_million_random_frames_arrive_identical_on_a_striding_rq() {
    let q = QueueConfig::default().size(256);
    let pool = PoolConfig::default().buffers(4096);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    assert_eq!((r.params.stride_bytes(), r.params.num_strides()), (1024, 16));
    run(&mut r, 1_000_000, 60, 1514, 48, 0xfeed);
    r.teardown();
}

/// A frame that does not fit in the strides left of a WQE: the device writes a filler for them
/// and places the frame in the next WQE; the driver gives the filler's buffers back and hands the
/// frame up whole.
#[test]
fn a_filler_releases_the_strides_left() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    // 15 frames of one stride, then one of two strides: one stride left, so a filler.
    r.send(0, 15, 100, 100);
    r.send(15, 16, 1500, 1500);
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 16);
    let mut data = vec![0u8; 2048];
    assert_eq!(got.copy_frame(15, &mut data), Some(1500));
    assert_eq!(got.segment_count(15), 2, "two strides, chained");
    let mut want = vec![0u8; 1500];
    fill_frame(15, &mut want);
    assert_eq!(&data[..1500], &want[..]);
    // What the burst holds, what the queue holds posted, and the pool make up every buffer.
    let held = got.len() as u32 + r.rx.posted() + r.pool.free_count() + r.tx.in_flight() as u32;
    assert!(held <= r.pool.capacity());
    drop(got);
    r.teardown();
}

/// With no WQE posted the device drops frames (out of buffer); the queue counts what the next
/// completion reports and goes on.
#[test]
fn exhausted_strides_count_out_of_buffer() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    // 64 strides posted; 70 frames of one stride without a receive burst in between.
    r.send(0, 70, 60, 60);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 6);
    let mut got = Burst::new(&r.pool, 128);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 64);
    got.clear();
    r.send(70, 71, 60, 60);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 1);
    assert_eq!(seq_of(got.data(0)), 70);
    assert_eq!(r.rx.stats().drops, 6, "the drop count the next CQE carried");
    drop(got);
    r.teardown();
}

/// An injected error CQE releases the rest of its WQE (a non-fatal syndrome) or resets the queue
/// (a fatal one); frames after it arrive, and no buffer is lost.
#[test]
fn error_cqes_release_strides_or_reset_the_queue() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    let mut got = Burst::new(&r.pool, 128);
    r.send(0, 3, 60, 60);
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_LENGTH,
        },
    );
    r.send(3, 4, 60, 60);
    r.send(4, 6, 60, 60);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 5);
    let seqs: Vec<u64> = (0..got.len()).map(|i| seq_of(got.data(i))).collect();
    assert_eq!(seqs, [0, 1, 2, 4, 5]);
    assert_eq!(r.rx.stats().errors.local_length, 1);
    got.clear();
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    r.send(6, 7, 60, 60);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 0);
    assert_eq!(r.rx.stats().recoveries, 1);
    assert_eq!(r.rx.posted(), 64, "posted again from WQE 0");
    r.send(7, 9, 60, 60);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 2);
    assert_eq!(seq_of(got.data(1)), 8);
    drop(got);
    r.teardown();
}

/// A ConnectX-4 has no striding RQ: the driver says so in one line before making anything.
#[test]
fn a_connectx4_refuses_striding_in_one_line() {
    let q = QueueConfig::default();
    let e = rig(common::device_cx4(), &q, PoolConfig::default(), None)
        .err()
        .unwrap();
    assert!(e.contains("no striding receive queue") && !e.contains('\n'), "{e}");
}

/// The `model:` backend opens a striding queue when asked; frames arrive through it.
#[test]
fn model_ports_open_striding_queues() {
    let tx_port = rawpkt::open("model:striding0/0").unwrap();
    let rx_port = rawpkt::open("model:striding0/1").unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    let q = QueueConfig::default().rx_striding(true);
    let mut tx = tx_port.tx_queue(0, &pool, &q).unwrap();
    let mut rx = rx_port.rx_queue(0, &pool, &q).unwrap();
    let mut out = Burst::new(&pool, 32);
    for seq in 0..32 {
        out.alloc(1, 1200);
        fill_frame(seq, out.data_mut(seq as usize));
    }
    while tx.tx_burst(&mut out).unwrap() == 0 {}
    let mut got = Burst::new(&pool, 64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.len() < 32 && std::time::Instant::now() < deadline {
        rx.rx_burst(&mut got).unwrap();
    }
    assert_eq!(got.len(), 32);
    let mut data = [0u8; 2048];
    for i in 0..32 {
        assert_eq!(got.copy_frame(i, &mut data), Some(1200));
        assert_eq!(seq_of(&data), i as u64);
        assert_eq!(got.segment_count(i), 2);
    }
    drop((got, out, tx, rx));
    assert_eq!(pool.free_count(), pool.capacity());
}

/// Frames the device drops (no buffer, injected) in the middle of a WQE are reported by the next
/// completion, here the filler of that WQE: the queue counts them from it too.
#[test]
fn drops_reported_by_a_filler_are_counted() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig(sdev!(), &q, pool, None).unwrap();
    r.send(0, 15, 100, 100);
    r.nic.inject(1, Fault::RxNoBuffer { frames: 2 });
    r.send(15, 17, 100, 100);
    r.send(17, 18, 1500, 1500);
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 16);
    assert_eq!(seq_of(got.data(15)), 17);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 2);
    assert_eq!(r.rx.stats().drops, 2, "the filler's drop count");
    drop(got);
    r.teardown();
}

/// Striding + compressed: the CQ writes sessions of checksum/stride-index mini-CQEs whenever
/// several frames complete in one device step; a million random frames from 60 to 9000 bytes (one stride,
/// or chained over up to 9) arrive byte-identical through them, over many CQ wraps (sessions
/// crossing the ring end), and every buffer is back at the end.
#[test]
fn random_frames_arrive_identical_through_compressed_sessions() {
    let q = QueueConfig::default().size(512);
    let pool = PoolConfig::default().buffers(8192);
    let mut r = rig_with(sdev!(), &q, pool, None, Some(MiniFormat::CsumStridx)).unwrap();
    let chained = run(&mut r, 1_000_000, 60, 9000, 16, 0xc0de);
    assert!(chained > 850_000, "{chained} frames chained");
    let c = r.nic.counters();
    assert!(c.cqe_sessions > 10_000, "{} sessions", c.cqe_sessions);
    assert!(
        c.cqe_session_packets > 200_000,
        "{} packets in sessions",
        c.cqe_session_packets
    );
    r.teardown();
}

/// Small frames through sessions (most of a WQE's 16 strides in one session), a million of them:
/// sessions wrap the CQ end and span its owner flips.
#[test]
fn a_million_small_frames_through_compressed_sessions() {
    let pool = PoolConfig::default().buffers(4096);
    small_frames_through_sessions(pool, 16, 1_000_000, 1000, 800_000, 0x5eed5);
}

/// As [`a_million_small_frames_through_compressed_sessions`] on WQEs of 8 strides of 2 KiB (what
/// the driver picks for 4 KiB buffers): whole-WQE sessions of 8, and 2·10^5 frames of 60 to 2000
/// bytes, one stride each, byte-identical.
#[test]
fn small_frames_through_compressed_sessions_of_8_stride_wqes() {
    let pool = PoolConfig::default().buffers(4096).buf_size(4096).headroom(128);
    small_frames_through_sessions(pool, 8, 200_000, 2000, 150_000, 0x8_5eed);
}

/// `frames` frames of 60 to `hi` bytes through a compressing striding queue of 256 strides over
/// buffers of `pool` (the driver's parameters for it: `strides` a WQE), byte-identical, at least
/// `in_sessions` of them in compressed sessions.
fn small_frames_through_sessions(pool: PoolConfig, strides: u32, frames: u64, hi: usize, in_sessions: u64, seed: u64) {
    let q = QueueConfig::default().size(256);
    let mut r = rig_with(sdev!(), &q, pool, None, Some(MiniFormat::CsumStridx)).unwrap();
    assert_eq!(r.params.num_strides(), strides);
    run(&mut r, frames, 60, hi, 48, seed);
    let c = r.nic.counters();
    assert!(
        c.cqe_session_packets > in_sessions,
        "{} of {frames} packets in sessions",
        c.cqe_session_packets
    );
    r.teardown();
}

/// An error CQE between sessions: a non-fatal one releases the rest of its WQE and the sessions
/// on either side arrive; a fatal one after a session resets the queue; frames after the reset
/// arrive, and no buffer is lost.
#[test]
fn error_cqes_amid_compressed_sessions() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig_with(sdev!(), &q, pool, None, Some(MiniFormat::CsumStridx)).unwrap();
    let mut got = Burst::new(&r.pool, 128);
    r.send(0, 4, 60, 60);
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_LENGTH,
        },
    );
    r.send(4, 10, 60, 60);
    // As long as sessions can be, one on either side of the error; cut anywhere by a device that
    // compresses what it has (`zip=irregular`), more.
    let sessions = r.nic.counters().cqe_sessions;
    match common::device().knobs.zip {
        mlx5_model::profile::Zip::Regular => assert_eq!(sessions, 2, "a session on either side of the error"),
        _ => assert!(sessions <= 8, "{sessions} sessions"),
    }
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 9);
    let seqs: Vec<u64> = (0..got.len()).map(|i| seq_of(got.data(i))).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 5, 6, 7, 8, 9]);
    assert_eq!(r.rx.stats().errors.local_length, 1);
    got.clear();
    // A session, then a fatal error.
    r.send(10, 13, 60, 60);
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    r.send(13, 14, 60, 60);
    r.send(14, 17, 60, 60);
    let drops = r.rx.stats().drops;
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 3);
    assert_eq!(seq_of(got.data(2)), 12);
    assert_eq!(r.rx.stats().recoveries, 1);
    // The device's WQ went to the error state with the fatal CQE: what came after was not
    // placed (and so is neither handed up nor a stale session).
    assert_eq!(r.rx.stats().drops, drops);
    assert_eq!(r.nic.port_counters(1).rx_wq_error, 3);
    assert_eq!(r.rx.posted(), 64, "posted again from WQE 0");
    got.clear();
    r.send(17, 20, 60, 60);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 3);
    assert_eq!(seq_of(got.data(0)), 17);
    drop(got);
    r.teardown();
}

/// The `model:` backend compresses a striding queue's CQ in the stride-index format by default
/// and not with timestamps; a striding queue refuses a CQ of the hash format in one line.
#[test]
fn striding_queues_compress_unless_timestamps() {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let e = rig_with(sdev!(), &q, pool, None, Some(MiniFormat::Hash)).err().unwrap();
    assert!(e.contains("stride-index") && !e.contains('\n'), "{e}");
    let ts = q.clone().rx_timestamps(true);
    let e = rig_with(sdev!(), &ts, pool, None, Some(MiniFormat::CsumStridx))
        .err()
        .unwrap();
    assert!(e.contains("timestamp") && !e.contains('\n'), "{e}");
}

/// A broken session: its second mini-CQE names a stride other than the next. The frame of the
/// first is handed up, the second is a bad CQE that resets the queue, and no buffer is lost.
#[test]
fn a_mini_cqe_at_the_wrong_stride_resets_the_queue() {
    use mlx5_prm::{mini_array_bytes, Cqe64, MiniArray, MiniCqe};
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let mut r = rig_with(sdev!(), &q, pool, None, Some(MiniFormat::CsumStridx)).unwrap();
    let cqn = r.keep.2.cqn();
    let mut title = Cqe64::resp_send(0, 60, 0, 0, 0, 0);
    title.make_title(3);
    assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
    let one = |stride: u16| MiniCqe::csum(0, stride, mprq::byte_cnt(60, 1, false).get());
    let mut minis: MiniArray = [MiniCqe::default(); 8];
    minis[..3].copy_from_slice(&[one(0), one(5), one(2)]);
    assert!(r.nic.inject_cqe(cqn, &mini_array_bytes(&minis)));
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(
        r.rx.rx_burst(&mut got).unwrap(),
        1,
        "the frame before the broken mini-CQE"
    );
    assert_eq!(got.packet(0).len(), 60);
    assert_eq!(r.rx.stats().errors.bad_cqe, 1);
    assert_eq!(r.rx.stats().recoveries, 1);
    assert_eq!(r.rx.posted(), 64, "posted again from WQE 0");
    drop(got);
    r.teardown();
}

/// Injects, on the rig's compressing receive CQ, a session of `strides.len()` one-stride frames
/// of 60 bytes at the given stride indices: the title, then one slot per packet, a mini-CQE array
/// at title + 1 and + 8j, zeros in the holes (which the driver must invalidate).
fn inject_session(r: &Rig, strides: &[u16]) {
    use mlx5_prm::{Cqe64, MiniCqe};
    let one = |stride: u16| MiniCqe::csum(0, stride, mprq::byte_cnt(60, 1, false).get());
    let minis: Vec<MiniCqe> = strides.iter().map(|&s| one(s)).collect();
    inject_session_of(r, Cqe64::resp_send(0, 60, 0, 0, 0, 0), &minis);
}

/// Injects a session of the mini-CQEs `minis` under `title` (made a title of that many). The
/// model stamps its owner bit into every slot it is given, so the last byte of each array (the low
/// byte of its eighth mini-CQE's byte count) must be even.
fn inject_session_of(r: &Rig, mut title: mlx5_prm::Cqe64, minis: &[mlx5_prm::MiniCqe]) {
    use mlx5_prm::{mini_array_bytes, MiniArray, MiniCqe};
    let cqn = r.keep.2.cqn();
    title.make_title(minis.len() as u32);
    assert!(r.nic.inject_cqe(cqn, title.as_bytes()));
    for k in 1..minis.len() {
        let j = if k == 1 { Some(0) } else { (k % 8 == 0).then_some(k / 8) };
        let slot = match j {
            Some(j) => {
                let mut array: MiniArray = [MiniCqe::default(); 8];
                for (m, s) in array.iter_mut().zip(&minis[j * 8..]) {
                    *m = *s;
                }
                mini_array_bytes(&array)
            }
            None => [0u8; 64],
        };
        assert!(r.nic.inject_cqe(cqn, &slot));
    }
}

/// None (the test skipped) where [`striding_device`] says so.
fn compressing_rig() -> Option<Rig> {
    let q = QueueConfig::default().size(64);
    let pool = PoolConfig::default().buffers(512);
    let r = rig_with(striding_device()?, &q, pool, None, Some(MiniFormat::CsumStridx)).unwrap();
    assert_eq!(r.params.num_strides(), 16, "a session of a whole WQE is 16 frames");
    Some(r)
}

/// A session of a whole WQE (16 frames, two mini-CQE arrays: the AVX2 path's case where the CPU
/// has it, else the scalar path's straight-line one): every frame handed up, every slot but the title invalidated, nothing counted as bad.
#[test]
fn a_whole_wqe_session_is_handed_up_and_its_slots_invalidated() {
    let Some(mut r) = compressing_rig() else { return };
    inject_session(&r, &(0..16).collect::<Vec<u16>>());
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 16);
    assert!(got.packets().iter().all(|p| p.len() == 60));
    assert_eq!((r.rx.stats().errors.bad_cqe, r.rx.stats().bytes), (0, 16 * 60));
    let cqn = r.keep.2.cqn();
    for s in 1..16 {
        let op_own = r.nic.cq_slot(cqn, s).unwrap()[63];
        assert_eq!(op_own, mlx5_prm::CQE_INVALIDATE, "slot {s}");
    }
    assert_eq!(r.nic.cq_slot(cqn, 0).unwrap()[63] & 0xfc, 0x2c, "the title is left");
    drop(got);
    r.teardown();
}

/// A session of a whole WQE whose 13th mini-CQE (inside the second array, whose first and the
/// session's last are right) names a stride other than the next: the 12 frames before it are
/// handed up, it is a bad CQE that resets the queue, and no buffer is lost. Every mini-CQE's
/// stride is checked, not only an array's or a session's ends.
#[test]
fn a_mini_cqe_inside_a_whole_wqe_session_at_the_wrong_stride_resets_the_queue() {
    let Some(mut r) = compressing_rig() else { return };
    let mut strides: Vec<u16> = (0..16).collect();
    strides[12] = 3;
    inject_session(&r, &strides);
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(
        r.rx.rx_burst(&mut got).unwrap(),
        12,
        "the frames before the broken mini-CQE"
    );
    assert!(got.packets().iter().all(|p| p.len() == 60));
    assert_eq!(r.rx.stats().errors.bad_cqe, 1);
    assert_eq!(r.rx.stats().recoveries, 1);
    assert_eq!(r.rx.posted(), 64, "posted again from WQE 0");
    drop(got);
    r.teardown();
}

/// Whole-WQE sessions (the vector path's case) carry their title's hash, flags and drop count to
/// every frame: two sessions of different titles in one burst, each frame with its own title's,
/// the drops of each title counted once per frame, as the scalar expansion counts them.
#[test]
fn whole_wqe_sessions_hand_up_their_titles_hash_flags_and_drops() {
    use mlx5_prm::{cqe_flags, Cqe64, MiniCqe};
    let Some(mut r) = compressing_rig() else { return };
    let minis = |wqe: u16| -> Vec<MiniCqe> {
        (0..16)
            .map(|s| MiniCqe::csum(0, s, mprq::byte_cnt(60 + 2 * u32::from(wqe), 1, false).get()))
            .collect()
    };
    let udp4 = cqe_flags::L4_OK
        | cqe_flags::L3_OK
        | cqe_flags::L4_UDP << cqe_flags::L4_TYPE_SHIFT
        | cqe_flags::L3_IPV4 << cqe_flags::L3_TYPE_SHIFT;
    inject_session_of(&r, Cqe64::resp_send(0, 60, 0x1234_5678, udp4, 0, 2), &minis(0));
    inject_session_of(&r, Cqe64::resp_send(1, 62, 0x9abc_def0, 0, 0, 1), &minis(1));
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 32);
    let (first, second) = got.packets().split_at(16);
    assert!(first.iter().all(|p| p.len() == 60 && p.rss_hash() == 0x1234_5678));
    assert!(second.iter().all(|p| p.len() == 62 && p.rss_hash() == 0x9abc_def0));
    let want = flags::RSS_HASH | flags::IPV4 | flags::L3_CSUM_OK | flags::UDP | flags::L4_CSUM_OK;
    assert!(first.iter().all(|p| p.flags() == want), "{:#x}", first[0].flags());
    assert!(
        second.iter().all(|p| p.flags() == flags::RSS_HASH),
        "{:#x}",
        second[0].flags()
    );
    let s = r.rx.stats();
    assert_eq!(
        (s.drops, s.bytes, s.errors.bad_cqe),
        (16 * 2 + 16, 16 * 60 + 16 * 62, 0)
    );
    drop(got);
    r.teardown();
}

/// A whole-WQE session whose sixth mini-CQE says one stride but more bytes than a stride holds
/// (a broken device): that frame is dropped as a length error and its stride freed, the 15
/// others are handed up in order, the queue goes on without a reset, and no buffer is lost.
#[test]
fn a_one_stride_mini_cqe_longer_than_its_stride_in_a_whole_wqe_session_is_dropped() {
    use mlx5_prm::{Cqe64, MiniCqe};
    let Some(mut r) = compressing_rig() else { return };
    let stride = r.params.stride_bytes();
    let minis: Vec<MiniCqe> = (0..16u16)
        .map(|s| {
            let len = if s == 5 { stride + 1 } else { 60 + 2 * u32::from(s) };
            MiniCqe::csum(0, s, mprq::byte_cnt(len, 1, false).get())
        })
        .collect();
    inject_session_of(&r, Cqe64::resp_send(0, 60, 0, 0, 0, 0), &minis);
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 15);
    let lens: Vec<usize> = got.packets().iter().map(|p| p.len()).collect();
    let want: Vec<usize> = (0..16).filter(|&s| s != 5).map(|s| 60 + 2 * s).collect();
    assert_eq!(lens, want);
    let s = r.rx.stats();
    assert_eq!((s.errors.local_length, s.recoveries), (1, 0));
    drop(got);
    r.teardown();
}

/// Whole-WQE sessions the vector path does not take and hands on to the scalar one, with the
/// scalar one's result: one whose fourth mini-CQE carries no stride count (its strides then come
/// from its length, as DPDK `mlx5_rx_burst_mprq` reads such mini-CQEs: one stride for 100
/// bytes, handed up), and one whose last mini-CQE is a filler of the last stride (given back).
/// 31 frames in order, nothing an error, no reset, every stride posted again.
#[test]
fn whole_wqe_sessions_with_a_strideless_or_filler_mini_cqe_take_the_scalar_path() {
    use mlx5_prm::{Cqe64, MiniCqe};
    let Some(mut r) = compressing_rig() else { return };
    let len_of = |wqe: u16, s: u16| 60 + 2 * u32::from(16 * wqe + s);
    let strideless: Vec<MiniCqe> = (0..16u16)
        .map(|s| match s {
            3 => MiniCqe::csum(0, s, mprq::byte_cnt(100, 0, false).get()),
            _ => MiniCqe::csum(0, s, mprq::byte_cnt(len_of(0, s), 1, false).get()),
        })
        .collect();
    let filler_last: Vec<MiniCqe> = (0..16u16)
        .map(|s| match s {
            15 => MiniCqe::csum(0, s, mprq::byte_cnt(0, 1, true).get()),
            _ => MiniCqe::csum(0, s, mprq::byte_cnt(len_of(1, s), 1, false).get()),
        })
        .collect();
    inject_session_of(&r, Cqe64::resp_send(0, 60, 0, 0, 0, 0), &strideless);
    inject_session_of(&r, Cqe64::resp_send(1, 60, 0, 0, 0, 0), &filler_last);
    let mut got = Burst::new(&r.pool, 64);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 31);
    let lens: Vec<usize> = got.packets().iter().map(|p| p.len()).collect();
    let mut want: Vec<usize> = (0..16)
        .map(|s| if s == 3 { 100 } else { len_of(0, s) as usize })
        .collect();
    want.extend((0..15).map(|s| len_of(1, s) as usize));
    assert_eq!(lens, want);
    let s = r.rx.stats();
    assert_eq!((s.errors.total(), s.recoveries), (0, 0));
    drop(got);
    assert_eq!(r.rx.posted(), 64, "both WQEs posted again");
    r.teardown();
}

/// Two whole-WQE sessions and bursts of room 20: the first burst takes the first session whole
/// and the first 4 frames of the second (which then stays open), the next burst the other 12;
/// frames in order with their lengths, bytes counted once, every slot but the titles stamped.
#[test]
fn a_burst_with_room_for_one_whole_wqe_session_and_part_of_the_next() {
    use mlx5_prm::{Cqe64, MiniCqe, CQE_INVALIDATE};
    let Some(mut r) = compressing_rig() else { return };
    let len_of = |k: u16| 60 + 2 * u32::from(k);
    for wqe in 0..2u16 {
        let minis: Vec<MiniCqe> = (0..16u16)
            .map(|s| MiniCqe::csum(0, s, mprq::byte_cnt(len_of(16 * wqe + s), 1, false).get()))
            .collect();
        inject_session_of(&r, Cqe64::resp_send(wqe, 60, 0, 0, 0, 0), &minis);
    }
    let mut lens = Vec::new();
    for want in [20, 12] {
        let mut got = Burst::new(&r.pool, 20);
        assert_eq!(r.rx.rx_burst(&mut got).unwrap(), want);
        lens.extend(got.packets().iter().map(|p| p.len()));
    }
    let want: Vec<usize> = (0..32).map(|k| len_of(k) as usize).collect();
    assert_eq!(lens, want);
    let s = r.rx.stats();
    assert_eq!(
        (s.packets, s.bytes, s.errors.total()),
        (32, want.iter().sum::<usize>() as u64, 0)
    );
    let cqn = r.keep.2.cqn();
    for slot in (1..32).filter(|&i| i != 16) {
        assert_eq!(r.nic.cq_slot(cqn, slot).unwrap()[63], CQE_INVALIDATE, "slot {slot}");
    }
    r.teardown();
}

/// A device of the default profile with `knobs` set (these tests pin what they test, whatever
/// profile the set runs under).
fn device_with(knobs: &[&str]) -> ModelConfig {
    let mut d = ModelConfig::default();
    for k in knobs {
        d.knob(k).unwrap();
    }
    d
}

/// A device that names a striding CQE's WQE by its index in the ring (`wqe_id=ring`;
/// the kernel's mlx5e indexes its WQE array with it, `en_rx.c` `mlx5e_handle_rx_cqe_mpwrq`).
/// DPDK compares only the ring bits (`mlx5_rx.c` `mlx5_rx_burst_mprq`:
/// `!((wqe_id ^ rq_ci) & wq_mask)`), and so does the queue: 20 000 frames of a stride and a half
/// on 8 WQEs of 16 strides (every CQE through the slow path, the ring wrapped 1 250 times)
/// arrive whole, with no reset (a full compare would reset at every pass after the first).
#[test]
fn ring_index_wqe_ids_survive_many_wraps() {
    let q = QueueConfig::default().size(128);
    let mut r = rig(device_with(&["wqe_id=ring"]), &q, big_pool(), Some(KIB_STRIDES)).unwrap();
    assert_eq!(r.params.num_strides() * 8, 128, "8 WQEs");
    run(&mut r, 20_000, 1536, 1536, 4, 0x1d);
    let s = *r.rx.stats();
    assert_eq!((s.recoveries, s.errors.bad_cqe), (0, 0), "{s:?}");
    r.teardown();
}

/// An error CQE's `wqe_counter` on a striding RQ is not the WQE
/// (`err_counter=zero`: no source says what it holds; DPDK's `mlx5_rx_err_handle` reads it only
/// to dump the CQE). An injected LOCAL_LENGTH after the first wrap costs one frame and the rest
/// of its WQE (the strides the error CQE releases), no reset (the counter taken for the
/// WQE would be a mismatch, and a reset).
#[test]
fn error_counters_are_never_trusted() {
    for knob in ["err_counter=zero", "err_counter=stride"] {
        let q = QueueConfig::default().size(128);
        let mut r = rig(device_with(&[knob, "wqe_id=ring"]), &q, big_pool(), Some(KIB_STRIDES)).unwrap();
        run(&mut r, 200, 60, 60, 8, 0xe1);
        r.nic.inject(
            1,
            Fault::RxError {
                syndrome: syndrome::LOCAL_LENGTH,
            },
        );
        r.send(200, 201, 60, 60);
        let mut got = Burst::new(&r.pool, 64);
        r.rx.rx_burst(&mut got).unwrap();
        assert_eq!(got.len(), 0, "{knob}: the failed frame is lost");
        got.clear();
        // The next frames start a WQE of their own and arrive.
        for k in 0..20u64 {
            r.send(201 + k, 202 + k, 60, 60);
            r.rx.rx_burst(&mut got).unwrap();
            for i in 0..got.len() {
                assert_eq!(seq_of(got.data(i)), 201 + k, "{knob}");
            }
            assert_eq!(got.len(), 1, "{knob}: frame {}", 201 + k);
            got.clear();
        }
        let s = *r.rx.stats();
        assert_eq!((s.recoveries, s.errors.local_length), (0, 1), "{knob}: {s:?}");
        drop(got);
        r.teardown();
    }
}

/// The trace (`docs/model-trace.md`, v2) says enough to follow a striding, compressing RQ from
/// outside: replaying its CQEs and mini-CQE arrays as the document decodes them (the WQE a
/// title names by `wqe_id`, each frame's first stride and strides in its byte count or its
/// mini's stride index, fillers, a WQE moving on when its strides are used) gives every frame
/// the queue handed up, in order, with its length, and every WQE the device started (`RWQE`).
#[test]
fn a_v2_trace_replays_every_frame_of_a_compressed_striding_rq() {
    let path = std::env::temp_dir().join(format!("rawpkt-striding-trace-{}.txt", std::process::id()));
    let dev = ModelConfig {
        trace: Some(path.clone()),
        ..device_with(&["wqe_id=ring", "zip=irregular:3"])
    };
    let q = QueueConfig::default().size(64);
    let mut r = rig_with(
        dev,
        &q,
        PoolConfig::default().buffers(1024),
        None,
        Some(MiniFormat::CsumStridx),
    )
    .unwrap();
    let (n, cqn) = (r.params.num_strides(), r.keep.2.cqn());
    run(&mut r, 3000, 60, 2500, 8, 0x7ace);
    r.nic.flush_trace();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(text.starts_with("# rawpkt mlx5 model trace v2\n# profile default wqe_id=ring"));
    let hex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let be32 = |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes(b[at..at + 2].try_into().unwrap());
    let cq = format!("cqn={cqn:#x}");
    // The replay: the WQE the device is in (counter) and its next stride.
    let (mut w, mut pos) = (0u32, 0u32);
    let mut frames = Vec::new();
    let mut started = Vec::new();
    let mut minis: Vec<Vec<u8>> = Vec::new();
    let take = |w: &mut u32, pos: &mut u32, id: u16, stride: u32, bc: u32, frames: &mut Vec<(u32, u32, u32)>| {
        assert_eq!(u32::from(id), *w & 3, "the WQE by its ring index (4 WQEs)");
        assert_eq!(stride, *pos, "the frame starts at the next stride");
        let strides = (bc >> 16) & 0x3fff;
        if bc & 1 << 31 == 0 {
            frames.push((*w, *pos, bc & 0xffff));
        }
        *pos += strides;
        assert!(*pos <= n);
        if *pos == n {
            *w += 1;
            *pos = 0;
        }
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "RWQE" => started.push(f[3].trim_start_matches("wqe=").parse::<u32>().unwrap()),
            "MINI" if f[2] == cq => minis.push(hex(f[6])),
            "CQE" if f[2] == cq => {
                let b = hex(f[4]);
                let op_own = b[0x3f];
                assert_eq!(op_own >> 4, 2, "only frames and fillers: {line}");
                if let Some(t) = f.get(5) {
                    let count: u32 = t.trim_start_matches("title=").parse().unwrap();
                    assert_eq!(op_own >> 2 & 3, 3, "a title is format 3");
                    let id = be16(&b, 0x02);
                    let all: Vec<u8> = minis.drain(..).flatten().collect();
                    assert_eq!(
                        all.len() as u32,
                        8 * count,
                        "the session's minis, written before its title"
                    );
                    for m in all.chunks(8) {
                        take(&mut w, &mut pos, id, u32::from(be16(m, 2)), be32(m, 4), &mut frames);
                    }
                } else {
                    assert!(minis.is_empty());
                    take(
                        &mut w,
                        &mut pos,
                        be16(&b, 0x02),
                        u32::from(be16(&b, 0x3c)),
                        be32(&b, 0x2c),
                        &mut frames,
                    );
                }
            }
            _ => {}
        }
    }
    let want: Vec<u32> = (0..3000).map(|s| frame_len(s, 60, 2500) as u32).collect();
    assert_eq!(
        frames.iter().map(|f| f.2).collect::<Vec<u32>>(),
        want,
        "every frame, in order"
    );
    // Every WQE a frame was placed in was started (read) by the device first.
    let mut used: Vec<u32> = frames.iter().map(|f| f.0).collect();
    used.dedup();
    assert!(used.iter().all(|w| started.contains(w)), "{used:?} {started:?}");
    r.teardown();
}
