//! The l2-xconnect example's forwarding core, end to end through threaded model NICs:
//!
//! ```text
//! generator ─▶ model:NAME-a/0 ══ model:NAME-a/1 ─▶ xconnect Core ─▶ model:NAME-b/0 ══ model:NAME-b/1 ─▶ sink
//! ```
//!
//! 100 000 numbered frames of 60 to 1514 bytes must come out unmodified and in order, in zero-copy
//! and in copy mode, every counter must balance, and every pool must be full after teardown.
//!
//! The example file is compiled into this test as a module, so the code under test is the
//! example's own `Core`, `hand_off` and `copy_into`, not a copy of them.

use rawpkt_test_support as common;
#[allow(dead_code)] // its `main` and CLI plumbing
#[path = "../src/bin/l2-xconnect.rs"]
mod xconnect;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{fill_frame, frame_len, seq_of};
use rawpkt::{open, Burst, Pool, PoolConfig, Port, QueueConfig, QueueError, QueueStats, TxQueue};
use rawpkt_tools::xconnect::far_end;
use xconnect::{Core, Counts, Forwarding, Published};

const FRAMES: u64 = 100_000;
/// Frames between the generator and the sink at most: well under every RX ring (1024), so no
/// device ever has to drop.
const MAX_IN_FLIGHT: u64 = 512;
const TIME_LIMIT: Duration = Duration::from_secs(25);

/// Each end-to-end test has two model NICs polling on their own threads plus three threads of
/// its own: more than a 2-CPU machine has already, so they take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn pool(buffers: u32) -> Rc<Pool> {
    Pool::new(PoolConfig::default().buffers(buffers)).unwrap()
}

/// Set when a thread fails, so that the others stop waiting for it.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// What the threads of one end-to-end test share.
struct Shared {
    /// Threads whose queues are up: a frame that reaches a port with no RX queue is lost.
    ready: AtomicU32,
    /// Frames the sink has checked.
    received: AtomicU64,
    /// Some thread failed.
    abort: AtomicBool,
    deadline: Instant,
}

impl Shared {
    fn check(&self, who: &str, what: impl FnOnce() -> String) {
        assert!(!self.abort.load(Ordering::Relaxed), "{who}: another thread failed");
        assert!(Instant::now() < self.deadline, "{who}: {}", what());
    }
}

/// Sends frames 0..FRAMES on `port` once the xconnect and the sink are up, never more than
/// MAX_IN_FLIGHT ahead of the sink; returns what its TX queue counted and when it started.
fn generate(port: &Port, sh: &Shared) -> (u64, Instant) {
    let _guard = AbortOnPanic(&sh.abort);
    let pool = pool(4096);
    let mut tx = port.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
    while sh.ready.load(Ordering::Acquire) < 2 {
        sh.check("generator", || "the xconnect or the sink never came up".into());
        std::thread::yield_now();
    }
    let started = Instant::now();
    let mut out = Burst::new(&pool, 32);
    let mut made = 0;
    while made < FRAMES || !out.is_empty() {
        let got = sh.received.load(Ordering::Acquire);
        sh.check("generator", || format!("stalled: {made} made, {got} received"));
        if out.is_empty() && made - got < MAX_IN_FLIGHT {
            while out.room() > 0 && made < FRAMES {
                assert_eq!(out.alloc(1, frame_len(made, 60, 1514)), 1);
                let i = out.len() - 1;
                fill_frame(made, out.data_mut(i));
                made += 1;
            }
        }
        if tx.tx_burst(&mut out).unwrap() == 0 {
            std::thread::yield_now();
        }
    }
    while tx.in_flight() > 0 {
        sh.check("generator", || "TX never completed".into());
        tx.reclaim().unwrap();
        std::thread::yield_now();
    }
    let sent = tx.stats().packets;
    drop((out, tx));
    assert_eq!(
        pool.free_count(),
        pool.capacity(),
        "generator pool not full after teardown"
    );
    (sent, started)
}

/// Receives FRAMES frames on `port`, checking that each is the next one and unmodified.
fn sink(port: &Port, sh: &Shared) -> QueueStats {
    let _guard = AbortOnPanic(&sh.abort);
    let pool = pool(4096);
    let mut rx = port.rx_queue(0, &pool, &QueueConfig::default()).unwrap();
    sh.ready.fetch_add(1, Ordering::Release);
    let mut got = Burst::new(&pool, 64);
    let mut expect = vec![0u8; 2048];
    let mut next = 0;
    while next < FRAMES {
        sh.check("sink", || format!("stalled at frame {next}"));
        if rx.rx_burst(&mut got).unwrap() == 0 {
            std::thread::yield_now();
            continue;
        }
        for i in 0..got.len() {
            let d = got.data(i);
            assert_eq!(seq_of(d), next, "a frame was lost, reordered or duplicated");
            let len = frame_len(next, 60, 1514);
            fill_frame(next, &mut expect[..len]);
            assert!(d == &expect[..len], "frame {next} was modified");
            next += 1;
        }
        got.clear();
        sh.received.store(next, Ordering::Release);
    }
    let stats = *rx.stats();
    drop((got, rx));
    assert_eq!(pool.free_count(), pool.capacity(), "sink pool not full after teardown");
    stats
}

fn end_to_end(name: &str, copy: bool) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let port = |p: &str| open(&format!("model:{name}-{p}")).unwrap();
    let (gen_port, a, b, sink_port) = (port("a/0"), port("a/1"), port("b/0"), port("b/1"));
    let (halt, published) = (AtomicBool::new(false), Published::default());
    let sh = Shared {
        ready: AtomicU32::new(0),
        received: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        deadline: Instant::now() + TIME_LIMIT,
    };

    let (sent, sunk, fin, elapsed) = std::thread::scope(|s| {
        let x = s.spawn(|| {
            let _guard = AbortOnPanic(&sh.abort);
            let how = Forwarding {
                burst: 32,
                copy,
                touch: true,
                rx_mode: None,
            };
            let fin = Core::new(&a, &b, 0, how).and_then(|mut core| {
                sh.ready.fetch_add(1, Ordering::Release);
                core.run(&halt, &published)?;
                Ok(core.finish())
            });
            if fin.is_err() {
                sh.abort.store(true, Ordering::Relaxed);
            }
            fin
        });
        let k = s.spawn(|| sink(&sink_port, &sh));
        let g = s.spawn(|| generate(&gen_port, &sh));
        let (sent, sunk) = (g.join(), k.join());
        let done = Instant::now();
        halt.store(true, Ordering::Relaxed);
        let fin = x.join();
        if sent.is_err() || sunk.is_err() {
            eprintln!("{name}: the xconnect had moved {:?} (A->B, B->A)", published.load());
        }
        let (sent, started) = sent.unwrap_or_else(|e| std::panic::resume_unwind(e));
        let sunk = sunk.unwrap_or_else(|e| std::panic::resume_unwind(e));
        let fin = fin
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
            .expect("xconnect core");
        (sent, sunk, fin, done - started)
    });

    let mode = if copy { "copy" } else { "zero-copy" };
    println!(
        "{mode}: {FRAMES} frames through the xconnect in {:.2} s: {:.0} frames/s",
        elapsed.as_secs_f64(),
        FRAMES as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(sent, FRAMES);
    assert_eq!(
        fin.counts[0],
        Counts {
            rx: FRAMES,
            tx: FRAMES,
            drops: 0
        },
        "A->B"
    );
    assert_eq!(fin.counts[1], Counts::default(), "B->A carried something");
    assert_eq!(
        published.load(),
        fin.counts,
        "the published counters lag the final ones"
    );
    assert_eq!(sunk.packets, FRAMES);
    for (q, what) in [
        (&fin.rx[0], "A RX"),
        (&fin.tx[0], "B TX"),
        (&fin.rx[1], "B RX"),
        (&fin.tx[1], "A TX"),
    ] {
        assert_eq!((q.drops, q.errors.total(), q.recoveries), (0, 0, 0), "{what}: {q:?}");
    }
    assert_eq!(fin.rx[0].packets, FRAMES);
    assert_eq!(fin.tx[0].packets, FRAMES);
    assert_eq!(
        (fin.undrained, fin.missing),
        (0, 0),
        "xconnect pools not full after teardown"
    );
    for (p, what) in [(&a, "A"), (&sink_port, "sink")] {
        let (nic, port) = rawpkt::model::nic_of(p).unwrap();
        let c = nic.port_counters(port);
        assert_eq!(
            (c.rx_frames, c.rx_out_of_buffer, c.rx_unclaimed),
            (FRAMES, 0, 0),
            "{what}: {c:?}"
        );
        assert_eq!(nic.counters().doorbell_mismatch, 0);
    }
}

#[test]
fn zero_copy_xconnect_carries_100k_frames_intact_and_in_order() {
    end_to_end("xct-zc", false);
}

#[test]
fn copy_mode_xconnect_carries_100k_frames_intact_and_in_order() {
    end_to_end("xct-cp", true);
}

/// A TX queue that accepts the first `accept` packets of a burst, remembers their buffer
/// indices and bytes, and frees them (a real queue would free them on completion).
struct Refusing {
    accept: usize,
    taken: Vec<(u32, Vec<u8>)>,
    stats: QueueStats,
}

impl TxQueue for Refusing {
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        let n = self.accept.min(pkts.len());
        for i in 0..n {
            self.taken.push((pkts.packet(i).buffer_index(), pkts.data(i).to_vec()));
        }
        pkts.drop_front(n);
        Ok(n)
    }
    fn reclaim(&mut self) -> Result<usize, QueueError> {
        Ok(0)
    }
    fn in_flight(&self) -> usize {
        0
    }
    fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

#[test]
fn zero_copy_hand_off_gives_tx_the_received_buffers_and_drops_what_it_refuses() {
    let (src, dst) = (
        open("model:xct-handoff/0").unwrap(),
        open("model:xct-handoff/1").unwrap(),
    );
    let (src_pool, dst_pool) = (pool(256), pool(2048));
    let mut tx = src.tx_queue(0, &src_pool, &QueueConfig::default()).unwrap();
    let mut rx = dst.rx_queue(0, &dst_pool, &QueueConfig::default()).unwrap();
    let mut out = Burst::new(&src_pool, 32);
    for seq in 0..32 {
        out.alloc(1, frame_len(seq, 60, 1514));
        let i = out.len() - 1;
        fill_frame(seq, out.data_mut(i));
    }
    let mut got = Burst::new(&dst_pool, 32);
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 32 {
        assert!(Instant::now() < deadline, "only {} of 32 frames arrived", got.len());
        tx.tx_burst(&mut out).unwrap();
        rx.rx_burst(&mut got).unwrap();
    }
    let received: Vec<(u32, Vec<u8>)> = (0..32)
        .map(|i| (got.packet(i).buffer_index(), got.data(i).to_vec()))
        .collect();

    let mut refusing = Refusing {
        accept: 20,
        taken: Vec::new(),
        stats: QueueStats::default(),
    };
    let mut counts = Counts {
        rx: 32,
        ..Counts::default()
    };
    xconnect::hand_off(&mut refusing, &mut got, &mut counts).unwrap();
    assert_eq!(
        refusing.taken,
        received[..20],
        "TX got other buffers or bytes than RX delivered"
    );
    assert_eq!(
        counts,
        Counts {
            rx: 32,
            tx: 20,
            drops: 12
        }
    );
    assert!(got.is_empty(), "refused packets were kept");

    while tx.in_flight() > 0 {
        assert!(Instant::now() < deadline);
        tx.reclaim().unwrap();
    }
    drop((out, got, tx, rx));
    assert_eq!(src_pool.free_count(), src_pool.capacity());
    assert_eq!(dst_pool.free_count(), dst_pool.capacity());
}

#[test]
fn copy_into_copies_bytes_into_the_other_pool_and_counts_what_does_not_fit() {
    let (from_pool, to_pool) = (pool(64), pool(8));
    let mut from = Burst::new(&from_pool, 32);
    let mut to = Burst::new(&to_pool, 32);
    let mut frames = Vec::new();
    for seq in 0..32 {
        let mut f = vec![0u8; frame_len(seq, 60, 1514)];
        fill_frame(seq, &mut f);
        assert!(from.push_copy(&f));
        frames.push(f);
    }
    let mut counts = Counts {
        rx: 32,
        ..Counts::default()
    };
    xconnect::copy_into(&mut from, &mut to, &mut counts);
    assert!(from.is_empty());
    assert_eq!(from_pool.free_count(), from_pool.capacity());
    assert_eq!(to.len(), 8, "the destination pool has 8 buffers");
    assert_eq!(counts.drops, 24);
    for (i, f) in frames.iter().take(8).enumerate() {
        assert_eq!(to.data(i), &f[..], "copy {i} differs");
    }
    drop(to);
    assert_eq!(to_pool.free_count(), to_pool.capacity());
}

#[test]
fn the_cli_defaults_to_two_model_nics_and_rejects_bad_values_in_one_line() {
    let cli = xconnect::Cli::try_parse_from(["l2-xconnect"]).unwrap();
    assert_eq!(
        (cli.port_a.as_str(), cli.port_b.as_str()),
        ("model:xc-a/1", "model:xc-b/0")
    );
    assert_eq!(
        (cli.cores, cli.burst, cli.duration, cli.copy, cli.touch),
        (1, 32, None, false, false)
    );
    assert_eq!(far_end(&cli.port_a).as_deref(), Some("model:xc-a/0"));
    assert_eq!(far_end(&cli.port_b).as_deref(), Some("model:xc-b/1"));
    assert_eq!(far_end("model:afpacket=eth0"), None);
    for (arg, want) in [("0", Duration::ZERO), ("0.1", Duration::from_millis(100))] {
        let cli = xconnect::Cli::try_parse_from(["l2-xconnect", "--stats-interval", arg]).unwrap();
        assert_eq!(cli.stats_interval, want, "{arg}");
    }
    for (args, says) in [
        (&["--cores", "0"][..], "--cores"),
        (&["--burst", "0"][..], "--burst"),
        (&["--duration", "-1"][..], "--duration"),
        (&["--duration", "0"][..], "more than 0"),
        (&["--stats-interval", "x"][..], "--stats-interval"),
        // 1e-9 printed 600 000 lines a second.
        (&["--stats-interval", "1e-9"][..], "at least 0.1"),
        (&["--stats-interval", "0.099"][..], "at least 0.1"),
    ] {
        let e = xconnect::Cli::try_parse_from(std::iter::once("l2-xconnect").chain(args.iter().copied())).unwrap_err();
        let line = rawpkt_tools::cli::one_line(&e);
        assert!(
            line.starts_with("error: ") && line.contains(says) && !line.contains('\n'),
            "{line}"
        );
    }
}
