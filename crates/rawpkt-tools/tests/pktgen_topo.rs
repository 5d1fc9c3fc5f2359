//! pktgen's rates and topologies as a user gives them: bit rates and percentages of the line
//! rate, bidirectional runs, several port pairs, and L3 mode (`--gateway`) on veths.

use rawpkt_test_support as common;

use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One pktgen at a time: each runs model NIC threads and busy cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn pktgen(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pktgen runs");
    common::output_within(child, Duration::from_secs(60), &format!("pktgen {args:?}"))
}

fn lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "pktgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Every direction's summary is its own, with its own streams' counts adding up to its port
/// counts, nothing lost; the total line adds the directions up.
fn check_directions(lines: &[serde_json::Value], want: &[(&str, &str)], load: u64) {
    let summaries = of_type(lines, "summary");
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["direction"].as_str().expect("direction"))
        .collect();
    let want_names: Vec<String> = want.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
    assert_eq!(names, want_names, "one summary per direction, in order");
    let (mut tx, mut rx) = (0, 0);
    for s in &summaries {
        let streams = s["streams"].as_array().expect("streams");
        assert_eq!(streams[0]["name"], "load");
        assert_eq!(u(&streams[0], "tx_packets"), load, "{s}");
        let sum = |k: &str| streams.iter().map(|t| u(t, k)).sum::<u64>();
        assert_eq!(u(s, "tx_packets"), sum("tx_packets"), "{s}");
        assert_eq!(u(s, "rx_packets"), sum("rx_packets"), "{s}");
        assert_eq!(u(s, "rx_packets"), u(s, "tx_packets"), "{s}");
        assert_eq!(u(s, "lost"), 0, "{s}");
        tx += u(s, "tx_packets");
        rx += u(s, "rx_packets");
    }
    // Per-second lines name their direction, and add up to at most its total.
    for (s, name) in summaries.iter().zip(&want_names) {
        let per_second: u64 = of_type(lines, "interval")
            .iter()
            .filter(|l| l["direction"] == name.as_str())
            .map(|l| u(l, "tx_packets"))
            .sum();
        assert!(
            per_second <= u(s, "tx_packets"),
            "{name}: {per_second} in the per-second lines"
        );
    }
    assert!(of_type(lines, "interval").iter().all(|l| l["direction"].is_string()));
    let total = of_type(lines, "total");
    assert_eq!(total.len(), 1, "one total line");
    let t = total[0];
    assert_eq!(lines.last(), Some(t), "the total comes last");
    assert_eq!(
        (u(t, "directions"), u(t, "tx_packets"), u(t, "rx_packets"), u(t, "lost")),
        (want.len() as u64, tx, rx, 0),
        "{t}"
    );
}

#[test]
fn a_bidirectional_run_counts_each_direction_apart_and_they_add_up() {
    let _one = serial();
    let out = pktgen(&[
        "--port",
        "model:bidir/0",
        "--rx-port",
        "model:bidir/1",
        "--bidir",
        "--count",
        "20000",
        "--rate",
        "50k",
        "--json",
    ]);
    check_directions(
        &lines(&out),
        &[("model:bidir/0", "model:bidir/1"), ("model:bidir/1", "model:bidir/0")],
        20000,
    );
}

#[test]
fn two_port_pairs_count_each_direction_apart_and_they_add_up() {
    let _one = serial();
    let out = pktgen(&[
        "--port",
        "model:pairs-a/0",
        "--rx-port",
        "model:pairs-a/1",
        "--port",
        "model:pairs-b/1",
        "--rx-port",
        "model:pairs-b/0",
        "--count",
        "20000",
        "--rate",
        "50k",
        "--json",
    ]);
    check_directions(
        &lines(&out),
        &[
            ("model:pairs-a/0", "model:pairs-a/1"),
            ("model:pairs-b/1", "model:pairs-b/0"),
        ],
        20000,
    );
    // And as text: a summary per direction, named, and the total.
    let out = pktgen(&[
        "--port",
        "model:pairs-t/0",
        "--rx-port",
        "model:pairs-t/1",
        "--bidir",
        "--count",
        "1000",
        "--rate",
        "50k",
        "--latency-rate",
        "off",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "summary model:pairs-t/0 -> model:pairs-t/1: ",
        "summary model:pairs-t/1 -> model:pairs-t/0: ",
        "total: 2 directions  tx 2000 packets, rx 2000 packets, lost 0",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}

/// The rate pktgen says it turned a rate into, in packets per second.
fn said_pps(out: &Output) -> f64 {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("packets per second of"))
        .unwrap_or_else(|| panic!("no rate line in: {err}"));
    let n = line
        .split(" is ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .expect("a number");
    n.parse().unwrap_or_else(|e| panic!("{n}: {e} in {line}"))
}

/// `--rate 50%` and `--rate 2Gbps` on a model port (100 Gb/s) become the packets per second
/// they name, exactly, and the sender never goes faster.
#[test]
fn bit_rates_and_percentages_give_the_rate_they_name() {
    let _one = serial();
    for (rate, size, pps) in [
        // 50 Gbit/s of 1538 bytes on the wire (1514 + FCS, preamble, SFD, gap).
        ("50%", "1514", 50e9 / (1538.0 * 8.0_f64)),
        // 2 Gbit/s of 84 bytes on the wire.
        ("2Gbps", "60", 2e9 / (84.0 * 8.0)),
        // At L2, frame and FCS only.
        ("2Gbps-l2", "60", 2e9 / (64.0 * 8.0)),
        // Slow enough to reach on any machine: 0.05% of 100 Gbit/s, 1514-byte frames.
        ("0.05%", "1514", 50e6 / (1538.0 * 8.0)),
        ("20Mbps", "60", 20e6 / (84.0 * 8.0)),
    ] {
        let out = pktgen(&[
            "--port",
            "model:rates/0",
            "--rate",
            rate,
            "--size",
            size,
            "--duration",
            "1",
            "--json",
        ]);
        let said = said_pps(&out);
        assert_eq!(said, pps.round(), "--rate {rate} of {size}-byte frames");
        let s = of_type(&lines(&out), "summary")[0].clone();
        let (sent, secs) = (u(&s, "tx_packets") as f64, s["seconds"].as_f64().expect("seconds"));
        // Never faster than asked (a burst of 32 of slack, seconds has 3 decimals); and where
        // the rate is low enough for any machine, not far below it.
        assert!(
            sent <= pps * (secs + 0.001) + 32.0,
            "--rate {rate}: {sent} in {secs} s: {s}"
        );
        if pps < 50_000.0 {
            assert!(sent >= pps * secs * 0.5, "--rate {rate}: {sent} in {secs} s: {s}");
        }
    }
}

#[test]
fn topology_and_rate_mistakes_are_one_line_and_exit_2() {
    let _one = serial();
    for (args, want) in [
        (
            &["--port", "model:m/0", "--gateway", "10.0.0.9"][..],
            "has no Linux netdev",
        ),
        (
            &["--gateway", "10.0.0.9", "--dst-mac", "02:00:00:00:00:09"],
            "--gateway and --dst-mac",
        ),
        (
            &["--port", "model:m/0", "--port", "model:m/1", "--rx-port", "model:n/0"],
            "one --rx-port per --port",
        ),
        (&["--port", "model:m/0", "--bidir"], "--bidir needs --rx-port"),
        (
            &[
                "--port",
                "model:m/0",
                "--rx-port",
                "model:m/1",
                "--port",
                "model:m/0",
                "--rx-port",
                "model:n/1",
            ],
            "sends in two directions",
        ),
        (
            &["--bidir", "--control", "127.0.0.1:0"],
            "--control takes one direction",
        ),
        (&["--bidir", "--search"], "--search measures one direction"),
        (&["--rate", "2Xbps"], "a bit rate on the wire"),
        (&["--rate", "150%"], "from above 0 to 100"),
        (&["--rate", "1Mpps-l2"], "expected packets per second"),
    ] {
        let out = pktgen(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let err = err.trim_end();
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("pktgen:")).count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// Two namespaces joined by a veth: `g` (10.77.0.1/24) where pktgen sends, and `p`
/// (10.77.0.2/24, MAC [`PEER_MAC`]) where the kernel answers ARP and pktgen receives. IPv6 off so
/// that nothing else is sent. Dropping it deletes the namespaces, and with them the veth.
struct Pair {
    gen_ns: String,
    peer_ns: String,
    gen: String,
    peer: String,
}

const PEER_MAC: &str = "02:77:00:00:00:02";

impl Pair {
    fn create() -> Pair {
        let id = std::process::id();
        let t = Pair {
            gen_ns: format!("rpl3g{id}"),
            peer_ns: format!("rpl3p{id}"),
            gen: format!("l3g{id}"),
            peer: format!("l3p{id}"),
        };
        t.remove(); // left over by a killed run of a process with the same pid
        for ns in [&t.gen_ns, &t.peer_ns] {
            common::run(&["ip", "netns", "add", ns]);
            common::run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ]);
            common::run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        common::run(&[
            "ip",
            "link",
            "add",
            &t.gen,
            "netns",
            &t.gen_ns,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "type",
            "veth",
            "peer",
            "name",
            &t.peer,
            "netns",
            &t.peer_ns,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
        ]);
        common::run(&["ip", "-n", &t.peer_ns, "link", "set", &t.peer, "address", PEER_MAC]);
        for (ns, ifn, addr) in [
            (&t.gen_ns, &t.gen, "10.77.0.1/24"),
            (&t.peer_ns, &t.peer, "10.77.0.2/24"),
        ] {
            common::run(&["ip", "-n", ns, "addr", "add", addr, "dev", ifn]);
            common::run(&["ip", "-n", ns, "link", "set", ifn, "up"]);
        }
        t
    }

    fn remove(&self) {
        for ns in [&self.gen_ns, &self.peer_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.remove();
    }
}

/// L3 mode: the gateway's MAC comes from the sending netdev's neighbour table, which pktgen has
/// the kernel fill (ARP) first: every frame carries that MAC. A gateway that never answers is
/// one line and exit 1, within the bounded wait.
#[test]
#[ignore = "needs root"]
fn gateway_frames_carry_the_neighbours_mac() {
    assert!(common::is_root(), "needs root (namespaces, veths, XDP)");
    let _one = serial();
    let t = Pair::create();
    let cap = std::env::temp_dir().join(format!("rawpkt-l3-{}.pcap", std::process::id()));
    let tx = format!("xdp:{},netns={}", t.gen, t.gen_ns);
    let rx = format!("xdp:{},netns={}", t.peer, t.peer_ns);
    let out = pktgen(&[
        "--port",
        &tx,
        "--rx-port",
        &rx,
        "--gateway",
        "10.77.0.2",
        "--src-ip",
        "10.77.0.1",
        "--dst-ip",
        "198.51.100.1",
        "--count",
        "2000",
        "--rate",
        "20k",
        "--latency-rate",
        "off",
        "--capture",
        cap.to_str().expect("utf-8 path"),
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let s = of_type(&lines(&out), "summary")[0].clone();
    assert!(err.contains(&format!("sends to {PEER_MAC}")), "{err}");
    let frames = rawpkt_tools::pcap::Reader::open(&cap).expect("the capture reads");
    let _ = std::fs::remove_file(&cap);
    assert_eq!(frames.len() as u64, u(&s, "rx_packets"), "{s}");
    assert!(u(&s, "rx_packets") > 0, "{s}");
    let want = common::mac_of(PEER_MAC);
    for (_, f) in frames.iter() {
        assert_eq!(f[..6], want, "destination MAC");
    }
    // The kernel's entry is the one pktgen read.
    let neigh = common::run(&["ip", "-n", &t.gen_ns, "neigh", "show", "10.77.0.2", "dev", &t.gen]);
    assert!(neigh.contains(PEER_MAC), "{neigh}");

    // An xdp: port does not both send and receive: one line, exit 2.
    let out = pktgen(&["--port", &tx, "--rx-port", &rx, "--bidir", "--count", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("both sending and receiving is not supported"), "{err}");

    // Nobody at 10.77.0.99: no answer, said in one line, exit 1, within the wait and a margin.
    let started = Instant::now();
    let out = pktgen(&["--port", &tx, "--gateway", "10.77.0.99", "--count", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--gateway 10.77.0.99") && err.contains("did not answer"),
        "{err}"
    );
    assert_eq!(
        err.trim_end().lines().filter(|l| l.starts_with("pktgen:")).count(),
        1,
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

/// L3 mode on an `mlx5:` port of the model library (`crates/model-verbs/`), whose `mlx5_0` names
/// the netdev `mdl0`: pktgen runs in a namespace where `mdl0` is a veth, and its peer, in another
/// namespace, answers ARP for the gateway. The frames go out on the model's wire to `mlx5_1`,
/// which takes frames to its own MAC: with the gateway's MAC set to that one, every frame
/// arrives and carries it; with another MAC, the frames carry that one, and none arrives.
#[test]
#[ignore = "needs root"]
fn gateway_on_an_mlx5_port_takes_its_netdevs_neighbour() {
    assert!(common::is_root(), "needs root (namespaces, veths)");
    let _one = serial();
    let lib = common::model_verbs_lib();
    let id = std::process::id();
    let (ns, peer_ns, peer) = (format!("rpl3m{id}"), format!("rpl3n{id}"), format!("l3n{id}"));
    struct Gone<'a>(&'a [&'a String]);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            for ns in self.0 {
                let _ = Command::new("ip")
                    .args(["netns", "del", ns])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
    let names = [&ns, &peer_ns];
    let _gone = Gone(&names);
    for (peer_mac, arrives) in [("02:4d:4c:35:00:01", true), ("02:78:00:00:00:02", false)] {
        for n in names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
            common::run(&["ip", "netns", "add", n]);
            common::run(&[
                "ip",
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]);
        }
        common::run(&[
            "ip", "-n", &ns, "link", "add", "name", "mdl0", "type", "veth", "peer", "name", &peer, "netns", &peer_ns,
        ]);
        common::run(&["ip", "-n", &peer_ns, "link", "set", &peer, "address", peer_mac]);
        common::run(&["ip", "-n", &ns, "addr", "add", "10.78.0.1/24", "dev", "mdl0"]);
        common::run(&["ip", "-n", &peer_ns, "addr", "add", "10.78.0.2/24", "dev", &peer]);
        common::run(&["ip", "-n", &ns, "link", "set", "mdl0", "up"]);
        common::run(&["ip", "-n", &peer_ns, "link", "set", &peer, "up"]);
        let cap = std::env::temp_dir().join(format!("rawpkt-l3m-{id}.pcap"));
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_pktgen")])
            .args([
                "--port",
                "mlx5:mlx5_0/1",
                "--rx-port",
                "mlx5:mlx5_1/1",
                "--gateway",
                "10.78.0.2",
                "--count",
                "2000",
                "--rate",
                "20k",
                "--latency-rate",
                "off",
                "--json",
                "--capture",
                cap.to_str().expect("utf-8 path"),
            ])
            .env("RAWPKT_LIBIBVERBS", lib)
            .env("RAWPKT_LIBMLX5", lib)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pktgen runs");
        let out = common::output_within(child, Duration::from_secs(60), "pktgen --gateway on mlx5:");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(err.contains(&format!("mlx5:mlx5_0/1 sends to {peer_mac}")), "{err}");
        let frames = rawpkt_tools::pcap::Reader::open(&cap).expect("the capture reads");
        let _ = std::fs::remove_file(&cap);
        if arrives {
            let s = of_type(&lines(&out), "summary")[0].clone();
            assert_eq!((u(&s, "tx_packets"), u(&s, "rx_packets")), (2000, 2000), "{s}");
            assert_eq!(frames.len(), 2000);
            let want = common::mac_of(peer_mac);
            assert!(frames.iter().all(|(_, f)| f[..6] == want), "every frame to {peer_mac}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains(&format!("they were addressed to {peer_mac}")), "{err}");
            assert_eq!(frames.len(), 0);
        }
    }
}

/// An IPv6 gateway is found by neighbour discovery, the same way (`NTF_USE` on an AF_INET6 entry).
#[test]
#[ignore = "needs root"]
fn gateway_resolves_an_ipv6_neighbour() {
    assert!(common::is_root(), "needs root (namespaces, veths, XDP)");
    let _one = serial();
    let id = std::process::id();
    let (a, b, g, p) = (
        format!("rpl36a{id}"),
        format!("rpl36b{id}"),
        format!("g6{id}"),
        format!("p6{id}"),
    );
    struct Gone<'a>(&'a [&'a String]);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            for ns in self.0 {
                let _ = Command::new("ip")
                    .args(["netns", "del", ns])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
    let names = [&a, &b];
    let _gone = Gone(&names);
    for n in names {
        let _ = Command::new("ip")
            .args(["netns", "del", n])
            .stderr(Stdio::null())
            .status();
        common::run(&["ip", "netns", "add", n]);
    }
    common::run(&[
        "ip", "-n", &a, "link", "add", "name", &g, "type", "veth", "peer", "name", &p, "netns", &b,
    ]);
    common::run(&["ip", "-n", &b, "link", "set", &p, "address", "02:66:00:00:00:02"]);
    // No duplicate address detection: the addresses are usable at once.
    common::run(&["ip", "-n", &a, "addr", "add", "fd77::1/64", "dev", &g, "nodad"]);
    common::run(&["ip", "-n", &b, "addr", "add", "fd77::2/64", "dev", &p, "nodad"]);
    common::run(&["ip", "-n", &a, "link", "set", &g, "up"]);
    common::run(&["ip", "-n", &b, "link", "set", &p, "up"]);
    let out = pktgen(&[
        "--port",
        &format!("xdp:{g},netns={a}"),
        "--gateway",
        "fd77::2",
        "--src-ip",
        "fd77::1",
        "--dst-ip",
        "2001:db8::9",
        "--count",
        "100",
        "--latency-rate",
        "off",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let s = of_type(&lines(&out), "summary")[0].clone();
    assert_eq!(u(&s, "tx_packets"), 100, "{s}");
    assert!(err.contains("sends to 02:66:00:00:00:02"), "{err}");
}

/// A stream file's rates take the same forms, each stream's converted by its own frame size.
#[test]
fn stream_file_rates_take_bits_and_percentages() {
    let _one = serial();
    let f = std::env::temp_dir().join(format!("rawpkt-topo-streams-{}.toml", std::process::id()));
    std::fs::write(
        &f,
        "[[stream]]\nname = \"bits\"\nsize = 60\nrate = \"10Mbps\"\n\n[[stream]]\nname = \"pct\"\nsize = 1514\nrate = \"0.01%\"\n\n[[stream]]\nname = \"l2\"\nsize = 124\nrate = \"1Mbps-l2\"\n",
    )
    .expect("write the stream file");
    let out = pktgen(&[
        "--port",
        "model:srates/0",
        "--streams",
        f.to_str().expect("utf-8 path"),
        "--duration",
        "0.5",
        "--json",
    ]);
    let _ = std::fs::remove_file(&f);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    for (name, pps) in [
        ("bits", 10e6 / (84.0 * 8.0_f64)),
        ("pct", 10e6 / (1538.0 * 8.0)),
        ("l2", 1e6 / (128.0 * 8.0)),
    ] {
        let want = format!("stream {name}: rate ");
        let line = err
            .lines()
            .find(|l| l.contains(&want))
            .unwrap_or_else(|| panic!("{want:?} not in {err}"));
        assert!(
            line.contains(&format!(" is {} packets per second", pps.round())),
            "{line}"
        );
    }
    let s = of_type(&lines(&out), "summary")[0].clone();
    let secs = s["seconds"].as_f64().expect("seconds");
    for (t, pps) in s["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .zip([14881.0, 813.0, 977.0])
    {
        let sent = u(t, "tx_packets") as f64;
        assert!(sent <= pps * (secs + 0.001) + 32.0, "{t}");
    }
}
