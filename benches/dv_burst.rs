//! DV datapath benchmark: `DvTxQueue::tx_burst` and `DvRxQueue::rx_burst` against the mlx5
//! device model, batch 32, 60-byte frames (64 on the wire with the FCS; ixy's `PACKET_SIZE`).
//!
//! Modes (first non-flag argument; unknown flags such as cargo's `--bench` are ignored):
//! - `threaded` (default): the model NIC polls its doorbells on its own thread, pinned to the
//!   second allowed CPU; this thread is pinned to the first. Two measurements, each on a fresh NIC:
//!   `dv_tx` (TX on port 0, nothing listening on port 1) and `dv_rx` (TX on port 0, RX on port 1,
//!   both driven from this thread). `--secs S` sets the measured time of each (default 2).
//! - `stepped [N]` (default N = 20000): no model thread. N iterations of {fill a burst of 32;
//!   `tx_burst`; `nic.step()`; `rx_burst`; free what arrived}. Deterministic, for callgrind
//!   (`scripts/callgrind.sh`), which counts instructions inside the two `#[inline(never)]`
//!   burst functions; the last line is `packets tx=... rx=...`.
//! - `stepped-xc [N]`: the l2-xconnect loop, stepped. A generator sends on port 0; the
//!   cross-connect receives on port 1 and sends the same burst back out of port 1 (zero-copy, one
//!   pool, as l2-xconnect (`crates/rawpkt-tools`) forwards); a sink receives on port 0. callgrind counts
//!   inside `xconnect_burst` (`scripts/callgrind.sh --xconnect`); the last line is
//!   `packets tx=<forwarded> rx=<received by the sink>`.
//!
//! `--rx-mode M` chooses the receive queues of every mode, as the two `QueueConfig` fields
//! `rx_striding` and `rx_cqe_compression` do: `cyclic` (default: a cyclic RQ, one 64-byte CQE
//! per packet), `compressed` (CQE compression, hash mini-CQEs: the model writes a step's
//! completions as sessions), `striding` (`DvStridingRxQueue`, 16 strides of 1 KiB per WQE) or
//! `striding+compressed` (a striding RQ whose CQ compresses, checksum/stride-index mini-CQEs).
//! `dv_burst rx-modes` lists the modes the device (`RAWPKT_BENCH_DEVICE`) has, one a line, and
//! says on stderr why it leaves one out (a ConnectX-4 has no striding RQ). After a stepped run
//! the line `rx_mode=M` says what ran: a mode is `compressed` only if the device wrote compressed
//! sessions, and a run whose queue did not hand up every frame it was sent, in order, fails in
//! one line (exit 1) rather than print a figure.
//!
//! `RAWPKT_NO_SIMD=1` opens every queue with `QueueConfig::cpu_vector` off: the portable builds,
//! as a CPU without MOVBE and AVX2 runs them.
//!
//! Every measurement prints a table row and one JSON line (`{"bench":"dv_tx",...}`).
//! See `docs/benchmarks.md` for what each number means.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5_model::{ModelConfig, Nic};
use mlx5_prm::MiniFormat;
use rawpkt::internals::ring::CqInfo;
use rawpkt::internals::DvRxQueue;
use rawpkt::internals::DvStridingRxQueue;
use rawpkt::internals::DvTxQueue;
use rawpkt::internals::NicQueues;
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

const BATCH: usize = 32;
/// Frame length without FCS: a 64-byte Ethernet frame on the wire.
const FRAME: usize = 60;
/// Where the sequence number goes: the first bytes of the UDP payload.
const SEQ_OFF: usize = 42;
const POOL_BUFFERS: u32 = 4096;
const WARMUP: Duration = Duration::from_millis(200);
/// Iterations between two looks at the clock.
const CLOCK_EVERY: u32 = 16;

// ---------------------------------------------------------------------------------------------
// Clock: the TSC where there is one (a few ns per read, against ~20 for `Instant::now`), scaled
// to nanoseconds by comparing it with `Instant` over the whole measurement.

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; it is part of the x86_64 baseline.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<Instant> = OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Ticks per nanosecond, measured between two (Instant, ticks) points.
struct Clock {
    wall: Instant,
    tsc: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            wall: Instant::now(),
            tsc: ticks(),
        }
    }
    fn ticks_per_ns(&self, end: &Clock) -> f64 {
        let ns = end.wall.duration_since(self.wall).as_nanos() as f64;
        (end.tsc - self.tsc) as f64 / ns.max(1.0)
    }
}

/// The cheapest back-to-back pair of `ticks()`: what timing one burst call adds to it.
fn timer_overhead_ticks() -> u64 {
    (0..10_000)
        .map(|_| {
            let a = ticks();
            let b = ticks();
            b - a
        })
        .min()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Interference: CPU time the rest of the machine used while we measured (other processes, and
// the hypervisor's steal), so that a run disturbed by a concurrent build says so.

#[derive(Clone, Copy)]
struct CpuSample {
    /// Busy and steal seconds of all CPUs (/proc/stat).
    busy: f64,
    steal: f64,
    /// CPU seconds of this process, all threads.
    own: f64,
}

fn cpu_sample() -> Option<CpuSample> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let hz = 100.0; // USER_HZ: what /proc/stat counts in on every Linux ABI
    let busy = (f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?) / hz;
    let steal = f.get(7)? / hz;
    // SAFETY: getrusage writes one rusage struct into the zeroed one we pass.
    let own = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return None;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    Some(CpuSample { busy, steal, own })
}

/// (others, steal): CPUs' worth of time used by other processes and stolen by the hypervisor
/// between two samples `secs` apart (1.0 = one whole CPU).
fn interference(a: Option<CpuSample>, b: Option<CpuSample>, secs: f64) -> (f64, f64) {
    match (a, b) {
        (Some(a), Some(b)) => (
            ((b.busy - a.busy) - (b.own - a.own)).max(0.0) / secs,
            (b.steal - a.steal) / secs,
        ),
        _ => (0.0, 0.0),
    }
}

fn warn_interference(bench: &str, others: f64, steal: f64) {
    if others > 0.05 || steal > 0.05 {
        eprintln!(
            "WARNING: {bench}: other processes used {:.0}% of a CPU and the hypervisor stole {:.0}% during the \
             measurement; the numbers are disturbed",
            others * 100.0,
            steal * 100.0
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The rig: a two-port model NIC, port 0 wired to port 1, a TX queue on port 0 and (optionally)
// an RX queue on port 1, each with its own pool as two cores would have.

struct Rig {
    // Field order is drop order: queues before pools and the NIC they talk to.
    tx: DvTxQueue,
    rx: Option<DvRxQueue>,
    /// `--rx-mode striding[+compressed]`: the RX queue, on a striding RQ (and `rx` is None).
    rx_striding: Option<DvStridingRxQueue>,
    tx_pool: Rc<Pool>,
    rx_pool: Rc<Pool>,
    nic: Arc<Nic>,
}

/// A receive mode: the two `QueueConfig` fields that choose it, named as
/// `QueueConfig::RX_MODES` names them (pktgen's `--rx-mode` too).
#[derive(Clone, Copy, PartialEq, Eq)]
struct RxMode {
    striding: bool,
    compressed: bool,
}

impl RxMode {
    const fn new(striding: bool, compressed: bool) -> RxMode {
        RxMode { striding, compressed }
    }

    /// Every mode, in the order `rx-modes` lists them.
    fn all() -> impl Iterator<Item = RxMode> {
        QueueConfig::RX_MODES.into_iter().map(|(_, s, c)| RxMode::new(s, c))
    }

    fn name(self) -> &'static str {
        self.queue_config().rx_mode()
    }

    fn parse(s: &str) -> Option<RxMode> {
        let q = QueueConfig::default().with_rx_mode(s)?;
        Some(RxMode::new(q.rx_striding, q.rx_cqe_compression))
    }

    /// The queue configuration the mode is.
    fn queue_config(self) -> QueueConfig {
        QueueConfig::default()
            .rx_striding(self.striding)
            .rx_cqe_compression(self.compressed)
            .cpu_vector(cpu_vector())
    }

    /// The mini-CQE format of a receive CQ in this mode: the hash format on a cyclic RQ, the
    /// checksum/stride-index one on a striding RQ (the stride index is how a mini-CQE names its
    /// stride: DPDK `mlx5_devx.c` `mlx5_rxq_create_devx_cq_resources`, VPP `rdma/device.c`).
    fn cq_format(self) -> Option<MiniFormat> {
        match (self.compressed, self.striding) {
            (false, _) => None,
            (true, false) => Some(MiniFormat::Hash),
            (true, true) => Some(MiniFormat::CsumStridx),
        }
    }

    /// Why `device` cannot run this mode, if it cannot.
    fn refused_by(self, device: &ModelConfig) -> Option<String> {
        (self.striding && device.striding_rq == mlx5_prm::mprq::Caps::NONE).then(|| {
            format!(
                "{}: the device ({}) has no striding RQ (mlx5dv_striding_rq_caps are empty: a ConnectX-4)",
                self.name(),
                device_name()
            )
        })
    }
}

/// `--rx-mode` (set once by `main`; cyclic when not given).
static RX_MODE: std::sync::OnceLock<RxMode> = std::sync::OnceLock::new();

fn rx_mode() -> RxMode {
    *RX_MODE.get_or_init(|| RxMode::new(false, false))
}

/// `QueueConfig::cpu_vector`: off where `RAWPKT_NO_SIMD` is set to anything but empty or `0`
/// (`scripts/callgrind.sh --portable`), so that the portable builds are measured on this CPU.
fn cpu_vector() -> bool {
    std::env::var_os("RAWPKT_NO_SIMD").is_none_or(|v| v.is_empty() || v == "0")
}

/// The device `RAWPKT_BENCH_DEVICE` names: `cx4` models a ConnectX-4 (18 inline bytes, one
/// 64-byte SEND per packet, no striding RQ); anything else a ConnectX-5 (enhanced multi-packet
/// send).
fn device_name() -> &'static str {
    match std::env::var("RAWPKT_BENCH_DEVICE").as_deref() {
        Ok("cx4") => "cx4",
        _ => "cx5",
    }
}

fn device() -> ModelConfig {
    let d = match device_name() {
        "cx4" => ModelConfig::connectx4(),
        _ => ModelConfig::default(),
    };
    // No trace file even if RAWPKT_MODEL_TRACE is set.
    ModelConfig { trace: None, ..d }
}

/// A cyclic receive CQ as `--rx-mode` asks for it.
fn rx_cq(nic: &Nic, q: &QueueConfig) -> CqInfo {
    nic.create_cq_with(q.size, rx_mode().cq_format().filter(|_| !rx_mode().striding))
        .expect("RX CQ")
}

/// A striding receive queue on `port` as `--rx-mode` asks for it (16 strides of 1 KiB per WQE
/// for the default 2 KiB buffers, `rx::dv_striding::params_for`).
fn striding_rx(nic: &Arc<Nic>, port: usize, lkey: u32, pool: &Rc<Pool>, q: &QueueConfig) -> DvStridingRxQueue {
    let params = rawpkt::internals::params_for(pool, &nic.config().striding_rq).expect("striding");
    let n = params.num_strides();
    // Every stride may complete on its own, and every WQE may end with a filler.
    let cq = nic
        .create_cq_with(q.size / n * (n + 1), rx_mode().cq_format())
        .expect("RX CQ");
    let opts = mlx5_model::RqOptions {
        max_sge: n,
        striding: Some(params),
        ..Default::default()
    };
    let (rwq, wq) = nic
        .create_rq_with(port, q.size / n, cq.cqn(), opts)
        .expect("striding RQ");
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    unsafe { DvStridingRxQueue::new(&rwq, &cq, params, wq, lkey, pool, q, nic.control()) }
        .unwrap_or_else(|e| fail(format_args!("{}: the striding receive queue: {e}", rx_mode().name())))
}

/// One line on stderr, exit 1: a run that cannot give a figure.
fn fail(what: std::fmt::Arguments) -> ! {
    eprintln!("dv_burst: {what}");
    std::process::exit(1);
}

/// What ran, as `rx_mode=` reports it: the mode asked for, `compressed` only if the device wrote
/// compressed sessions (`cqe_sessions`), so a CQ that was asked to compress and never did is not
/// reported as compressed.
fn ran(nic: &Nic) -> &'static str {
    RxMode::new(rx_mode().striding, nic.counters().cqe_sessions > 0).name()
}

fn pool() -> Rc<Pool> {
    Pool::new(PoolConfig::default().buffers(POOL_BUFFERS)).expect("pool")
}

impl Rig {
    fn new(with_rx: bool) -> Rig {
        // ModelConfig::default() is the strict, stepped configuration; `Nic::start` relaxes the
        // doorbell checks itself.
        let nic = Nic::pair(device()).expect("model NIC");
        let q = rx_mode().queue_config();
        let tx_pool = pool();
        let rx_pool = pool();
        prefill(&tx_pool);
        let tx_lkey = nic.register_mr(rawpkt::internals::pool_region(&tx_pool));
        let rx_lkey = nic.register_mr(rawpkt::internals::pool_region(&rx_pool));
        let tx_cq = nic.create_cq(q.size).expect("TX CQ");
        let sq = nic.create_sq(0, q.size, tx_cq.cqn()).expect("SQ");
        // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
        let tx =
            unsafe { DvTxQueue::new(&sq, &tx_cq, tx_lkey, &tx_pool, &q, nic.caps(), nic.control()) }.expect("TX queue");
        let striding = rx_mode().striding;
        let rx_striding = (with_rx && striding).then(|| striding_rx(&nic, 1, rx_lkey, &rx_pool, &q));
        let rx = (with_rx && !striding).then(|| {
            let rx_cq = rx_cq(&nic, &q);
            let (rwq, wq) = nic.create_rq(1, q.size, rx_cq.cqn()).expect("RQ");
            // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
            unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, rx_lkey, &rx_pool, &q, nic.control()) }.expect("RX queue")
        });
        Rig {
            tx,
            rx,
            rx_striding,
            tx_pool,
            rx_pool,
            nic,
        }
    }
}

/// The rig's RX queue, cyclic or striding.
enum BenchRx {
    Cyclic(DvRxQueue),
    Striding(DvStridingRxQueue),
}

impl BenchRx {
    #[inline(always)]
    fn rx_burst(&mut self, b: &mut Burst) -> Result<usize, rawpkt::QueueError> {
        match self {
            BenchRx::Cyclic(q) => q.rx_burst(b),
            BenchRx::Striding(q) => q.rx_burst(b),
        }
    }

    fn stats(&self) -> &rawpkt::QueueStats {
        match self {
            BenchRx::Cyclic(q) => q.stats(),
            BenchRx::Striding(q) => q.stats(),
        }
    }
}

impl Rig {
    fn take_rx(&mut self) -> Option<BenchRx> {
        match self.rx_striding.take() {
            Some(q) => Some(BenchRx::Striding(q)),
            None => self.rx.take().map(BenchRx::Cyclic),
        }
    }
}

/// ixy's 60-byte IPv4/UDP test frame (10.0.0.1:42 -> 10.0.0.2:1337), with a unicast destination
/// MAC and a valid IPv4 header checksum.
fn template() -> [u8; FRAME] {
    let mut f = [0u8; FRAME];
    f[0..6].copy_from_slice(&[0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (FRAME - 14) as u16;
    let udp_len = (FRAME - 14 - 20) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64; // TTL
    f[23] = 17; // UDP
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let sum: u32 = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&42u16.to_be_bytes());
    f[36..38].copy_from_slice(&1337u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f
}

/// Writes the template into every buffer of the pool once, so that a send only has to write its
/// sequence number (as ixy's packet generator does).
fn prefill(pool: &Rc<Pool>) {
    let t = template();
    let mut all = Burst::new(pool, pool.capacity() as usize);
    let n = all.alloc(pool.capacity() as usize, FRAME);
    for i in 0..n {
        all.data_mut(i).copy_from_slice(&t);
    }
}

/// Tops `b` up to its capacity with fresh frames numbered from `*seq`; returns how many it added.
#[inline(always)]
fn top_up(b: &mut Burst, seq: &mut u64) -> usize {
    let first = b.len();
    let got = b.alloc(b.room(), FRAME);
    for i in first..first + got {
        b.data_mut(i)[SEQ_OFF..SEQ_OFF + 8].copy_from_slice(&seq.to_be_bytes());
        *seq += 1;
    }
    got
}

fn seq_of(frame: &[u8]) -> u64 {
    u64::from_be_bytes(frame[SEQ_OFF..SEQ_OFF + 8].try_into().expect("8 bytes"))
}

/// Checks that received sequence numbers only go up; counts the gaps (frames lost).
#[derive(Default)]
struct SeqCheck {
    expect: u64,
    lost: u64,
    reordered: u64,
}

impl SeqCheck {
    fn burst(&mut self, got: &Burst) {
        for i in 0..got.len() {
            let s = seq_of(got.data(i));
            if s >= self.expect {
                self.lost += s - self.expect;
                self.expect = s + 1;
            } else {
                self.reordered += 1;
            }
        }
    }
}

/// Reclaims until the device has completed every WQE (or a second has passed).
fn drain_tx(rig: &mut Rig, stepped: bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while rig.tx.in_flight() > 0 && Instant::now() < deadline {
        if stepped {
            rig.nic.step();
        }
        rig.tx.reclaim().expect("reclaim");
    }
}

// ---------------------------------------------------------------------------------------------
// Results.

struct Row {
    bench: &'static str,
    mode: &'static str,
    packets: u64,
    secs: f64,
    /// Nanoseconds inside the burst calls that moved packets, per packet moved.
    ns_per_pkt: f64,
    /// Burst calls that moved packets (the average burst is `packets / calls`).
    calls: u64,
    /// Extra JSON fields, already formatted (`"key":value` pairs).
    extra: Vec<(&'static str, String)>,
}

impl Row {
    fn mpps(&self) -> f64 {
        self.packets as f64 / self.secs / 1e6
    }
    fn print(&self) {
        let burst_mpps = if self.ns_per_pkt > 0.0 {
            1e3 / self.ns_per_pkt
        } else {
            0.0
        };
        let per_call = self.packets as f64 / self.calls.max(1) as f64;
        println!(
            "{:<10} {:<9} {:>6} {:>6} {:>12} {:>9.3} {:>11.2} {:>12.2} {:>11.1} {:>9.1}",
            self.bench,
            self.mode,
            BATCH,
            FRAME,
            self.packets,
            self.mpps(),
            1e3 / self.mpps().max(1e-9),
            self.ns_per_pkt,
            burst_mpps,
            per_call
        );
        let mut json = format!(
            "{{\"bench\":\"{}\",\"mode\":\"{}\",\"batch\":{},\"frame\":{},\"packets\":{},\"secs\":{:.3},\
             \"mpps\":{:.3},\"ns_per_pkt\":{:.2},\"wall_ns_per_pkt\":{:.2},\"burst_mpps\":{:.1},\"calls\":{},\
             \"pkts_per_call\":{:.2}",
            self.bench,
            self.mode,
            BATCH,
            FRAME,
            self.packets,
            self.secs,
            self.mpps(),
            self.ns_per_pkt,
            1e3 / self.mpps().max(1e-9),
            burst_mpps,
            self.calls,
            per_call
        );
        for (k, v) in &self.extra {
            json.push_str(&format!(",\"{k}\":{v}"));
        }
        json.push('}');
        println!("{json}");
    }
}

fn header() {
    println!(
        "{:<10} {:<9} {:>6} {:>6} {:>12} {:>9} {:>11} {:>12} {:>11} {:>9}",
        "bench", "mode", "batch", "frame", "packets", "Mpps", "wall ns/pkt", "burst ns/pkt", "burst Mpps", "pkts/call"
    );
}

// ---------------------------------------------------------------------------------------------
// Threaded mode.

/// A warm-up, then `secs` of measurement, with the clock read every `CLOCK_EVERY` iterations:
/// what the threaded measurements share.
struct Window {
    start: Instant,
    secs: f64,
    measuring: bool,
    t0: Clock,
    cpu0: Option<CpuSample>,
    iter: u32,
}

enum Tick {
    Keep,
    /// The warm-up is over: reset the counters.
    Measure,
    /// The window is over, at this clock.
    Done(Clock),
}

impl Window {
    fn new(secs: f64) -> Window {
        Window {
            start: Instant::now(),
            secs,
            measuring: false,
            t0: Clock::now(),
            cpu0: None,
            iter: 0,
        }
    }

    /// Called once per loop iteration.
    fn tick(&mut self) -> Tick {
        self.iter = self.iter.wrapping_add(1);
        if !self.iter.is_multiple_of(CLOCK_EVERY) {
            return Tick::Keep;
        }
        let now = Instant::now();
        if !self.measuring && now - self.start >= WARMUP {
            self.measuring = true;
            self.cpu0 = cpu_sample();
            self.t0 = Clock::now();
            return Tick::Measure;
        }
        if self.measuring && (now - self.t0.wall).as_secs_f64() >= self.secs {
            return Tick::Done(Clock::now());
        }
        Tick::Keep
    }

    /// The measured seconds, TSC ticks per ns, and the CPU time other processes and the
    /// hypervisor took meanwhile (after warning if that disturbed the measurement).
    fn finish(&self, end: &Clock, bench: &str) -> (f64, f64, f64, f64) {
        let secs = end.wall.duration_since(self.t0.wall).as_secs_f64();
        let (others, steal) = interference(self.cpu0, cpu_sample(), secs);
        warn_interference(bench, others, steal);
        (secs, self.t0.ticks_per_ns(end), others, steal)
    }
}

/// DV TX alone: the model sends every frame out of port 0 to a port with no queue.
fn bench_tx(secs: f64, model_core: Option<usize>, overhead: u64) -> Row {
    let mut rig = Rig::new(false);
    rig.nic.start(model_core);
    let mut out = Burst::new(&rig.tx_pool, BATCH);
    let mut seq = 0u64;
    let mut accepted_total = 0u64;
    let (mut accepted, mut busy, mut calls, mut empty_calls) = (0u64, 0u64, 0u64, 0u64);
    let mut window = Window::new(secs);
    let end = loop {
        top_up(&mut out, &mut seq);
        let a = ticks();
        let n = rig.tx.tx_burst(&mut out).expect("tx_burst");
        let b = ticks();
        if n > 0 {
            accepted += n as u64;
            busy += b - a;
            calls += 1;
        } else {
            empty_calls += 1;
        }
        accepted_total += n as u64;
        match window.tick() {
            Tick::Keep => {}
            Tick::Measure => (accepted, busy, calls, empty_calls) = (0, 0, 0, 0),
            Tick::Done(end) => break end,
        }
    };
    let (secs, tpn, others, steal) = window.finish(&end, "dv_tx");
    // Unsent frames go back to the pool; wait for the device to finish what it was given.
    drop(out);
    drain_tx(&mut rig, false);
    let wire = rig.nic.port_counters(0).tx_frames;
    let stats = *rig.tx.stats();
    if wire != accepted_total {
        eprintln!("WARNING: tx_burst accepted {accepted_total} packets but the model sent {wire}");
    }
    let ns = (busy as f64 - (calls * overhead) as f64) / tpn / accepted.max(1) as f64;
    Row {
        bench: "dv_tx",
        mode: "threaded",
        packets: accepted,
        secs,
        ns_per_pkt: ns,
        calls,
        extra: vec![
            ("accepted_total", accepted_total.to_string()),
            ("model_tx_frames", wire.to_string()),
            ("wire_match", (wire == accepted_total).to_string()),
            ("full_ring_calls", empty_calls.to_string()),
            ("tx_drops", stats.drops.to_string()),
            ("tx_errors", stats.errors.total().to_string()),
            ("other_cpu", format!("{others:.3}")),
            ("steal_cpu", format!("{steal:.3}")),
        ],
    }
}

/// DV RX: frames sent on port 0 arrive on port 1's RQ; this thread drives both queues.
fn bench_rx(secs: f64, model_core: Option<usize>, overhead: u64) -> (Row, Row) {
    let mut rig = Rig::new(true);
    rig.nic.start(model_core);
    let mut out = Burst::new(&rig.tx_pool, BATCH);
    let mut got = Burst::new(&rig.rx_pool, BATCH);
    let mut seq = 0u64;
    let mut check = SeqCheck::default();
    let (mut tx_total, mut rx_total) = (0u64, 0u64);
    let (mut tx_pkts, mut tx_busy, mut tx_calls) = (0u64, 0u64, 0u64);
    let (mut rx_pkts, mut rx_busy, mut rx_calls, mut rx_empty) = (0u64, 0u64, 0u64, 0u64);
    let mut window = Window::new(secs);
    let mut rx = rig.take_rx().expect("rig with RX");
    let end = loop {
        top_up(&mut out, &mut seq);
        let a = ticks();
        let n = rig.tx.tx_burst(&mut out).expect("tx_burst");
        let b = ticks();
        if n > 0 {
            tx_pkts += n as u64;
            tx_busy += b - a;
            tx_calls += 1;
        }
        tx_total += n as u64;

        let a = ticks();
        let m = rx
            .rx_burst(&mut got)
            .unwrap_or_else(|e| fail(format_args!("{}: rx_burst: {e}", rx_mode().name())));
        let b = ticks();
        if m > 0 {
            rx_pkts += m as u64;
            rx_busy += b - a;
            rx_calls += 1;
            rx_total += m as u64;
            check.burst(&got);
            got.clear();
        } else {
            rx_empty += 1;
        }
        match window.tick() {
            Tick::Keep => {}
            Tick::Measure => {
                (tx_pkts, tx_busy, tx_calls) = (0, 0, 0);
                (rx_pkts, rx_busy, rx_calls, rx_empty) = (0, 0, 0, 0);
            }
            Tick::Done(end) => break end,
        }
    };
    let (secs, tpn, others, steal) = window.finish(&end, "dv_rx");
    // Drain: everything sent must either arrive or be counted as dropped by the device. Keep
    // receiving while the TX ring empties, or the RQ would overflow for the bench's sake.
    drop(out);
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(20) {
        rig.tx.reclaim().expect("reclaim");
        let m = rx
            .rx_burst(&mut got)
            .unwrap_or_else(|e| fail(format_args!("{}: rx_burst: {e}", rx_mode().name())));
        if m > 0 {
            rx_total += m as u64;
            check.burst(&got);
            got.clear();
            quiet = Instant::now();
        } else if rig.tx.in_flight() > 0 {
            quiet = Instant::now();
        }
    }
    // Frames lost after the last one that arrived leave no gap; count them too. Frames go out in
    // sequence order, so the ones sent are exactly 0..tx_total.
    check.lost += tx_total.saturating_sub(check.expect);
    let p0 = rig.nic.port_counters(0);
    let p1 = rig.nic.port_counters(1);
    let rx_stats = *rx.stats();
    if rx_total == 0 || rx_stats.errors.total() != 0 {
        // As in stepped mode: a queue that misreads its completions gives no figure.
        fail(format_args!(
            "{}: the receive queue handed up {rx_total} of {tx_total} frames sent ({} completion errors): no figure",
            rx_mode().name(),
            rx_stats.errors.total()
        ));
    }
    if p0.tx_frames != tx_total {
        eprintln!(
            "WARNING: tx_burst accepted {tx_total} packets but the model sent {}",
            p0.tx_frames
        );
    }
    // Port 1 counts frames it delivered into the RQ (rx_frames) apart from those it found no
    // posted buffer for (rx_out_of_buffer): the latter are the sequence gaps the receiver sees.
    if p1.rx_frames != rx_total || p0.tx_frames != p1.rx_frames + p1.rx_out_of_buffer + p1.rx_wq_error {
        eprintln!(
            "WARNING: model sent {} frames, port 1 delivered {} and dropped {} (no buffer), rx_burst returned {rx_total}",
            p0.tx_frames, p1.rx_frames, p1.rx_out_of_buffer
        );
    }
    drop(got);
    drop(rx);
    let tx_ns = (tx_busy as f64 - (tx_calls * overhead) as f64) / tpn / tx_pkts.max(1) as f64;
    let rx_ns = (rx_busy as f64 - (rx_calls * overhead) as f64) / tpn / rx_pkts.max(1) as f64;
    let tx_row = Row {
        bench: "dv_tx_rx",
        mode: "threaded",
        packets: tx_pkts,
        secs,
        ns_per_pkt: tx_ns,
        calls: tx_calls,
        extra: vec![
            ("accepted_total", tx_total.to_string()),
            ("model_tx_frames", p0.tx_frames.to_string()),
            ("wire_match", (p0.tx_frames == tx_total).to_string()),
        ],
    };
    let rx_row = Row {
        bench: "dv_rx",
        mode: "threaded",
        packets: rx_pkts,
        secs,
        ns_per_pkt: rx_ns,
        calls: rx_calls,
        extra: vec![
            ("rx_total", rx_total.to_string()),
            ("model_rx_frames", p1.rx_frames.to_string()),
            ("rx_out_of_buffer", p1.rx_out_of_buffer.to_string()),
            ("seq_gaps", check.lost.to_string()),
            ("reordered", check.reordered.to_string()),
            ("empty_calls", rx_empty.to_string()),
            ("rx_errors", rx_stats.errors.total().to_string()),
            ("other_cpu", format!("{others:.3}")),
            ("steal_cpu", format!("{steal:.3}")),
        ],
    };
    (tx_row, rx_row)
}

fn threaded(secs: f64) {
    let cpus = rawpkt::cpu::allowed();
    let (bench_core, model_core) = match cpus.as_slice() {
        [a, b, ..] => (Some(*a), Some(*b)),
        [a] => (Some(*a), None),
        [] => (None, None),
    };
    if let Some(c) = bench_core {
        if !rawpkt::cpu::pin(c) {
            eprintln!("WARNING: could not pin the bench thread to CPU {c}");
        }
    }
    if model_core.is_none() {
        eprintln!("WARNING: fewer than 2 CPUs: the model thread shares the bench's CPU; numbers are meaningless");
    }
    let overhead = timer_overhead_ticks();
    println!(
        "# threaded: bench thread on CPU {}, model NIC on CPU {}; batch {BATCH}, {FRAME}-byte frames, {secs} s each \
         (+{} ms warm-up); timer overhead {overhead} ticks per call, subtracted",
        bench_core.map_or("any".into(), |c| c.to_string()),
        model_core.map_or("any".into(), |c| c.to_string()),
        WARMUP.as_millis()
    );
    header();
    bench_tx(secs, model_core, overhead).print();
    let (tx, rx) = bench_rx(secs, model_core, overhead);
    tx.print();
    rx.print();
}

// ---------------------------------------------------------------------------------------------
// Stepped mode.

/// `with_rx == false` (`stepped-tx`): nothing receives on port 1, so the model only executes the
/// send WQEs (the frames are counted as unclaimed): the model's cost of transmitting alone.
fn stepped(iters: u64, with_rx: bool) {
    if let Some(&c) = rawpkt::cpu::allowed().first() {
        rawpkt::cpu::pin(c);
    }
    let mut rig = Rig::new(with_rx);
    let mut rx = rig.take_rx();
    let mut out = Burst::new(&rig.tx_pool, BATCH);
    let mut got = Burst::new(&rig.rx_pool, BATCH);
    let mut seq = 0u64;
    let mut check = SeqCheck::default();
    let (mut tx_pkts, mut rx_pkts) = (0u64, 0u64);
    let (mut tx_ticks, mut step_ticks, mut rx_ticks) = (0u64, 0u64, 0u64);
    let cpu0 = cpu_sample();
    let t0 = Clock::now();
    for _ in 0..iters {
        top_up(&mut out, &mut seq);
        let a = ticks();
        tx_pkts += rig.tx.tx_burst(&mut out).expect("tx_burst") as u64;
        let b = ticks();
        rig.nic.step();
        let c = ticks();
        let n = match rx.as_mut() {
            Some(rx) => rx
                .rx_burst(&mut got)
                .unwrap_or_else(|e| fail(format_args!("{}: rx_burst: {e}", rx_mode().name()))),
            None => 0,
        };
        let d = ticks();
        rx_pkts += n as u64;
        check.burst(&got);
        got.clear();
        tx_ticks += b - a;
        step_ticks += c - b;
        rx_ticks += d - c;
    }
    let end = Clock::now();
    let tpn = t0.ticks_per_ns(&end);
    let secs = end.wall.duration_since(t0.wall).as_secs_f64();
    let (others, steal) = interference(cpu0, cpu_sample(), secs);
    warn_interference("stepped", others, steal);
    drop(out);
    drain_tx(&mut rig, true);
    let p0 = rig.nic.port_counters(0);
    let p1 = rig.nic.port_counters(1);
    let dev = rig.nic.counters();
    let delivered = if with_rx { rx_pkts } else { p1.rx_unclaimed };
    // (With a receiver, a count that differs fails the run below.)
    if p0.tx_frames != tx_pkts || (!with_rx && delivered != tx_pkts) {
        eprintln!(
            "WARNING: tx_burst accepted {tx_pkts}, model sent {}, rx_burst returned {rx_pkts}",
            p0.tx_frames
        );
    }
    if dev.doorbell_missing + dev.doorbell_mismatch + dev.cq_overruns != 0 {
        eprintln!("WARNING: model saw protocol violations: {dev:?}");
    }
    let rx_errors = rx.as_ref().map_or(0, |q| q.stats().errors.total());
    if with_rx && (rx_pkts != tx_pkts || check.lost + check.reordered + rx_errors != 0) {
        // A queue that misreads its completions (a CQ format it does not take) gives no figure.
        fail(format_args!(
            "{}: the receive queue handed up {rx_pkts} of {tx_pkts} frames sent ({} lost, {} out of order, \
             {rx_errors} completion errors; the device wrote {} compressed sessions): no figure",
            rx_mode().name(),
            check.lost,
            check.reordered,
            dev.cqe_sessions
        ));
    }
    let per = |t: u64, n: u64| t as f64 / tpn / n.max(1) as f64;
    println!(
        "# stepped: {iters} iterations of {{fill {BATCH}; tx_burst; nic.step(); rx_burst; free}}, {FRAME}-byte frames, one CPU"
    );
    header();
    let rows = [
        ("dv_tx", tx_pkts, per(tx_ticks, tx_pkts)),
        ("dv_rx", rx_pkts, per(rx_ticks, rx_pkts)),
    ];
    for (bench, packets, ns) in rows {
        if !with_rx && bench == "dv_rx" {
            continue;
        }
        Row {
            bench,
            mode: "stepped",
            packets,
            secs,
            ns_per_pkt: ns,
            calls: iters,
            extra: vec![
                ("iterations", iters.to_string()),
                ("model_step_ns_per_pkt", format!("{:.2}", per(step_ticks, tx_pkts))),
                ("model_rx_frames", p1.rx_frames.to_string()),
                ("other_cpu", format!("{others:.3}")),
                ("steal_cpu", format!("{steal:.3}")),
            ],
        }
        .print();
    }
    if with_rx {
        println!("rx_mode={}", ran(&rig.nic));
    }
    println!("packets tx={tx_pkts} rx={rx_pkts}");
}

// ---------------------------------------------------------------------------------------------
// Stepped cross-connect.

/// One iteration of the cross-connect loop: what arrived on the RX queue leaves on the TX queue
/// in the same burst, and what the TX ring does not take is dropped (as l2-xconnect's `hand_off`).
/// Returns (forwarded, dropped).
/// Generic over the receive queue, so that each is called directly, as l2-xconnect's loop calls
/// its port's queue (`xconnect_burst::<DvRxQueue>` and `::<DvStridingRxQueue>` for callgrind).
#[inline(never)]
fn xconnect_burst<R: RxQueue>(rx: &mut R, tx: &mut DvTxQueue, b: &mut Burst) -> (usize, usize) {
    if rx.rx_burst(b).expect("xconnect rx_burst") == 0 {
        return (0, 0);
    }
    let sent = tx.tx_burst(b).expect("xconnect tx_burst");
    let dropped = b.len();
    if dropped > 0 {
        b.clear();
    }
    (sent, dropped)
}

fn stepped_xc(iters: u64) {
    if rx_mode().striding {
        stepped_xc_on(iters, |nic, lkey, pool, q| striding_rx(nic, 1, lkey, pool, q))
    } else {
        stepped_xc_on(iters, |nic, lkey, pool, q| {
            let cq = rx_cq(nic, q);
            let (rwq, wq) = nic.create_rq(1, q.size, cq.cqn()).expect("RQ");
            // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
            unsafe { DvRxQueue::new(&rwq, &cq, wq, lkey, pool, q, nic.control()) }.expect("RX queue")
        })
    }
}

/// The stepped cross-connect with its receive queue (on port 1) made by `xc_rx_on`.
fn stepped_xc_on<R: RxQueue>(iters: u64, xc_rx_on: impl Fn(&Arc<Nic>, u32, &Rc<Pool>, &QueueConfig) -> R) {
    if let Some(&c) = rawpkt::cpu::allowed().first() {
        rawpkt::cpu::pin(c);
    }
    let nic = Nic::pair(device()).expect("model NIC");
    let q = rx_mode().queue_config();
    let (gen_pool, xc_pool, sink_pool) = (pool(), pool(), pool());
    prefill(&gen_pool);
    let (gen_lkey, xc_lkey, sink_lkey) = (
        nic.register_mr(rawpkt::internals::pool_region(&gen_pool)),
        nic.register_mr(rawpkt::internals::pool_region(&xc_pool)),
        nic.register_mr(rawpkt::internals::pool_region(&sink_pool)),
    );
    let tx_on = |port: usize, lkey: u32, p: &Rc<Pool>| {
        let cq = nic.create_cq(q.size).expect("TX CQ");
        let sq = nic.create_sq(port, q.size, cq.cqn()).expect("SQ");
        // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
        unsafe { DvTxQueue::new(&sq, &cq, lkey, p, &q, nic.caps(), nic.control()) }.expect("TX queue")
    };
    // The sink, uncounted, on a cyclic RQ whose CQ does not compress: the device's compressed
    // sessions (`ran`) are then the cross-connect's alone.
    let rx_on = |port: usize, lkey: u32, p: &Rc<Pool>| {
        let cq = nic.create_cq(q.size).expect("RX CQ");
        let (rwq, wq) = nic.create_rq(port, q.size, cq.cqn()).expect("RQ");
        // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
        unsafe { DvRxQueue::new(&rwq, &cq, wq, lkey, p, &q, nic.control()) }.expect("RX queue")
    };
    let mut gen = tx_on(0, gen_lkey, &gen_pool);
    let mut xc_rx = xc_rx_on(&nic, xc_lkey, &xc_pool, &q);
    let mut xc_tx = tx_on(1, xc_lkey, &xc_pool);
    let mut sink = rx_on(0, sink_lkey, &sink_pool);
    let mut out = Burst::new(&gen_pool, BATCH);
    let mut fwd = Burst::new(&xc_pool, BATCH);
    let mut got = Burst::new(&sink_pool, BATCH);
    let (mut seq, mut sent, mut forwarded, mut dropped, mut received) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut check = SeqCheck::default();
    let t0 = Clock::now();
    let mut xc_ticks = 0u64;
    for _ in 0..iters {
        top_up(&mut out, &mut seq);
        sent += gen.tx_burst(&mut out).expect("generator tx_burst") as u64;
        nic.step();
        let a = ticks();
        let (f, d) = xconnect_burst(&mut xc_rx, &mut xc_tx, &mut fwd);
        xc_ticks += ticks() - a;
        forwarded += f as u64;
        dropped += d as u64;
        nic.step();
        received += sink.rx_burst(&mut got).expect("sink rx_burst") as u64;
        check.burst(&got);
        got.clear();
    }
    let end = Clock::now();
    let secs = end.wall.duration_since(t0.wall).as_secs_f64();
    let xc_errors = xc_rx.stats().errors.total();
    if forwarded != received || dropped != 0 || check.lost + check.reordered + xc_errors != 0 || sent != forwarded {
        fail(format_args!(
            "{}: generator sent {sent}, xconnect forwarded {forwarded} (dropped {dropped}, {xc_errors} receive \
             completion errors), sink got {received} (lost {}, reordered {}): no figure",
            rx_mode().name(),
            check.lost,
            check.reordered
        ));
    }
    println!("# stepped-xc: {iters} iterations of {{generator tx; step; rx_burst + tx_burst on the cross-connect; step; sink rx}}, {FRAME}-byte frames, one CPU");
    header();
    Row {
        bench: "dv_xconnect",
        mode: "stepped",
        packets: forwarded,
        secs,
        ns_per_pkt: xc_ticks as f64 / t0.ticks_per_ns(&end) / forwarded.max(1) as f64,
        calls: iters,
        extra: vec![("iterations", iters.to_string())],
    }
    .print();
    drop((out, fwd, got));
    for _ in 0..4 {
        nic.step();
        let _ = gen.reclaim();
        let _ = xc_tx.reclaim();
    }
    println!("rx_mode={}", ran(&nic));
    println!("packets tx={forwarded} rx={received}");
}

// ---------------------------------------------------------------------------------------------

fn usage() -> ! {
    eprintln!("usage: dv_burst [threaded] [--secs S] | dv_burst stepped [N] | dv_burst stepped-tx [N] | dv_burst stepped-xc [N] | dv_burst rx-modes   [--rx-mode cyclic|compressed|striding|striding+compressed]   (unknown --flags are ignored)");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut mode = "threaded";
    let mut iters = 20_000u64;
    let mut secs = 2.0f64;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "threaded" => mode = "threaded",
            m @ ("stepped" | "stepped-tx" | "stepped-xc") => {
                mode = match m {
                    "stepped" => "stepped",
                    "stepped-tx" => "stepped-tx",
                    _ => "stepped-xc",
                };
                if let Some(n) = args.get(i + 1).and_then(|a| a.parse().ok()) {
                    iters = n;
                    i += 1;
                }
            }
            "--secs" => {
                secs = match args.get(i + 1).and_then(|a| a.parse().ok()) {
                    Some(s) if s > 0.0 => s,
                    _ => usage(),
                };
                i += 1;
            }
            "--rx-mode" => {
                let Some(m) = args.get(i + 1).and_then(|a| RxMode::parse(a)) else {
                    usage()
                };
                let _ = RX_MODE.set(m);
                i += 1;
            }
            "rx-modes" => mode = "rx-modes",
            "-h" | "--help" => usage(),
            a if a.starts_with('-') => {} // cargo's --bench, and anything else we do not know
            a => {
                eprintln!("unknown mode {a:?}");
                usage();
            }
        }
        i += 1;
    }
    if std::env::var_os("RAWPKT_BENCH_RX").is_some() {
        // Refused rather than ignored: a run that ignored it would measure another receive mode
        // than the one the variable names.
        eprintln!(
            "dv_burst: RAWPKT_BENCH_RX is gone: use --rx-mode striding (or cyclic, compressed, striding+compressed)"
        );
        std::process::exit(2);
    }
    if let Some(why) = rx_mode().refused_by(&device()) {
        eprintln!("dv_burst: {why}");
        std::process::exit(2);
    }
    match mode {
        "rx-modes" => {
            // The receive modes of the device, for scripts/callgrind.sh --json; on stderr, why
            // one is left out.
            for m in RxMode::all() {
                match m.refused_by(&device()) {
                    None => println!("{}", m.name()),
                    Some(why) => eprintln!("dv_burst: {why}"),
                }
            }
        }
        "stepped" => stepped(iters, true),
        "stepped-tx" => stepped(iters, false),
        "stepped-xc" => stepped_xc(iters),
        _ => threaded(secs),
    }
}
