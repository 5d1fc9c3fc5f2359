//! l2-xconnect: two ports cross-connected, like VPP's `set interface l2 xconnect A B` plus
//! `... B A`: whatever arrives on A leaves on B, and whatever arrives on B leaves on A.
//!
//! ```sh
//! cargo run --release --example l2-xconnect -- --duration 5 --generate
//! cargo run --release --example l2-xconnect -- --port-a model:afpacket=veth0 --port-b model:afpacket=veth1
//! cargo run --release --example l2-xconnect -- --port-a "xdp:xa,netns=xc,rule=any" --port-b "xdp:xb,netns=xc,rule=any"
//! ```
//!
//! An `xdp:` port without `rule=` takes only the frames addressed to its own MAC; a cross-connect
//! wants `rule=any` (`tests/xconnect_veth.rs`, `scripts/peers-xconnect.sh`, docs/xconnect.md).
//! Once every queue is up it prints `forwarding: every queue is up`: frames that arrive before
//! that find no RX queue.
//!
//! Each of `--cores N` loops is pinned to its own CPU and has its own queue pair on both ports
//! (queue id = core index) and its own pool. With one pool per core serving all four of that
//! core's queues, a received burst is handed to the other port's `tx_burst` as it is: zero-copy.
//! With `--copy` every core has a pool for A and one for B, and frames are copied across.
//!
//! The default ports are one end of two different model NICs (`model:xc-a/1`, `model:xc-b/0`),
//! so that the free ends (`model:xc-a/0`, `model:xc-b/1`) can inject and collect traffic. Model
//! NICs live inside this process, so `--generate` runs that traffic source and sink here.
//!
//! `tests/l2_xconnect.rs` includes this file as a module and drives [`Core`] itself: the
//! forwarding code the test checks is this code.
//!
//! Exit status, as pktgen's (see [`Fail`]): 2 for a usage mistake, 1 for a failure.

use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;
use rawpkt::tool::{self, Fail};
use rawpkt::{open, Burst, Pool, PoolConfig, Port, QueueConfig, QueueError, QueueStats, RxQueue, TxQueue};

#[derive(Parser, Debug)]
#[command(
    name = "l2-xconnect",
    about = "Cross-connect two ports: what arrives on A leaves on B, and the reverse",
    after_help = tool::fail::exit_status("l2-xconnect", "")
)]
pub struct Cli {
    /// Port A (see the README's port specs)
    #[arg(long, value_name = "SPEC", default_value = "model:xc-a/1")]
    pub port_a: String,
    /// Port B
    #[arg(long, value_name = "SPEC", default_value = "model:xc-b/0")]
    pub port_b: String,
    /// Forwarding loops, one pinned thread each, with queue id = core index
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=128))]
    pub cores: u16,
    /// Packets per burst
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub burst: u16,
    /// Stop after this many seconds (default: run until Ctrl-C)
    #[arg(long, value_name = "SECS", value_parser = tool::cli::positive_secs, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Copy frames between per-port pools even though a zero-copy hand-off is possible
    #[arg(long)]
    pub copy: bool,
    /// Read the first byte of every packet, as a forwarder that looks at headers would (ixy)
    #[arg(long)]
    pub touch: bool,
    /// Seconds between stats lines, at least 0.1; 0 prints only the summary
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = tool::cli::interval, allow_negative_numbers = true)]
    pub stats_interval: Duration,
    /// Model ports only: send 60-byte frames into A and B from the other port of each model NIC
    /// and count what comes out (model NICs exist only inside this process)
    #[arg(long)]
    pub generate: bool,
}

impl Cli {
    pub fn forwarding(&self) -> Forwarding {
        Forwarding {
            burst: usize::from(self.burst),
            copy: self.copy,
            touch: self.touch,
        }
    }
}

/// Packets one direction of one core has moved. `rx == tx + drops` at every burst boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub rx: u64,
    pub tx: u64,
    /// Refused by the TX ring, or (copy mode) not copied for lack of buffers.
    pub drops: u64,
}

/// Reads the first byte of every packet (`--touch`). ixy's forwarder touches one byte per packet
/// because "otherwise it's a completely unrealistic workload": a forwarder that looks at headers
/// reads at least the Ethernet header, while on a ConnectX-5 (eMPW, no inline) the TX path never
/// reads packet memory, so the loop only moves descriptors. It is not free: the frame was just
/// written by the device (here the model NIC's thread on another CPU; on hardware, DMA into the
/// LLC), so each read is a cache miss, and with `--generate` on the 2-vCPU VM the reads took
/// 10-17% of the forwarding core's perf samples. A cross-connect need not look at packets (nor
/// does testpmd's `io` mode), so it is off by default. Copy mode reads every byte anyway.
#[inline]
pub fn touch(pkts: &Burst) -> u8 {
    (0..pkts.len()).fold(0, |x, i| x ^ pkts.data(i).first().copied().unwrap_or(0))
}

/// Gives `pkts` to `tx`; whatever the TX ring did not accept is dropped at once and counted.
/// ixy: "better to drop them, otherwise we accumulate latency".
#[inline]
pub fn hand_off(tx: &mut dyn TxQueue, pkts: &mut Burst, c: &mut Counts) -> Result<(), QueueError> {
    c.tx += tx.tx_burst(pkts)? as u64;
    if !pkts.is_empty() {
        c.drops += pkts.len() as u64;
        pkts.clear();
    }
    Ok(())
}

/// Copies every frame of `from` into fresh buffers appended to `to` (of another pool), then
/// frees `from`. Frames the pool has no buffer for are dropped and counted.
#[inline]
pub fn copy_into(from: &mut Burst, to: &mut Burst, c: &mut Counts) {
    for i in 0..from.len() {
        if !to.push_copy(from.data(i)) {
            c.drops += 1;
        }
    }
    from.clear();
}

/// How a core forwards.
#[derive(Clone, Copy, Debug)]
pub struct Forwarding {
    pub burst: usize,
    /// Copy between a pool per port instead of handing buffers over.
    pub copy: bool,
    /// Read the first byte of each packet (zero-copy mode; see [`touch`]).
    pub touch: bool,
}

/// One direction of one core: RX on one port, TX on the other.
pub struct Direction {
    rx: Box<dyn RxQueue>,
    tx: Box<dyn TxQueue>,
    /// Received packets, in the RX queue's pool.
    got: Burst,
    /// Copy mode: the burst in the TX queue's pool that frames are copied into.
    copy_to: Option<Burst>,
    touch: bool,
    pub counts: Counts,
}

impl Direction {
    /// One burst: receive, hand over (or copy) to the other port, drop what TX refused.
    /// Returns how many packets arrived.
    #[inline]
    pub fn poll(&mut self) -> Result<usize, QueueError> {
        let n = self.rx.rx_burst(&mut self.got)?;
        if n == 0 {
            return Ok(0);
        }
        self.counts.rx += n as u64;
        match &mut self.copy_to {
            None => {
                if self.touch {
                    std::hint::black_box(touch(&self.got));
                }
                hand_off(&mut *self.tx, &mut self.got, &mut self.counts)?;
            }
            Some(out) => {
                copy_into(&mut self.got, out, &mut self.counts);
                hand_off(&mut *self.tx, out, &mut self.counts)?;
            }
        }
        Ok(n)
    }
}

/// Counters a core publishes for the stats thread: plain stores every [`PUBLISH_EVERY`] polls,
/// on a cache line of their own.
#[derive(Default)]
#[repr(align(128))]
pub struct Published([[AtomicU64; 3]; 2]);

impl Published {
    pub fn store(&self, c: [Counts; 2]) {
        for (slot, c) in self.0.iter().zip(c) {
            slot[0].store(c.rx, Ordering::Relaxed);
            slot[1].store(c.tx, Ordering::Relaxed);
            slot[2].store(c.drops, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> [Counts; 2] {
        self.0.each_ref().map(|s| Counts {
            rx: s[0].load(Ordering::Relaxed),
            tx: s[1].load(Ordering::Relaxed),
            drops: s[2].load(Ordering::Relaxed),
        })
    }
}

pub const PUBLISH_EVERY: u32 = 256;
/// Empty polls (of both directions) after which an idle loop reclaims TX completions and yields
/// the CPU between polls; on a dedicated core the yield returns at once.
pub const IDLE_POLLS: u32 = 1024;
/// Polls after which a TX queue with frames still in flight is reclaimed even under load: a
/// direction that receives nothing calls no `tx_burst`, and frames its queue holds back (an AF_XDP
/// queue waiting out a full device queue, or past the kernel's per-`sendto` budget) would
/// otherwise wait for the next frame in that direction, or for both directions to go idle.
pub const RECLAIM_EVERY: u32 = 64;

/// What a core did, read after its loop stopped and its queues were torn down.
#[derive(Clone, Copy, Debug)]
pub struct Final {
    /// A->B, B->A.
    pub counts: [Counts; 2],
    /// RX queue stats of each direction (A's, B's).
    pub rx: [QueueStats; 2],
    /// TX queue stats of each direction (B's, A's).
    pub tx: [QueueStats; 2],
    /// Packets still on a TX ring when the drain gave up (their buffers are freed anyway).
    pub undrained: usize,
    /// Buffers not back in their pool after teardown: a leak, should be 0.
    pub missing: u32,
}

/// One forwarding core: queue `qid` on both ports, directions A->B and B->A.
pub struct Core {
    pub dirs: [Direction; 2],
    pools: Vec<Rc<Pool>>,
}

impl Core {
    /// Builds the core's pools and queues. Zero-copy: one pool for all four queues. Copy: a pool
    /// for A's queues and one for B's.
    pub fn new(a: &Port, b: &Port, qid: u16, how: Forwarding) -> Result<Core, Fail> {
        let (q, burst, copy) = (QueueConfig::default(), how.burst, how.copy);
        // Each pool fills the rings of the queue pairs on it and still has room for the bursts.
        // A TX queue holds up to 4 packets per descriptor with eMPW (nothing in the API says so).
        let pool = |pairs: u32| {
            Pool::new(PoolConfig {
                buffers: pairs * 5 * q.size + 4 * burst as u32,
                ..PoolConfig::default()
            })
            .map_err(|e| Fail::rawpkt("packet pool", e))
        };
        let queues = |port: &Port, name: &str, pool: &Rc<Pool>| -> Result<_, Fail> {
            let what = |kind: &str, e: rawpkt::Error| {
                Fail::rawpkt(format!("port {name} ({}): {kind} queue {qid}", port.spec()), e)
            };
            let rx = port.rx_queue(qid, pool, &q).map_err(|e| what("RX", e))?;
            let tx = port.tx_queue(qid, pool, &q).map_err(|e| what("TX", e))?;
            Ok((rx, tx))
        };
        let dir = |rx, tx, from: &Rc<Pool>, to: &Rc<Pool>| Direction {
            rx,
            tx,
            got: Burst::new(from, burst),
            copy_to: copy.then(|| Burst::new(to, burst)),
            touch: how.touch,
            counts: Counts::default(),
        };
        let (pa, pb) = if copy {
            (pool(1)?, pool(1)?)
        } else {
            let p = pool(2)?;
            (p.clone(), p)
        };
        let (rx_a, tx_a) = queues(a, "A", &pa)?;
        let (rx_b, tx_b) = queues(b, "B", &pb)?;
        Ok(Core {
            dirs: [dir(rx_a, tx_b, &pa, &pb), dir(rx_b, tx_a, &pb, &pa)],
            pools: if copy { vec![pa, pb] } else { vec![pa] },
        })
    }

    pub fn counts(&self) -> [Counts; 2] {
        [self.dirs[0].counts, self.dirs[1].counts]
    }

    /// Forwards until `halt` is set, publishing the counters every [`PUBLISH_EVERY`] polls and
    /// at the end. Nothing in here locks or allocates (bar the error path).
    pub fn run(&mut self, halt: &AtomicBool, out: &Published) -> Result<(), Fail> {
        let (mut polls, mut idle) = (0u32, 0u32);
        while !halt.load(Ordering::Relaxed) {
            let n = self.dirs[0].poll().map_err(|e| Fail::Runtime(format!("A->B: {e}")))?
                + self.dirs[1].poll().map_err(|e| Fail::Runtime(format!("B->A: {e}")))?;
            polls = polls.wrapping_add(1);
            if polls % PUBLISH_EVERY == 0 {
                out.store(self.counts());
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
        out.store(self.counts());
        Ok(())
    }

    /// Reclaims the TX queues with frames in flight, or all of them (`all`: which also reports a
    /// queue that failed while it had nothing to send).
    fn reclaim_tx(&mut self, all: bool) -> Result<(), Fail> {
        for (d, name) in self.dirs.iter_mut().zip(["B", "A"]) {
            if all || d.tx.in_flight() > 0 {
                d.tx.reclaim().map_err(|e| Fail::Runtime(format!("{name} TX: {e}")))?;
            }
        }
        Ok(())
    }

    /// Waits (up to a second) for the TX rings to complete, then drops the queues and checks
    /// that every buffer is back in its pool.
    pub fn finish(mut self) -> Final {
        let deadline = Instant::now() + Duration::from_secs(1);
        for d in &mut self.dirs {
            while d.tx.in_flight() > 0 && Instant::now() < deadline && d.tx.reclaim().is_ok() {
                std::thread::yield_now();
            }
        }
        let fin = Final {
            counts: self.counts(),
            rx: self.dirs.each_ref().map(|d| *d.rx.stats()),
            tx: self.dirs.each_ref().map(|d| *d.tx.stats()),
            undrained: self.dirs.iter().map(|d| d.tx.in_flight()).sum(),
            missing: 0,
        };
        let Core { dirs, pools } = self;
        drop(dirs);
        Final {
            missing: pools.iter().map(|p| p.capacity() - p.free_count()).sum(),
            ..fin
        }
    }
}

/// `model:NAME/P` -> `model:NAME/Q`, the other port of that model NIC's back-to-back pair.
pub fn far_end(spec: &str) -> Option<String> {
    let (name, port) = spec.strip_prefix("model:")?.rsplit_once('/')?;
    let other = match port {
        "0" => 1,
        "1" => 0,
        _ => return None,
    };
    (!name.is_empty() && !name.starts_with("afpacket=")).then(|| format!("model:{name}/{other}"))
}

/// `--generate`: sends 60-byte frames as fast as the rings take them on the far end of A and of
/// B, and counts what comes back out of the far ends. Counters: sent into A, sent into B,
/// received out of B, received out of A.
fn traffic(
    far: [&Port; 2],
    burst: usize,
    halt: &AtomicBool,
    ready: mpsc::Sender<Result<(), Fail>>,
    out: &[AtomicU64; 4],
) -> Result<(), Fail> {
    let setup = || -> Result<_, Fail> {
        let q = QueueConfig::default();
        let pool = Pool::new(PoolConfig {
            buffers: 2 * 5 * q.size + 4 * burst as u32, // as in `Core::new`
            ..PoolConfig::default()
        })
        .map_err(|e| Fail::rawpkt("generator: packet pool", e))?;
        let mut queues = Vec::new();
        for port in far {
            let what = |e: rawpkt::Error| Fail::rawpkt(format!("generator on {}", port.spec()), e);
            queues.push((
                port.tx_queue(0, &pool, &q).map_err(what)?,
                port.rx_queue(0, &pool, &q).map_err(what)?,
            ));
        }
        Ok((pool, queues))
    };
    let (pool, mut queues) = match setup() {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            drop(ready); // the main thread waits for every sender to answer or be gone
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    const HEADER: [u8; 14] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
    let (mut frames, mut got) = (Burst::new(&pool, burst), Burst::new(&pool, burst));
    let (mut counts, mut polls) = ([0u64; 4], 0u32);
    while !halt.load(Ordering::Relaxed) {
        for (i, (tx, rx)) in queues.iter_mut().enumerate() {
            let had = frames.len();
            frames.alloc(frames.room(), 60);
            for j in had..frames.len() {
                frames.data_mut(j)[..14].copy_from_slice(&HEADER);
            }
            counts[i] += tx
                .tx_burst(&mut frames)
                .map_err(|e| Fail::Runtime(format!("generator TX: {e}")))? as u64;
            counts[3 - i] += rx
                .rx_burst(&mut got)
                .map_err(|e| Fail::Runtime(format!("generator RX: {e}")))? as u64;
            got.clear();
        }
        polls = polls.wrapping_add(1);
        if polls % PUBLISH_EVERY == 0 {
            counts.iter().zip(out).for_each(|(c, o)| o.store(*c, Ordering::Relaxed));
        }
    }
    counts.iter().zip(out).for_each(|(c, o)| o.store(*c, Ordering::Relaxed));
    Ok(())
}

/// Worker thread of core `i`: pins itself, builds its core, says whether that worked, forwards.
#[allow(clippy::too_many_arguments)]
fn worker(
    i: usize,
    cpu: Option<usize>,
    ports: [&Port; 2],
    cli: &Cli,
    halt: &AtomicBool,
    out: &Published,
    ready: mpsc::Sender<Result<(), Fail>>,
) -> Result<Final, Fail> {
    if let Some(cpu) = cpu {
        if !tool::cpu::pin(cpu) {
            rawpkt::errln!("warning: core {i}: could not pin to CPU {cpu}; running unpinned");
        }
    }
    let mut core = match Core::new(ports[0], ports[1], i as u16, cli.forwarding()) {
        Ok(core) => core,
        Err(e) => {
            let e = e.within(format_args!("core {i}"));
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(()));
    drop(ready); // the main thread waits for every sender to answer or be gone
    let ran = core.run(halt, out).map_err(|e| e.within(format_args!("core {i}")));
    let fin = core.finish();
    ran.map(|()| fin)
}

fn sum(cores: &[Published]) -> [Counts; 2] {
    let mut t = [Counts::default(); 2];
    for c in cores.iter().map(Published::load) {
        for (t, c) in t.iter_mut().zip(c) {
            t.rx += c.rx;
            t.tx += c.tx;
            t.drops += c.drops;
        }
    }
    t
}

fn line(name: &str, c: Counts, secs: f64) -> String {
    let mpps = c.tx as f64 / secs.max(1e-9) / 1e6;
    format!("{name}: {mpps:.2} Mpps (rx {}, tx {}, drops {})", c.rx, c.tx, c.drops)
}

const DIRS: [&str; 2] = ["A->B", "B->A"];

fn run(cli: Cli) -> Result<(), Fail> {
    let stop = rawpkt::stop_flag();
    if cli.port_a == cli.port_b {
        return Err(Fail::Usage(format!(
            "--port-a and --port-b are the same port ({})",
            cli.port_a
        )));
    }
    let a =
        open(&cli.port_a).map_err(|e| Fail::rawpkt(format_args!("--port-a {}", rawpkt::spec::echo(&cli.port_a)), e))?;
    let b =
        open(&cli.port_b).map_err(|e| Fail::rawpkt(format_args!("--port-b {}", rawpkt::spec::echo(&cli.port_b)), e))?;
    if a.same_port(&b) {
        return Err(Fail::Usage(format!(
            "--port-a and --port-b are the same port ({})",
            a.identity()
        )));
    }
    let far = if cli.generate {
        let fa = far_end(&cli.port_a);
        let fb = far_end(&cli.port_b);
        let (Some(fa), Some(fb)) = (fa, fb) else {
            return Err(Fail::Usage(
                "--generate needs two model:NAME/P ports (it sends from the other port of each)".into(),
            ));
        };
        if [&fa, &fb].iter().any(|f| **f == cli.port_a || **f == cli.port_b) {
            return Err(Fail::Usage(
                "--generate needs A and B on two different model NICs".into(),
            ));
        }
        Some([
            open(&fa).map_err(|e| Fail::rawpkt(format_args!("--generate {fa}"), e))?,
            open(&fb).map_err(|e| Fail::rawpkt(format_args!("--generate {fb}"), e))?,
        ])
    } else {
        None
    };

    // VPP's layout: the main thread (stats) on the first CPU, workers on the next ones.
    let n = usize::from(cli.cores);
    let plan = tool::cpu::plan(n);
    if plan[0].is_none() {
        let m = tool::cpu::allowed().len();
        rawpkt::errln!("warning: not pinning: {n} cores asked for and {m} CPUs available");
    }
    rawpkt::outln!(
        "l2-xconnect: A = {}, B = {}, {n} core(s) on CPU(s) {}, burst {}",
        a.spec(),
        b.spec(),
        plan.iter()
            .map(|c| c.map_or("-".into(), |c| c.to_string()))
            .collect::<Vec<_>>()
            .join(","),
        cli.burst
    );
    rawpkt::outln!(
        "mode: {}{}",
        if cli.copy {
            "copy (--copy): per core a pool for A and one for B; frames copied across"
        } else {
            "zero-copy: per core one pool for all four queues; RX bursts go to the other TX as they are"
        },
        if cli.touch && !cli.copy {
            "; first byte of each packet read (--touch)"
        } else {
            ""
        }
    );

    let halt = AtomicBool::new(false);
    let published: Vec<Published> = (0..n).map(|_| Published::default()).collect();
    let generated: [AtomicU64; 4] = Default::default();
    std::thread::scope(|s| {
        // However this closure ends, a panic included, the threads stop: the scope joins them
        // before it returns or unwinds, and they run until `halt`.
        let _halt = rawpkt::SetOnDrop(&halt);
        let spawn_err = |e: std::io::Error| {
            halt.store(true, Ordering::Relaxed);
            Fail::Runtime(format!("cannot start a thread: {e}"))
        };
        // Every thread says once whether its queues came up; one that died says nothing, and
        // its sender closing ends the wait.
        let wait = |ready: mpsc::Receiver<Result<(), Fail>>, n: usize| -> Result<(), Fail> {
            let answers: Vec<_> = ready.iter().take(n).collect();
            let died = answers.len() < n;
            answers.into_iter().collect::<Result<Vec<()>, _>>()?;
            if died {
                return Err(Fail::Runtime("a thread died during set-up".into()));
            }
            Ok(())
        };
        let (ready_tx, ready) = mpsc::channel();
        let mut workers = Vec::new();
        for (i, cpu) in plan.iter().enumerate() {
            let (ports, cli, halt, out, ready) = ([&a, &b], &cli, &halt, &published[i], ready_tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("xc-core{i}"))
                .spawn_scoped(s, move || {
                    // A core that dies (a panic) stops the others and the main loop.
                    let _halt = rawpkt::SetOnDrop(halt);
                    worker(i, *cpu, ports, cli, halt, out, ready)
                });
            workers.push(h.map_err(spawn_err)?);
        }
        drop(ready_tx);
        let mut setup = wait(ready, workers.len());
        // The generator starts once A and B have RX queues: a model port drops what arrives
        // before.
        let mut gen = None;
        if let (Ok(()), Some([fa, fb])) = (&setup, &far) {
            let (ready_tx, ready) = mpsc::channel();
            let (halt, out, burst) = (&halt, &generated, usize::from(cli.burst));
            let h = std::thread::Builder::new()
                .name("xc-generator".into())
                .spawn_scoped(s, move || {
                    let _halt = rawpkt::SetOnDrop(halt);
                    traffic([fa, fb], burst, halt, ready_tx, out)
                });
            gen = Some(h.map_err(spawn_err)?);
            setup = wait(ready, 1);
        }
        match &setup {
            // Scripts and tests wait for this line: before it, a frame reaching A or B may find
            // no RX queue (an xdp: port then passes it to Linux, a model port drops it).
            Ok(()) => rawpkt::outln!("forwarding: every queue is up"),
            Err(_) => halt.store(true, Ordering::Relaxed),
        }

        let start = Instant::now();
        let deadline = cli.duration.map(|d| start + d);
        let interval = (!cli.stats_interval.is_zero()).then_some(cli.stats_interval);
        let (mut last_at, mut last) = (start, [Counts::default(); 2]);
        let mut next = interval.map(|i| start + i);
        while !halt.load(Ordering::Relaxed) {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) {
                rawpkt::outln!("interrupted");
                break;
            }
            if deadline.is_some_and(|d| now >= d)
                || workers.iter().any(|w| w.is_finished())
                || gen.as_ref().is_some_and(|g| g.is_finished())
            {
                break;
            }
            if let (Some(at), Some(i)) = (next, interval) {
                if now >= at {
                    let total = sum(&published);
                    let secs = now.duration_since(last_at).as_secs_f64();
                    for (d, (t, l)) in total.iter().zip(last).enumerate() {
                        let delta = Counts {
                            rx: t.rx - l.rx,
                            tx: t.tx - l.tx,
                            drops: t.drops - l.drops,
                        };
                        rawpkt::outln!(
                            "[{:7.1}s] {}",
                            now.duration_since(start).as_secs_f64(),
                            line(DIRS[d], delta, secs)
                        );
                    }
                    (last_at, last) = (now, total);
                    next = Some(at + i);
                }
            }
            let wake = [next, deadline]
                .into_iter()
                .flatten()
                .fold(now + Duration::from_millis(50), Instant::min);
            std::thread::sleep(wake.saturating_duration_since(now));
        }
        halt.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed().as_secs_f64();

        let mut result = setup;
        let mut finals = Vec::new();
        for (i, w) in workers.into_iter().enumerate() {
            match w.join() {
                Ok(Ok(f)) => finals.push((i, f)),
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(Fail::Runtime(format!("core {i} panicked")))),
            }
        }
        if let Some(g) = gen {
            match g.join() {
                Ok(r) => result = result.and(r),
                Err(_) => result = result.and(Err(Fail::Runtime("the generator panicked".into()))),
            }
        }
        result?;

        let total = sum(&published);
        rawpkt::outln!("summary after {elapsed:.2} s:");
        for (name, t) in DIRS.iter().zip(total) {
            rawpkt::outln!("  {} on average", line(name, t, elapsed));
        }
        for (i, f) in &finals {
            for (name, (rx, tx)) in DIRS.iter().zip(f.rx.iter().zip(&f.tx)) {
                rawpkt::outln!(
                    "  core {i} {name}: RX device drops {}, no buffers {}, errors {}; TX drops {}, errors {}, recoveries {}",
                    rx.drops,
                    rx.no_buffers,
                    rx.errors.total(),
                    tx.drops,
                    tx.errors.total(),
                    tx.recoveries
                );
            }
            if f.undrained > 0 || f.missing > 0 {
                rawpkt::outln!(
                    "  core {i}: {} packets left on TX rings, {} buffers not back in the pool",
                    f.undrained,
                    f.missing
                );
            }
        }
        for (port, name) in [(&a, "A"), (&b, "B")] {
            if let Some((nic, p)) = port.model() {
                let c = nic.port_counters(p);
                rawpkt::outln!(
                    "  model port {name}: received {}, dropped {} for lack of RX buffers",
                    c.rx_frames,
                    c.rx_out_of_buffer
                );
            }
        }
        if far.is_some() {
            let g = generated.each_ref().map(|c| c.load(Ordering::Relaxed));
            rawpkt::outln!(
                "  generator: sent {} into A and {} into B; received {} out of B and {} out of A",
                g[0],
                g[1],
                g[2],
                g[3]
            );
        }
        Ok(())
    })
}

fn main() -> ExitCode {
    tool::log::init();
    match tool::parse("error") {
        Ok(cli) => tool::finish("error", run(cli)),
        Err(code) => code,
    }
}
