//! Receive-and-drop on one queue of any port, pinned to one CPU, printing the receive rate once a
//! second (`rx-pps: N`, the form `scripts/peers-xdp.sh` reads) until SIGINT/SIGTERM.
//!
//! ```text
//! cargo run --release --example rx-sink -- xdp:veth0 [CPU]
//! ```
//!
//! Exit status, as pktgen's: 2 for a usage mistake (no PORT, a CPU this process may not run on, a
//! spec rawpkt rejects as malformed or out of range: `Error::Spec`, `Error::Config`); 1 for a
//! failure (`Error::Device`, `Error::Memory`, a queue that failed).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rawpkt::tool::env::open; // the model's RAWPKT_MODEL_* settings
use rawpkt::{Burst, Pool, PoolConfig, QueueConfig};

/// An error line and the exit status it goes with.
struct Fail(u8, String);

fn usage(msg: String) -> Fail {
    Fail(2, msg)
}

/// `what: e`, with rawpkt's kind of error deciding whose mistake it is.
fn rawpkt_fail(what: &str, e: rawpkt::Error) -> Fail {
    Fail(if e.is_usage() { 2 } else { 1 }, format!("{what}: {e}"))
}

const HELP: &str = "\
rx-sink: receives and drops what arrives on queue 0 of PORT, printing the receive rate once a
second (`rx-pps: N total N drops N no-buffers N`) until Ctrl-C or SIGTERM, then the totals.

Usage: rx-sink PORT [CPU]

  PORT  a port spec: model:NAME/P, mlx5:NETDEV, verbs:NETDEV, xdp:IFNAME[/QUEUE][,rule=RULE]...
        (the README's port specs)
  CPU   pin the receive loop to this CPU

Exit status: 0 done (also after Ctrl-C); 2 a usage mistake (no PORT, a CPU this process may not
run on, a port spec rawpkt rejects as malformed or out of range); 1 a failure (a missing device or
interface, no permission, no packet memory, a queue that failed). A closed standard output ends
rx-sink by SIGPIPE, quietly, as any Unix filter.";

fn main() -> ExitCode {
    if let Err(Fail(code, msg)) = run() {
        rawpkt::errln!("rx-sink: {msg}");
        return ExitCode::from(code);
    }
    // A closed stdout (`rx-sink PORT | head -1`) stopped the loop as Ctrl-C does.
    match rawpkt::finish_stdout() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            rawpkt::errln!("rx-sink: standard output: {e}");
            ExitCode::from(1)
        }
    }
}

/// CPU ids as ranges, `0-3,8`.
fn ranges(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Pins the calling thread to CPU `arg`, after making sure it is one this process may run on:
/// `core_affinity` hands any id to `CPU_SET`, which panics (and aborts) beyond CPU_SETSIZE.
fn pin(arg: &str) -> Result<(), Fail> {
    let id: usize = arg.parse().map_err(|_| usage(format!("CPU {arg:?} is not a number")))?;
    let cpus =
        core_affinity::get_core_ids().ok_or_else(|| Fail(1, "cannot read the CPUs this process may run on".into()))?;
    let mut ids: Vec<usize> = cpus.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    if !ids.contains(&id) {
        return Err(usage(format!(
            "CPU {id} is not one this process may run on (CPUs {})",
            ranges(&ids)
        )));
    }
    if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
        return Err(Fail(1, format!("cannot pin to CPU {id}")));
    }
    Ok(())
}

fn run() -> Result<(), Fail> {
    let mut args = std::env::args().skip(1);
    let usage_line = || usage("usage: rx-sink PORT [CPU]".into());
    let spec = args.next().ok_or_else(usage_line)?;
    if spec == "--help" || spec == "-h" {
        rawpkt::outln!("{HELP}");
        return Ok(());
    }
    if spec.starts_with('-') {
        return Err(usage(format!(
            "unknown option {spec:?}; usage: rx-sink PORT [CPU] (--help says more)"
        )));
    }
    let cpu = args.next();
    if args.next().is_some() {
        return Err(usage_line());
    }
    if let Some(cpu) = cpu {
        pin(&cpu)?;
    }
    let stop = rawpkt::stop_flag();
    let port = open(&spec).map_err(|e| rawpkt_fail(&rawpkt::spec::echo(&spec).to_string(), e))?;
    rawpkt::errln!("rx-sink: {}", port.description());
    let pool = Pool::new(PoolConfig {
        buffers: 16384,
        ..PoolConfig::default()
    })
    .map_err(|e| rawpkt_fail("packet pool", e))?;
    let q = QueueConfig {
        size: 4096,
        ..QueueConfig::default()
    };
    let mut rx = port.rx_queue(0, &pool, &q).map_err(|e| rawpkt_fail(&spec, e))?;
    let mut burst = Burst::new(&pool, 64);
    let (mut last, mut last_n) = (Instant::now(), 0u64);
    let mut idle = 0u32;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if rx.rx_burst(&mut burst).map_err(|e| Fail(1, format!("{spec}: {e}")))? > 0 {
            burst.clear();
            idle = 0;
        } else {
            // Empty for a while: sleep in the kernel rather than spin (the NAPI thread that
            // fills our ring may share this CPU).
            idle += 1;
            if idle >= 16 {
                rx.wait(Duration::from_millis(100));
            }
        }
        let now = Instant::now();
        if now - last >= Duration::from_secs(1) {
            let s = rx.stats();
            let pps = (s.packets - last_n) as f64 / (now - last).as_secs_f64();
            rawpkt::outln!(
                "rx-pps: {pps:.0} total {} drops {} no-buffers {}",
                s.packets,
                s.drops,
                s.no_buffers
            );
            (last, last_n) = (now, s.packets);
        }
    }
    let s = rx.stats();
    rawpkt::outln!("total {} bytes {} drops {}", s.packets, s.bytes, s.drops);
    Ok(())
}
