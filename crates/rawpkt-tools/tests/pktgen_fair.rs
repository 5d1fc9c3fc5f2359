//! Streams whose rates exceed what a core sends share it by their rates, and are told short of
//! them: pktgen TX-only on a model port, asked far more than any core reaches, so that what is
//! checked (the shares by count, the flags) holds however fast or busy the machine is.

use rawpkt_test_support as common;

use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One pktgen at a time: each spins a core and a model NIC thread.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs pktgen TX-only on a model port with the stream file `text` and `more` arguments, JSON
/// lines out. A run that sent nothing (a machine so busy that setting up took the whole
/// `--duration`) tells nothing of shares: it is run again, three times at most.
fn run(tag: &str, text: &str, more: &[&str]) -> Vec<serde_json::Value> {
    for _ in 0..3 {
        let lines = run_once(tag, text, more);
        if lines.last().is_some_and(|s| s["tx_packets"].as_u64() > Some(0)) {
            return lines;
        }
    }
    panic!("pktgen sent nothing in three runs");
}

fn run_once(tag: &str, text: &str, more: &[&str]) -> Vec<serde_json::Value> {
    let file = std::env::temp_dir().join(format!("rawpkt-pktgen-fair-{tag}-{}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let port = format!("model:fair-{tag}/0");
    let mut args = vec!["--port", &port, "--streams", file.to_str().unwrap(), "--json"];
    args.extend_from_slice(more);
    let child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pktgen runs");
    let out = common::output_within(child, Duration::from_secs(120), &format!("pktgen {args:?}"));
    let _ = std::fs::remove_file(&file);
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

/// 10^9 and 5·10^8 packets a second, in both orders: each stream gets its weighted share of
/// what the core sent (2:1, within 5 %), and both are flagged short, in the summary and in
/// every per-second line that sent anything.
#[test]
fn streams_over_a_cores_capacity_share_it_by_rate_and_are_flagged_short() {
    let _one = serial();
    let big = "[[stream]]\nname = \"big\"\nrate = \"1000M\"\n";
    let half = "[[stream]]\nname = \"half\"\nrate = \"500M\"\n";
    for (tag, text) in [("bh", format!("{big}\n{half}")), ("hb", format!("{half}\n{big}"))] {
        let lines = run(tag, &text, &["--duration", "3"]);
        let s = lines.last().expect("a summary");
        assert_eq!(s["type"], "summary", "{s}");
        let streams = s["streams"].as_array().expect("streams");
        let by = |name: &str| {
            streams
                .iter()
                .find(|t| t["name"] == name)
                .unwrap_or_else(|| panic!("no stream {name}: {s}"))
        };
        let (b, h) = (by("big"), by("half"));
        let (nb, nh) = (b["tx_packets"].as_u64().unwrap(), h["tx_packets"].as_u64().unwrap());
        assert!(nh > 0, "{s}");
        let ratio = nb as f64 / nh as f64;
        assert!(
            (ratio / 2.0 - 1.0).abs() < 0.05,
            "{tag}: {nb} and {nh} packets, not 2:1: {s}"
        );
        for t in [b, h] {
            assert_eq!(t["short"], true, "{tag}: {t}");
            let asked = t["rate_asked_packets"].as_u64().unwrap();
            // 1.5 Gpps asked of one core: at least twice what any core sends, however fast.
            assert!(
                asked > 2 * t["tx_packets"].as_u64().unwrap(),
                "{tag}: asked {asked}: {t}"
            );
        }
        let intervals: Vec<_> = lines
            .iter()
            .filter(|l| l["type"] == "interval" && l["tx_packets"].as_u64() > Some(0))
            .collect();
        for l in &intervals {
            let short: Vec<_> = l["short_streams"].as_array().expect("short_streams").iter().collect();
            assert!(
                short.contains(&&"big".into()) && short.contains(&&"half".into()),
                "{tag}: {l}"
            );
        }
    }
}

/// Rates a core keeps easily, each stream ending by its count (no `--duration`: the run ends
/// when both have sent it): neither is flagged short over the run (a second may be, on a
/// machine that takes the CPU away for part of it).
#[test]
fn streams_that_send_their_count_are_not_short() {
    let _one = serial();
    let lines = run(
        "slow",
        "[[stream]]\nname = \"a\"\nrate = \"2000\"\ncount = 2000\n\n[[stream]]\nname = \"b\"\nrate = \"1000\"\ncount = 1000\n",
        &[],
    );
    let s = lines.last().expect("a summary");
    for (t, n) in s["streams"].as_array().expect("streams").iter().zip([2000, 1000]) {
        assert_eq!(
            (t["short"].as_bool(), t["tx_packets"].as_u64()),
            (Some(false), Some(n)),
            "{t}"
        );
    }
}

/// A rate changed through the control endpoint changes the shares: 10^9 and 5·10^8 packets a
/// second share a core 2:1; once the second is asked 4·10^9, every later second shares it 1:4
/// (within 5 % over the seconds wholly after the change, by count: at any speed).
#[test]
fn a_rate_changed_live_changes_the_shares() {
    use std::io::BufRead as _;
    let _one = serial();
    let file = std::env::temp_dir().join(format!("rawpkt-pktgen-fair-live-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        "[[stream]]\nname = \"big\"\nrate = \"1000M\"\n\n[[stream]]\nname = \"half\"\nrate = \"500M\"\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["--port", "model:fair-live/0", "--streams", file.to_str().unwrap()])
        .args(["--duration", "6", "--json", "--control", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pktgen runs");
    let (said, stderr) = common::announced(&mut child, "pktgen: control at http://");
    let addr = said.trim_end_matches('/').to_string();
    // The change comes after the first whole second of traffic, however long the start took.
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for l in stdout.lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            if v["type"] == "interval" {
                let _ = tx.send(());
            }
            lines.push(v);
        }
        lines
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("pktgen printed no interval line in 60 s");
    }
    let (st, body) = common::http(&addr, "POST", "/streams/half/rate", "{\"pps\": 4000000000}");
    assert!(st.contains("200"), "{st}: {body}");
    let out = common::output_within(child, Duration::from_secs(120), "pktgen --control");
    let err = stderr.join().unwrap();
    let lines = reader.join().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "{err}");
    let text = lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n");
    let s = lines.last().expect("a summary");
    let changed = s["events"][0]["t"].as_f64().unwrap_or_else(|| panic!("no event: {s}"));
    // Per stream (big, half): packets in the seconds wholly before and wholly after the change.
    let (mut before, mut after) = ([0u64; 2], [0u64; 2]);
    let mut from = 0.0;
    for l in lines.iter().filter(|l| l["type"] == "interval") {
        let to = l["t"].as_f64().unwrap();
        let st = l["streams"].as_array().unwrap();
        let d = [
            st[0]["tx_packets"].as_u64().unwrap(),
            st[1]["tx_packets"].as_u64().unwrap(),
        ];
        let sum = if to < changed {
            Some(&mut before)
        } else if from > changed {
            Some(&mut after)
        } else {
            None
        };
        if let Some(sum) = sum {
            sum[0] += d[0];
            sum[1] += d[1];
        }
        from = to;
    }
    let near = |x: u64, y: u64, ratio: f64| y > 0 && (x as f64 / y as f64 / ratio - 1.0).abs() < 0.05;
    assert!(near(before[0], before[1], 2.0), "before the change {before:?}: {text}");
    assert!(near(after[1], after[0], 4.0), "after the change {after:?}: {text}");
}
