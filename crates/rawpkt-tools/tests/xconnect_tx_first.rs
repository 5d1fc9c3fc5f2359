//! l2-xconnect's `--tx-first` and `--rx-mode`, the real binary on the two ports of one model NIC
//! (cabled back to back): each core sends one burst out of A and one out of B, and the frames go
//! round A -> B -> A for as long as it forwards, as testpmd's `start tx_first` makes them go
//! (`scripts/dpdk-callgrind.sh` runs it so on the model library's mlx5_0 and mlx5_1). No root:
//! model ports.

use std::process::Command;

fn xconnect(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_l2-xconnect"))
        .args(args)
        .env_remove("RAWPKT_MODEL_CPU")
        .output()
        .expect("running l2-xconnect")
}

/// `(rx, tx, drops)` of the summary's `A->B` or `B->A` line.
fn counts(stdout: &str, dir: &str) -> (u64, u64, u64) {
    let line = stdout
        .lines()
        .skip_while(|l| !l.starts_with("summary after"))
        .find(|l| l.trim_start().starts_with(&format!("{dir}:")))
        .unwrap_or_else(|| panic!("no {dir} line in the summary:\n{stdout}"));
    let inner = line.split_once('(').and_then(|(_, r)| r.split_once(')')).unwrap().0;
    let v: Vec<u64> = inner
        .split(", ")
        .map(|kv| kv.split_once(' ').unwrap().1.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

#[test]
fn tx_first_frames_go_round_a_pair_in_every_receive_mode() {
    for mode in ["cyclic", "compressed", "striding", "striding+compressed"] {
        let nic = format!("txfirst-{}", mode.replace('+', "-"));
        let (a, b) = (format!("model:{nic}/0"), format!("model:{nic}/1"));
        let out = xconnect(&[
            "--port-a",
            &a,
            "--port-b",
            &b,
            "--tx-first",
            "--rx-mode",
            mode,
            "--duration",
            "0.5",
            "--stats-interval",
            "0",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = format!("{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{said}");
        assert!(stdout.contains(&format!("receive queues {mode} (--rx-mode)")), "{said}");
        assert!(
            stdout.contains("core 0: --tx-first sent 32 frames out of A and 32 out of B"),
            "{said}"
        );
        // Every frame that arrived went out again at once; the 32 of each direction keep going
        // round (0.5 s is many rounds however busy the machine), none is lost.
        for dir in ["A->B", "B->A"] {
            let (rx, tx, drops) = counts(&stdout, dir);
            assert!(rx >= 32, "{dir}: {said}");
            assert_eq!((tx, drops), (rx, 0), "{dir}: {said}");
        }
        for l in stdout.lines().filter(|l| l.contains("frames dropped by the device")) {
            assert!(l.contains(": 0 frames"), "{said}");
        }
    }
}

#[test]
fn a_bad_rx_mode_is_one_line_and_exit_2() {
    let out = xconnect(&["--rx-mode", "spiral"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--rx-mode") && err.contains("cyclic, compressed, striding, striding+compressed"),
        "{err}"
    );
}
