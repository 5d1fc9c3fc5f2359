//! The pktgen binary as a user runs it, on the built-in model pair.

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// One pktgen at a time: each runs a model NIC thread and busy cores, and several at once on a
/// small machine would starve each other into real (and correctly counted) drops.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn pktgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(args)
        .output()
        .expect("pktgen runs")
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn summary(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "pktgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(out);
    let s = lines.last().expect("output").clone();
    assert_eq!(s["type"], "summary");
    s
}

#[test]
fn json_counts_match_what_the_receiver_saw_and_latency_is_ordered() {
    let _one = serial();
    let out = pktgen(&["--count", "200000", "--json", "--flows", "16", "--size", "imix"]);
    let s = summary(&out);
    assert_eq!(s["tx_packets"], 200_000);
    assert_eq!(s["rx_packets"], s["tx_packets"], "{s}");
    assert_eq!(s["rx_bytes"], s["tx_bytes"]);
    assert_eq!(s["lost"], 0);
    // Drops and errors apart, as each interval line has them.
    assert_eq!(
        (s["tx_drops"].as_u64(), s["tx_errors"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let lat = &s["latency_ns"];
    assert_eq!(lat["samples"], 200_000);
    let q: Vec<u64> = ["min", "p50", "p99", "p999", "max"]
        .iter()
        .map(|k| lat[k].as_u64().expect(k))
        .collect();
    assert!(
        q.windows(2).all(|w| w[0] <= w[1]) && q[0] > 0,
        "percentiles out of order: {q:?}"
    );
    // Interval lines come before the summary and add up to at most the total.
    let lines = json_lines(&out);
    let per_second: u64 = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .map(|l| l["tx_packets"].as_u64().unwrap())
        .sum();
    assert!(per_second <= 200_000);
}

#[test]
fn ipv6_frames_go_through_with_the_checksum_offloaded() {
    let _one = serial();
    let s = summary(&pktgen(&[
        "--count", "50000", "--json", "--src-ip", "fd00::1", "--dst-ip", "fd00::2", "--size", "128",
    ]));
    assert_eq!(
        (s["tx_packets"].as_u64(), s["rx_packets"].as_u64()),
        (Some(50_000), Some(50_000))
    );
}

#[test]
#[ignore = "needs tshark"]
fn capture_is_a_pcap_that_tshark_reads_with_the_right_count() {
    let _one = serial();
    let path = std::env::temp_dir().join(format!("pktgen-capture-{}.pcap", std::process::id()));
    let p = path.to_str().unwrap();
    let s = summary(&pktgen(&["--count", "5000", "--json", "--capture", p]));
    let tshark = Command::new("tshark")
        .args(["-r", p, "-T", "fields", "-e", "frame.len"])
        .output();
    std::fs::remove_file(&path).ok();
    let tshark = tshark.expect("tshark is not installed: apt-get install -y tshark");
    assert!(tshark.status.success(), "{}", String::from_utf8_lossy(&tshark.stderr));
    let lens: Vec<String> = String::from_utf8_lossy(&tshark.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lens.len() as u64, s["rx_packets"].as_u64().unwrap());
    assert!(lens.iter().all(|l| l == "60"), "every frame 60 bytes");
}

#[test]
fn a_pcap_is_replayed_frame_for_frame() {
    let _one = serial();
    let dir = std::env::temp_dir();
    let input = dir.join(format!("pktgen-replay-in-{}.pcap", std::process::id()));
    let output = dir.join(format!("pktgen-replay-out-{}.pcap", std::process::id()));
    let frames: Vec<Vec<u8>> = (0..3u8)
        .map(|k| {
            let mut f = Vec::new();
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4([10, 1, 0, k], [10, 2, 0, 1], 64)
                .udp(1000 + u16::from(k), 2000)
                .write(&mut f, &vec![k; 40 + 100 * usize::from(k)])
                .unwrap();
            f
        })
        .collect();
    let mut w = rawpkt::pcap::Writer::create(&input).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(i as u64 * 1000, f).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let s = summary(&pktgen(&[
        "--pcap",
        input.to_str().unwrap(),
        "--count",
        "30",
        "--json",
        "--capture",
        output.to_str().unwrap(),
    ]));
    let got = rawpkt::pcap::Reader::open(&output).unwrap().frames();
    std::fs::remove_file(&input).ok();
    std::fs::remove_file(&output).ok();
    assert_eq!(s["rx_packets"], 30);
    let want: Vec<Vec<u8>> = (0..30).map(|i| frames[i % 3].clone()).collect();
    assert_eq!(got, want);
    assert!(s.get("latency_ns").is_none(), "replayed frames carry no stamp");
}

/// Runs pktgen with `args` and checks that it fails with `code` and one line on stderr (bar the
/// pool's hugepage warning) that names the problem.
fn fails_with(code: i32, args: &[&str], want: &str) {
    let out = pktgen(args);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("rawpkt: warning")).collect();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    assert!(
        lines[0].starts_with("pktgen: ") && lines[0].contains(want),
        "{args:?}: {want:?} not in {err}"
    );
}

#[test]
fn usage_mistakes_are_one_line_and_exit_2() {
    let _one = serial();
    for (args, want) in [
        (&["--size", "20"][..], "from 60 to 1514"),
        (
            &["--port", "bogus:x"],
            "--port bogus:x: bad port spec: unknown port kind",
        ),
        (
            &["--port", "model:x/0", "--rx-port", "model:x/7"],
            "--rx-port model:x/7: bad port spec",
        ),
        // rawpkt's Error::Config, found on opening the port: lo has one queue.
        (&["--port", "xdp:lo/7"], "queue 7 out of range"),
        (
            &["--port", "model:x/0", "--capture", "x.pcap"],
            "--capture needs --rx-port",
        ),
        (&["--rate", "0"], "at least 1 packet per second"),
        (&["--count", "1", "--rate", "1e-300"], "at least 1 packet per second"),
        (&["--dst-mac", "0:0:0:0:0:+1"], "six hex bytes"),
        (&["--cores", "4096"], "CPUs"),
        (&["--count", "many"], "invalid value"),
        (&["--bogus"], "--bogus"),
    ] {
        fails_with(2, args, want);
    }
}

#[test]
fn failures_of_the_system_are_one_line_and_exit_1() {
    let _one = serial();
    for (args, want) in [
        (&["--pcap", "/nonexistent/x.pcap"][..], "x.pcap"),
        (&["--capture", "/nonexistent/dir/out.pcap", "--count", "10"], "out.pcap"),
        // rawpkt's Error::Device: the spec is well formed, the machine has no such interface.
        (&["--port", "xdp:rpxcnone0"], "--port xdp:rpxcnone0: device error"),
    ] {
        fails_with(1, args, want);
    }
}

#[test]
fn ctrl_c_prints_the_summary_and_exits_cleanly() {
    let _one = serial();
    let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let s = summary(&out);
    assert!(s["tx_packets"].as_u64().unwrap() > 0);
    assert_eq!(s["lost"], 0, "the receiver drained what was sent before stopping: {s}");
}

#[test]
fn rate_is_held_to_one_percent_at_one_mpps() {
    let _one = serial();
    let s = summary(&pktgen(&[
        "--port",
        "model:rate0/0",
        "--rate",
        "1M",
        "--duration",
        "2",
        "--json",
    ]));
    let mpps = s["tx_mpps"].as_f64().expect("tx_mpps");
    assert!((0.99..=1.01).contains(&mpps), "--rate 1M sent {mpps} Mpps: {s}");
}
