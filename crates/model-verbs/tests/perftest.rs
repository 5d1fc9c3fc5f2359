//! Debian's unmodified perftest on the model library: `raw_ethernet_bw --client` alone (send
//! only) on mlx5_0 wired to nothing (`RAWPKT_MODEL_WIRES=mlx5_0=null`), and server and client
//! of `raw_ethernet_bw` and `raw_ethernet_lat` in two processes, each with its own model whose
//! mlx5_0 is one end of a veth pair between two network namespaces the test creates; and side
//! by side with rawpkt over that veth: pktgen on `mlx5:` into `raw_ethernet_bw --server`,
//! `raw_ethernet_bw --client` into the rx-sink example on `mlx5:`. Asserted on the tools' own
//! result lines and, alone, on the model's trace of what the device executed.

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[test]
#[ignore = "needs root (CAP_NET_RAW for RAW_PACKET QPs) and Debian's perftest (scripts/test.sh installs it as root)"]
fn raw_ethernet_bw_client_alone_sends_every_iteration() {
    let prog = "/usr/bin/raw_ethernet_bw";
    assert!(
        std::path::Path::new(prog).exists(),
        "{prog} is missing: install perftest (apt-get install -y perftest)"
    );
    let iters = 5000;
    let trace =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("perftest-{}.trace", std::process::id()));
    let out = Command::new(prog)
        .args([
            "--client",
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "-E",
            "02:4d:4c:35:00:01",
            "-B",
            "02:4d:4c:35:00:00",
        ])
        .args(["-n", &iters.to_string()])
        .env("LD_LIBRARY_PATH", rawpkt_model_verbs::soname_dir())
        .env("RAWPKT_MODEL_TRACE", &trace)
        .env("RAWPKT_MODEL_WIRES", "mlx5_0=null")
        .output()
        .expect("running raw_ethernet_bw");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "raw_ethernet_bw failed ({}):\n{stdout}{stderr}",
        out.status
    );
    // Its only stderr lines are the MTU notice.
    for l in stderr.lines() {
        assert!(l.contains("msg size"), "raw_ethernet_bw complained: {l}\n{stderr}");
    }
    // The result row under "#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]".
    let row: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("#iterations"))
        .nth(1)
        .unwrap_or_else(|| panic!("no result row:\n{stdout}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[..2], ["1518", "5000"], "{stdout}");
    let rate: f64 = row[4].parse().unwrap();
    assert!(rate > 0.0, "MsgRate {rate}");

    // Every iteration was a SEND WQE the model executed and completed: 1514 bytes to mlx5_1's
    // MAC from mlx5_0's (18 of them inline in the Ethernet segment).
    let text = std::fs::read_to_string(&trace).expect("the model's trace");
    let _ = std::fs::remove_file(&trace);
    let wqes: Vec<&str> = text.lines().filter(|l| l.starts_with("WQE ")).collect();
    assert_eq!(wqes.len(), iters, "WQEs executed");
    for w in &wqes {
        let hex = w.rsplit(' ').next().unwrap();
        assert_eq!(&hex[6..8], "0a", "opcode SEND: {w}");
        assert_eq!(
            &hex[60..84],
            "024d4c350001024d4c350000",
            "MACs in the inline header: {w}"
        );
    }
    let cqes = text.lines().filter(|l| l.starts_with("CQE ")).count();
    assert_eq!(cqes, iters, "one completion per signalled WQE (CQ moderation 1)");
}

fn need(prog: &str) -> String {
    let path = format!("/usr/bin/{prog}");
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: install perftest (apt-get install -y perftest)"
    );
    path
}

/// Two network namespaces joined by a veth pair (pid-unique names), removed on drop.
struct Veth {
    ns: [String; 2],
    ifs: [String; 2],
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Veth {
    fn new(tag: &str) -> Veth {
        let id = std::process::id();
        let v = Veth {
            ns: [format!("pt{tag}a{id}"), format!("pt{tag}b{id}")],
            ifs: [format!("pt{tag}a{id}"), format!("pt{tag}b{id}")],
        };
        for n in &v.ns {
            ip(&["netns", "add", n]);
        }
        ip(&["link", "add", &v.ifs[0], "type", "veth", "peer", "name", &v.ifs[1]]);
        for k in 0..2 {
            ip(&["link", "set", &v.ifs[k], "netns", &v.ns[k]]);
            // No IPv6: the kernel's own neighbour and listener frames would be counted too.
            let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", v.ifs[k]);
            let out = Command::new("ip")
                .args(["netns", "exec", &v.ns[k], "sysctl", "-qw", &sysctl])
                .output()
                .expect("sysctl");
            assert!(
                out.status.success(),
                "{sysctl}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ip(&["-n", &v.ns[k], "link", "set", &v.ifs[k], "up"]);
        }
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

const SERVER_MAC: &str = "02:4d:4c:35:00:00";
const CLIENT_MAC: &str = "02:4d:4c:35:00:10";

/// Runs `prog` as server in the first namespace and as client in the second, each on mlx5_0 of
/// its own model wired to its end of the veth; the server first, until it prints `ready` (its
/// attached MAC, or the end of its banner). Returns (server, client) outputs.
fn server_and_client(prog: &str, tag: &str, ready: &str, extra: &[&str], client_extra: &[&str]) -> (Output, Output) {
    let path = need(prog);
    let v = Veth::new(tag);
    let sonames = rawpkt_model_verbs::soname_dir();
    let run = |k: usize, role: &str, mine: &str, peer: &str, more: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &v.ns[k], "timeout", "-s", "INT", "60", "stdbuf", "-oL"])
            .arg(&path)
            .args(["-d", "mlx5_0", "-i", "1", role, "-B", mine, "-E", peer])
            .args(extra)
            .args(more)
            .env("LD_LIBRARY_PATH", &sonames)
            .env("RAWPKT_MODEL_WIRES", format!("mlx5_0=afpacket:{}", v.ifs[k]))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let mut server = run(0, "--server", SERVER_MAC, CLIENT_MAC, &[]).spawn().expect("server");
    // The server prints its attached MAC once its flow is in place: read up to there, then the
    // rest through the same reader once the client is done.
    use std::io::{BufRead, BufReader, Read};
    let mut r = BufReader::new(server.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains(ready) {
        if r.read_line(&mut seen).unwrap_or(0) == 0 {
            let _ = server.kill();
            panic!("the {prog} server did not come up:\n{seen}");
        }
    }
    let client = run(1, "--client", CLIENT_MAC, SERVER_MAC, client_extra)
        .output()
        .expect("client");
    r.read_to_string(&mut seen).expect("the server's output");
    let mut server = server.wait_with_output().expect("server");
    server.stdout = seen.into_bytes();
    drop(v);
    (server, client)
}

/// Exit 0 and nothing on stderr but perftest's notices about the sizes it chose.
fn clean(out: &Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed ({}):\n{text}{err}", out.status);
    for l in err.lines() {
        assert!(
            l.contains("msg size") || l.contains("burst size"),
            "complained: {l}\n{err}"
        );
    }
}

/// The row under a perftest result header containing `header`, split into fields.
fn result_row(out: &Output, header: &str) -> Vec<String> {
    clean(out);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .skip_while(|l| !l.contains(header))
        .nth(1)
        .unwrap_or_else(|| panic!("no result row under {header:?}:\n{text}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// raw_ethernet_bw, server and client in two processes over the veth: both count every one of
/// the client's frames. The client is paced (perftest's software rate limit, 5000 frames/s):
/// the model's AF_PACKET wire drops what arrives while its thread is descheduled, and on a
/// 2-CPU machine running both models and both tools, unpaced bursts of ~20000 frames/s lose
/// some, which the server, waiting for all of them, would wait for forever.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW) and Debian's perftest (scripts/test.sh installs it as root)"]
fn raw_ethernet_bw_server_and_client_over_a_veth() {
    let (server, client) = server_and_client(
        "raw_ethernet_bw",
        "bw",
        "MAC attached",
        &["-n", "2000"],
        &["--rate_limit=5000", "--rate_units=p", "--rate_limit_type=SW"],
    );
    let c = result_row(&client, "#iterations");
    let s = result_row(&server, "#iterations");
    assert_eq!(c[..2], ["1518", "2000"], "client");
    assert_eq!(s[..2], ["1518", "2000"], "server received every frame");
    let rate: f64 = s[4].parse().unwrap();
    assert!(rate > 0.0, "server MsgRate {rate}");
}

/// raw_ethernet_lat, ping-pong between the two processes over the veth: every iteration's
/// frame goes out and its answer comes back (the client reports the latencies; the server only
/// answers, and ends when all 100 have come).
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW) and Debian's perftest (scripts/test.sh installs it as root)"]
fn raw_ethernet_lat_server_and_client_over_a_veth() {
    let (server, client) = server_and_client("raw_ethernet_lat", "lat", "MAC attached", &["-n", "100"], &[]);
    clean(&server);
    let row = result_row(&client, "t_avg");
    assert_eq!(row[..2], ["64", "100"]);
    let (min, max): (f64, f64) = (row[2].parse().unwrap(), row[3].parse().unwrap());
    assert!(0.0 < min && min <= max, "t_min {min} t_max {max}");
}

/// Builds rawpkt's pktgen and the rx-sink example (release, like the library) and returns their
/// paths.
fn rawpkt_tools() -> (std::path::PathBuf, std::path::PathBuf) {
    let lib = rawpkt_model_verbs::library_path();
    let root = rawpkt_model_verbs::workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "rawpkt-tools",
            "--bin",
            "pktgen",
            "--bin",
            "rx-sink",
        ])
        .current_dir(root)
        .output()
        .expect("cargo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = lib.parent().unwrap();
    (dir.join("pktgen"), dir.join("rx-sink"))
}

/// raw_ethernet_fs_rate, server and client over the veth: each creates and destroys 50 flows on
/// its QP and reports the rate. (The model's steering holds 64 rules per port,
/// `rawpkt_wire::matcher::MAX_RULES`; more are ENOMEM, where a ConnectX holds thousands.)
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW) and Debian's perftest (scripts/test.sh installs it as root)"]
fn raw_ethernet_fs_rate_server_and_client_over_a_veth() {
    let (server, client) = server_and_client("raw_ethernet_fs_rate", "fs", "Data ex. method", &["-n", "50"], &[]);
    for (who, out) in [("server", &server), ("client", &client)] {
        let row = result_row(out, "#flows");
        assert_eq!(row[0], "50", "{who}");
        let fps: f64 = row[5].parse().unwrap();
        assert!(fps > 0.0, "{who}: {fps} flows/s");
    }
}

/// rawpkt on `mlx5:` (its DV datapath through the model library) and unmodified perftest, one
/// in each namespace, over the veth: raw_ethernet_bw's server counts 2000 iterations of
/// pktgen's frames, and raw_ethernet_bw's client's 2000 are the rx-sink's total. pktgen sends
/// until the server has its 2000, rather than exactly 2000: the server waits for every
/// iteration, and a frame lost on a busy machine (its queue left unfilled while its process had
/// no CPU, as a NIC drops for want of buffers) would keep it, and the test, waiting for ever.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW) and Debian's perftest (scripts/test.sh installs it as root)"]
fn rawpkt_and_perftest_side_by_side_over_a_veth() {
    let bw = need("raw_ethernet_bw");
    let (pktgen, sink) = rawpkt_tools();
    let lib = rawpkt_model_verbs::library_path();
    let sonames = rawpkt_model_verbs::soname_dir();
    let v = Veth::new("sbs");
    let in_ns = |k: usize, prog: &Path| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &v.ns[k], "timeout", "-s", "INT", "60", "stdbuf", "-oL"])
            .arg(prog)
            .env("RAWPKT_MODEL_WIRES", format!("mlx5_0=afpacket:{}", v.ifs[k]))
            .env("LD_LIBRARY_PATH", &sonames)
            .env("RAWPKT_LIBIBVERBS", &lib)
            .env("RAWPKT_LIBMLX5", &lib);
        c
    };
    // The client's 2000 frames over a second: the sink's queue holds half of that.
    let pace = ["--rate_limit=2000", "--rate_units=p", "--rate_limit_type=SW"];

    // pktgen -> raw_ethernet_bw --server.
    let mut server = in_ns(0, Path::new(&bw))
        .args([
            "-d", "mlx5_0", "-i", "1", "--server", "-B", SERVER_MAC, "-E", CLIENT_MAC, "-n", "2000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("raw_ethernet_bw --server");
    use std::io::{BufRead, BufReader, Read};
    let mut r = BufReader::new(server.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("MAC attached") {
        assert!(
            r.read_line(&mut seen).unwrap_or(0) > 0,
            "the server did not come up:\n{seen}"
        );
    }
    let gen = in_ns(1, &pktgen)
        .args([
            "--port",
            "mlx5:mlx5_0/1",
            "--duration",
            "50",
            "--rate",
            "5k",
            "--dst-mac",
            SERVER_MAC,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pktgen");
    r.read_to_string(&mut seen).unwrap();
    let mut out = server.wait_with_output().unwrap();
    out.stdout = seen.into_bytes();
    // SAFETY: kill(2) on the `ip netns exec` child: SIGINT reaches timeout, which passes it on.
    unsafe { libc::kill(gen.id() as i32, libc::SIGINT) };
    let gen = gen.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&gen.stdout);
    assert!(
        gen.status.success(),
        "pktgen: {text}{}",
        String::from_utf8_lossy(&gen.stderr)
    );
    assert_eq!(
        result_row(&out, "#iterations")[..2],
        ["1518", "2000"],
        "the server counts pktgen's frames"
    );
    let sent: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary: ")?
                .split("tx ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no summary from pktgen:\n{text}"));
    assert!(sent >= 2000, "pktgen sent {sent}, the server counted 2000:\n{text}");

    // raw_ethernet_bw --client -> rx-sink, which prints its total when interrupted.
    let sink = in_ns(0, &sink)
        .arg("mlx5:mlx5_0/1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rx-sink");
    // The sink describes its port on stderr once its queue is up.
    let mut sink = sink;
    let mut e = BufReader::new(sink.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("rx-sink: mlx5_0") {
        assert!(
            e.read_line(&mut said).unwrap_or(0) > 0,
            "rx-sink did not come up:\n{said}"
        );
    }
    // IPv4/UDP frames (`-j`/`-J`, `-k`/`-K`): what a port's default rules take (the rest to its
    // MAC, raw_ethernet_bw's bare Ethernet frames among it, stays with its netdev).
    let client = in_ns(1, Path::new(&bw))
        .args([
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "--client",
            "-B",
            CLIENT_MAC,
            "-E",
            SERVER_MAC,
            "-n",
            "2000",
            "-j",
            "10.77.1.1",
            "-J",
            "10.77.1.2",
            "-k",
            "5000",
            "-K",
            "5001",
        ])
        .args(pace)
        .output()
        .expect("raw_ethernet_bw --client");
    assert_eq!(result_row(&client, "#iterations")[..2], ["1518", "2000"]);
    // SAFETY: kill(2) on the `ip netns exec` child: SIGINT reaches timeout, which passes it on.
    unsafe { libc::kill(sink.id() as i32, libc::SIGINT) };
    let sunk = sink.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&sunk.stdout);
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("total "))
        .unwrap_or_else(|| panic!("no total from rx-sink:\n{text}{said}"));
    let f: Vec<&str> = total.split_whitespace().collect();
    assert_eq!((f[0], f[2]), ("2000", "3028000"), "rx-sink: {total}");
}
