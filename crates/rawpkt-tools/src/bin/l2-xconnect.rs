//! l2-xconnect: two ports cross-connected, like VPP's `set interface l2 xconnect A B` plus
//! `... B A`. Each of `--cores N` loops is pinned to its own CPU, with its own queue pair on both
//! ports (queue id = core index) and its own pool: a received burst goes to the other port's
//! `tx_burst` as it is (zero-copy), or with `--copy` is copied into a pool per port. The command
//! line, `--generate` (traffic from the far ends of two model NICs: `cargo run --bin
//! l2-xconnect -- --generate`) and the exit codes are the tools' (`rawpkt_tools`).

use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rawpkt::{Burst, Pool, PoolConfig, Port, QueueConfig, QueueError, QueueStats, RxQueue, TxQueue};
use rawpkt_tools::{self as tool, stats::rate_line, xconnect::Setup, Fail};
pub use tool::xconnect::Cli;

/// Packets one direction of one core has moved. `rx == tx + drops` at every burst boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub rx: u64,
    pub tx: u64,
    /// Refused by the TX ring, or (copy mode) not copied for lack of buffers.
    pub drops: u64,
}

/// Both directions' counts added up.
fn add(t: [Counts; 2], c: [Counts; 2]) -> [Counts; 2] {
    [0, 1].map(|d| Counts {
        rx: t[d].rx + c[d].rx,
        tx: t[d].tx + c[d].tx,
        drops: t[d].drops + c[d].drops,
    })
}

/// Gives `pkts` to `tx`; what the TX ring did not take is dropped at once (ixy: "otherwise we
/// accumulate latency") and counted.
pub fn hand_off(tx: &mut dyn TxQueue, pkts: &mut Burst, c: &mut Counts) -> Result<(), QueueError> {
    c.tx += tx.tx_burst(pkts)? as u64;
    if !pkts.is_empty() {
        c.drops += pkts.len() as u64;
        pkts.clear();
    }
    Ok(())
}

/// Copies every frame of `from` into fresh buffers of `to` (another pool), then frees `from`.
pub fn copy_into(from: &mut Burst, to: &mut Burst, c: &mut Counts) {
    for i in 0..from.len() {
        c.drops += u64::from(!to.push_copy(from.data(i)));
    }
    from.clear();
}

/// How a core forwards. `touch` reads the first byte of each packet as ixy's forwarder does: a
/// cache miss per frame the device just wrote, which a cross-connect need not pay.
#[derive(Clone, Copy, Debug)]
pub struct Forwarding {
    pub burst: usize,
    pub copy: bool,
    pub touch: bool,
    /// The receive queues' mode (`QueueConfig::with_rx_mode`), or the default.
    pub rx_mode: Option<&'static str>,
}

/// One direction of one core: RX on one port, TX on the other.
pub struct Direction {
    rx: Box<dyn RxQueue>,
    tx: Box<dyn TxQueue>,
    got: Burst,
    copy_to: Option<Burst>, // copy mode: a burst of the TX queue's pool
    touch: bool,
    pub counts: Counts,
}

impl Direction {
    /// One burst: receive, hand over (or copy) to the other port. Returns how many arrived.
    pub fn poll(&mut self) -> Result<usize, QueueError> {
        let n = self.rx.rx_burst(&mut self.got)?;
        if n == 0 {
            return Ok(0);
        }
        self.counts.rx += n as u64;
        if self.touch {
            std::hint::black_box((0..n).fold(0, |x, i| x ^ self.got.data(i).first().copied().unwrap_or(0)));
        }
        match &mut self.copy_to {
            None => hand_off(&mut *self.tx, &mut self.got, &mut self.counts)?,
            Some(out) => {
                copy_into(&mut self.got, out, &mut self.counts);
                hand_off(&mut *self.tx, out, &mut self.counts)?;
            }
        }
        Ok(n)
    }
}

/// A core's counters (A->B, B->A: rx, tx, drops) for the stats thread, on a cache line of their own.
#[derive(Default)]
#[repr(align(128))]
pub struct Published([[AtomicU64; 3]; 2]);

impl Published {
    pub fn store(&self, c: [Counts; 2]) {
        let values = c.iter().flat_map(|c| [c.rx, c.tx, c.drops]);
        for (s, v) in self.0.iter().flatten().zip(values) {
            s.store(v, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> [Counts; 2] {
        self.0.each_ref().map(|s| {
            let [rx, tx, drops] = s.each_ref().map(|v| v.load(Ordering::Relaxed));
            Counts { rx, tx, drops }
        })
    }
}

/// Polls between publishing the counters; before an idle loop reclaims TX and yields; between
/// reclaims under load (a direction that receives calls no `tx_burst` to complete its sends).
const PUBLISH_EVERY: u32 = 256;
const IDLE_POLLS: u32 = 1024;
const RECLAIM_EVERY: u32 = 64;

/// What a core did: counts (A->B, B->A), its RX (A's, B's) and TX (B's, A's) queue stats, packets
/// left on a TX ring when the drain gave up, buffers not back in their pool (a leak).
pub struct Final {
    pub counts: [Counts; 2],
    pub rx: [QueueStats; 2],
    pub tx: [QueueStats; 2],
    pub undrained: usize,
    pub missing: u32,
}

/// One forwarding core: queue `qid` on both ports, directions A->B and B->A.
pub struct Core {
    pub dirs: [Direction; 2],
    pools: Vec<Rc<Pool>>,
}

impl Core {
    /// Zero-copy: one pool for all four queues. Copy: a pool for A's queues and one for B's.
    pub fn new(a: &Port, b: &Port, qid: u16, how: Forwarding) -> Result<Core, Fail> {
        let q = how
            .rx_mode
            .and_then(|m| QueueConfig::default().with_rx_mode(m))
            .unwrap_or_default();
        // A pool holds what its queues can pin, and the bursts on top.
        let pool = |pinned: usize| {
            let cfg = PoolConfig::default().buffers((pinned + 4 * how.burst) as u32);
            Pool::new(cfg).map_err(|e| Fail::rawpkt("packet pool", e))
        };
        let (pin_a, pin_b) = (a.buffers_pinned(&q), b.buffers_pinned(&q));
        let pa = pool(if how.copy { pin_a } else { pin_a + pin_b })?;
        let pb = if how.copy { pool(pin_b)? } else { pa.clone() };
        let queues = |port: &Port, name: &str, pool: &Rc<Pool>| -> Result<_, Fail> {
            port.queue_pair(qid, pool, &q)
                .map_err(|e| Fail::rawpkt(format!("port {name} ({}): queue {qid}", port.spec()), e))
        };
        let ((rx_a, tx_a), (rx_b, tx_b)) = (queues(a, "A", &pa)?, queues(b, "B", &pb)?);
        let dir = |rx, tx, from: &Rc<Pool>, to: &Rc<Pool>| Direction {
            rx,
            tx,
            got: Burst::new(from, how.burst),
            copy_to: how.copy.then(|| Burst::new(to, how.burst)),
            touch: how.touch && !how.copy,
            counts: Counts::default(),
        };
        let dirs = [dir(rx_a, tx_b, &pa, &pb), dir(rx_b, tx_a, &pb, &pa)];
        let pools = if how.copy { vec![pa, pb] } else { vec![pa] };
        Ok(Core { dirs, pools })
    }

    /// Forwards until `halt`, publishing the counters as it goes. No locks, no allocation.
    pub fn run(&mut self, halt: &AtomicBool, out: &Published) -> Result<(), Fail> {
        let (mut polls, mut idle) = (0u32, 0u32);
        while !halt.load(Ordering::Relaxed) {
            let n = self.dirs[0].poll().map_err(|e| Fail::Runtime(format!("A->B: {e}")))?
                + self.dirs[1].poll().map_err(|e| Fail::Runtime(format!("B->A: {e}")))?;
            polls = polls.wrapping_add(1);
            if polls % PUBLISH_EVERY == 0 {
                out.store(self.dirs.each_ref().map(|d| d.counts));
            }
            if polls % RECLAIM_EVERY == 0 {
                self.reclaim_tx(false)?;
            }
            if n > 0 {
                idle = 0;
            } else if idle < IDLE_POLLS {
                idle += 1;
            } else {
                // Frees sent buffers (and rings a lost doorbell again) while no burst does it.
                self.reclaim_tx(true)?;
                std::thread::yield_now();
            }
        }
        out.store(self.dirs.each_ref().map(|d| d.counts));
        Ok(())
    }

    /// `--tx-first`: one burst of `frame` copies out of each TX queue, B's (direction A->B)
    /// with `frames[0]`, A's with `frames[1]`. Returns what B and A took. Not in the counts,
    /// which keep `rx == tx + drops`.
    pub fn tx_first(&mut self, frames: [[u8; 60]; 2]) -> Result<[u64; 2], Fail> {
        let mut sent = [0u64; 2];
        for (d, name) in [0, 1].into_iter().zip(["B", "A"]) {
            // The TX queue's pool: the one pool, or (copy mode) B's for d = 0 and A's for d = 1.
            let pool = &self.pools[if self.pools.len() == 2 { 1 - d } else { 0 }];
            let dir = &mut self.dirs[d];
            let mut b = Burst::new(pool, dir.got.capacity());
            b.alloc(b.room(), frames[d].len());
            for i in 0..b.len() {
                b.data_mut(i).copy_from_slice(&frames[d]);
            }
            let mut c = Counts::default();
            hand_off(&mut *dir.tx, &mut b, &mut c).map_err(|e| Fail::Runtime(format!("{name} TX: {e}")))?;
            sent[d] = c.tx;
        }
        Ok(sent)
    }

    /// Reclaims the TX queues with frames in flight, or all (to hear of a failed idle queue).
    fn reclaim_tx(&mut self, all: bool) -> Result<(), Fail> {
        for (d, name) in self.dirs.iter_mut().zip(["B", "A"]) {
            if all || d.tx.in_flight() > 0 {
                d.tx.reclaim().map_err(|e| Fail::Runtime(format!("{name} TX: {e}")))?;
            }
        }
        Ok(())
    }

    /// Lets the TX rings complete (up to a second), drops the queues, counts buffers not back.
    pub fn finish(mut self) -> Final {
        let deadline = Instant::now() + Duration::from_secs(1);
        for d in &mut self.dirs {
            while d.tx.in_flight() > 0 && Instant::now() < deadline && d.tx.reclaim().is_ok() {
                std::thread::yield_now();
            }
        }
        Final {
            counts: self.dirs.each_ref().map(|d| d.counts),
            rx: self.dirs.each_ref().map(|d| *d.rx.stats()),
            tx: self.dirs.each_ref().map(|d| *d.tx.stats()),
            undrained: self.dirs.iter().map(|d| d.tx.in_flight()).sum(),
            missing: {
                drop(self.dirs); // the queues give their buffers back
                self.pools.iter().map(|p| p.capacity() - p.free_count()).sum()
            },
        }
    }
}

const DIRS: [&str; 2] = ["A->B", "B->A"];

fn run(cli: Cli) -> Result<(), Fail> {
    let setup = Setup::open(&cli)?;
    let (a, b, plan) = (&setup.a, &setup.b, &setup.plan);
    let (burst, copy, touch, rx_mode) = (usize::from(cli.burst), cli.copy, cli.touch, cli.rx_mode);
    let (halt, how) = (
        AtomicBool::new(false),
        Forwarding {
            burst,
            copy,
            touch,
            rx_mode,
        },
    );
    // --tx-first: out of B to A's MAC, out of A to B's (model ports have none and take every
    // frame: locally administered stand-ins).
    let mac = |p: &Port, last| p.mac().unwrap_or([2, 0, 0, 0, 0, last]);
    let (mac_a, mac_b) = (mac(a, 0xa), mac(b, 0xb));
    let first = cli.tx_first.then(|| {
        [
            tool::xconnect::tx_first_frame(mac_b, mac_a),
            tool::xconnect::tx_first_frame(mac_a, mac_b),
        ]
    });
    let published: Vec<Published> = plan.iter().map(|_| Published::default()).collect();
    let total = || published.iter().map(Published::load).fold([Counts::default(); 2], add);
    let (finals, elapsed) = std::thread::scope(|s| {
        let (mut crew, ab, halt) = (tool::threads::Crew::new(s, &halt), [a, b], &halt);
        for (i, (cpu, out)) in plan.iter().zip(&published).enumerate() {
            // Per core: its own queue pair on each port, its own pool, its own forwarding loop.
            crew.spawn(format!("core {i}"), *cpu, move |ready| {
                let core = Core::new(ab[0], ab[1], i as u16, how).map_err(|e| e.within(format_args!("core {i}")));
                ready.say(&core);
                let mut core = core?;
                if let Some(frames) = first {
                    let [to_a, to_b] = core.tx_first(frames).map_err(|e| e.within(format_args!("core {i}")))?;
                    rawpkt_sys::outln!("core {i}: --tx-first sent {to_b} frames out of A and {to_a} out of B");
                }
                let ran = core.run(halt, out).map_err(|e| e.within(format_args!("core {i}")));
                let fin = core.finish();
                ran.map(|()| Some(fin))
            })?;
        }
        crew.wait()?;
        // The generator starts once A and B have RX queues: a model port drops what arrives before.
        if let Some(g) = &setup.generator {
            crew.spawn("generator".into(), None, move |ready| {
                g.run(burst, halt, ready).map(|()| None)
            })?;
            crew.wait()?;
        }
        rawpkt_sys::outln!("forwarding: every queue is up"); // scripts and tests wait for this line
        let (start, mut last) = (Instant::now(), [Counts::default(); 2]);
        let mut ticker = tool::stats::Ticker::new(start, cli.stats_interval);
        crew.watch(cli.duration.map(|d| start + d), &mut ticker, |at, secs| {
            let now = total();
            for (d, (t, l)) in DIRS.iter().zip(now.into_iter().zip(last)) {
                let delta = [t.rx - l.rx, t.tx - l.tx, t.drops - l.drops];
                rawpkt_sys::outln!("[{at:7.1}s] {}", rate_line(d, delta, secs));
            }
            last = now;
        });
        let elapsed = start.elapsed().as_secs_f64();
        Ok((crew.join()?, elapsed))
    })?;

    rawpkt_sys::outln!("summary after {elapsed:.2} s:");
    for (d, c) in DIRS.iter().zip(total()) {
        rawpkt_sys::outln!("  {} on average", rate_line(d, [c.rx, c.tx, c.drops], elapsed));
    }
    for (i, f) in finals.iter().flatten().enumerate() {
        for (d, (rx, tx)) in DIRS.iter().zip(f.rx.iter().zip(&f.tx)) {
            rawpkt_sys::outln!("  core {i} {d}: {}", tool::stats::queues(rx, tx));
        }
        if f.undrained > 0 || f.missing > 0 {
            let (left, missing) = (f.undrained, f.missing);
            rawpkt_sys::outln!("  core {i}: {left} packets left on TX rings, {missing} buffers not back in the pool");
        }
    }
    setup.summary();
    Ok(())
}

fn main() -> ExitCode {
    tool::log::init();
    match tool::parse("error") {
        Ok(cli) => tool::finish("error", run(cli)),
        Err(code) => code,
    }
}
