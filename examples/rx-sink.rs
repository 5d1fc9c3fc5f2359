//! Receive-and-drop on one queue of any port, pinned to one CPU, printing the receive rate once a
//! second (`rx-pps: N`, the form `scripts/peers-xdp.sh` reads) until SIGINT/SIGTERM.
//!
//! ```text
//! cargo run --release --example rx-sink -- xdp:veth0 [CPU]
//! ```

use std::time::{Duration, Instant};

use rawpkt::{open, Burst, Pool, PoolConfig, QueueConfig};

fn main() {
    if let Err(e) = run() {
        eprintln!("rx-sink: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let spec = args.next().ok_or("usage: rx-sink PORT [CPU]")?;
    if let Some(cpu) = args.next() {
        let id: usize = cpu.parse().map_err(|_| format!("CPU {cpu:?} is not a number"))?;
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            return Err(format!("cannot pin to CPU {id}"));
        }
    }
    let stop = rawpkt::stop_flag();
    let port = open(&spec).map_err(|e| e.to_string())?;
    eprintln!("rx-sink: {}", port.description());
    let pool = Pool::new(PoolConfig {
        buffers: 16384,
        ..PoolConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let q = QueueConfig {
        size: 4096,
        ..QueueConfig::default()
    };
    let mut rx = port.rx_queue(0, &pool, &q).map_err(|e| e.to_string())?;
    let mut burst = Burst::new(&pool, 64);
    let (mut last, mut last_n) = (Instant::now(), 0u64);
    let mut idle = 0u32;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if rx.rx_burst(&mut burst).map_err(|e| e.to_string())? > 0 {
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
            println!(
                "rx-pps: {pps:.0} total {} drops {} no-buffers {}",
                s.packets, s.drops, s.no_buffers
            );
            (last, last_n) = (now, s.packets);
        }
    }
    let s = rx.stats();
    println!("total {} bytes {} drops {}", s.packets, s.bytes, s.drops);
    Ok(())
}
