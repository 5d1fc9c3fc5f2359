//! End to end through a real Linux interface: a model port wired to one end of a veth pair
//! through AF_PACKET (`model:afpacket=IF`) exchanges frames, byte for byte, with the kernel on
//! the other end, which sits in a network namespace of the test's own.
//!
//! Needs root (network namespaces, veth pairs, AF_PACKET sockets), iproute2 and python3. CI runs
//! it with `--include-ignored` as root.

mod common;

use common::{is_root, run, run_quiet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use etherparse::{EtherType, Ethernet2Header};
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig, RxQueue, TxQueue};

/// Frames sent by the model to the kernel (part 1).
const N_TO_KERNEL: usize = 1000;
/// Frames sent by the kernel to the model (part 2).
const M_FROM_KERNEL: usize = 500;
/// How long any one wait may take before the test gives up. Generous for loaded CI machines;
/// a passing run takes well under a second.
const TIMEOUT: Duration = Duration::from_secs(10);

/// IEEE 802 "local experimental" ethertype. No kernel protocol handles it, so the kernel never
/// answers, routes or forwards our frames: traffic cannot leave the veth pair, and nothing the
/// kernel generates in response perturbs the counters.
const ETHERTYPE: u16 = 0x88b5;
/// Right after the Ethernet header of every test frame, followed by a direction byte.
const MAGIC: &[u8; 12] = b"rawpkt-veth\0";
/// Direction bytes: model → kernel, kernel → model.
const DIR_TO_KERNEL: u8 = b'T';
const DIR_FROM_KERNEL: u8 = b'R';

/// Python in the namespace: captures frames arriving on B that start with the prefix (ethertype,
/// magic, direction), prints "ready" once bound, then the captured frames in hex, one a line,
/// when it has `want` of them or the deadline passes.
const SNIFFER: &str = r#"
import socket, sys, time
ifname, want, secs, prefix = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), bytes.fromhex(sys.argv[4])
deadline = time.monotonic() + secs
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(socket.SOL_SOCKET, 33, 1 << 24)  # SO_RCVBUFFORCE: a burst must not overflow it
s.bind((ifname, 0))
print("ready", flush=True)
got = []
while len(got) < want:
    left = deadline - time.monotonic()
    if left <= 0:
        break
    s.settimeout(left)
    try:
        f = s.recv(65536)
    except socket.timeout:
        break
    if f[12:12 + len(prefix)] == prefix:
        got.append(f.hex())
print("\n".join(got), flush=True)
"#;

/// Python in the namespace: sends every hex line of stdin as one frame out of B, as soon as it
/// arrives; exits at the end of stdin.
const SENDER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for i, line in enumerate(sys.stdin.buffer):
    f = bytes.fromhex(line.decode().strip())
    if s.send(f) != len(f):
        sys.exit("short send of frame %d" % i)
"#;

/// Frames the sender may have out that the model has not yet received. The model's AF_PACKET
/// socket has the default receive buffer (about 200 KiB, some 80 of our largest frames), which
/// only the model thread drains; when that thread is descheduled for a few milliseconds, an
/// unpaced sender overflows it and the kernel drops frames silently. A window keeps the test
/// deterministic however the machine is loaded.
const WINDOW: usize = 32;

#[test]
#[ignore = "needs root"]
fn model_port_exchanges_frames_with_kernel_through_veth() {
    assert!(
        is_root(),
        "this test creates network namespaces and veth pairs and needs root; \
         run it as root with `cargo test --test veth_model -- --include-ignored`"
    );
    // Declared first so it is dropped last: the port's socket closes before the links go.
    let topo = Topology::create();
    let mac_a = topo.mac_a();
    let mac_b = topo.mac_b();

    let port = rawpkt::open(&format!("model:afpacket={}", topo.a)).expect("open the model port on A");
    let (nic, idx) = rawpkt::model::nic_of(&port).expect("a model port");
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();

    // Part 1: model → kernel.
    let to_kernel: Vec<Vec<u8>> = (0..N_TO_KERNEL)
        .map(|seq| test_frame(mac_b, mac_a, DIR_TO_KERNEL, seq))
        .collect();
    let mut sniffer = topo.sniff_b(N_TO_KERNEL, DIR_TO_KERNEL);
    let rx_before = topo.b_rx_packets();
    let mut tx = port.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
    send_all(&mut *tx, &pool, &to_kernel);
    assert_eq!(tx.stats().packets, N_TO_KERNEL as u64, "TX queue packet count");
    assert_eq!(tx.stats().drops, 0, "TX queue drops");
    assert_eq!(tx.stats().errors.total(), 0, "TX completion errors");
    assert_eq!(
        nic.port_counters(idx).tx_frames,
        N_TO_KERNEL as u64,
        "model port tx_frames"
    );

    // B's kernel counter: veth counts a frame on the peer when it crosses the pair. IPv6 is off
    // and nothing else sends out of A, so the increase should be exactly N; only `>=` is
    // asserted so that a stray frame from some host agent cannot fail the test (the sniffer
    // below checks our frames exactly).
    let deadline = Instant::now() + TIMEOUT;
    let delta = loop {
        let delta = topo.b_rx_packets() - rx_before;
        if delta >= N_TO_KERNEL as u64 {
            break delta;
        }
        assert!(
            Instant::now() < deadline,
            "B's rx_packets rose by only {delta} of {N_TO_KERNEL} within {TIMEOUT:?} \
             (model port counters: {:?})",
            nic.port_counters(idx)
        );
        tx.reclaim().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    };
    if delta != N_TO_KERNEL as u64 {
        eprintln!("note: B received {delta} frames, {N_TO_KERNEL} of them ours");
    }
    let sniffed = sniffer.finish();
    assert_eq!(sniffed.len(), N_TO_KERNEL, "frames of ours captured on B");
    for (seq, (got, want)) in sniffed.iter().zip(&to_kernel).enumerate() {
        assert_same(
            got,
            want,
            &format!("frame {seq} captured on B (vs. what the model sent)"),
        );
    }
    eprintln!("model -> kernel: {N_TO_KERNEL} frames, B rx_packets +{delta}");

    // Part 2: kernel → model, on the same port.
    let mut rx = port.rx_queue(0, &pool, &QueueConfig::default()).unwrap();
    let from_kernel: Vec<Vec<u8>> = (0..M_FROM_KERNEL)
        .map(|seq| test_frame(mac_a, mac_b, DIR_FROM_KERNEL, seq))
        .collect();
    let rx_frames_before = nic.port_counters(idx).rx_frames;
    let mut sender = topo.sender_on_b();
    let received = receive_from(&mut sender, &from_kernel, &mut *rx, &pool, DIR_FROM_KERNEL);
    sender.finish();
    assert_eq!(received.len(), M_FROM_KERNEL, "frames of ours received by the model");
    for (seq, (got, want)) in received.iter().zip(&from_kernel).enumerate() {
        assert_same(
            got,
            want,
            &format!("frame {seq} received by the model (vs. what B sent)"),
        );
    }
    let c = nic.port_counters(idx);
    assert!(
        c.rx_frames - rx_frames_before >= M_FROM_KERNEL as u64,
        "model port rx_frames: {c:?}"
    );
    assert_eq!(c.rx_out_of_buffer, 0, "model port dropped frames for lack of buffers");
    assert_eq!(c.rx_wire_drops, 0, "frames lost between the kernel and the model");
    assert_eq!(c.tx_wire_errors, 0, "AF_PACKET sends the kernel refused");
    assert_eq!(rx.stats().errors.total(), 0, "RX completion errors");
    eprintln!("kernel -> model: {M_FROM_KERNEL} frames");

    // Every buffer comes back once the queues are gone.
    drop(rx);
    drop(tx);
    assert_eq!(pool.free_count(), pool.capacity(), "pool not full after teardown");
}

/// Sends `frames` in order through `tx`, reclaiming as it goes, until every one has completed.
fn send_all(tx: &mut dyn TxQueue, pool: &std::rc::Rc<Pool>, frames: &[Vec<u8>]) {
    let mut out = Burst::new(pool, 64);
    let mut next = 0;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        while out.room() > 0 && next < frames.len() {
            assert!(out.push_copy(&frames[next]), "pool ran dry at frame {next}");
            next += 1;
        }
        if out.is_empty() && tx.in_flight() == 0 {
            return;
        }
        tx.tx_burst(&mut out).unwrap();
        tx.reclaim().unwrap();
        assert!(
            Instant::now() < deadline,
            "TX did not finish within {TIMEOUT:?}: {next} of {} queued, {} in flight, {} unsent",
            frames.len(),
            tx.in_flight(),
            out.len()
        );
    }
}

/// Has `sender` send `frames` while polling `rx`, at most `WINDOW` frames ahead of what has
/// arrived, until all test frames of direction `dir` are in (others are ignored); then keeps
/// polling briefly to catch duplicates. Returns the frames' bytes in arrival order.
fn receive_from(
    sender: &mut Sender,
    frames: &[Vec<u8>],
    rx: &mut dyn RxQueue,
    pool: &std::rc::Rc<Pool>,
    dir: u8,
) -> Vec<Vec<u8>> {
    let mut got = Burst::new(pool, 64);
    let mut received = Vec::new();
    let mut fed = 0;
    let mut other = 0usize;
    let deadline = Instant::now() + TIMEOUT;
    let mut grace_end: Option<Instant> = None;
    loop {
        if fed < frames.len() && fed - received.len() < WINDOW {
            let upto = frames.len().min(received.len() + WINDOW);
            sender.feed(&frames[fed..upto]);
            fed = upto;
            if fed == frames.len() {
                sender.close();
            }
        }
        if rx.rx_burst(&mut got).unwrap() == 0 {
            std::thread::yield_now();
        }
        for i in 0..got.len() {
            if is_test_frame(got.data(i), dir) {
                received.push(got.data(i).to_vec());
            } else {
                other += 1;
            }
        }
        got.clear();
        sender.check();
        let now = Instant::now();
        match grace_end {
            None if received.len() >= frames.len() => grace_end = Some(now + Duration::from_millis(200)),
            Some(end) if now >= end => break,
            _ => {}
        }
        assert!(
            now < deadline,
            "the model received only {} of {} frames within {TIMEOUT:?} ({fed} sent, {other} others)",
            received.len(),
            frames.len()
        );
    }
    if other > 0 {
        eprintln!("note: the model also received {other} frames that are not ours");
    }
    received
}

/// Test frame `seq`: Ethernet header, magic, direction, sequence number, then a filler whose
/// length (60 to 1459 bytes, so frames of 91 to 1490 bytes) and bytes follow from `seq`.
fn test_frame(dst: [u8; 6], src: [u8; 6], dir: u8, seq: usize) -> Vec<u8> {
    let eth = Ethernet2Header {
        source: src,
        destination: dst,
        ether_type: EtherType(ETHERTYPE),
    };
    let mut f = eth.to_bytes().to_vec();
    f.extend_from_slice(MAGIC);
    f.push(dir);
    f.extend_from_slice(&(seq as u32).to_be_bytes());
    let filler = 60 + seq * 37 % 1400;
    f.extend((0..filler).map(|i| (seq * 7 + i * 13) as u8));
    f
}

/// Byte-for-byte equality; otherwise panics with the lengths and the first differing offset.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        let at = at.unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: {} bytes, expected {}; first difference at byte {at}",
            got.len(),
            want.len()
        );
    }
}

/// Ethertype, magic and direction, as they appear from byte 12 of a test frame.
fn test_prefix(dir: u8) -> Vec<u8> {
    let mut p = ETHERTYPE.to_be_bytes().to_vec();
    p.extend_from_slice(MAGIC);
    p.push(dir);
    p
}

fn is_test_frame(frame: &[u8], dir: u8) -> bool {
    frame.get(12..).is_some_and(|rest| rest.starts_with(&test_prefix(dir)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from the sniffer"))
        .collect()
}

/// The veth pair A <-> B and the namespace holding B; removed on drop, also when the test fails.
///
/// A stays in the test's own (root) namespace because the model opens its AF_PACKET socket in
/// the namespace of the calling process. A carries no address and has IPv6 off, so the host's
/// stack leaves it alone; B, in the test's namespace, is the "kernel" the model talks to. The
/// names carry the process id so parallel runs do not clash; interface names stay within
/// Linux's 15 characters ("rpka" + at most 7 digits of a pid).
struct Topology {
    ns: String,
    a: String,
    b: String,
}

impl Topology {
    fn create() -> Topology {
        let pid = std::process::id();
        let topo = Topology {
            ns: format!("rpkns{pid}"),
            a: format!("rpka{pid}"),
            b: format!("rpkb{pid}"),
        };
        // Leftovers of a killed run whose pid was reused.
        topo.remove();
        run(&["ip", "netns", "add", &topo.ns]);
        // From here on, `topo`'s drop cleans up whatever was created.
        run(&[
            "ip", "link", "add", &topo.a, "type", "veth", "peer", "name", &topo.b, "netns", &topo.ns,
        ]);
        // Before the links come up, so there are no router solicitations, DAD or MLD frames.
        if std::path::Path::new("/proc/sys/net/ipv6").exists() {
            run(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", topo.a)]);
            topo.in_ns(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", topo.b)]);
        }
        run(&["ip", "link", "set", &topo.a, "up"]);
        run(&["ip", "-n", &topo.ns, "link", "set", &topo.b, "up"]);
        topo
    }

    /// Runs a command inside the namespace.
    fn in_ns(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.ns];
        all.extend_from_slice(args);
        run(&all)
    }

    fn mac_a(&self) -> [u8; 6] {
        let path = format!("/sys/class/net/{}/address", self.a);
        common::mac_of(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}")))
    }

    fn mac_b(&self) -> [u8; 6] {
        // `ip netns exec` mounts the namespace's own sysfs.
        common::mac_of(&self.in_ns(&["cat", &format!("/sys/class/net/{}/address", self.b)]))
    }

    fn b_rx_packets(&self) -> u64 {
        let s = self.in_ns(&["cat", &format!("/sys/class/net/{}/statistics/rx_packets", self.b)]);
        s.trim().parse().unwrap_or_else(|_| panic!("bad rx_packets {s:?}"))
    }

    /// Starts capturing test frames of direction `dir` on B; returns once the capture is bound.
    fn sniff_b(&self, want: usize, dir: u8) -> Sniffer {
        let secs = (TIMEOUT * 2).as_secs().to_string();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-c", SNIFFER, &self.b])
            .args([&want.to_string(), &secs, &hex(&test_prefix(dir))])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the python3 sniffer in the namespace");
        let mut sniffer = Sniffer {
            child: Reaped(child),
            stdout: None,
        };
        let mut stdout = BufReader::new(sniffer.child.0.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the sniffer's output");
        if line.trim() != "ready" {
            let mut err = String::new();
            let _ = sniffer.child.0.stderr.take().expect("piped").read_to_string(&mut err);
            panic!("the sniffer on B did not start: {line:?} {}", err.trim());
        }
        sniffer.stdout = Some(stdout);
        sniffer
    }

    /// Starts a raw-socket sender on B in the namespace; frames go out as they are fed.
    fn sender_on_b(&self) -> Sender {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-c", SENDER, &self.b])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the python3 sender in the namespace");
        let stdin = child.stdin.take();
        Sender {
            child: Reaped(child),
            stdin,
        }
    }

    fn remove(&self) {
        // Deleting A deletes its peer B too, wherever B is.
        run_quiet(&["ip", "link", "del", &self.a]);
        run_quiet(&["ip", "netns", "del", &self.ns]);
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.remove();
        let left = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(&self.ns))
            .unwrap_or(false);
        if left {
            eprintln!("warning: could not delete network namespace {}", self.ns);
        }
    }
}

/// A child process that is killed and reaped if the test ends before it does.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

struct Sniffer {
    child: Reaped,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Sniffer {
    /// Waits for the sniffer to finish (it stops at its count or its deadline) and returns the
    /// frames it captured.
    fn finish(&mut self) -> Vec<Vec<u8>> {
        let mut text = String::new();
        self.stdout
            .take()
            .expect("finish once")
            .read_to_string(&mut text)
            .expect("read the sniffer's output");
        let status = self.child.0.wait().expect("wait for the sniffer");
        let mut err = String::new();
        let _ = self.child.0.stderr.take().expect("piped").read_to_string(&mut err);
        assert!(status.success(), "the sniffer on B failed ({status}): {}", err.trim());
        text.lines().filter(|l| !l.is_empty()).map(unhex).collect()
    }
}

struct Sender {
    child: Reaped,
    stdin: Option<ChildStdin>,
}

impl Sender {
    /// Hands frames to the sender (hex, one a line).
    fn feed(&mut self, frames: &[Vec<u8>]) {
        let text: String = frames.iter().map(|f| hex(f) + "\n").collect();
        let stdin = self.stdin.as_mut().expect("feed before close");
        if let Err(e) = stdin.write_all(text.as_bytes()).and_then(|()| stdin.flush()) {
            // Most likely the sender died: report its own error if so.
            std::thread::sleep(Duration::from_millis(100));
            self.check();
            panic!("cannot feed frames to the sender on B: {e}");
        }
    }

    /// No more frames: the sender exits once it has sent what it has.
    fn close(&mut self) {
        self.stdin = None;
    }

    /// Panics with the sender's error output if it has exited unsuccessfully.
    fn check(&mut self) {
        if let Some(status) = self.child.0.try_wait().expect("poll the sender") {
            if !status.success() {
                let mut err = String::new();
                let _ = self.child.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("the sender on B failed ({status}): {}", err.trim());
            }
        }
    }

    /// Waits (bounded) for the sender to exit and checks that it succeeded.
    fn finish(mut self) {
        self.close();
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.0.try_wait().expect("poll the sender") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the sender on B did not exit within {TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut err = String::new();
        let _ = self.child.0.stderr.take().expect("piped").read_to_string(&mut err);
        assert!(status.success(), "the sender on B failed ({status}): {}", err.trim());
    }
}
