//! The l2-xconnect example, the real binary, with `xdp:` ports on veths in network namespaces
//! this test creates (and deletes, even when it fails, through Drop guards):
//!
//! ```text
//!   gen ns               xc ns                          sink ns
//!   g<pid> <==veth==> xa<pid> [l2-xconnect] xb<pid> <==veth==> s<pid>
//!   (xdp: TX, here)      --port-a xdp:xa,rule=any           (xdp: RX, here)
//!                        --port-b xdp:xb,rule=any
//! ```
//!
//! This test process sends numbered frames of 60 to 1514 bytes on an `xdp:` port in the gen
//! namespace, at most `WINDOW` ahead of what its `xdp:` port in the sink namespace has received
//! (copy-mode AF_XDP TX into a veth drops silently when the peer's ring is full, so the window
//! keeps every ring far from full), and checks that every frame arrives once, in order and byte
//! for byte, that nothing else arrives, that the veths' kernel counters agree, and that the
//! xconnect's own summary balances (A->B rx == tx, no drops, nothing on B->A).
//!
//! The tool is cargo's own build of this package's `l2-xconnect` binary.
//!
//! Needs root and iproute2 for the veth test; CI runs it with `--include-ignored`.

use rawpkt_test_support as common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{frame_len, is_root, run, seq_of, tagged_frame, ETHERTYPE};
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig};

/// Frames through the xconnect.
const FRAMES: u64 = 20_000;
/// Frames sent and not yet received at most: far below veth's 256-entry ring and the 1024-entry
/// AF_XDP rings, so no ring on the way can overflow however the CPUs are shared.
const WINDOW: u64 = 64;
/// For the traffic itself (it takes about a second on an idle 2-CPU VM).
const TRAFFIC_LIMIT: Duration = Duration::from_secs(20);
/// For the xconnect to come up, and to exit after SIGINT.
const PROCESS_LIMIT: Duration = Duration::from_secs(10);

/// gen ns -- veth -- xc ns (two interfaces) -- veth -- sink ns, named after this process, with
/// IPv6 off and no IPv4 address anywhere, so that Linux sends nothing on these links. Dropping
/// it deletes the namespaces, and with them the veths.
struct Topology {
    gen_ns: String,
    xc_ns: String,
    sink_ns: String,
    gen: String,
    xa: String,
    xb: String,
    sink: String,
}

impl Topology {
    fn create() -> Topology {
        // Unique per process and per topology: two tests of this process run at once.
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{n}", std::process::id());
        let t = Topology {
            gen_ns: format!("rpxcg{id}"),
            xc_ns: format!("rpxcx{id}"),
            sink_ns: format!("rpxcs{id}"),
            gen: format!("g{id}"),
            xa: format!("xa{id}"),
            xb: format!("xb{id}"),
            sink: format!("s{id}"),
        };
        t.remove(); // left over by a killed run of a process with the same pid
        for ns in t.namespaces() {
            run(&["ip", "netns", "add", ns]);
            // Before the veths exist, so that they never get an IPv6 link-local address, DAD
            // probes, router solicitations or MLD reports.
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        for (a, a_ns, b, b_ns) in [
            (&t.gen, &t.gen_ns, &t.xa, &t.xc_ns),
            (&t.xb, &t.xc_ns, &t.sink, &t.sink_ns),
        ] {
            // One queue each: veth picks the peer's RX queue from the sending CPU or the skb's
            // queue mapping, and every port here uses queue 0.
            run(&[
                "ip",
                "link",
                "add",
                a,
                "netns",
                a_ns,
                "numtxqueues",
                "1",
                "numrxqueues",
                "1",
                "type",
                "veth",
                "peer",
                "name",
                b,
                "netns",
                b_ns,
                "numtxqueues",
                "1",
                "numrxqueues",
                "1",
            ]);
        }
        for (ns, ifn) in t.interfaces() {
            run(&["ip", "-n", ns, "link", "set", ifn, "up"]);
        }
        t
    }

    fn namespaces(&self) -> [&String; 3] {
        [&self.gen_ns, &self.xc_ns, &self.sink_ns]
    }

    fn interfaces(&self) -> [(&String, &String); 4] {
        [
            (&self.gen_ns, &self.gen),
            (&self.xc_ns, &self.xa),
            (&self.xc_ns, &self.xb),
            (&self.sink_ns, &self.sink),
        ]
    }

    fn sysfs(&self, ns: &str, ifn: &str, file: &str) -> String {
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{ifn}/{file}"),
        ])
        .trim()
        .to_string()
    }

    fn mac(&self, ns: &str, ifn: &str) -> [u8; 6] {
        common::mac_of(&self.sysfs(ns, ifn, "address"))
    }

    /// `rx_packets, rx_dropped, tx_packets, tx_dropped` of one interface.
    fn counters(&self, ns: &str, ifn: &str) -> [u64; 4] {
        ["rx_packets", "rx_dropped", "tx_packets", "tx_dropped"].map(|c| {
            self.sysfs(ns, ifn, &format!("statistics/{c}"))
                .parse()
                .unwrap_or_else(|e| panic!("{ifn} {c}: {e}"))
        })
    }

    /// Every interface's counters, for failure messages.
    fn report(&self) -> String {
        self.interfaces()
            .iter()
            .map(|(ns, ifn)| {
                let [rx, rxd, tx, txd] = self.counters(ns, ifn);
                format!("{ifn}: rx {rx} rx_dropped {rxd} tx {tx} tx_dropped {txd}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn remove(&self) {
        for ns in self.namespaces() {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The running example: its stdout and stderr lines as they come, and SIGKILL on drop (the
/// test's normal end stops it with SIGINT first).
struct Xconnect {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    lines: mpsc::Receiver<String>,
}

impl Xconnect {
    fn start(args: &[&str]) -> Xconnect {
        let mut child = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect")))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}",
                    std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect")).display()
                )
            });
        let (tx, lines) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let keep = stdout.clone();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l.clone());
                let _ = tx.send(l);
            }
        });
        let err = BufReader::new(child.stderr.take().unwrap());
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Xconnect {
            child,
            stdout,
            stderr,
            lines,
        }
    }

    fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.lock().unwrap().join("\n"),
            self.stderr.lock().unwrap().join("\n")
        )
    }

    /// Waits for the line the example prints once both ports have their queues.
    fn wait_until_forwarding(&mut self) {
        let deadline = Instant::now() + PROCESS_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with("forwarding:") => return,
                Ok(_) => {}
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    // Give the reader threads a moment to collect what the process said.
                    std::thread::sleep(Duration::from_millis(200));
                    panic!(
                        "the l2-xconnect never said it was forwarding (exit status {status:?}); {}",
                        self.output()
                    );
                }
            }
        }
    }

    /// SIGINT, then waits for the summary; returns stdout.
    fn stop(&mut self) -> Vec<String> {
        run(&["kill", "-INT", &self.child.id().to_string()]);
        let deadline = Instant::now() + PROCESS_LIMIT;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for the l2-xconnect") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the l2-xconnect did not exit after SIGINT; {}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader threads end when the pipes close.
        let until = Instant::now() + Duration::from_secs(2);
        while self
            .lines
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .is_ok()
        {}
        assert!(status.success(), "l2-xconnect exited with {status}; {}", self.output());
        self.stdout.lock().unwrap().clone()
    }
}

impl Drop for Xconnect {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The numbers in "NAME: X Mpps (rx R, tx T, drops D) on average".
fn summary_counts(stdout: &[String], name: &str) -> [u64; 3] {
    let line = stdout
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{name}:")) && l.ends_with("on average"))
        .unwrap_or_else(|| panic!("no {name} summary line in:\n{}", stdout.join("\n")));
    let inner = line
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("cannot parse {line:?}"));
    let mut v = [0u64; 3];
    for (slot, (part, key)) in v.iter_mut().zip(inner.split(", ").zip(["rx ", "tx ", "drops "])) {
        *slot = part
            .strip_prefix(key)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("cannot parse {key:?} in {line:?}"));
    }
    v
}

#[test]
#[ignore = "needs root"]
fn xdp_ports_on_veths_carry_every_frame_unmodified_and_the_counters_balance() {
    assert!(
        is_root(),
        "needs root (namespaces, veths, XDP): cargo test --test xconnect_veth -- --include-ignored"
    );
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect"));
    assert!(bin.exists(), "{} does not exist", bin.display());
    let t = Topology::create();
    let (gen_mac, sink_mac) = (t.mac(&t.gen_ns, &t.gen), t.mac(&t.sink_ns, &t.sink));

    // The frames are addressed to the sink, not to xa: without rule=any, port A would leave them
    // to Linux. rule=any on B as well, as a cross-connect would be; nothing comes back that way.
    let port_a = format!("xdp:{},netns={},rule=any", t.xa, t.xc_ns);
    let port_b = format!("xdp:{},netns={},rule=any", t.xb, t.xc_ns);
    // --duration: the example ends by itself even if this process is killed before its Drop.
    let mut xc = Xconnect::start(&[
        "--port-a",
        &port_a,
        "--port-b",
        &port_b,
        "--stats-interval",
        "0",
        "--duration",
        "120",
    ]);
    xc.wait_until_forwarding();

    // The generator and the sink: one thread, one pool registered as two UMEMs. The sink port
    // keeps its default rules (frames to its own MAC), which every test frame matches.
    let gen_port = rawpkt::open(&format!("xdp:{},netns={}", t.gen, t.gen_ns)).expect("open the generator port");
    let sink_port = rawpkt::open(&format!("xdp:{},netns={}", t.sink, t.sink_ns)).expect("open the sink port");
    let pool = Pool::new(PoolConfig::default().buffers(8192)).expect("pool");
    let q = QueueConfig::default();
    let mut tx = gen_port.tx_queue(0, &pool, &q).expect("generator TX queue");
    let mut rx = sink_port.rx_queue(0, &pool, &q).expect("sink RX queue");
    let (mut out, mut got) = (Burst::new(&pool, 32), Burst::new(&pool, 64));
    let mut expect = vec![0u8; 1514];
    let (mut sent, mut recv) = (0u64, 0u64);
    let mut extra = Vec::new();
    let start = Instant::now();
    // After the last frame, a little longer for anything that should not come (a duplicate, a
    // frame Linux sent).
    let mut quiet_until = None;
    while quiet_until.is_none_or(|q| Instant::now() < q) {
        assert!(
            start.elapsed() < TRAFFIC_LIMIT,
            "stuck: sent {sent}, received {recv}; sink RX {:?}; generator TX {:?}; {}; xconnect {}",
            rx.stats(),
            tx.stats(),
            t.report(),
            xc.output()
        );
        while sent < FRAMES && sent - recv < WINDOW && out.room() > 0 {
            assert_eq!(out.alloc(1, frame_len(sent, 60, 1514)), 1, "generator pool empty");
            let i = out.len() - 1;
            tagged_frame(sink_mac, gen_mac, sent, out.data_mut(i));
            sent += 1;
        }
        if out.is_empty() {
            tx.reclaim().expect("generator reclaim");
        } else {
            tx.tx_burst(&mut out).expect("generator tx_burst");
        }
        if rx.rx_burst(&mut got).expect("sink rx_burst") == 0 {
            std::thread::yield_now();
            continue;
        }
        for i in 0..got.len() {
            let f = got.data(i);
            if recv >= FRAMES || f.len() < 22 || f[12..14] != ETHERTYPE.to_be_bytes() {
                extra.push(f.to_vec());
                continue;
            }
            let seq = seq_of(f);
            assert_eq!(
                seq, recv,
                "frame {recv} expected: one was lost, duplicated or reordered"
            );
            let len = frame_len(seq, 60, 1514);
            assert_eq!(f.len(), len, "frame {seq}: length");
            tagged_frame(sink_mac, gen_mac, seq, &mut expect[..len]);
            assert!(f == &expect[..len], "frame {seq} was modified");
            recv += 1;
        }
        got.clear();
        if recv == FRAMES && quiet_until.is_none() {
            quiet_until = Some(Instant::now() + Duration::from_millis(300));
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{FRAMES} frames of 60..1514 bytes through the l2-xconnect in {:.2} s ({:.0} frames/s, window {WINDOW})",
        elapsed.as_secs_f64(),
        FRAMES as f64 / elapsed.as_secs_f64()
    );
    assert!(
        extra.is_empty(),
        "{} frames arrived that were not sent, the first: {:02x?}",
        extra.len(),
        &extra[0][..extra[0].len().min(64)]
    );
    while tx.in_flight() > 0 {
        assert!(start.elapsed() < TRAFFIC_LIMIT, "the generator's sends never completed");
        tx.reclaim().expect("generator reclaim");
    }
    let (ts, rs) = (*tx.stats(), *rx.stats());
    assert_eq!(
        (ts.packets, ts.drops, ts.errors.total()),
        (FRAMES, 0, 0),
        "generator TX {ts:?}"
    );
    assert_eq!(
        (rs.packets, rs.drops, rs.errors.total()),
        (FRAMES, 0, 0),
        "sink RX {rs:?}"
    );
    assert_eq!(rs.bytes, ts.bytes, "bytes sent and received");

    // The xconnect's own account, printed after SIGINT.
    let stdout = xc.stop();
    assert!(stdout.iter().any(|l| l == "interrupted"), "{}", stdout.join("\n"));
    assert_eq!(
        summary_counts(&stdout, "A->B"),
        [FRAMES, FRAMES, 0],
        "A->B: rx, tx, drops"
    );
    assert_eq!(summary_counts(&stdout, "B->A"), [0, 0, 0], "B->A: rx, tx, drops");
    let cores: Vec<&String> = stdout
        .iter()
        .filter(|l| l.trim_start().starts_with("core 0 "))
        .collect();
    assert_eq!(cores.len(), 2, "per-direction lines of core 0:\n{}", stdout.join("\n"));
    for l in cores {
        assert!(
            l.ends_with(": RX device drops 0, no buffers 0, errors 0; TX drops 0, errors 0, recoveries 0"),
            "{l}"
        );
    }
    assert!(
        !stdout.iter().any(|l| l.contains("left on TX rings")),
        "{}",
        stdout.join("\n")
    );

    // The kernel saw the same: each veth end carried exactly the frames, nothing was dropped.
    let n = FRAMES;
    for ((ns, ifn), want) in t
        .interfaces()
        .into_iter()
        .zip([[0, 0, n, 0], [n, 0, 0, 0], [0, 0, n, 0], [n, 0, 0, 0]])
    {
        assert_eq!(
            t.counters(ns, ifn),
            want,
            "{ifn}: rx_packets, rx_dropped, tx_packets, tx_dropped; all: {}",
            t.report()
        );
    }

    drop((tx, rx, out, got));
    assert_eq!(pool.free_count(), pool.capacity(), "pool full after teardown");
}

/// More cores than two 1-queue xdp ports have queues: one line, exit 2, and nothing before it
/// (not the warning that there are too few CPUs to pin them, which planning the CPUs says).
#[test]
#[ignore = "needs root"]
fn more_cores_than_queues_is_one_line() {
    assert!(common::is_root(), "needs root (namespaces, veths, XDP)");
    let t = Topology::create();
    let a = format!("xdp:{},netns={}", t.xa, t.xc_ns);
    let b = format!("xdp:{},netns={}", t.xb, t.xc_ns);
    let out = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect")))
        .args(["--port-a", &a, "--port-b", &b, "--cores", "3", "--duration", "1"])
        .stdin(Stdio::null())
        .output()
        .expect("run l2-xconnect");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: --cores 3: port A ({a}) has 1 queue, and each core takes its own on both ports (queue id = core index): at most 1 core here"
        ),
    );
}

/// Bad port specs and port errors: one line on stderr that names the option and the spec, and
/// exit status 2 for a usage mistake (rawpkt's `ErrorKind::Spec` and `ErrorKind::Config`, options that do
/// not go together) or 1 when the machine has no such thing (`ErrorKind::Device`). None of these
/// opens an XDP program, so they run without root.
#[test]
fn bad_port_specs_give_one_line_errors() {
    let pid = std::process::id();
    let no_ns = format!("xdp:veth0,netns=rpxc-none{pid}");
    let cases: Vec<(i32, Vec<&str>, Vec<&str>)> = vec![
        (
            2,
            vec!["--port-a", "bogus:x"],
            vec!["--port-a bogus:x", "unknown port kind", "xdp"],
        ),
        (2, vec!["--port-a", "xdp:"], vec!["--port-a xdp:", "no interface name"]),
        (
            2,
            vec!["--port-b", "xdp:veth0/q"],
            vec!["--port-b xdp:veth0/q", "not a number"],
        ),
        (
            2,
            vec!["--port-a", "xdp:veth0,colour=blue"],
            vec!["colour", "not understood", "rule=RULE"],
        ),
        (
            2,
            vec!["--port-a", "xdp:veth0,rule=udp dst-port"],
            vec!["--port-a", "rule"],
        ),
        (
            1,
            vec!["--port-a", "xdp:rpxcnone0"],
            vec!["--port-a xdp:rpxcnone0", "no such interface"],
        ),
        (
            1,
            vec!["--port-a", &no_ns],
            vec!["--port-a", "network namespace", "ip netns list"],
        ),
        // lo exists and is up, and has one queue.
        (
            2,
            vec!["--port-b", "xdp:lo/7"],
            vec!["--port-b xdp:lo/7", "queue 7 out of range"],
        ),
        (
            2,
            vec!["--port-a", "xdp:x0", "--port-b", "xdp:x0"],
            vec!["the same port", "xdp:x0"],
        ),
        (2, vec!["--port-a"], vec!["--port-a", "value"]),
        (
            2,
            vec!["--port-a", "model:g/0", "--port-b", "model:g/1", "--generate"],
            vec!["--generate", "two different model NICs"],
        ),
    ];
    for (code, args, says) in cases {
        let out = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect")))
            .args(&args)
            .args(["--duration", "1"])
            .stdin(Stdio::null())
            .output()
            .expect("run l2-xconnect");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(lines.len(), 1, "{args:?}: one line on stderr, got {err:?}");
        assert!(lines[0].starts_with("error: "), "{args:?}: {err}");
        for s in says {
            assert!(lines[0].contains(s), "{args:?}: {s:?} not in {err:?}");
        }
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("forwarding:"),
            "{args:?}: it started forwarding"
        );
    }
}
