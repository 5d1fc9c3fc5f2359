//! The pktgen binary as a user runs it, on the built-in model pair.

use rawpkt_test_support as common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One pktgen at a time: each runs a model NIC thread and busy cores, and several at once on a
/// small machine would starve each other into real (and correctly counted) drops.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs pktgen to its end; one still running after a minute is killed and fails the test.
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
    // The load is stream 0; the latency stream (on by default with a receive port) is beside it,
    // and the port counts both.
    assert_eq!(s["streams"][0]["tx_packets"], 200_000);
    assert_eq!(s["streams"][1]["latency_stream"], true);
    let sum = |k: &str| {
        s["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t[k].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(s["tx_packets"].as_u64(), Some(sum("tx_packets")), "{s}");
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
    assert_eq!(lat["samples"], s["rx_packets"]);
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
    assert!(per_second <= s["tx_packets"].as_u64().unwrap());
}

#[test]
fn ipv6_frames_go_through_with_the_checksum_offloaded() {
    let _one = serial();
    let s = summary(&pktgen(&[
        "--count", "50000", "--json", "--src-ip", "fd00::1", "--dst-ip", "fd00::2", "--size", "128",
    ]));
    let load = &s["streams"][0];
    assert_eq!(
        (load["tx_packets"].as_u64(), load["rx_packets"].as_u64()),
        (Some(50_000), Some(50_000))
    );
    assert_eq!(s["rx_packets"], s["tx_packets"], "{s}");
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
    let mut w = rawpkt_tools::pcap::Writer::create(&input).unwrap();
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
    let got = rawpkt_tools::pcap::Reader::open(&output).unwrap().frames();
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
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("rawpkt: warning") && !l.starts_with("pktgen: warning"))
        .collect();
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
        // rawpkt's ErrorKind::Config, found on opening the port: lo has one queue.
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
        (
            &["--port", "model:hw-a/0", "--rx-port", "model:hw-b/1", "--hw-timestamps"],
            "not on one device clock",
        ),
        (&["--port", "model:x/0", "--hw-timestamps"], "--hw-timestamps measures"),
        (&["--bogus"], "--bogus"),
        (&["--queues-per-core", "9"], "--queues-per-core 9: must be from 1 to 8"),
        (&["--queues-per-core", "0"], "--queues-per-core 0: must be from 1 to 8"),
        (
            &["--port", "model:x/0,profile=cx9"],
            "model profile \"cx9\": no such profile",
        ),
        (
            &["--port", "model:x/0,knob=wqe_id=maybe"],
            "expected wqe_id=counter|ring",
        ),
    ] {
        fails_with(2, args, want);
    }
    // The same from the environment (RAWPKT_MODEL_PROFILE, RAWPKT_MODEL_KNOBS).
    for (var, value, want) in [
        (
            "RAWPKT_MODEL_PROFILE",
            "cx9",
            "no such profile (profiles: default, cx5, cx6dx, cx7, strict)",
        ),
        (
            "RAWPKT_MODEL_KNOBS",
            "zip=sometimes",
            "expected zip=regular|irregular:SEED|never",
        ),
    ] {
        let out = Command::new(common::tool("pktgen"))
            .env(var, value)
            .args(["--count", "10"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.lines().count() == 1 && err.contains(want), "{var}={value}: {err}");
    }
}

#[test]
fn failures_of_the_system_are_one_line_and_exit_1() {
    let _one = serial();
    for (args, want) in [
        (&["--pcap", "/nonexistent/x.pcap"][..], "x.pcap"),
        (&["--capture", "/nonexistent/dir/out.pcap", "--count", "10"], "out.pcap"),
        // rawpkt's ErrorKind::Device: the spec is well formed, the machine has no such interface.
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

#[test]
fn send_queues_per_core_follow_the_rate_and_the_device_and_are_said() {
    let _one = serial();
    // A model port is a ConnectX-5 with enhanced multi-packet send: about 50 Mpps a send queue
    // (`sendq::EMPW`). The count stops each run long before the rate would matter.
    let run = |extra: &[&str]| {
        let mut args = vec!["--port", "model:sq0/0", "--count", "20000", "--json"];
        args.extend_from_slice(extra);
        let out = pktgen(&args);
        let s = summary(&out);
        let said: Vec<String> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("send queue"))
            .map(String::from)
            .collect();
        (
            s["send_queues_per_core"].as_u64().expect("send_queues_per_core"),
            said,
            s,
        )
    };
    // 120 Mpps on one core: three queues, said in one line.
    let (n, said, s) = run(&["--rate", "120M"]);
    assert_eq!(n, 3, "{said:?}");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("120.0 Mpps per core")
            && said[0].contains("model:sq0/0")
            && said[0].contains("about 50 Mpps a queue")
            && said[0].contains("each core sends on 3 queues"),
        "{said:?}"
    );
    assert_eq!(s["tx_packets"], 20000, "{s}");
    // Spread over two cores where there are two, each core's share decides.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        let (n, said, _) = run(&["--rate", "120M", "--cores", "2"]);
        assert_eq!(n, 2, "{said:?}");
        assert!(said.iter().any(|l| l.contains("60.0 Mpps per core")), "{said:?}");
    }
    // A rate one queue takes, or none at all: one queue, nothing said.
    for extra in [&["--rate", "1M"][..], &[]] {
        let (n, said, _) = run(extra);
        assert_eq!((n, said.len()), (1, 0), "{extra:?}: {said:?}");
    }
    // The user's choice stands; falling short of the rate is said.
    let (n, said, _) = run(&["--rate", "120M", "--queues-per-core", "1"]);
    assert_eq!(n, 1);
    assert!(
        said.len() == 1 && said[0].contains("--queues-per-core 1") && said[0].contains("needs 3 send queues"),
        "{said:?}"
    );
    let (n, said, _) = run(&["--queues-per-core", "4"]);
    assert_eq!((n, said.len()), (4, 0), "{said:?}");
}

/// The device's kind of send WQE sets the ceiling: through the model library (rdma-core's ABI),
/// an mlx5 port whose vport asks for L2 headers inline (a ConnectX-4's) posts a SEND per packet,
/// 16 Mpps a queue; the same port without (a ConnectX-5) uses eMPW, 50 Mpps a queue; the
/// ibverbs datapath posts SENDs.
#[test]
fn the_send_queue_ceiling_follows_the_devices_send_wqes() {
    let _one = serial();
    let lib = common::model_verbs_lib();
    for (port, want, ceiling) in [
        ("mlx5:mlx5_0/1,inline=l2", 2, "about 16 Mpps a queue"),
        ("mlx5:mlx5_0/1", 1, ""),
        ("verbs:mlx5_0/1", 2, "about 16 Mpps a queue"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pktgen"))
            .env("RAWPKT_LIBIBVERBS", lib)
            .env("RAWPKT_LIBMLX5", lib)
            .args(["--port", port, "--rate", "20M", "--count", "2000", "--json"])
            .stdin(Stdio::null())
            .output()
            .expect("pktgen runs");
        let s = summary(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(s["send_queues_per_core"], want, "{port}: {err}");
        assert_eq!(s["tx_packets"], 2000, "{port}: {s}");
        if want > 1 {
            assert!(
                err.contains(ceiling) && err.contains("each core sends on 2 queues"),
                "{port}: {err}"
            );
        } else {
            assert!(!err.contains("send queue"), "{port}: {err}");
        }
    }
}

/// A path under the temp dir, unique per process and test, removed when the test ends.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> TempPath {
        let p = std::env::temp_dir().join(format!("pktgen-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPath(p)
    }

    fn fifo(tag: &str) -> TempPath {
        let t = TempPath::new(tag);
        common::run(&["mkfifo", t.str()]);
        t
    }

    fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `--pcap` reads only regular files, and only as much as it can replay: `/dev/zero` grew
/// without bound, a FIFO with no writer blocked without a word.
#[test]
fn pcap_takes_only_a_regular_file_it_can_replay() {
    let _one = serial();
    fails_with(
        1,
        &["--pcap", "/dev/zero"],
        "--pcap /dev/zero: is a character device, not a regular file",
    );
    let fifo = TempPath::fifo("in.fifo");
    fails_with(
        1,
        &["--pcap", fifo.str()],
        &format!("--pcap {}: is a FIFO, not a regular file", fifo.str()),
    );
    // One byte over what a replay can use (65535 frames of 1514 bytes), sparse: a valid header,
    // then zeros that are never read.
    let big = TempPath::new("big.pcap");
    let mut w = rawpkt_tools::pcap::Writer::create(&big.0).unwrap();
    w.flush().unwrap();
    drop(w);
    let max = 24 + 65535 * (16 + 1514);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big.0)
        .unwrap()
        .set_len(max + 1)
        .unwrap();
    fails_with(
        1,
        &["--pcap", big.str()],
        &format!("--pcap {}: {} bytes is more than pktgen replays: at most 65535 frames of up to 1514 bytes, a pcap file of {max} bytes", big.str(), max + 1),
    );
}

/// `--capture` to a FIFO nobody reads waited for a reader forever; with its reader there, the
/// capture goes through it.
#[test]
fn capture_to_a_fifo_needs_its_reader() {
    let _one = serial();
    let fifo = TempPath::fifo("out.fifo");
    fails_with(
        1,
        &["--count", "10", "--capture", fifo.str()],
        &format!(
            "--capture {}: is a FIFO that nobody reads; start its reader first",
            fifo.str()
        ),
    );
    let path = fifo.0.clone();
    let reader = std::thread::spawn(move || std::fs::read(path).unwrap());
    // The reader opens its end in its own time; until then pktgen says it is missing.
    let give_up = Instant::now() + Duration::from_secs(30);
    let s = loop {
        let out = pktgen(&["--count", "1000", "--json", "--capture", fifo.str()]);
        if out.status.success() || Instant::now() > give_up {
            break summary(&out);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let got = rawpkt_tools::pcap::Reader::from_bytes("fifo", reader.join().unwrap()).unwrap();
    assert_eq!(got.len() as u64, s["rx_packets"].as_u64().unwrap(), "{s}");
    assert_eq!(s["rx_packets"], 1000, "{s}");
}

/// Sent and none received is a failed run, said in one line: two model NICs that are not wired
/// to each other.
#[test]
fn nothing_received_is_said_and_exits_1() {
    let _one = serial();
    fails_with(
        1,
        &[
            "--port",
            "model:nowire-a/0",
            "--rx-port",
            "model:nowire-b/1",
            "--count",
            "1000",
        ],
        "none of the 1000 frames sent arrived at --rx-port model:nowire-b/1; they were addressed to 02:00:00:00:00:02",
    );
}

/// Ctrl-C as soon as pktgen runs ends the run in order, with its summary and status 0 (here with
/// nothing sent; `tests/mlx5_model.rs` has the ports that take long enough to open that a Ctrl-C
/// before the handler, installed after them, killed pktgen).
#[test]
fn ctrl_c_at_the_start_still_gives_the_summary() {
    let _one = serial();
    for run in 0..6 {
        let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        common::sigint_at_start(child.id());
        let out = common::output_within(child, Duration::from_secs(60), "pktgen after an early Ctrl-C");
        assert_eq!(
            out.status.code(),
            Some(0),
            "run {run}: {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let s = summary(&out);
        assert_eq!(s["lost"], 0, "run {run}: {s}");
    }
}

/// More spinning threads than CPUs (transmit loops plus the model NIC's) is said before the run,
/// as too many --cores is refused: the losses it causes are the scheduler's.
#[test]
fn oversubscribed_cpus_are_said_up_front() {
    let _one = serial();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = cpus.to_string();
    let out = pktgen(&["--cores", &n, "--count", "2000", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("pktgen: warning: {cpus} transmit loop");
    assert!(
        err.lines()
            .any(|l| l.starts_with(&want) && l.contains(&format!("spin on {cpus} CPUs"))),
        "{err}"
    );
    if cpus >= 2 {
        let out = pktgen(&["--cores", "1", "--count", "2000", "--json"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("pktgen: warning"), "{err}");
    }
}

/// The part of a run after its last full second is the receiver's drain: no line of zeros for
/// it.
#[test]
fn no_empty_interval_line_after_the_run() {
    let _one = serial();
    for _ in 0..2 {
        let out = pktgen(&["--duration", "1", "--json"]);
        let s = summary(&out);
        for l in json_lines(&out).iter().filter(|l| l["type"] == "interval") {
            let moved = ["tx_packets", "rx_packets", "drops", "errors"]
                .iter()
                .any(|k| l[k].as_u64() != Some(0));
            assert!(moved, "an interval line with nothing in it: {l}\nsummary {s}");
        }
    }
}

#[test]
fn help_says_what_pktgen_does() {
    let out = pktgen(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.starts_with("pktgen: sends Ethernet/IP/UDP traffic"), "{help}");
    assert!(!help.contains("Userspace packet I/O engine"), "{help}");
}

/// A stream file in the temp dir, removed when the test ends.
fn stream_file(tag: &str, text: &str) -> TempPath {
    let p = TempPath::new(&format!("{tag}.toml"));
    std::fs::write(&p.0, text).unwrap();
    p
}

#[test]
fn two_streams_are_counted_apart_and_add_up_to_the_port() {
    let _one = serial();
    let f = stream_file(
        "two",
        "[[stream]]\nname = \"small\"\nsize = 60\nrate = \"200k\"\n\n[[stream]]\nname = \"big\"\nsize = 1514\nrate = \"50k\"\nflows = 4\n",
    );
    let cap = TempPath::new("two.pcap");
    let s = summary(&pktgen(&[
        "--streams",
        f.str(),
        "--duration",
        "1",
        "--json",
        "--capture",
        cap.str(),
    ]));
    // Every frame is its own stream's whole template, though the streams share a core's
    // buffers: 60 and 1514 bytes, and the latency stream's 60, IPv4 total length to match.
    let r = rawpkt_tools::pcap::Reader::open(&cap.0).unwrap();
    let mut per = [0u64; 3];
    for (_, f) in r.iter() {
        let id = usize::from(f[44]);
        let want = [60, 1514, 60][id];
        assert_eq!(
            (f.len(), usize::from(u16::from_be_bytes([f[16], f[17]])) + 14),
            (want, want),
            "stream {id}"
        );
        per[id] += 1;
    }
    let streams = s["streams"].as_array().unwrap();
    for (i, n) in per.iter().enumerate() {
        assert_eq!(streams[i]["rx_packets"].as_u64(), Some(*n), "stream {i} in the capture");
    }
    assert_eq!(streams.len(), 3, "two streams and the latency stream: {s}");
    let (small, big) = (&streams[0], &streams[1]);
    assert_eq!(
        (small["name"].as_str(), big["name"].as_str()),
        (Some("small"), Some("big"))
    );
    for t in streams {
        let (tx, rx) = (t["tx_packets"].as_u64().unwrap(), t["rx_packets"].as_u64().unwrap());
        assert!(tx > 0 && tx == rx, "what the receiver counted per stream: {t}");
        assert_eq!(t["tx_bytes"], t["rx_bytes"], "{t}");
        assert!(t["latency_ns"]["samples"].as_u64() == Some(rx), "{t}");
    }
    assert_eq!(small["tx_bytes"].as_u64(), small["tx_packets"].as_u64().map(|n| n * 60));
    assert_eq!(big["tx_bytes"].as_u64(), big["tx_packets"].as_u64().map(|n| n * 1514));
    // 200k against 50k a second: four to one, to within a burst or two of either.
    let ratio = small["tx_packets"].as_f64().unwrap() / big["tx_packets"].as_f64().unwrap();
    assert!((3.9..=4.1).contains(&ratio), "{ratio}: {s}");
    for k in ["tx_packets", "tx_bytes", "rx_packets", "rx_bytes"] {
        let sum: u64 = streams.iter().map(|t| t[k].as_u64().unwrap()).sum();
        assert_eq!(
            s[k].as_u64(),
            Some(sum),
            "{k}: the port's count is the streams' sum: {s}"
        );
    }
}

#[test]
fn a_stream_file_mistake_names_file_line_and_field() {
    let _one = serial();
    let f = stream_file("bad", "[[stream]]\nsize = 60\n\n[[stream]]\nrate = \"lots\"\n");
    fails_with(
        2,
        &["--streams", f.str()],
        &format!("{}:5: field rate: \"lots\"", f.str()),
    );
    fails_with(1, &["--streams", "/nonexistent/s.toml"], "/nonexistent/s.toml");
}

/// Send times of the stamped frames of stream `id` in a capture, in capture order.
fn stamps_of(path: &std::path::Path, id: u8) -> Vec<u64> {
    let r = rawpkt_tools::pcap::Reader::open(path).unwrap();
    r.iter()
        .filter_map(|(_, f)| {
            // IPv4: the stamp follows 14 + 20 + 8 bytes of headers: magic, id + sequence, time.
            let s = f.get(42..60)?;
            (s[0..2] == *b"RT" && s[2] == id).then(|| u64::from_be_bytes(s[10..18].try_into().unwrap()))
        })
        .collect()
}

/// The summary of a second of 1 Mpps Poisson on the model pair, with `more` arguments.
fn poisson_second(more: &[&str]) -> serde_json::Value {
    let mut args = vec!["--rate", "1M", "--shape", "poisson", "--duration", "1", "--json"];
    args.extend_from_slice(more);
    summary(&pktgen(&args))
}

#[test]
fn poisson_at_one_mpps_keeps_its_mean_and_reports_its_departures() {
    let _one = serial();
    let cap = TempPath::new("poisson.pcap");
    let s = poisson_second(&["--capture", cap.str()]);
    let mut t = stamps_of(&cap.0, 0);
    assert_eq!(t.len() as u64, s["streams"][0]["rx_packets"].as_u64().unwrap());
    // The receiver takes frames in order per queue; the send times are the departures.
    t.sort_unstable();
    let mut gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
    let mpps = s["streams"][0]["tx_mpps"].as_f64().unwrap();
    gaps.sort_unstable_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    let beyond = |m: f64| gaps.iter().filter(|&&g| g > m * mean).count() as f64 / gaps.len() as f64;
    eprintln!(
        "poisson: {mpps} Mpps, mean gap {mean:.1} ns, cv {:.4}, median/mean {:.3}, P(gap > mean) {:.4}, P(gap > 3 mean) {:.4}, longest {:.0} µs",
        sd / mean,
        median / mean,
        beyond(1.0),
        beyond(3.0),
        gaps[gaps.len() - 1] / 1e3
    );
    assert!((0.99..=1.01).contains(&mpps), "achieved {mpps} Mpps");
    assert!((990.0..=1010.0).contains(&mean), "mean gap {mean} ns");
    // pktgen's own report of the same departures agrees on the mean.
    let d = &s["streams"][0]["departures_ns"];
    assert!((d["mean"].as_f64().unwrap() - mean).abs() < 10.0, "{d}");
    // Stalls (gaps over 50 mean gaps: the sender lost its CPU) are counted apart, as the
    // report counts them, and left out of a second coefficient of variation.
    let stalls = gaps.iter().filter(|&&g| g > 50.0 * mean).count() as u64;
    let kept = &gaps[..gaps.len() - stalls as usize];
    let m = kept.iter().sum::<f64>() / kept.len() as f64;
    let cv_kept = (kept.iter().map(|g| (g - m).powi(2)).sum::<f64>() / kept.len() as f64).sqrt() / m;
    eprintln!(
        "poisson: {stalls} stalls, cv without them {cv_kept:.3}; pktgen reports {} and {}",
        d["stalls"], d["cv_without_stalls"]
    );
    let reported = d["stalls"].as_u64().expect("stalls reported");
    assert!(
        reported.abs_diff(stalls) <= 2 + stalls / 20,
        "stalls: {reported} reported, {stalls} in the capture"
    );
    let cv_reported = d["cv_without_stalls"].as_f64().unwrap();
    assert!(
        (cv_reported / cv_kept - 1.0).abs() < 0.1,
        "cv without stalls: {cv_reported} against {cv_kept}"
    );
    // The sender timed every departure it made against its due time.
    let tx = s["streams"][0]["tx_packets"].as_u64().unwrap();
    let departures = d["departures"].as_u64().expect("departures timed");
    assert!(
        departures >= tx && departures - tx <= 256,
        "{departures} timed, {tx} sent"
    );
    eprintln!("poisson with a capture: {}", departures_line(d));
    // Without a capture, whose writes run in the waits between departures (the receiver is in
    // the send loop on 2 CPUs) and make some late: what the pacer keeps. A late departure
    // (more than `late_after_ns` after its due time) is one the host held up; the coefficient
    // over all gaps carries those holds, over the gaps between departures that both left on
    // time it is the process's own, within 5 % of an exponential's 1.
    let s = poisson_second(&[]);
    let d = &s["streams"][0]["departures_ns"];
    eprintln!("poisson: {}", departures_line(d));
    let mpps = s["streams"][0]["tx_mpps"].as_f64().unwrap();
    assert!((0.99..=1.01).contains(&mpps), "achieved {mpps} Mpps: {d}");
    let (departures, late) = (d["departures"].as_u64().unwrap(), d["late"].as_u64().unwrap());
    assert!(
        late as f64 <= LATE_FRACTION * departures as f64,
        "{late} of {departures} departures late: {d}"
    );
    // Each late departure takes at most two gaps out.
    let on_time = d["on_time_gaps"].as_u64().unwrap();
    assert!(
        on_time + 2 * late + 1 >= departures,
        "{on_time} on-time gaps of {departures}: {d}"
    );
    // Leaving them out keeps the mean (holds come at times that do not depend on the gaps)...
    let mean_on_time = d["mean_on_time"].as_f64().unwrap();
    assert!(
        (mean_on_time / 1000.0 - 1.0).abs() < 0.01,
        "mean of on-time gaps {mean_on_time}: {d}"
    );
    // ...and the spread is an exponential's, within 5 % (issue 16). A departure due within half
    // a send after the one before leaves with it, early by at most that: never near the bound.
    let early_max = d["early_max"].as_u64().expect("early_max reported");
    let late_ns = d["late_after_ns"].as_u64().expect("late_after_ns reported");
    assert!(early_max <= late_ns / 2, "early by {early_max} ns: {d}");
    let cv_on_time = d["cv_on_time"].as_f64().unwrap();
    assert!(
        (cv_on_time - 1.0).abs() < CV_ON_TIME_BAND,
        "cv over on-time gaps {cv_on_time}: {d}"
    );
}

/// pktgen's report of a stream's departures, in a line.
fn departures_line(d: &serde_json::Value) -> String {
    format!(
        "{} of {} late (> {} ns; lateness p50 {} p99 {} max {}), {} early (max {} ns); {} gaps cv {}, {} on time: mean {} cv {}",
        d["late"],
        d["departures"],
        d["late_after_ns"],
        d["lateness_p50"],
        d["lateness_p99"],
        d["lateness_max"],
        d["early"],
        d["early_max"],
        d["gaps"],
        d["cv"],
        d["on_time_gaps"],
        d["mean_on_time"],
        d["cv_on_time"]
    )
}

/// Departures of a 1 Mpps Poisson stream that may leave more than `late_after_ns` after their
/// due time, without a capture, on a 2-CPU machine that runs nothing else (the model NIC's
/// thread on one CPU, pktgen with its receiver on the other): what the host holds up. Measured
/// on the idle 2-CPU VM (README, Rate shapes): 2.4-5.2 % at load 0.4-0.6, from 78-154 holds a
/// second of up to 3-10 ms; 9-15 % in 20 runs at load 0.7-1.3 (the measuring runs themselves).
const LATE_FRACTION: f64 = 0.25;

/// How far from 1 the coefficient of variation over on-time gaps may be: issue 16's 5 %.
const CV_ON_TIME_BAND: f64 = 0.05;

/// Gaps between consecutive records of a capture, ns, sorted.
fn capture_gaps(path: &std::path::Path) -> Vec<u64> {
    let r = rawpkt_tools::pcap::Reader::open(path).unwrap();
    let t: Vec<u64> = r.iter().map(|(t, _)| t).collect();
    let mut g: Vec<u64> = t.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    g.sort_unstable();
    g
}

#[test]
fn a_timed_replay_reproduces_the_captures_gaps_at_1x_and_10x() {
    let _one = serial();
    let src = TempPath::new("timed-src.pcap");
    // A capture made by pktgen itself: 5000 frames a second, so 200 µs apart.
    summary(&pktgen(&[
        "--rate",
        "5k",
        "--duration",
        "1",
        "--latency-rate",
        "off",
        "--json",
        "--capture",
        src.str(),
    ]));
    let want = capture_gaps(&src.0);
    for x in [1u64, 10] {
        let out = TempPath::new(&format!("timed-{x}.pcap"));
        let s = summary(&pktgen(&[
            "--pcap",
            src.str(),
            "--pcap-speed",
            &x.to_string(),
            "--pcap-loops",
            "1",
            "--json",
            "--capture",
            out.str(),
        ]));
        assert_eq!(
            s["rx_packets"].as_u64(),
            Some(want.len() as u64 + 1),
            "one loop: every frame once"
        );
        let got = capture_gaps(&out.0);
        let mean = |g: &[u64]| g.iter().sum::<u64>() as f64 / g.len() as f64;
        let (mean_want, mean_got) = (mean(&want), mean(&got) * x as f64);
        let (m_want, m_got) = (want[want.len() / 2] as f64, (got[got.len() / 2] * x) as f64);
        eprintln!(
            "timed replay {x}x: median gap {m_got:.0} ns (scaled back) against {m_want:.0} ns, mean {mean_got:.0} against {mean_want:.0}"
        );
        // The pacer follows the file's times exactly against a simulated clock (its unit test).
        // Here both captures date each frame by its own device receive timestamp (a model port
        // has them), not by the receive burst that took it, so the gaps are per frame and the
        // medians compare (2-CPU VM at load 1: 199968 and 199870 ns against 199994). A sender
        // or model thread that loses its CPU for a few ms releases the frames due meanwhile
        // back to back; at load 4-7 (other builds on the machine) more than half the gaps were
        // 0 and this fails with the fraction below: rerun it alone on a quieter machine.
        let zeros = |g: &[u64]| g.iter().filter(|&&v| v == 0).count() as f64 / g.len() as f64;
        assert!(
            (m_got / m_want - 1.0).abs() <= 0.05,
            "{x}x: median gap {m_got} ns against {m_want} ns ({:.0} % and {:.0} % of the gaps are 0: frames clumped by CPU stalls)",
            100.0 * zeros(&got),
            100.0 * zeros(&want)
        );
        let tolerance = if x == 1 { 0.05 } else { 0.15 };
        assert!(
            (mean_got / mean_want - 1.0).abs() <= tolerance,
            "{x}x: mean gap {mean_got} against {mean_want}"
        );
    }
    // Back to back is far faster than the file's pace.
    let s = summary(&pktgen(&[
        "--pcap",
        src.str(),
        "--pcap-speed",
        "max",
        "--pcap-loops",
        "3",
        "--json",
    ]));
    assert_eq!(s["tx_packets"].as_u64(), Some(3 * (want.len() as u64 + 1)));
    assert!(s["seconds"].as_f64().unwrap() < 0.5, "{s}");
}

#[test]
#[ignore = "needs curl and python3's prometheus_client (pip install prometheus_client)"]
fn the_metrics_endpoint_serves_prometheus_text_while_pktgen_runs() {
    let _one = serial();
    // A free loopback port: bound, noted and let go (another process taking it in between
    // would fail pktgen's bind, in one line).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["--duration", "3", "--json", "--metrics", &addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let scrape = Command::new("curl")
        .args(["-sf", "--max-time", "5", &format!("http://{addr}/metrics")])
        .output()
        .expect("curl is not installed");
    let out = common::output_within(child, Duration::from_secs(60), "pktgen --metrics");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(scrape.status.success(), "curl: {scrape:?}");
    // Python's reference parser reads it, and says what it found.
    let check = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as f\n\
                 for m in f(sys.stdin.read()):\n    for s in m.samples: print(m.type, s.name, s.labels.get('stream', s.labels.get('port', '')), s.labels.get('direction', s.labels.get('quantile', '')), s.value)\n";
    let mut py = Command::new("python3")
        .args(["-c", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    py.stdin.take().unwrap().write_all(&scrape.stdout).unwrap();
    let parsed = py.wait_with_output().unwrap();
    assert!(
        parsed.status.success(),
        "the parser refused it: {}\n{}",
        String::from_utf8_lossy(&parsed.stderr),
        String::from_utf8_lossy(&scrape.stdout)
    );
    let text = String::from_utf8_lossy(&parsed.stdout);
    let value = |prefix: &str| -> f64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}: {text}"));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // Mid-run: the load is flowing, the latency stream has samples.
    assert!(
        value("counter pktgen_port_packets_total model:pktgen/0 tx") > 0.0,
        "{text}"
    );
    assert!(value("counter pktgen_stream_packets_total load tx") > 0.0, "{text}");
    assert!(
        value("summary pktgen_stream_latency_seconds_count latency") > 0.0,
        "{text}"
    );
    assert!(
        value("summary pktgen_stream_latency_seconds latency 0.5") > 0.0,
        "{text}"
    );
}

/// tshark's view of a capture, one line per frame, fields separated by tabs; checksums checked.
fn tshark_fields(path: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut args = vec![
        "-r",
        path,
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        "-T",
        "fields",
    ];
    for f in fields {
        args.extend(["-e", f]);
    }
    let out = Command::new("tshark")
        .args(&args)
        .output()
        .expect("tshark is not installed: apt-get install -y tshark");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

#[test]
#[ignore = "needs tshark"]
fn every_template_decodes_in_tshark_as_asked_with_valid_checksums() {
    let _one = serial();
    // (pktgen options, protocols tshark must see, VLAN ids, VNI, inner source address)
    let v6 = ["--src-ip", "fd00::1", "--dst-ip", "fd00::2"];
    let outer6 = ["--outer-src-ip", "fd01::1", "--outer-dst-ip", "fd01::2"];
    let cases: Vec<(Vec<&str>, &str, &str, &str, &str)> = vec![
        (
            vec!["--vlan", "100"],
            "eth:ethertype:vlan:ethertype:ip:udp",
            "100",
            "",
            "10.0.0.1",
        ),
        (
            vec!["--vlan", "100,200"],
            "eth:ethertype:ieee8021ad:ethertype:vlan:ethertype:ip:udp",
            "100,200",
            "",
            "10.0.0.1",
        ),
        (
            vec!["--encap", "vxlan:4242"],
            "eth:ethertype:ip:udp:vxlan:eth:ethertype:ip:udp",
            "",
            "4242",
            "10.0.0.1",
        ),
        (
            [&["--encap", "vxlan:7"][..], &outer6, &v6].concat(),
            "eth:ethertype:ipv6:udp:vxlan:eth:ethertype:ipv6:udp",
            "",
            "7",
            "fd00::1",
        ),
        (
            vec!["--encap", "gre"],
            "eth:ethertype:ip:gre:ip:udp",
            "",
            "",
            "10.0.0.1",
        ),
        (
            [&["--encap", "gre"][..], &outer6, &v6].concat(),
            "eth:ethertype:ipv6:gre:ipv6:udp",
            "",
            "",
            "fd00::1",
        ),
        (
            [&["--encap", "gre", "--vlan", "5"][..], &outer6].concat(),
            "eth:ethertype:vlan:ethertype:ipv6:gre:ip:udp",
            "5",
            "",
            "10.0.0.1",
        ),
    ];
    for (args, protos, vlans, vni, inner_src) in cases {
        let cap = TempPath::new("template.pcap");
        let mut a = vec![
            "--count",
            "200",
            "--json",
            "--latency-rate",
            "off",
            "--capture",
            cap.str(),
        ];
        a.extend(&args);
        let s = summary(&pktgen(&a));
        // The receiver found the stamp through the headers: every frame counted in its stream.
        assert_eq!(s["streams"][0]["rx_packets"], 200, "{args:?}: {s}");
        let rows = tshark_fields(
            cap.str(),
            &[
                "frame.protocols",
                "ieee8021ad.id",
                "vlan.id",
                "vxlan.vni",
                "ip.src",
                "ipv6.src",
                "ip.checksum.status",
                "udp.checksum.status",
            ],
        );
        assert_eq!(rows.len(), 200, "{args:?}");
        for r in &rows {
            assert!(r[0].starts_with(protos), "{args:?}: {r:?}");
            let tags: Vec<&str> = [r[1].as_str(), r[2].as_str()]
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect();
            assert_eq!(tags.join(","), vlans, "{args:?}: {r:?}");
            assert_eq!(r[3], vni, "{args:?}: {r:?}");
            // The inner source is the last address of its family in the frame.
            assert!(
                r[4].ends_with(inner_src) || r[5].ends_with(inner_src),
                "{args:?}: {r:?}"
            );
            // 1 is "good"; 3 "not present", which RFC 768 allows for UDP over IPv4 (and RFC 7348
            // asks of VXLAN's outer UDP), never over IPv6: as many good ones as UDP over IPv6.
            for st in r[6].split(',').filter(|x| !x.is_empty()) {
                assert_eq!(st, "1", "IPv4 header checksum: {args:?}: {r:?}");
            }
            let udp: Vec<&str> = r[7].split(',').collect();
            assert!(
                udp.iter().all(|&st| st == "1" || st == "3"),
                "UDP checksum: {args:?}: {r:?}"
            );
            let over_v6 = r[0].matches("ipv6:udp").count();
            assert!(
                udp.iter().filter(|&&st| st == "1").count() >= over_v6,
                "UDP checksum: {args:?}: {r:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs tshark"]
fn ranges_vary_addresses_and_ports_with_the_checksums_right() {
    let _one = serial();
    let cap = TempPath::new("ranges.pcap");
    let s = summary(&pktgen(&[
        "--count",
        "512",
        "--json",
        "--latency-rate",
        "off",
        "--capture",
        cap.str(),
        "--range",
        "dst-ip:256:random",
        "--range",
        "src-ip:4",
        "--range",
        "dst-port:8",
        "--range",
        "src-mac:2",
    ]));
    assert_eq!(s["streams"][0]["rx_packets"], 512);
    let rows = tshark_fields(
        cap.str(),
        &["ip.src", "ip.dst", "udp.dstport", "eth.src", "ip.checksum.status"],
    );
    let distinct = |k: usize| {
        rows.iter()
            .map(|r| r[k].clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    // In turn: exactly the range; at random: most of 256 values in 512 draws (expected 221).
    assert_eq!(
        distinct(0).into_iter().collect::<Vec<_>>(),
        ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    );
    assert!((180..=256).contains(&distinct(1).len()), "{}", distinct(1).len());
    assert!(distinct(1).iter().all(|a| a.starts_with("10.0.")), "{:?}", distinct(1));
    assert_eq!(distinct(2).len(), 8);
    assert_eq!(distinct(3).len(), 2);
    assert!(rows.iter().all(|r| r[4] == "1"), "every IPv4 header checksum good");
}

#[test]
fn the_throughput_search_finds_a_known_capacity_for_each_size() {
    let _one = serial();
    // Model ports that take 200 000 frames a second through a buffer of 50 ms worth: a trial of
    // one second loses nothing up to 210 000, and at most 0.5 % up to 211 055.
    let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .env("RAWPKT_MODEL_RX_PPS", "200000")
        .args([
            "--search",
            "--search-sizes",
            "60,512,1514",
            "--trial",
            "1",
            "--resolution",
            "2%",
            "--loss-threshold",
            "0.5",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::output_within(child, Duration::from_secs(240), "pktgen --search");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (r, size) in rows.iter().zip([60, 512, 1514]) {
        assert_eq!((r["type"].as_str(), r["size"].as_u64()), (Some("search"), Some(size)));
        let pps = r["rate_pps"].as_f64().unwrap();
        eprintln!("search {size} B: {pps:.0} pps against 210 000");
        // Never above the answer; below it by the bracket's 2 %, and more when a trial below the
        // capacity lost frames because a shared CPU stalled the receiver or the model NIC's
        // thread for longer than their rings hold (20 ms here): 10 % in all. Above it by at most
        // what a trial's end seen late by the model lets through: the sender's second and the
        // model's capacity clock part by a millisecond or so, 200 frames (one CI run found
        // 211 282 pps with 0.45 % lost).
        assert!((189_000.0..=211_500.0).contains(&pps), "{size} B: {pps} pps: {r}");
        assert!(r["loss"].as_f64().unwrap() <= 0.005, "{r}");
    }
}

#[test]
fn search_mistakes_are_one_line() {
    let _one = serial();
    fails_with(2, &["--search", "--rate", "1M"], "--search sets --rate itself");
    fails_with(2, &["--search", "--search-sizes", "59"], "--search-sizes \"59\"");
    fails_with(2, &["--search", "--port", "model:s/0"], "--search needs --rx-port");
    fails_with(2, &["--search", "--resolution", "0%"], "--resolution 0%");
}

/// --hw-timestamps: the senders stamp with the model NIC's clock and the receiver takes each
/// frame's receive timestamp on the same clock. The latency stream's figures are positive and no
/// worse than the run's own clock measures them (which adds the receiver's polling), within
/// slack for a loaded machine; the summary names the clock.
#[test]
fn hardware_timestamps_measure_latency_on_the_device_clock() {
    let _one = serial();
    let run = |hw: bool| {
        let mut args = vec!["--rate", "200k", "--duration", "1", "--json"];
        if hw {
            args.push("--hw-timestamps");
        }
        let s = summary(&pktgen(&args));
        assert_eq!(s["lost"], 0, "{s}");
        assert_eq!(s["latency_clock"], if hw { "device" } else { "software" }, "{s}");
        let lat = s["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["latency_stream"] == true)
            .expect("a latency stream")["latency_ns"]
            .clone();
        assert!(lat["samples"].as_u64().unwrap() >= 500, "{lat}");
        let q: Vec<u64> = ["min", "p50", "p99"].iter().map(|k| lat[k].as_u64().unwrap()).collect();
        assert!(
            q[0] > 1 && q.windows(2).all(|w| w[0] <= w[1]),
            "{}: {q:?}",
            s["latency_clock"]
        );
        q[1]
    };
    let (hw, sw) = (run(true), run(false));
    eprintln!("latency stream p50: device clock {hw} ns, software clock {sw} ns");
    assert!(
        hw <= 2 * sw + 20_000,
        "device-clock p50 {hw} ns against {sw} ns on the run's clock"
    );
}

/// Every receive mode (`--rx-mode`, `QueueConfig::RX_MODES`) receives on the model pair exactly
/// what was sent; a compressed mode whose device wrote no compressed completions says what ran
/// instead (the cyclic compressed one never may), and a mode that is not one is one line, exit 2.
#[test]
fn every_receive_mode_receives_what_was_sent() {
    let _one = serial();
    for (mode, _, _) in rawpkt::QueueConfig::RX_MODES {
        let out = pktgen(&[
            "--port",
            "model:rxm/0",
            "--rx-port",
            "model:rxm/1",
            "--rx-mode",
            mode,
            "--count",
            "100000",
            "--json",
        ]);
        let s = summary(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(s["streams"][0]["tx_packets"], 100_000, "{mode}: {s}");
        assert_eq!(s["rx_packets"], s["tx_packets"], "{mode}: {s}");
        assert_eq!(s["rx_bytes"], s["tx_bytes"], "{mode}: {s}");
        assert_eq!(
            (s["lost"].as_u64(), s["rx_errors"].as_u64()),
            (Some(0), Some(0)),
            "{mode}: {s}"
        );
        match err.lines().find(|l| l.contains("wrote no compressed completions")) {
            None => {}
            Some(l) if mode == "striding+compressed" => assert!(l.ends_with("what ran was striding"), "{l}"),
            Some(l) => panic!("{mode}: {l}"),
        }
    }
    fails_with(
        2,
        &["--rx-mode", "zipped"],
        "--rx-mode zipped: expected one of cyclic, compressed, striding, striding+compressed",
    );
    fails_with(
        2,
        &["--port", "model:x/0", "--rx-mode", "striding"],
        "--rx-mode chooses the receive queue: it needs a receive port",
    );
}
