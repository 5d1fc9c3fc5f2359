//! A standard output whose reader goes away (`pktgen | head -1`) ends each tool's run in order,
//! quietly, and by SIGPIPE, as `yes | head -1` ends `yes`: no panic ("failed printing to
//! stdout"), and no thread left running (l2-xconnect panicked inside its thread scope before
//! stopping its workers, then forwarded at full CPU forever, deaf to --duration and SIGINT).

use rawpkt_test_support as common;

use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` as `cmd | head -1` would: reads its first line, closes the pipe, and checks that it
/// ends within `limit` (well before any --duration it was given), by SIGPIPE, with no panic.
fn ends_when_its_reader_goes(mut cmd: Command, what: &str, limit: Duration) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let start = Instant::now();
    // Read the first line in a thread of its own: a tool that prints nothing must not hang the
    // test, the time limit below ends it.
    let head = std::thread::spawn(move || {
        let mut first = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut first);
        first // the reader (and so the pipe's read end) is dropped here
    });
    let out = common::output_within(child, limit, what);
    let first = head.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!first.is_empty(), "{what}: printed nothing before it ended: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{what}: {err}"
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{what}: ended by SIGPIPE, as a Unix filter does ({:?}); stderr: {err}",
        out.status
    );
    eprintln!("{what}: ended {:?} after its start", start.elapsed());
}

#[test]
fn pktgen_stops_when_its_reader_goes() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pktgen"));
    cmd.args(["--duration", "60"]);
    // Its first line comes after a second, its second (which finds the pipe closed) after two.
    ends_when_its_reader_goes(cmd, "pktgen --duration 60 | head -1", Duration::from_secs(30));
}

#[test]
fn l2_xconnect_stops_when_its_reader_goes() {
    let mut cmd = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_l2-xconnect")));
    cmd.args(["--generate", "--duration", "60"]);
    ends_when_its_reader_goes(
        cmd,
        "l2-xconnect --generate --duration 60 | head -1",
        Duration::from_secs(30),
    );
}

#[test]
fn rx_sink_stops_when_its_reader_goes() {
    let mut cmd = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_rx-sink")));
    cmd.arg("model:closed-stdout/0");
    // rx-sink runs until stopped; its second rate line finds the pipe closed.
    ends_when_its_reader_goes(cmd, "rx-sink model:closed-stdout/0 | head -1", Duration::from_secs(30));
}
