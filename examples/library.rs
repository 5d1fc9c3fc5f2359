//! The first program: 10⁶ numbered frames from one port of the model NIC to the other, every one
//! of them checked on arrival, and what the device dropped counted. Exits 1 on any loss, so that
//! it can be run as a test of the machine it runs on (as the README's snippet, which it mirrors).
//!
//! It loses nothing however slowly either side runs because the sender never has more frames on
//! the way than the receive ring holds (`WINDOW`), and the receiver drains its queue before
//! sending more: the two rules a receive loop needs on real hardware too.
//!
//! `cargo run --release --example library [FRAMES]`

use rawpkt::{open, Burst, Pool, PoolConfig, QueueConfig};

/// Receive descriptors: what may be on the way at once.
const RX_RING: u32 = 4096;
/// Frames sent and not yet received, at most: half the ring, so that a late refill never leaves
/// an arriving frame without a buffer.
const WINDOW: u64 = RX_RING as u64 / 2;
const BURST: usize = 32;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("library: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let total: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse().map_err(|_| format!("FRAMES: `{n}` is not a number"))?,
        None => 1_000_000,
    };
    let a = open("model:library/0")?; // two model ports, back to back
    let b = open("model:library/1")?;
    let q = QueueConfig::default().size(RX_RING);
    // One pool per queue here; a loop that forwards would share one (zero-copy).
    let tx_pool = Pool::new(PoolConfig::default().buffers(2 * RX_RING))?;
    let rx_pool = Pool::new(PoolConfig::default().buffers(2 * RX_RING))?;
    let mut tx = a.tx_queue(0, &tx_pool, &q)?;
    let mut rx = b.rx_queue(0, &rx_pool, &q)?;
    let (mut out, mut got) = (Burst::new(&tx_pool, BURST), Burst::new(&rx_pool, BURST));

    let (mut sent, mut received) = (0u64, 0u64);
    while received < total {
        // Send while the window has room: fresh 60-byte frames, each numbered.
        let want = (total - sent).min(WINDOW - (sent - received)).min(out.room() as u64) as usize;
        let first = out.len();
        out.alloc(want, 60);
        for i in first..out.len() {
            let seq = sent + (i - first) as u64;
            frame(out.data_mut(i), seq);
        }
        let queued = out.len() - first;
        sent += queued as u64;
        tx.tx_burst(&mut out)?; // what did not fit stays in `out`, sent next time round
                                // Drain: every burst until the queue is empty.
        loop {
            let n = rx.rx_burst(&mut got)?;
            for i in 0..n {
                let seq = u64::from_be_bytes(got.data(i)[14..22].try_into()?);
                if seq != received {
                    return Err(format!("frame {received} expected, frame {seq} arrived").into());
                }
                received += 1;
            }
            got.clear(); // buffers back to the pool
            if n == 0 {
                break;
            }
        }
    }
    let drops = b.device_drops().unwrap_or(0);
    println!(
        "sent {sent}, received {received} in order, device drops {drops}\ntx {:?}\nrx {:?}",
        tx.stats(),
        rx.stats()
    );
    if received != sent || drops != 0 || rx.stats().drops != 0 {
        return Err("frames were lost".into());
    }
    Ok(())
}

/// Frame `seq`: broadcast, from a local MAC, EtherType 0x88b5 (IEEE local experimental), the
/// sequence number after the header.
fn frame(f: &mut [u8], seq: u64) {
    f[..14].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f[14..22].copy_from_slice(&seq.to_be_bytes());
}
