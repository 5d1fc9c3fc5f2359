//! One pool and one queue pair per pinned thread: the shape of every rawpkt program that uses
//! more than one core. Each worker pins itself to a CPU of its own, builds its own pool (a pool
//! is not `Send`), and moves numbered frames over its own model NIC pair, checking each one.
//!
//! On a real port the ports are opened once, with `PortOptions::rx_queues(n)` so that RSS spreads
//! the traffic over n receive queues, and worker `i` takes queue `i` of each (`Port` is `Sync`).
//!
//! `cargo run --release --example multicore [WORKERS] [FRAMES_EACH]`

use rawpkt::{cpu, open, Burst, Pool, PoolConfig, QueueConfig};

const RING: u32 = 4096;
const WINDOW: u64 = RING as u64 / 2;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multicore: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u64| -> Result<u64, String> {
        std::env::args()
            .nth(i)
            .map_or(Ok(default), |v| v.parse().map_err(|_| format!("`{v}` is not a number")))
    };
    let workers = arg(1, 2)? as usize;
    let frames = arg(2, 200_000)?;
    let cpus = cpu::allowed();
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let cpu = cpus.get(w % cpus.len().max(1)).copied();
                s.spawn(move || worker(w, cpu, frames).map_err(|e| format!("worker {w}: {e}")))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    let mut total = 0;
    for r in results {
        total += r?;
    }
    println!("{workers} workers, {total} frames received in order, none lost");
    Ok(())
}

/// Sends `frames` numbered frames from port 0 to port 1 of the model NIC `worker<w>`; returns
/// how many arrived, all of them in order.
fn worker(w: usize, cpu: Option<usize>, frames: u64) -> Result<u64, Box<dyn std::error::Error>> {
    if let Some(c) = cpu {
        if !cpu::pin(c) {
            eprintln!("worker {w}: could not pin to CPU {c}; running unpinned");
        }
    }
    let (a, b) = (
        open(&format!("model:worker{w}/0"))?,
        open(&format!("model:worker{w}/1"))?,
    );
    let q = QueueConfig::default().size(RING);
    let pool = Pool::new(PoolConfig::default().buffers(4 * RING))?;
    let (mut tx, mut rx) = (a.tx_queue(0, &pool, &q)?, b.rx_queue(0, &pool, &q)?);
    let (mut out, mut got) = (Burst::new(&pool, 32), Burst::new(&pool, 32));
    let (mut sent, mut received) = (0u64, 0u64);
    while received < frames {
        while sent < frames && sent - received < WINDOW && out.room() > 0 {
            out.alloc(1, 60);
            let f = out.data_mut(out.len() - 1);
            f[..14].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, w as u8, 0x88, 0xb5]);
            f[14..22].copy_from_slice(&sent.to_be_bytes());
            sent += 1;
        }
        tx.tx_burst(&mut out)?;
        while rx.rx_burst(&mut got)? > 0 {
            for i in 0..got.len() {
                let seq = u64::from_be_bytes(got.data(i)[14..22].try_into()?);
                if seq != received {
                    return Err(format!("frame {received} expected, frame {seq} arrived").into());
                }
                received += 1;
            }
            got.clear();
        }
    }
    if b.device_drops() != Some(0) {
        return Err(format!("the device dropped {:?} frames", b.device_drops()).into());
    }
    Ok(received)
}
