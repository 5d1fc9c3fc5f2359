//! The README's library example, compiled and run so that it stays true.

use rawpkt::{open, Burst, Pool, PoolConfig, QueueConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = open("model:demo/0")?; // two model ports, back to back
    let b = open("model:demo/1")?;
    let pool = Pool::new(PoolConfig::default())?; // one per core
    let mut tx = a.tx_queue(0, &pool, &QueueConfig::default())?;
    let mut rx = b.rx_queue(0, &pool, &QueueConfig::default())?;
    let (mut out, mut got) = (Burst::new(&pool, 32), Burst::new(&pool, 32));
    let mut received = 0;
    while received < 100_000 {
        out.alloc(out.room(), 60); // fresh 60-byte frames
        for i in 0..out.len() {
            out.data_mut(i)[..14].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
        }
        tx.tx_burst(&mut out)?; // what did not fit stays in `out`
        received += rx.rx_burst(&mut got)?;
        got.clear(); // buffers back to the pool
    }
    println!("tx {:?}\nrx {:?}", tx.stats(), rx.stats());
    Ok(())
}
