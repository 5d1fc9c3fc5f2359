//! Numbered frames from a send queue to a receive queue, each checked byte for byte on
//! arrival: the loop every step of the self-test runs. Never more frames on the way than a
//! window below the receive ring, so that a slow receiver (a busy machine) loses nothing.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rawpkt::{flags, Burst, Pool, RxQueue, TxQueue};

/// EtherType of the test frames: IEEE local experimental 1, which rawpkt's default rules give
/// to the port (and Linux never answers).
pub const ETHERTYPE: u16 = 0x88b5;
/// Bytes of a frame before its payload: Ethernet header, sequence number, run id.
pub const HEAD: usize = 14 + 8 + 2;

/// Frame `seq` of run `run` from `src` to `dst`, `len` bytes (at least [`HEAD`]), into `out`.
pub fn fill(out: &mut [u8], dst: [u8; 6], src: [u8; 6], run: u16, seq: u64) {
    out[..6].copy_from_slice(&dst);
    out[6..12].copy_from_slice(&src);
    out[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    out[14..22].copy_from_slice(&seq.to_be_bytes());
    out[22..24].copy_from_slice(&run.to_be_bytes());
    // splitmix64 of (run, seq): every frame's payload differs, a misplaced buffer shows.
    let mut x = seq ^ (u64::from(run) << 48) ^ 0x9e37_79b9_7f4a_7c15;
    for chunk in out[HEAD..].chunks_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}

/// How long a run waits for frames after the sender, having dropped some, has nothing in
/// flight, before it counts the missing ones lost.
const LOSS_GRACE: Duration = Duration::from_millis(500);

/// One run's plan.
pub struct Plan<'a> {
    pub frames: u64,
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub run: u16,
    /// The length of frame `seq`.
    pub len: &'a dyn Fn(u64) -> usize,
    /// Most frames sent and not yet received (or known lost).
    pub window: u64,
    /// Give up after this long without a frame arriving.
    pub idle: Duration,
    /// Record receive timestamps, with the reference clock read after each receive burst.
    pub clock: Option<&'a dyn Fn() -> Option<u64>>,
    /// Called before each send burst with the frames sent so far: the most frames that burst
    /// may carry (a step injects a fault into a one-frame burst this way).
    pub before_send: &'a mut dyn FnMut(&mut dyn TxQueue, u64) -> usize,
}

/// What a run saw.
#[derive(Default)]
pub struct Outcome {
    pub sent: u64,
    pub received: u64,
    pub bytes_compared: u64,
    pub mismatches: u64,
    /// Frames that came earlier than a frame sent before them, or twice.
    pub out_of_order: u64,
    /// Frames of another run or not ours at all.
    pub foreign: u64,
    /// Sequence numbers skipped (frames lost).
    pub lost: u64,
    /// The first mismatch, described.
    pub first_mismatch: Option<String>,
    /// Why the run ended early.
    pub error: Option<String>,
    /// (timestamp, reference clock after the burst) per frame that had one.
    pub stamps: Vec<(u64, Option<u64>)>,
    /// The reference clock before the first frame was sent.
    pub clock_start: Option<u64>,
    pub frames_timestamped: u64,
    pub elapsed: Duration,
}

/// Runs `plan` from `tx` (over `txpool`) to `rx` (over `rxpool`).
pub fn run(
    plan: &mut Plan<'_>,
    tx: &mut dyn TxQueue,
    txpool: &std::rc::Rc<Pool>,
    rx: &mut dyn RxQueue,
    rxpool: &std::rc::Rc<Pool>,
) -> Outcome {
    let stop = rawpkt_sys::signal::stop_flag();
    let t0 = Instant::now();
    let mut o = Outcome {
        clock_start: plan.clock.and_then(|c| c()),
        ..Outcome::default()
    };
    let mut out = Burst::new(txpool, 32);
    let mut got = Burst::new(rxpool, 64);
    let mut expect = vec![0u8; 65536];
    let mut scratch = vec![0u8; 65536];
    let mut next: u64 = 0; // the next sequence number expected
    let mut last_progress = Instant::now();
    let room = txpool.data_room() as usize;
    let tx_drops_at_start = tx.stats().drops;
    while next < plan.frames {
        if stop.load(Ordering::Relaxed) {
            o.error = Some("stopped (signal)".into());
            break;
        }
        // Send while the window has room.
        let mut cap = usize::MAX;
        while o.sent < plan.frames && o.sent - next < plan.window && out.room() > 0 && out.len() < cap {
            if out.is_empty() {
                cap = (plan.before_send)(tx, o.sent).max(1);
            }
            let len = (plan.len)(o.sent);
            if len <= room {
                out.alloc(1, len);
                let i = out.len() - 1;
                fill(out.data_mut(i), plan.dst, plan.src, plan.run, o.sent);
            } else {
                fill(&mut scratch[..len], plan.dst, plan.src, plan.run, o.sent);
                if !out.push_frame(&scratch[..len]) {
                    break; // the pool is short: send what there is first
                }
            }
            o.sent += 1;
        }
        match tx.tx_burst(&mut out) {
            Ok(_) => {}
            Err(e) => {
                o.error = Some(format!("send queue: {e}"));
                break;
            }
        }
        // Drain the receive queue.
        loop {
            match rx.rx_burst(&mut got) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    o.error = Some(format!("receive queue: {e}"));
                    break;
                }
            }
            let now_ref = plan.clock.and_then(|c| c());
            for i in 0..got.len() {
                let p = *got.packet(i);
                let len = p.len();
                let data: &[u8] = if p.is_chained() {
                    let n = got.copy_frame(i, &mut scratch).unwrap_or(0);
                    &scratch[..n]
                } else {
                    got.data(i)
                };
                if data.len() < HEAD
                    || data[12..14] != ETHERTYPE.to_be_bytes()
                    || data[22..24] != plan.run.to_be_bytes()
                {
                    o.foreign += 1;
                    continue;
                }
                let seq = u64::from_be_bytes(data[14..22].try_into().unwrap_or_default());
                if seq < next || seq >= o.sent {
                    o.out_of_order += 1;
                    continue;
                }
                if seq > next {
                    o.lost += seq - next;
                }
                next = seq + 1;
                o.received += 1;
                let want = (plan.len)(seq);
                fill(&mut expect[..want], plan.dst, plan.src, plan.run, seq);
                o.bytes_compared += len as u64;
                if data != &expect[..want] {
                    o.mismatches += 1;
                    if o.first_mismatch.is_none() {
                        let at = data.iter().zip(&expect[..want]).position(|(a, b)| a != b);
                        o.first_mismatch = Some(format!(
                            "frame {seq}: {} bytes, expected {want}; first difference at byte {}",
                            data.len(),
                            at.map_or("-".into(), |a| a.to_string())
                        ));
                    }
                }
                if plan.clock.is_some() && p.flags() & flags::TIMESTAMP != 0 {
                    o.frames_timestamped += 1;
                    if o.stamps.len() < 1 << 20 {
                        o.stamps.push((p.timestamp(), now_ref));
                    }
                }
            }
            got.clear();
            last_progress = Instant::now();
        }
        if o.error.is_some() {
            break;
        }
        // Frames the sender dropped (a queue reset after a completion error drops what was in
        // flight) never come: once nothing is in flight and nothing arrives, what is missing
        // is lost, and the window moves on.
        if next < o.sent
            && tx.stats().drops > tx_drops_at_start
            && tx.in_flight() == 0
            && last_progress.elapsed() > LOSS_GRACE
        {
            o.lost += o.sent - next;
            next = o.sent;
            last_progress = Instant::now();
        }
        if last_progress.elapsed() > plan.idle {
            // What is still on the way is lost.
            o.lost += o.sent - next;
            o.error = Some(format!(
                "no frame arrived for {:?} ({} of {} received)",
                plan.idle, o.received, o.sent
            ));
            break;
        }
        if out.is_empty() && o.sent - next >= plan.window {
            std::hint::spin_loop();
        }
    }
    // Let the sender collect its completions.
    let t = Instant::now();
    while tx.in_flight() > 0 && t.elapsed() < Duration::from_secs(2) {
        if tx.reclaim().is_err() {
            break;
        }
    }
    o.elapsed = t0.elapsed();
    o
}
