//! Debian's unmodified perftest on the model library: `raw_ethernet_bw --client` alone (send
//! only) on mlx5_0, whose frames go to mlx5_1's Linux side since nothing there steers them.
//! Asserted on the tool's own result line and on the model's trace of what the device executed.

use std::process::Command;

#[test]
#[ignore = "needs root (CAP_NET_RAW for RAW_PACKET QPs) and Debian's perftest; CI has both"]
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
