//! AF_XDP ports on veth pairs in network namespaces the tests create (and delete, even when a
//! test fails, through a Drop guard): steering by flow rule with Linux traffic still working,
//! TX → veth → RX byte for byte between two `xdp:` ports, checksums asked for filled in on the
//! way out, no XDP program left after SIGKILL, and one-line errors for bad input (copy rules
//! among them) and missing privileges.
//!
//! Needs root, iproute2, python3, ping and setpriv. CI runs them with `--include-ignored`.

mod common;
#[path = "common/runts.rs"]
mod runts;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{is_root, run, run_quiet};
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Two namespaces joined by a veth pair: `a` (10.77.0.1/24) in `ns_a`, `b` (10.77.0.2/24) in
/// `ns_b`. Nothing in the root namespace; dropped (deleted) at the end of the test however it
/// ends.
struct Pair {
    ns_a: String,
    ns_b: String,
    a: String,
    b: String,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Pair {
    fn create() -> Pair {
        Pair::with_queues(1)
    }

    fn with_queues(queues: u32) -> Pair {
        let (pid, n) = (std::process::id() % 100_000, SEQ.fetch_add(1, Ordering::Relaxed));
        let p = Pair {
            ns_a: format!("rpxa{pid}-{n}"),
            ns_b: format!("rpxb{pid}-{n}"),
            a: format!("xa{pid}-{n}"),
            b: format!("xb{pid}-{n}"),
        };
        p.remove();
        run(&["ip", "netns", "add", &p.ns_a]);
        run(&["ip", "netns", "add", &p.ns_b]);
        let q = queues.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &p.a,
            "netns",
            &p.ns_a,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &p.b,
            "netns",
            &p.ns_b,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ]);
        for (ns, ifn, ip) in [(&p.ns_a, &p.a, "10.77.0.1/24"), (&p.ns_b, &p.b, "10.77.0.2/24")] {
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]);
            run(&["ip", "-n", ns, "addr", "add", ip, "dev", ifn]);
            run(&["ip", "-n", ns, "link", "set", ifn, "up"]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }

    fn exec(&self, ns: &str, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(args);
        run(&all)
    }

    fn mac(&self, ns: &str, ifn: &str) -> [u8; 6] {
        common::mac_of(&self.exec(ns, &["cat", &format!("/sys/class/net/{ifn}/address")]))
    }

    fn has_xdp(&self, ns: &str, ifn: &str) -> bool {
        let s = run(&["ip", "-n", ns, "-d", "link", "show", "dev", ifn]);
        s.contains("prog/xdp") || s.contains(" xdp")
    }

    fn remove(&self) {
        run_quiet(&["ip", "netns", "del", &self.ns_a]);
        run_quiet(&["ip", "netns", "del", &self.ns_b]);
    }
}

/// A TX queue on A (its port taking A's own MAC) and an RX queue on B (its port taking
/// EtherType 0x88b5), over one pool; the queues go before the pool and the ports.
struct AToB {
    tx: Box<dyn rawpkt::TxQueue>,
    rx: Box<dyn rawpkt::RxQueue>,
    pl: std::rc::Rc<Pool>,
    _ports: (rawpkt::Port, rawpkt::Port),
}

impl Pair {
    fn a_to_b(&self) -> AToB {
        let pa = rawpkt::open(&format!("xdp:{},netns={}", self.a, self.ns_a)).expect("open A");
        let pb = rawpkt::open(&format!("xdp:{},netns={},rule=ethertype 0x88b5", self.b, self.ns_b)).expect("open B");
        let pl = pool(8192);
        let q = QueueConfig::default();
        AToB {
            tx: pa.tx_queue(0, &pl, &q).unwrap(),
            rx: pb.rx_queue(0, &pl, &q).unwrap(),
            pl,
            _ports: (pa, pb),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.remove();
    }
}

fn pool(buffers: u32) -> std::rc::Rc<Pool> {
    Pool::new(PoolConfig::default().buffers(buffers)).unwrap()
}

/// Child-process entry: when `RAWPKT_XDP_CHILD` is set this test opens a port as told and
/// reports on stdout; otherwise it does nothing.
#[test]
fn child_entry() {
    let Ok(what) = std::env::var("RAWPKT_XDP_CHILD") else {
        return;
    };
    let (cmd, spec) = what.split_once(' ').expect("RAWPKT_XDP_CHILD=CMD SPEC");
    match cmd {
        "hold" => {
            let port = rawpkt::open(spec).expect("open in the child");
            let pool = pool(4096);
            let _rx = port
                .rx_queue(0, &pool, &QueueConfig::default())
                .expect("rx queue in the child");
            println!("READY");
            std::thread::sleep(Duration::from_secs(60));
        }
        "open" => match rawpkt::open(spec) {
            Ok(_) => println!("RESULT ok"),
            Err(e) => println!("RESULT {e}"),
        },
        _ => panic!("unknown child command {cmd}"),
    }
}

fn child(prefix: &[&str], what: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(prefix[0]);
    c.args(&prefix[1..])
        .arg(exe)
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("RAWPKT_XDP_CHILD", what)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

fn child_result(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| {
            panic!(
                "no RESULT line from the child: {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
}

/// The kernel's refusals keep their errno as the error's source, under the words that say
/// where; both fail before anything needs a capability.
#[test]
fn refusals_by_the_kernel_keep_their_errno() {
    let e = rawpkt::open("xdp:rpx-nosuchif0").unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENODEV), "{e:?}");
    assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
    assert!(e.message().starts_with("xdp:rpx-nosuchif0: no such interface"), "{e}");
    let e = rawpkt::open("xdp:lo,netns=rpx-no-such-ns").unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENOENT), "{e:?}");
    assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
    assert!(e.to_string().contains("network namespace `rpx-no-such-ns`"), "{e}");
}

#[test]
#[ignore = "needs root"]
fn bad_input_gives_one_line_errors() {
    assert!(is_root(), "needs root: cargo test --test xdp -- --include-ignored");
    let p = Pair::create();
    let err = |spec: String| {
        let e = rawpkt::open(&spec).expect_err(&spec).to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    };

    let e = err(format!("xdp:nosuchif0,netns={}", p.ns_b));
    assert!(
        e.contains("no such interface") && e.contains(&p.b) && e.contains("lo"),
        "{e}"
    );
    let e = err(format!("xdp:{}/5,netns={}", p.b, p.ns_b));
    assert!(e.contains("out of range") && e.contains("1 receive queue"), "{e}");
    let e = err(format!("xdp:{},netns=rpx-no-such-ns", p.b));
    assert!(e.contains("rpx-no-such-ns"), "{e}");
    let e = err(format!("xdp:{},netns={},rule=udp dst-port", p.b, p.ns_b));
    assert!(e.contains("rule"), "{e}");

    // A queue count the interface does not have (veth b has one).
    let two = rawpkt::PortOptions::default().rx_queues(2);
    let e = rawpkt::open_with(&format!("xdp:{},netns={}", p.b, p.ns_b), &two)
        .expect_err("rx_queues 2")
        .to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(e.contains("one queue per interface queue it uses, 1 here"), "{e}");
    assert!(!p.has_xdp(&p.ns_b, &p.b), "refused before attaching");

    // A queue id past the port's queues.
    let port = rawpkt::open(&format!("xdp:{},netns={}", p.b, p.ns_b)).unwrap();
    // The default steals UDP and the experimental EtherTypes to the interface's own MAC: no
    // multicast copy rule XDP cannot honour.
    let d = port.description();
    assert!(
        d.contains("rules [dst-mac ") && d.contains("ipv4 udp") && !d.contains("01:00:00:00:00:00"),
        "{d}"
    );
    let pl = pool(4096);
    let e = port
        .rx_queue(1, &pl, &QueueConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("queue 1 out of range"), "{e}");
    // Receive options an AF_XDP socket has no way to honour: each named, in one line.
    let asks = [
        (QueueConfig::default().rx_striding(true), "rx_striding"),
        (QueueConfig::default().rx_timestamps(true), "rx_timestamps"),
        (QueueConfig::default().rx_vlan_strip(true), "rx_vlan_strip"),
        (QueueConfig::default().rx_max_frame(9000), "rx_max_frame 9000"),
    ];
    for (cfg, what) in asks {
        let e = port.rx_queue(0, &pl, &cfg).err().expect(what).to_string();
        assert!(
            !e.contains('\n') && e.contains(what) && e.contains("xdp ports do not take"),
            "{e}"
        );
        let e = port.queue_pair(0, &pl, &cfg).err().expect(what).to_string();
        assert!(e.contains(what), "{e}");
    }
    // Buffers that are not one UMEM chunk.
    let big = Pool::new(PoolConfig::default().buffers(64).buf_size(8192).headroom(128)).unwrap();
    let e = port
        .tx_queue(0, &big, &QueueConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("2048 or 4096"), "{e}");
    drop(port);

    run(&["ip", "-n", &p.ns_b, "link", "set", &p.b, "down"]);
    let e = err(format!("xdp:{},netns={}", p.b, p.ns_b));
    assert!(e.contains("is down") && e.contains("ip link set"), "{e}");
    run(&["ip", "-n", &p.ns_b, "link", "set", &p.b, "up"]);

    // Without capabilities (root with an empty bounding set, so exec grants none).
    let out = child(
        &[
            "ip",
            "netns",
            "exec",
            &p.ns_b,
            "setpriv",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ],
        &format!("open xdp:{}", p.b),
    )
    .output()
    .unwrap();
    let e = child_result(&out);
    assert!(!e.contains('\n'));
    assert!(e.contains("not permitted") && e.contains("CAP_BPF"), "{e}");
    // With them, the same open works in the same kind of child.
    let out = child(&["ip", "netns", "exec", &p.ns_b], &format!("open xdp:{}", p.b))
        .output()
        .unwrap();
    assert_eq!(child_result(&out), "ok");
}

/// A copy rule cannot be honoured by XDP (one verdict per frame, no clone): the port refuses it
/// in one line, before any system call, so the interface not existing does not even come up.
#[test]
fn copy_rules_are_refused_before_any_system_call() {
    let e = rawpkt::open("xdp:rpx-none0,rule=udp dst-port 53 copy")
        .expect_err("copy rule")
        .to_string();
    assert_eq!(
        e,
        "bad port spec: xdp:rpx-none0,rule=udp dst-port 53 copy: rule `udp dst-port 53 copy`: xdp ports \
         cannot copy a frame to both the socket and Linux; use steal (the default)"
    );
    let opts = rawpkt::PortOptions::default().rules(vec!["ipv4 udp copy".parse().unwrap()]);
    let e = rawpkt::open_with("xdp:rpx-none0", &opts)
        .expect_err("copy rule")
        .to_string();
    assert!(
        e.contains("\"ipv4 udp copy\": xdp ports cannot copy") && !e.contains('\n'),
        "{e}"
    );
    // The same rule stealing is fine as far as the spec goes: the open fails on the interface.
    let e = rawpkt::open("xdp:rpx-none0,rule=udp dst-port 53")
        .unwrap_err()
        .to_string();
    assert!(!e.contains("copy"), "{e}");
}

#[test]
#[ignore = "needs root"]
fn program_is_gone_after_sigkill() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let mut c = child(&["ip", "netns", "exec", &p.ns_b], &format!("hold xdp:{}", p.b))
        .spawn()
        .unwrap();
    // libtest prints "test child_entry ... " before the child's own output.
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 && !line.contains("READY") {
        line.clear();
    }
    assert!(line.contains("READY"), "the child did not open the port: {line:?}");
    assert!(
        p.has_xdp(&p.ns_b, &p.b),
        "no XDP program while the child holds the port"
    );
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while p.has_xdp(&p.ns_b, &p.b) {
        assert!(Instant::now() < deadline, "XDP program still attached after SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Python: listens on UDP ports 9998 and 9999, then prints how many datagrams each got.
const UDP_COUNT: &str = r#"
import socket, sys, time
socks = {}
for port in (9998, 9999):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("0.0.0.0", port)); s.setblocking(False); socks[port] = s
print("ready", flush=True)
counts = {9998: 0, 9999: 0}
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline and counts[9998] < int(sys.argv[2]):
    for port, s in socks.items():
        try:
            while True:
                s.recv(2048); counts[port] += 1
        except BlockingIOError:
            pass
    time.sleep(0.01)
time.sleep(0.3)
for port, s in socks.items():
    try:
        while True:
            s.recv(2048); counts[port] += 1
    except BlockingIOError:
        pass
print(counts[9998], counts[9999], flush=True)
"#;

const UDP_SEND: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = int(sys.argv[1])
for i in range(n):
    s.sendto(b"rawpkt-match-%06d" % i, ("10.77.0.2", 9999))
    s.sendto(b"rawpkt-other-%06d" % i, ("10.77.0.2", 9998))
    time.sleep(0.0005)
"#;

const TCP_SERVER: &str = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 5001)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); data = b""
while len(data) < 1 << 20:
    d = c.recv(65536)
    if not d: break
    data += d
c.sendall(data[::-1][:1000]); c.close()
"#;

const TCP_CLIENT: &str = r#"
import socket
c = socket.create_connection(("10.77.0.2", 5001), timeout=10)
data = bytes(range(256)) * 4096
c.sendall(data); c.shutdown(socket.SHUT_WR)
back = b""
while True:
    d = c.recv(65536)
    if not d: break
    back += d
print("ok" if back == data[::-1][:1000] else "bad %d" % len(back))
"#;

#[test]
#[ignore = "needs root"]
fn matching_frames_reach_the_socket_and_linux_keeps_the_rest() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    const N: usize = 300;
    let port = rawpkt::open(&format!("xdp:{},netns={},rule=udp dst-port 9999", p.b, p.ns_b)).expect("open");
    assert!(
        port.description().contains("udp dst-port 9999"),
        "{}",
        port.description()
    );
    let pl = pool(4096);
    let mut rx = port.rx_queue(0, &pl, &QueueConfig::default()).unwrap();
    assert!(p.has_xdp(&p.ns_b, &p.b));
    // veth: native XDP, and no zero-copy.
    let d = port.description();
    assert!(
        d.contains("native mode") && d.contains("copy mode") && !d.contains("zero-copy"),
        "{d}"
    );

    // ARP and ICMP pass through to Linux.
    p.exec(&p.ns_a, &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2"]);

    let mut counter = Command::new("ip")
        .args([
            "netns",
            "exec",
            &p.ns_b,
            "python3",
            "-c",
            UDP_COUNT,
            "10",
            &N.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(counter.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let mut server = Command::new("ip")
        .args(["netns", "exec", &p.ns_b, "python3", "-c", TCP_SERVER])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sout = BufReader::new(server.stdout.take().unwrap());
    line.clear();
    sout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    // UDP to 9999 (matches) and 9998 (does not), and a TCP connection, while the queue polls.
    let sender = Command::new("ip")
        .args(["netns", "exec", &p.ns_a, "python3", "-c", UDP_SEND, &N.to_string()])
        .spawn()
        .unwrap();
    let client = Command::new("ip")
        .args(["netns", "exec", &p.ns_a, "python3", "-c", TCP_CLIENT])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut got = Burst::new(&pl, 64);
    let mut frames = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while frames.len() < N && Instant::now() < deadline {
        if rx.rx_burst(&mut got).unwrap() > 0 {
            for i in 0..got.len() {
                frames.push(got.data(i).to_vec());
            }
            got.clear();
        }
    }
    let client = client.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&client.stdout).trim(),
        "ok",
        "TCP through the steered port"
    );
    let _ = server.wait();
    let mut sender = sender;
    assert!(sender.wait().unwrap().success());
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = counter.wait();
    // A little longer, for anything that should not have come.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        if rx.rx_burst(&mut got).unwrap() > 0 {
            for i in 0..got.len() {
                frames.push(got.data(i).to_vec());
            }
            got.clear();
        }
    }
    p.exec(&p.ns_a, &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.77.0.2"]);

    let counts: Vec<usize> = line.split_whitespace().map(|c| c.parse().unwrap()).collect();
    assert_eq!(
        counts,
        vec![N, 0],
        "Linux got every non-matching datagram and no matching one"
    );
    assert_eq!(frames.len(), N, "the socket got every matching frame and nothing else");
    let mac_b = p.mac(&p.ns_b, &p.b);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(&f[0..6], &mac_b, "frame {i}: dst MAC");
        assert_eq!(&f[12..14], &[0x08, 0x00], "frame {i}: IPv4");
        assert_eq!(f[23], 17, "frame {i}: UDP");
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 9999, "frame {i}: dst port");
        assert_eq!(&f[42..55], b"rawpkt-match-", "frame {i}: payload");
    }
    assert_eq!(rx.stats().packets, N as u64);
    assert_eq!(rx.stats().drops, 0);
    drop(rx);
    drop(got);
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
    drop(port);
    assert!(!p.has_xdp(&p.ns_b, &p.b), "program detached when the port is dropped");
}

fn test_frame(dst: [u8; 6], src: [u8; 6], seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    common::tagged_frame(dst, src, seq, &mut f);
    f
}

#[test]
#[ignore = "needs root"]
fn tx_to_rx_through_two_xdp_ports_is_byte_exact() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    const N: u64 = 20_000;
    const WINDOW: u64 = 128;
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let pa = rawpkt::open(&format!("xdp:{},netns={}", p.a, p.ns_a)).expect("open A");
    let pb = rawpkt::open(&format!("xdp:{},netns={},rule=ethertype 0x88b5", p.b, p.ns_b)).expect("open B");
    // One pool for both sockets: the same memory registered as two UMEMs.
    let pl = pool(8192);
    let q = QueueConfig::default();
    let mut tx = pa.tx_queue(0, &pl, &q).unwrap();
    let mut rx = pb.rx_queue(0, &pl, &q).unwrap();
    let mut out = Burst::new(&pl, 32);
    let mut got = Burst::new(&pl, 64);
    let (mut sent, mut recv) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    let len_of = |seq: u64| common::frame_len(seq, 60, 1514);
    while recv < N {
        assert!(Instant::now() < deadline, "stuck: sent {sent}, received {recv}");
        while sent < N && sent - recv < WINDOW && out.room() > 0 {
            let f = test_frame(mac_b, mac_a, sent, len_of(sent));
            assert!(out.push_copy(&f));
            sent += 1;
        }
        if !out.is_empty() {
            tx.tx_burst(&mut out).unwrap();
        } else {
            tx.reclaim().unwrap();
        }
        if rx.rx_burst(&mut got).unwrap() > 0 {
            for i in 0..got.len() {
                let f = got.data(i);
                let seq = recv;
                assert_eq!(f.len(), len_of(seq), "frame {seq}: length");
                assert_eq!(f, &test_frame(mac_b, mac_a, seq, f.len())[..], "frame {seq}: bytes");
                recv += 1;
            }
            got.clear();
        }
    }
    let until = Instant::now() + TIMEOUT;
    while tx.in_flight() > 0 && Instant::now() < until {
        tx.reclaim().unwrap();
    }
    assert_eq!(tx.in_flight(), 0, "every send completed");
    assert_eq!(tx.stats().packets, N);
    assert_eq!(tx.stats().drops, 0);
    assert_eq!(tx.stats().errors.total(), 0);
    assert_eq!(rx.stats().packets, N);
    assert_eq!(rx.stats().bytes, tx.stats().bytes, "bytes balance");
    assert_eq!(rx.stats().errors.total(), 0);
    drop((tx, rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// Frames the device drops while sending: B's MTU is 500, so veth drops every 1000-byte frame A
/// sends (as it drops on a full ring), `__xsk_generic_xmit` completes it unsent and answers
/// EBUSY. The queue counts each as a drop and keeps going: every drop matches veth's tx_dropped,
/// B gets exactly the other frames in order and byte for byte, nothing is left in flight and the
/// pool is full again.
#[test]
#[ignore = "needs root"]
fn frames_the_device_drops_are_counted_and_the_rest_go_out() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    p.exec(&p.ns_b, &["ip", "link", "set", &p.b, "mtu", "500"]);
    const N: u64 = 20_000;
    let oversized = |seq: u64| seq % 7 == 3;
    let len_of = |seq: u64| {
        if oversized(seq) {
            1000
        } else {
            common::frame_len(seq, 60, 500)
        }
    };
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let pa = rawpkt::open(&format!("xdp:{},netns={}", p.a, p.ns_a)).expect("open A");
    let pb = rawpkt::open(&format!("xdp:{},netns={},rule=ethertype 0x88b5", p.b, p.ns_b)).expect("open B");
    let tx_dropped = || -> u64 {
        let s = p.exec(
            &p.ns_a,
            &["cat", &format!("/sys/class/net/{}/statistics/tx_dropped", p.a)],
        );
        s.trim().parse().unwrap()
    };
    let dropped0 = tx_dropped();
    let pl = pool(8192);
    let q = QueueConfig::default();
    let mut tx = pa.tx_queue(0, &pl, &q).unwrap();
    let mut rx = pb.rx_queue(0, &pl, &q).unwrap();
    let mut out = Burst::new(&pl, 32);
    let mut got = Burst::new(&pl, 64);
    let (mut sent, mut next_rx) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    let expected_after = |mut seq: u64| {
        while oversized(seq) {
            seq += 1;
        }
        seq
    };
    while expected_after(next_rx) < N {
        assert!(
            Instant::now() < deadline,
            "stuck: sent {sent}, next to receive {next_rx}"
        );
        while sent < N && sent - next_rx < 128 && out.room() > 0 {
            assert!(out.push_copy(&test_frame(mac_b, mac_a, sent, len_of(sent))));
            sent += 1;
        }
        if out.is_empty() {
            tx.reclaim().unwrap();
        } else {
            tx.tx_burst(&mut out).unwrap();
        }
        if rx.rx_burst(&mut got).unwrap() > 0 {
            for i in 0..got.len() {
                let seq = expected_after(next_rx);
                let f = got.data(i);
                assert_eq!(f, &test_frame(mac_b, mac_a, seq, len_of(seq))[..], "frame {seq}");
                next_rx = seq + 1;
            }
            got.clear();
        }
    }
    let drain = |tx: &mut Box<dyn rawpkt::TxQueue>| {
        let until = Instant::now() + TIMEOUT;
        while tx.in_flight() > 0 && Instant::now() < until {
            tx.reclaim().unwrap();
        }
        assert_eq!(tx.in_flight(), 0, "every send completed");
    };
    drain(&mut tx);
    // A `sendto` whose first frame the device drops: the ring drained, then a burst led by an
    // oversized frame. Nothing of ours is left in the kernel after that drop, so no completion
    // will come to end the wait: the queue must kick again at once, and the two frames behind it
    // go out.
    const LEADS: u64 = 50;
    for i in 0..LEADS {
        let base = N + 3 * i;
        for (k, len) in [(0, 1000), (1, 100), (2, 100)] {
            assert!(out.push_copy(&test_frame(mac_b, mac_a, base + k, len)));
        }
        tx.tx_burst(&mut out).unwrap();
        let (mut n, deadline) = (0, Instant::now() + TIMEOUT);
        while n < 2 {
            assert!(Instant::now() < deadline, "lead {i}: stuck after a dropped first frame");
            tx.reclaim().unwrap();
            if rx.rx_burst(&mut got).unwrap() > 0 {
                for j in 0..got.len() {
                    assert_eq!(common::seq_of(got.data(j)), base + 1 + n, "lead {i}");
                    n += 1;
                }
                got.clear();
            }
        }
        drain(&mut tx);
    }
    let too_big = (0..N).filter(|&s| oversized(s)).count() as u64 + LEADS;
    let s = *tx.stats();
    assert_eq!(s.packets, N + 3 * LEADS, "every frame handed to the kernel");
    assert_eq!(s.drops, too_big, "one drop per frame the device refused");
    assert_eq!(tx_dropped() - dropped0, too_big, "veth agrees");
    assert_eq!(rx.stats().packets, N + 3 * LEADS - too_big);
    assert_eq!(s.errors.total(), 0);
    drop((tx, rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// One socket per queue, all in one XSKMAP: two threads, each with its own pool, send on queue q
/// of A and receive on queue q of B (veth delivers a frame sent on queue q to the peer's RX queue
/// q), and each receiver gets exactly its own thread's frames.
#[test]
#[ignore = "needs root"]
fn one_socket_per_queue_on_two_threads() {
    assert!(is_root(), "needs root");
    let p = Pair::with_queues(2);
    const N: u64 = 2000;
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let pa = std::sync::Arc::new(rawpkt::open(&format!("xdp:{},netns={}", p.a, p.ns_a)).expect("open A"));
    let pb = std::sync::Arc::new(
        rawpkt::open(&format!("xdp:{},netns={},rule=ethertype 0x88b5", p.b, p.ns_b)).expect("open B"),
    );
    assert!(pb.description().contains("queues 0..2 of 2"), "{}", pb.description());
    let threads: Vec<_> = (0..2u16)
        .map(|q| {
            let (pa, pb) = (pa.clone(), pb.clone());
            std::thread::spawn(move || {
                let pl = pool(4096);
                let cfg = QueueConfig::default();
                let mut tx = pa.tx_queue(q, &pl, &cfg).unwrap();
                let mut rx = pb.rx_queue(q, &pl, &cfg).unwrap();
                let (mut out, mut got) = (Burst::new(&pl, 32), Burst::new(&pl, 64));
                let (mut sent, mut recv) = (0u64, 0u64);
                let deadline = Instant::now() + Duration::from_secs(20);
                while recv < N && Instant::now() < deadline {
                    while sent < N && sent - recv < 64 && out.room() > 0 {
                        let mut f = test_frame(mac_b, mac_a, sent, 100);
                        f[22] = q as u8;
                        out.push_copy(&f);
                        sent += 1;
                    }
                    tx.tx_burst(&mut out).unwrap();
                    if rx.rx_burst(&mut got).unwrap() > 0 {
                        for i in 0..got.len() {
                            let f = got.data(i);
                            assert_eq!((f[22], common::seq_of(f)), (q as u8, recv), "queue {q}: frame {recv}");
                            recv += 1;
                        }
                        got.clear();
                    }
                }
                (recv, rx.stats().packets, tx.stats().packets)
            })
        })
        .collect();
    for (q, t) in threads.into_iter().enumerate() {
        let (recv, rxp, txp) = t.join().expect("queue thread");
        assert_eq!((recv, rxp, txp), (N, N, N), "queue {q}");
    }
}

/// Checksum requests on an xdp port: AF_XDP has no offload here, so the TX queue computes them.
/// A sends IPv6/UDP (pktgen's IPv6 traffic), IPv6/TCP and IPv4/UDP frames whose checksum fields
/// are zero, flagged `TX_L4_CSUM` (and `TX_L3_CSUM` for IPv4); B receives each with the checksums
/// an independent builder (etherparse) computes. A frame sent without the flags keeps its zeros.
#[test]
#[ignore = "needs root"]
fn checksums_asked_for_are_filled_in_on_the_way_out() {
    use rawpkt::flags::{TX_L3_CSUM, TX_L4_CSUM};
    use rawpkt_wire::wire;
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let pa = rawpkt::open(&format!("xdp:{},netns={}", p.a, p.ns_a)).expect("open A");
    // B takes every frame to its MAC: TCP among them, which the default leaves to Linux.
    let whole = rawpkt::PortOptions::default().default_rules(rawpkt::DefaultRules::WholeMac);
    let pb = rawpkt::open_with(&format!("xdp:{},netns={}", p.b, p.ns_b), &whole).expect("open B");
    let (v6a, v6b) = (
        "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
    );
    // (frame with correct checksums, the flags to send it with, the checksum fields to zero).
    let mut cases: Vec<(Vec<u8>, u32, Vec<usize>)> = Vec::new();
    for seq in 0..64u32 {
        let payload: Vec<u8> = (0..(seq * 23 % 1000)).map(|i| (i ^ seq) as u8).collect();
        let mut f = Vec::new();
        let b = etherparse::PacketBuilder::ethernet2(mac_a, mac_b);
        let (flags, fields) = match seq % 4 {
            0 | 1 => {
                b.ipv6(v6a, v6b, 64)
                    .udp(10_000 + seq as u16, 9)
                    .write(&mut f, &payload)
                    .unwrap();
                (TX_L4_CSUM, vec![14 + 40 + 6])
            }
            2 => {
                b.ipv6(v6a, v6b, 64)
                    .tcp(40_000, 80, seq, 1024)
                    .write(&mut f, &payload)
                    .unwrap();
                (TX_L4_CSUM, vec![14 + 40 + 16])
            }
            _ => {
                b.ipv4([10, 77, 0, 1], [10, 77, 0, 2], 64)
                    .udp(10_000, 9)
                    .write(&mut f, &payload)
                    .unwrap();
                (TX_L3_CSUM | TX_L4_CSUM, vec![14 + 10, 14 + 20 + 6])
            }
        };
        cases.push((f, flags, fields));
    }
    let pl = pool(4096);
    let q = QueueConfig::default();
    let mut tx = pa.tx_queue(0, &pl, &q).unwrap();
    let mut rx = pb.rx_queue(0, &pl, &q).unwrap();
    let mut got = Burst::new(&pl, 64);
    let mut received: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    let expect = cases.len() + 1;
    let mut out = Burst::new(&pl, 32);
    let mut next = 0;
    while received.len() < expect {
        assert!(Instant::now() < deadline, "received {} of {expect}", received.len());
        if out.is_empty() && next < cases.len() {
            for (f, flags, fields) in &cases[next..(next + 16).min(cases.len())] {
                let mut zeroed = f.clone();
                for &at in fields {
                    zeroed[at..at + 2].copy_from_slice(&[0, 0]);
                }
                assert!(out.push_copy(&zeroed));
                out.set_flags(out.len() - 1, *flags);
                next += 1;
            }
            if next == cases.len() {
                // The control: no flags, so nothing fills its zero UDP checksum.
                let (f, _, fields) = &cases[0];
                let mut zeroed = f.clone();
                zeroed[fields[0]..fields[0] + 2].copy_from_slice(&[0, 0]);
                assert!(out.push_copy(&zeroed));
            }
        }
        if out.is_empty() {
            tx.reclaim().unwrap();
        } else {
            tx.tx_burst(&mut out).unwrap();
        }
        if rx.rx_burst(&mut got).unwrap() > 0 {
            for i in 0..got.len() {
                received.push(got.data(i).to_vec());
            }
            got.clear();
        }
    }
    for (i, ((want, flags, fields), f)) in cases.iter().zip(&received).enumerate() {
        assert_eq!(f, want, "frame {i} (flags {flags:#x}): bytes");
        let parsed = wire::parse(f);
        assert!(wire::l4_checksum_ok(f, &parsed), "frame {i}: L4 checksum");
        for &at in fields {
            assert_ne!(&f[at..at + 2], &[0, 0], "frame {i}: checksum at {at} filled");
        }
    }
    let control = received.last().unwrap();
    let at = cases[0].2[0];
    assert_eq!(&control[at..at + 2], &[0, 0], "no flags, no checksum");
    assert_eq!(&control[..at], &cases[0].0[..at]);
    let until = Instant::now() + TIMEOUT;
    while tx.in_flight() > 0 && Instant::now() < until {
        tx.reclaim().unwrap();
    }
    assert_eq!((tx.stats().packets, tx.stats().drops), (expect as u64, 0));
    drop((tx, rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// 10 % runts and frames shorter than an Ethernet header over veth, which puts a frame on the
/// wire as it gets it: the runts arrive padded with zeros to 60 bytes (the queue pads them as a
/// MAC would), each tiny frame is one counted drop, and every other frame arrives.
#[test]
#[ignore = "needs root"]
fn runts_are_padded_and_tiny_frames_dropped_alone() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let mac_b = p.mac(&p.ns_b, &p.b);
    let AToB {
        mut tx,
        mut rx,
        pl,
        _ports,
    } = p.a_to_b();
    runts::send_runts(tx.as_mut(), rx.as_mut(), &pl, mac_b, 20_000, || {});
    drop((tx, rx));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// `bind=zerocopy` on veth, whose driver has no zero-copy AF_XDP: one line naming the interface
/// and the driver, as a usage error (the spec asks for what the device cannot do).
#[test]
#[ignore = "needs root"]
fn zero_copy_on_a_driver_without_it_says_so() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let port = rawpkt::open(&format!("xdp:{},netns={},bind=zerocopy", p.a, p.ns_a)).expect("open A");
    let pl = pool(4096);
    let e = port.rx_queue(0, &pl, &QueueConfig::default()).map(|_| ()).unwrap_err();
    let m = e.to_string();
    assert!(e.is_usage(), "{m}");
    assert!(
        m.contains(&format!(
            "the driver of {} (veth) has no zero-copy AF_XDP; use bind=copy",
            p.a
        )),
        "{m}"
    );
    assert!(!m.contains('\n') && !m.contains("Operation not supported"), "{m}");
}

/// The interface deleted under running queues: the TX queue and the RX queue each fail with
/// `QueueError::DeviceGone` within a few seconds, instead of counting an error per `sendto`.
#[test]
#[ignore = "needs root"]
fn queues_fail_when_their_interface_is_deleted() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let mac_b = p.mac(&p.ns_b, &p.b);
    let AToB {
        mut tx,
        mut rx,
        pl,
        _ports,
    } = p.a_to_b();
    let (mut out, mut got) = (Burst::new(&pl, 32), Burst::new(&pl, 64));
    let start = Instant::now();
    let mut deleted = false;
    let (mut tx_err, mut rx_err) = (None, None);
    let mut seq = 0;
    while tx_err.is_none() || rx_err.is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no failure: tx {tx_err:?}, rx {rx_err:?}"
        );
        if !deleted && start.elapsed() > Duration::from_millis(300) {
            p.exec(&p.ns_a, &["ip", "link", "del", &p.a]);
            deleted = true;
        }
        if tx_err.is_none() {
            while out.room() > 0 {
                assert!(out.push_copy(&test_frame(mac_b, [2, 0, 0, 0, 0, 0xa], seq, 60)));
                seq += 1;
            }
            match tx.tx_burst(&mut out) {
                Ok(_) => {}
                Err(e) => tx_err = Some(e),
            }
            out.clear();
        }
        if rx_err.is_none() {
            match rx.rx_burst(&mut got) {
                Ok(_) => got.clear(),
                Err(e) => rx_err = Some(e),
            }
        }
    }
    assert!(deleted);
    // ENXIO once the socket is unbound; ENETDOWN if a call came while the deletion had only
    // taken the interface down.
    for e in [tx_err.unwrap(), rx_err.unwrap()] {
        assert!(
            matches!(
                e,
                rawpkt::QueueError::DeviceGone {
                    errno: libc::ENXIO | libc::ENETDOWN
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("queue failed: its interface is"), "{e}");
    }
    assert!(tx.stats().errors.total() < 100, "{:?}", tx.stats());
    drop((tx, rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// pktgen on an xdp port whose interface is deleted mid-run, in --count and in --duration mode:
/// one line naming the interface, exit 1, well before the count or the duration is reached.
#[test]
#[ignore = "needs root"]
fn pktgen_exits_1_when_its_interface_is_deleted() {
    assert!(is_root(), "needs root");
    for mode in [["--count", "1000000000"], ["--duration", "120"]] {
        let p = Pair::create();
        let mut child = Command::new(common::tool("pktgen"))
            .args(["--port", &format!("xdp:{},netns={}", p.a, p.ns_a), "--rate", "200k"])
            .args(mode)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "{mode:?}: pktgen ended before the deletion"
        );
        p.exec(&p.ns_a, &["ip", "link", "del", &p.a]);
        let deleted = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if deleted.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!("{mode:?}: pktgen still running 10 s after its interface was deleted");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        let failures: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("queue failed: its interface is"))
            .collect();
        assert_eq!(status.code(), Some(1), "{mode:?}: {err}");
        assert_eq!(failures.len(), 1, "{mode:?}: {err}");
        assert!(failures[0].contains(&p.a), "{mode:?}: {err}");
    }
}

/// One interface, one port: a second xdp port on it (however spelled) is a usage error naming
/// the first, in the library and in pktgen (`--port` and `--rx-port` on one interface).
#[test]
#[ignore = "needs root"]
fn an_interface_opened_twice_is_refused_as_the_same_port() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let spec = format!("xdp:{},netns={}", p.a, p.ns_a);
    {
        let first = rawpkt::open(&spec).expect("open A");
        for again in [spec.clone(), format!("xdp:{}/0,netns={},mode=generic", p.a, p.ns_a)] {
            let e = rawpkt::open(&again).unwrap_err();
            assert!(e.is_usage(), "{e}");
            assert!(
                e.to_string().contains("the interface is already open in this process"),
                "{e}"
            );
        }
        drop(first);
    }
    drop(rawpkt::open(&spec).expect("open again once the first is gone"));
    let out = Command::new(common::tool("pktgen"))
        .args([
            "--port",
            &spec,
            "--rx-port",
            &format!("xdp:{}/0,netns={}", p.a, p.ns_a),
            "--count",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("pktgen:")).count(), 1, "{err}");
    assert!(err.contains("already open in this process"), "{err}");
}

/// Receives on `rx` until `n` frames came or the timeout; checks each is `tag`-numbered in order
/// from `first`, frees them, and returns how many came.
fn receive_in_order(rx: &mut dyn rawpkt::RxQueue, got: &mut Burst, n: u64, first: u64) -> u64 {
    let (mut recv, until) = (0u64, Instant::now() + TIMEOUT);
    while recv < n && Instant::now() < until {
        if rx.rx_burst(got).unwrap() > 0 {
            for i in 0..got.len() {
                assert_eq!(common::seq_of(got.data(i)), first + recv, "frame {recv}");
                recv += 1;
            }
            got.clear();
        }
    }
    recv
}

/// One queue's RX and TX halves on one port, from `queue_pair`: one socket, so A's pair and B's
/// pair ping-pong a frame both ways on queue 0 of each port. Asking for a half of a queue whose
/// pair lives is one line naming `queue_pair`; once the pair is dropped the queue id is free
/// again, `rx_queue` alone receives and `tx_queue` alone sends.
#[test]
#[ignore = "needs root"]
fn queue_pair_is_both_halves_of_one_socket() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let pa = rawpkt::open(&format!("xdp:{},netns={}", p.a, p.ns_a)).expect("open A");
    let pb = rawpkt::open(&format!("xdp:{},netns={}", p.b, p.ns_b)).expect("open B");
    let pl = pool(8192);
    let q = QueueConfig::default();
    let (mut rx_a, mut tx_a) = pa.queue_pair(0, &pl, &q).unwrap();
    let (mut rx_b, mut tx_b) = pb.queue_pair(0, &pl, &q).unwrap();
    for e in [
        pa.rx_queue(0, &pl, &q).map(|_| ()).unwrap_err(),
        pa.tx_queue(0, &pl, &q).map(|_| ()).unwrap_err(),
        pa.queue_pair(0, &pl, &q).map(|_| ()).unwrap_err(),
    ] {
        assert!(e.kind() == rawpkt::ErrorKind::Config, "{e:?}");
        let e = e.to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        assert!(
            e.contains("queue 0 is already in use") && e.contains("Port::queue_pair"),
            "{e}"
        );
    }
    let (mut out, mut got) = (Burst::new(&pl, 32), Burst::new(&pl, 64));
    const ROUNDS: u64 = 50;
    for seq in 0..ROUNDS {
        assert!(out.push_copy(&test_frame(mac_b, mac_a, seq, 100)));
        assert_eq!(tx_a.tx_burst(&mut out).unwrap(), 1);
        assert_eq!(receive_in_order(&mut *rx_b, &mut got, 1, seq), 1, "A -> B, round {seq}");
        assert!(out.push_copy(&test_frame(mac_a, mac_b, seq, 100)));
        assert_eq!(tx_b.tx_burst(&mut out).unwrap(), 1);
        assert_eq!(receive_in_order(&mut *rx_a, &mut got, 1, seq), 1, "B -> A, round {seq}");
    }
    assert_eq!((rx_a.stats().packets, rx_b.stats().packets), (ROUNDS, ROUNDS));
    drop((rx_a, tx_a, rx_b, tx_b));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after the pairs");

    // The halves alone, on the same queue ids, now free: TX only on A, RX only on B.
    let mut tx = pa.tx_queue(0, &pl, &q).expect("queue 0 free again");
    let mut rx = pb.rx_queue(0, &pl, &q).expect("queue 0 free again");
    // An RX queue after a TX queue of the same id: the pair was the way to have both.
    let e = pa.rx_queue(0, &pl, &q).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("Port::queue_pair"), "{e}");
    for seq in 0..8 {
        assert!(out.push_copy(&test_frame(mac_b, mac_a, seq, 100)));
    }
    assert_eq!(tx.tx_burst(&mut out).unwrap(), 8);
    assert_eq!(receive_in_order(&mut *rx, &mut got, 8, 0), 8);
    drop((tx, rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// Queue ids are checked on every way of asking for a queue: past the port's queues, or taken by
/// a queue that still lives, is one line of `ErrorKind::Config`; a dropped queue frees its id.
#[test]
#[ignore = "needs root"]
fn unknown_or_taken_queue_ids_are_config_errors() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    let pb = rawpkt::open(&format!("xdp:{},netns={}", p.b, p.ns_b)).expect("open B");
    let pl = pool(8192);
    let q = QueueConfig::default();
    let check = |r: Result<(), rawpkt::Error>, want: &str| {
        let e = r.unwrap_err();
        assert!(e.kind() == rawpkt::ErrorKind::Config, "{e:?}");
        let e = e.to_string();
        assert!(!e.contains('\n') && e.contains(want), "{e}");
    };
    for qid in [1, 7, u16::MAX] {
        check(
            pb.rx_queue(qid, &pl, &q).map(|_| ()),
            &format!("queue {qid} out of range"),
        );
        check(
            pb.tx_queue(qid, &pl, &q).map(|_| ()),
            &format!("queue {qid} out of range"),
        );
        check(
            pb.queue_pair(qid, &pl, &q).map(|_| ()),
            &format!("queue {qid} out of range"),
        );
    }
    // A send budget the kernel would refuse: said, rather than left at the kernel's 32.
    let small = QueueConfig::default().xdp_tx_budget(31);
    check(
        pb.queue_pair(0, &pl, &small).map(|_| ()),
        "xdp_tx_budget 31 is below 32",
    );
    let rx = pb.rx_queue(0, &pl, &q).unwrap();
    check(pb.rx_queue(0, &pl, &q).map(|_| ()), "queue 0 is already in use");
    drop(rx);
    let tx = pb.tx_queue(0, &pl, &q).expect("freed when the RX queue went");
    check(pb.tx_queue(0, &pl, &q).map(|_| ()), "queue 0 is already in use");
    // Another thread asks for the same id: the same answer, not the kernel's EBUSY.
    let pb = std::sync::Arc::new(pb);
    let other = pb.clone();
    let e = std::thread::spawn(move || {
        other
            .rx_queue(0, &pool(4096), &QueueConfig::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    })
    .join()
    .unwrap();
    assert!(e.contains("queue 0 is already in use"), "{e}");
    drop(tx);
}

/// A caller that only calls `tx_burst` (never `reclaim`, never waiting on `in_flight`) gets every
/// frame sent and every buffer back. B's MTU is 500, so each round's burst leads with a frame veth
/// drops (the kernel answers EBUSY and holds back what follows): the ten frames behind it reach B
/// with no further call on the TX queue. Then a last burst, and the queue dropped at once: B
/// gets all of it, and the pool is full once everything is dropped.
#[test]
#[ignore = "needs root"]
fn a_sender_that_only_calls_tx_burst_gets_everything_sent_and_back() {
    assert!(is_root(), "needs root");
    let p = Pair::create();
    p.exec(&p.ns_b, &["ip", "link", "set", &p.b, "mtu", "500"]);
    let (mac_a, mac_b) = (p.mac(&p.ns_a, &p.a), p.mac(&p.ns_b, &p.b));
    let AToB {
        mut tx,
        mut rx,
        pl,
        _ports,
    } = p.a_to_b();
    let (mut out, mut got) = (Burst::new(&pl, 64), Burst::new(&pl, 64));
    const ROUNDS: u64 = 100;
    let mut seq = 0;
    for round in 0..ROUNDS {
        assert!(out.push_copy(&test_frame(mac_b, mac_a, 1 << 40, 1000)));
        for k in 0..10 {
            assert!(out.push_copy(&test_frame(mac_b, mac_a, seq + k, 100)));
        }
        while !out.is_empty() {
            tx.tx_burst(&mut out).unwrap();
        }
        assert_eq!(
            receive_in_order(&mut *rx, &mut got, 10, seq),
            10,
            "round {round}: frames behind the drop"
        );
        seq += 10;
    }
    assert_eq!(tx.stats().drops, ROUNDS, "one drop per oversized frame");
    for k in 0..48 {
        assert!(out.push_copy(&test_frame(mac_b, mac_a, seq + k, 100)));
    }
    while !out.is_empty() {
        tx.tx_burst(&mut out).unwrap();
    }
    drop(tx);
    assert_eq!(
        receive_in_order(&mut *rx, &mut got, 48, seq),
        48,
        "the last burst, queue dropped"
    );
    drop((rx, out, got));
    assert_eq!(pl.free_count(), pl.capacity(), "pool full after teardown");
}

/// pktgen between the two ends of a veth pair, `xdp:A` to `xdp:B`, on 1- and 2-queue veths with
/// one core and two: every stream, the latency stream included, arrives whole (a veth delivers
/// what is sent on its queue `q` to its peer's queue `q`, and the receiver reads every queue of
/// B). Where the load takes every send queue the latency stream shares the first and pktgen says
/// so; two cores on one queue is refused in one line. The rate is one a veth carries on a
/// loaded machine (each queue's ring holds a fifth of a second of it).
#[test]
#[ignore = "needs root"]
fn pktgen_counts_every_stream_over_veths_of_one_and_two_queues() {
    assert!(is_root(), "needs root");
    for queues in [1u32, 2] {
        let p = Pair::with_queues(queues);
        let (a, b) = (
            format!("xdp:{},netns={}", p.a, p.ns_a),
            format!("xdp:{},netns={}", p.b, p.ns_b),
        );
        for cores in [1u32, 2] {
            let what = format!("{queues} queue(s), --cores {cores}");
            let out = Command::new(common::tool("pktgen"))
                .args([
                    "--port",
                    &a,
                    "--rx-port",
                    &b,
                    "--rate",
                    "20k",
                    "--count",
                    "20000",
                    "--json",
                ])
                .args(["--cores", &cores.to_string()])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if cores > queues {
                assert_eq!(out.status.code(), Some(2), "{what}: {err}");
                let lines: Vec<&str> = err
                    .lines()
                    .filter(|l| l.starts_with("pktgen: ") && !l.starts_with("pktgen: warning"))
                    .collect();
                assert_eq!(
                    lines,
                    [format!(
                        "pktgen: --cores {cores}: {a} has {queues} send queue (each core sends on queues of its own); at most 1 core here"
                    )],
                    "{what}"
                );
                continue;
            }
            assert!(out.status.success(), "{what}: {err}");
            let s: serde_json::Value =
                serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().expect("a summary")).unwrap();
            let streams = s["streams"].as_array().unwrap();
            assert_eq!(streams.len(), 2, "{what}: the load and the latency stream: {s}");
            for t in streams {
                let tx = t["tx_packets"].as_u64().unwrap();
                assert!(tx > 0, "{what}: {t}");
                assert_eq!(
                    t["rx_packets"].as_u64(),
                    Some(tx),
                    "{what}: every frame of the stream: {t}"
                );
            }
            assert_eq!(streams[0]["tx_packets"], 20000, "{what}: {s}");
            assert_eq!(streams[1]["latency_stream"], true, "{what}: {s}");
            assert_eq!(s["lost"], 0, "{what}: {s}");
            // The load takes every send queue with one core a queue: the latency stream shares.
            let shares = queues == cores;
            assert_eq!(
                err.contains("the latency stream shares the first core's"),
                shares,
                "{what}: {err}"
            );
        }
    }
}

/// A stream of which not one frame arrives, while others do, fails the run in one line (exit 1):
/// here B's rule takes the load's UDP port only, and the latency stream's frames (one port up) go
/// to Linux.
#[test]
#[ignore = "needs root"]
fn pktgen_fails_when_a_stream_is_lost_wholesale() {
    assert!(is_root(), "needs root");
    let p = Pair::with_queues(1);
    let a = format!("xdp:{},netns={}", p.a, p.ns_a);
    let b = format!("xdp:{},netns={},rule=udp dst-port 51000", p.b, p.ns_b);
    let out = Command::new(common::tool("pktgen"))
        .args(["--port", &a, "--rx-port", &b, "--rate", "20k", "--count", "5000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // pktgen's own lines, bar the latency stream's queue (the library's say how it bound).
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("pktgen: ") && !l.contains("the latency stream shares"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("pktgen: stream latency: none of its ") && lines[0].contains("where 5000 frames"),
        "{err}"
    );
}

/// With the default rules the port takes UDP to the interface's MAC (pktgen's frames, all of
/// them) while the interface's address keeps working for Linux: ARP, IPv6 neighbour discovery,
/// ping over IPv4 and IPv6, and a TCP connection: stealing the whole MAC would take unicast ARP
/// replies, neighbour advertisements, echo requests and TCP with it, and the address would go dead.
#[test]
#[ignore = "needs root, iproute2, iputils-ping"]
fn default_rules_keep_arp_nd_ping_and_tcp() {
    assert!(is_root(), "needs root");
    const N: u64 = 10_000;
    let p = Pair::create();
    for (ns, ifn, ip6) in [(&p.ns_a, &p.a, "fd77::1/64"), (&p.ns_b, &p.b, "fd77::2/64")] {
        p.exec(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"]);
        p.exec(ns, &["sysctl", "-qw", &format!("net.ipv6.conf.{ifn}.disable_ipv6=0")]);
        run(&["ip", "-n", ns, "addr", "add", ip6, "dev", ifn, "nodad"]);
    }
    let port = rawpkt::open(&format!("xdp:{},netns={}", p.b, p.ns_b)).expect("open B with the default rules");
    let pl = pool(8192);
    let mut rx = port.rx_queue(0, &pl, &QueueConfig::default()).unwrap();
    let mac_b = p.mac(&p.ns_b, &p.b);
    let mac_text = mac_b.map(|b| format!("{b:02x}")).join(":");
    let mut server = Command::new("ip")
        .args(["netns", "exec", &p.ns_b, "python3", "-c", TCP_SERVER])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sout = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    sout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // pktgen's UDP frames to B's MAC, while Linux on B answers ARP, ND, ping and TCP.
    let pktgen = Command::new(common::tool("pktgen"))
        .args(["--port", &format!("xdp:{},netns={}", p.a, p.ns_a)])
        .args(["--dst-mac", &mac_text, "--count", &N.to_string(), "--rate", "20k"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Neighbours forgotten first, so that resolution itself is tested. Linux's side runs in
    // child processes while this thread keeps the port's queue drained.
    p.exec(&p.ns_a, &["ip", "neigh", "flush", "dev", &p.a]);
    let in_a = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &p.ns_a])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let checks = [
        ("ping", in_a(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2"])),
        (
            "ping -6",
            in_a(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fd77::2"]),
        ),
        ("TCP", in_a(&["python3", "-c", TCP_CLIENT])),
    ];
    let mut got = Burst::new(&pl, 64);
    let mut n = 0u64;
    let mut pending: Vec<_> = checks.into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (n < N || pending.iter().any(Option::is_some)) && Instant::now() < deadline {
        n += rx.rx_burst(&mut got).unwrap() as u64;
        for i in 0..got.len() {
            let f = got.data(i);
            assert_eq!((&f[0..6], f[23]), (&mac_b[..], 17), "a UDP frame to B's MAC");
        }
        got.clear();
        for slot in pending.iter_mut() {
            if let Some((_, child)) = slot.as_mut() {
                if child.try_wait().unwrap().is_some() {
                    let (what, child) = slot.take().unwrap();
                    let out = child.wait_with_output().unwrap();
                    let text = String::from_utf8_lossy(&out.stdout);
                    assert!(
                        out.status.success(),
                        "{what}: {text}{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    if what == "TCP" {
                        assert_eq!(text.trim(), "ok", "TCP to B's address");
                    }
                }
            }
        }
    }
    assert!(
        pending.iter().all(Option::is_none),
        "Linux's checks did not finish in 60 s"
    );
    let _ = server.wait();
    let out = pktgen.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The rest of pktgen's frames, and the socket's count of those it had no room for (a
    // receiver off the CPU on a busy machine): every frame was the port's, none Linux's.
    let t = Instant::now();
    while n < N && t.elapsed() < Duration::from_secs(5) {
        n += rx.rx_burst(&mut got).unwrap() as u64;
        got.clear();
    }
    let dropped = rx.stats().drops;
    assert!(n > 0 && n <= N, "{n} of pktgen's {N} frames");
    assert!(
        n + dropped >= N,
        "every pktgen frame reached the port or its socket counted it dropped: {n} + {dropped} of {N}"
    );
    drop((rx, got));
    drop(port);
}
