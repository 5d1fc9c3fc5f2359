//! Debian's unmodified dpdk-testpmd (DPDK 22.11, its mlx5 PMD from `librte-net-mlx5-23`) on the
//! model library, through `scripts/model-host.sh` (the soname links, a PCI tree for DPDK's bus
//! scan, the model's netdevs in a namespace), on mlx5_0 and mlx5_1 (`0000:3b:00.0` and `.1`,
//! cabled back to back) with no devargs but `dv_flow_en=0` and, for their variants, `mprq_en=1`
//! (with `rxqs_min_mprq=1`)
//! and `rxq_cqe_comp_en=0`. The host offers no DevX (`RAWPKT_MODEL_DEVX=0`), so the PMD takes
//! its ibverbs path.
//!
//! Each run drives testpmd's own command line (`-i`): start forwarding, `show port stats all`
//! until the frames counted reach the run's goal (no clock: a run ends when the counts are
//! there, and fails only when they stop moving), stop, and compare testpmd's counters (RX, TX,
//! missed, errors) with the model's, which the library keeps in a file
//! (`RAWPKT_MODEL_COUNTERS`). testpmd's RX-missed is the `out_of_buffer` counter the model
//! publishes in its sysfs tree and the PMD reads there (`mlx5_read_ib_stat`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frames a run counts at least (summed over the ports, in the mode's direction).
const FRAMES: u64 = 10_000_000;
/// How long the counts may stand still before a run fails (the machine may be busy; a run
/// that is moving is never cut short).
const STALL: Duration = Duration::from_secs(60);
/// How long testpmd may say nothing before its first prompt.
const START: Duration = Duration::from_secs(300);
/// The frames `start tx_first` puts in flight per port and queue (testpmd's default burst).
const BURST: u64 = 32;
/// testpmd's default RX ring (`nb_rxd`).
const RXD: u64 = 256;

/// One port's counters as `show port stats` prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PortStats {
    rx: u64,
    missed: u64,
    rx_errors: u64,
    tx: u64,
    tx_errors: u64,
}

/// The model's counters of one device, from the `RAWPKT_MODEL_COUNTERS` file.
type ModelCounters = HashMap<String, u64>;

struct Testpmd {
    child: Child,
    /// The terminal's master side: commands go in here.
    stdin: std::fs::File,
    /// Everything testpmd printed (stdout and stderr), for assertions' messages.
    log: Arc<Mutex<String>>,
    /// Signalled whenever output arrives.
    more: Receiver<()>,
    counters: PathBuf,
}

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r/open on fds and a buffer this function
    // owns; each fd is checked and then owned by a File.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert!(libc::grantpt(m) == 0 && libc::unlockpt(m) == 0, "grantpt/unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0, "ptsname_r");
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0, "opening the pty's slave: {}", std::io::Error::last_os_error());
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    }
}

fn reader(mut from: impl Read + Send + 'static, log: Arc<Mutex<String>>, more: std::sync::mpsc::Sender<()>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once the last process holding the slave side is gone.
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
            log.lock().unwrap().push_str(&text);
            let _ = more.send(());
        }
    });
}

impl Testpmd {
    /// testpmd on mlx5_0 and mlx5_1 with `devargs` after `dv_flow_en=0`, `app` arguments after
    /// `-i`, and `env` for the model (`RAWPKT_MODEL_DEVX=0` unless `env` says otherwise). The
    /// PMD logs at debug level: what it found (DevX or not) and made is in the log.
    fn start(devargs: &str, app: &[&str], env: &[(&str, &str)]) -> Testpmd {
        let root = rawpkt_model_verbs::workspace_root();
        // The library the launcher's model-env.sh links is the one the tests build.
        rawpkt_model_verbs::soname_dir();
        let counters = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "testpmd-counters-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&counters);
        let dev = |pci: &str| format!("{pci},dv_flow_en=0{devargs}");
        let mut cmd = Command::new(root.join("scripts/model-host.sh"));
        // A process group of its own, which `Drop` ends whole.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.args(["dpdk-testpmd", "-l", "0-1", "--no-huge", "-m", "512", "--no-shconf"])
            .args(["--iova-mode=va", "-a", &dev("0000:3b:00.0"), "-a", &dev("0000:3b:00.1")])
            .args(["--log-level=pmd.common.mlx5:debug", "--log-level=pmd.net.mlx5:debug"])
            .args(["--", "-i", "--total-num-mbufs=16384", "--nb-cores=1"])
            .args(app)
            .env("RAWPKT_MODEL_DEVX", "0")
            .env("RAWPKT_MODEL_COUNTERS", &counters);
        // On a terminal, as a person runs it: testpmd's own prints are then line-buffered and
        // arrive in order with its prompt (into a pipe, stdio would hold them back).
        let (master, slave) = pty();
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("running scripts/model-host.sh dpdk-testpmd");
        // The parent's copies of the terminal's slave side are gone with `cmd`.
        drop(cmd);
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, more) = channel();
        reader(master.try_clone().unwrap(), log.clone(), tx);
        let stdin = master;
        let mut t = Testpmd {
            child,
            stdin,
            log,
            more,
            counters,
        };
        // Probing, queue set-up and the ports' start: the first prompt. Silent for over a minute
        // on a machine busy enough (the launcher's set-up, then probing with debug logs).
        t.wait_for_within(START, |l| l.contains("testpmd> "), "the first prompt");
        t
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the output since now satisfies `done`, failing when nothing arrives for
    /// `stall` or testpmd exits.
    fn wait_for_within(&mut self, stall: Duration, done: impl Fn(&str) -> bool, what: &str) -> String {
        let from = self.log.lock().unwrap().len();
        self.wait_from_within(from, stall, done, what)
    }

    /// Waits until the output from byte `from` on satisfies `done` (as [`Testpmd::wait_for_within`]).
    fn wait_from(&mut self, from: usize, done: impl Fn(&str) -> bool, what: &str) -> String {
        self.wait_from_within(from, STALL, done, what)
    }

    fn wait_from_within(&mut self, from: usize, stall: Duration, done: impl Fn(&str) -> bool, what: &str) -> String {
        loop {
            let text = self.log.lock().unwrap()[from..].to_string();
            if done(&text) {
                return text;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("testpmd exited ({st}) waiting for {what}:\n{}", self.log());
            }
            if self.more.recv_timeout(stall).is_err() {
                panic!("nothing from testpmd for {stall:?} waiting for {what}:\n{}", self.log());
            }
        }
    }

    /// Sends one command and returns what it printed up to the next prompt (without the PMD's
    /// log lines).
    fn cmd(&mut self, line: &str) -> String {
        // From before the command: its output may come before this thread looks again.
        let from = self.log.lock().unwrap().len();
        writeln!(self.stdin, "{line}").expect("writing to testpmd");
        self.stdin.flush().unwrap();
        let out = self.wait_from(from, |t| without_pmd_logs(t).contains("testpmd> "), line);
        without_pmd_logs(&out)
    }

    /// `show port stats all`, parsed: ports 0 and 1.
    fn stats(&mut self) -> [PortStats; 2] {
        let out = self.cmd("show port stats all");
        let mut ports = [PortStats::default(); 2];
        for (i, block) in out.split("NIC statistics for port ").skip(1).enumerate().take(2) {
            let port: usize = block.split_whitespace().next().unwrap().parse().unwrap();
            assert_eq!(port, i, "{out}");
            ports[i] = PortStats {
                rx: field(block, "RX-packets:"),
                missed: field(block, "RX-missed:"),
                rx_errors: field(block, "RX-errors:"),
                tx: field(block, "TX-packets:"),
                tx_errors: field(block, "TX-errors:"),
            };
        }
        ports
    }

    /// The model's counters of `ibdev` now (the file is rewritten within 10 ms of a change).
    fn model(&self, ibdev: &str) -> ModelCounters {
        let text = std::fs::read_to_string(&self.counters).unwrap_or_default();
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(ibdev));
        line.map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
                .collect()
        })
        .unwrap_or_default()
    }

    /// Polls testpmd's and the model's counters until `done` holds for them, failing when
    /// neither moves for [`STALL`].
    fn until(&mut self, what: &str, done: impl Fn(&[PortStats; 2], &[ModelCounters; 2]) -> bool) -> [PortStats; 2] {
        let mut last = (self.stats(), [self.model("mlx5_0"), self.model("mlx5_1")]);
        let mut moved = Instant::now();
        loop {
            if done(&last.0, &last.1) {
                return last.0;
            }
            std::thread::sleep(Duration::from_millis(200));
            let now = (self.stats(), [self.model("mlx5_0"), self.model("mlx5_1")]);
            if now != last {
                moved = Instant::now();
            } else if moved.elapsed() > STALL {
                panic!(
                    "waiting for {what}: no counter moved for {STALL:?}: testpmd {:?}, model {:?}\n{}",
                    now.0,
                    now.1,
                    self.log()
                );
            }
            last = now;
        }
    }

    /// `quit`, and the exit; the log.
    fn quit(mut self) -> String {
        writeln!(self.stdin, "quit").expect("writing to testpmd");
        let _ = self.stdin.flush();
        let started = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let log = self.log();
                assert!(st.success(), "testpmd exited with {st}:\n{log}");
                let _ = std::fs::remove_file(&self.counters);
                return log;
            }
            if started.elapsed() > STALL {
                let _ = self.child.kill();
                panic!("testpmd did not exit on quit:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for Testpmd {
    fn drop(&mut self) {
        // A failed assertion: end testpmd. SIGTERM to the launcher's process group (testpmd is
        // in it), which removes its namespace and kills a testpmd that reads on at its prompt
        // after 5 s (scripts/model-host.sh); SIGKILL to the group if it is not gone within 30 s,
        // so that a failing test never hangs.
        let group = -(self.child.id() as i32);
        // SAFETY: kill(2) on our own child's process group; no memory is involved.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let t = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if t.elapsed() > Duration::from_secs(30) {
                // SAFETY: as above.
                unsafe { libc::kill(group, libc::SIGKILL) };
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `text` without the PMD's log lines: the forwarding core logs too (at debug level, the MR
/// cache filling as the first frames go), and a line of its may land inside the prompt
/// ("testp" + "mlx5_common: ...\n" + "md> ").
fn without_pmd_logs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["mlx5_common: ", "mlx5_net: "]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        out.push_str(&rest[..at]);
        rest = match rest[at..].find('\n') {
            Some(end) => &rest[at + end + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The number after `key` in `text`.
fn field(text: &str, key: &str) -> u64 {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key} in {text}")) + key.len();
    text[at..].split_whitespace().next().unwrap().parse().unwrap()
}

fn m(c: &ModelCounters, k: &str) -> u64 {
    *c.get(k)
        .unwrap_or_else(|| panic!("the model's counters have no {k}: {c:?}"))
}

/// What holds in every mode once forwarding has stopped and the counts settled: no errors on
/// either side; every frame testpmd counted as sent is one the model sent on that port's wire;
/// what testpmd counts as missed is what the model dropped for want of a receive buffer; and
/// the model lost nothing between the wire and the peer's queues.
fn common(pmd: &[PortStats; 2], model: &[ModelCounters; 2], log: &str) {
    for p in 0..2 {
        let (s, c, peer) = (pmd[p], &model[p], &model[1 - p]);
        assert_eq!((s.rx_errors, s.tx_errors), (0, 0), "port {p} errors\n{log}");
        for k in ["tx_error_cqes", "rx_error_cqes", "rx_wq_error", "rx_steer_missed"] {
            assert_eq!(m(c, k), 0, "model port {p} {k}: {c:?}");
        }
        assert_eq!(
            s.missed,
            m(c, "rx_out_of_buffer"),
            "port {p} RX-missed vs the model: {c:?}"
        );
        assert_eq!(
            m(peer, "tx_frames"),
            m(c, "rx_frames") + m(c, "rx_out_of_buffer") + m(c, "rx_unclaimed"),
            "port {p}: the peer's frames all arrived: {c:?} {peer:?}"
        );
    }
}

/// `set fwd MODE`, `start tx_first` (or `start`), run until the ports together have forwarded
/// [`FRAMES`], stop, settle, compare; returns testpmd's final counters and the model's.
///
/// With `devx` the host has DevX (the model's default): the PMD reads the device's capabilities,
/// makes its transport domain, TISes and UARs with DevX commands and still builds its queues
/// with verbs (with `dv_flow_en=0`, drivers/net/mlx5/mlx5.h `mlx5_devx_obj_ops_en`), and its
/// log says so. Without, it takes its ibverbs path from the start.
/// The model's environment for a host with DevX (`devx`) or without.
fn devx_env(devx: bool) -> [(&'static str, &'static str); 1] {
    [("RAWPKT_MODEL_DEVX", if devx { "1" } else { "0" })]
}

/// testpmd's log says the PMD took DevX (and read each port's TIS through it) or did not.
fn devx_in_log(log: &str, devx: bool) {
    if devx {
        assert!(log.contains("DevX is supported."), "{log}");
        for p in 0..2 {
            let tis = format!("Port {p} Tx queue 0 TIS number");
            assert!(
                log.contains(&tis),
                "no {tis:?}: the TIS's transport domain read with DevX\n{log}"
            );
        }
    } else {
        assert!(log.contains("DevX is NOT supported."), "{log}");
    }
}

fn forward(mode: &str, devargs: &str, queues: u64, devx: bool) -> ([PortStats; 2], [ModelCounters; 2]) {
    let q = queues.to_string();
    let mut app = vec!["--txonly-multi-flow"];
    let qa = [format!("--rxq={q}"), format!("--txq={q}")];
    if queues > 1 {
        app.extend(qa.iter().map(String::as_str));
    }
    let mut t = Testpmd::start(devargs, &app, &devx_env(devx));
    let began = Instant::now();
    t.cmd(&format!("set fwd {mode}"));
    t.cmd("start tx_first");
    t.until(&format!("{FRAMES} frames forwarded"), |s, _| {
        s[0].rx + s[1].rx >= FRAMES
    });
    let secs = began.elapsed().as_secs_f64();
    t.cmd("stop");
    // Settled: the model has sent every frame testpmd handed its queues.
    let pmd = t.until("the model to send what testpmd posted", |s, c| {
        (0..2).all(|p| c[p].get("tx_frames") == Some(&s[p].tx))
    });
    let model = [t.model("mlx5_0"), t.model("mlx5_1")];
    let xstats = t.cmd("show port xstats 0");
    let log = t.quit();
    common(&pmd, &model, &log);
    // With `mprq_en` the PMD takes multi-packet RQs only from `rxqs_min_mprq` queues (12 by
    // default, mlx5_rxq.c `mlx5_mprq_enabled`), which the tests set to 1: the log says each
    // queue is one (mlx5_rxq.c `mlx5_rxq_new`).
    if devargs.contains("mprq_en=1") {
        assert!(log.contains("Multi-Packet RQ is enabled"), "MPRQ not taken:\n{log}");
    }
    devx_in_log(&log, devx);
    for p in 0..2 {
        // Frames go round in loops: what the model put in port p's queues and testpmd has not
        // taken out yet is some of what `start tx_first` put in flight.
        let (rx, got) = (pmd[p].rx, m(&model[p], "rx_frames"));
        assert!(
            rx <= got && got - rx <= 2 * BURST * queues,
            "port {p}: testpmd RX {rx}, the model delivered {got}\n{log}"
        );
        assert_eq!(pmd[p].missed, 0, "port {p}: a forwarding loop drops nothing\n{log}");
    }
    if queues > 1 {
        // RSS spread the flows (testpmd's multi-flow sources) over every queue.
        for i in 0..queues {
            let n = field(&xstats, &format!("rx_q{i}_packets:"));
            assert!(n > 0, "port 0 queue {i} received nothing:\n{xstats}");
        }
    }
    eprintln!(
        "testpmd {mode}{devargs} queues={queues} devx={devx}: {} frames forwarded in {secs:.1} s",
        pmd[0].rx + pmd[1].rx
    );
    (pmd, model)
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_forwards_through_the_model() {
    forward("io", "", 1, false);
}

/// The same with DevX: capabilities, transport domain, TIS and UARs through DevX commands.
#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_with_devx_forwards_through_the_model() {
    forward("io", "", 1, true);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_macswap_forwards_through_the_model() {
    forward("macswap", "", 1, false);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_macswap_with_devx_forwards_through_the_model() {
    forward("macswap", "", 1, true);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_with_rss_over_two_queues() {
    forward("io", "", 2, false);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_with_multi_packet_rq() {
    forward("io", ",mprq_en=1,rxqs_min_mprq=1", 1, false);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_without_cqe_compression() {
    forward("io", ",rxq_cqe_comp_en=0", 1, false);
}

#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_io_with_multi_packet_rq_without_cqe_compression() {
    forward("io", ",mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=0", 1, false);
}

/// Both ports send; nobody takes the frames out of the peers' queues, which fill and then drop
/// (RX-missed, the model's `out_of_buffer`).
#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_txonly_sends_through_the_model() {
    txonly(false);
}

/// The same with DevX.
#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_txonly_with_devx_sends_through_the_model() {
    txonly(true);
}

fn txonly(devx: bool) {
    let mut t = Testpmd::start("", &[], &devx_env(devx));
    let began = Instant::now();
    t.cmd("set fwd txonly");
    t.cmd("start");
    t.until(&format!("{FRAMES} frames sent"), |s, _| s[0].tx + s[1].tx >= FRAMES);
    let secs = began.elapsed().as_secs_f64();
    t.cmd("stop");
    let pmd = t.until("the model to send what testpmd posted and publish its drops", |s, c| {
        (0..2).all(|p| c[p].get("tx_frames") == Some(&s[p].tx) && c[p].get("rx_out_of_buffer") == Some(&s[p].missed))
    });
    let model = [t.model("mlx5_0"), t.model("mlx5_1")];
    let log = t.quit();
    common(&pmd, &model, &log);
    devx_in_log(&log, devx);
    for p in 0..2 {
        // testpmd drains its queues once when forwarding starts; after that, each RX ring
        // holds what it had room for.
        let (rx, got) = (pmd[p].rx, m(&model[p], "rx_frames"));
        assert!(
            rx <= got && got - rx <= RXD,
            "port {p}: RX {rx}, delivered {got}\n{log}"
        );
        assert!(
            pmd[p].missed > 0,
            "port {p}: the unpolled ring filled and dropped\n{log}"
        );
    }
    eprintln!("testpmd txonly: {} frames sent in {secs:.1} s", pmd[0].tx + pmd[1].tx);
}

/// A traffic thread in testpmd's own process (`RAWPKT_MODEL_TRAFFIC`, rawpkt's own TX queue on
/// mlx5_0 opened through the same library) sends to mlx5_1, where testpmd receives; every frame
/// that reached mlx5_1's queues is one testpmd counted, every one that did not is in RX-missed.
#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_rxonly_receives_through_the_model() {
    rxonly(false);
}

/// The same with DevX.
#[test]
#[ignore = "needs root (a network namespace, CAP_NET_RAW), dpdk (dpdk-dev, librte-net-mlx5-23)"]
fn testpmd_rxonly_with_devx_receives_through_the_model() {
    rxonly(true);
}

fn rxonly(devx: bool) {
    let traffic = format!("tx=mlx5:mlx5_0/1 rx=none dst=02:4d:4c:35:00:01 count={FRAMES} pps=500000");
    // The thread starts sending once its probe reaches the ports' queues, when testpmd starts
    // its ports, so forwarding starts at once (`--auto-start`) rather than at a later `start`,
    // meanwhile the queues would fill and drop. A deep ring (33 ms of frames at the thread's
    // rate), so that a forwarding core off the CPU for a while (two cores shared by testpmd's
    // core, the model's and the sender, on a busy machine) costs few frames; what it costs is
    // counted (RX-missed).
    let app = [
        "--rxd=16384",
        "--total-num-mbufs=65536",
        "--forward-mode=rxonly",
        "--auto-start",
    ];
    let began = Instant::now();
    let [devx] = devx_env(devx);
    let mut t = Testpmd::start("", &app, &[("RAWPKT_MODEL_TRAFFIC", &traffic), devx]);
    // Its one line comes when it has sent everything (testpmd prints nothing meanwhile).
    t.wait_from(0, |l| l.contains("model traffic: "), "the traffic thread's report");
    let report = t
        .log()
        .lines()
        .find(|l| l.contains("model traffic: "))
        .unwrap()
        .to_string();
    assert!(report.contains("model traffic: ok "), "{report}\n{}", t.log());
    let num = |k: &str| field(&report.replace('=', "= "), &format!("{k}="));
    let (sent, probes) = (num("sent"), num("probes_sent"));
    assert_eq!(sent, FRAMES, "{report}");
    // testpmd takes out everything that reached the queues.
    let arrived = |c: &ModelCounters| {
        ["rx_frames", "rx_out_of_buffer", "rx_unclaimed"]
            .map(|k| c.get(k).copied().unwrap_or(0))
            .iter()
            .sum::<u64>()
    };
    let pmd = t.until(
        &format!("testpmd to receive what reached mlx5_1's queues ({report})"),
        |s, c| {
            c[0].get("tx_frames").is_some_and(|&n| n == arrived(&c[1]))
                && c[1].get("rx_frames") == Some(&s[1].rx)
                && c[1].get("rx_out_of_buffer") == Some(&s[1].missed)
        },
    );
    let secs = began.elapsed().as_secs_f64();
    t.cmd("stop");
    let model = [t.model("mlx5_0"), t.model("mlx5_1")];
    let log = t.quit();
    common(&pmd, &model, &log);
    devx_in_log(&log, devx.1 == "1");
    // Every frame mlx5_0 put on its wire (the thread's, probes included) testpmd received or
    // counted as missed, but those that went to Linux: probes before testpmd's flows took frames
    // to its MAC, and frames while testpmd replaces its flows at start (as on hardware, where
    // the kernel's netdev gets them).
    let wire = m(&model[0], "tx_frames");
    assert_eq!(wire, sent + probes, "{report}: {model:?}");
    assert_eq!(
        pmd[1].rx + pmd[1].missed + m(&model[1], "rx_unclaimed"),
        wire,
        "{pmd:?} {model:?}\n{log}"
    );
    assert!(pmd[1].rx + pmd[1].missed >= FRAMES - 1000, "{pmd:?}\n{log}");
    assert_eq!((pmd[0].rx, pmd[0].tx, pmd[1].tx), (0, 0, 0), "{pmd:?}");
    eprintln!(
        "testpmd rxonly: {} frames received, {} missed, in {secs:.1} s",
        pmd[1].rx, pmd[1].missed
    );
}
