//! The steps of the self-test and the ports they run on.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rawpkt::mlx5::DeviceReport;
use rawpkt::{Pool, PoolConfig, Port, QueueConfig, QueueStats, TxFault, TxQueue};
use rawpkt_tools::Fail;

use crate::counters::{self, Source};
use crate::json::J;
use crate::traffic::{self, Outcome, Plan};
use crate::Size;

/// Receive rings of every step: 4096 descriptors (strides on a striding queue).
const RX_RING: u32 = 4096;
/// Frames on the way at most: a quarter of the receive ring, so that a striding queue (two
/// strides a frame at most in the wrap step) never runs short either.
const WINDOW: u64 = RX_RING as u64 / 4;
/// A run gives up after this long without a frame arriving.
const IDLE: Duration = Duration::from_secs(10);
/// The 16-bit WQE counters wrap at this many WQEs (or WQEBBs).
const WRAP: u64 = 65_536;

/// How a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One step's result.
pub struct StepResult {
    pub name: &'static str,
    pub status: Status,
    /// Why it failed or was skipped; what it found when it passed.
    pub reason: String,
    pub duration_s: f64,
    /// The step's own fields.
    pub fields: J,
}

impl StepResult {
    pub fn json(&self) -> J {
        let mut j = J::obj()
            .with("name", self.name)
            .with("status", self.status.name())
            .with("reason", self.reason.as_str())
            .with("duration_s", self.duration_s);
        // The step's own fields under its name: `steps[].datapath.runs[]`.
        if matches!(&self.fields, J::Obj(f) if !f.is_empty()) {
            j.set(self.name, self.fields.clone());
        }
        j
    }

    fn line(&self) -> String {
        match self.status {
            Status::Pass => format!("PASS {}: {}", self.name, self.reason),
            Status::Fail => format!("FAIL {}: {}", self.name, self.reason),
            Status::Skip => format!("SKIP({}) {}", self.reason, self.name),
        }
    }
}

/// What `--frames`, `--sizes`, `--modes`, `--skip` asked.
pub struct Config {
    pub frames: u64,
    pub sizes: Vec<Size>,
    pub modes: Vec<&'static str>,
    pub skip: Vec<String>,
    pub peer_netns: Option<String>,
}

/// The ports and what is known of them.
pub struct Env {
    dut: Port,
    peer: Option<Port>,
    dut_rep: DeviceReport,
    peer_rep: Option<DeviceReport>,
    dut_counters: Source,
    peer_counters: Option<Source>,
    profile: Option<String>,
    quiet: bool,
    run_id: u16,
}

fn mac_text(m: Option<[u8; 6]>) -> Option<String> {
    m.map(|m| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"))
}

impl Env {
    /// Opens the port under test and its peer (with the environment's rdma-core files).
    pub fn open(port: &str, peer: Option<&str>, quiet: bool) -> Result<Env, Fail> {
        let echo = rawpkt_wire::text::echo;
        let dut = rawpkt_tools::env::open(port).map_err(|e| Fail::rawpkt(echo(port), e))?;
        let peer = peer
            .map(|p| rawpkt_tools::env::open(p).map_err(|e| Fail::rawpkt(echo(p), e)))
            .transpose()?;
        if let Some(p) = &peer {
            if p.same_port(&dut) {
                return Err(Fail::Usage(format!(
                    "--port and --peer are one port ({}); give the port cabled to it, or --loopback",
                    dut.identity()
                )));
            }
        }
        let rep =
            |p: &Port| rawpkt::mlx5::report(p).ok_or_else(|| Fail::Usage(format!("{}: not an mlx5: port", p.spec())));
        let dut_rep = rep(&dut)?;
        let peer_rep = peer.as_ref().map(rep).transpose()?;
        let dut_counters = Source::find(&dut_rep.ibdev, dut_rep.netdev.as_deref());
        let peer_counters = peer_rep.as_ref().map(|r| Source::find(&r.ibdev, r.netdev.as_deref()));
        for r in std::iter::once(&dut_rep).chain(peer_rep.as_ref()) {
            if r.mac.is_none() {
                return Err(Fail::Runtime(format!(
                    "{}: the port's MAC is unknown (no netdev in sysfs); the test frames are sent to it",
                    r.ibdev
                )));
            }
        }
        Ok(Env {
            dut,
            peer,
            dut_rep,
            peer_rep,
            dut_counters,
            peer_counters,
            profile: counters::model_profile(),
            quiet,
            run_id: 0,
        })
    }

    fn peer(&self) -> &Port {
        self.peer.as_ref().unwrap_or(&self.dut)
    }

    fn peer_rep(&self) -> &DeviceReport {
        self.peer_rep.as_ref().unwrap_or(&self.dut_rep)
    }

    fn peer_counters(&self) -> &Source {
        self.peer_counters.as_ref().unwrap_or(&self.dut_counters)
    }

    fn next_run(&mut self) -> u16 {
        self.run_id = self.run_id.wrapping_add(1);
        self.run_id
    }

    /// The largest frame both ports send.
    fn max_frame(&self) -> u32 {
        self.dut_rep.max_frame.min(self.peer_rep().max_frame)
    }

    /// `ports[]` of the report.
    pub fn ports_json(&self) -> J {
        let one = |role: &str, p: &Port, r: &DeviceReport| {
            J::obj()
                .with("role", role)
                .with("spec", p.spec())
                .with("ibdev", r.ibdev.as_str())
                .with("port_num", r.port_num)
                .with("netdev", r.netdev.clone())
                .with("pci", r.pci.clone())
                .with("pci_device_id", r.pci_device_id.map(|d| format!("{d:#06x}")))
                .with("vendor_id", format!("{:#06x}", r.vendor_id))
                .with("vendor_part_id", r.vendor_part_id)
                .with("hw_ver", r.hw_ver)
                .with("fw_ver", r.fw_ver.as_str())
                .with("board_id", r.board_id.clone())
                .with("hca_type", r.hca_type.clone())
                .with("mac", mac_text(r.mac))
                .with("mtu", r.mtu)
                .with("link_state", r.link_state)
                .with("speed_gbps", r.speed_gbps)
                .with("model_profile", self.profile.clone())
                .with("ethtool", Source::ethtool_status(r.netdev.as_deref()))
                .with("description", p.description())
        };
        let mut v = vec![one("dut", &self.dut, &self.dut_rep)];
        if let (Some(p), Some(r)) = (&self.peer, &self.peer_rep) {
            v.push(one("peer", p, r));
        }
        J::Arr(v)
    }

    /// `caps` of the report: the port under test, as it stands now (`bf_size` is known once a
    /// send queue was made).
    pub fn caps_json(&self) -> J {
        let r = rawpkt::mlx5::report(&self.dut).unwrap_or_else(|| self.dut_rep.clone());
        caps_json(&r)
    }

    fn say(&self, line: &str) {
        if !self.quiet {
            rawpkt_sys::outln!("  {line}");
        }
    }
}

fn caps_json(r: &DeviceReport) -> J {
    let devx_ok = r.devx.iter().any(|(_, a)| a == "ok");
    J::obj()
        .with("datapath", r.datapath)
        .with("dv_refused_why", r.dv_refused.clone())
        .with("dv_flags", r.dv_flags.clone())
        .with(
            "devx",
            J::obj().with("available", devx_ok).with(
                "answers",
                J::Obj(
                    r.devx
                        .iter()
                        .map(|(k, v)| (k.to_string(), J::from(v.as_str())))
                        .collect(),
                ),
            ),
        )
        .with(
            "inline",
            J::obj().with("mode", r.inline_mode).with("source", r.inline_source),
        )
        .with("enhanced_mpw", r.enhanced_mpw)
        .with(
            "vlan_insert",
            J::obj().with(
                "used",
                if r.datapath != "dv" {
                    "verbs"
                } else if r.vlan_insert {
                    "hw"
                } else {
                    "sw"
                },
            ),
        )
        .with("sq", J::obj().with("bf_size", r.bf_size).with("wqe_cnt", r.sq_wqe_cnt))
        .with(
            "striding_rq",
            match r.striding {
                None => J::obj().with("supported", false).with("layout", r.striding_layout),
                Some(c) => J::obj()
                    .with("supported", r.striding_layout != "none")
                    .with("min_log_stride_bytes", c.min_log_stride_bytes)
                    .with("max_log_stride_bytes", c.max_log_stride_bytes)
                    .with("min_log_num_strides", c.min_log_num_strides)
                    .with("max_log_num_strides", c.max_log_num_strides)
                    .with("supported_qpts", c.supported_qpts)
                    .with("layout", r.striding_layout),
            },
        )
        .with(
            "cqe_compression",
            match &r.cqe_compression {
                None => J::obj().with("max_num", 0u32).with("formats", Vec::<String>::new()),
                Some((max, f)) => J::obj().with("max_num", *max).with("formats", f.clone()),
            },
        )
        .with(
            "clock",
            J::obj()
                .with("hca_core_clock_khz", r.hca_core_clock_khz)
                .with("mode", r.clock_mode)
                .with("source", r.clock_source)
                .with("phc", r.phc.clone()),
        )
        .with("raw_packet_caps", r.raw_packet_caps.clone())
        .with("max_frame", r.max_frame)
        .with("rules", r.rules.clone())
}

/// `host` of the report.
pub fn host() -> J {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let cpu = read("/proc/cpuinfo").and_then(|c| {
        c.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let lib = |var: &str, soname: &str| {
        std::env::var_os(var).map_or_else(|| soname.to_string(), |v| v.to_string_lossy().into_owned())
    };
    J::obj()
        .with("kernel", read("/proc/sys/kernel/osrelease"))
        .with("cpu_model", cpu)
        .with("libibverbs_path", lib("RAWPKT_LIBIBVERBS", "libibverbs.so.1"))
        .with("libmlx5_path", lib("RAWPKT_LIBMLX5", "libmlx5.so.1"))
        .with("model_library", counters::model_profile().is_some())
}

fn pool(buffers: u32) -> Result<Rc<Pool>, String> {
    Pool::new(PoolConfig::default().buffers(buffers)).map_err(|e| format!("packet pool: {e}"))
}

fn stats_json(s: &QueueStats) -> J {
    J::obj()
        .with("packets", s.packets)
        .with("bytes", s.bytes)
        .with("drops", s.drops)
        .with("no_buffers", s.no_buffers)
        .with("recoveries", s.recoveries)
        .with("tx_stalls", s.tx_stalls)
        .with("doorbell_rerings", s.doorbell_rerings)
        .with(
            "errors",
            J::obj()
                .with("local_length", s.errors.local_length)
                .with("local_qp_op", s.errors.local_qp_op)
                .with("local_prot", s.errors.local_prot)
                .with("flushed", s.errors.flushed)
                .with("other", s.errors.other)
                .with("bad_cqe", s.errors.bad_cqe)
                .with("late_flush", s.errors.late_flush)
                .with("cq_error", s.errors.cq_error)
                .with("queue_fatal", s.errors.queue_fatal),
        )
}

/// `b - a`, field by field, of counters that only grow.
fn stats_delta(a: &QueueStats, b: &QueueStats) -> QueueStats {
    let mut d = *b;
    d.packets -= a.packets;
    d.bytes -= a.bytes;
    d.drops -= a.drops;
    d.no_buffers -= a.no_buffers;
    d.recoveries -= a.recoveries;
    d.tx_stalls -= a.tx_stalls;
    d.doorbell_rerings -= a.doorbell_rerings;
    d.bursts -= a.bursts;
    let (e, f) = (&mut d.errors, &a.errors);
    e.local_length -= f.local_length;
    e.local_qp_op -= f.local_qp_op;
    e.local_prot -= f.local_prot;
    e.flushed -= f.flushed;
    e.other -= f.other;
    e.bad_cqe -= f.bad_cqe;
    e.late_flush -= f.late_flush;
    e.cq_error -= f.cq_error;
    e.queue_fatal -= f.queue_fatal;
    d
}

/// Device counters before and after something, as JSON, with (rx, tx, drops) deltas.
struct DevDelta {
    json: J,
    rx: Option<u64>,
    tx: Option<u64>,
    drops: Option<u64>,
}

fn read_counters(src: &Source) -> Option<BTreeMap<String, u64>> {
    src.read().ok()
}

fn dev_delta(src: &Source, before: &Option<BTreeMap<String, u64>>) -> DevDelta {
    let after = read_counters(src);
    match (before, after) {
        (Some(b), Some(a)) => {
            let d = counters::delta(b, &a);
            let (rx, tx, drops) = src.rx_tx_drops(&d);
            DevDelta {
                json: J::obj().with("source", src.name()).with(
                    "counters",
                    J::Obj(d.iter().map(|(k, v)| (k.clone(), J::from(*v))).collect()),
                ),
                rx,
                tx,
                drops,
            }
        }
        _ => DevDelta {
            json: J::obj().with("source", "unavailable").with(
                "why",
                src.read()
                    .err()
                    .unwrap_or_else(|| "the counters could not be read".into()),
            ),
            rx: None,
            tx: None,
            drops: None,
        },
    }
}

/// Runs every step in order.
pub fn run_all(env: &mut Env, cfg: &Config) -> Vec<StepResult> {
    let stop = rawpkt_sys::signal::stop_flag();
    let mut out = Vec::new();
    for name in crate::STEPS {
        let t = Instant::now();
        let (status, reason, fields) = if stop.load(std::sync::atomic::Ordering::Relaxed) {
            (Status::Skip, "stopped by a signal".to_string(), J::obj())
        } else if cfg.skip.iter().any(|s| s == name) {
            (Status::Skip, "--skip".to_string(), J::obj())
        } else {
            match name {
                "identity" => identity(env),
                "caps" => caps(env),
                "datapath" => datapath(env, cfg),
                "ring_wraps" => ring_wraps(env),
                "tx_errors" => tx_errors(env),
                "timestamps" => timestamps(env, cfg),
                "bifurcation" => bifurcation(env, cfg),
                _ => events(env),
            }
        };
        // A step a signal cut short has not failed: it did not finish.
        let (status, reason) = if status == Status::Fail && stop.load(std::sync::atomic::Ordering::Relaxed) {
            (Status::Skip, format!("stopped by a signal during the step: {reason}"))
        } else {
            (status, reason)
        };
        let r = StepResult {
            name,
            status,
            reason,
            duration_s: t.elapsed().as_secs_f64(),
            fields,
        };
        rawpkt_sys::outln!("{}", r.line());
        out.push(r);
    }
    out
}

type Step = (Status, String, J);

fn identity(env: &Env) -> Step {
    let r = &env.dut_rep;
    let mut s = format!(
        "{} port {} ({}, PCI {}), {} part {} fw {}",
        r.ibdev,
        r.port_num,
        r.netdev.as_deref().unwrap_or("no netdev"),
        r.pci.as_deref().unwrap_or("unknown"),
        r.hca_type.as_deref().unwrap_or("?"),
        r.vendor_part_id,
        r.fw_ver
    );
    if let Some(p) = env.peer_rep.as_ref() {
        s += &format!("; peer {} port {}", p.ibdev, p.port_num);
    } else {
        s += "; loopback";
    }
    if let Some(p) = &env.profile {
        s += &format!("; model library, profile {p}");
    }
    (Status::Pass, s, J::obj())
}

fn caps(env: &Env) -> Step {
    let r = &env.dut_rep;
    let mut contradictions = Vec::new();
    if r.datapath == "dv" && !r.dv_flags.contains(&"CQE_V1") {
        contradictions.push("the DV datapath runs without CQE_V1".to_string());
    }
    if r.clock_source.is_some_and(|s| s.starts_with("DevX")) && !r.devx.iter().any(|(_, a)| a == "ok") {
        contradictions.push("the clock was decided by DevX, which answers nothing".to_string());
    }
    if r.inline_source.is_some_and(|s| s.starts_with("DevX")) && !r.devx.iter().any(|(_, a)| a == "ok") {
        contradictions.push("the inline mode came from DevX, which answers nothing".to_string());
    }
    let line = format!(
        "{} datapath, inline {} ({}), VLAN insertion by the {}, striding {}, CQE compression {}, clock {} ({})",
        r.datapath,
        r.inline_mode.unwrap_or("-"),
        r.inline_source.unwrap_or("-"),
        if r.vlan_insert { "device" } else { "driver" },
        r.striding_layout,
        r.cqe_compression
            .as_ref()
            .map_or("none".to_string(), |(m, f)| format!("{m} {}", f.join("|"))),
        r.clock_mode.unwrap_or("none"),
        r.clock_source.unwrap_or("-")
    );
    if contradictions.is_empty() {
        (Status::Pass, line, J::obj())
    } else {
        (
            Status::Fail,
            contradictions.join("; "),
            J::obj().with("contradictions", contradictions),
        )
    }
}

/// The queue config of receive mode `mode` for frames up to `max` bytes over `pool`.
fn rx_config(mode: &str, max: usize, pool: &Pool) -> QueueConfig {
    let q = QueueConfig::default()
        .size(RX_RING)
        .with_rx_mode(mode)
        .unwrap_or_default();
    if max > pool.data_room() as usize {
        q.rx_max_frame(max as u32)
    } else {
        q
    }
}

/// One mode × size run of the datapath step.
#[allow(clippy::too_many_arguments)]
fn one_run(
    env: &mut Env,
    mode: &str,
    size: Size,
    frames: u64,
    tx: &mut dyn TxQueue,
    txpool: &Rc<Pool>,
    rxpool: &Rc<Pool>,
) -> (bool, String, J) {
    let mut j = J::obj().with("mode", mode).with("size", size.name());
    let rxq = rx_config(mode, size.max(), rxpool);
    let mut rx = match env.dut.rx_queue(0, rxpool, &rxq) {
        Ok(q) => q,
        Err(e) => {
            let why = format!("{mode}: receive queue: {e}");
            return (false, why.clone(), j.with("error", why));
        }
    };
    let run = env.next_run();
    let dst = env.dut_rep.mac.unwrap_or_default();
    let src = env.peer_rep().mac.unwrap_or_default();
    let rx_dev_before = read_counters(&env.dut_counters);
    let tx_dev_before = read_counters(env.peer_counters());
    let tx_before = *tx.stats();
    let len = |seq: u64| size.len(seq);
    let mut hook = |_: &mut dyn TxQueue, _: u64| 32;
    let mut plan = Plan {
        frames,
        dst,
        src,
        run,
        len: &len,
        window: WINDOW,
        idle: IDLE,
        clock: None,
        before_send: &mut hook,
    };
    let o = traffic::run(&mut plan, tx, txpool, &mut *rx, rxpool);
    let rx_dev = dev_delta(&env.dut_counters, &rx_dev_before);
    let tx_dev = dev_delta(env.peer_counters(), &tx_dev_before);
    let txs = stats_delta(&tx_before, tx.stats());
    let rxs = *rx.stats();
    // The device's counters against ours: every frame the receiver got (and the device
    // dropped) the device counted, every frame we sent it sent; beyond them only what Linux
    // itself sent or received on the port (a few frames; none on the model).
    let slack = if env.dut_counters.name() == "model" {
        0
    } else {
        64 + frames / 1000
    };
    let agree_rx = rx_dev.rx.map(|d| {
        let ours = rxs.packets + rx_dev.drops.unwrap_or(0);
        d >= ours && d - ours <= slack
    });
    let agree_tx = tx_dev.tx.map(|d| d >= txs.packets && d - txs.packets <= slack);
    let agree = match (agree_rx, agree_tx) {
        (Some(a), Some(b)) => Some(a && b),
        (Some(a), None) | (None, Some(a)) => Some(a),
        (None, None) => None,
    };
    let dev_drops = rx_dev.drops.unwrap_or(0);
    let ok = o.error.is_none()
        && o.mismatches == 0
        && o.out_of_order == 0
        && o.received + dev_drops >= o.sent
        && agree != Some(false);
    let why = if ok {
        String::new()
    } else {
        format!(
            "{mode} {}: sent {} received {} mismatches {} out of order {} lost {}{}{}{}",
            size.name(),
            o.sent,
            o.received,
            o.mismatches,
            o.out_of_order,
            o.lost,
            o.error.as_ref().map_or(String::new(), |e| format!(" ({e})")),
            o.first_mismatch.as_ref().map_or(String::new(), |m| format!(" [{m}]")),
            if agree == Some(false) { " counters disagree" } else { "" }
        )
    };
    j = j
        .with("frames_sent", o.sent)
        .with("frames_received", o.received)
        .with("bytes_compared", o.bytes_compared)
        .with("mismatches", o.mismatches)
        .with("out_of_order", o.out_of_order)
        .with("lost", o.lost)
        .with("foreign", o.foreign)
        .with("error", o.error.clone())
        .with(
            "rawpkt",
            J::obj().with("tx", stats_json(&txs)).with("rx", stats_json(&rxs)),
        )
        .with(
            "device",
            J::obj().with("rx_port", rx_dev.json).with("tx_port", tx_dev.json),
        )
        .with("counters_agree", agree)
        .with("compressed_sessions", J::Null)
        .with("duration_s", o.elapsed.as_secs_f64());
    let _ = o.stamps;
    (ok, why, j)
}

fn datapath(env: &mut Env, cfg: &Config) -> Step {
    let (txpool, rxpool) = match (pool(32768), pool(32768)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (Status::Fail, e, J::obj()),
    };
    let peer_spec = env.peer().spec().to_string();
    let mut tx = match env.peer().tx_queue(0, &txpool, &QueueConfig::default().size(RX_RING)) {
        Ok(q) => q,
        Err(e) => return (Status::Fail, format!("{peer_spec}: send queue: {e}"), J::obj()),
    };
    let max_frame = env.max_frame() as usize;
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    let mut total = 0u64;
    let mut agreed_all = true;
    for &mode in &cfg.modes {
        for &size in &cfg.sizes {
            if size.max() > max_frame {
                let why = format!("{} bytes exceed the ports' largest frame, {max_frame}", size.max());
                skipped.push(format!("{mode} {}", size.name()));
                runs.push(
                    J::obj()
                        .with("mode", mode)
                        .with("size", size.name())
                        .with("skipped", why),
                );
                continue;
            }
            let (ok, why, j) = one_run(env, mode, size, cfg.frames, &mut *tx, &txpool, &rxpool);
            if j.get_bool("counters_agree") != Some(true) {
                agreed_all = false;
            }
            total += cfg.frames;
            env.say(&format!(
                "{} {mode} {}: {} frames",
                if ok { "ok" } else { "FAILED" },
                size.name(),
                cfg.frames
            ));
            if !ok {
                failures.push(why);
            }
            runs.push(j);
            if rawpkt_sys::signal::stop_flag().load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
        }
        if rawpkt_sys::signal::stop_flag().load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
    }
    let fields = J::obj().with("runs", runs);
    let n = cfg.modes.len() * cfg.sizes.len() - skipped.len();
    if failures.is_empty() {
        let mut s = format!(
            "{n} runs ({} modes × {} sizes), {total} frames byte-identical, counters {}",
            cfg.modes.len(),
            cfg.sizes.len(),
            if agreed_all {
                "agree"
            } else {
                "not compared (unavailable)"
            }
        );
        if !skipped.is_empty() {
            s += &format!("; not run (frame above the MTU): {}", skipped.join(", "));
        }
        (Status::Pass, s, fields)
    } else {
        (Status::Fail, failures.join("; "), fields)
    }
}

/// The form of striding `wqe_id`s: `free-running` (the WQE counter mod 2^16), `ring-index`
/// (the WQE's index in a ring of `ring`), or `other`; `unknown` without samples past the
/// first ring.
fn wqe_id_form(samples: &[rawpkt::WqeIdSample], ring: u32) -> &'static str {
    let past: Vec<_> = samples.iter().filter(|s| s.sw_wqe >= ring).collect();
    if past.is_empty() {
        return "unknown";
    }
    if past.iter().all(|s| u32::from(s.wqe_id) == s.sw_wqe & 0xffff) {
        "free-running"
    } else if past.iter().all(|s| u32::from(s.wqe_id) == s.sw_wqe % ring) {
        "ring-index"
    } else {
        "other"
    }
}

fn ring_wraps(env: &mut Env) -> Step {
    let (txpool, rxpool) = match (pool(32768), pool(32768)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (Status::Fail, e, J::obj()),
    };
    let mut tx = match env.peer().tx_queue(0, &txpool, &QueueConfig::default().size(RX_RING)) {
        Ok(q) => q,
        Err(e) => return (Status::Fail, format!("send queue: {e}"), J::obj()),
    };
    let dst = env.dut_rep.mac.unwrap_or_default();
    let src = env.peer_rep().mac.unwrap_or_default();
    let mut fails = Vec::new();
    let mut rx_json = Vec::new();
    let mut recoveries = 0u64;
    // 1. Small frames: eMPW packs up to 4 in a WQEBB, so 8 × 65,536 frames take the send ring's
    // 16-bit WQEBB counter past two wraps however densely it packs; the cyclic receive ring
    // takes one WQE a frame, 8 wraps.
    let frames = 8 * WRAP + 4096;
    let tx_before = *tx.stats();
    {
        let mut rx = match env.dut.rx_queue(0, &rxpool, &rx_config("cyclic", 60, &rxpool)) {
            Ok(q) => q,
            Err(e) => return (Status::Fail, format!("receive queue: {e}"), J::obj()),
        };
        let run = env.next_run();
        let len = |_: u64| 60usize;
        let mut hook = |_: &mut dyn TxQueue, _: u64| 32;
        let mut plan = Plan {
            frames,
            dst,
            src,
            run,
            len: &len,
            window: WINDOW,
            idle: IDLE,
            clock: None,
            before_send: &mut hook,
        };
        let o = traffic::run(&mut plan, &mut *tx, &txpool, &mut *rx, &rxpool);
        let rxs = *rx.stats();
        recoveries += rxs.recoveries;
        check_outcome("cyclic", &o, &rxs, &mut fails);
        rx_json.push(
            J::obj()
                .with("mode", "cyclic")
                .with("frames", o.received)
                .with("wqes", o.received)
                .with("recoveries", rxs.recoveries)
                .with("mismatches", o.mismatches)
                .with("samples", Vec::<J>::new())
                .with("wqe_id_form", "not-applicable"),
        );
        env.say(&format!("cyclic: {} frames, {} WQEs", o.received, o.received));
    }
    let txs = stats_delta(&tx_before, tx.stats());
    recoveries += txs.recoveries;
    if txs.recoveries > 0 {
        fails.push(format!("send queue: {} recoveries", txs.recoveries));
    }
    // 2. Striding: frames of just over one stride take two, so every CQE takes the queue's
    // slow path, which logs the raw wqe_ids; the WQE counter passes 65,536.
    let layout = env.dut_rep.striding_layout;
    let mut striding_ran = false;
    if layout != "per-stride" {
        rx_json.push(
            J::obj()
                .with("mode", "striding")
                .with("skipped", format!("the device's striding RQ layout is {layout}")),
        );
    } else {
        let q = rx_config("striding", 0, &rxpool);
        let stride = 1u64 << (31 - rxpool.data_room().leading_zeros()).min(13);
        let len = (stride + stride / 8) as usize;
        // Strides per WQE as the driver picks them (`rx::dv_striding::params_for`): 8 at
        // least, the device's fewest, and a WQE of 16 KiB.
        let min_log = env.dut_rep.striding.map_or(3, |c| c.min_log_num_strides);
        let log_n = 3u32.max(min_log).max(14u32.saturating_sub(stride.trailing_zeros()));
        let n = 1u64 << log_n;
        let ring = (u64::from(RX_RING) / n).max(1) as u32;
        if len > env.max_frame() as usize {
            rx_json.push(J::obj().with("mode", "striding").with(
                "skipped",
                format!("a two-stride frame ({len} bytes) exceeds the largest frame"),
            ));
        } else {
            let wqes = WRAP + 2 * u64::from(ring) + 2;
            let frames = wqes * n / 2;
            let mut rx = match env.dut.rx_queue(0, &rxpool, &q) {
                Ok(q) => q,
                Err(e) => return (Status::Fail, format!("striding receive queue: {e}"), J::obj()),
            };
            let run = env.next_run();
            let lenf = |_: u64| len;
            let mut hook = |_: &mut dyn TxQueue, _: u64| 32;
            let mut plan = Plan {
                frames,
                dst,
                src,
                run,
                len: &lenf,
                window: WINDOW,
                idle: IDLE,
                clock: None,
                before_send: &mut hook,
            };
            let o = traffic::run(&mut plan, &mut *tx, &txpool, &mut *rx, &rxpool);
            let rxs = *rx.stats();
            recoveries += rxs.recoveries;
            check_outcome("striding", &o, &rxs, &mut fails);
            striding_ran = true;
            let samples = rx.wqe_id_samples();
            let form = wqe_id_form(&samples, ring);
            if samples.iter().all(|s| s.sw_wqe < WRAP as u32) {
                fails.push("striding: no wqe_id sample past the 16-bit wrap".into());
            }
            env.say(&format!(
                "striding: {} frames of {len} bytes, {} WQEs of {n} strides (ring of {ring}), wqe_id {form}",
                o.received,
                o.received * 2 / n
            ));
            rx_json.push(
                J::obj()
                    .with("mode", "striding")
                    .with("frames", o.received)
                    .with("frame_bytes", len)
                    .with("strides_per_wqe", n)
                    .with("ring_wqes", ring)
                    .with("wqes", o.received * 2 / n)
                    .with("recoveries", rxs.recoveries)
                    .with("mismatches", o.mismatches)
                    .with(
                        "samples",
                        J::Arr(
                            samples
                                .iter()
                                .map(|s| {
                                    J::obj()
                                        .with("sw_wqe", s.sw_wqe)
                                        .with("wqe_id", s.wqe_id)
                                        .with("wqe_counter", s.wqe_counter)
                                })
                                .collect(),
                        ),
                    )
                    .with("wqe_id_form", form),
            );
        }
    }
    let fields = J::obj()
        .with(
            "tx",
            J::obj()
                .with("frames", txs.packets)
                .with("wqebbs_at_least", txs.packets / 4)
                .with("recoveries", txs.recoveries),
        )
        .with("rx", rx_json)
        .with("recoveries", recoveries);
    if fails.is_empty() {
        (
            Status::Pass,
            format!(
                "send ring past 2 × 65,536 WQEBBs, cyclic receive ring past 65,536 WQEs, {}; no recovery, no mismatch",
                if striding_ran {
                    "striding ring past 65,536 WQEs"
                } else {
                    "striding not run"
                }
            ),
            fields,
        )
    } else {
        (Status::Fail, fails.join("; "), fields)
    }
}

fn check_outcome(what: &str, o: &Outcome, rxs: &QueueStats, fails: &mut Vec<String>) {
    if o.error.is_some() || o.mismatches > 0 || o.out_of_order > 0 || o.lost > 0 || rxs.recoveries > 0 {
        fails.push(format!(
            "{what}: sent {} received {} mismatches {} out of order {} lost {} recoveries {}{}",
            o.sent,
            o.received,
            o.mismatches,
            o.out_of_order,
            o.lost,
            rxs.recoveries,
            o.error.as_ref().map_or(String::new(), |e| format!(" ({e})"))
        ));
    }
}

fn tx_errors(env: &mut Env) -> Step {
    let (txpool, rxpool) = match (pool(32768), pool(32768)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (Status::Fail, e, J::obj()),
    };
    // The port under test sends; its peer receives.
    let dst = env.peer_rep().mac.unwrap_or_default();
    let src = env.dut_rep.mac.unwrap_or_default();
    // Longer than the port sends, and than the 9216 bytes a device may take whatever its
    // netdev's MTU (the model library's devices do: their netdevs say 1500).
    let oversize_len = (env.dut_rep.max_frame as usize).max(9216) + 64;
    let mut cases = Vec::new();
    let mut fails = Vec::new();
    let mut said = Vec::new();
    for (name, fault) in [("bad_lkey", TxFault::BadLkey), ("oversize", TxFault::Oversize)] {
        let mut tx = match env.dut.tx_queue(0, &txpool, &QueueConfig::default().size(RX_RING)) {
            Ok(q) => q,
            Err(e) => return (Status::Fail, format!("send queue: {e}"), J::obj()),
        };
        let mut rx = match env.peer().rx_queue(0, &rxpool, &rx_config("cyclic", 0, &rxpool)) {
            Ok(q) => q,
            Err(e) => return (Status::Fail, format!("peer receive queue: {e}"), J::obj()),
        };
        let dev_before = read_counters(&env.dut_counters);
        let run = env.next_run();
        // 1000 frames, the fault in a burst of its own, 2000 more.
        const AT: u64 = 1000;
        let frames = 3000;
        let injected: Cell<Option<u64>> = Cell::new(None);
        let accepted = Cell::new(true);
        let oversize = fault == TxFault::Oversize;
        let len = |seq: u64| {
            if oversize && injected.get() == Some(seq) {
                oversize_len
            } else {
                60 + (seq % 64) as usize
            }
        };
        let mut hook = |q: &mut dyn TxQueue, sent: u64| {
            if sent >= AT && injected.get().is_none() {
                injected.set(Some(sent));
                accepted.set(q.inject_fault(fault));
                1
            } else {
                32
            }
        };
        let mut plan = Plan {
            frames,
            dst,
            src,
            run,
            len: &len,
            window: WINDOW,
            idle: IDLE,
            clock: None,
            before_send: &mut hook,
        };
        let o = traffic::run(&mut plan, &mut *tx, &txpool, &mut *rx, &rxpool);
        let s = *tx.stats();
        let dev = dev_delta(&env.dut_counters, &dev_before);
        let syndrome = [
            ("local_prot", s.errors.local_prot),
            ("local_length", s.errors.local_length),
            ("local_qp_op", s.errors.local_qp_op),
            ("other", s.errors.other),
        ]
        .iter()
        .find(|(_, n)| *n > 0)
        .map(|(k, _)| *k);
        // Every frame sent after the recovery arrived (the run reached its last frame), none
        // corrupted, and the queue was reset exactly once.
        let after_ok = o.error.is_none() && o.mismatches == 0 && o.out_of_order == 0;
        let ok = accepted.get() && s.recoveries == 1 && after_ok && o.lost <= WINDOW;
        let why = if !accepted.get() {
            format!("{name}: the queue cannot inject faults")
        } else {
            format!(
                "{name}: recoveries {} (want 1), syndrome {}, lost {}, after: {}",
                s.recoveries,
                syndrome.unwrap_or("none"),
                o.lost,
                if after_ok {
                    "ok".to_string()
                } else {
                    o.error.clone().unwrap_or_else(|| "mismatches".into())
                }
            )
        };
        said.push(format!(
            "{name}: {}, 1 recovery, {} frames lost",
            syndrome.unwrap_or("no error"),
            o.lost
        ));
        if !ok {
            fails.push(why);
        }
        cases.push(
            J::obj()
                .with("case", name)
                .with("injected_at", injected.get())
                .with(
                    "frame_bytes",
                    if oversize {
                        oversize_len
                    } else {
                        60 + (injected.get().unwrap_or(0) % 64) as usize
                    },
                )
                .with("syndrome", syndrome)
                .with("error_cqes", s.errors.total() - s.errors.flushed)
                .with("flush_cqes", s.errors.flushed)
                .with("late_flush_cqes", s.errors.late_flush)
                .with("recoveries", s.recoveries)
                .with("frames_sent", o.sent)
                .with("frames_received", o.received)
                .with("frames_lost", o.lost)
                .with("after", if after_ok { "pass" } else { "fail" })
                .with("rawpkt_tx", stats_json(&s))
                .with("device", dev.json),
        );
    }
    let fields = J::obj().with("cases", cases);
    if fails.is_empty() {
        (Status::Pass, said.join("; "), fields)
    } else {
        (Status::Fail, fails.join("; "), fields)
    }
}

fn timestamps(env: &mut Env, cfg: &Config) -> Step {
    if env.dut_rep.datapath != "dv" || env.dut_rep.clock_mode.is_none() {
        return (
            Status::Skip,
            "the port hands up no receive timestamps (no DV datapath or no device clock)".into(),
            J::obj(),
        );
    }
    let (txpool, rxpool) = match (pool(32768), pool(32768)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (Status::Fail, e, J::obj()),
    };
    let mut tx = match env.peer().tx_queue(0, &txpool, &QueueConfig::default().size(RX_RING)) {
        Ok(q) => q,
        Err(e) => return (Status::Fail, format!("send queue: {e}"), J::obj()),
    };
    let q = QueueConfig::default().size(RX_RING).rx_timestamps(true);
    let mut rx = match env.dut.rx_queue(0, &rxpool, &q) {
        Ok(q) => q,
        Err(e) => return (Status::Fail, format!("receive queue: {e}"), J::obj()),
    };
    let reference = env.dut.device_clock_ns();
    let ref_name = match (env.dut_rep.clock_mode, &env.dut_rep.phc) {
        (Some("real-time"), Some(p)) => p.clone(),
        (Some("real-time"), None) => "unavailable (real-time mode, and the netdev names no PHC)".into(),
        _ => "the device's free-running clock (ibv_query_rt_values_ex)".into(),
    };
    let dut = &env.dut;
    let clock = || dut.device_clock_ns();
    let have_ref = reference.is_some();
    let run = env.run_id.wrapping_add(1);
    env.run_id = run;
    let frames = cfg.frames.min(20_000);
    let len = |_: u64| 60usize;
    let mut hook = |_: &mut dyn TxQueue, _: u64| 32;
    let mut plan = Plan {
        frames,
        dst: env.dut_rep.mac.unwrap_or_default(),
        src: env.peer_rep().mac.unwrap_or_default(),
        run,
        len: &len,
        window: WINDOW,
        idle: IDLE,
        clock: Some(&clock),
        before_send: &mut hook,
    };
    let o = traffic::run(&mut plan, &mut *tx, &txpool, &mut *rx, &rxpool);
    let ts: Vec<u64> = o.stamps.iter().map(|s| s.0).collect();
    let monotonic = ts.windows(2).all(|w| w[0] <= w[1]);
    let mut offsets: Vec<i128> = o
        .stamps
        .iter()
        .filter_map(|&(t, r)| r.map(|r| i128::from(r) - i128::from(t)))
        .collect();
    offsets.sort_unstable();
    // Each timestamp lies between the clock before the first frame went and the clock after
    // the burst that handed it up.
    let bracketed = have_ref
        && o.clock_start.is_some_and(|s| ts.first().is_some_and(|&t| t >= s))
        && offsets.first().is_some_and(|&m| m >= 0);
    let rate_ppm = match (o.stamps.first(), o.stamps.last()) {
        (Some(&(t0, Some(r0))), Some(&(t1, Some(r1)))) if r1 > r0 && t1 > t0 => {
            Some(((t1 - t0) as f64 / (r1 - r0) as f64 - 1.0) * 1e6)
        }
        _ => None,
    };
    let mode = env.dut_rep.clock_mode.unwrap_or("none");
    let mode_seen = if bracketed { mode } else { "unknown" };
    let fields = J::obj()
        .with("mode", mode)
        .with("mode_seen", mode_seen)
        .with("reference", ref_name.as_str())
        .with("samples", o.frames_timestamped)
        .with("frames_received", o.received)
        .with(
            "offset_ns",
            if offsets.is_empty() {
                J::Null
            } else {
                J::obj()
                    .with("min", offsets[0] as i64)
                    .with("median", offsets[offsets.len() / 2] as i64)
                    .with("max", offsets[offsets.len() - 1] as i64)
            },
        )
        .with("rate_ppm", rate_ppm)
        .with("monotonic", monotonic)
        .with("bracketed", if have_ref { J::Bool(bracketed) } else { J::Null });
    let mut fails = Vec::new();
    if o.error.is_some() || o.received != frames {
        fails.push(format!(
            "received {} of {frames}{}",
            o.received,
            o.error.as_ref().map_or(String::new(), |e| format!(" ({e})"))
        ));
    }
    if o.frames_timestamped != o.received {
        fails.push(format!(
            "{} of {} frames had a timestamp",
            o.frames_timestamped, o.received
        ));
    }
    if !monotonic {
        fails.push("timestamps went backwards".into());
    }
    if have_ref && !bracketed {
        fails.push(format!(
            "timestamps outside [clock before sending, clock after receiving] of {ref_name} (offsets {:?}..{:?} ns)",
            offsets.first(),
            offsets.last()
        ));
    }
    if fails.is_empty() {
        let s = if have_ref {
            format!(
                "{} frames, {mode} timestamps within the reference clock's brackets (median {} ns after), monotonic",
                o.received,
                offsets.get(offsets.len() / 2).copied().unwrap_or(0)
            )
        } else {
            format!(
                "{} frames, {mode} timestamps monotonic; reference clock {ref_name}",
                o.received
            )
        };
        (Status::Pass, s, fields)
    } else {
        (Status::Fail, fails.join("; "), fields)
    }
}

fn bifurcation(env: &mut Env, cfg: &Config) -> Step {
    let Some(netdev) = env.dut_rep.netdev.clone() else {
        return (Status::Skip, "the port has no netdev".into(), J::obj());
    };
    if !std::path::Path::new("/sys/class/net").join(&netdev).exists() {
        return (
            Status::Skip,
            format!("no Linux netdev {netdev} on this host (the model library's netdevs exist only in its sysfs)"),
            J::obj(),
        );
    }
    let Some(ns) = cfg.peer_netns.clone() else {
        return (
            Status::Skip,
            "give --peer-netns NS: the namespace holding the peer's netdev, with an address on the netdev's subnet"
                .into(),
            J::obj(),
        );
    };
    crate::bifurcation::run(&env.dut, &netdev, &ns)
}

fn events(env: &mut Env) -> Step {
    let d = env.dut.description();
    let fatal = d.contains("DEVICE FATAL");
    let fields = J::obj().with("description", d.as_str());
    if fatal {
        (Status::Fail, "the device reported a fatal error".into(), fields)
    } else {
        (
            Status::Pass,
            "no device-fatal event; queue events surface in the steps' recoveries".into(),
            fields,
        )
    }
}
