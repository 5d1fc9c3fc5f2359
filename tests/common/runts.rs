//! Frames for the runt tests, shared by every backend's: 10 % runts of 14 to 59 bytes, which
//! must arrive padded with zeros to 60 (as a MAC pads them), and 2.5 % frames shorter than an
//! Ethernet header, which no backend can send: each must cost itself only, counted as a drop.

use std::rc::Rc;
use std::time::{Duration, Instant};

use rawpkt::{Burst, Pool, RxQueue, TxQueue};

/// Length of frame `i`.
pub fn len_of(i: u64) -> usize {
    match i % 40 {
        17 => (i / 40 % 14) as usize,
        3 | 7 | 23 | 27 => 14 + (i * 7 % 46) as usize,
        _ => 60 + (i * 37 % 1000) as usize,
    }
}

/// Frame `i` as sent: to `dst`, EtherType 0x88b5, then bytes that depend on `i` (its sequence
/// number at bytes 14..22 where it fits), none of them zero, so that padding shows.
pub fn frame(i: u64, dst: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 60.max(len_of(i))];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x0b, 0x0b]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    for (k, b) in f[14..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8) | 1;
    }
    f[14..22].copy_from_slice(&i.to_be_bytes());
    f.truncate(len_of(i));
    f
}

/// Frame `i` as it must arrive: padded with zeros to 60 bytes.
pub fn arrived(i: u64, dst: [u8; 6]) -> Vec<u8> {
    let mut f = frame(i, dst);
    f.resize(f.len().max(60), 0);
    f
}

/// Sends frames 0..n on `tx` (at most 128 in flight), calling `step` between bursts, and checks
/// what `rx` receives: every frame of 14 bytes or more, in order, runts padded; every shorter one
/// counted as one drop and nothing else lost. Leaves nothing in flight.
pub fn send_runts(
    tx: &mut dyn TxQueue,
    rx: &mut dyn RxQueue,
    pool: &Rc<Pool>,
    dst: [u8; 6],
    n: u64,
    mut step: impl FnMut(),
) {
    let sendable = |i: u64| len_of(i) >= 14;
    let mut expect = (0..n).filter(|&i| sendable(i));
    let want = (0..n).filter(|&i| sendable(i)).count() as u64;
    let (mut out, mut got) = (Burst::new(pool, 32), Burst::new(pool, 64));
    let (mut sent, mut sent_sendable, mut received) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    while received < want {
        assert!(
            Instant::now() < deadline,
            "stuck: sent {sent}, received {received} of {want}"
        );
        while sent < n && out.room() > 0 && sent_sendable - received < 128 {
            assert!(out.push_copy(&frame(sent, dst)));
            sent_sendable += u64::from(sendable(sent));
            sent += 1;
        }
        if out.is_empty() {
            tx.reclaim().unwrap();
        } else {
            tx.tx_burst(&mut out).unwrap();
        }
        step();
        rx.rx_burst(&mut got).unwrap();
        for k in 0..got.len() {
            let i = expect.next().expect("more frames than sent");
            assert_eq!(
                got.data(k),
                &arrived(i, dst)[..],
                "frame {i} ({} bytes sent)",
                len_of(i)
            );
            received += 1;
        }
        got.clear();
    }
    let until = Instant::now() + Duration::from_secs(10);
    while tx.in_flight() > 0 && Instant::now() < until {
        step();
        tx.reclaim().unwrap();
    }
    assert_eq!(tx.in_flight(), 0, "completions missing");
    let runts = (0..n).filter(|&i| (14..60).contains(&len_of(i))).count();
    assert!(runts as u64 >= n / 10, "{runts} runts");
    assert_eq!(tx.stats().drops, n - want, "one drop per frame shorter than 14 bytes");
    assert_eq!(tx.stats().packets, want);
    assert_eq!(tx.stats().errors.total(), 0);
    assert_eq!(rx.stats().packets, want);
    let bytes: u64 = (0..n).filter(|&i| sendable(i)).map(|i| len_of(i).max(60) as u64).sum();
    assert_eq!(rx.stats().bytes, bytes, "receiver's bytes: runts count 60");
}
