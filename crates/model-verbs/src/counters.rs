//! `RAWPKT_MODEL_COUNTERS=FILE`: the model's port counters, kept current in a file while the
//! process runs, for a test that drives a program it did not write (dpdk-testpmd) and compares
//! that program's own counters with the device's.
//!
//! One line per device, `mlx5_0 tx_frames=N tx_bytes=N rx_frames=N rx_bytes=N
//! rx_out_of_buffer=N rx_unclaimed=N rx_steer_missed=N rx_wq_error=N tx_error_cqes=N
//! rx_error_cqes=N`: what the port sent on its wire, wrote into receive queues, dropped for want
//! of a posted buffer (the `out_of_buffer` the PMD reports as `imissed`), left to Linux, and
//! completed with an error. A library thread rewrites the file (aside and renamed over, never
//! half written) within 10 ms of a change, and once more when the process exits normally.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::global::{global, DEVS};

static PATH: OnceLock<PathBuf> = OnceLock::new();

/// The file's text now.
fn text() -> String {
    let Ok(g) = global() else { return String::new() };
    let mut s = String::new();
    for (port, d) in DEVS.iter().enumerate() {
        let c = g.nic.port_counters(port);
        let _ = writeln!(
            s,
            "{} tx_frames={} tx_bytes={} rx_frames={} rx_bytes={} rx_out_of_buffer={} rx_unclaimed={} \
             rx_steer_missed={} rx_wq_error={} tx_error_cqes={} rx_error_cqes={}",
            d.ibdev,
            c.tx_frames,
            c.tx_bytes,
            c.rx_frames,
            c.rx_bytes,
            c.rx_out_of_buffer,
            c.rx_unclaimed,
            c.rx_steer_missed,
            c.rx_wq_error,
            c.tx_error_cqes,
            c.rx_error_cqes
        );
    }
    s
}

fn write(path: &std::path::Path, s: &str) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, s)
        .and_then(|()| std::fs::rename(&tmp, path))
        .is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Starts the writer when `RAWPKT_MODEL_COUNTERS` is set (once, after the model is made).
pub(crate) fn start_from_env() {
    let Some(p) = std::env::var_os("RAWPKT_MODEL_COUNTERS") else {
        return;
    };
    let path = PATH.get_or_init(|| PathBuf::from(p)).clone();
    let spawned = std::thread::Builder::new()
        .name("model-counters".into())
        .spawn(move || {
            let mut last = String::new();
            loop {
                let now = text();
                if now != last && !now.is_empty() {
                    write(&path, &now);
                    last = now;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    if let Err(e) = spawned {
        eprintln!("rawpkt model library: RAWPKT_MODEL_COUNTERS: no thread: {e}");
        return;
    }
    // SAFETY: registering a plain extern "C" fn with no arguments; it runs at normal exit.
    unsafe { libc::atexit(write_at_exit) };
}

extern "C" fn write_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(p) = PATH.get() {
            write(p, &text());
        }
    });
}
