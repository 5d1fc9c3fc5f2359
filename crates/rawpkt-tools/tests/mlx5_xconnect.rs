//! The l2-xconnect example, the real binary, on `mlx5:` (and `verbs:`) ports of the model library
//! (`crates/model-verbs/`, docs/model-library.md), which stands in for rdma-core in the child process:
//!
//! ```text
//!   mlx5_0 ==wire==> mlx5_1 [l2-xconnect] mlx5_2 ==wire==> mlx5_3
//!   (generator)      --port-a              --port-b          (sink)
//! ```
//!
//! The model lives in the process that loads the library, so the generator and the sink cannot
//! run in this test process: they run in the xconnect's own process, as the library's traffic
//! thread (`RAWPKT_MODEL_TRAFFIC`): rawpkt ports on mlx5_0 (TX) and mlx5_3 (RX, a rule stealing
//! frames to mlx5_1's MAC), probes until one comes through, then `FRAMES` numbered frames of 60
//! to 187 bytes to mlx5_1's MAC (which the xconnect's port A takes by its default rules), paced
//! and at most a window ahead of the sink, each checked to arrive once, in order, byte for byte.
//! When done it sends SIGINT to the process, and the xconnect prints its summary, which must
//! balance: A->B rx == tx == the frames plus the probes that came through, no drops, nothing
//! on B->A.
//!
//! The tool is cargo's own build of this package's `l2-xconnect` binary. Needs root (CAP_NET_RAW); CI runs it with
//! `--include-ignored`.

use rawpkt_test_support as common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Frames through the xconnect (0.2 s at `PPS` on an idle machine).
const FRAMES: u64 = 20_000;
const PPS: u64 = 100_000;
/// Frames sent and not yet received at most: below every ring on the way (1024 entries), so
/// none can overflow however the CPUs are shared.
const WINDOW: u64 = 256;
/// For the whole run: bring-up, traffic, the summary.
const LIMIT: Duration = Duration::from_secs(90);
const MAC1: &str = "02:4d:4c:35:00:01";

/// One xconnect at a time: each has a spinning worker and a model NIC thread, and CI has 2 CPUs.
static LOCK: Mutex<()> = Mutex::new(());

/// The first CPU this process may run on, when it may run on more than one: the model NIC's
/// thread goes there (`RAWPKT_MODEL_CPU`), away from the xconnect's worker, which the example
/// pins to the second CPU.
fn model_cpu() -> Option<usize> {
    let cpus = common::allowed_cpus();
    (cpus.len() > 1).then(|| cpus[0])
}

/// `(rx, tx, drops)` of a summary line `  A->B: 0.07 Mpps (rx 20001, tx 20001, drops 0) ...`.
fn counts(stdout: &str, dir: &str) -> (u64, u64, u64) {
    let line = stdout
        .lines()
        .skip_while(|l| !l.starts_with("summary after"))
        .find(|l| l.trim_start().starts_with(&format!("{dir}:")))
        .unwrap_or_else(|| panic!("no {dir} line in the summary:\n{stdout}"));
    let inner = line
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("{line}"));
    let mut v = inner
        .split(", ")
        .map(|kv| kv.split_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()).expect(line));
    (v.next().unwrap(), v.next().unwrap(), v.next().unwrap())
}

/// A `key=N` field of the traffic thread's report.
fn field(report: &str, key: &str) -> u64 {
    report
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {report}"))
}

fn xconnect_on(kind: &str) {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let lib = common::model_verbs_lib();
    let traffic = format!(
        "tx={kind}:mlx5_0/1 rx={kind}:mlx5_3/1 dst={MAC1} count={FRAMES} pps={PPS} window={WINDOW} done=sigint"
    );
    let xconnect = std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect"));
    let mut cmd = Command::new(&xconnect);
    cmd.env("RAWPKT_LIBIBVERBS", lib)
        .env("RAWPKT_LIBMLX5", lib)
        .env("RAWPKT_MODEL_TRAFFIC", &traffic)
        .args([
            "--port-a",
            &format!("{kind}:mlx5_1/1"),
            "--port-b",
            &format!("{kind}:mlx5_2/1"),
            "--stats-interval",
            "0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match model_cpu() {
        Some(c) => cmd.env("RAWPKT_MODEL_CPU", c.to_string()),
        None => cmd.env_remove("RAWPKT_MODEL_CPU"),
    };
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", xconnect.display()));
    // Readers, so that a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for the l2-xconnect") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    let status = status.unwrap_or_else(|| panic!("{kind}: the l2-xconnect did not finish in {LIMIT:?}; {said}"));
    assert!(status.success(), "{kind}: l2-xconnect exited with {status}; {said}");
    assert!(stdout.contains("forwarding: every queue is up"), "{kind}: {said}");

    let report = stderr
        .lines()
        .find(|l| l.starts_with("model traffic:"))
        .unwrap_or_else(|| panic!("{kind}: no report from the traffic thread; {said}"));
    assert!(report.starts_with("model traffic: ok "), "{kind}: {report}; {said}");
    assert_eq!(field(report, "sent"), FRAMES, "{report}");
    assert_eq!(field(report, "received"), FRAMES, "{report}");
    let probes = field(report, "probes_received");
    assert!(probes >= 1, "{report}");

    // Every frame the xconnect took from A left on B, and each reached the sink: the frames and
    // the probes that came through, nothing else.
    let (rx, tx, drops) = counts(&stdout, "A->B");
    assert_eq!((rx, tx, drops), (FRAMES + probes, FRAMES + probes, 0), "{kind}: {said}");
    assert_eq!(counts(&stdout, "B->A"), (0, 0, 0), "{kind}: {said}");
    let core = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("core 0 "))
        .collect::<Vec<_>>();
    assert_eq!(core.len(), 2, "{kind}: {said}");
    for l in core {
        assert!(
            l.ends_with("RX device drops 0, no buffers 0, errors 0; TX drops 0, errors 0, recoveries 0"),
            "{kind}: {l}"
        );
    }
    if kind == "verbs" {
        assert!(!stderr.contains("Direct Verbs unavailable"), "{stderr}");
    }
    eprintln!("{kind}: {}", report.trim_start_matches("model traffic: "));
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn l2_xconnect_forwards_every_frame_on_mlx5_ports_direct_verbs() {
    xconnect_on("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn l2_xconnect_forwards_every_frame_on_mlx5_ports_ibverbs() {
    xconnect_on("verbs");
}
