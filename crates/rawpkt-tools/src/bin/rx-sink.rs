//! Receive-and-drop on one queue of any port, pinned to one CPU, printing the receive rate once a
//! second (`rx-pps: N`, the form `scripts/peers-xdp.sh` reads) until SIGINT/SIGTERM.
//!
//! ```text
//! cargo run --release --bin rx-sink -- xdp:veth0 [CPU]
//! ```
//!
//! Errors and exit status are the tools' (`rawpkt_tools`): one line, 2 for a usage mistake (no
//! PORT, a CPU this process may not run on, a spec rawpkt rejects), 1 for a failure.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rawpkt::{Burst, Pool, PoolConfig, QueueConfig};
use rawpkt_tools::env::open; // the model's RAWPKT_MODEL_* settings
use rawpkt_tools::{self as tool, cpu, Fail};

const HELP: &str = "\
rx-sink: receives and drops what arrives on queue 0 of PORT, printing the receive rate once a
second (`rx-pps: N total N drops N no-buffers N`) until Ctrl-C or SIGTERM, then the totals.

Usage: rx-sink PORT [CPU]

  PORT  a port spec: model:NAME/P, mlx5:NETDEV, verbs:NETDEV, xdp:IFNAME[/QUEUE][,rule=RULE]...
        (the README's port specs)
  CPU   pin the receive loop to this CPU
";

fn main() -> ExitCode {
    tool::log::init();
    tool::finish("rx-sink", run())
}

/// Pins the calling thread to CPU `arg`, one this process may run on.
fn pin(arg: &str) -> Result<(), Fail> {
    let id: usize = arg
        .parse()
        .map_err(|_| Fail::Usage(format!("CPU {arg:?} is not a number")))?;
    let ids = cpu::allowed();
    if !ids.contains(&id) {
        let may = cpu::ranges(&ids);
        return Err(Fail::Usage(format!(
            "CPU {id} is not one this process may run on (CPUs {may})"
        )));
    }
    if !cpu::pin(id) {
        return Err(Fail::Runtime(format!("cannot pin to CPU {id}")));
    }
    Ok(())
}

fn run() -> Result<(), Fail> {
    let mut args = std::env::args().skip(1);
    let usage_line = || Fail::Usage("usage: rx-sink PORT [CPU]".into());
    let spec = args.next().ok_or_else(usage_line)?;
    if spec == "--help" || spec == "-h" {
        let rule = tool::fail::exit_status("rx-sink", "");
        rawpkt_sys::outln!("{HELP}\n{rule}");
        return Ok(());
    }
    if spec.starts_with('-') {
        return Err(Fail::Usage(format!(
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
    let stop = rawpkt_sys::signal::stop_flag();
    let port = open(&spec).map_err(|e| Fail::rawpkt(rawpkt_wire::text::echo(&spec), e))?;
    rawpkt_sys::errln!("rx-sink: {}", port.description());
    let pool = Pool::new(PoolConfig::default().buffers(16384)).map_err(|e| Fail::rawpkt("packet pool", e))?;
    let q = QueueConfig::default().size(4096);
    let mut rx = port.rx_queue(0, &pool, &q).map_err(|e| Fail::rawpkt(&spec, e))?;
    let mut burst = Burst::new(&pool, 64);
    let (mut last, mut last_n, mut idle) = (Instant::now(), 0u64, 0u32);
    while !stop.load(Ordering::Relaxed) {
        if rx
            .rx_burst(&mut burst)
            .map_err(|e| Fail::Runtime(format!("{spec}: {e}")))?
            > 0
        {
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
            let (n, d, nb) = (s.packets, s.drops, s.no_buffers);
            rawpkt_sys::outln!("rx-pps: {pps:.0} total {n} drops {d} no-buffers {nb}");
            (last, last_n) = (now, s.packets);
        }
    }
    let s = rx.stats();
    rawpkt_sys::outln!("total {} bytes {} drops {}", s.packets, s.bytes, s.drops);
    Ok(())
}
